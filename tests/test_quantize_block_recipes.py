"""Named block recipes (nvfp4, mxfp4, mxfp8, mxfp6) and their switches; hp_last_blocks in quantize_model;
one training step of a tiny GPT through every recipe (finite loss and gradients)."""
from __future__ import annotations

import pytest
import torch

from altgrad_lib.numerics.block_scaling import BlockScaling
from altgrad_lib.model import GPT, GPTConfig
from altgrad_lib.quantize.linear import QuantizedLinear
from altgrad_lib.quantize.recipes import QuantPolicy, get_policy
from altgrad_lib.quantize.convert import quantize_model


def test_nvfp4_defaults_are_te_recipe():
    p = get_policy("nvfp4")
    s = p.spec_for("mlp_up")
    assert s.input.fmt.name == s.weight.fmt.name == s.grad_output.fmt.name == "E2M1"
    assert s.input.scaling == BlockScaling("nvfp4") and s.input.rounding == "nearest"
    assert s.weight.scaling == BlockScaling("nvfp4", tile_2d=True) and s.weight.rounding == "nearest"
    assert s.grad_output.scaling == BlockScaling("nvfp4") and s.grad_output.rounding == "stochastic"
    assert s.gemm.rht == ("wgrad",) and s.gemm.hp_gemms == ()
    assert p.spec_for("lm_head") is None and p.spec_for("attn_qkv") is not None


def test_switches():
    s = get_policy("nvfp4:disable_rht:disable_sr:disable_2d").spec_for("mlp_down")
    assert s.gemm.rht == () and s.grad_output.rounding == "nearest" and not s.weight.scaling.tile_2d
    p = get_policy("mxfp4:rceil:wgrad_hp:hp_attn:hp_last=1")
    s = p.spec_for("mlp_up")
    assert s.input.scaling == BlockScaling("mx", mode="rceil") and s.gemm.hp_gemms == ("wgrad",)
    assert p.spec_for("attn_qkv") is None and p.spec_for("attn_out") is None and p.hp_last_blocks == 1
    sh = get_policy("mxfp4:sr_headroom").spec_for("mlp_up")
    assert sh.grad_output.scaling.headroom == 0.75 and sh.input.scaling.headroom == 1.0
    s8 = get_policy("mxfp8").spec_for("mlp_up")
    assert s8.grad_output.fmt.name == "E4M3" and s8.gemm.rht == () and s8.grad_output.rounding == "nearest"
    s6 = get_policy("mxfp6").spec_for("mlp_up")
    assert (s6.input.fmt.name, s6.grad_output.fmt.name) == ("E2M3", "E3M2")
    for bad, needle in [("nvfp4:rceil", "unknown switch 'rceil' for nvfp4.*disable_rht"),
                        ("mxfp8:disable_rht", "unknown switch 'disable_rht' for mxfp8"),
                        ("nvfp4:hp_last=x", "hp_last='x'")]:
        with pytest.raises(ValueError, match=needle):
            get_policy(bad)


def test_policy_dict_round_trip_keeps_hp_last():
    p = get_policy("nvfp4:hp_last=1")
    assert QuantPolicy.from_dict(p.to_dict()) == p
    assert "hp_last_blocks" not in get_policy("fp8_hybrid").to_dict()       # old recipes: old dict
    assert QuantPolicy.from_dict({"recipe": "nvfp4:hp_last=2"}).hp_last_blocks == 2
    with pytest.raises(ValueError, match="hp_last_blocks=-1"):
        QuantPolicy(name="x", hp_last_blocks=-1)


def tiny():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=64, block_size=32, n_layer=3, n_head=2, n_embd=32))


