"""Tests for altgrad_lib.studies.envelope: the bisection against a synthetic trainer with a known critical lr, the
stability criterion on hand-made runs, and real tiny training runs (a huge lr must be unstable, a small one
stable; a second search reuses every trial; the sensitivity summary against a brute-force recomputation).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest

from altgrad_lib.studies import envelope as ev
from altgrad_lib.training.config import TrainConfig

TINY = dict(n_layer=2, n_head=2, n_embd=32, block_size=16, batch_size=4, max_docs=50, tokenizer="gpt2-512",
            max_steps=10, warmup_steps=0, eval_interval=0, eval_iters=2, ckpt_interval=0, recipe="fp8_hybrid",
            lr=1e-3, min_lr=1e-4)


# ------------------------------------------------------------------------------------------ synthetic runs


@dataclass
class FakeRun:
    metrics: pd.DataFrame
    status: str = "completed"
    final_val_loss: float | None = None
    divergence: dict | None = None
    dir: Path = Path("fake")
    reused: bool = False

    @property
    def diverged(self) -> bool:
        return self.divergence is not None


def fake_run(train_losses, val0=6.0, val_end=5.0, diverged_at=None) -> FakeRun:
    rows = [(0, "val/loss", val0)] + [(i + 1, "train/loss", v) for i, v in enumerate(train_losses)]
    m = pd.DataFrame(rows, columns=["step", "name", "value"])
    if diverged_at is not None:
        return FakeRun(m, "diverged", None, {"step": diverged_at})
    return FakeRun(m, "completed", val_end)


@dataclass
class Trainer:
    """A synthetic trainer with a known critical lr: stable below it, diverged above."""
    critical: float
    seen: list = field(default_factory=list)

    def __call__(self, cfg: TrainConfig) -> FakeRun:
        self.seen.append(cfg)
        if cfg.lr < self.critical:
            return fake_run([6.0, 5.5, 5.2, 5.1])
        return fake_run([6.0, math.inf], diverged_at=2)


def test_verdict_names_the_rule_that_failed():
    c = ev.Criterion(tail=0.25)
    assert ev.trial_verdict(fake_run([6, 5, 4, 3]), c)["reason"] == "stable"
    assert ev.trial_verdict(fake_run([6, math.nan], diverged_at=2), c)["reason"] == "diverged"
    assert ev.trial_verdict(fake_run([6, 5, 4, 3], val_end=6.5), c)["reason"] == "above_initial"
    spike = ev.trial_verdict(fake_run([6, 2, 2, 4.5, 2]), c)          # 4.5 >= 2 × 2 at step 4, then recovered
    assert spike["reason"] == "loss_spike" and spike["spike_step"] == 4 and spike["best_train_loss"] == 2
    assert ev.trial_verdict(fake_run([6, 2, 2, 3.9, 2]), c)["reason"] == "stable"    # < 2 × best: no blow-up
    row = ev.trial_verdict(fake_run([6, 5, 4, 3], val0=6.25, val_end=5.5), ev.Criterion(tail=0.5))
    assert row["final_train_loss"] == 3.5 and row["initial_loss"] == 6.25 and row["final_val_loss"] == 5.5
    with pytest.raises(ValueError, match="tail=0"):
        ev.Criterion(tail=0)


def test_first_spike_against_a_brute_force_loop():
    import random

    rng = random.Random(0)
    for _ in range(200):
        xs = [rng.choice([rng.uniform(1, 5), rng.uniform(5, 12), math.inf, math.nan]) for _ in range(rng.randint(0, 8))]
        want = next((i for i in range(len(xs)) if not math.isfinite(xs[i]) or (i and xs[i] >= 2 * min(xs[:i]))), None)
        assert ev.first_spike(xs) == want, xs
    assert ev.first_spike(pd.Series([3.0, 7.0], index=[10, 20])) == 20      # a Series gives its index (the step)


@pytest.mark.parametrize("critical", [3.7e-3, 0.0123, 0.5])
def test_bisection_brackets_a_known_critical_lr(critical, tmp_path):
    trainer = Trainer(critical)
    cfg = TrainConfig.from_dict({**TINY, "out_dir": str(tmp_path)})
    res = ev.find_stable_lr(cfg, 1e-4, 10.0, ratio=1.2, max_trials=40, run_fn=trainer)
    assert res.lr_stable < critical <= res.lr_unstable and res.lr_unstable / res.lr_stable <= 1.2
    assert res.lr_stable < res.lr_critical < res.lr_unstable
    assert len(res.trials) == len(trainer.seen) <= 2 + math.ceil(math.log2(math.log(1e5) / math.log(1.2)))
    assert list(res.trials.columns[:len(ev.TRIAL_COLUMNS)]) == ev.TRIAL_COLUMNS
    assert (res.trials["stable"] == (res.trials["lr"] < critical)).all()
    for c in trainer.seen:                                     # min_lr scaled with lr; a stable, unique name
        assert c.min_lr == pytest.approx(c.lr * 0.1) and c.run_name == ev.trial_config(cfg, c.lr).run_name
    assert len({c.run_name for c in trainer.seen}) == len(trainer.seen)


def test_open_brackets_and_bad_arguments(tmp_path):
    cfg = TrainConfig.from_dict({**TINY, "out_dir": str(tmp_path)})
    low = ev.find_stable_lr(cfg, 1e-3, 1.0, run_fn=Trainer(1e-5))
    assert low.lr_stable is None and low.lr_unstable == 1e-3 and len(low.trials) == 2 and math.isnan(low.lr_critical)
    high = ev.find_stable_lr(cfg, 1e-3, 1.0, run_fn=Trainer(10.0))
    assert high.lr_stable == 1.0 and high.lr_unstable is None
    with pytest.raises(ValueError, match="lo < hi"):
        ev.find_stable_lr(cfg, 1.0, 0.1, run_fn=Trainer(1.0))
    with pytest.raises(ValueError, match="axis='lr'"):
        ev.lr_sensitivity(cfg, "lr", [1], [1e-3], run_fn=Trainer(1.0))


def test_trial_names_are_stable_and_depend_on_the_result_fields(tmp_path):
    cfg = TrainConfig.from_dict({**TINY, "out_dir": str(tmp_path), "run_name": "mine"})
    a, b = ev.trial_config(cfg, 0.01), ev.trial_config(cfg.replace(log_interval=5), 0.01)
    assert a.run_name == b.run_name and a.run_name.startswith("env-lr0.01-fp8_hybrid-s0-")
    assert ev.trial_config(cfg, 0.02).run_name != a.run_name
    assert ev.trial_config(cfg, 0.01, warmup_steps=3).run_name != a.run_name


# ------------------------------------------------------------------------------------------ real training


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("envelope"))


def test_real_runs_huge_lr_unstable_small_lr_stable_and_reused(out_dir):
    cfg = TrainConfig.from_dict({**TINY, "out_dir": out_dir})
    res = ev.find_stable_lr(cfg, 1e-3, 1e4, ratio=30, max_trials=6)
    t = res.trials.set_index("lr")
    assert t.loc[1e-3, "stable"] and t.loc[1e-3, "final_val_loss"] < t.loc[1e-3, "initial_loss"]
    assert not t.loc[1e4, "stable"] and t.loc[1e4, "reason"] == "diverged" and t.loc[1e4, "diverged_step"] >= 1
    assert res.lr_stable is not None and res.lr_unstable is not None and res.lr_unstable / res.lr_stable <= 30
    assert bool(t.loc[res.lr_stable, "stable"]) and not bool(t.loc[res.lr_unstable, "stable"])
    for name in t["run_name"]:                                 # every trial is an ordinary run directory
        assert (Path(out_dir) / name / "summary.json").exists()
    again = ev.find_stable_lr(cfg, 1e-3, 1e4, ratio=30, max_trials=6)
    assert again.trials["reused"].all() and (again.lr_stable, again.lr_unstable) == (res.lr_stable, res.lr_unstable)


def test_real_warmup_sensitivity_table_and_summary(out_dir):
    cfg = TrainConfig.from_dict({**TINY, "out_dir": out_dir})
    trials = ev.lr_sensitivity(cfg, "warmup_steps", [0, 5], [1e-3, 1e4])
    assert len(trials) == 4 and list(trials["warmup_steps"]) == [0, 0, 5, 5]
    assert trials[trials["warmup_steps"] == 0]["reused"].all()     # the same trials as the search above
    assert not trials[trials["lr"] == 1e4]["stable"].any() and trials[trials["lr"] == 1e-3]["stable"].all()
    summary = ev.sensitivity_summary(trials, "warmup_steps")
    for _, s in summary.iterrows():                               # brute-force recomputation of each row
        g = trials[trials["warmup_steps"] == s["warmup_steps"]]
        capped = [min(r.final_val_loss, r.initial_loss) if r.stable else r.initial_loss for r in g.itertuples()]
        assert s["best_final_loss"] == min(capped) and s["max_stable_lr"] == 1e-3 and s["n_stable"] == 1
        assert s["lr_sensitivity"] == pytest.approx(sum(c - min(capped) for c in capped) / 2)


def test_critical_lr_table_one_row_per_recipe_and_seed(tmp_path):
    cfg = TrainConfig.from_dict({**TINY, "out_dir": str(tmp_path)})
    table = ev.critical_lr_table(cfg, ["hp", "fmt:E5M2"], [0, 1], 1e-4, 10.0, ratio=1.2, max_trials=40,
                                 run_fn=Trainer(0.02))
    assert list(zip(table["recipe"], table["seed"])) == [("hp", 0), ("hp", 1), ("fmt:E5M2", 0), ("fmt:E5M2", 1)]
    assert ((table["lr_stable"] < 0.02) & (table["lr_unstable"] >= 0.02)).all()
    assert (table["lr_critical"] == (table["lr_stable"] * table["lr_unstable"]) ** 0.5).all()


def test_find_stable_lrs_in_process_matches_find_stable_lr_and_names_a_failure(tmp_path):
    from altgrad_lib.studies.executors import LocalExecutor

    cfg = TrainConfig.from_dict({**TINY, "out_dir": str(tmp_path)})
    bases = {"hp": cfg.replace(recipe="hp"), "E5M2": cfg.replace(recipe="fmt:E5M2")}
    got = ev.find_stable_lrs(bases, 1e-4, 10.0, ratio=1.2, max_trials=40, run_fn=Trainer(0.02),
                             executor=LocalExecutor(workers=1))
    assert list(got) == ["hp", "E5M2"]
    for label, base in bases.items():
        ref = ev.find_stable_lr(base, 1e-4, 10.0, ratio=1.2, max_trials=40, run_fn=Trainer(0.02))
        pd.testing.assert_frame_equal(got[label].trials, ref.trials)
        assert (got[label].lr_stable, got[label].lr_unstable) == (ref.lr_stable, ref.lr_unstable)

    def broken(c):
        raise RuntimeError("no data")

    with pytest.raises(RuntimeError, match="bisection of 'hp' failed: RuntimeError: no data"):
        ev.find_stable_lrs(bases, 1e-4, 10.0, run_fn=broken, executor=LocalExecutor(workers=1))
    assert ev.find_stable_lrs({}, 1e-4, 10.0) == {}


def test_the_default_executor_follows_altgrad_workers_capped_by_the_labels(tmp_path, monkeypatch):
    """The envelope sizes its workers by executors.auto_workers (ALTGRAD_WORKERS first), at most one per label;
    it used to ignore ALTGRAD_WORKERS and take one per core."""
    from altgrad_lib.studies.executors import LocalExecutor

    sizes = []

    class Recorded(LocalExecutor):      # records the size it was given, runs the jobs here (Trainer is a closure)
        def map(self, fn, items, stop=None):
            sizes.append(self.workers)
            return LocalExecutor(workers=1).map(fn, items, stop)

    monkeypatch.setattr(ev, "LocalExecutor", Recorded)
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    cfg = TrainConfig.from_dict({**TINY, "out_dir": str(tmp_path), "device": "cpu"})
    bases = {"hp": cfg.replace(recipe="hp"), "E5M2": cfg.replace(recipe="fmt:E5M2")}
    for env, want in (("1", 1), ("3", 2)):
        monkeypatch.setenv("ALTGRAD_WORKERS", env)
        got = ev.find_stable_lrs(bases, 1e-4, 10.0, ratio=1.2, max_trials=40, run_fn=Trainer(0.02))
        assert list(got) == ["hp", "E5M2"] and sizes.pop() == want
    monkeypatch.delenv("ALTGRAD_WORKERS")
    assert ev._default_workers(bases) == 2 and ev._default_workers({"hp": bases["hp"]}) == 1


def test_real_find_stable_lrs_two_workers_identical_to_sequential(tmp_path):
    # real tiny runs: the per-format bisections in 2 spawned workers (1 torch thread each) give the same trial
    # tables (losses, verdicts, run names) as find_stable_lr called per format in this process with 1 thread
    import torch

    from altgrad_lib.studies.executors import LocalExecutor

    tiny = {**TINY, "max_docs": 20, "n_layer": 1, "n_embd": 16}
    seq_cfg = TrainConfig.from_dict({**tiny, "out_dir": str(tmp_path / "seq")})
    par_cfg = TrainConfig.from_dict({**tiny, "out_dir": str(tmp_path / "par")})
    recipes = {"hp": "hp", "E5M2": "fmt:E5M2"}
    kw = dict(steps=5, ratio=30, max_trials=3)
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        seq = {k: ev.find_stable_lr(seq_cfg.replace(recipe=r), 1e-3, 1e4, **kw) for k, r in recipes.items()}
    finally:
        torch.set_num_threads(prev)
    par = ev.find_stable_lrs({k: par_cfg.replace(recipe=r) for k, r in recipes.items()}, 1e-3, 1e4, **kw,
                             executor=LocalExecutor(workers=2, threads=1))
    assert list(par) == list(recipes)
    for k in recipes:
        assert len(seq[k].trials) == 3 and not seq[k].trials["reused"].any()
        pd.testing.assert_frame_equal(par[k].trials, seq[k].trials)
        assert (par[k].lr_stable, par[k].lr_unstable) == (seq[k].lr_stable, seq[k].lr_unstable)
        for name in par[k].trials["run_name"]:                    # trained in the workers, into par's out_dir
            assert (tmp_path / "par" / name / "summary.json").exists()


def test_role_recipe_builds_notebook_04_style_recipes_and_passes_names_through():
    assert ev.role_recipe("hp") == "hp" and ev.role_recipe("fmt:E5M2") == "fmt:E5M2"
    assert ev.role_recipe("E5M2@W") == {"name": "E5M2-W", "layers": {"*": {"weight": "E5M2"}, "lm_head": None}}
    r = ev.role_recipe("E7M0@dYXW")       # tag order in the spec does not matter; the name uses X, W, dY order
    assert r["name"] == "E7M0-XWdY"
    assert r["layers"]["*"] == {"input": "E7M0", "weight": "E7M0", "grad_output": "E7M0"}
    cfg = TrainConfig.from_dict({"recipe": ev.role_recipe("E4M3@XW")})
    assert cfg.recipe_name == "E4M3-XW"
    for bad in ("E4M3@", "E4M3@Q", "E4M3@WW"):
        with pytest.raises(ValueError, match="role_recipe"):
            ev.role_recipe(bad)
    with pytest.raises(ValueError):
        ev.role_recipe("E99M9@W")
