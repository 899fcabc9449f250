"""Tests for altgrad_lib.training.loop: the training loop, exact resume after a real SIGKILL (mid-run and
mid-checkpoint-write), clear errors on bad checkpoints, run reuse, divergence records.

Every run is tiny (1 layer, C=32, T=32, vocab 513, <=10 steps, 50 docs); ~10 training runs in total.
"""
from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import SR_DELAYED, Crash, assert_same_state, crash_at

from altgrad_lib.training import checkpoint as ckpt
from altgrad_lib.training.run_dir import Run
from altgrad_lib.model import compile_gpt
from altgrad_lib.training import loop
from altgrad_lib.training.loop import RunConflictError, TrainConfig, train

REPO = Path(__file__).resolve().parents[1]

# SR_DELAYED + dropout: every kind of hidden state (SR generators, amax history, torch RNG) must survive a
# checkpoint for resume to be exact
TINY = dict(n_layer=1, n_head=2, n_embd=32, block_size=32, batch_size=4, max_docs=50, tokenizer="gpt2-512",
            max_steps=10, warmup_steps=2, eval_interval=5, eval_iters=2, ckpt_interval=4, dropout=0.1,
            recipe=SR_DELAYED)


def tiny(tmp: Path, **kw) -> TrainConfig:
    return TrainConfig.from_dict({**TINY, "out_dir": str(tmp), **kw})


def result_lines(run_dir: Path) -> list[str]:
    """metrics.csv without wall-clock rows: must be byte-identical between interrupted and clean runs."""
    return [ln for ln in (run_dir / "metrics.csv").read_text().splitlines() if ",perf/" not in ln]


def assert_same_final_state(dir_a: Path, dir_b: Path) -> None:
    sa = torch.load(dir_a / "checkpoints" / "last.pt", weights_only=False)
    sb = torch.load(dir_b / "checkpoints" / "last.pt", weights_only=False)
    assert sa["step"] == sb["step"]
    assert_same_state(sa["model"], sb["model"], "model")          # incl. quantizer buffers + SR generator state
    assert_same_state(sa["optimizer"], sb["optimizer"], "optimizer")


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Run:
    """The uninterrupted run every interrupted variant is compared against."""
    return train(tiny(tmp_path_factory.mktemp("ref")), progress=False)


# ------------------------------------------------------------------------------------------- training


def test_train_writes_a_complete_run_dir(reference):
    d = reference.dir
    for name in ("config.yaml", "provenance.json", "metrics.csv", "summary.json", "checkpoints/last.pt"):
        assert (d / name).exists(), name
    assert not (d / "divergence.json").exists() and not reference.diverged and reference.status == "completed"
    prov = json.loads((d / "provenance.json").read_text())
    assert prov["config_hash"] == reference.config.config_hash() and prov["seed"] == 0
    assert {"sha", "dirty"} <= set(prov["git"]) and {"torch", "torchao", "numpy", "python"} <= set(prov["versions"])
    m = reference.metrics
    names = set(m["name"])
    assert {"train/loss", "train/lr", "train/grad_norm", "perf/tokens_per_s", "val/loss", "val/ppl"} <= names
    assert sorted(m[m["name"] == "train/loss"]["step"]) == list(range(1, 11))
    assert sorted(m[m["name"] == "val/loss"]["step"]) == [0, 5, 10]
    val = reference.metric("val/loss")
    assert reference.final_val_loss == val[10]
    assert val[0] == pytest.approx(math.log(513), rel=0.05)                  # ~uniform at init
    assert val[10] < val[0]                                                  # it learns something
    assert math.isclose(reference.metric("val/ppl")[10], math.exp(val[10]))
    assert Run.load(d).config == reference.config
    assert ckpt.load_checkpoint(d / "checkpoints" / "last.pt")["step"] == 10


