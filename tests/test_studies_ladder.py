"""studies/ladder.py and a study file's `ladder:` section: sizes x token budgets x recipes x seeds, each rung's N
(oracle: the model's own GPT.num_params(non_embedding=True)), D, lr and batch rules, and the one-line refusals
(a ladder with one size or one budget, keys the rungs set, a bad rule) before any compute."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from altgrad_lib.cli import main
from altgrad_lib.model import GPT
from altgrad_lib.studies.study import Study
from altgrad_lib.training.build import gpt_config
from altgrad_lib.training.config import TrainConfig
from altgrad_lib.training.tokenizers import get_tokenizer

ROOT = Path(__file__).resolve().parent.parent
CPU_LADDER = ROOT / "params" / "studies" / "cpu_ladder.yaml"

TINY = """\
name: tiny_ladder
config: {{corpus: licenses, tokenizer: gpt2-256, n_layer: 1, n_head: 2, n_embd: 32, block_size: 32, batch_size: 8,
         max_steps: 2, warmup_steps: 1, lr: 2.0e-3, min_lr: 2.0e-4, eval_interval: 0, eval_iters: 2, device: cpu,
         diagnostics: "off", out_dir: {runs}}}
axes:
  recipe: [hp, fp8_hybrid]
  seed: [0, 1]
