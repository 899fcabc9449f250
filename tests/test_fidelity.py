"""The fidelity report (altgrad_lib.quantize.fidelity, `altgrad fidelity RECIPE`): its numbers come from comparing
AltGrad's quantization with libraries written by others (torch float8, ml_dtypes, gfloat, torchao MX / NVFP4), so a
wrong axis, a wrong reference or a biased stochastic rounding shows in it; every named recipe runs."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from altgrad_lib.choices import BLOCK_SWITCHES, NAMED_RECIPES
from altgrad_lib.cli import main
from altgrad_lib.numerics import oracles
from altgrad_lib.numerics.quant import QuantSpec
from altgrad_lib.quantize import fidelity
from altgrad_lib.quantize.fidelity import fidelity_report, sr_unbiasedness
from altgrad_lib.quantize.recipes import get_policy

REPO = Path(__file__).resolve().parent.parent


def _ops(rep) -> list[tuple[tuple[str, ...], str, dict]]:
    """(layer classes, gemm, operand row) of every quantized operand."""
    return [(tuple(e["layer_classes"]), g["gemm"], op) for e in rep.layers if e["spec"]
            for g in e["gemms"] for op in g["operands"] if "spec" in op]


def _refs(op: dict) -> set[str]:
    return {r["reference"] for r in op["references"]}


def test_nvfp4_report_matches_torchao_and_finds_the_sr_saturation_bias():
    rep = fidelity_report("nvfp4")
    ops = _ops(rep)
    assert len(ops) == 6      # 3 GEMMs x 2 operands, one group: attn_qkv .. mlp_down (lm_head high precision)
    assert rep.touches["high_precision"] == ["lm_head"]
    for _, gemm, op in ops:
        assert op["format"] == "E2M1" and op["references"], op
        assert all(r["exact"] and r["mismatches"] == 0 for r in op["references"]), op
        assert any(r.startswith("torchao to_nvfp4") for r in _refs(op))
        assert (op["rht"] == "RHT d=16") == (gemm == "wgrad")           # the recipe's RHT, read from GemmOptions
    w = [op for _, g, op in ops if op["role"] == "weight"]
    assert {op["scaling"] for op in w} == {"nv16x16"}                      # TE's 2D weights
    along = {(g, op["operand"]): op["along"] for _, g, op in ops}
    assert along == {("fprop", "X"): "in", ("fprop", "W"): "in", ("dgrad", "dY"): "out", ("dgrad", "W"): "out",
                     ("wgrad", "dY"): "tokens", ("wgrad", "X"): "tokens"}
    # NVFP4 SR without headroom is biased: a block whose E4M3 scale rounds down puts its amax above 6, where SR
    # saturates (toward zero; Z < 0). With Tseng et al.'s 3/4 headroom it is unbiased (next test).
    sr = [op["sr"] for _, _, op in ops if "sr" in op]
    assert len(sr) == 2 and all(not s["pass"] and s["z"] < -3 for s in sr)
    text = str(rep)
    assert "Exactly simulated:" in text and "BIASED" in text and "lm_head: high precision" in text
    assert "accumulation inside the low-precision GEMMs: FP32" in text


@pytest.mark.parametrize("recipe, unbiased", [("nvfp4:sr_headroom", True), ("mxfp4:sr_headroom", True),
                                              ("mxfp4", False)])
def test_sr_monte_carlo_verdict_follows_the_theory(recipe, unbiased):
    """MX FLOOR puts |x|/X in [4, 8): SR of E2M1 saturates above 6 (biased toward zero) unless scaled by 3/4."""
    sr = [op["sr"] for _, _, op in _ops(fidelity_report(recipe)) if "sr" in op]
    assert sr and all(s["pass"] is unbiased for s in sr), sr


def test_sr_monte_carlo_fails_a_deterministic_rounder_and_passes_a_fair_one():
    biased = QuantSpec(fmt="E5M2", rounding="toward_zero")    # no variance, always toward zero
    assert not sr_unbiasedness(biased, "fprop", "input", n=32)["pass"]
    assert sr_unbiasedness(QuantSpec(fmt="E5M2", rounding="stochastic"), "fprop", "input", n=64)["pass"]


def test_mxfp8_report_every_gemm_axis_exact_vs_torchao_and_the_hand_loop():
    ops = _ops(fidelity_report("mxfp8"))
    assert len(ops) == 6
    for _, _, op in ops:
        assert op["format"] == "E4M3" and op["scaling"] == "mx32f" and op["rounding"] == "nearest" and not op["rht"]
        assert _refs(op) == {"torchao to_mx", "hand reference from OCP MX 1.0"}
        assert all(r["exact"] for r in op["references"]) and "sr" not in op


def test_wrong_axis_in_altgrads_copy_shows_as_mismatches(monkeypatch):
    """Perturb AltGrad's column-wise copy (quantize along the wrong dim): the GEMMs that use it must show it."""
    def wrong_axis(q, t, train, signs):
        return q.quantize(t, axis=-1)      # should be axis 0 (the GEMM's reduction dim)

    monkeypatch.setattr(fidelity, "_col", wrong_axis)
    rep = fidelity_report("mxfp8")
    for _, gemm, op in _ops(rep):
        col = (gemm, op["operand"]) in {("dgrad", "W"), ("wgrad", "dY"), ("wgrad", "X")}
        assert all(r["exact"] is not col for r in op["references"]), (gemm, op["operand"], op["references"])
        if col:
            r = op["references"][0]
            assert r["mismatches"] > 0 and r["sqnr_db"] is not None and r["max_abs_err"] > 0
    assert any("elements differ from" in s for s in rep.summary["approximately"])
    assert "mismatch" in str(rep)