def test_finished_run_is_reused_not_retrained(reference, capsys):
    before = (reference.dir / "metrics.csv").stat().st_mtime_ns
    cfg = reference.config.replace(run_name="", ckpt_interval=99)  # non-result fields do not matter
    again = train(cfg, progress=False)
    assert again.reused and again.dir == reference.dir
    assert (reference.dir / "metrics.csv").stat().st_mtime_ns == before
    assert "reusing" in capsys.readouterr().out


def test_same_run_name_other_config_is_refused(reference):
    cfg = reference.config.replace(lr=5e-3)
    before = (reference.dir / "config.yaml").read_text()
    with pytest.raises(RunConflictError, match="lr"):
        train(cfg, progress=False)
    assert (reference.dir / "config.yaml").read_text() == before


def test_resume_in_process_is_bit_exact(reference, tmp_path):
    cfg = tiny(tmp_path)
    with pytest.raises(Crash):  # crash right after the step-4 checkpoint (the edge case k == ckpt step)
        train(cfg, progress=False, on_step=crash_at(4))
    assert not (cfg.run_dir / "summary.json").exists()
    run = train(cfg, progress=False)
    assert run.status == "completed" and not run.reused
    assert result_lines(run.dir) == result_lines(reference.dir)
    assert_same_final_state(run.dir, reference.dir)
    assert json.loads((run.dir / "provenance.json").read_text())["resumes"][0]["from_step"] == 4


def _process_state() -> tuple:
    """What train() may change process-wide: the CUBLAS env variable, torch's deterministic mode, the global RNGs."""
    kind, keys, pos, gauss, cached = np.random.get_state()
    return (os.environ.get("CUBLAS_WORKSPACE_CONFIG"), torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(), random.getstate(),
            (kind, keys.tolist(), pos, gauss, cached), torch.get_rng_state().tolist())


@pytest.mark.parametrize("env, det, warn_only", [(None, False, False), (":16:8", True, True)])
def test_train_leaves_the_process_state_as_it_found_it(tmp_path, monkeypatch, env, det, warn_only):
    """A deterministic run set CUBLAS_WORKSPACE_CONFIG and warn_only and seeded the global RNGs, and left them so:
    the caller's next cell, test or run inherited them. Also on an error."""
    if env is None:
        monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    else:
        monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", env)
    was = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(det, warn_only=warn_only)
    try:
        random.seed(11), np.random.seed(11), torch.manual_seed(11)
        before = _process_state()
        train(tiny(tmp_path, max_steps=2, ckpt_interval=2, eval_interval=2, deterministic=True), progress=False,
              verbose=False)
        assert _process_state() == before
        with pytest.raises(Crash):
            train(tiny(tmp_path, run_name="crash", deterministic=True), progress=False, verbose=False,
                  on_step=crash_at(1))
        assert _process_state() == before
    finally:
        torch.use_deterministic_algorithms(was[0], warn_only=was[1])



def test_block_scaled_recipe_resumes_bit_exactly_with_its_rht_signs_and_sr_stream(tmp_path):
    """nvfp4: RHT sign vectors (buffers), stochastic rounding of dY and two-level scales survive a crash and a
    resume through the checkpoint machinery: metrics and final state equal an uninterrupted run's."""
    clean = train(tiny(tmp_path / "a", recipe="nvfp4", max_steps=6, ckpt_interval=3), progress=False, verbose=False)
    cfg = tiny(tmp_path / "b", recipe="nvfp4", max_steps=6, ckpt_interval=3)
    with pytest.raises(Crash):
        train(cfg, progress=False, verbose=False, on_step=crash_at(4))   # resumes from the step-3 checkpoint
    run = train(cfg, progress=False, verbose=False)
    assert result_lines(run.dir) == result_lines(clean.dir)
    assert_same_final_state(run.dir, clean.dir)
    signs = {k: v for k, v in torch.load(run.dir / "checkpoints" / "last.pt", weights_only=False)["model"].items()
             if k.endswith("rht_signs")}
    assert signs and all(set(v.unique().tolist()) <= {-1.0, 1.0} for v in signs.values())

