"""Tests for altgrad_lib.monitors.diagnostics through train(): monitors never change training (bit-identical
with diagnostics on and off), survive a crash + resume with identical files, agree with the training step's
own counters, say "unavailable" instead of a silent zero under torch.compile, and do no tensor work at all
on steps that log nothing."""
from __future__ import annotations

import contextlib
import math
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from altgrad_lib.monitors import read_diagnostics, read_events
from altgrad_lib.monitors.diagnostics import MONITOR_CLASSES, Diagnostics
from helpers import SR_DELAYED

from altgrad_lib.monitors.config import MONITORS, DiagnosticsConfig
from altgrad_lib.training.loop import TrainConfig, train

# SR_DELAYED + dropout: every hidden state (SR generators, amax history, torch RNG) is exercised
TINY = dict(n_layer=1, n_head=2, n_embd=32, block_size=32, batch_size=4, max_docs=50, tokenizer="gpt2-512",
            max_steps=6, warmup_steps=2, eval_interval=3, eval_iters=1, ckpt_interval=2, dropout=0.1,
            recipe=SR_DELAYED)
FULL1 = {"preset": "full", "interval": 1}


def tiny(tmp: Path, **kw) -> TrainConfig:
    return TrainConfig.from_dict({**TINY, "out_dir": str(tmp), **kw})


def result_lines(run_dir: Path) -> list[str]:
    return [ln for ln in (run_dir / "metrics.csv").read_text().splitlines() if ",perf/" not in ln]


def final_state(run_dir: Path) -> dict:
    st = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    return {"model": st["model"], "optimizer": st["optimizer"]["state"]}


def assert_same(a, b, path=""):
    if torch.is_tensor(a):
        assert torch.equal(a, b), path
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            assert_same(a[k], b[k], f"{path}.{k}")
    else:
        assert a == b, path


class Crash(RuntimeError):
    pass


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    off = train(tiny(tmp_path_factory.mktemp("off")), progress=False, verbose=False)
    on = train(tiny(tmp_path_factory.mktemp("on"), diagnostics=FULL1), progress=False, verbose=False)
    return off, on


def test_every_group_has_one_monitor_class():
    """config.MONITORS (torch-free names) and diagnostics.MONITOR_CLASSES name the same groups, each class once."""
    assert set(MONITOR_CLASSES) == set(MONITORS) and len(MONITORS) == len(set(MONITORS))
    assert len(set(MONITOR_CLASSES.values())) == len(MONITOR_CLASSES)


def test_diagnostics_on_and_off_train_bit_identically(runs):
    off, on = runs
    assert result_lines(on.dir) == result_lines(off.dir)
    assert_same(final_state(on.dir), final_state(off.dir))
    assert not (off.dir / "diagnostics.csv").exists()
    df = read_diagnostics(on.dir)
    assert sorted(df["step"].unique()) == [1, 2, 3, 4, 5, 6]
    groups = {"counters": "ctr.sat_frac", "gradients": "grad_norm", "numerics": "underflow_frac",
              "shadow": "grad_snr_db", "weights": "staleness", "grid": "stall_rate", "activations": "kurtosis"}
    for g, metric in groups.items():
        assert (df["metric"] == metric).any(), g
    assert set(df[df["metric"] == "underflow_frac"]["role"]) == {"X", "W", "dY"}
    assert df["value"].notna().all()               # eager: every number measurable
    # the numerics group's |x·s| histograms of X, W, dY: every diagnostic step, fractions summing to 1
    h = df[df["metric"].str.startswith("hist.log2xs:")]
    assert set(h["role"]) == {"X", "W", "dY"} and sorted(h["step"].unique()) == [1, 2, 3, 4, 5, 6]
    assert h.groupby(["step", "layer", "role"])["value"].sum().to_numpy() == pytest.approx(1.0)


