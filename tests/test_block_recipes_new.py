"""The block quantizers and named recipes of issue 30, each against an oracle someone else wrote or a hand reference
from the paper's equations (named in each test; one copy of each in numerics/oracles.py, which the fidelity report
uses too): fp8_block (torchao's own CPU reference functions; pow2 by the hand reference of TE's rule), MXINT8 (gfloat's
OCP MX INT8 block quantizer), NVINT4 / UE5M3 / 4/6 (hand references, each checked against a library where one
overlaps), and every new recipe training through the CLI."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from altgrad_lib.choices import BLOCK_SWITCHES
from altgrad_lib.numerics import oracles
from altgrad_lib.numerics.block_scaling import BlockScaling, block_qdq
from altgrad_lib.numerics.formats import get_format
from altgrad_lib.quantize.recipes import canonical_recipe, get_policy

NEW_RECIPES = ("fp8_blockwise", "mxint8", "nvint4", "amdfp4", "quartet2_nvidia", "tetrajet_v2", "fp4_all_the_way")
E4M3 = get_format("E4M3")


def _blocky(*shape: int, seed: int = 0) -> torch.Tensor:
    """Normal values with a different magnitude (2^-12 .. 2^12) per 16 columns and a few outliers."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g)
    mag = torch.exp2(torch.randint(-12, 13, (shape[-1] // 16 + 1,), generator=g).float())
    x = x * mag.repeat_interleave(16)[: shape[-1]]
    x.view(-1)[:: 97] *= 40.0
    return x


# ------------------------------------------------------------------------------------------ fp8_block vs torchao

def _torchao_blockwise_refs() -> dict:
    """torchao's pure-torch references torch_blockwise_scale_act_quant_lhs / _weight_quant, compiled from the installed
    torchao source (oracles.torchao_blockwise_functions: their module imports triton, which a CPU machine lacks)."""
    pytest.importorskip("torchao")
    try:
        return oracles.torchao_blockwise_functions()
    except ImportError as e:
        pytest.skip(str(e))


def test_fp8_block_matches_torchao_reference_bit_for_bit():
    ref = _torchao_blockwise_refs()
    x = _blocky(6, 384)
    q, s_inv = ref["torch_blockwise_scale_act_quant_lhs"](x.contiguous(), 128)
    want = (q.float().reshape(6, 3, 128) * s_inv.reshape(6, 3, 1)).reshape(6, 384)
    got, _, _ = block_qdq(x, E4M3, BlockScaling("fp8_block"))
    assert torch.equal(got, want)
    assert torch.equal(oracles.torchao_fp8_blockwise(x), want)        # the wrapper the fidelity report uses
    w = _blocky(256, 384, seed=1)
    qw, sw_inv = ref["torch_blockwise_scale_weight_quant"](w.contiguous(), 128)
    want_w = (qw.float().reshape(2, 128, 3, 128) * sw_inv.reshape(2, 1, 3, 1)).reshape(256, 384)
    got_w, _, _ = block_qdq(w, E4M3, BlockScaling("fp8_block", tile_2d=True))
    assert torch.equal(got_w, want_w)
    assert torch.equal(oracles.torchao_fp8_blockwise(w, tile_2d=True), want_w)
    # along another axis (a GEMM's column-wise copy): the same blocks on the transpose
    got_t, _, _ = block_qdq(x.t().contiguous(), E4M3, BlockScaling("fp8_block"), axis=0)
    assert torch.equal(got_t.t(), want)


def test_fp8_block_partial_blocks_of_small_dims_are_zero_padded_blocks():
    """A dim below 128 (the tiny models) is one partial block: torchao's reference on the zero-padded tensor."""
    ref = _torchao_blockwise_refs()
    x = _blocky(5, 80, seed=2)
    pad = torch.nn.functional.pad(x, (0, 48))
    q, s_inv = ref["torch_blockwise_scale_act_quant_lhs"](pad.contiguous(), 128)
    want = (q.float() * s_inv.reshape(5, 1))[:, :80]
    got, _, _ = block_qdq(x, E4M3, BlockScaling("fp8_block"))
    assert torch.equal(got, want) and torch.equal(oracles.torchao_fp8_blockwise(x), want)
    w = _blocky(48, 200, seed=3)
    wpad = torch.nn.functional.pad(w, (0, 56, 0, 80))
    qw, sw_inv = ref["torch_blockwise_scale_weight_quant"](wpad.contiguous(), 128)
    want_w = (qw.float().reshape(1, 128, 2, 128) * sw_inv.reshape(1, 1, 2, 1)).reshape(128, 256)[:48, :200]
    got_w, _, _ = block_qdq(w, E4M3, BlockScaling("fp8_block", tile_2d=True))
    assert torch.equal(got_w, want_w) and torch.equal(oracles.torchao_fp8_blockwise(w, tile_2d=True), want_w)


def test_fp8_block_hand_reference_agrees_with_torchao_and_pow2_scales_are_te_rule():
    """oracles.fp8_block_reference (hand reference from TE's compute_scale_from_amax) equals torchao's functions where
    both apply (FP32 scales), which checks the hand reference; with pow2 (force_pow_2_scales: s = 2^floor(log2(448 /
    amax)), which no library here has) it is the oracle, 1x128 and 128x128."""
    x = _blocky(3, 256, seed=4)
    w = _blocky(200, 256, seed=9)
    if importlib.util.find_spec("torchao") is not None:
        assert torch.equal(oracles.fp8_block_reference(x), oracles.torchao_fp8_blockwise(x))
        assert torch.equal(oracles.fp8_block_reference(w, tile_2d=True), oracles.torchao_fp8_blockwise(w, tile_2d=True))
    got, _, _ = block_qdq(x, E4M3, BlockScaling("fp8_block", pow2=True))
    assert torch.equal(got, oracles.fp8_block_reference(x, pow2=True))
    got_w, _, _ = block_qdq(w, E4M3, BlockScaling("fp8_block", pow2=True, tile_2d=True))
    assert torch.equal(got_w, oracles.fp8_block_reference(w, tile_2d=True, pow2=True))
    assert not torch.equal(got, oracles.fp8_block_reference(x))      # pow2 changes the answer on this input


# ------------------------------------------------------------------------------------------ MXINT8 vs gfloat

def test_mxint8_matches_gfloat_ocp_block_quantizer():
    """gfloat's format_info_mxint8 (OCP MX INT8, E8M0 FLOOR scale 2^(floor(log2 amax) - 0), RNE). Where gfloat
    rounds to the two's complement code -2 (k = -128), AltGrad's symmetric element gives -127/64 (microxcaling's
    clamp, formats_block.py): the test checks both the agreement and exactly that difference."""
    gfloat = pytest.importorskip("gfloat")
    from gfloat.block import compute_scale_amax, quantize_block
    from gfloat.formats import format_info_mxint8

    x = _blocky(4, 128, seed=5)
    x[0, :32] = torch.linspace(-1.999, 1.0, 32)          # scaled values near -2: gfloat's -128 code
    got, _, _ = block_qdq(x, get_format("INT8_OCP"), BlockScaling("mx"))
    for r in range(4):
        for b in range(4):
            blk = x[r, b * 32:(b + 1) * 32].double().numpy()
            want = torch.from_numpy(np.asarray(quantize_block(format_info_mxint8, blk, compute_scale_amax,
                                                              gfloat.RoundMode.TiesToEven), dtype=np.float64))
            scale = compute_scale_amax(0, blk)
            mine = got[r, b * 32:(b + 1) * 32].double()
            at_m2 = want == -2.0 * scale
            assert torch.equal(mine[~at_m2], want[~at_m2]), (r, b)
            assert torch.equal(mine[at_m2], torch.full_like(mine[at_m2], -127 / 64 * scale)), (r, b)
    assert bool((x[0, :32] < -1.9921875).any())          # the -2 case occurs in this input


# ------------------------------------------------------------------------------------------ NVINT4, UE5M3: hand refs
# oracles.nv_reference: NVFP4's two-level scale from the NVFP4 report's equations, one block at a time, elements by
# a library's cast (ml_dtypes E2M1) or the integer grid's definition (INT4: torch.round, clamped to +-7)

def test_nv_hand_reference_agrees_with_torchao_where_both_apply():
    """The hand reference is itself checked: on plain NVFP4 (E2M1, E4M3 scales, 1x16) it equals torchao's to_nvfp4."""
    pytest.importorskip("torchao")
    x = _blocky(8, 64, seed=10)
    assert torch.equal(oracles.nv_reference(x), oracles.torchao_nvfp4(x))


def test_nvint4_matches_hand_reference_from_the_paper():
    """NVINT4 (arXiv 2510.25602; fouroversix's nvint4: max 7, E4M3 scales, static 6 rule): integers in [-7, 7],
    round half to even (torch.round), NVFP4's two-level scale with fmax 7; 1x16 and 16x16 (the recipe's weights)."""
    x = _blocky(32, 64, seed=6)
    got, _, _ = block_qdq(x, get_format("INT4"), BlockScaling("nvfp4"))
    assert torch.equal(got, oracles.nv_reference(x, "INT4"))
    got2, _, _ = block_qdq(x, get_format("INT4"), BlockScaling("nvfp4", tile_2d=True))
    assert torch.equal(got2, oracles.nv_reference(x, "INT4", tile_2d=True))


def test_ue5m3_block_scales_match_hand_reference():
    """amdfp4's unsigned E5M3 scales (bias 15, max 114688): the scale grid from its definition (oracles.ue5m3_round,
    itself checked here against gfloat's rounding of the same grid), E2M1 elements from ml_dtypes."""
    pytest.importorskip("ml_dtypes")
    gfloat = pytest.importorskip("gfloat")
    v = torch.exp2(torch.linspace(-14.0, 16.8, 4001))                  # the grid's normal range and past its max
    want = gfloat.round_ndarray(oracles.gfloat_format_info("UE5M3"), v.double().numpy(), sat=True)
    assert torch.equal(oracles.ue5m3_round(v).double(), torch.from_numpy(want))
    x = _blocky(3, 48, seed=7)
    got, _, _ = block_qdq(x, get_format("E2M1"), BlockScaling("nvfp4", scale_fmt="UE5M3"))
    assert torch.equal(got, oracles.nv_reference(x, scale_fmt="UE5M3"))


def test_ue5m3_scales_are_not_torchaos_e4m3_scales():
    """Where a block's scale is below E4M3's range relative to the tensor amax, UE5M3 keeps it and torchao's E4M3 path
    clamps: the reference of an amdfp4 operand must be the UE5M3 one (the fidelity report once showed torchao)."""
    pytest.importorskip("torchao")
    x = _blocky(2, 64, seed=11)
    x[0, 16:32] *= 1e-5                                               # one block far below the tensor amax
    got, _, _ = block_qdq(x, get_format("E2M1"), BlockScaling("nvfp4", scale_fmt="UE5M3"))
    assert torch.equal(got, oracles.nv_reference(x, scale_fmt="UE5M3"))
    assert not torch.equal(got, oracles.torchao_nvfp4(x))


def test_four_over_six_matches_hand_reference():
    """4/6 from Cook et al. (arXiv 2512.02010) as their reference code states it: tensor scale amax / (6 · 256), per
    block the E4M3 scale for amax -> 6 and for amax -> 4, each block's elements rounded to nearest with both, the
    one with the lower sum of squared errors kept (a tie keeps 6). E2M1 rounding by ml_dtypes."""
    pytest.importorskip("ml_dtypes")
    x = _blocky(4, 64, seed=8)
    want, chose4 = oracles.nv_reference(x, four_over_six=True, with_choice=True)
    got, _, _ = block_qdq(x, get_format("E2M1"), BlockScaling("nvfp4", four_over_six=True))
    assert torch.equal(got, want)
    assert 0 < sum(chose4) < 16                 # both choices occur, so the selection itself is tested
    w = _blocky(32, 64, seed=12)
    got_w, _, _ = block_qdq(w, get_format("E2M1"), BlockScaling("nvfp4", four_over_six=True, tile_2d=True))
    want_w, chose4_w = oracles.nv_reference(w, four_over_six=True, tile_2d=True, with_choice=True)
    assert torch.equal(got_w, want_w) and 0 < sum(chose4_w) < len(chose4_w)


# ------------------------------------------------------------------------------------------ recipes

def test_new_recipes_and_their_fields():
    s = get_policy("fp8_blockwise").spec_for("mlp_up")
    assert {s.input.fmt.name, s.weight.fmt.name, s.grad_output.fmt.name} == {"E4M3"}
    assert s.weight.scaling == BlockScaling("fp8_block", block_size=128, tile_2d=True)
    assert s.input.scaling == s.grad_output.scaling == BlockScaling("fp8_block") and s.gemm.rht == ()
    assert get_policy("fp8_blockwise:pow2_scales").spec_for("mlp_up").input.scaling.pow2
    q = get_policy("quartet2_nvidia").spec_for("mlp_up")
    assert q.grad_output.scaling.headroom == 16 / 17 and q.grad_output.rounding == "stochastic"
    assert get_policy("quartet2_nvidia:disable_sr_scale").spec_for("mlp_up") == get_policy("nvfp4").spec_for("mlp_up")
    t = get_policy("tetrajet_v2").spec_for("mlp_up")
    assert t.gemm.rht == ("dgrad", "wgrad") and t.gemm.rht_dim == 32 and not t.weight.scaling.tile_2d
    assert {(g, r) for g, r, _ in t.gemm.overrides} == {("dgrad", "weight"), ("wgrad", "input")}
    assert {(g, r) for g, r, _ in get_policy("tetrajet_v2:wgrad_hp").spec_for("mlp_up").gemm.overrides} == {
        ("dgrad", "weight")}
    f = get_policy("fp4_all_the_way").spec_for("mlp_up")
    assert f.input.rounding == f.weight.rounding == "nearest" and f.grad_output.rounding == "stochastic"
    assert all(sp.rounding == "stochastic" for _, _, sp in f.gemm.overrides)
    assert get_policy("nvint4:rht_all").spec_for("mlp_up").gemm.rht == ("fprop", "dgrad", "wgrad")
    assert get_policy("amdfp4").spec_for("mlp_up").input.scaling.scale_fmt == "UE5M3"
    assert get_policy("mxint8").spec_for("mlp_up").input.fmt.name == "INT8_OCP"
    # short_str and the layer table show the new fields
    strs = [get_policy(r).short_str() for r in ("fp8_blockwise:pow2_scales", "nvfp4:four_over_six", "amdfp4",
                                                 "tetrajet_v2", "nvint4")]
    for needle, s_ in zip(("fb128x128p2", "nv16-46", "nv16-ue5m3", "rht32:dgrad+wgrad", "int4/nv16"), strs):
        assert needle in s_, (needle, s_)


def test_alias_is_recorded_canonically_and_bad_switches_are_one_line():
    from altgrad_lib.training.config import ConfigError, TrainConfig

    assert canonical_recipe("MXFP8_RCEIL:hp_last=1") == "mxfp8:rceil:hp_last=1"
    a, b = TrainConfig(recipe="mxfp8_rceil"), TrainConfig(recipe="mxfp8:rceil")
    assert (a.recipe, a.config_hash()) == (b.recipe, b.config_hash())
    for bad, needle in [("fp8_blockwise:rceil", r"valid switches: \(.pow2_scales."),
                        ("tetrajet_v2:disable_2d", "unknown switch 'disable_2d' for tetrajet_v2"),
                        ("mxint9", "did you mean 'mxint8'")]:
        with pytest.raises(ConfigError, match=needle) as e:
            TrainConfig(recipe=bad)
        assert "\n" not in str(e.value)
    for kw, needle in [({"kind": "mx", "pow2": True}, "pow2=True is only defined for kind 'fp8_block'"),
                       ({"kind": "mx", "tile_2d": True}, "tile_2d=True is only defined"),
                       ({"scale_fmt": "E8M0"}, r"valid choices: \('E4M3', 'UE5M3'\)"),
                       ({"kind": "fp8_block", "four_over_six": True}, "only defined for kind 'nvfp4'")]:
        with pytest.raises(ValueError, match=needle):
            BlockScaling(**kw)


def test_every_registered_recipe_has_a_builder():
    from altgrad_lib.quantize.block_recipes import BUILDERS
    assert set(BUILDERS) == set(BLOCK_SWITCHES) and set(NEW_RECIPES) <= set(BLOCK_SWITCHES)


@pytest.mark.parametrize("recipe", [*NEW_RECIPES, "nvfp4:four_over_six", "mxfp8_rceil"])
def test_new_recipe_trains_through_the_cli(recipe, tmp_path, monkeypatch, capsys):
    import yaml

    from altgrad_lib.cli import main
    monkeypatch.setenv("ALTGRAD_OFFLINE", "1")
    out = tmp_path / "runs"
    rc = main(["train", "-p", "n_layer=1", "-p", "n_head=2", "-p", "n_embd=32", "-p", "block_size=32",
               "-p", "batch_size=4", "-p", "max_docs=30", "-p", "tokenizer=gpt2-512", "-p", "max_steps=2",
               "-p", "eval_iters=1", "-p", f"recipe={recipe}", "-p", f"out_dir={out}", "-p", "run_name=r",
               "--no-progress"])
    printed = capsys.readouterr().out
    assert rc == 0 and "status: completed" in printed, printed[-2000:]
    cfg = yaml.safe_load((out / "r" / "config.yaml").read_text())
    assert cfg["recipe"] == canonical_recipe(recipe)
    import pandas as pd
    m = pd.read_csv(out / "r" / "metrics.csv")
    loss = m.loc[m["name"] == "train/loss", "value"]
    assert len(loss) == 2 and np.isfinite(loss).all()