CHILD = r"""
import json, os, signal, sys
from altgrad_lib import io as agio
from altgrad_lib.training.loop import TrainConfig, train
cfg = TrainConfig.from_dict(json.loads(sys.argv[1]))
mode, k = sys.argv[2], int(sys.argv[3])
on_step = None
if mode == "step":          # SIGKILL right after step k (its metrics are flushed)
    def on_step(step, m):
        if step == k:
            os.kill(os.getpid(), signal.SIGKILL)
else:                       # SIGKILL halfway through writing the k-th checkpoint file
    calls, orig = [0], agio._write_payload
    def payload(fh, data):
        calls[0] += 1
        if calls[0] == k:
            fh.write(data[: len(data) // 2]); fh.flush(); os.fsync(fh.fileno())
            os.kill(os.getpid(), signal.SIGKILL)
        orig(fh, data)
    agio._write_payload = payload
train(cfg, progress=False, verbose=False, on_step=on_step)
print("NOT KILLED")
"""


def _run_child(cfg: TrainConfig, mode: str, k: int) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cfg.to_dict()), mode, str(k)], cwd=REPO,
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])


def test_resume_after_real_sigkill_mid_run(reference, tmp_path):
    cfg = tiny(tmp_path)
    _run_child(cfg, "step", 7)
    lines = result_lines(cfg.run_dir)
    assert any(ln.startswith("7,train/loss") for ln in lines)                 # killed after step 7 was logged
    assert ckpt.load_checkpoint(cfg.run_dir / "checkpoints" / "last.pt")["step"] == 4
    run = train(cfg, progress=False)
    assert result_lines(run.dir) == result_lines(reference.dir)
    assert_same_final_state(run.dir, reference.dir)


def test_sigkill_while_writing_checkpoint_keeps_previous_and_resumes_exactly(reference, tmp_path):
    cfg = tiny(tmp_path)
    _run_child(cfg, "ckpt", 2)                     # dies inside the step-8 checkpoint write
    ck_dir = cfg.run_dir / "checkpoints"
    assert list(ck_dir.glob(".last.pt.tmp.*")), "the torn tmp file should be left behind"
    assert ckpt.load_checkpoint(ck_dir / "last.pt", cfg.config_hash())["step"] == 4   # previous one intact
    run = train(cfg, progress=False)
    assert not list(ck_dir.glob(".last.pt.tmp.*"))
    assert result_lines(run.dir) == result_lines(reference.dir)
    assert_same_final_state(run.dir, reference.dir)


def _interrupted(tmp_path) -> TrainConfig:
    cfg = tiny(tmp_path, max_steps=6, ckpt_interval=2)
    with pytest.raises(Crash):
        train(cfg, progress=False, on_step=crash_at(3))
    return cfg


def _snapshot_files(d: Path) -> dict[str, bytes]:
    # the lock file says who holds the run now (runs.RunLock); it is not part of the run
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file() and p.name != ".lock"}


def test_checkpoint_of_another_config_is_refused_untouched(tmp_path):
    cfg = _interrupted(tmp_path)
    p = cfg.run_dir / "checkpoints" / "last.pt"
    st = torch.load(p, weights_only=False)
    st["config_hash"] = "f" * 64
    st["checksum"] = ckpt.state_checksum(st)   # a genuine checkpoint of another config, not a corrupt one
    torch.save(st, p)
    before = _snapshot_files(cfg.run_dir)
    with pytest.raises(ckpt.CheckpointError) as ei:
        train(cfg, progress=False)
    msg = str(ei.value)
    assert str(p) in msg and "f" * 64 in msg and cfg.config_hash() in msg
    assert _snapshot_files(cfg.run_dir) == before


def test_truncated_checkpoint_is_refused_untouched(tmp_path):
    cfg = _interrupted(tmp_path)
    p = cfg.run_dir / "checkpoints" / "last.pt"
    p.write_bytes(p.read_bytes()[:1000])
    before = _snapshot_files(cfg.run_dir)
    with pytest.raises(ckpt.CheckpointError, match="corrupt or truncated") as ei:
        train(cfg, progress=False)
    assert str(p) in str(ei.value)
    assert _snapshot_files(cfg.run_dir) == before