def test_crash_and_resume_leave_the_same_files(runs, tmp_path):
    _, on = runs
    cfg = tiny(tmp_path, diagnostics=FULL1)

    def crash(step, m):
        if step == 5:       # checkpoint at 4, diagnostics of step 5 already written
            raise Crash()
    with pytest.raises(Crash):
        train(cfg, progress=False, verbose=False, on_step=crash)
    assert 5 in set(read_diagnostics(cfg.run_dir)["step"])
    run = train(cfg, progress=False, verbose=False)
    for name in ("diagnostics.csv", "events.csv"):
        a, b = run.dir / name, on.dir / name
        assert a.exists() == b.exists()
        if a.exists():
            assert a.read_text() == b.read_text(), name
    assert result_lines(run.dir) == result_lines(on.dir)


def test_hessian_rows_leave_training_bit_identical_and_resume(runs, tmp_path):
    off, _ = runs
    hess = {"preset": "cheap", "hessian_interval": 2, "hessian_iters": 2}   # bit-identity / resume need no more
    on = train(tiny(tmp_path / "on", diagnostics=hess), progress=False, verbose=False)
    assert result_lines(on.dir) == result_lines(off.dir)
    assert_same(final_state(on.dir), final_state(off.dir))
    df = read_diagnostics(on.dir)
    lam = df[(df["metric"] == "lambda_max") & (df["layer"] == "model")]
    assert sorted(lam["step"]) == [1, 2, 4, 6] and set(lam["role"]) == {"ste_surrogate"}
    assert lam["value"].notna().all() and (lam["value"] != 0).all()
    assert (df[df["metric"] == "lr_lambda_max"]["layer"] == "transformer.h.0").any()
    cfg = tiny(tmp_path / "crash", diagnostics=hess)

    def crash(step, m):
        if step == 5:       # checkpoint at 4: the fixed batch (taken at step 1) must come back from it
            raise Crash()
    with pytest.raises(Crash):
        train(cfg, progress=False, verbose=False, on_step=crash)
    run = train(cfg, progress=False, verbose=False)
    assert (run.dir / "diagnostics.csv").read_text() == (on.dir / "diagnostics.csv").read_text()


def test_replay_agrees_with_the_training_steps_own_counters(runs):
    # counters come from the real step, numerics from the eager replay on a private copy: same numbers
    df = read_diagnostics(runs[1].dir).set_index(["step", "layer", "role", "metric"])["value"]
    n = 0
    for (step, layer, role, metric), v in df.items():
        if metric == "ctr.sat_frac":
            assert v == df[(step, layer, role, "overflow_frac")], (step, layer, role)
            assert df[(step, layer, role, "ctr.flush_frac")] == df[(step, layer, role, "flush_frac")]
            assert df[(step, layer, role, "ctr.eps_hits")] == df[(step, layer, role, "eps_hits")]
            n += 1
    assert n == 6 * 4 * 3


def _compiled_vs_eager(tmp_path: Path, backend: str | None) -> tuple:
    """Two steps of a tiny fp8_hybrid GPT (eager, or compiled with `backend`) with counters + numerics."""
    from altgrad_lib.state import snapshot_state
    from altgrad_lib.model import GPT, GPTConfig
    from altgrad_lib.quantize.convert import quantize_model
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=16, vocab_size=128))
    quantize_model(model, "fp8_hybrid", verbose=False)
    tmp_path.mkdir()
    d = Diagnostics(DiagnosticsConfig(groups=("counters", "numerics"), interval=1), tmp_path, model,
                    compiled=backend is not None)
    d.start(0, None)
    fwd = torch.compile(model, backend=backend) if backend else model
    g = torch.Generator().manual_seed(1)
    for step in (1, 2):
        x, y = torch.randint(0, 128, (4, 16), generator=g), torch.randint(0, 128, (4, 16), generator=g)
        snap = snapshot_state(model)
        model.zero_grad(set_to_none=True)
        _, loss = fwd(x, y)
        loss.backward()
        d.after_backward(step, x, y, snap)
        with torch.no_grad():
            for p in model.parameters():
                p -= 1e-2 * p.grad
        d.after_step(step, loss.item(), 1.0, 1e-2)
    d.close()
    dy_seen = int(model.transformer.h[0].mlp.c_fc.g_quant.n_elements)
    return read_diagnostics(tmp_path), read_events(tmp_path), dy_seen


