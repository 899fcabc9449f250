"""Shared test helpers (one copy each): oracle tables, bit-exact comparison, probe inputs.

Imported as `from helpers import ...` (pytest puts tests/ on sys.path), so any single test file runs alone.
The gfloat FormatInfo of a format lives in the library (altgrad_lib.numerics.oracles), shared with notebook 01.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import torch

from altgrad_lib.numerics.formats import BUILTIN_FORMATS, FloatFormat
from altgrad_lib.numerics.oracles import gfloat_format_info as gfloat_info   # also used by tests

ALL = list(BUILTIN_FORMATS)
TORCH_REF = {"E4M3": torch.float8_e4m3fn, "E5M2": torch.float8_e5m2, "E4M3FNUZ": torch.float8_e4m3fnuz,
             "E5M2FNUZ": torch.float8_e5m2fnuz}
MLD_REF = {"E4M3": "float8_e4m3fn", "E5M2": "float8_e5m2", "E3M4": "float8_e3m4", "E4M3_IEEE": "float8_e4m3",
           "E4M3FNUZ": "float8_e4m3fnuz", "E5M2FNUZ": "float8_e5m2fnuz", "E4M3B11FNUZ": "float8_e4m3b11fnuz",
           "E8M0FNU": "float8_e8m0fnu", "E2M3": "float6_e2m3fn", "E3M2": "float6_e3m2fn", "E2M1": "float4_e2m1fn"}


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise equality treating NaN == NaN and distinguishing -0 from +0."""
    a, b = a.double(), b.double()
    same = (a == b) & (torch.signbit(a) == torch.signbit(b))
    return same | (torch.isnan(a) & torch.isnan(b))


def assert_same(ours: torch.Tensor, ref: torch.Tensor, x: torch.Tensor, what: str) -> None:
    ok = bits_equal(ours, ref)
    if not bool(ok.all()):
        bad = (~ok).nonzero().flatten()[:8]
        rows = [(float(x.flatten()[i]), float(ours.flatten()[i]), float(ref.flatten()[i])) for i in bad]
        raise AssertionError(f"{what}: {int((~ok).sum())} mismatches of {ok.numel()}; (x, ours, ref): {rows}")


def all_bf16_as_f32() -> torch.Tensor:
    return torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()


def probe_inputs(fmt: FloatFormat, n_random: int = 20000, seed: int = 0) -> torch.Tensor:
    """float32 inputs: all bf16 patterns, random values over the format's range, exact ties between grid
    neighbours and their f32 neighbours, values around max and the overflow threshold, specials."""
    g = torch.Generator().manual_seed(seed)
    v = fmt.values()
    lo, hi = math.log2(fmt.min_subnormal) - 3, math.log2(fmt.max) + 2
    rnd = torch.exp2(torch.rand(n_random, generator=g, dtype=torch.float64) * (hi - lo) + lo)
    rnd = rnd * torch.where(torch.rand(n_random, generator=g) < 0.5, -1.0, 1.0).double()
    top = torch.tensor([fmt.max, 2 * fmt.max, fmt.max * (1 + 2.0 ** -(fmt.mbits + 1))], dtype=torch.float64)
    mids = torch.cat([(v[1:] + v[:-1]) / 2, top, top * 1.0001])
    mids32 = mids.float()
    near = torch.cat([mids32, torch.nextafter(mids32, torch.tensor(math.inf)),
                      torch.nextafter(mids32, torch.tensor(-math.inf))])
    specials = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1e-45, -1e-45, 3.4e38, -3.4e38])
    xs = torch.cat([all_bf16_as_f32(), rnd.float(), near, -near, v.float(), specials])
    return xs


def mld_round(x: torch.Tensor, name: str) -> torch.Tensor:
    dt = getattr(ml_dtypes, name)
    with np.errstate(invalid="ignore", over="ignore"):   # ml_dtypes warns when it produces NaN/inf
        return torch.from_numpy(np.asarray(x.numpy(), dtype=dt).astype(np.float32))


