"""The report `make run` writes (notebook/report.py) and the first line of every notebook (notebook/profile.py)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
import pytest

from altgrad_lib.notebook import profile, report

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))
import sweep   # noqa: E402  tools/sweep.py: a repository tool, not library code


def _small_notebook(path: Path, *, headline: bool = True, fail: bool = False) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# t\n\n**Question.** Is `2 + 2` *four*\non this kernel?\n\nMore text."),
                nbformat.v4.new_code_cell("import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
                                          "from IPython.display import display\n"
                                          "fig, ax = plt.subplots(); ax.plot([0, 1], [0, 1]); display(fig)")]
    if fail:
        nb.cells.append(nbformat.v4.new_code_cell("raise RuntimeError('boom')"))
    cell = nbformat.v4.new_code_cell("x = 2 + 2\nprint(f'answer {x} (computed)')")
    if headline:
        cell.metadata["tags"] = [report.HEADLINE_TAG]
    nb.cells.append(cell)
    nbformat.write(nb, path)
    return path


def test_report_of_executed_notebooks_lists_question_computed_headline_and_wall_time(tmp_path):
    """Real kernels (papermill through the sweep's own run_job): the headline is what the tagged cell printed."""
    params = tmp_path / "p.yaml"
    params.write_text("{}\n")
    jobs = [sweep.Job(_small_notebook(tmp_path / f"{name}.ipynb", headline=name != "plain", fail=name == "bad"),
                      params, tmp_path / "out" / name / "cpu.ipynb") for name in ("good", "plain", "bad")]
    entries = []
    for job in jobs:
        status, error = sweep.run_job(job, "python3")
        entries.append(report.ReportEntry(f"{job.notebook.stem}[cpu]", job.output, status, None, error))
    assert [e.status for e in entries] == ["ok", "ok", "failed"]
    index = report.build_report(entries, tmp_path / "report", title="t")
    text = index.read_text()
    rows = text.split("<tr>")[2:]                  # header row first
    assert len(rows) == 3
    good, plain, bad = rows
    assert "Is <code>2 + 2</code> <em>four</em> on this kernel?" in good and "More text" not in good
    assert "answer 4 (computed)" in good           # the kernel's output: the source says 2 + 2
    wall = float(re.search(r'class="num">([0-9.]+)<', good).group(1))
    assert wall == pytest.approx(nbformat.read(jobs[0].output, 4).metadata.papermill.duration, abs=0.051)
    assert 'no headline (the notebook has no cell tagged "headline")' in plain
    assert "failed: PapermillExecutionError" in bad and "answer" not in bad
    page = tmp_path / "report" / "good" / "cpu.html"
    assert 'href="good/cpu.html"' in good and page.exists()
    assert "data:image/png;base64," in page.read_text()    # the figure travels inside the page
    assert "3 run(s) of 3 notebook(s), 1 failed" in text
    assert "the sweep's wall time was not measured" in text


def test_report_of_a_notebook_that_never_ran_names_it_without_a_link(tmp_path):
    entry = report.ReportEntry("x[cpu]", tmp_path / "missing.ipynb", "failed", 1.25, "DeadKernelError: died")
    text = report.build_report([entry], tmp_path / "r").read_text()
    assert "<td>x[cpu]</td>" in text and "failed: DeadKernelError: died" in text and ">1.2<" in text


def test_a_notebooks_runs_share_one_question_and_the_sweeps_wall_time_is_not_their_sum(tmp_path):
    """01 runs once per format: one question, its runs as rows under it; the runs overlap, so the page heads with
    the sweep's wall time and labels the sum."""
    nb = _small_notebook(tmp_path / "01_x.ipynb")
    other = _small_notebook(tmp_path / "02_y.ipynb")
    entries = [report.ReportEntry("01_x[E4M3]", nb, "ok", 10.0), report.ReportEntry("02_y[cpu]", other, "ok", 30.0),
               report.ReportEntry("01_x[E5M2]", nb, "ok", 20.0)]
    text = report.build_report(entries, tmp_path / "r", wall_seconds=35.0).read_text()
    rows = text.split("<tr>")[2:]
    assert [re.search(r"<td>(?:<a [^>]+>)?([^<]+)", r).group(1) for r in rows] == ["01_x[E4M3]", "01_x[E5M2]",
                                                                                    "02_y[cpu]"]
    assert text.count("on this kernel?") == 2                        # once per notebook, not per run
    assert '<td rowspan="2">Is <code>2 + 2</code>' in rows[0] and "on this kernel?" not in rows[1]
    assert "3 run(s) of 2 notebook(s), 0 failed; the sweep took 35.0 s of wall time (its runs' times sum to " \
           "60.0 s: runs overlap)" in text


def test_sweep_ends_with_the_report_path(tmp_path, monkeypatch, capsys):
    nb_dir, params = tmp_path / "notebooks", tmp_path / "params"
    nb_dir.mkdir()
    (params / "02_x").mkdir(parents=True)
    (params / "02_x" / "cpu.yaml").write_text("{}\n")
    _small_notebook(nb_dir / "02_x.ipynb")
    monkeypatch.setattr(sweep, "NOTEBOOK_DIR", nb_dir)
    monkeypatch.setattr(sweep, "PARAMS_DIR", params)
    monkeypatch.setattr(sweep, "ROOT", tmp_path)
    assert sweep.main(["--out", str(tmp_path / "out"), "--workers", "1"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == f"report: {tmp_path / 'outputs' / 'report' / 'index.html'}"
    assert re.search(r"^total [0-9.]+ s$", "\n".join(out), re.M)
    assert "the sweep took" in (tmp_path / "outputs" / "report" / "index.html").read_text()
    assert "answer 4 (computed)" in (tmp_path / "outputs" / "report" / "index.html").read_text()


# ---------------------------------------------------------------------------------------------------------
# the run line


@pytest.fixture
def project(tmp_path):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("seed: int = 0   # help\nlr: float = 1e-3\nfmts: list[str] = ['E4M3']\n")
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell]
    (tmp_path / "notebooks").mkdir()
    nbformat.write(nb, tmp_path / "notebooks" / "02_x.ipynb")
    (tmp_path / "params" / "02_x").mkdir(parents=True)
    (tmp_path / "params" / "02_x" / "cpu.yaml").write_text("lr: 2e-3\nfmts: [E4M3, E5M2]\n")   # YAML: "2e-3" is text
    (tmp_path / "params" / "02_x" / "same.yaml").write_text("seed: 0\n")
    return tmp_path


def test_profile_is_found_by_comparing_the_parameters(project):
    defaults = {"seed": 0, "lr": 1e-3, "fmts": ["E4M3"]}
    assert profile.profile_of("02_x", defaults, project) == "CI defaults = same (params/02_x/same.yaml)"
    assert profile.profile_of("02_x", {"seed": 0, "lr": 0.002, "fmts": ["E4M3", "E5M2"]}, project) == \
        "cpu (params/02_x/cpu.yaml)"
    assert profile.profile_of("02_x", {**defaults, "seed": 1}, project) == "custom parameters"
    assert profile.profile_of("02_x", {**defaults, "extra": 1}, project) == "custom parameters"


def test_run_line_names_profile_seeds_and_code(project, monkeypatch):
    monkeypatch.setattr(profile, "project_root", lambda: project)
    line = profile.run_line("02_x", {"seed": 1, "lr": 1e-3, "fmts": ["E4M3"]}, [0, 1, 2])
    assert line.startswith("profile custom parameters | seeds 0, 1, 2 | code altgrad ")
    assert profile.run_line("02_x", {"seed": 0, "lr": 1e-3, "fmts": ["E4M3"]}, 0).split(" | ")[1] == "seed 0"
    assert "| 3 to 8 seeds from seed 0, added until resolved |" in profile.run_line("02_x", {}, {"min": 3, "max": 8})
    from altgrad_lib.studies.sequential import SeedPlan

    assert "| 2 to 6 seeds from seed 4, added until resolved |" in profile.run_line("02_x", {}, SeedPlan(2, 6, start=4))


def test_code_version_names_the_commit_in_a_checkout():
    import subprocess

    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    if not head:
        pytest.skip("not a git checkout")
    assert re.fullmatch(rf"altgrad [0-9.]+\w*, git {head[:12]}(-dirty)?", profile.code_version())


NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_notebooks_print_the_run_line_first_and_have_a_headline(path):
    nb = nbformat.read(path, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    data = outputs[0].get("data", {})   # a status banner (Markdown) opens with the run line in a code span
    first = (outputs[0].get("text") or data.get("text/markdown") or data.get("text/plain", "")).lstrip("`")
    assert re.match(r"profile .+ \| (seeds? |\d+ to \d+ seeds).+ \| code altgrad ", first), first[:200]
    tagged = [c for c in nb.cells if report.HEADLINE_TAG in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and report.headline_text(nb), path.stem


def test_figures_a_notebook_displays_go_through_the_figure_check(tmp_path):
    """A real kernel: plots.setup() wraps the PNG formatter, so an inline figure, a returned one and display(fig)
    are each checked; the summary names the defective one and what is wrong with it."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "import matplotlib.pyplot as plt\nimport pandas as pd\nfrom IPython.display import display\n"
        "from altgrad_lib.notebook import plots\nfrom altgrad_lib.notebook.figure_check import displayed_summary\n"
        "plots.setup()"),
        nbformat.v4.new_code_cell("plots.bars(pd.Series({'a': 1.0, 'b': 2.0}), 'throughput (tokens/s)', 'good');"),
        nbformat.v4.new_code_cell("fig, ax = plt.subplots()\nax.plot([0, 1], [1, 2])\nax.set_title('bad one')\n"
                                  "display(fig)\nplt.close(fig)"),
        # one figure displayed twice: counted once
        nbformat.v4.new_code_cell("fig, ax = plt.subplots()\nax.plot([0, 1], [1, 2])\n"
                                  "ax.set(title='twice', xlabel='x (m)', ylabel='y (s)')\n"
                                  "display(fig)\ndisplay(fig)\nplt.close(fig)"),
        nbformat.v4.new_code_cell("print(displayed_summary())")]
    src, params = tmp_path / "f.ipynb", tmp_path / "p.yaml"
    nbformat.write(nb, src)
    params.write_text("{}\n")
    status, err = sweep.run_job(sweep.Job(src, params, tmp_path / "out.ipynb"), "python3")
    assert status == "ok", err
    out = nbformat.read(tmp_path / "out.ipynb", 4).cells[-1].outputs[0]["text"]
    assert out.splitlines()[0] == "figure check: 3 figures displayed, 1 with defects:"
    assert out.splitlines()[1].startswith("  bad one: axes 0: x label '' names no unit")


def test_committed_notebooks_end_with_a_clean_figure_check():
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        last = nb.cells[-1]
        assert "displayed_summary()" in last.source and "assert fig_check.endswith" in last.source, path.stem
        text = "".join(o.get("text", "") for o in last.get("outputs", []))
        assert text.startswith("figure check: ") and text.rstrip().endswith("every one passes"), (path.stem, text)


def test_notebook_defaults_read_both_source_forms_without_importing_nbformat(tmp_path):
    """A cell's source is a list of lines (as nbformat writes it) or one string (nbformat 4 allows both); the
    defaults are the same. Importing notebook/profile.py (every notebook kernel does) must not import nbformat: its
    jsonschema import cost each kernel ~2 s (bench/results/run_fixed_costs.md)."""
    import json
    import subprocess
    src = "seed: int = 3   # help\nfmt: str = 'E4M3'\n"
    for source in (src, src.splitlines(keepends=True)):
        cell = {"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": source, "outputs": [],
                "execution_count": None}
        (tmp_path / "n.ipynb").write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4,
                                                      "nbformat_minor": 5}))
        assert profile.notebook_defaults(tmp_path / "n.ipynb") == {"seed": 3, "fmt": "E4M3"}
    code = "import sys, altgrad_lib.notebook.profile; print('nbformat' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