def test_hp_last_blocks_keeps_the_last_blocks_high_precision():
    m = tiny()
    rows = quantize_model(m, "nvfp4:hp_last=1", verbose=False)
    kept = {r["module"] for r in rows if r["backend"] == "-"}
    assert {f"transformer.h.2.{n}" for n in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")} <= kept
    assert not any(k.startswith(("transformer.h.0.", "transformer.h.1.")) for k in kept)


@pytest.mark.parametrize("recipe", ["nvfp4", "nvfp4:disable_rht:disable_sr:disable_2d", "mxfp4", "mxfp8", "mxfp6"])
def test_recipe_trains_one_step(recipe):
    m = tiny()
    quantize_model(m, recipe, verbose=False)
    assert all(q.gemm is not None for q in m.modules() if isinstance(q, QuantizedLinear))
    idx = torch.randint(0, 64, (4, 32), generator=torch.Generator().manual_seed(0))
    _, loss = m(idx, idx)
    loss.backward()
    grads = [p.grad for p in m.parameters() if p.grad is not None]
    assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in grads)
    fc = m.transformer.h[0].mlp.c_fc
    assert int(fc.x_quant.n_elements) > 0 and int(fc.g_quant.n_elements) > 0   # counters of block quantizers


def test_probe_reports_block_operand_health():
    """Diagnostics replay: X, W, dY of block-scaled layers get tensor_health with the per-element block scale
    (W's numbers checked against a direct block_qdq of the weight) and the log2 spread of the block scales."""
    import contextlib

    from altgrad_lib.numerics.block_scaling import block_qdq
    from altgrad_lib.monitors.probe import Probe
    from altgrad_lib.numerics.quant import sqnr_db
    m = tiny()
    quantize_model(m, "nvfp4", verbose=False)
    idx = torch.randint(0, 64, (4, 32), generator=torch.Generator().manual_seed(0))
    out = Probe(m, contextlib.nullcontext).replay(idx, idx, None, numerics=True, activations=False)["health"]
    fqn = "transformer.h.0.mlp.c_fc"
    assert {(fqn, r) for r in ("X", "W", "dY")} <= set(out)
    w = m.transformer.h[0].mlp.c_fc.weight.detach()
    spec = m.transformer.h[0].mlp.c_fc.w_quant.spec
    wq, n_sat, n_under = block_qdq(w, spec.fmt, spec.scaling, want_stats=True)
    h = out[(fqn, "W")]
    assert float(h["sqnr_db"]) == pytest.approx(sqnr_db(w, wq), rel=1e-9)
    assert float(h["flush_frac"]) == int(n_under) / w.numel()
    # RNE of the E4M3 block scale can round it below amax/6: that block's largest element then saturates
    assert float(h["overflow_frac"]) == int(n_sat) / w.numel() and float(h["blk_log2s_std"]) > 0
    assert 0 < float(out[(fqn, "dY")]["sqnr_db"]) < 40       # E2M1: a few bits of agreement, not exact
    assert float(h["mse"]) == pytest.approx(float(((w.double() - wq.double()) ** 2).mean()), rel=1e-6)
    # W is in 16x16 tiles (nvfp4's 2D weights): the per-block rows describe tiles, computed directly here
    tiles = (((w != 0) & (wq == 0)).double().reshape(w.shape[0] // 16, 16, w.shape[1] // 16, 16)
             .mean(dim=(1, 3)).flatten())
    assert spec.scaling.tile_2d and float(h["blk_flush_max"]) == float(tiles.max())
    assert float(h["blk_flush_mean"]) == pytest.approx(float(tiles.mean()), rel=1e-12)
    assert float(h["blk_flush_any"]) == pytest.approx(float((tiles > 0).double().mean()), rel=1e-12)
    for role in ("X", "dY"):
        assert {"mse", "blk_flush_mean", "blk_flush_std", "blk_flush_max", "blk_flush_any",
                "blk_log2s_std"} <= set(out[(fqn, role)])


def test_every_switch_parses_and_is_listed_by_help_and_readme(capsys):
    from pathlib import Path

    from altgrad_lib.choices import BLOCK_SWITCHES
    from altgrad_lib.cli import main
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())      # undo the line wrapping
    for base, switches in BLOCK_SWITCHES.items():
        assert f"{base}[:<switch>...]" in help_text and f"`{base}`" in readme
        for sw in switches:
            get_policy(f"{base}:{sw.replace('<N>', '1')}")
            assert f"`{sw}`" in readme and f" {sw}" in help_text, (base, sw)