def test_resume_false_restarts_from_scratch(tmp_path):
    cfg = _interrupted(tmp_path)
    run = train(cfg, resume=False, progress=False)
    assert run.status == "completed"
    assert json.loads((run.dir / "provenance.json").read_text())["resumes"] == []


# ------------------------------------------------------------------------------------------- divergence


def test_divergence_is_recorded_and_names_the_layer(tmp_path):
    cfg = tiny(tmp_path, recipe="fp8_hybrid", dropout=0.0, max_steps=8, ckpt_interval=2)
    armed = [False]
    target = "transformer.h.0.mlp.c_fc"

    def on_model(model):
        def inject(mod, inp, out):
            return out * math.inf if armed[0] else out          # this layer "overflows" from step 4 on
        model.get_submodule(target).register_forward_hook(inject)

    def on_step(step, m):
        armed[0] = step >= 3

    run = train(cfg, progress=False, on_model=on_model, on_step=on_step)
    assert run.diverged and run.status == "diverged"
    div = json.loads((run.dir / "divergence.json").read_text())
    assert div["step"] == 4 and not math.isfinite(div["loss"])
    assert div["first_nonfinite"]["kind"] == "forward_output" and div["first_nonfinite"]["name"] == target
    assert div["forward_first"]["inputs_finite"] is True
    assert div["last_good_checkpoint_step"] == 2
    assert ckpt.load_checkpoint(run.dir / "checkpoints" / "last.pt")["step"] == 2   # last good one kept
    assert run.metrics["step"].max() == 4
    again = train(cfg, progress=False)               # a diverged run is a finished run: reused, no crash
    assert again.reused and again.diverged


def test_nonfinite_gradient_names_the_parameter(tmp_path):
    cfg = tiny(tmp_path, recipe="hp", dropout=0.0, max_steps=4, ckpt_interval=0)
    target = "transformer.h.0.attn.c_proj.weight"

    def on_model(model):
        # forward stays finite; the backward of this one weight turns non-finite at step 2
        p = model.get_submodule("transformer.h.0.attn.c_proj").weight
        calls = [0]

        def bad_grad(g):
            calls[0] += 1
            return g * math.nan if calls[0] >= 2 else g
        p.register_hook(bad_grad)

    run = train(cfg, progress=False, on_model=on_model)
    assert run.diverged
    div = run.divergence
    assert div["step"] == 2 and math.isfinite(div["loss"]) and not math.isfinite(div["grad_norm"])
    assert div["forward_first"] is None
    assert div["first_nonfinite"] == {"kind": "param_grad", "name": target}
    assert div["last_good_checkpoint_step"] is None


def test_real_overflow_from_huge_lr_is_caught(tmp_path):
    # lr=1e30: after one AdamW step the embeddings are ~1e30, and the first LayerNorm's variance overflows
    cfg = tiny(tmp_path, recipe="fp8_hybrid", dropout=0.0, lr=1e30, min_lr=0.0, warmup_steps=0, grad_clip=0.0)
    run = train(cfg, progress=False)
    assert run.diverged and run.divergence["step"] == 2
    first = run.divergence["first_nonfinite"]
    assert first["kind"] == "forward_output" and first["name"] == "transformer.h.0.ln_1"
    assert first["module_type"] == "LayerNorm" and first["inputs_finite"] and run.divergence["replay_reproduced"]


@pytest.mark.slow
def test_bf16_autocast_runs(tmp_path):
    run = train(tiny(tmp_path, precision="bf16", max_steps=3, recipe="fp8_hybrid"), progress=False)
    assert run.status == "completed" and math.isfinite(run.final_val_loss)


