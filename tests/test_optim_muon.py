"""optim/muon.py Muon: equal to torch.optim.Muon, the modded-nanogpt split, the optimizer settings and their
one-line refusals, training with every named recipe (tiny runs)."""
from __future__ import annotations

import contextlib

import pytest
import torch
import torch.optim._muon as torch_muon

from altgrad_lib.choices import BLOCK_RECIPES, NAMED_RECIPES
from altgrad_lib.errors import ConfigError
from altgrad_lib.numerics.matrix import newton_schulz
from altgrad_lib.optim.factory import build_optimizer, muon_split
from altgrad_lib.optim.muon import Muon
from altgrad_lib.training.build import build_model
from altgrad_lib.training.loop import TrainConfig, train
from altgrad_lib.training.preflight import check_policy, check_settings

TINY = dict(n_layer=1, n_head=2, n_embd=32, block_size=32, batch_size=4, max_docs=50, tokenizer="gpt2-512",
            max_steps=2, warmup_steps=1, eval_interval=0, eval_iters=1, ckpt_interval=0, lr=2e-3)
SHAPES = [(48, 16), (16, 64), (16, 16)]      # tall, wide, square: the three NS orientations and lr factors


@contextlib.contextmanager
def torch_muon_in_fp32():
    """torch.optim.Muon casts its NS input to bf16 (`grad.bfloat16()`); with that one cast made a copy, its code runs
    the same algorithm in fp32 (no other line of it changes)."""
    orig = torch.Tensor.bfloat16
    torch.Tensor.bfloat16 = lambda self: self.clone()
    try:
        yield
    finally:
        torch.Tensor.bfloat16 = orig


@pytest.mark.parametrize("shape", SHAPES)
def test_newton_schulz_is_torchs_bit_for_bit_in_fp32(shape):
    g = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    with torch_muon_in_fp32():
        ref = torch_muon._zeropower_via_newtonschulz(g, (3.4445, -4.7750, 2.0315), 5, 1e-7)
    assert torch.equal(newton_schulz(g, 5), ref)       # the same fp32 operations in the same order


def test_muon_steps_equal_torch_optim_muon_in_fp32():
    """Same parameters, gradients and hyper-parameters, 6 steps, weight decay on, Nesterov on.
    Tolerance: NS is bit-identical (test above); the weight update w (1 - lr wd) - lr r O rounds its two products
    with lr as an fp32 tensor here (GridOptimizer keeps the LR a tensor so a schedule never recompiles) and as a
    Python double in torch, so each step may differ by up to one fp32 ulp of |w| per rounding: after k steps at
    most 2k ulp(max|w|), and the differences feed back into the gradients only through the test's fixed gradients
    (none: they are drawn independently of w)."""
    gen = torch.Generator().manual_seed(0)
    ws = [torch.randn(s, generator=gen) for s in SHAPES]
    ours = [torch.nn.Parameter(w.clone()) for w in ws]
    ref = [torch.nn.Parameter(w.clone()) for w in ws]
    a = Muon([{"params": ours, "muon": True}], lr=0.02, weight_decay=0.1, momentum=0.95, nesterov=True)
    b = torch.optim.Muon(ref, lr=0.02, weight_decay=0.1, momentum=0.95, nesterov=True)
    k = 6
    for _ in range(k):
        grads = [torch.randn(s, generator=gen) for s in SHAPES]
        for p, q, g in zip(ours, ref, grads):
            p.grad, q.grad = g.clone(), g.clone()
        a.step()
        with torch_muon_in_fp32():
            b.step()
    for p, q in zip(ours, ref):
        ulp = torch.finfo(torch.float32).eps * q.detach().abs().max()
        assert (p - q).abs().max() <= 2 * k * ulp
        assert not torch.equal(p.detach(), torch.tensor(0.0))


def test_adjust_lr_matches_torchs_factors():
    for shape in SHAPES:
        for kind in ("original", "match_rms_adamw"):
            from altgrad_lib.optim.muon import adjust_lr
            assert adjust_lr(kind, torch.Size(shape)) == torch_muon._adjust_lr(1.0, kind, torch.Size(shape))


def _model(cfg):
    torch.manual_seed(0)
    model, _ = build_model(cfg.model_config, 512, check_policy(cfg))
    return model