def test_a_wrong_reference_shows_as_mismatches(monkeypatch):
    """A deliberately wrong reference (torchao with RCEIL where the recipe uses FLOOR) is reported, not hidden."""
    real = oracles.torchao_mx
    monkeypatch.setattr(oracles, "torchao_mx", lambda x, fmt, mode="floor", block=32: real(x, fmt, "rceil", block))
    ops = _ops(fidelity_report("mxfp8"))
    for _, _, op in ops:
        by = {r["reference"]: r for r in op["references"]}
        assert by["hand reference from OCP MX 1.0"]["exact"]
        assert not by["torchao to_mx"]["exact"] and by["torchao to_mx"]["mismatches"] > 0


def test_fp8_recipe_exact_vs_torch_ml_dtypes_and_gfloat():
    rep = fidelity_report("fp8_hybrid")
    ops = _ops(rep)
    assert {op["format"] for _, _, op in ops} == {"E4M3", "E5M2"}
    for _, _, op in ops:
        want = {"E4M3": {"torch.float8_e4m3fn", "ml_dtypes.float8_e4m3fn"},
                "E5M2": {"torch.float8_e5m2", "ml_dtypes.float8_e5m2"}}[op["format"]] | {"gfloat.round_ndarray"}
        assert _refs(op) == want and all(r["exact"] for r in op["references"])
        assert op["along"].startswith("last dim (classic path")
    assert rep.touches["high_precision"] == ["lm_head"]
    assert fidelity_report("fp8_hybrid_all").touches["high_precision"] == []


def test_fmt_e2m1_per_tensor_against_ml_dtypes_fp4_and_gfloat():
    ops = _ops(fidelity_report("fmt:e2m1"))
    x = [op for _, _, op in ops if op["format"] == "E2M1"]
    assert len(x) == 4 and all(_refs(op) == {"ml_dtypes.float4_e2m1fn", "gfloat.round_ndarray"} for op in x)
    assert all(r["exact"] for _, _, op in ops for r in op["references"])
    # an exotic format without a library dtype: only gfloat
    e1m6 = [op for _, _, op in _ops(fidelity_report("fmt:E1M6")) if op["format"] == "E1M6"]
    assert e1m6 and all(_refs(op) == {"gfloat.round_ndarray"} for op in e1m6)


def test_hp_report_quantizes_nothing():
    rep = fidelity_report("hp")
    assert _ops(rep) == [] and rep.summary["not_simulated"] == []
    assert rep.touches["quantized"] == [] and "nothing is quantized" in rep.summary["exactly_simulated"][0]
    assert "attention matmuls (Q·Kᵀ, P·V)" in rep.touches["always_high_precision"]


def test_switches_are_read_from_the_policy():
    rep = fidelity_report("nvfp4:wgrad_hp:hp_attn:hp_last=2:disable_rht")
    assert rep.touches["hp_last_blocks"] == 2
    assert rep.touches["high_precision"] == ["attn_qkv", "attn_out", "lm_head"]
    (entry,) = [e for e in rep.layers if e["spec"]]
    gemms = {g["gemm"]: g for g in entry["gemms"]}
    assert gemms["wgrad"]["high_precision"] and not gemms["fprop"]["high_precision"]
    assert not any(op["rht"] for _, _, op in _ops(rep))
    assert "hp_last_blocks: 2" in str(rep)


