"""The numerics doctor (studies/doctor.py, `altgrad doctor`, quantize/faults.py): every injected fault is ranked first
on a tiny 2-layer nvfp4 run (C=32, T=16, 2 steps), by the test meant to catch it; a clean run of that checkpoint
flags nothing; bad input fails in one line before any batch is computed; the statistics against closed forms."""
from __future__ import annotations

import math
import shutil

import pytest
import torch
import yaml

from altgrad_lib import cli
from altgrad_lib.notebook.figure_check import figure_problems
from altgrad_lib.notebook.plots_doctor import doctor_figure
from altgrad_lib.numerics.quantizer import Quantizer
from altgrad_lib.quantize.faults import Fault
from altgrad_lib.studies import doctor
from altgrad_lib.studies.doctor import _Acc, _SrAcc, _stalled, doctor_report
from altgrad_lib.training.loop import TrainConfig, train

TINY = dict(n_layer=2, n_head=2, n_embd=32, block_size=16, batch_size=4, max_docs=50, tokenizer="gpt2-256",
            max_steps=2, warmup_steps=1, eval_interval=2, eval_iters=1, ckpt_interval=2)
GAIN = "gain:transformer.h.1.mlp.c_fc:wgrad:0.88"   # the acceptance case


@pytest.fixture(scope="module")
def nv_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("doctor")
    return train(TrainConfig.from_dict({**TINY, "out_dir": str(tmp), "recipe": "nvfp4", "run_name": "nv"}),
                 progress=False, verbose=False)


@pytest.fixture(scope="module")
def reports():
    return {}


# fault, the flag that must catch it
FAULTS = [(GAIN, "gain"),
          ("correlated_sr:transformer.h.1.mlp.c_proj:wgrad", "sr_var"),
          ("scale_swap:transformer.h.1.attn.c_attn:fprop", "sqnr"),
          ("few_bit_sr:transformer.h.0.attn.c_proj:dgrad", "bias")]


@pytest.mark.parametrize("fault,flag", FAULTS, ids=[f.split(":")[0] for f, _ in FAULTS])
def test_each_fault_is_ranked_first(nv_run, reports, fault, flag):
    r = doctor_report(nv_run.dir, batches=2, draws=3, inject_faults=[fault], attribute=False)
    reports[fault] = r
    top = r.gemms.iloc[0]
    _, layer, gemm = fault.split(":")[:3]
    assert (top.layer, top.gemm) == (layer, gemm), r
    assert flag in top["flags"].split("+"), r
    assert r.verdicts() and r.verdicts()[0].startswith(f"{layer} {gemm}:")


def test_clean_checkpoint_flags_nothing(nv_run):
    r = doctor_report(nv_run.dir, batches=2, draws=3, attribute=False)
    assert (r.gemms["flags"] == "").all(), r
    assert r.verdicts() == []
    # every quantized GEMM of the 8 Linears is a row; nvfp4 keeps attention in high precision
    assert len(r.gemms) == 8 * 3 and set(r.gemms.gemm) == {"fprop", "dgrad", "wgrad"}


def test_figure_passes_the_checks(reports, nv_run):
    r = reports.get(GAIN) or doctor_report(nv_run.dir, batches=2, draws=3, inject_faults=[GAIN], attribute=False)
    fig = doctor_figure(r)
    assert figure_problems(fig) == []
    assert fig.dpi >= 110