def _train_losses(run) -> list[str]:
    lines = (Path(run.dir) / "metrics.csv").read_text().splitlines()
    return [ln for ln in lines if ",train/loss," in ln]


def test_evaluation_never_changes_training(tmp_path):
    """Delayed-scaling history, SR streams and counters are read, not written, in eval mode: the training
    losses of the same run are bit-identical whether it evaluates every 2 steps or only at the end."""
    often = train(tiny(tmp_path / "a", eval_interval=2, eval_iters=3, ckpt_interval=0), progress=False, verbose=False)
    rarely = train(tiny(tmp_path / "b", eval_interval=10, eval_iters=3, ckpt_interval=0), progress=False, verbose=False)
    a, b = _train_losses(often), _train_losses(rarely)
    assert len(a) == TINY["max_steps"] and a == b


def test_nonfinite_validation_loss_is_a_divergence(tmp_path, monkeypatch):
    import altgrad_lib.training.loop as tr

    real = tr.evaluate
    calls = []

    def eval_nan_at_second_call(*a, **kw):
        calls.append(1)
        out = real(*a, **kw)
        return {**out, "val/loss": math.nan} if len(calls) == 2 else out

    monkeypatch.setattr(tr, "evaluate", eval_nan_at_second_call)
    run = train(tiny(tmp_path, eval_interval=5), progress=False, verbose=False)
    assert run.status == "diverged" and run.divergence["step"] == 5 and run.divergence["phase"] == "eval"
    assert run.final_val_loss is None


def test_run_made_by_other_numerics_or_data_is_not_reused(tmp_path):
    cfg = tiny(tmp_path, max_steps=2, ckpt_interval=0, run_name="r")
    run = train(cfg, progress=False, verbose=False)
    prov_path = Path(run.dir) / "provenance.json"
    prov = json.loads(prov_path.read_text())
    assert prov["numerics_version"] >= 2 and len(prov["data_sha256"]) == 64
    saved = ckpt.load_checkpoint(Path(run.dir) / "checkpoints" / "last.pt")
    assert saved["extra"]["data_sha256"] == prov["data_sha256"]
    assert train(cfg, progress=False, verbose=False).reused
    for key, value, words in (("numerics_version", 1, "other code"), ("data_sha256", "0" * 64, "other data")):
        prov_path.write_text(json.dumps({**prov, key: value}))
        with pytest.raises(RunConflictError, match=words):
            train(cfg, progress=False, verbose=False)
    again = train(cfg, resume=False, progress=False, verbose=False)     # explicit retrain in place
    assert not again.reused and json.loads(prov_path.read_text())["numerics_version"] == prov["numerics_version"]


def test_config_hash_includes_the_numerics_version(monkeypatch):
    import altgrad_lib.training.config as tc

    h = TrainConfig().config_hash()
    monkeypatch.setattr(tc, "NUMERICS_VERSION", tc.NUMERICS_VERSION + 1)
    assert TrainConfig().config_hash() != h


# ------------------------------------------------------------------------------------------- first-NaN localisation

NAN_RUN = dict(n_layer=2, n_head=2, n_embd=16, block_size=16, batch_size=2, max_docs=50, tokenizer="gpt2-512",
               max_steps=5, warmup_steps=0, eval_interval=0, eval_iters=1, ckpt_interval=0, dropout=0.0,
               recipe="fp8_hybrid", grad_guard_interval=-1)
EXPECTED_KIND = {"forward": "forward_output", "backward": "input_grad", "parameter": "parameter"}