def quantized_linear_reference(x: torch.Tensor, w: torch.Tensor, grad_y: torch.Tensor, fmt_xw: str = "E4M3",
                               fmt_g: str = "E5M2") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, dX, dW) of a per-tensor current-scaled quantized linear, from gfloat's rounding and FP64 GEMMs.

    Independent of our kernels: scales fmt.max / amax in float64, codes by gfloat (RNE, saturating), every
    product and sum in float64. A faithful implementation differs only by fp32 rounding and the rare code
    that flips at a rounding tie, i.e. by far less than the quantization error itself.
    """
    import gfloat
    from gfloat import RoundMode

    from altgrad_lib.numerics.formats import get_format

    def q(t: torch.Tensor, name: str) -> torch.Tensor:
        f = get_format(name)
        t = t.detach().double().reshape(-1, t.shape[-1])
        s = f.max / float(t.abs().max())
        codes = gfloat.round_ndarray(gfloat_info(f), (t * s).numpy(), RoundMode.TiesToEven, sat=True)
        return torch.from_numpy(codes) / s

    xq, wq, gq = q(x, fmt_xw), q(w, fmt_xw), q(grad_y, fmt_g)
    y = xq @ wq.t()
    return y.reshape(*x.shape[:-1], -1), (gq @ wq).reshape(x.shape), gq.t() @ xq


def tiny_study_dict(tmp_path, max_steps: int = 6, **changes) -> dict:
    """params/studies/ci_formats.yaml as a dict, shortened to `max_steps`, runs and index under tmp_path, without
    its frozen-blocks control points (pass `points=` to add some), its comparisons with `delta: 0.05` and without
    diagnostics."""
    from pathlib import Path

    import yaml

    d = yaml.safe_load((Path(__file__).resolve().parent.parent / "params" / "studies" / "ci_formats.yaml").read_text())
    d["config"] = {**d["config"], "max_steps": max_steps, "eval_interval": 0, "ckpt_interval": 2,
                   "out_dir": str(tmp_path / "runs"), "diagnostics": "off"}   # the study logic, not the monitors
    d.pop("points", None)
    d["comparisons"] = [{**c, "delta": 0.05} for c in d.get("comparisons") or ()]
    return {**d, **changes}


def read_wandb_history(path) -> list[dict]:
    """History rows of an offline W&B run file (run-*.wandb), parsed independently of wandb's reader.

    The file is a LevelDB-style log: a 7-byte header (":W&B", magic, version), then 32 KiB blocks of chunks
    (crc32 u32, length u16, type u8: 1 full, 2 first, 3 middle, 4 last) holding protobuf `Record`s.
    """
    import json
    import struct
    from pathlib import Path

    from wandb.proto import wandb_internal_pb2 as pb

    b = Path(path).read_bytes()
    assert b[:4] == b":W&B", b[:7]
    block, pos, buf, rows = 32768, 7, b"", []
    while pos + 7 <= len(b):
        left = block - pos % block
        if left < 7:                                  # block trailer too small for a chunk header: padding
            pos += left
            continue
        _, n, kind = struct.unpack("<IHB", b[pos:pos + 7])
        pos += 7
        if n == 0 and kind == 0:                      # zero padding up to the block end
            pos += left - 7
            continue
        buf += b[pos:pos + n]
        pos += n
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf)
            buf = b""
            if rec.WhichOneof("record_type") == "history":
                rows.append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in rec.history.item})
    return rows


def grid_ordinal_bruteforce(values, fmt) -> list[int]:
    """Signed ordinal of each grid value by a Python scan of the sorted finite values (oracle for optim/grid.py)."""
    pos = sorted(v for v in fmt._finite if v > 0)
    out = []
    for v in values:
        v = float(v)
        if v == 0:
            out.append(0)
            continue
        i = pos.index(abs(v)) + 1
        out.append(i if v > 0 else -i)
    return out


def assert_same_state(a, b, path: str = "") -> None:
    """Recursive bitwise equality of state dicts (tensors: same dtype and values; containers: same keys)."""
    if torch.is_tensor(a):
        assert torch.is_tensor(b) and a.dtype == b.dtype and torch.equal(a, b), path
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            assert_same_state(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_state(x, y, f"{path}[{i}]")
    else:
        assert a == b, path


class Crash(Exception):
    """A simulated kill inside train() (raised from on_step), for resume tests."""


def crash_at(k: int):
    """An on_step callback that raises Crash right after step k."""
    def on_step(step, metrics):
        if step == k:
            raise Crash(step)
    return on_step


# SR + delayed scaling: every kind of hidden quantizer state (SR generators, amax history) that must survive a
# checkpoint for resume to be exact, and that monitors must never disturb
SR_DELAYED = {"name": "sr_delayed", "recipe": "fp8_hybrid", "layers": {"*": {
    "input": {"fmt": "E4M3", "scaling": {"kind": "delayed"}},
    "weight": {"fmt": "E4M3", "rounding": "stochastic"},
    "grad_output": {"fmt": "E5M2", "rounding": "stochastic"}}}}


def spawn_lock_holder(run_dir):
    """A separate process that takes the RunLock of run_dir and sleeps; returns once it holds the lock.
    The caller kills it (SIGKILL: no cleanup code runs, only the kernel can release the flock)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = (f"import time; from altgrad_lib.training.run_dir import RunLock; "
            f"lock = RunLock({str(run_dir)!r}).acquire(); "
            f"print('locked', flush=True); time.sleep(120)")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    assert p.stdout.readline().strip() == "locked"
    return p


