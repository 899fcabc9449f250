"""Oscillation reset (optim/osc_reset.py): it moves exactly the elements whose oscillation ratio over the window
reaches the threshold, to their grid value (checked against a hand computation on six elements), under fp32 and
kahan storage; it resumes bit-exactly mid-round; off (the default) the optimizer is unchanged; the storage modes
without a latent weight are refused before any step."""
from __future__ import annotations

import pytest
import torch

from altgrad_lib.optim.adamw import AdamW
from altgrad_lib.optim.base import GridOptimizer
from altgrad_lib.optim.config import OptimConfig
from test_optim_base import _check_resume, _flat_groups, _model_params, _steps

U = 2.0 ** -7        # 1/8 of an E4M3 spacing in [1, 2): every value below is exact in fp32


class _SGD(GridOptimizer):
    """w <- w - g: the test controls every latent move exactly."""

    def __init__(self, params, **kw):
        super().__init__(params, {"lr": 1.0, "weight_decay": 0.0}, **kw)

    def _update(self, w, g, st, group, fmt, s, lr_t):
        return w - g


def _q_hand(x: float) -> float:
    """E4M3 round-to-nearest-even in [1, 2) (spacing 1/8), by hand: Python's round() is half-to-even."""
    assert 1 <= x < 2
    return round(x * 8) / 8


# six elements around the rounding boundary 1.0625 between 1.0 and 1.125: (start, moves of the 3 window steps)
CASES = [
    (1.0625 - U, [+2 * U, -2 * U, +2 * U]),      # flips every step, |Δw| = 2U:     ratio 16U/2U = 8   -> reset
    (1.0625 - 2 * U, [+4 * U, -4 * U, +4 * U]),  # flips every step, |Δw| = 4U:     ratio 4 = threshold -> reset (>=)
    (1.0625 - 4 * U, [+8 * U, -8 * U, +8 * U]),  # flips every step, |Δw| = 8U:     ratio 2            -> kept
    (1.0, [+8 * U, +8 * U, +8 * U]),             # steady drift up by half a spacing: ratio 32U/24U     -> kept
    (1.25, [0.0, 0.0, 0.0]),                     # never moves: D_w = 0, ratio 0                        -> kept
    (1.5 + U, [-U, +2 * U, -U]),                 # moves inside its bin: ratio 0                        -> kept
]
THRESHOLD, WINDOW = 4.0, 3


def _hand_expectation():
    """Per element: the latent weight after the window, its ratio, and the value the reset leaves."""
    out = []
    for w0, moves in CASES:
        w, dq, dw = w0, 0.0, 0.0
        for d in moves:
            dq += abs(_q_hand(w + d) - _q_hand(w))
            dw += abs(d)
            w += d
        ratio = dq / dw if dw else 0.0
        out.append((w, ratio, _q_hand(w) if ratio >= THRESHOLD else w))
    return out


def _run_window(storage: str, **group):
    p = torch.nn.Parameter(torch.tensor([c[0] for c in CASES]))
    w0 = p.detach().clone()
    opt = _SGD([{"params": [p], "fmt": "E4M3", "storage": storage, "grid_exp": 0, **group}])
    if storage == "kahan":                    # kahan projects p onto the grid at init: the rest goes into comp
        opt.state[p]["comp"].copy_(w0 - p.detach())
    opt.set_osc_reset(period=10, window=WINDOW, threshold=THRESHOLD, start=0)
    for i in range(WINDOW):
        p.grad = -torch.tensor([c[1][i] for c in CASES])          # w - g = w + move
        opt.step()
    return p, opt


def test_the_reset_moves_exactly_the_elements_at_or_above_the_threshold_to_their_grid_value():
    expect = _hand_expectation()
    assert [r for _, r, _ in expect] == [8.0, 4.0, 2.0, 4 / 3, 0.0, 0.0]      # the cases are what they say
    p, opt = _run_window("fp32")
    assert p.detach().tolist() == [v for _, _, v in expect]
    assert p[0].item() == 1.125 and p[1].item() == 1.125                   # both ended above the boundary
    assert opt.osc_reset.pop() == {"optim/osc_reset_frac": 2 / 6} and opt.osc_reset.pop() == {}
    assert opt.osc_reset.track is None                                   # the round's tensors are freed


