"""Tests for altgrad_lib.studies.study: expansion and stable run names, the index, reuse and resume after the study
process is killed, a failing run and a diverging run that never stop the others, and the CLI."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import tiny_study_dict

from altgrad_lib.choices import BLOCK_RECIPE_ALIASES, RECIPE_ALIASES
from altgrad_lib.quantize.recipes import canonical_recipe, get_policy
from altgrad_lib.studies.comparison import Comparison
from altgrad_lib.studies.runs import axis_value, machine_key
from altgrad_lib.studies.study import Study, _recipe_names, run_name, run_study
from altgrad_lib.training.config import TrainConfig
from altgrad_lib.training.data import _corpus_slug

ROOT = Path(__file__).resolve().parent.parent
CI_STUDY = ROOT / "params" / "studies" / "ci_formats.yaml"


# ------------------------------------------------------------------------------------------ expansion

def test_ci_study_file_expands_to_2_formats_x_2_seeds():
    s = Study.from_yaml(CI_STUDY)
    pts = s.expand()
    assert [p.axes for p in pts] == ([{"recipe": r, "seed": k} for r in ("hp", "fp8_hybrid") for k in (0, 1)]
                                     + [{"recipe": "hp", "freeze_blocks": True, "seed": k} for k in (0, 1)])
    assert {p.config.n_layer for p in pts} == {1} and s.comparisons[0].spec == {"axis": "recipe", "baseline": "hp"}
    assert s.comparisons[0] == Comparison("recipe", "hp", by_columns=()) and s.comparisons[0].label == "recipe vs hp"
    assert [p.config.freeze_blocks for p in pts] == [False] * 4 + [True] * 2


@pytest.mark.parametrize("path", sorted((ROOT / "params" / "studies").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_study_file_expands_and_its_comparisons_name_study_levels(path):
    s = Study.from_yaml(path)
    pts = s.expand()
    for c in s.comparisons:   # the baseline is a level the index will hold (canonical recipe names, dicts as JSON)
        assert c.baseline in {axis_value(p.config, c.axis) for p in pts}, (path.name, c)


def test_the_readme_study_example_loads_and_expands(tmp_path):
    """README's study YAML, as a user would save it under params/studies/: it loads (its positive control is one of
    its levels), and expands to 4 recipes x 3 seeds plus the control point."""
    import re
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
                 if "positive_controls:" in b)
    s = Study.from_dict(yaml.safe_load(block), base_dir=ROOT / "params" / "studies", out_dir=str(tmp_path / "st"))
    pts = s.expand()
    assert len(pts) == 4 * 3 + 1 and s.positive_controls == ("fmt:E2M1",)
    assert {p.config.max_steps for p in pts} == {300}


def test_run_names_are_stable_and_match_notebook_runs():
    s = Study.from_yaml(CI_STUDY)
    a, b = s.expand(), Study.from_yaml(CI_STUDY).expand()
    assert [p.name for p in a] == [p.name for p in b]
    for p in a:
        plain = TrainConfig.from_dict({**s.base, **p.axes})
        assert p.name == plain.auto_run_name()          # shared with notebooks training the same config
        assert p.config.config_hash() == plain.config_hash()
    # bookkeeping fields never change a name; a field that changes numbers always does
    same = Study.from_dict({**yaml.safe_load(CI_STUDY.read_text()), "config": {**s.base, "ckpt_interval": 7}})
    other = Study.from_dict({**yaml.safe_load(CI_STUDY.read_text()), "config": {**s.base, "max_steps": 21}})
    assert [p.name for p in same.expand()] == [p.name for p in a]
    assert not {p.name for p in other.expand()} & {p.name for p in a}


def test_axis_values_in_names_points_and_duplicates(tmp_path):
    s = Study.from_dict({"name": "t", "config": {"max_steps": 5}, "axes": {"lr": [1e-3, 2e-3], "seed": [3]},
                         "points": [{"freeze_blocks": True, "seed": 3}, {"lr": 1e-3, "seed": 3}]})
    names = [p.name for p in s.expand()]
    assert len(names) == 3                                       # the last point repeats a product point
    assert names[0].startswith("hp-lr0.001-s3-") and names[1].startswith("hp-lr0.002-s3-")
    assert names[2].startswith("hp-frozen-s3-")
    assert s.axis_columns() == ["lr", "seed", "freeze_blocks"]
    assert Study.from_dict({"name": "t", "axes": {"lr": [1e-3]}}).axis_columns() == ["lr", "seed"]


@pytest.mark.parametrize("d, match", [
    ({"name": "t", "axes": {"lrr": [1]}}, r"axis 'lrr' is not a TrainConfig key; valid keys: \["),
    ({"name": "t", "axes": {"lr": []}}, "non-empty list"),
    ({"name": "t", "axes": {"lr": [1e-3]}, "axis": 1}, r"unknown study key\(s\) \['axis'\]; valid keys"),
    ({"name": "t"}, "nothing to run"),
    ({"name": "a b", "axes": {"seed": [0]}}, "plain name"),
    ({"name": "t", "axes": {"seed": [0]}, "comparisons": [{"axis": "recipe"}]}, "needs 'axis' and 'baseline'"),
    ({"name": "t", "axes": {"seed": [0]}, "config": {"n_layers": 2}}, r"unknown TrainConfig key\(s\) \['n_layers'\]"),
])
def test_bad_study_files_fail_with_one_line(d, match):
    with pytest.raises(ValueError, match=match):
        Study.from_dict(d)


@pytest.mark.parametrize("axes, match", [
    ({"recipe": ["hp", "fp8_hybird"]}, r"TrainConfig.recipe='fp8_hybird'.*did you mean 'fp8_hybrid'\?; valid choices"),
    ({"recipe": ["hp", "fmt:E9M9"]}, r"TrainConfig.recipe='fmt:E9M9': format 'E9M9'.*valid built-ins: E4M3"),
    ({"recipe": ["hp", {"name": "x", "layers": {"mlp": {"input": "E4M3"}}}]},
     r"unknown layer class 'mlp'; valid: \('\*', 'attn_qkv'"),
])
def test_a_bad_recipe_fails_when_the_study_expands(tmp_path, axes, match):
    # the recipe was the one setting TrainConfig did not check; a typo became a failed row
    d = tiny_study_dict(tmp_path, axes={**axes, "seed": [0]})
    with pytest.raises(ValueError, match=match) as ei:
        Study.from_dict(d).expand()
    assert "\n" not in str(ei.value)


@pytest.mark.parametrize("comparison, match", [
    ({"axis": "recipe", "baseline": "fp8_hybird"},
     r"baseline 'fp8_hybird' is not a level of 'recipe'; did you mean 'fp8_hybrid'\?; valid levels: \['hp', 'fp8"),
    ({"axis": "lr", "baseline": 1e-3},
     r"'lr' is not an axis this study compares \(seeds are the replicates\); valid axes: \['recipe'\]"),
    ({"axis": "seed", "baseline": 0}, r"'seed' is not an axis this study compares"),
    ({"axis": "recipe", "baseline": "hp", "by": ["lr"]}, r"'by' \['lr'\] not index column"),
])
def test_comparisons_are_checked_when_the_study_loads(tmp_path, comparison, match):
    # a bad baseline gave a traceback after every run trained; a foreign axis was accepted
    with pytest.raises(ValueError, match=match):
        Study.from_dict(tiny_study_dict(tmp_path, comparisons=[comparison]))
    ok = Study.from_dict(tiny_study_dict(tmp_path, comparisons=[{"axis": "recipe", "baseline": "bf16", "delta": 0.05}]))
    assert ok.level("recipe", "bf16") == "hp"        # an alias names the canonical level, as claims() reads it


@pytest.mark.parametrize("axes, match", [
    ({"recipe": ["hp", "fp8_hybrid", "hp"]}, r"study axis 'recipe' lists 'hp' twice; list each value once"),
    ({"seed": [0, 1, 0]}, r"study axis 'seed' lists 0 twice"),
    ({"recipe": ["bf16", "hp"]}, r"'recipe': 'bf16'\} and \{.*'recipe': 'hp'\} are the same run hp-s0-"),
    ({"recipe": ["fmt:E4M3", "fmt:e4m3fn"]}, r"are the same run fmt_E4M3-s0-"),
])
def test_duplicate_axis_values_are_an_error(tmp_path, axes, match):
    # they were silently deduplicated
    with pytest.raises(ValueError, match=match):
        Study.from_dict(tiny_study_dict(tmp_path, axes={"seed": [0], **axes}, comparisons=[])).expand()


def test_every_point_is_checked_before_any_run_trains(tmp_path):
    # bad optimizer settings passed --dry-run and left a run directory behind a traceback
    d = tiny_study_dict(tmp_path, axes={"recipe": ["hp", "fp8_hybrid"], "seed": [0]})
    d["config"] = {**d["config"], "optimizer": "grid_adamw", "optim": {"storage": "grid_sr"}}   # hp: no weight grid
    s = Study.from_dict(d, out_dir=str(tmp_path / "study"))
    with pytest.raises(ValueError, match=r"study point \{'recipe': 'hp', 'seed': 0\}: .*no trainable weight has a "
                                         r"format \(recipe 'hp' quantizes no weight\)"):
        run_study(s, log=lambda *a: None)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "study").exists()


def test_train_variants_checks_every_variant_before_any_trains(tmp_path, monkeypatch):
    # the notebooks' path (variant_runs.train_variants -> runs.run_points) gets the same check as a study
    from altgrad_lib.studies.variant_runs import train_variants

    monkeypatch.setenv("ALTGRAD_OUTPUTS", str(tmp_path / "outputs"))
    cfg = TrainConfig.from_dict({**tiny_study_dict(tmp_path)["config"], "max_steps": 2})
    bad = {"optimizer": "grid_adamw", "optim": {"weight_fmt": "E8M0FNU"}}
    with pytest.raises(ValueError, match=r"study point \{'label': 'bad', 'seed': 0\}: .*optim.weight_fmt='E8M0FNU'.*"
                                         r"no sign bit"):
        train_variants(cfg, {"ok": {}, "bad": bad}, seeds=[0], study="variants_check")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "outputs").exists()


# ------------------------------------------------------------------------------------------ running

def test_failing_and_diverging_runs_do_not_stop_the_others(tmp_path):
    # a corpus path is found missing only where the run builds its corpus (in the worker): a failed row, not a stop
    missing = str(tmp_path / "no_such_corpus.txt")
    d = tiny_study_dict(tmp_path, max_steps=4, axes={"recipe": ["bf16"], "seed": [0]},
                        points=[{"lr": 1e30, "min_lr": 0.0, "seed": 0},    # lr 1e30: overflows at step 2
                                {"corpus": missing, "seed": 0}])
    s = Study.from_dict(d, out_dir=str(tmp_path / "study"))
    logs = []
    idx = run_study(s, log=logs.append)
    bad = idx[idx.status == "failed"]
    assert len(bad) == 1 and bad.corpus.iloc[0] == missing
    assert "TrainConfig.corpus" in bad.error.iloc[0] and missing in bad.error.iloc[0]   # one-line ConfigError
    ok = idx[idx.status == "completed"]
    assert len(ok) == 1 and math.isfinite(ok.final_val_loss.iloc[0]) and ok.lr.iloc[0] == pytest.approx(3e-3)
    div = idx[idx.status == "diverged"]
    assert len(div) == 1 and div.diverged_at_step.iloc[0] == 2 and math.isnan(div.final_val_loss.iloc[0])
    assert div.lr.iloc[0] == 1e30 and len(idx) == 3
    assert any("failed" in line for line in logs)


def test_killed_study_resumes_and_completes_the_index(tmp_path):
    """Kill the study process in the middle of its second run: a re-run reuses the first, resumes the second
    from its checkpoint, and leaves a complete index."""
    study_file = tmp_path / "s.yaml"
    study_file.write_text(yaml.safe_dump(tiny_study_dict(tmp_path, max_steps=40,
                                                         axes={"recipe": ["bf16"], "seed": [0, 1]})))
    out = tmp_path / "study"
    first, second = Study.from_yaml(study_file, out_dir=str(out)).expand()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "altgrad_lib.cli", "study", "-f", str(study_file), "--out",
                             str(out), "--workers", "1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    ckpt2 = second.config.run_dir / "checkpoints" / "last.pt"
    deadline = time.time() + 180
    try:
        while time.time() < deadline and proc.poll() is None and not ckpt2.exists():
            time.sleep(0.02)
        assert proc.poll() is None, f"study ended before it could be killed: {proc.stderr.read()[-2000:]}"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(30)
    interrupted = not (second.config.run_dir / "summary.json").exists()   # else the run won the race
    before = pd.read_csv(out / "study.csv")
    assert before.status.tolist() == ["completed", "pending"]
    after = run_study(Study.from_yaml(study_file, out_dir=str(out)), log=lambda m: None)
    assert after.status.tolist() == ["completed", "completed"] and after.run.tolist() == [first.name, second.name]
    assert after.reused.tolist() == [True, not interrupted]
    resumes = json.loads((second.config.run_dir / "provenance.json").read_text())["resumes"]
    assert (len(resumes) == 1 and resumes[0]["from_step"] >= 2) if interrupted else resumes == []
    assert after.final_val_loss.notna().all()


def _index(s, loss):
    return pd.DataFrame([{"run": p.name, "recipe": p.config.recipe_name, "freeze_blocks": p.config.freeze_blocks,
                          "seed": p.config.seed, "status": "completed", "final_val_loss": loss(p.config)}
                         for p in s.expand()])


def test_claims_from_the_study_index(tmp_path):
    s = Study.from_dict(tiny_study_dict(tmp_path), out_dir=str(tmp_path / "st"))
    t = s.claims(_index(s, lambda c: 3.0 + (c.recipe == "fp8_hybrid") * (1 + 0.01 * c.seed) + 0.01 * c.seed))
    assert list(t.recipe) == ["fp8_hybrid"] and t.comparison.iloc[0] == "recipe vs hp"
    assert t.gap_nats.iloc[0] == pytest.approx(1.005) and t.verdict.iloc[0] == "worse"
    assert t.delta_nats.iloc[0] == 0.05    # no control in this study: the comparison states its delta


def test_report_says_when_the_runs_come_from_more_than_one_machine(tmp_path):
    """Issue 47: two EPYCs of one name gave one study two verdicts. The report names each machine the index's runs
    came from (their provenance.json) once there are two, and says nothing for one."""
    from altgrad_lib.training.run_dir import machine_info

    s = Study.from_dict(tiny_study_dict(tmp_path), out_dir=str(tmp_path / "st"))
    idx = _index(s, lambda c: 3.0 + (c.recipe == "fp8_hybrid") + 0.01 * c.seed)
    here = machine_info()
    other = {**here, "cpu_model": f"{here['cpu_model']} (another)", "isa": [*here["isa"], "amx_tile"]}   # not here
    dirs = []
    for i in range(len(idx)):
        d = tmp_path / "runs" / f"r{i}"
        d.mkdir(parents=True)
        (d / "provenance.json").write_text(json.dumps({"machine": here if i % 3 else other}))
        dirs.append(str(d))
    idx = idx.assign(run_dir=dirs)
    lines = s.report(idx, write=False)[1]
    mixed = [ln for ln in lines if ln.startswith("runs from 2 machines")]
    n_other = sum(1 for i in range(len(idx)) if i % 3 == 0)
    assert len(mixed) == 1 and f"{n_other} on {machine_key(other)}" in mixed[0], lines
    assert f"{len(idx) - n_other} on {machine_key(here)}" in mixed[0]
    one = idx.assign(run_dir=[dirs[i] for i in range(len(idx)) if i % 3] + [dirs[1]] * n_other)
    assert not [ln for ln in s.report(one, write=False)[1] if "machines" in ln]


def test_claims_accept_a_recipe_alias_for_the_baseline(tmp_path):
    # the index records canonical names (TrainConfig turns "bf16" into "hp"); a study file may still say bf16
    s = Study.from_dict(tiny_study_dict(tmp_path, comparisons=[{"axis": "recipe", "baseline": "bf16", "delta": 0.1}]))
    t = s.claims(_index(s, lambda c: 3.0 + (c.recipe == "fp8_hybrid") + 0.01 * c.seed))
    assert list(t.recipe) == ["fp8_hybrid"] and t.comparison.iloc[0] == "recipe vs hp"
    assert t.gap_nats.iloc[0] == pytest.approx(1.0)


def test_report_with_control_and_positive_control_writes_claims_csv(tmp_path):
    """The ci study (with its control) plus a positive control: the window comes from the control, the report's first
    line says the runs are a smoke test when hp sits above the unigram entropy, and claims.csv has every column."""
    from altgrad_lib.studies.claims import COLUMNS

    d = yaml.safe_load(CI_STUDY.read_text())
    d["axes"]["recipe"] = [*d["axes"]["recipe"], E2M1]
    s = Study.from_dict({**d, "positive_controls": ["E2M1-XWdY"]}, out_dir=str(tmp_path / "st"))
    loss = {"hp": 5.0, "fp8_hybrid": 5.001, "E2M1-XWdY": 5.1}
    idx = _index(s, lambda c: loss[c.recipe_name] + 0.3 * c.freeze_blocks + 0.05 * c.seed
                 + 0.002 * c.seed * (c.recipe_name == "E2M1-XWdY"))
    table, lines = s.report(idx, entropy=4.0)
    assert lines[0].startswith("SMOKE TEST, no claims drawn")
    assert "unigram entropy of the val split (4.000 nats)" in lines[0]
    assert lines[1].startswith("positive control E2M1-XWdY: not judged (smoke test")   # a smoke test judges nothing
    t = table.set_index("level")
    assert t.window_nats.tolist() == pytest.approx([0.3, 0.3]) and t.delta_nats.tolist() == [0.01] * 2
    assert t.smoke.all() and (t.verdict == "smoke test: no verdict").all()
    back = pd.read_csv(s.claims_path)
    assert set(COLUMNS) <= set(back.columns) and sorted(back.level) == ["E2M1-XWdY", "fp8_hybrid"]
    assert back.smoke.all()   # claims.csv says so too
    assert s.report(idx, entropy=9.0)[1][0].startswith("positive control E2M1-XWdY: resolved")   # below entropy


E2M1 = {"name": "E2M1-XWdY", "layers": {"*": {"input": "E2M1", "weight": "E2M1", "grad_output": "E2M1"},
                                         "lm_head": None}}


@pytest.mark.parametrize("change, match", [
    ({"axes": {"recipe": [E2M1, {**E2M1, "layers": {"*": {"input": "E4M3"}}}], "seed": [0]}},
     r"two different recipes are both named 'E2M1-XWdY': .*E2M1.* and .*E4M3"),
    ({"axes": {"recipe": ["hp", {"name": "hp", "layers": {"*": {"input": "E4M3"}}}], "seed": [0]}},
     "two different recipes are both named 'hp'"),
    ({"positive_controls": ["E2M1"]}, r"positive_controls \['E2M1'\] are not recipe levels of the study"),
    ({"comparisons": [{"axis": "recipe", "baseline": "hp", "delta": -1}]}, "delta=-1 must be a positive number"),
    ({"comparisons": [{"axis": "recipe", "baseline": "hp", "dleta": 1}]}, r"unknown key\(s\) \['dleta'\]"),
])
def test_study_refusals_of_the_claims_keys(change, match):
    with pytest.raises(ValueError, match=match):
        Study.from_dict({**yaml.safe_load(CI_STUDY.read_text()), **change})


def test_same_recipe_twice_is_one_level():
    d = yaml.safe_load(CI_STUDY.read_text())
    # the same spec under the same name in an axis and in a point is one level (listing it twice in one axis is a
    # duplicate, refused by test_duplicate_axis_values_are_an_error)
    study = Study.from_dict({**d, "axes": {"recipe": [E2M1, "hp"], "seed": [0]},
                             "points": [*d.get("points", []), {"recipe": dict(E2M1), "seed": 1}]})
    # the point's copy of the spec is the axis' level: two recipe levels (E2M1 and hp), not three, and the point's
    # run carries the axis' level name
    assert sorted(study.levels("recipe")) == sorted([E2M1["name"], "hp"])
    points = study.expand()
    e2m1 = [p for p in points if p.config.recipe_name == E2M1["name"]]
    assert sorted(p.config.seed for p in e2m1) == [0, 1], [p.name for p in points]


def test_cli_dry_run_and_bad_file(tmp_path, capsys):
    from altgrad_lib.cli import main

    assert main(["study", "-f", str(CI_STUDY), "--dry-run"]) == 0
    assert "+ 2 point(s) = 6 runs" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: b\naxes: {lrr: [1]}\n")
    assert main(["study", "-f", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("altgrad study: error: study axis 'lrr'") and err.count("\n") == 1


def test_a_rerun_reuses_finished_runs_and_no_resume_hands_them_to_the_executor(tmp_path):
    from altgrad_lib.studies.executors import LocalExecutor

    class Counting(LocalExecutor):          # what reaches the executor (finished runs are read in this process)
        def map(self, fn, items):
            items = list(items)
            seen.append([i[0] for i in items])
            return super().map(fn, items)

    s = Study.from_dict(tiny_study_dict(tmp_path, max_steps=3, axes={"recipe": ["hp"], "seed": [0, 1]}),
                        out_dir=str(tmp_path / "st"))
    seen: list = []
    assert run_study(s, Counting(), log=lambda m: None).status.tolist() == ["completed"] * 2
    assert run_study(s, Counting(), log=lambda m: None).reused.tolist() == [True, True]
    assert run_study(s, Counting(), resume=False, log=lambda m: None).reused.tolist() == [False, False]
    names = [p.name for p in s.expand()]
    assert seen == [names, [], names]


def test_levels_resolve_aliases_and_types():
    s = Study.from_dict({"name": "t", "axes": {"recipe": ["bf16", "fp8_hybrid"], "lr": [1e-3, 2e-3], "seed": [0]}})
    assert s.level("recipe", "bf16") == "hp" and s.level("lr", 0.001) == 1e-3 and s.level("lr", "0.002") == 2e-3
    with pytest.raises(ValueError,
                       match=r"'E4M3' is not a level of recipe in study 't'; levels: \['hp', 'fp8_hybrid'\]"):
        s.level("recipe", "E4M3")
    with pytest.raises(ValueError, match=r"'optimizer' is not an axis of study 't'; axes: \['recipe', 'lr'\]"):
        s.levels("optimizer")


def test_cli_claims_output_starts_with_an_unresolved_positive_control(tmp_path, capsys):
    from altgrad_lib.studies.claims import COLUMNS
    from altgrad_lib.studies.cli import print_claims

    d = yaml.safe_load(CI_STUDY.read_text())
    d["axes"]["recipe"] = [*d["axes"]["recipe"], E2M1]
    s = Study.from_dict({**d, "positive_controls": ["E2M1-XWdY"]}, out_dir=str(tmp_path / "st"))
    noise = {0: 0.01, 1: -0.01}   # E2M1 no worse than hp: the positive control is not resolved
    idx = _index(s, lambda c: (3.0 + 0.3 * c.freeze_blocks + 0.05 * c.seed
                               + (c.recipe_name == "E2M1-XWdY") * noise[c.seed]))
    print_claims(s, idx)
    out = [ln for ln in capsys.readouterr().out.splitlines() if ln.strip()]
    assert out[0].startswith("positive control E2M1-XWdY NOT resolved")
    assert any(ln.startswith("claims: recipe vs hp (paired by seed, gaps in nats") for ln in out)
    assert out[-1] == f"-> {s.claims_path}" and set(COLUMNS) <= set(pd.read_csv(s.claims_path).columns)


# ------------------------------------------------------------------------------------------ claim settings at load

def _lr_study(tmp_path, **changes):
    """ci_formats with recipes x two lrs x 2 seeds, the frozen-blocks control at the base lr only."""
    d = tiny_study_dict(tmp_path, axes={"recipe": ["hp", "fp8_hybrid"], "lr": [3.0e-3, 1.0e-2], "seed": [0, 1]},
                        points=[{"recipe": "hp", "freeze_blocks": True, "seed": k} for k in (0, 1)])
    return {**d, **changes}


@pytest.mark.parametrize("change, match", [
    # issue 26 item 6: each passed loading and --dry-run, trained every run, then gave a traceback and no claims
    ({"positive_controls": ["hp"]},
     r"study positive_controls \['hp'\]: 'hp' is the baseline of comparison .*; valid: \['fp8_hybrid'\]"),
    ({"comparisons": [{"axis": "recipe", "baseline": "hp", "by": ["recipe"]}]},
     r"'by' \['recipe'\] names what the comparison pairs .*; valid: \['lr', 'freeze_blocks'\]"),
    ({"comparisons": [{"axis": "recipe", "baseline": "hp", "value": "final_loss"}]},
     r"value='final_loss' is not a loss column of the index; did you mean 'final_val_loss'\?; valid: "
     r"\('final_val_loss', 'final_train_loss'\)"),
    ({"comparisons": [{"axis": "recipe", "baseline": "hp", "by": "lr"}]},        # was split into ['l', 'r']
     r"by='lr' must be a list of index columns, e.g. by: \[lr\]; valid: \['lr', 'freeze_blocks'\]"),
    ({"comparisons": {"axis": "recipe", "baseline": "hp"}},                      # was iterated by key
     r"study comparisons: \{'axis': 'recipe', 'baseline': 'hp'\} is a mapping; it must be a list, e.g. "
     r"comparisons: \[\{axis: recipe, baseline: hp\}\]"),
    ({"axes": [{"recipe": ["hp"]}]}, r"study axes: .* is a list; it must be a mapping, e.g. axes: \{recipe:"),
])
def test_claim_settings_are_refused_when_the_study_loads(tmp_path, change, match):
    with pytest.raises(ValueError, match=match) as ei:
        Study.from_dict(_lr_study(tmp_path, **{"positive_controls": ["fp8_hybrid"], **change}))
    assert "\n" not in str(ei.value)


def _made_up_index(s, seed=0, nan_run=None, status=None):
    """An index like run_study writes for study `s`, with losses drawn from a seeded normal (controls +1 nat);
    `nan_run` (a point number) diverged, `status` overrides every row's status (e.g. did_not_learn)."""
    import numpy as np

    from altgrad_lib.studies.runs import index_row

    rng = np.random.default_rng(seed)
    rows = []
    for i, p in enumerate(s.expand()):
        loss = 3.0 + rng.normal(0, 0.05) + (1.0 if p.config.freeze_blocks else 0.0)
        rows.append({**index_row(p, s.axis_columns()), "status": status or "completed",
                     "final_val_loss": math.nan if i == nan_run else loss, "final_train_loss": loss})
    return pd.DataFrame(rows).assign(status=lambda f: f.status.where(f.final_val_loss.notna(), "diverged"))