def _injection_sites(n: int = 20, seed: int = 0) -> list[tuple[str, str, int, float]]:
    """n seeded (place, target, step, value) injections over the modules and parameters of the run's model:
    place "forward" = the module's output, "backward" = the gradient its backward returns for its inputs,
    "parameter" = the parameter itself (made non-finite by the previous step)."""
    import random

    from altgrad_lib.model import GPT, GPTConfig
    from altgrad_lib.quantize.convert import quantize_model

    model = GPT(GPTConfig(block_size=16, vocab_size=513, n_layer=2, n_head=2, n_embd=16))
    quantize_model(model, "fp8_hybrid", verbose=False)
    fired_fwd, fired_bwd = [], []
    for name, mod in model.named_modules():   # which modules run a forward / get a gradient for their inputs
        if name:
            mod.register_forward_hook(lambda m, i, o, name=name: fired_fwd.append(name))
            mod.register_full_backward_hook(
                lambda m, gi, go, name=name: fired_bwd.append(name) if any(g is not None for g in gi) else None)
    idx = torch.randint(0, 513, (2, 16))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # "full backward hook is firing ... no inputs require gradients"
        model(idx, idx)[1].backward()
    fwd, bwd = sorted(set(fired_fwd)), sorted(set(fired_bwd))
    params = [n for n, _ in model.named_parameters()]
    assert any(".g_quant" in n for n, _ in model.named_modules()) and not any(".g_quant" in n for n in fwd)
    rng = random.Random(seed)
    sites = []
    for i in range(n):
        place = ("forward", "backward", "parameter")[i % 3]
        target = rng.choice({"forward": fwd, "backward": bwd, "parameter": params}[place])
        step = rng.randint(2 if place == "parameter" else 1, NAN_RUN["max_steps"])
        sites.append((place, target, step, rng.choice([math.nan, math.inf, -math.inf])))
    return sites


def _poison(t: torch.Tensor, value: float) -> torch.Tensor:
    t = t.clone()
    t.view(-1)[0] = value
    return t


def _inject(place: str, target: str, step: int, value: float):
    current = [1]                                  # the step train() is running (on_step runs after each one)

    def on_model(model):
        if place == "forward":
            def fwd(mod, inp, out):
                return _poison(out, value) if mod.training and current[0] == step else out
            model.get_submodule(target).register_forward_hook(fwd)
        elif place == "backward":
            def bwd(mod, grad_in, grad_out):
                if current[0] != step:
                    return None
                return tuple(_poison(g, value) if g is not None else None for g in grad_in)
            model.get_submodule(target).register_full_backward_hook(bwd)

    def on_step(s, m):
        current[0] = s + 1
        if place == "parameter" and s + 1 == step:
            with torch.no_grad():
                dict(model_params[0])[target].view(-1)[0] = value

    model_params = [None]

    def on_model_all(model):
        model_params[0] = list(model.named_parameters())
        on_model(model)
    return on_model_all, on_step


@pytest.mark.parametrize("site", _injection_sites(), ids=lambda s: f"{s[0]}-{s[1]}-step{s[2]}-{s[3]}")
def test_first_nonfinite_names_the_injected_module_kind_and_step(tmp_path, site):
    place, target, step, value = site
    on_model, on_step = _inject(place, target, step, value)
    run = train(TrainConfig.from_dict({**NAN_RUN, "out_dir": str(tmp_path)}), progress=False, verbose=False,
                on_model=on_model, on_step=on_step)
    div = run.divergence
    assert run.diverged and div["step"] == step, (div["step"], step)
    assert div["first_nonfinite"]["kind"] == EXPECTED_KIND[place], div
    assert div["first_nonfinite"]["name"] == target, div


def test_an_overflowing_perplexity_is_inf_in_metrics_summary_and_run_tables(tmp_path, monkeypatch):
    # validation losses above ~709.78 overflow exp(); metrics.csv, summary.json and run_frame say the same
    import torch.nn.functional as F

    from altgrad_lib.studies.results import run_frame

    ce = F.cross_entropy
    monkeypatch.setattr("altgrad_lib.model.F.cross_entropy",   # evaluate() runs without grad: +750 there only
                        lambda *a, **k: ce(*a, **k) + (0.0 if torch.is_grad_enabled() else 750.0))
    run = train(tiny(tmp_path, max_steps=2, eval_interval=0, ckpt_interval=0), progress=False, verbose=False)
    assert run.status == "completed" and 750 < run.final_val_loss < 760
    assert math.isinf(run.metric("val/ppl").iloc[-1])
    assert math.isinf(json.loads((run.dir / "summary.json").read_text())["final_val_ppl"])
    assert math.isinf(run_frame([run])["val_ppl"].iloc[0])