def test_accumulator_and_attention_settings_are_read_not_retyped():
    """GemmOptions.accum / QuantPolicy.attn (other work items) are shown as the objects describe themselves."""
    class Spec:
        def short_str(self) -> str:
            return "fp22-like/n128"

    class Opts:
        accum = {"fprop": Spec()}

    assert fidelity._accum_str(Opts(), "fprop") == "fp22-like/n128"
    assert fidelity._accum_str(Opts(), "wgrad") == fidelity.FP32_ACCUM
    assert fidelity._accum_str(None, "fprop") == fidelity.FP32_ACCUM
    policy = get_policy("mxfp8")
    object.__setattr__(policy, "attn", Spec())     # what a policy with an attention spec looks like to the report
    rep = fidelity_report(policy)
    assert rep.attention == "fp22-like/n128"
    assert not any("attention" in s for s in rep.summary["not_simulated"])


JSON_KEYS = {"recipe", "backend", "policy", "operands_note", "summary", "touches", "attention", "layers"}
OPERAND_KEYS = {"operand", "role", "format", "scaling", "rounding", "saturate", "spec", "along", "rht", "q_sqnr_db",
                "references", "note"}
REF_KEYS = {"reference", "source", "exact", "sqnr_db", "max_abs_err", "mismatches", "n"}


def test_cli_json_schema(capsys):
    assert main(["fidelity", "nvfp4", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert set(d) == JSON_KEYS
    assert set(d["summary"]) == {"exactly_simulated", "exact_vs_hand_reference", "approximately", "not_simulated"}
    assert set(d["touches"]) == {"quantized", "high_precision", "modules", "always_high_precision", "hp_last_blocks"}
    for e in d["layers"]:
        assert {"layer_classes", "spec", "gemms"} <= set(e)
        for g in e["gemms"]:
            assert {"gemm", "accumulation", "high_precision", "operands"} == set(g)
            for op in g["operands"]:
                if "spec" in op:
                    assert OPERAND_KEYS <= set(op) and all(set(r) == REF_KEYS for r in op["references"])
                    if "sr" in op:
                        assert set(op["sr"]) == {"draws", "z", "bound", "pass", "rel_bias", "saturated_frac",
                                                 "z_unsaturated", "why"}


def test_cli_bad_recipe_is_one_line_before_any_compute(capsys, monkeypatch):
    monkeypatch.setattr(fidelity, "fidelity_report", lambda *a, **k: pytest.fail("computed on a bad recipe"))
    for bad, needle in (("nvfp", "valid choices"), ("nvfp4:bogus", "valid switches"), ("fmt:E9M9", "valid built-ins"),
                        ("{recipe: mxfp8, layers: {attn: E4M3}}", "valid:")):
        assert main(["fidelity", bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("altgrad: error:") and needle in err, err


def test_cli_end_to_end_subprocess(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("recipe: fp8_hybrid\nlayers: {lm_head: {input: E4M3, weight: E4M3, grad_output: E5M2}}\n")
    p = subprocess.run([sys.executable, "-m", "altgrad_lib.cli", "fidelity", str(recipe)], cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "AltGrad fidelity report: fp8_hybrid" in p.stdout and "quantized:      attn_qkv" in p.stdout
    assert "lm_head" in p.stdout and p.stderr == ""        # torchao's import noise stays out


def _every_recipe() -> list[str]:
    out = list(NAMED_RECIPES) + ["fmt:E3M4", "fmt:E3M4:E4M3", "fmt:E2M3"]
    for base, switches in BLOCK_SWITCHES.items():
        out += [base] + [f"{base}:{s.replace('<N>', '1')}" for s in switches]
    return out


@pytest.mark.parametrize("recipe", _every_recipe())
def test_every_named_recipe_runs_and_agrees_with_its_references(recipe):
    rep = fidelity_report(recipe, n_sr=16)
    json.loads(rep.to_json())
    assert str(rep).startswith(f"AltGrad fidelity report: {get_policy(recipe).name}")
    for _, _, op in _ops(rep):
        assert op["references"] or op["note"].startswith("no reference"), op
        assert all(r["exact"] for r in op["references"]), (recipe, op)