# GEMM-faithful QuantizedLinear (quantize/gemm_quant.py): a layer, one step, data, and the hand-written pieces
# of the reference of its three GEMMs (block_qdq along a chosen dim, an explicit dense RHT matrix)

def gemm_layer(spec, seed=0, out=48, inp=64, dtype=torch.float32):
    """A QuantizedLinear (out, in) with bias from a LayerSpec; rows of W scaled by 2^[-3, 3], so that row-wise and
    column-wise block scales differ."""
    import torch.nn as nn

    from altgrad_lib.quantize.linear import QuantizedLinear
    torch.manual_seed(seed)
    lin = nn.Linear(inp, out, bias=True, dtype=dtype)
    with torch.no_grad():
        lin.weight.mul_(torch.exp2(torch.randint(-3, 4, (out, 1))).to(dtype))
    return QuantizedLinear.from_linear(lin, spec, "mlp_up", "h.0.mlp.c_fc", seed=7)


def gemm_step(m, x: torch.Tensor, dy: torch.Tensor):
    """(Y, dX, dW) of one forward / backward of layer m with output gradient dy."""
    x = x.clone().requires_grad_(True)
    m.weight.grad = None
    y = m(x)
    y.backward(dy)
    return y.detach(), x.grad, m.weight.grad.clone()