@pytest.mark.parametrize("comparisons", [
    [{"axis": "recipe", "baseline": "hp"}, {"axis": "lr", "baseline": 3.0e-3}],  # 2nd: no delta, no control of it
    [{"axis": "recipe", "baseline": "hp"}],                           # the control covers one lr of two
    [{"axis": "recipe", "baseline": "hp", "by": ["lr"]}],
    [{"axis": "lr", "baseline": "3e-3", "delta": 0.05}],              # YAML 1.1 reads 3e-3 as a string
    [{"axis": "lr", "baseline": 3.0e-3, "delta": 0.05, "by": ["recipe"], "value": "final_train_loss"}],
    [{"axis": "recipe", "baseline": "bf16", "delta": 0.05}, {"axis": "lr", "baseline": 0.01, "delta": 0.1}],
])
@pytest.mark.parametrize("control", [True, False])
def test_no_comparison_setting_fails_after_the_runs(tmp_path, comparisons, control):
    """Issue 26 item 6's invariant: a comparison setting is refused at load (one line) or its claims compute from
    whatever the runs give (here a seeded made-up index, one seed diverged) -- never a traceback after the compute.
    (A second comparison without delta and without a control of its baseline trained 16 runs, then raised.)"""
    d = _lr_study(tmp_path, comparisons=comparisons)
    if not control:
        d.pop("points")
    try:
        s = Study.from_dict(d, out_dir=str(tmp_path / "st"))
    except ValueError as e:
        assert "\n" not in str(e) and "state `delta`" in str(e), e   # today's claims: no margin without a control
        return
    for index in (_made_up_index(s), _made_up_index(s, seed=1, nan_run=1),
                  _made_up_index(s, seed=2, status="did_not_learn")):
        table, lines = s.report(index, entropy=5.0, write=False)
        assert len(table) and set(table.comparison) == {f"{c['axis']} vs {s.level(c['axis'], c['baseline'])}"
                                                        for c in comparisons}


