"""The fidelity report (altgrad_lib.quantize.fidelity, `altgrad fidelity RECIPE`): its numbers come from comparing
AltGrad's quantization with libraries written by others (torch float8, ml_dtypes, gfloat, torchao MX / NVFP4), so a
wrong axis, a wrong reference or a biased stochastic rounding shows in it; every named recipe runs."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from altgrad_lib.choices import BLOCK_RECIPE_ALIASES, BLOCK_SWITCHES, NAMED_RECIPES
from altgrad_lib.cli import main
from altgrad_lib.numerics import oracles
from altgrad_lib.numerics.block_scaling import block_qdq
from altgrad_lib.numerics.quant_spec import QuantSpec
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

    monkeypatch.setattr(fidelity, "col_copy", wrong_axis)
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
    """GemmOptions.accum / QuantPolicy.attn are shown as the objects describe themselves, in the right summary list."""
    rec = {"name": "fp8-fp22-attn", "recipe": "fp8_hybrid", "attn": "fp8",
           "layers": {"*": {"input": "E4M3", "weight": "E4M3", "grad_output": "E5M2",
                            "gemm": {"accum": {"wgrad": {"fmt": "fp22", "promote_every": 128}}}}}}
    policy = get_policy(rec)
    opts = policy.spec_for("mlp_up").gemm_options
    wgrad = opts.accum_for("wgrad")
    assert fidelity._accum_str(opts, "wgrad").startswith(wgrad.short_str())
    assert fidelity._accum_str(opts, "fprop") == fidelity.FP32_ACCUM
    assert fidelity._accum_str(None, "fprop") == fidelity.FP32_ACCUM
    rep = fidelity_report(policy)
    assert rep.attention == policy.attn.short_str()
    assert not any("attention matmuls" in s for s in rep.summary["not_simulated"])
    assert any(policy.attn.short_str() in s for s in rep.summary["exact_vs_hand_reference"])
    assert any(wgrad.short_str() in s for s in rep.summary["approximately"])
    assert not any(wgrad.short_str() in s for s in rep.summary["exactly_simulated"])
    plain = fidelity_report("fp8_hybrid")
    assert any("attention matmuls" in s for s in plain.summary["not_simulated"])
    assert any(fidelity.FP32_ACCUM in s for s in plain.summary["not_simulated"])


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


# issue 30's recipes: each operand spec -> the references that must apply to it (library ones are code someone else
# wrote; "hand reference from ..." ones are ours, from the named paper or spec) -- every one bit-exact
TAO_NV, TAO_NV2 = "torchao to_nvfp4", "torchao to_nvfp4, 16x16 composed"
NV_HAND, NVINT4_HAND = "hand reference from NVFP4 report (2509.25149)", "hand reference from NVINT4 (2510.25602)"
Q2 = " + headroom 0.9412"          # Quartet-II's SR scale 17/16
NEW_RECIPE_REFS = {
    "fp8_blockwise": {"e4m3fn/fb128/rne": {"torchao torch_blockwise_scale_act_quant_lhs",
                                           "hand reference from TE Float8BlockScaling"},
                      "e4m3fn/fb128x128/rne": {"torchao torch_blockwise_scale_weight_quant",
                                               "hand reference from TE Float8BlockScaling"}},
    "fp8_blockwise:pow2_scales": {"e4m3fn/fb128p2/rne": {"hand reference from TE Float8BlockScaling pow2"},
                                  "e4m3fn/fb128x128p2/rne": {"hand reference from TE Float8BlockScaling pow2"}},
    "mxint8": {"int8_ocp/mx32f/rne": {"gfloat quantize_block (INT8 ±127/64)", "hand reference from OCP MX 1.0"}},
    "mxint8:rceil": {"int8_ocp/mx32r/rne": {"hand reference from OCP MX 1.0 + RCEIL (2506.08027)"}},
    "mxfp8_rceil": {"e4m3fn/mx32r/rne": {"torchao to_mx", "hand reference from OCP MX 1.0 + RCEIL (2506.08027)"}},
    "nvint4": {"int4/nv16/rne": {NVINT4_HAND}, "int4/nv16x16/rne": {NVINT4_HAND}, "int4/nv16/sr": {NVINT4_HAND}},
    "amdfp4": {s: {NV_HAND + " + UE5M3 scales (amdfp4)"}
               for s in ("e2m1fn/nv16-ue5m3/rne", "e2m1fn/nv16x16-ue5m3/rne", "e2m1fn/nv16-ue5m3/sr")},
    "nvfp4:four_over_six": {s: {NV_HAND + " + 4/6 (2512.02010)"}
                            for s in ("e2m1fn/nv16-46/rne", "e2m1fn/nv16x16-46/rne", "e2m1fn/nv16-46/sr")},
    "quartet2_nvidia": {"e2m1fn/nv16/rne": {TAO_NV, NV_HAND}, "e2m1fn/nv16x16/rne": {TAO_NV2, NV_HAND},
                        "e2m1fn/nv16-h0.941176/sr": {NV_HAND + Q2}},
    "tetrajet_v2": {"e2m1fn/nv16/rne": {TAO_NV, NV_HAND}, "e2m1fn/nv16-h0.941176/sr": {NV_HAND + Q2}},
    "fp4_all_the_way": {"e2m1fn/nv16/rne": {TAO_NV, NV_HAND}, "e2m1fn/nv16/sr": {TAO_NV, NV_HAND}},
}


@pytest.mark.parametrize("recipe", NEW_RECIPE_REFS)
def test_new_recipes_are_bit_exact_against_their_references(recipe):
    rep = fidelity_report(recipe, n_sr=8)
    got: dict[str, set] = {}
    for _, _, op in _ops(rep):
        assert op["references"] and all(r["exact"] and r["mismatches"] == 0 for r in op["references"]), op
        got.setdefault(op["spec"], set()).update(_refs(op))
    assert got == NEW_RECIPE_REFS[recipe]
    # an operand checked only against a hand reference is listed apart from the library-checked ones, saying so
    hand_only = {s for s, refs in got.items() if all(r.startswith("hand reference from") for r in refs)}
    listed = rep.summary["exact_vs_hand_reference"]
    assert {s for s in hand_only if not any(line.startswith(s + ":") or line.startswith(s + " ") for line in listed)} \
        == set()
    assert all("a reference we wrote from the paper's equations" in line for line in listed)
    assert not any("hand reference" in line.split("; also vs")[0] for line in rep.summary["exactly_simulated"])


def _check_labels(op: dict) -> None:
    """The reference rows describe the operand's actual quantizer: kind, scale grid, options; hand references are
    marked as ours. Fails on a mislabelled reference (e.g. fp8_block described as NVFP4, UE5M3 vs torchao's E4M3)."""
    sc, text = op["scaling"], " ".join([op["note"]] + [r["reference"] for r in op["references"]])
    for r in op["references"]:
        assert (r["source"] == "hand") == r["reference"].startswith("hand reference from "), r
    if sc.startswith("fb"):
        assert "nvfp4" not in text.lower() and "MX" not in text, op
        assert all("blockwise" in r["reference"] or "Float8BlockScaling" in r["reference"] for r in op["references"])
        assert ("pow2" in text) == ("p2" in sc)
    elif sc.startswith("nv"):
        assert "to_mx" not in text and "Float8BlockScaling" not in text and "OCP MX" not in text, op
        plain = sc in ("nv16", "nv16x16") and op["format"] == "E2M1"
        assert any(r["reference"].startswith("torchao to_nvfp4") for r in op["references"]) == plain, op
        assert ("UE5M3" in text) == ("ue5m3" in sc) and ("4/6" in text) == ("-46" in sc)
        assert ("NVINT4" in text) == (op["format"] == "INT4")
    elif sc.startswith("mx"):
        assert "nvfp4" not in text.lower() and "Float8BlockScaling" not in text, op
        assert all(r["source"] == "library" or "OCP MX 1.0" in r["reference"] for r in op["references"])
        rceil = sc.split("-")[0].endswith("r")         # short_str: mx<block><mode initial>[-h<headroom>]
        assert ("RCEIL" in text) == rceil or not op["references"]
    if op["references"] and "-h" in sc:
        assert all("headroom" in r["reference"] for r in op["references"]), op


def test_label_check_catches_a_mislabelled_reference(monkeypatch):
    """The old report described fp8_block as 'NVFP4 with E4M3 elements' and checked amdfp4 (UE5M3 scales) against
    torchao's E4M3-scale NVFP4: both rows fail _check_labels."""
    (op,) = [o for _, g, o in _ops(fidelity_report("fp8_blockwise", n_sr=4)) if g == "fprop" and o["role"] == "input"]
    _check_labels(op)
    bad = {**op, "references": [], "note": "no reference: NVFP4 with E4M3 elements in blocks of 128 exists in no "
                                          "library"}
    with pytest.raises(AssertionError):
        _check_labels(bad)
    (nv,) = [o for _, g, o in _ops(fidelity_report("amdfp4", n_sr=4)) if g == "fprop" and o["role"] == "input"]
    _check_labels(nv)
    with pytest.raises(AssertionError):
        _check_labels({**nv, "references": [{**nv["references"][0], "reference": TAO_NV, "source": "library"}]})


def test_sr_bias_is_explained_by_the_measured_saturation():
    """NVFP4 SR without headroom: the elements above 6 after the E4M3 scale rounded down are the bias -- the report
    measures their fraction (equal to block_qdq's own saturation count) and |Z| without them is within 3σ; with
    sr_headroom none saturates and the explanation names the switch only when it is needed."""
    rep = fidelity_report("nvfp4")
    (op,) = [op for _, g, op in _ops(rep) if g == "dgrad" and op["role"] == "grad_output"]   # no RHT, along 'out'
    s = op["sr"]
    x = fidelity.synthetic_operand("grad_output")
    spec = get_policy("nvfp4").spec_for("mlp_up").grad_output
    _, n_sat, _ = block_qdq(x, spec.fmt, spec.scaling, want_stats=True)
    assert s["saturated_frac"] == pytest.approx(int(n_sat) / x.numel(), abs=0) and s["saturated_frac"] > 0
    assert not s["pass"] and abs(s["z_unsaturated"]) <= s["bound"]
    assert "saturation" in s["why"] and "sr_headroom" in s["why"]
    assert any("biased toward zero by saturation" in line for line in rep.summary["approximately"])
    assert "saturated" in str(rep)
    for _, _, o in _ops(fidelity_report("nvfp4:sr_headroom")):
        if "sr" in o:
            assert o["sr"]["saturated_frac"] == 0 and o["sr"]["pass"] and o["sr"]["why"] == "unbiased"
    # a biased rounder with nothing saturated is not blamed on saturation
    tz = sr_unbiasedness(QuantSpec(fmt="E5M2", rounding="toward_zero"), "fprop", "input", n=16)
    assert not tz["pass"] and tz["saturated_frac"] == 0 and "no element saturated" in tz["why"]


def test_fp8_blockwise_report_never_says_nvfp4():
    text = str(fidelity_report("fp8_blockwise", n_sr=4))
    assert "NVFP4" not in text and "torchao torch_blockwise_scale_weight_quant" in text


def _every_recipe() -> list[str]:
    out = list(NAMED_RECIPES) + list(BLOCK_RECIPE_ALIASES) + ["fmt:E3M4", "fmt:E3M4:E4M3", "fmt:E2M3"]
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
        _check_labels(op)