def test_compiled_run_reports_unavailable_dy_counters_and_replays_them(tmp_path):
    eager, _, dy_eager = _compiled_vs_eager(tmp_path / "e", None)
    comp, ev, dy_comp = _compiled_vs_eager(tmp_path / "c", "aot_eager")
    assert dy_eager > 0 and dy_comp == 0          # the compiled step really does not count dY ...
    dy = comp[(comp["role"] == "dY") & comp["metric"].str.startswith("ctr.")]
    assert len(dy) == 2 * 4 * 5 and dy["value"].isna().all()         # ... so the monitor says NaN, not 0
    assert (ev["kind"] == "unavailable:counters").sum() == 4          # once per dY quantizer, not every step
    assert eager[eager["metric"].str.startswith("ctr.")]["value"].notna().all()
    e = eager.set_index(["step", "layer", "role", "metric"])["value"]
    c = comp.set_index(["step", "layer", "role", "metric"])["value"]
    rep = [k for k in e.index if k[3] in ("underflow_frac", "overflow_frac", "amax", "sqnr_db")]
    assert sum(k[2] == "dY" for k in rep) == 2 * 4 * 4
    for k in rep:                                   # the eager replay measures dY in compiled runs too
        assert math.isfinite(c[k]) and c[k] == pytest.approx(e[k], rel=1e-4, abs=1e-7), k
    for k in e.index:
        if k[2] in ("X", "W") and k[3].startswith("ctr."):
            assert c[k] == pytest.approx(e[k], rel=1e-4, abs=1e-7), k


class _CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def test_no_tensor_work_on_steps_that_log_nothing(tmp_path):
    from altgrad_lib.model import GPT, GPTConfig
    from altgrad_lib.quantize.convert import quantize_model
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=64))
    quantize_model(model, "fp8_hybrid", verbose=False)
    # hessian_iters=2: the busy step runs every monitor's code, and the idle check does not depend on how many
    # power iterations a due step runs (the default 20 made this test ~90 s under the dispatch-mode counter)
    d = Diagnostics(DiagnosticsConfig(preset="full", interval=5, hessian_interval=5, hessian_iters=2), tmp_path, model,
                    grad_clip=1.0)
    d.start(0, None)
    x = torch.randint(0, 64, (2, 8))
    _, loss = model(x, x)
    loss.backward()
    with _CountOps() as idle:
        d.after_backward(3, x, x, None)
        d.after_step(3, 4.0, 0.5, 1e-3)
    assert idle.ops == []
    with _CountOps() as busy:                               # the counter really sees monitor work
        d.after_backward(5, x, x, None)
        d.after_step(5, 4.0, 0.5, 1e-3)
    assert len(busy.ops) > 100
    d.close()
    assert set(read_diagnostics(tmp_path)["step"]) == {5}


def test_the_divergence_step_is_recorded(tmp_path):
    # lr=1e30: after one AdamW step the first LayerNorm overflows (as in test_train.py)
    cfg = tiny(tmp_path, recipe="fp8_hybrid", dropout=0.0, lr=1e30, min_lr=0.0, warmup_steps=0, grad_clip=0.0,
               diagnostics={"groups": ["numerics", "events"], "interval": 1})
    run = train(cfg, progress=False, verbose=False)
    assert run.diverged and run.divergence["step"] == 2
    ev = read_events(run.dir)
    assert ev[ev["kind"] == "loss_nonfinite"]["step"].tolist() == [2]
    df = read_diagnostics(run.dir)
    bad = df[(df["step"] == 2) & df["metric"].isin(["nan_in", "inf_in"]) & (df["value"] > 0)]
    assert "transformer.h.0.attn.c_attn" in set(bad["layer"])   # the replay sees the first quantized victim


