"""Study files as a newcomer writes them (issues 26 and 27), through `altgrad study` as they ran it: each case that
passed loading and `--dry-run`, trained every run and then gave a traceback (or overwrote another study's index) now
gives one line before any compute, or the right result. Kept so these stay fixed."""
from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import yaml

from altgrad_lib.cli import main

ROOT = Path(__file__).resolve().parent.parent

# ci_formats' tiny model, 2 steps, runs under the test's tmp dir; {extra} is the rest of the study file
HEAD = """\
name: {name}
config: {{corpus: licenses, tokenizer: gpt2-4k, n_layer: 1, n_head: 2, n_embd: 32, block_size: 32, batch_size: 8,
         max_steps: 2, warmup_steps: 1, lr: 3.0e-3, min_lr: 0.0, eval_interval: 0, eval_iters: 2, device: cpu,
         diagnostics: "off", out_dir: {runs}}}
"""
LR_AXES = """\
axes:
  recipe: [hp, fp8_hybrid]
  lr: [3e-3, 1.0e-2]
  seed: [0, 1]
points:
  - {recipe: hp, freeze_blocks: true, seed: 0}
  - {recipe: hp, freeze_blocks: true, seed: 1}
"""


def _file(tmp_path: Path, extra: str, name: str = "newcomer", file: str = "study.yaml") -> Path:
    path = tmp_path / file
    path.write_text(HEAD.format(name=name, runs=tmp_path / "runs") + textwrap.dedent(extra))
    return path


@pytest.mark.parametrize("extra, message", [
    (LR_AXES + "comparisons: [{axis: recipe, baseline: hp}]\npositive_controls: [hp]\n",
     "study positive_controls ['hp']: 'hp' is the baseline of comparison"),
    (LR_AXES + "comparisons: [{axis: recipe, baseline: hp, by: [recipe]}]\n",
     "'by' ['recipe'] names what the comparison pairs ('recipe' is compared, seeds are the replicates); valid: "
     "['lr', 'freeze_blocks']"),
    (LR_AXES + "comparisons: [{axis: recipe, baseline: hp, value: final_loss}]\n",
     "value='final_loss' is not a loss column of the index; did you mean 'final_val_loss'?"),
    (LR_AXES + "comparisons: [{axis: recipe, baseline: hp, by: lr}]\n",
     "by='lr' must be a list of index columns, e.g. by: [lr]"),
    (LR_AXES + "comparisons: {axis: recipe, baseline: hp}\n",
     "study comparisons: {'axis': 'recipe', 'baseline': 'hp'} is a mapping; it must be a list"),
])
def test_claim_settings_fail_in_the_dry_run_in_one_line(tmp_path, capsys, extra, message):
    path = _file(tmp_path, extra)
    assert main(["study", "-f", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("altgrad study: error: ") and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("extra, runs", [
    # YAML 1.1 reads `3e-3` as a string: it is the lr level 0.003 all the same
    (LR_AXES + "comparisons: [{axis: recipe, baseline: hp, delta: 0.05}, {axis: lr, baseline: 3e-3, delta: 0.05}]\n",
     10),
    # a dict-valued axis ("unhashable type: 'dict'")
    (textwrap.dedent("""\
        axes:
          recipe: [fp8_hybrid]
          optim: [{}, {storage: grid_sr}]
          seed: [0, 1]
        comparisons: [{axis: optim, baseline: {}, delta: 0.05}]
        """), 4),
])
def test_claim_settings_that_are_fine_pass_the_dry_run(tmp_path, capsys, extra, runs):
    path = _file(tmp_path, extra)
    assert main(["study", "-f", str(path), "--dry-run"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith(f"= {runs} runs)"), out


def test_lr_10_does_not_read_completed(tmp_path, capsys):
    """`lr: 10` finished as `completed` at 66 and 37 nats, far above ln(V), the loss of a uniform guess."""
    path = _file(tmp_path, """\
        axes:
          lr: [3.0e-3, 10.0]
          seed: [0]
        comparisons: [{axis: lr, baseline: 3.0e-3, delta: 0.05}]
        """)
    cfg = yaml.safe_load(path.read_text())
    cfg["config"]["max_steps"] = 6
    path.write_text(yaml.safe_dump(cfg))
    assert main(["study", "-f", str(path), "--workers", "1", "--out", str(tmp_path / "st")]) == 0
    out = capsys.readouterr().out
    assert "status: completed 1, did_not_learn 1" in out, out[-3000:]
    index = pd.read_csv(tmp_path / "st" / "study.csv").set_index("lr")
    assert index.loc[10.0, "status"] == "did_not_learn" and index.loc[10.0, "final_val_loss"] > math.log(4097)


def test_two_studies_with_one_name_never_share_an_index(tmp_path, capsys, monkeypatch):
    """Two study files with the same `name:` one after the other: the second overwrote the first's study.csv and
    claims.csv without a word. Now it is refused in one line (in --dry-run too), the first one's index untouched,
    and the first study re-run resumes."""
    monkeypatch.setenv("ALTGRAD_OUTPUTS", str(tmp_path / "outputs"))
    first = _file(tmp_path, "axes: {recipe: [hp], seed: [0]}\n", file="first.yaml")
    second = _file(tmp_path, "axes: {recipe: [hp, fp8_hybrid], seed: [0]}\n", file="second.yaml")
    assert main(["study", "-f", str(first), "--workers", "1"]) == 0
    index = tmp_path / "outputs" / "studies" / "newcomer" / "study.csv"
    before = index.read_text()
    capsys.readouterr()
    for args in (["--dry-run"], ["--workers", "1"]):
        assert main(["study", "-f", str(second), *args]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"holds the index of study 'newcomer' ({first}; runs" in err, err
        assert f"not of study 'newcomer' ({second}; runs" in err and "give this study another `name:`" in err
    assert index.read_text() == before and not list((tmp_path / "runs").glob("fp8_hybrid-*"))
    assert main(["study", "-f", str(first), "--workers", "1"]) == 0
    assert "(reused)" in capsys.readouterr().out
    assert main(["study", "-f", str(second), "--workers", "1", "--out", str(tmp_path / "second")]) == 0
