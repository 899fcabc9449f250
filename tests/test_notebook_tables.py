"""Tests for altgrad_lib.notebook.tables: summaries and loss tables of hand-made runs, the provenance banner.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest

from altgrad_lib.notebook import tables as run_tables
from altgrad_lib.studies import results


def _fake_run(losses: list[float], name: str) -> SimpleNamespace:
    rows = []
    for step, v in enumerate(losses):
        rows += [(step, "train/loss", v + 0.1), (step, "val/loss", v), (step, "tokens_per_s", 1000.0)]
    return SimpleNamespace(dir=name, metrics=pd.DataFrame(rows, columns=["step", "name", "value"]),
                           diverged=False)


def test_run_summary_gap_and_loss_table():
    runs = {"bf16": _fake_run([3.0, 2.0], "a"), "fp8": _fake_run([3.0, 2.2], "b")}
    s = run_tables.run_summary(runs, baseline="bf16").set_index("run")
    assert s.loc["fp8", "val_gap_pct"] == pytest.approx(10.0)
    assert s.loc["bf16", "val_ppl"] == pytest.approx(math.exp(2.0))
    lt = run_tables.loss_table(runs)
    assert set(lt.split) == {"train", "val"} and len(lt) == 8


def test_provenance_banner_mentions_versions_and_seed():
    text = run_tables.provenance_banner({"seed": 7, "fmt": "E4M3"})
    assert "torch" in text and "seed 7" in text and "git" in text and "fmt=E4M3" in text
    assert run_tables.params_hash({"a": 1, "b": 2}) == run_tables.params_hash({"b": 2, "a": 1})


def test_run_frame_reads_config_not_labels_and_masks_unfinished_runs():
    from altgrad_lib.training.config import TrainConfig

    def run(recipe, seed, status, losses):
        r = _fake_run(losses, f"/x/{recipe}-s{seed}")
        r.config, r.status = TrainConfig(recipe=recipe, seed=seed), status
        return r

    f = results.run_frame({"any label": run("bf16", 3, "completed", [3.0, 2.0]),
                              "other": run("fp8_hybrid", 1, "diverged", [3.0, 2.5])})
    assert list(f.columns[:5]) == ["run", "variant", "recipe", "backend", "seed"]
    assert f.seed.tolist() == [3, 1] and f.variant.tolist() == ["hp", "fp8_hybrid"]   # alias bf16 -> hp
    assert f.final_val_loss.iloc[0] == 2.0 and math.isnan(f.final_val_loss.iloc[1])  # last finite 2.5 is no result
    assert f.status.tolist() == ["completed", "diverged"]


def test_load_metrics_stacks_every_runs_file_with_its_axis_values(tmp_path):
    from altgrad_lib.training.run_dir import MetricsWriter

    for name, v in (("a", 1.5), ("b", 2.5)):
        (tmp_path / name).mkdir()
        with MetricsWriter(tmp_path / name / "metrics.csv") as w:
            w.log(0, {"val/loss": v})
            w.log(5, {"val/loss": v - 1, "train/loss": v})
    index = pd.DataFrame({"run": ["a", "b", "c"], "recipe": ["bf16", "fp8", "fp8"], "seed": [0, 0, 1],
                          "run_dir": [str(tmp_path / n) for n in "abc"]})          # c failed: no metrics file
    m = results.load_metrics(index, ["recipe", "seed"])
    assert list(m.columns) == ["run", "recipe", "seed", "step", "name", "value"]
    assert len(m) == 6 and set(m.run) == {"a", "b"}
    assert m[(m.run == "b") & (m.step == 5) & (m.name == "val/loss")].value.item() == 1.5
    assert (m[m.run == "b"].recipe == "fp8").all()


def test_train_config_from_takes_only_declared_parameters():
    # a notebook passes the dict of its declared parameters, never globals(); anything else is an error
    cfg = run_tables.train_config_from({"lr": 2e-3, "compile_model": True, "backends": ["sim"], "seeds": [0]},
                                       extra=("backends", "seeds"))
    assert cfg.lr == 2e-3 and cfg.compile is True and cfg.n_layer == 2           # untouched keys: defaults
    with pytest.raises(ValueError, match=r"\['backends'\] are neither TrainConfig keys nor declared as extra"):
        run_tables.train_config_from({"lr": 2e-3, "backends": ["sim"]})
    assert run_tables.train_config_from({"recipe": "bf16"}, max_steps=3).recipe == "hp"   # overrides, alias


def test_train_variants_trains_side_by_side_through_the_study_layer_and_indexes_the_notebook(tmp_path, monkeypatch):
    from altgrad_lib.studies.executors import LocalExecutor
    from altgrad_lib.training.loop import train
    from altgrad_lib.training.config import TrainConfig
    from tests.helpers import tiny_study_dict

    monkeypatch.setenv("ALTGRAD_OUTPUTS", str(tmp_path / "outputs"))
    cfg = TrainConfig.from_dict(tiny_study_dict(tmp_path, max_steps=3)["config"])
    first = train(cfg.replace(seed=0))                        # trained before: reused, not retrained
    variants = {"hp": {}, "same": {}, "control": {"freeze_blocks": True}}   # "same" is hp's config: trained once
    from altgrad_lib.studies.variant_runs import train_variants

    runs = train_variants(cfg, variants, [0, 1], study="nb", executor=LocalExecutor(workers=2, threads=1),
                          progress=False, verbose=False)
    assert list(runs) == ["hp s0", "same s0", "control s0", "hp s1", "same s1", "control s1"]
    assert runs["hp s0"].dir == first.dir and runs["hp s0"].reused and not runs["hp s1"].reused
    assert runs["same s1"].dir == runs["hp s1"].dir and runs["control s1"].name.startswith("hp-frozen-s1-")
    assert all(r.status == "completed" for r in runs.values())
    index = pd.read_csv(tmp_path / "outputs" / "studies" / "nb" / "study.csv")
    assert index.label.tolist() == ["hp", "control", "hp", "control"] and index.seed.tolist() == [0, 0, 1, 1]
    assert (index.status == "completed").all()
    assert index.final_val_loss.tolist() == [runs[f"{lab} s{s}"].final_val_loss
                                             for lab, s in zip(index.label, index.seed)]
    frame = runs.frame()                                      # seeds travel as ints, labels from train_variants
    assert frame.label.tolist() == ["hp", "same", "control"] * 2 and frame.seed.tolist() == [0, 0, 0, 1, 1, 1]
    assert frame.seed.dtype.kind == "i" and frame.freeze_blocks.tolist() == [False, False, True] * 2
    assert runs.run("control", 1) is runs["control s1"] and list(runs.of_seed(1)) == ["hp", "same", "control"]