def test_a_baseline_yaml_reads_as_a_string_is_the_level(tmp_path):
    # `baseline: 3e-3` is the string '3e-3' to YAML 1.1; it passed loading, then claims() raised "not a level"
    d = _lr_study(tmp_path, comparisons=yaml.safe_load("[{axis: lr, baseline: 3e-3, delta: 0.05}]"))
    assert d["comparisons"][0]["baseline"] == "3e-3"
    s = Study.from_dict(d)
    assert s.level("lr", "3e-3") == 3e-3 and s.level("lr", 0.01) == 0.01
    t = s.claims(_made_up_index(s))
    assert set(t.baseline) == {0.003} and set(t.level) == {0.01} and set(t.comparison) == {"lr vs 0.003"}


def test_a_dict_valued_axis_is_keyed_by_its_canonical_json(tmp_path):
    # `optim: [{}, {storage: grid_sr}]` failed with "unhashable type: 'dict'"
    d = tiny_study_dict(tmp_path, max_steps=2, axes={"optim": [{}, {"storage": "grid_sr", "sr_bits": 20}],
                                                     "seed": [0, 1]},
                        comparisons=[{"axis": "optim", "baseline": {}, "delta": 0.05}])
    d["config"]["recipe"] = "fp8_hybrid"
    s = Study.from_dict(d, out_dir=str(tmp_path / "st"))
    assert s.levels("optim") == {"{}": "{}", '{"sr_bits": 20, "storage": "grid_sr"}':
                                 '{"sr_bits": 20, "storage": "grid_sr"}'}
    assert s.level("optim", {"storage": "grid_sr", "sr_bits": 20}) == '{"sr_bits": 20, "storage": "grid_sr"}'
    t = s.claims(_made_up_index(s))
    assert t.level.tolist() == ['{"sr_bits": 20, "storage": "grid_sr"}'] and t.baseline.tolist() == ["{}"]
    idx = run_study(s, log=lambda m: None)           # the index reads back the same keys
    assert idx.status.tolist() == ["completed"] * 4
    assert idx.optim.tolist() == ["{}", "{}", *['{"sr_bits": 20, "storage": "grid_sr"}'] * 2]
    assert s.claims(idx).n.tolist() == [2]