def test_no_reset_before_the_window_ends_and_none_between_rounds():
    p = torch.nn.Parameter(torch.tensor([c[0] for c in CASES]))
    opt = _SGD([{"params": [p], "fmt": "E4M3", "storage": "fp32", "grid_exp": 0}])
    opt.set_osc_reset(period=10, window=WINDOW, threshold=THRESHOLD, start=0)
    latent = p.detach().clone()
    for i in range(WINDOW - 1):                                     # the window's first steps: plain SGD
        p.grad = -torch.tensor([c[1][i] for c in CASES])
        opt.step()
        latent += -p.grad
        assert torch.equal(p.detach(), latent)


def test_kahan_resets_the_latent_weight_p_plus_comp():
    expect = _hand_expectation()
    p, opt = _run_window("kahan", kahan_dtype="fp32")
    comp = opt.state[p]["comp"]
    latent = [w for w, _, _ in expect]
    for i, (w, ratio, after) in enumerate(expect):
        if ratio >= THRESHOLD:
            assert p[i].item() == after and comp[i].item() == 0.0
        else:                                                      # kept: p is the grid value, comp the rest
            assert p[i].item() == _q_hand(latent[i]) and p[i].item() + comp[i].item() == latent[i]


@pytest.mark.parametrize("storage", ["fp32", "kahan"])
def test_resume_mid_round_is_bit_exact(storage):
    def make(ps):
        opt = _flat_groups("adamw", storage, ps)
        opt.set_osc_reset(period=5, window=3, threshold=1.5, start=1)
        return opt
    opt, _ = _check_resume(make, 3)                                # saved after step 3: inside the round 1..4
    assert opt._calls == 6 and opt.osc_reset.reset_count > 0        # the reset after step 4 moved weights


def test_resume_round_tensors_are_in_the_state_dict():
    params = _model_params()
    opt = _flat_groups("adamw", "fp32", params)
    opt.set_osc_reset(period=5, window=3, threshold=1.5, start=0)
    _steps(opt, params, torch.Generator().manual_seed(1), 2)
    tr = opt.state_dict()["altgrad"]["osc_reset"]["track"]
    assert len(tr) == 2 and set(tr[0]) == {"w", "dq", "dw"} and float(tr[0]["dw"].sum()) > 0


def test_the_reset_changes_a_real_run_only_where_it_should():
    """AdamW with large steps on E4M3 (the reset fires): weights differ from the run without reset; with the first
    round after the last step the weights are bit-identical to the run without reset (the hook itself is inert)."""
    def run(reset):
        params = _model_params()
        opt = _flat_groups("adamw", "fp32", params)
        if reset is not None:
            opt.set_osc_reset(period=4, window=2, threshold=1.0, start=reset)
        _steps(opt, params, torch.Generator().manual_seed(1), 6)
        return params, opt
    base, _ = run(None)
    late, _ = run(100)
    fired, opt = run(0)
    assert all(torch.equal(a, b) for a, b in zip(base, late))
    assert opt.osc_reset.reset_count > 0 and not torch.equal(base[0], fired[0])
    assert torch.equal(base[2], fired[2])                             # the fp32 group (no format) is never reset


def test_off_by_default():
    oc = OptimConfig.from_dict("adamw", {"storage": "fp32"})
    assert oc.osc_reset is False
    opt = AdamW(_model_params(), lr=1e-3)
    assert opt.osc_reset is None and opt.state_dict()["altgrad"]["osc_reset"] is None