def gemm_data(b=3, t=40, inp=64, out=48, seed=1):
    """X (b, t, in) with columns of different magnitude, dY (b, t, out) ~ 1e-3."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, t, inp, generator=g) * torch.exp2(torch.randint(-4, 4, (1, 1, inp), generator=g).float())
    dy = torch.randn(b, t, out, generator=g) * 1e-3
    return x, dy


def q_along(t: torch.Tensor, spec, dim: int) -> torch.Tensor:
    """Quantize a 2D tensor with blocks along `dim` (0 or 1) by block_qdq, written out by hand."""
    from altgrad_lib.numerics.block_scaling import block_qdq
    from altgrad_lib.numerics.quant_spec import QuantSpec
    spec = QuantSpec.from_dict(spec)
    if dim == 1:
        return block_qdq(t, spec.fmt, spec.scaling)[0]
    return block_qdq(t.t().contiguous(), spec.fmt, spec.scaling)[0].t()


def rot_along(t: torch.Tensor, signs: torch.Tensor, dim: int) -> torch.Tensor:
    """t·blockdiag(M) along dim, by an explicit dense matrix (not apply_rht)."""
    from altgrad_lib.quantize.gemm_quant import rht_matrix
    n = t.shape[dim]
    npad = -(-n // 16) * 16
    big = torch.block_diag(*[rht_matrix(signs)] * (npad // 16))
    tp = torch.nn.functional.pad(t, (0, npad - n) if dim == 1 else (0, 0, 0, npad - n))
    return tp @ big if dim == 1 else (tp.t() @ big).t()


def losses_with_probe(model, batches, loss_fn, probe=None, probe_steps=(1, 2), lr: float = 1e-2) -> list[float]:
    """Train `model` with torch AdamW on `batches`, calling `probe(model, batch, step)` between backward and step
    (the worst place for a monitor) on `probe_steps`: the losses, for a monitor's "training is bit-identical
    with and without measurements" test."""
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    torch.manual_seed(11)
    losses = []
    for step, b in enumerate(batches):
        opt.zero_grad()
        loss = loss_fn(model, b)
        loss.backward()
        if probe is not None and step in probe_steps:
            probe(model, b, step)
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def lr_envelope_trials():
    """find_stable_lrs-shaped trials of two recipes over five LRs (stable below a critical LR, above the initial loss
    below 1, diverged from 1 on), for the LR-envelope figure's tests."""
    import pandas as pd

    rows = []
    for recipe, crit in (("bf16", 0.1), ("fmt:E5M2", 0.01)):
        for lr in (1e-3, 1e-2, 1e-1, 1.0, 10.0):
            reason = "stable" if lr < crit else ("above_initial" if lr < 1 else "diverged")
            rows.append({"recipe": recipe, "lr": lr, "stable": reason == "stable", "reason": reason,
                         "final_val_loss": float("nan") if reason == "diverged" else 5 + lr})
    return pd.DataFrame(rows)


def still_alive(pids, timeout: float = 0.0) -> list[int]:
    """The pids still alive (zombies count as dead) after waiting up to `timeout` s."""
    import time

    import psutil

    t0 = time.time()
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.time() - t0 > timeout:
            return alive
        time.sleep(0.1)


def cpu_load(n: int | None = None):
    """A loaded machine for a with-block: `n` busy processes (default one per core), always killed at its end
    (tools/cpu_load.py, the load `make test-loaded` runs the suite under)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "tools" / "cpu_load.py"
    spec = importlib.util.spec_from_file_location("cpu_load_tool", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool.cpu_load(n)


def exit_deadline() -> float:
    """Seconds within which the processes of a dead driver must be gone, from this machine as loaded now.
    After the driver's death its reaper (altgrad_lib/studies/reaper.py) needs one wake-up, a scan of /proc and the
    signals, plus its own start if the driver died before it ran: each less than a bare interpreter's start, which
    is timed here (with what the reaper imports). 20 of those leave room for the killed processes' own exit under
    the same load; the 5 s floor is the issue's "within a few seconds" (issue 53)."""
    import subprocess
    import sys
    import time

    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-I", "-S", "-c", "import os, select, signal, socket"], check=True)
    return max(5.0, 20 * (time.perf_counter() - t0))


def handed_to_reaper(driver: int, pids, timeout: float = 300) -> None:
    """Wait until the reaper of process `driver` (altgrad_lib/studies/reaper.py) holds a pidfd of each of `pids`
    (/proc/<reaper>/fdinfo/* "Pid:" lines): a SIGKILL of the driver between a worker's fork and its hand-over would
    test that instant's race, not the reaper. `timeout`: a study's start on a loaded box, as _wait_training's."""
    import os
    import time

    import psutil

    t0 = time.time()
    while True:
        held = set()
        for c in psutil.Process(driver).children():
            try:
                if "pidfd_send_signal" not in " ".join(c.cmdline()):
                    continue
                for fd in os.listdir(f"/proc/{c.pid}/fdinfo"):
                    with open(f"/proc/{c.pid}/fdinfo/{fd}") as f:
                        held.update(int(ln.split()[1]) for ln in f if ln.startswith("Pid:"))
            except (psutil.NoSuchProcess, OSError):
                pass
        if set(pids) <= held:
            return
        assert time.time() - t0 < timeout, f"the reaper of {driver} holds {sorted(held)}, not all of {sorted(pids)}"
        time.sleep(0.05)