# ------------------------------------------------------------------------------------------ did_not_learn

def test_runs_that_did_not_learn_are_not_completed_and_a_reuse_says_so_too(tmp_path):
    """Issue 26 item 2: lr 10 finished as `completed` at 66 and 37 nats. A run whose final validation loss is above
    ln(V) -- a uniform guess over the tokenizer's V real tokens -- is `did_not_learn`, its numbers kept."""
    import tiktoken

    from altgrad_lib.training.tokenizers import get_tokenizer

    d = tiny_study_dict(tmp_path, max_steps=6, axes={"recipe": ["hp"], "lr": [3.0e-3, 10.0], "seed": [0]},
                        comparisons=[{"axis": "lr", "baseline": 3.0e-3, "delta": 0.05}])
    d["config"]["min_lr"] = 0.0
    s = Study.from_dict(d, out_dir=str(tmp_path / "st"))
    enc = get_tokenizer(s.base["tokenizer"])
    assert isinstance(enc, tiktoken.Encoding) and enc.n_vocab == 4097 and enc.eot_token == 4096   # V, not 4160
    ln_v = math.log(enc.n_vocab)
    for reused in (False, True):                     # a reused run gets the same status
        idx = run_study(s, log=lambda m: None).set_index("lr")
        assert idx.reused.tolist() == [reused, reused]
        assert idx.loc[3e-3, "status"] == "completed" and idx.loc[3e-3, "final_val_loss"] < ln_v
        assert idx.loc[10.0, "status"] == "did_not_learn" and math.isnan(idx.loc[10.0, "diverged_at_step"])
        assert math.isfinite(idx.loc[10.0, "final_val_loss"]) and idx.loc[10.0, "final_val_loss"] > ln_v
        assert math.isfinite(idx.loc[10.0, "final_train_loss"]) and idx.loc[10.0, "val_ppl"] > enc.n_vocab