def _refused(combo) -> bool:
    """The switch combinations block_recipe refuses: an RNG policy of a technique the other switches turn off."""
    on = set(combo)
    return (("rht_per_step" in on and "disable_rht" in on and not on & {"rht_fprop", "rht_dgrad"})
            or ("sr_per_call" in on and "disable_sr" in on and not on & {"sr_x", "sr_w"}))


def test_rng_switch_without_its_technique_is_refused():
    for recipe, msg in [("nvfp4:disable_rht:rht_per_step", "no GEMM is rotated"),
                        ("mxfp4:disable_sr:sr_per_call", "nothing is rounded stochastically")]:
        with pytest.raises(ValueError, match=msg):
            get_policy(recipe)
    get_policy("nvfp4:disable_rht:rht_fprop:rht_per_step")     # a rotated GEMM left: valid
    get_policy("nvfp4:disable_sr:sr_w:sr_per_call")


def _canonical_spellings():
    """Every block recipe in its canonical form: switches in BLOCK_SWITCHES' order, hp_last last (0 omitted)."""
    import itertools

    from altgrad_lib.choices import BLOCK_SWITCHES
    for base, sws in BLOCK_SWITCHES.items():
        plain = [s for s in sws if "=" not in s]
        for n in range(len(plain) + 1):
            for combo in itertools.combinations(plain, n):
                if _refused(combo):   # an RNG policy for a technique the combo turns off (test_rng_switch_...)
                    continue
                for hp in ("", ":hp_last=1", ":hp_last=12"):
                    yield ":".join([base, *combo]) + hp


def test_recipe_spellings_are_one_canonical_recipe():
    from altgrad_lib.quantize.recipes import canonical_recipe
    from altgrad_lib.training.config import TrainConfig

    spellings = list(_canonical_spellings())
    assert len(spellings) > 100 and all(canonical_recipe(s) == s for s in spellings)   # canonical: unchanged
    # the names and hashes of canonical spellings, computed on the code before canonicalization (commit ab8c91b)
    for r, name in [("nvfp4", "nvfp4-s0-2907c923"), ("nvfp4:disable_rht:hp_last=1",
                                                    "nvfp4_disable_rht_hp_last_1-s0-347937b5"),
                    ("mxfp4:rceil:wgrad_hp:hp_attn:hp_last=1", "mxfp4_rceil_wgrad_hp_hp_attn_hp_last_1-s0-6438d150"),
                    ("mxfp8", "mxfp8-s0-beeb9fbf")]:
        assert TrainConfig(recipe=r, n_layer=2).auto_run_name() == name
    for variant, canon in [("NVFP4", "nvfp4"), ("nvfp4:hp_last=0", "nvfp4"),
                           (" Nvfp4 : disable_rht ", "nvfp4:disable_rht"),
                           ("nvfp4:disable_rht:disable_rht", "nvfp4:disable_rht"),
                           ("nvfp4:hp_last=1:disable_rht", "nvfp4:disable_rht:hp_last=1"),
                           ("nvfp4:hp_last=01:hp_last=1", "nvfp4:hp_last=1"),
                           ("mxfp4:hp_attn:wgrad_hp:rceil:hp_last=1", "mxfp4:rceil:wgrad_hp:hp_attn:hp_last=1"),
                           ({"recipe": "MXFP8:rceil"}, {"recipe": "mxfp8:rceil"})]:
        assert canonical_recipe(variant) == canon, variant
        a, b = TrainConfig(recipe=variant, n_layer=2), TrainConfig(recipe=canon, n_layer=2)
        assert (a.recipe, a.config_hash(), a.auto_run_name()) == (b.recipe, b.config_hash(), b.auto_run_name())
    assert get_policy("NVFP4:hp_last=0").name == "nvfp4"
    with pytest.raises(ValueError, match="hp_last is given twice"):
        get_policy("nvfp4:hp_last=1:hp_last=2")
