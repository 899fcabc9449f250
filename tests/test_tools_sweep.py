"""The papermill sweep plans the right notebook x params jobs and names bad profiles clearly."""
from __future__ import annotations

import pytest

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import sweep   # tools/sweep.py: a repository tool, not library code


@pytest.fixture
def fake_project(tmp_path, monkeypatch):
    nb_dir, params = tmp_path / "notebooks", tmp_path / "params"
    nb_dir.mkdir()
    for stem in ("01_formats", "02_bf16_baseline"):
        (nb_dir / f"{stem}.ipynb").write_text("{}")
    (params / "01_formats").mkdir(parents=True)
    (params / "02_bf16_baseline").mkdir(parents=True)
    for fmt in ("e4m3", "e7m0"):
        (params / "01_formats" / f"{fmt}.yaml").write_text(f"fmt: {fmt.upper()}\n")
    (params / "02_bf16_baseline" / "cpu.yaml").write_text("max_steps: 10\n")
    monkeypatch.setattr(sweep, "NOTEBOOK_DIR", nb_dir)
    monkeypatch.setattr(sweep, "PARAMS_DIR", params)
    return tmp_path


def test_formats_notebook_runs_once_per_yaml_others_once_per_profile(fake_project):
    jobs = sweep.plan_jobs("cpu", fake_project / "out")
    assert [j.label for j in jobs] == ["01_formats[e4m3]", "01_formats[e7m0]", "02_bf16_baseline[cpu]"]
    assert jobs[0].output == fake_project / "out" / "01_formats" / "e4m3.ipynb"


def test_missing_profile_names_the_available_ones(fake_project):
    with pytest.raises(SystemExit, match=r"profile 'h100'.*\['cpu'\]"):
        sweep.plan_jobs("h100", fake_project / "out")


def test_unknown_notebook_in_only_is_rejected(fake_project):
    with pytest.raises(SystemExit, match="unknown notebook"):
        sweep.plan_jobs("cpu", fake_project / "out", only=["99_nope"])


def test_repository_params_cover_every_notebook_for_both_profiles():
    jobs = {j.label for j in sweep.plan_jobs("cpu", sweep.ROOT / "outputs" / "notebooks")}
    assert "01_formats[E4M3]" in jobs and "01_formats[E7M0]" in jobs
    for profile in ("cpu", "h100"):
        for nb in sweep.discover_notebooks():
            if nb.stem not in sweep.PER_FORMAT_NOTEBOOKS:
                assert (sweep.PARAMS_DIR / nb.stem / f"{profile}.yaml").exists(), (nb.stem, profile)


@pytest.mark.parametrize("profile", ["cpu", "h100"])
def test_analysis_notebook_runs_last_with_its_profile(profile):
    # 06 analyses a study whose runs can be the ones 02/03 trained (same config -> same run dir): it goes after them
    labels = [j.label for j in sweep.plan_jobs(profile, sweep.ROOT / "outputs" / "notebooks")]
    assert f"06_analysis[{profile}]" in labels
    assert labels.index(f"06_analysis[{profile}]") > max(labels.index(f"{nb}[{profile}]")
                                                        for nb in ("02_bf16_baseline", "03_fp8_baseline"))



def _fake_run_job(job, kernel, nice=0):
    if "e7m0" in job.params_file.name:
        raise RuntimeError("kernel died\ntraceback")        # not caught by run_job: the executor isolates it
    return "ok", ""


def test_sweep_runs_jobs_through_the_executor_and_isolates_a_crash(fake_project, monkeypatch):
    import pandas as pd

    monkeypatch.setattr(sweep, "ROOT", fake_project)
    monkeypatch.setattr(sweep, "run_job", _fake_run_job)
    # one worker: the monkeypatched run_job lives in this process only
    assert sweep.main(["--out", str(fake_project / "out"), "--workers", "1"]) == 1   # one failed -> non-zero exit
    table = pd.read_csv(fake_project / "outputs" / "sweep" / "summary.csv").set_index("params")
    assert table.status.to_dict() == {"params/01_formats/e4m3.yaml": "ok", "params/01_formats/e7m0.yaml": "failed",
                                      "params/02_bf16_baseline/cpu.yaml": "ok"}
    assert table.loc["params/01_formats/e7m0.yaml", "error"] == "RuntimeError: kernel died"


def test_stages_run_per_format_notebooks_side_by_side_and_the_others_alone(fake_project, monkeypatch):
    jobs = sweep.plan_jobs("cpu", fake_project / "out")
    monkeypatch.setenv("ALTGRAD_WORKERS", "2")
    assert [([j.label for j in js], w) for js, w in sweep.stages(jobs, None)] == [
        (["01_formats[e4m3]", "01_formats[e7m0]"], 2), (["02_bf16_baseline[cpu]"], 1)]
    assert [w for _, w in sweep.stages(jobs, 3)] == [3, 3]        # --workers overrides every stage


def test_the_sweep_writes_wall_time_per_notebook(fake_project, monkeypatch):
    import pandas as pd

    monkeypatch.setattr(sweep, "ROOT", fake_project)
    monkeypatch.setattr(sweep, "run_job", lambda job, kernel, nice=0: ("ok", ""))
    assert sweep.main(["--out", str(fake_project / "out"), "--workers", "1"]) == 0
    wall = pd.read_csv(fake_project / "outputs" / "sweep" / "wall.csv")
    assert wall.notebook.tolist() == ["01_formats", "02_bf16_baseline"] and wall.jobs.tolist() == [2, 1]
    assert (wall.wall_s >= 0).all()