def test_a_non_finite_final_validation_loss_is_diverged_in_the_index(tmp_path, monkeypatch):
    """The last evaluation (at max_steps) gives NaN: the run is `diverged` at that step, no final loss."""
    from altgrad_lib.studies.executors import LocalExecutor
    from altgrad_lib.training import loop

    real, calls = loop.evaluate, []

    def nan_at_the_end(*a, **kw):
        calls.append(1)
        out = real(*a, **kw)
        return {**out, "val/loss": math.nan} if len(calls) == 2 else out   # step 0, then step max_steps

    monkeypatch.setattr(loop, "evaluate", nan_at_the_end)
    s = Study.from_dict(tiny_study_dict(tmp_path, max_steps=3, axes={"recipe": ["hp"], "seed": [0]}),
                        out_dir=str(tmp_path / "st"))
    row = run_study(s, LocalExecutor(workers=1), log=lambda m: None).iloc[0]
    assert row.status == "diverged" and row.diverged_at_step == 3 and math.isnan(row.final_val_loss)


@pytest.mark.parametrize("status, loss, out", [
    ("completed", 5.0, "completed"), ("completed", 9.0, "did_not_learn"), ("completed", math.nan, "diverged"),
    ("completed", math.inf, "diverged"), ("completed", None, "completed"), ("diverged", None, "diverged"),
    ("incomplete", 50.0, "incomplete"),
])
def test_run_status(status, loss, out):
    from altgrad_lib.studies.results import run_status

    assert math.log(4097) == pytest.approx(8.318, abs=1e-3)      # gpt2-4k: 4096 merges + <|endoftext|>
    assert run_status(status, loss, "gpt2-4k") == out


