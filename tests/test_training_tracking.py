"""Tests for altgrad_lib.training.tracking: the W&B (offline) and TensorBoard mirrors hold exactly what metrics.csv
holds (read back by an independent parser of the .wandb log / TensorBoard's EventAccumulator), the
diagnostics files are mirrored, a tracker that fails never costs the run, and the setting changes no number."""
from __future__ import annotations

import warnings

import pandas as pd
import pytest
from helpers import read_wandb_history

from altgrad_lib.training.loop import TrainConfig, train


def _cfg(tmp_path, **kw) -> TrainConfig:
    return TrainConfig(max_steps=4, n_layer=1, n_head=2, n_embd=32, block_size=32, eval_interval=2, eval_iters=2,
                       out_dir=str(tmp_path), device="cpu", **kw)


def _diag_writer(cfg):
    """on_step hook that writes a diagnostics.csv next to metrics.csv, as the monitors do."""
    path = cfg.run_dir / "diagnostics.csv"

    def on_step(step, m):
        new = not path.exists()
        with open(path, "a") as fh:
            fh.write("step,layer,role,metric,value\n" if new else "")
            fh.write(f"{step},transformer.h.0.attn.c_attn,weight,rms,{0.5 + step}\n")
    return on_step


def _metrics(run) -> pd.DataFrame:
    return pd.read_csv(run.dir / "metrics.csv", float_precision="round_trip")


def test_tensorboard_mirror_equals_metrics_csv_and_changes_no_number(tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard not installed (extra: pip install 'altgrad[tracking]')")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = _cfg(tmp_path / "tb", logger="tensorboard")
    run = train(cfg, progress=False, verbose=False, on_step=_diag_writer(cfg))
    ea = EventAccumulator(str(run.dir / "tensorboard"), size_guidance={"scalars": 0})
    ea.Reload()
    m = _metrics(run)
    assert set(ea.Tags()["scalars"]) == set(m.name) | {"diag/weight/rms/transformer.h.0.attn.c_attn"}
    for name, g in m.groupby("name"):
        ev = ea.Scalars(name)
        assert [e.step for e in ev] == g.step.tolist()
        assert [e.value for e in ev] == pytest.approx(g.value.tolist(), rel=1e-6)   # TensorBoard stores float32
    assert [e.value for e in ea.Scalars("diag/weight/rms/transformer.h.0.attn.c_attn")] == [1.5, 2.5, 3.5, 4.5]
    plain = train(_cfg(tmp_path / "plain"), progress=False, verbose=False)
    assert plain.config.config_hash() == run.config.config_hash()
    keep = ~m.name.str.startswith("perf/")
    assert _metrics(plain)[keep].equals(m[keep])                      # the mirror changed no number


def test_wandb_offline_mirror_equals_metrics_csv(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="wandb not installed (extra: pip install 'altgrad[tracking]')")
    monkeypatch.delenv("WANDB_MODE", raising=False)                   # offline is the default, not the env's
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = _cfg(tmp_path, logger="wandb")
    run = train(cfg, progress=False, verbose=False, on_step=_diag_writer(cfg))
    offline = list((run.dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 1
    rows = read_wandb_history(next(offline[0].glob("run-*.wandb")))
    m = _metrics(run)
    assert [r["_step"] for r in rows] == sorted(m.step.unique())
    for r in rows:
        want = m[m.step == r["_step"]].set_index("name").value.to_dict()
        assert {k: v for k, v in r.items() if not k.startswith("_")} == want   # JSON floats: exact
    assert (offline[0] / "files" / "diagnostics.csv").is_file()


def test_a_failing_tracker_warns_once_and_the_run_completes(tmp_path, monkeypatch):
    from altgrad_lib.training import tracking

    def broken(self, step, metrics):
        raise OSError("disk full\nmore")

    pytest.importorskip("tensorboard", reason="tensorboard not installed (extra: pip install 'altgrad[tracking]')")
    monkeypatch.setattr(tracking.TrackedWriter, "_log", broken)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = train(_cfg(tmp_path, logger="tensorboard"), progress=False, verbose=False)
    mine = [w for w in caught if "logger='tensorboard' failed" in str(w.message)]
    assert len(mine) == 1 and "(OSError: disk full);" in str(mine[0].message)
    assert run.status == "completed" and _metrics(run).step.max() == 4


def test_a_missing_tracker_package_warns_and_the_run_completes(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "wandb", None)                   # import wandb -> ImportError
    with pytest.warns(RuntimeWarning,
                      match=r"logger='wandb' failed at start \(ModuleNotFoundError.*pip install 'altgrad\[tracking\]'"):
        run = train(_cfg(tmp_path, logger="wandb"), progress=False, verbose=False)
    assert run.status == "completed" and not (run.dir / "wandb").exists()


def test_logger_choice_is_validated():
    with pytest.raises(ValueError,
                       match=r"logger='mlflow' is invalid; valid choices: \('none', 'wandb', 'tensorboard'\)"):
        TrainConfig(logger="mlflow")