def test_counters_without_counting_or_on_hardware_paths_say_unavailable(tmp_path):
    from altgrad_lib.model import GPT, GPTConfig
    from altgrad_lib.numerics.quantizer import Quantizer
    from altgrad_lib.quantize.convert import quantize_model
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=64))
    quantize_model(model, "fp8_hybrid", verbose=False)
    for m in model.modules():
        if isinstance(m, Quantizer):
            m.count = False
    d = Diagnostics(DiagnosticsConfig(groups=("counters",), interval=1), tmp_path / "nocount", model)
    d.start(0, None)
    d.after_backward(1, None, None, None)
    d.after_step(1, 1.0, 1.0, 1e-3)
    d.close()
    df = read_diagnostics(tmp_path / "nocount")
    assert len(df) == 4 * 3 * 5 and df["value"].isna().all()
    assert (read_events(tmp_path / "nocount")["kind"] == "unavailable:counters").sum() == 12

    hw = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=64))
    quantize_model(hw, {"name": "hw", "recipe": "fp8_hybrid", "backend": "scaled_mm"}, verbose=False)
    d = Diagnostics(DiagnosticsConfig(groups=("counters", "grid"), interval=1), tmp_path / "hw", hw,
                    backend="scaled_mm")
    d.start(0, None)
    d.after_backward(1, None, None, None)
    d.after_step(1, 1.0, 1.0, 1e-3)
    d.close()
    kinds = set(read_events(tmp_path / "hw")["kind"])
    assert kinds == {"unavailable:counters", "unavailable:grid"}


def test_a_finished_run_without_diagnostics_is_reused_with_a_note(runs, capsys):
    off, _ = runs
    again = train(tiny(off.dir.parent, diagnostics="cheap"), progress=False)
    assert again.reused and again.dir == off.dir
    assert "trained without diagnostics" in capsys.readouterr().out


def test_a_finished_run_reused_for_more_diagnostics_says_which_it_lacks(runs, capsys):
    """A run trained with diagnostics, re-asked with fisher_interval=5, was reused without Fisher rows and without a
    note (the note only came when diagnostics.csv was missing): diagnostics are no part of the hash."""
    _, on = runs
    capsys.readouterr()
    same = train(tiny(on.dir.parent, diagnostics=FULL1), progress=False)
    assert same.reused and "trained without diagnostics" not in capsys.readouterr().out
    more = train(tiny(on.dir.parent, diagnostics={**FULL1, "fisher_interval": 5}), progress=False)
    out = capsys.readouterr().out
    assert more.reused and more.dir == on.dir
    note = [ln for ln in out.splitlines() if "trained without diagnostics" in ln]
    assert len(note) == 1 and "['fisher']" in note[0] and "--no-resume" in note[0], out
    train(tiny(on.dir.parent, diagnostics={"preset": "full", "interval": 2}), progress=False)
    assert "(recorded @1)" in capsys.readouterr().out


def test_grid_storage_probe_sees_the_weights_training_uses(tmp_path, monkeypatch):
    # grid storage drops the recipe's weight quantizers (the stored weight is on the grid): the probe's copy
    # must be made after that, or its W rows and replayed X/dY describe a weight quantized a second time
    made = []
    orig = Diagnostics.for_run.__func__
    monkeypatch.setattr(Diagnostics, "for_run", classmethod(lambda cls, *a, **k: made.append(orig(cls, *a, **k))
                                                            or made[-1]))
    from altgrad_lib.quantize.linear import QuantizedLinear
    live = []
    cfg = tiny(tmp_path, recipe="fp8_hybrid", dropout=0.0, max_steps=2, eval_interval=0, ckpt_interval=0,
               optimizer="adamw", optim={"storage": "grid_sr"}, diagnostics={"groups": ["numerics"], "interval": 1})
    run = train(cfg, progress=False, verbose=False, on_model=live.append)
    assert run.status == "completed" and len(made) == 1
    mods = {n: m for n, m in live[0].named_modules() if isinstance(m, QuantizedLinear)}
    on_grid = {n for n, m in mods.items() if m.w_quant is None}
    assert on_grid and on_grid == {n for n in mods if "transformer.h." in n}   # lm_head stays high precision
    copy = dict(made[0].att.probe.copy.named_modules())
    assert {n for n in mods if copy[n].w_quant is None} == on_grid
    df = read_diagnostics(run.dir)
    assert not set(df[df["role"] == "W"]["layer"]) & on_grid          # no W quantization happens there
    assert set(df[df["role"] == "X"]["layer"]) >= on_grid            # X and dY are still measured