# ------------------------------------------------------------------------------------------ one study per directory

def test_two_different_studies_never_share_an_index(tmp_path):
    """Issue 27 item 3: a second study with the same name (or --out) overwrote the first's study.csv and claims.csv
    without a word. Now the directory records its study; another is refused in one line naming both."""
    d = tiny_study_dict(tmp_path, max_steps=2, axes={"recipe": ["hp"], "seed": [0]})
    a = Study.from_dict(d, out_dir=str(tmp_path / "st"), source="a.yaml")
    first = run_study(a, log=lambda m: None)
    other = Study.from_dict({**d, "axes": {"recipe": ["hp", "fp8_hybrid"], "seed": [0]}}, out_dir=str(tmp_path / "st"),
                            source="b.yaml")
    with pytest.raises(ValueError, match=r"study directory .*st holds the index of study 'ci_formats' \(a.yaml; "
                                         r"runs [0-9a-f]{12}\), not of study 'ci_formats' \(b.yaml; runs "
                                         r"[0-9a-f]{12}\): two studies never share .*; give this study another "
                                         r"`name:` \(or --out DIR\), or delete .*st to replace the other$") as ei:
        run_study(other, log=lambda m: None)
    assert "\n" not in str(ei.value)
    with pytest.raises(ValueError, match="holds the index of study"):
        other.check_dir()                                               # what --dry-run checks
    with pytest.raises(ValueError, match="holds the index of study"):   # its claims are not written there either
        other.report(first, write=True)
    renamed = Study.from_dict({**d, "name": "ci_other"}, out_dir=str(tmp_path / "st"))   # same runs, other name
    with pytest.raises(ValueError, match="holds the index of study 'ci_formats'"):
        renamed.claim_dir()
    assert pd.read_csv(a.index_path).run.tolist() == first.run.tolist()   # untouched
    # the same study re-run resumes; more seeds, other comparisons or bookkeeping keys are the same study
    assert run_study(a, log=lambda m: None).reused.tolist() == [True]
    same = [{**d, "axes": {"recipe": ["hp"], "seed": [0, 1]}},
            {**d, "comparisons": [{"axis": "recipe", "baseline": "hp", "delta": 0.2}], "description": "x"},
            {**d, "config": {**d["config"], "ckpt_interval": 7, "diagnostics": "cheap"}}]
    for dd in same:
        Study.from_dict(dd, out_dir=str(tmp_path / "st")).claim_dir()
    b = Study.from_dict({**d, "axes": {"recipe": ["hp", "fp8_hybrid"], "seed": [0]}}, out_dir=str(tmp_path / "st_b"))
    assert run_study(b, log=lambda m: None).reused.tolist() == [True, False]   # its own --out: fine