def test_cli_ranks_the_injected_gemm_first(nv_run, tmp_path, capsys):
    out = tmp_path / "doc"
    rc = cli.main(["doctor", str(nv_run.dir), "--batches", "2", "--draws", "3", "--inject", GAIN, "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    first = text.splitlines()[3].split()   # after the header line, the title and the column names
    assert first[:3] == ["1", "transformer.h.1.mlp.c_fc", "wgrad"] and "gain" in first[3].split("+"), text
    import pandas as pd

    csv = pd.read_csv(out / "doctor.csv")
    assert (csv.loc[0, "layer"], csv.loc[0, "gemm"]) == ("transformer.h.1.mlp.c_fc", "wgrad")
    assert csv.loss_cost.notna().all() and csv.loss_ci.notna().all()   # attributed, with intervals
    opt = pd.read_csv(out / "doctor_optimizer.csv")
    assert len(opt) and opt.stalled.between(0, 1).all()
    layers = pd.read_csv(out / "doctor_layers.csv")   # one layer at a time in high precision
    assert len(layers) == 8 and layers.loss_ci.notna().all()
    assert (out / "doctor.png").stat().st_size > 0


# ---------------------------------------------------------------------------------------------- bad input

def _copy(run, tmp_path, name, checkpoint=True, **config):
    d = tmp_path / name
    shutil.copytree(run.dir, d, ignore=None if checkpoint else shutil.ignore_patterns("checkpoints"))
    if config:
        cfg = yaml.safe_load((d / "config.yaml").read_text())
        cfg.update(config)
        (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    return d


def _fails(capsys, monkeypatch, args, *needles):
    def never(*a, **k):
        raise AssertionError("computed before the input was checked")

    monkeypatch.setattr(doctor, "gemm_errors", never)
    monkeypatch.setattr(doctor, "build_corpus", never)
    assert cli.main(["doctor", *map(str, args)]) == cli.EXIT_USER_ERROR
    err = capsys.readouterr().err.strip()
    # the doctor's own checks name the command; a flag's range check (errors.number_arg) names the flag
    assert len(err.splitlines()) == 1 and err.startswith("altgrad: error: "), err
    for n in needles:
        assert n in err, err


def test_bad_input_one_line_before_compute(nv_run, tmp_path, capsys, monkeypatch):
    run = nv_run.dir
    _fails(capsys, monkeypatch, [_copy(nv_run, tmp_path, "bare", checkpoint=False)], "has no checkpoint",
           "checkpoints/last.pt")
    _fails(capsys, monkeypatch, [tmp_path / "nowhere"], "is not a run directory")
    _fails(capsys, monkeypatch, [run, "--inject", "gain:transformer.h.1.mlp.c_fcc:wgrad"],
           "'transformer.h.1.mlp.c_fcc'", "did you mean 'transformer.h.1.mlp.c_fc'?")
    _fails(capsys, monkeypatch, [run, "--inject", "gain:transformer.h.1.mlp.c_fc:wgard"],
           "'wgard'", "did you mean 'wgrad'?", "('fprop', 'dgrad', 'wgrad')")
    _fails(capsys, monkeypatch, [run, "--inject", "gian:transformer.h.1.mlp.c_fc:wgrad"], "did you mean 'gain'?")
    _fails(capsys, monkeypatch, [run, "--draws", "1"], "--draws=1", "rounds stochastically", "--draws >= 2")
    _fails(capsys, monkeypatch, [run, "--step", "7"], "--step=7", "--step 2")
    _fails(capsys, monkeypatch, [run, "--batches", "1"], "--batches=1")
    _fails(capsys, monkeypatch, [run, "--batches", "-1"], "--batches=-1 is invalid; valid: an int in [2, 10000]")
    _fails(capsys, monkeypatch, [run, "--draws", "1e9"], "--draws=1e9 is invalid")
    _fails(capsys, monkeypatch, [run, "--step", "-3"], "--step=-3 is invalid; valid: an int >= 0")
    _fails(capsys, monkeypatch, [run, "--inject", "scale_swap:transformer.h.1.mlp.c_fc:wgrad:2"], "takes no VALUE")
    _fails(capsys, monkeypatch, [_copy(nv_run, tmp_path, "hp", recipe="hp")], "quantizes nothing")


def test_fault_parse():
    assert Fault.parse(GAIN) == Fault("gain", "transformer.h.1.mlp.c_fc", "wgrad", 0.88)
    assert Fault.parse("few_bit_sr:a.b:dgrad").value == 1
    with pytest.raises(ValueError, match="VALUE='x'"):
        Fault.parse("gain:a:fprop:x")
    with pytest.raises(ValueError, match="an int >= 1"):
        Fault.parse("few_bit_sr:a:fprop:1.5")


# ---------------------------------------------------------------------------------------------- statistics

def test_gemm_statistics_closed_form():
    """Every draw = c·ref: gain c, cosine 1, relative bias |1 − c|, no variance, SQNR −20·log10|1 − c|."""
    g = torch.Generator().manual_seed(0)
    acc = _Acc()
    for _ in range(3):
        ref = torch.randn(40, 24, generator=g, dtype=torch.float64)
        acc.add([0.9 * ref] * 4, ref)
    s = acc.stats(4)
    assert s["gain"] == pytest.approx(0.9, rel=1e-12)
    assert s["cosine"] == pytest.approx(1.0, abs=1e-12)
    assert s["rel_bias"] == pytest.approx(0.1, rel=1e-9)
    assert s["rel_var"] == 0 and s["bias_se"] == 0
    assert s["sqnr_db"] == pytest.approx(-20 * math.log10(0.1), rel=1e-9)


def test_gemm_statistics_separate_noise_from_bias():
    """ref + ε with ε ~ N(0, σ²) independent per draw: rel_var → n σ² / ‖ref‖², the debiased bias → 0; adding a
    constant offset δ·ref gives rel_bias → δ."""
    g = torch.Generator().manual_seed(1)
    ref = torch.randn(200, 50, generator=g, dtype=torch.float64)
    sigma = 0.1
    for delta in (0.0, 0.05):
        acc = _Acc()
        acc.add([ref * (1 + delta) + sigma * torch.randn(ref.shape, generator=g, dtype=ref.dtype)
                 for _ in range(8)], ref)
        s = acc.stats(8)
        want_var = ref.numel() * sigma**2 / float((ref**2).sum())
        assert s["rel_var"] == pytest.approx(want_var, rel=0.05)   # 70,000 dof: ~0.5 % sampling error
        assert s["rel_bias"] == pytest.approx(delta, abs=0.004)    # the noise left: ~bias_se**2 / (2 delta)


def test_sr_operand_bias_test():
    """The repo's stochastic rounding with its default random bits is unbiased: z small; with 1 random bit it is
    biased toward truncation (arXiv 2504.20634): z and the bias large."""
    t = torch.randn(256, 64, generator=torch.Generator().manual_seed(2))
    spec = {"fmt": "E2M1", "scaling": {"kind": "nvfp4"}, "rounding": "stochastic"}
    fair, few = _SrAcc(), _SrAcc()
    fair.add(Quantizer(spec, seed=3), t, -1, 4)
    few.add(Quantizer({**spec, "sr_bits": 1}, seed=3), t, -1, 4)
    assert abs(fair.stats()["sr_bias_z"]) < doctor.SR_BIAS_Z
    s = few.stats()
    assert s["sr_bias_z"] > doctor.SR_BIAS_Z and s["sr_bias"] > doctor.SR_BIAS_TOL


def test_stalled_share_counts_entries_with_a_gradient():
    before = {("w", "exp_avg"): (torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([1.0, 1.0, 1.0, 0.0]))}
    after = {("w", "exp_avg"): (torch.tensor([1.0, 5.0, 3.0, 4.0]), None)}
    (row,) = _stalled(before, after)
    assert row["stalled"] == pytest.approx(2 / 3)   # entry 3 had no gradient: not counted


def test_quantized_attention_has_rows(tmp_path_factory):
    """A recipe with a quantized attention core (MXFP8 attention): one fprop (O) and one dgrad (dQ|dK|dV) row per
    block, measured against float64 SDPA of the same Q, K, V, dO; the clean run flags nothing there."""
    tmp = tmp_path_factory.mktemp("doctor_attn")
    run = train(TrainConfig.from_dict({**TINY, "out_dir": str(tmp), "recipe": "nvfp4:mxfp8_attn", "run_name": "att"}),
                progress=False, verbose=False)
    r = doctor_report(run.dir, batches=2, draws=2, attribute=False)
    att = r.gemms[r.gemms.module == "attention"]
    assert sorted(zip(att.layer, att.gemm)) == [(f"transformer.h.{i}.attn", g) for i in (0, 1)
                                                for g in ("dgrad", "fprop")]
    assert (att["flags"] == "").all() and att.sqnr_db.between(0, math.inf, inclusive="neither").all(), r