# ------------------------------------------------------------------ smaller faults
def test_lr_1e6_names_the_overflowing_gradient_instead_of_question_marks(tmp_path):
    run = train(tiny(tmp_path, recipe="hp", dropout=0.0, lr=1e6, warmup_steps=2, max_steps=6), progress=False)
    assert run.diverged, run
    first = run.divergence["first_nonfinite"]
    assert first["kind"] == "grad_norm_overflow", run.divergence
    assert first["name"] in _param_names(run)
    # float32 squares the elements: a norm above sqrt(float32 max) overflows (the oracle: torch.finfo)
    assert first["norm"] ** 2 > torch.finfo(torch.float32).max and math.isfinite(first["norm"])
    assert "?" not in run.divergence_str() and first["name"] in run.divergence_str()


def _param_names(run: Run) -> set[str]:
    from altgrad_lib.model import GPT, GPTConfig

    c = run.config
    m = GPT(GPTConfig(block_size=c.block_size, vocab_size=513, n_layer=c.n_layer, n_head=c.n_head, n_embd=c.n_embd))
    return {n for n, _ in m.named_parameters()}


def test_a_deleted_metrics_csv_is_refused_not_resumed_with_a_gap(tmp_path):
    cfg = tiny(tmp_path, ckpt_interval=2, max_steps=6)
    with pytest.raises(Crash):
        train(cfg, progress=False, on_step=crash_at(4))
    (cfg.resolved().run_dir / "metrics.csv").unlink()
    with pytest.raises(RunConflictError, match=r"metrics.csv is missing or empty but last.pt is at step 4: "
                                               r"resuming would leave steps 0-4 without metrics"):
        train(cfg, progress=False)
    assert not (cfg.resolved().run_dir / "metrics.csv").exists()            # refused before writing anything
    assert train(cfg, resume=False, progress=False).status == "completed"    # the way out it names


def test_diagnostics_switched_on_at_resume_say_which_steps_they_cover(tmp_path, capsys):
    cfg = tiny(tmp_path, ckpt_interval=2, max_steps=6)
    with pytest.raises(Crash):
        train(cfg, progress=False, on_step=crash_at(4))
    capsys.readouterr()
    run = train(cfg.replace(diagnostics="cheap"), progress=False)
    out = capsys.readouterr().out
    assert run.status == "completed"
    assert "note: diagnostics [" in out and "start at step 5: steps 1-4 of" in out, out


def test_a_logger_on_a_finished_run_says_it_mirrors_nothing(tmp_path, capsys):
    cfg = tiny(tmp_path, max_steps=2)
    train(cfg, progress=False)
    capsys.readouterr()
    run = train(cfg.replace(logger="tensorboard"), progress=False)
    out = capsys.readouterr().out
    assert run.reused
    assert "is finished, so logger='tensorboard' mirrors nothing" in out, out


def test_training_compiles_what_compile_scope_names(tmp_path, monkeypatch):
    """The loop hands compile_scope to compile_gpt (aot_eager here: the wiring, not inductor, is under test;
    tests/test_compile_grads.py checks the blocks scope's gradients)."""
    scopes = []

    def traced(model, scope="model", backend="inductor"):
        scopes.append(scope)
        return compile_gpt(model, scope, backend="aot_eager")
    monkeypatch.setattr(loop, "compile_gpt", traced)
    torch._dynamo.reset()
    cfg = TrainConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, batch_size=2, max_docs=20, tokenizer="gpt2-256",
                      max_steps=2, eval_interval=2, eval_iters=1, compile=True, compile_scope="blocks",
                      out_dir=str(tmp_path))
    run = loop.train(cfg, progress=False)
    assert scopes == ["blocks"] and run.status == "completed"