# values no file name can hold as written: nothing safe ("???", ""), runs of unsafe characters, '-' and '+'
@pytest.mark.parametrize("value", ["???", "", "a b//c", "fmt:E3M4", "__x__", "mx-fp+8.v2"])
def test_one_slug_rule_for_run_names_study_run_names_and_token_caches(value, tmp_path):
    # the recipe part of auto_run_name (a dict recipe's name), the part a study's run_name inserts for a string axis
    # value and the token cache's corpus part are one rule; the old study rule fell back to "x", the run name's
    # to "custom", and the cache's dropped '-' and '+'
    cfg = TrainConfig()
    head, tail = cfg.auto_run_name().rsplit("-s0-", 1)
    part = TrainConfig(recipe={"name": value, "recipe": "hp"}).auto_run_name().rsplit("-s0-", 1)[0]
    assert run_name({"tokenizer": value}, cfg) == f"{head}-{part}-s0-{tail}"
    if value and "/" not in value:   # a directory of that name (the cache slug keeps 40 characters)
        assert _corpus_slug(str(tmp_path / value)) == part[:40]


_ALIASES = [*RECIPE_ALIASES, *BLOCK_RECIPE_ALIASES]


@pytest.mark.parametrize("alias", [*_ALIASES, *(a.upper() for a in BLOCK_RECIPE_ALIASES),
                                   *(f"{a}:hp_last=1" for a in _ALIASES)])
def test_every_entry_point_gives_an_alias_one_canonical_recipe(alias):
    # canonical_recipe is the recipe's identity; a training config (and `altgrad train -p recipe=`), get_policy
    # (`altgrad fidelity`), a study's axis values, levels and level names and the claims' frame all agree with it
    canon = canonical_recipe(alias)
    assert canon != alias and get_policy(alias).name == canon
    assert TrainConfig(recipe=alias).recipe == TrainConfig.from_yaml(None, [f"recipe={alias}"]).recipe_name == canon
    s = Study.from_dict({"name": "t", "axes": {"recipe": [alias], "seed": [0]}})
    assert [p.config.recipe for p in s.expand()] == [canon] and s.level("recipe", alias) == canon
    assert _recipe_names([alias]) == [canon]
    assert s._canonical(pd.DataFrame({"recipe": [alias]})).recipe.tolist() == [canon]