def test_per_gemm_overrides_are_monitored_and_removed_in_the_shadow(tmp_path):
    """An override (quantize/gemm_overrides.py) is its own quantizer: counter and replay rows under "<gemm>.<role>"
    agree (each override is called once per step), the role quantizers on the GEMM-faithful path get replay rows
    too, and the FP32 shadow removes the overrides as well (its gradients then equal an unquantized model's)."""
    recipe = {"name": "ov", "layers": {"*": {"input": "E4M3", "weight": "E4M3", "grad_output": "E5M2", "gemm": {
        "rht": [], "overrides": {"wgrad": {"input": "E5M2", "grad_output": {"fmt": "E4M3", "scaling": "delayed"}},
                                 "dgrad": {"weight": {"fmt": "E2M1", "scaling": "mx"}}}}}}}
    run = train(tiny(tmp_path, recipe=recipe, dropout=0.0, max_steps=2, diagnostics=FULL1), progress=False,
                verbose=False)
    df = read_diagnostics(run.dir).set_index(["step", "layer", "role", "metric"])["value"]
    roles = {r for (_, _, r, _) in df.index}
    assert {"X", "W", "dY", "wgrad.X", "wgrad.dY", "dgrad.W"} <= roles
    n = 0
    for (step, layer, role, metric), v in df.items():
        if metric == "ctr.sat_frac" and role in ("wgrad.X", "wgrad.dY"):
            assert v == df[(step, layer, role, "overflow_frac")], (step, layer, role)
            assert df[(step, layer, role, "ctr.flush_frac")] == df[(step, layer, role, "flush_frac")]
            n += 1
    assert n == 2 * 5 * 2          # steps x Linears (lm_head too: "*" covers it) x overridden per-tensor roles
    assert (df.xs("dgrad.W", level="role").xs("blk_log2s_std", level="metric") >= 0).all()   # block stats

    from altgrad_lib.model import GPT, GPTConfig
    from altgrad_lib.monitors.probe import Probe
    from altgrad_lib.quantize.convert import quantize_model
    torch.manual_seed(0)
    plain = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=16, vocab_size=128))
    quant = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=16, vocab_size=128))
    quant.load_state_dict(plain.state_dict())
    overrides = recipe["layers"]["*"]["gemm"]["overrides"]
    only = {"name": "only", "layers": {"*": {"gemm": {"rht": [], "overrides": overrides}}}}
    quantize_model(quant, only, verbose=False)
    x, y = torch.randint(0, 128, (2, 16)), torch.randint(0, 128, (2, 16))
    shadow = Probe(quant, contextlib.nullcontext).shadow_grads(x, y, None)
    _, loss = plain(x, y)
    loss.backward()
    for n_, p in plain.named_parameters():
        assert torch.allclose(shadow[n_], p.grad, rtol=1e-5, atol=1e-7), n_
    _, lq = quant(x, y)                                  # the overrides alone do change the gradients
    lq.backward()
    fc = dict(quant.named_parameters())["transformer.h.0.mlp.c_fc.weight"]
    assert not torch.allclose(fc.grad, dict(plain.named_parameters())["transformer.h.0.mlp.c_fc.weight"].grad)