def test_cpu_profiles_share_one_model_so_runs_are_trained_once():
    # 03-06 reuse 02's baseline and control (and 06 every run of 02-04) only if the model block is identical
    import yaml

    from altgrad_lib.training.config import NON_RESULT_FIELDS, TrainConfig

    def model(stem):
        d = yaml.safe_load((sweep.PARAMS_DIR / stem / "cpu.yaml").read_text())
        return {k: v for k, v in d.items() if k in TrainConfig.keys() and k not in NON_RESULT_FIELDS and k != "recipe"}

    ref = model("02_bf16_baseline")
    assert ref["max_steps"] >= 300 and ref["device"] == "cpu"
    for stem in ("03_fp8_baseline", "04_exotic_formats", "05_manifold_optimizer"):
        assert model(stem) == ref, stem
    study = yaml.safe_load((sweep.PARAMS_DIR / "studies" / "cpu_formats.yaml").read_text())
    assert study["base"] == "../02_bf16_baseline/cpu.yaml" and not study.get("config")


def test_kernel_log_noise_stays_out_of_the_sweep_output(tmp_path, capfd):
    """A real papermill run: the kernel's own log lines ([IPKernelApp] warnings, 'KeyboardInterrupt caught in
    kernel' at shutdown) do not reach the sweep's output; the cell's output reaches the notebook."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print('cell ran')")]
    src, params = tmp_path / "t.ipynb", tmp_path / "t.yaml"
    nbformat.write(nb, src)
    params.write_text("{}\n")
    status, err = sweep.run_job(sweep.Job(src, params, tmp_path / "out" / "t.ipynb"), "python3")
    captured = capfd.readouterr()
    assert status == "ok", err
    assert "[IPKernelApp]" not in captured.err and "KeyboardInterrupt" not in captured.err, captured.err
    out = nbformat.read(tmp_path / "out" / "t.ipynb", as_version=4)
    assert "cell ran" in out.cells[-1].outputs[0]["text"]


def test_background_stage_only_for_the_per_format_stage_beside_in_process_stages(fake_project, monkeypatch):
    jobs = sweep.plan_jobs("cpu", fake_project / "out")
    monkeypatch.setenv("ALTGRAD_WORKERS", "2")
    plan = sweep.stages(jobs, None)
    assert sweep.background_stage(plan, None, "local") == 0
    assert sweep.background_stage(plan, 2, "local") is None            # --workers: stages one after another
    assert sweep.background_stage(plan, None, "ray") is None
    assert sweep.background_stage(plan[:1], None, "local") is None     # nothing to run beside
    assert sweep.background_stage(plan[1:], None, "local") is None     # no per-format stage
    monkeypatch.setenv("ALTGRAD_WORKERS", "1")                         # 01 in this process: it cannot be reniced
    assert sweep.background_stage(sweep.stages(jobs, None), None, "local") is None


def test_per_format_kernels_run_beside_the_others_at_low_priority(fake_project, monkeypatch):
    """Real kernels: 01's two run in worker processes at nice 19 (their autogroups too, where the machine has them:
    each kernel is a session of its own) while 02 runs in this process at our own priority; every job is recorded
    and each notebook's cell output is complete."""
    import os

    import nbformat
    import pandas as pd

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "Python 3"}  # params need it
    nb.cells = [nbformat.v4.new_code_cell(
        "import os\nprint('nice', os.getpriority(os.PRIO_PROCESS, 0))\n"
        "try:\n"   # "/autogroup-70 nice 0"; some sandboxes have the file but leave it empty
        "    print('autogroup', int(open('/proc/self/autogroup').read().split()[-1]))\n"
        "except (OSError, IndexError, ValueError):\n"
        "    pass")]
    for stem in ("01_formats", "02_bf16_baseline"):
        nbformat.write(nb, fake_project / "notebooks" / f"{stem}.ipynb")
    monkeypatch.setattr(sweep, "ROOT", fake_project)
    monkeypatch.setenv("ALTGRAD_WORKERS", "2")
    assert sweep.main(["--out", str(fake_project / "out")]) == 0
    table = pd.read_csv(fake_project / "outputs" / "sweep" / "summary.csv")   # in plan order, whatever ended first
    assert table.params.tolist() == ["params/01_formats/e4m3.yaml", "params/01_formats/e7m0.yaml",
                                     "params/02_bf16_baseline/cpu.yaml"] and (table.status == "ok").all()
    own = os.getpriority(os.PRIO_PROCESS, 0)

    try:   # where this machine reports autogroups, the kernels must too; an empty file (some sandboxes) is none
        ag = bool(open("/proc/self/autogroup").read().split())
    except OSError:
        ag = False

    def check(path, nice, autogroup):
        lines = nbformat.read(path, as_version=4).cells[-1].outputs[0]["text"].strip().splitlines()
        assert lines[0] == f"nice {nice}"
        if ag:   # elsewhere the kernel's autogroup may not be ours to read or write: only its nice value is checked
            assert lines[1:] == [f"autogroup {autogroup}"]
    # a kernel is a session of its own, so its autogroup starts at the default niceness (0): 01's lower it to 19
    for stem in ("e4m3", "e7m0"):
        check(fake_project / "out" / "01_formats" / f"{stem}.ipynb", max(own, 19), 19)
    check(fake_project / "out" / "02_bf16_baseline" / "cpu.ipynb", own, 0)
    wall = pd.read_csv(fake_project / "outputs" / "sweep" / "wall.csv")
    assert wall.notebook.tolist() == ["01_formats", "02_bf16_baseline"] and wall.jobs.tolist() == [2, 1]