def test_split_is_modded_nanogpts_and_groups_carry_their_lr():
    cfg = TrainConfig.from_dict({**TINY, "optimizer": "muon", "optim": {"lr": 0.05, "adam_lr": 3e-3}})
    model = _model(cfg)
    split = muon_split(model)
    muon = sorted(n for n, k in split.items() if k == "muon")
    assert muon == sorted(f"transformer.h.0.{m}.weight" for m in ("attn.c_attn", "attn.c_proj", "mlp.c_fc",
                                                                  "mlp.c_proj"))
    assert {n for n, k in split.items() if k == "adamw"} >= {"transformer.wte.weight", "transformer.wpe.weight",
                                                             "transformer.ln_f.weight"}
    opt = build_optimizer(model, cfg.optim_config)
    for g in opt.param_groups:
        assert g["lr"] == (0.05 if g["muon"] else 3e-3) and g["lr_mult"] == g["lr"] / 2e-3
        assert g["momentum"] == 0.95 and g["ns_steps"] == 5


@pytest.mark.parametrize("optim, match", [
    ({"ns_steps": 0}, "ns_steps=0 is invalid"),
    ({"ns_steps": -1}, "ns_steps=-1 is invalid"),
    ({"adjust_lr": "rms"}, "adjust_lr='rms' is invalid"),
    ({"storage": "error_feedback"}, "error_feedback"),
    ({"ns_accum": "fp22"}, "needs optim.ns_fmt"),
])
def test_bad_settings_fail_with_the_config(optim, match):
    with pytest.raises(ConfigError, match=match) as e:
        TrainConfig.from_dict({**TINY, "optimizer": "muon", "optim": optim})
    assert "\n" not in str(e.value)


def test_no_hidden_matrix_and_unsigned_momentum_fail_in_preflight():
    frozen = TrainConfig.from_dict({**TINY, "optimizer": "muon", "freeze_blocks": True})
    with pytest.raises(ConfigError, match="no trainable 2-D hidden weight") as e:
        check_settings(frozen)
    assert "\n" not in str(e.value)
    unsigned = TrainConfig.from_dict({**TINY, "optimizer": "muon", "optim": {"state_m": "UE5M3"}})
    with pytest.raises(ConfigError, match="unsigned but m is signed") as e:
        check_settings(unsigned)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("recipe", NAMED_RECIPES + BLOCK_RECIPES + ("fmt:E3M4",))
@pytest.mark.parametrize("optimizer", ["muon", "manifold_muon"])
def test_every_recipe_passes_the_preflight(recipe, optimizer):
    check_settings(TrainConfig.from_dict({**TINY, "optimizer": optimizer, "recipe": recipe}))


@pytest.mark.parametrize("recipe", ["hp", "fp8_hybrid", "nvfp4"])
def test_tiny_muon_runs_train(tmp_path, recipe):
    run = train(TrainConfig.from_dict({**TINY, "optimizer": "muon", "recipe": recipe, "out_dir": str(tmp_path)}),
                verbose=False)
    assert run.status == "completed"


RESUME = [("muon", {"storage": "grid_sr", "state_m": "E4M3", "state_min_numel": 0, "state_rounding": "stochastic",
                    "ns_fmt": "fmt:E3M4", "track_stats": True}),
          ("manifold_muon", {"msign": "ns", "ns_fmt": "bf16", "dual_steps": 5, "state_m": "E4M3"})]


@pytest.mark.parametrize("optimizer, optim", RESUME, ids=[c[0] for c in RESUME])
def test_resume_after_crash_is_bit_exact(tmp_path, optimizer, optim):
    """As tests/test_optim_factory.py for the other optimizers: the momentum codes, SR counters and NS GEMM state
    are in the checkpoint, so a crashed run resumes to the same bits."""
    from helpers import Crash, assert_same_state, crash_at

    kw = {**TINY, "max_steps": 6, "ckpt_interval": 3, "recipe": "fp8_hybrid", "optimizer": optimizer,
          "optim": optim}
    ref = train(TrainConfig.from_dict({**kw, "out_dir": str(tmp_path / "ref")}), progress=False, verbose=False)
    cfg = TrainConfig.from_dict({**kw, "out_dir": str(tmp_path / "crash")})
    with pytest.raises(Crash):
        train(cfg, progress=False, verbose=False, on_step=crash_at(4))
    run = train(cfg, progress=False, verbose=False)
    assert run.status == "completed"
    sa = torch.load(ref.dir / "checkpoints" / "last.pt", weights_only=False)
    sb = torch.load(run.dir / "checkpoints" / "last.pt", weights_only=False)
    assert_same_state(sa["model"], sb["model"], "model")
    assert_same_state(sa["optimizer"], sb["optimizer"], "optimizer")