"""


def _file(tmp_path: Path, ladder: str, head: str = TINY) -> Path:
    p = tmp_path / "ladder.yaml"
    p.write_text(head.format(runs=tmp_path / "runs") + textwrap.dedent(ladder))
    return p


def _n_params(cfg: TrainConfig) -> int:
    with torch.device("meta"):
        model = GPT(gpt_config(cfg.model_config, get_tokenizer(cfg.tokenizer).n_vocab))
    return model.num_params(non_embedding=True)


def test_the_cpu_ladder_is_what_the_issue_asks_for():
    """>= 4 sizes spanning >= 10x params, >= 3 token budgets, hp, fp8_hybrid, nvfp4 and a narrow format, >= 3 seeds:
    every size x budget x recipe x seed is a run, plus the lr checks."""
    s = Study.from_yaml(CPU_LADDER)
    pts = s.expand()
    main_runs = [p for p in pts if p.axes["lr_factor"] == 1.0]
    ns = sorted({p.axes["n_params"] for p in main_runs})
    budgets = sorted({round(p.axes["tokens"] / p.axes["n_params"]) for p in main_runs})
    recipes = {p.config.recipe_name for p in main_runs}
    seeds = {p.config.seed for p in main_runs}
    assert len(ns) >= 4 and ns[-1] / ns[0] >= 10
    assert len(budgets) >= 3
    assert {"hp", "fp8_hybrid", "nvfp4"} <= recipes and len(recipes) >= 4
    assert len(seeds) >= 3
    assert len(main_runs) == len(ns) * len(budgets) * len(recipes) * len(seeds)
    assert len({p.name for p in pts}) == len(pts)   # every run its own name (and directory)
    checks = [p for p in pts if p.axes["lr_factor"] != 1.0]
    assert len(checks) == len(ns) * 2 and {p.config.recipe_name for p in checks} == {"hp"}


def test_each_rung_has_the_models_own_n_and_the_budgets_tokens_and_the_rules_lr():
    s = Study.from_yaml(CPU_LADDER)
    base = TrainConfig.from_dict(s.base)
    for p in s.expand():
        cfg = p.config
        assert p.axes["n_params"] == _n_params(cfg)
        assert p.axes["tokens"] == cfg.max_steps * cfg.batch_size * cfg.block_size
        tpp = p.axes["tokens"] / p.axes["n_params"]
        step_tokens = cfg.batch_size * cfg.block_size
        assert min(abs(p.axes["tokens"] - t * p.axes["n_params"]) for t in s.ladder.tokens_per_param) \
            <= step_tokens / 2, tpp
        # lr_rule {lr: 1e-3, ref_embd: 64, power: 1}: 1/width; min_lr keeps the base's min_lr / lr
        assert cfg.lr == pytest.approx(1e-3 * 64 / cfg.n_embd * p.axes["lr_factor"])
        assert cfg.min_lr / cfg.lr == pytest.approx(base.min_lr / base.lr)
        assert cfg.n_embd // cfg.n_head == base.n_embd // base.n_head   # the base's head width
        assert cfg.batch_size == 16 and cfg.warmup_steps == min(base.warmup_steps, cfg.max_steps // 10)


def test_the_index_has_the_fits_columns(tmp_path):
    s = Study.from_yaml(_file(tmp_path, "ladder: {sizes: [[1, 32], [2, 32]], tokens_per_param: [1, 2]}\n"))
    cols = s.axis_columns()
    assert {"n_params", "tokens", "lr_factor", "n_layer", "n_embd", "max_steps", "lr"} <= set(cols)
    row = s.index_values(s.expand()[0])
    assert row["n_params"] > 0 and row["tokens"] > 0 and row["lr_factor"] == 1.0
    assert len(s.expand()) == 2 * 2 * 2 * 2


def test_a_study_without_a_ladder_keeps_its_identity_and_runs(tmp_path):
    """The ladder key is added to the identity only when a study has one (tests/test_config_run_hashes.py guards
    the run names and hashes of every committed study file)."""
    import dataclasses
    s = Study.from_yaml(ROOT / "params" / "studies" / "ci_formats.yaml")
    assert s.ladder is None
    laddered = dataclasses.replace(s, ladder=Study.from_yaml(CPU_LADDER).ladder)
    assert laddered.identity() != s.identity()


@pytest.mark.parametrize("ladder, message", [
    ("ladder: {sizes: [[1, 32]], tokens_per_param: [1, 2]}\n", "has 1 size"),
    ("ladder: {sizes: [[1, 32], [2, 32]], tokens_per_param: [2]}\n", "has 1 budget"),
    ("ladder: {sizes: [[1, 32], [1, 32]], tokens_per_param: [1, 2]}\n", "has 1 size"),
    ("ladder: {sizes: [[1, 32], [2, 32]], tokens_per_param: [1, 2], step: 3}\n", "unknown key(s) ['step']"),
    ("ladder: {sizes: [[1, 32], [2, 0]], tokens_per_param: [1, 2]}\n", "positive ints"),
    ("ladder: {sizes: [[1, 32], [2, 48]], tokens_per_param: [1, -2]}\n", "positive numbers"),
    ("ladder: {sizes: [[1, 32], [2, 40]], tokens_per_param: [1, 2]}\n", "not a multiple of the base's head width 16"),
    ("ladder: {sizes: [[1, 32], [2, 48, 5]], tokens_per_param: [1, 2]}\n", "not divisible by n_head=5"),
    ("ladder: {sizes: [[1, 32], [2, 32]], tokens_per_param: [1, 2], lr_rule: {lr: 0}}\n", "lr_rule"),
    ("ladder: {sizes: [[1, 32], [2, 32]], tokens_per_param: [1, 2], lr_check: {factors: [1.0]}}\n", "other than 1"),
    ("ladder: {sizes: [[1, 32], [2, 32]], tokens_per_param: [1, 2], lr_check: {factors: [2], recipe: nvfp4}}\n",
     "not a recipe of the study"),
])
def test_a_bad_ladder_is_refused_in_one_line_by_the_dry_run(tmp_path, capsys, ladder, message):
    assert main(["study", "-f", str(_file(tmp_path, ladder)), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err, err
    assert not (tmp_path / "runs").exists()


def test_an_axis_the_rungs_set_is_refused(tmp_path, capsys):
    head = TINY.replace("  seed: [0, 1]", "  seed: [0, 1]\n  n_embd: [32, 64]")
    path = _file(tmp_path, "ladder: {sizes: [[1, 32], [2, 32]], tokens_per_param: [1, 2]}\n", head)
    assert main(["study", "-f", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert "n_embd" in err and "the ladder's rungs set" in err and err.count("\n") == 0


def test_the_dry_run_says_how_many_runs_and_what_they_cost(tmp_path, capsys):
    path = _file(tmp_path, "ladder: {sizes: [[1, 16], [1, 32]], tokens_per_param: [1, 2]}\n")
    assert main(["study", "-f", str(path), "--dry-run", "--workers", "1"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "ladder[2x2] x recipe[2] x seed[2] + 0 point(s) = 16 runs" in out
    assert "ladder: 2 sizes" in out and "2 token budgets" in out
    assert "estimate (cpu, measured here" in out and "16 runs" in out
    assert not (tmp_path / "runs").exists()