@pytest.mark.parametrize("optim, match", [
    ({"storage": "grid_sr", "osc_reset": True}, r"optim.osc_reset=True needs optim.storage in \('fp32', 'kahan'\)"),
    ({"storage": "error_feedback", "osc_reset": True}, "got 'error_feedback'"),
    ({"osc_reset": "yes"}, r"optim.osc_reset='yes' is invalid"),
    ({"osc_reset": True, "osc_reset_window": 200}, "optim.osc_reset_window=200 must be < optim.osc_reset_period=200"),
    ({"osc_reset": True, "osc_reset_threshold": 0}, "optim.osc_reset_threshold=0 is invalid"),
    ({"osc_reset": True, "osc_reset_start": -1}, "optim.osc_reset_start=-1 is invalid"),
    ({"osc_reset_window": 10}, r"\['osc_reset_window'\] are set but optim.osc_reset is False"),
])
def test_invalid_settings_are_one_line_errors(optim, match):
    with pytest.raises(ValueError, match=match) as e:
        OptimConfig.from_dict("adamw", optim)
    assert "\n" not in str(e.value)


def test_the_optimizer_refuses_grid_storage():
    opt = _flat_groups("adamw", "grid_rne", _model_params())
    with pytest.raises(ValueError, match=r"storage in \('fp32', 'kahan'\) \(got 'grid_rne'"):
        opt.set_osc_reset()


def test_the_factory_passes_the_settings_and_refuses_a_run_without_grid_weights():
    from altgrad_lib.optim.factory import build_optimizer, step_metrics
    from test_optim_factory import TINY, _model
    from altgrad_lib.training.loop import TrainConfig

    optim = {"storage": "kahan", "osc_reset": True, "osc_reset_period": 7, "osc_reset_window": 3,
             "osc_reset_threshold": 2.5, "osc_reset_start": 3}      # the reset after step 6 = max_steps
    cfg = TrainConfig.from_dict({**TINY, "optim": optim})
    opt = build_optimizer(_model(cfg), cfg.optim_config)
    o = opt.osc_reset
    assert (o.period, o.window, o.threshold, o.start) == (7, 3, 2.5, 3) and step_metrics(opt) == {}
    cfg = TrainConfig.from_dict({**TINY, "recipe": "bf16", "optim": {"osc_reset": True, "osc_reset_window": 3}})
    with pytest.raises(ValueError, match="optim.osc_reset=True but no trainable weight has a format"):
        build_optimizer(_model(cfg), cfg.optim_config)


def test_training_resumes_bit_exactly_from_a_checkpoint_inside_a_round(tmp_path):
    """Through training's own checkpoints: the round opens after step 2, the step-3 checkpoint holds its sums, the
    run crashes after step 4 and resumes from step 3; the reset after step 4 and everything after are the same."""
    from helpers import Crash, assert_same_state, crash_at
    from test_optim_factory import TINY, _lines
    from altgrad_lib.training.loop import TrainConfig, train

    optim = {"storage": "fp32", "osc_reset": True, "osc_reset_period": 4, "osc_reset_window": 2,
             "osc_reset_threshold": 1.0, "osc_reset_start": 2}
    kw = {**TINY, "optim": optim}
    ref = train(TrainConfig.from_dict({**kw, "out_dir": str(tmp_path / "ref")}), progress=False, verbose=False)
    cfg = TrainConfig.from_dict({**kw, "out_dir": str(tmp_path / "crash")})
    with pytest.raises(Crash):
        train(cfg, progress=False, verbose=False, on_step=crash_at(4))
    run = train(cfg, progress=False, verbose=False)
    assert run.status == "completed" and _lines(run.dir) == _lines(ref.dir)
    assert any("optim/osc_reset_frac" in ln for ln in _lines(ref.dir))           # the reset after step 4 happened
    sa = torch.load(ref.dir / "checkpoints" / "last.pt", weights_only=False)
    sb = torch.load(run.dir / "checkpoints" / "last.pt", weights_only=False)
    assert_same_state(sa["model"], sb["model"], "model")
    assert_same_state(sa["optimizer"], sb["optimizer"], "optimizer")
