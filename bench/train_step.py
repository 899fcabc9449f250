"""Benchmark: tokens/s of one training step (forward + backward + AdamW) for the CPU-profile GPT.

Compares FP32 with the simulated fp8_hybrid recipe and the real-dtype FP8 peers, eager and compiled, in one
process, and prints each mode's overhead against FP32 in the same mode (eager vs eager, compiled vs compiled).
Any recipe get_policy accepts (nvfp4, mxfp4, mxfp8, fmt:E3M4, ...) is a mode too (simulated): `--recipe nvfp4`
adds nvfp4:eager and nvfp4:compiled; `<mode>:blocks` compiles each transformer block instead of the whole model
(TrainConfig compile_scope=blocks), against fp32:blocks. torchao_slow / scaled_mm_slow are the FP8 peers through
torch._scaled_mm on CPU (ALTGRAD_CPU_FP8_GEMM=scaled_mm; hw_fp8.py), against their default dequantize + FP32 GEMM
path.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/train_step.py               # all modes
    HF_HUB_OFFLINE=1 .venv/bin/python bench/train_step.py --modes fp32:eager sim:compiled --steps 20
    HF_HUB_OFFLINE=1 .venv/bin/python bench/train_step.py --modes fp32:eager fp32:compiled --recipe nvfp4 mxfp8
    python bench/train_step.py --device cuda --precision bf16 --n-layer 6 --n-embd 512 --block-size 256 \
        --vocab 50304 --batch 32                                        # e.g. the h100 profile's model
    ... --also-consecutive 10      # then 10 steps of each mode in a row: interleaved vs consecutive, per mode

On CUDA it also prints, per mode, what the caching allocator did during that mode's timed steps: peak allocated
and reserved GiB, failed cudaMallocs that made it free its cache and retry, and cudaMalloc calls (memory pressure
shows as retries, switching costs as interleaved > consecutive). And it warns when a compiled mode's step no longer
runs the compiled frames it ran right after its build: the models share their forward's code object, and a bf16
baseline once ran at its eager speed because a later mode's graph break made dynamo skip that frame for every
model in the process (bench/results/gpu_h100.md, third lease).

Before timing, every mode's first step is checked for gradient flow (guards.py): a compiled path that
silently gives the transformer blocks zero gradients (as torch 2.11 did) skips the blocks' backward and
looks fast; such a mode is reported as FAILED instead of timed.

Not a test: numbers depend on the machine. On CPU the torchao and scaled_mm paths are emulations of FP8 GEMMs.
"""
from __future__ import annotations

import argparse
import time
from collections import Counter, defaultdict

import torch

from common import add_model_args, check_device
from report_md import cpu_model

from altgrad_lib.training.guards import check_gradient_flow
from altgrad_lib.model import GPT, GPTConfig, compile_gpt
from altgrad_lib.numerics.kernels import QDQ_KERNEL_MODES, set_qdq_kernel
from altgrad_lib.numerics.quantizer import Quantizer
from altgrad_lib.quantize.hw_fp8 import set_cpu_fp8_gemm
from altgrad_lib.quantize.recipes import get_policy
from altgrad_lib.quantize.convert import quantize_model

# (recipe, backend) per mode name
MODES = {
    "fp32": ("hp", "sim"),            # "hp" recipe = nothing quantized; the model runs in fp32
    "sim": ("fp8_hybrid", "sim"),
    "torchao": ("fp8_hybrid", "torchao"),
    "scaled_mm": ("fp8_hybrid", "scaled_mm"),
    "sim_nocount": ("fp8_hybrid", "sim"),   # sim without the saturation/underflow counters (Quantizer.count=False)
    "torchao_slow": ("fp8_hybrid", "torchao"),       # CPU GEMMs through torch._scaled_mm (hw_fp8.cpu_fp8_gemm)
    "scaled_mm_slow": ("fp8_hybrid", "scaled_mm"),
}


def recipe_backend(mode: str) -> tuple[str, str]:
    """(recipe, backend) of a mode name: a MODES key, or any recipe get_policy accepts (simulated)."""
    if mode in MODES:
        return MODES[mode]
    get_policy(mode)   # raises one line naming the valid recipes
    return mode, "sim"


DEFAULT = ["fp32:eager", "fp32:compiled", "sim:eager", "sim:compiled", "torchao:eager", "torchao:compiled",
           "scaled_mm:eager", "scaled_mm:compiled"]


def make_step(mode: str, how: str, cfg: GPTConfig, device: str, precision: str, kernel: str):
    recipe, backend = recipe_backend(mode)
    gemm = "scaled_mm" if mode.endswith("_slow") else "dequant"
    set_cpu_fp8_gemm(gemm)   # torchao modules take it when built / moved, ScaledMMLinear at each call (step below)
    torch.manual_seed(0)
    model = GPT(cfg)
    quantize_model(model, get_policy(recipe, backend=backend), verbose=False)
    if mode == "sim_nocount":
        for m in model.modules():
            if isinstance(m, Quantizer):
                m.count = False
    model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, fused=device == "cuda" or None)
    fwd = model if how == "eager" else compile_gpt(model, "blocks" if how == "blocks" else "model")
    amp = precision == "bf16"
    checked = []

    def step(x, y):
        set_cpu_fp8_gemm(gemm)
        set_qdq_kernel(kernel)
        with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=amp):
            _, loss = fwd(x, y)
        loss.backward()
        if not checked:   # first step: every trainable parameter must have received a gradient
            check_gradient_flow(model, 1)
            checked.append(True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def build(mode_key: str, cfg: GPTConfig, batch: int, warmup: int, device: str, precision: str, kernel: str):
    """Step function for one mode, already warmed up (compiled modes compile here; so do the quantize kernels)."""
    mode, _, how = mode_key.partition("/")[0].rpartition(":")
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size), generator=g).to(device)
    y = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size), generator=g).to(device)
    t0 = time.perf_counter()
    step = make_step(mode, how, cfg, device, precision, kernel)
    for _ in range(warmup):
        step(x, y)
    _sync(device)

    def timed() -> None:
        step(x, y)
        _sync(device)

    return timed, time.perf_counter() - t0


# memory_stats() counters summed over a mode's steps (the rest are the peaks during its steps)
ALLOC_COUNTERS = ("num_alloc_retries", "num_device_alloc")


class Recorder:
    """Each mode's step times and, on CUDA, what the caching allocator did during that mode's steps."""

    def __init__(self, device: str):
        self.device = device
        self.cuda = device.startswith("cuda")
        self.times: dict[str, list[float]] = defaultdict(list)
        self.mem: dict[str, dict[str, int]] = {}

    def run(self, key: str, step) -> None:
        if self.cuda:   # peaks restart at the current use, so each step's peak is its own
            torch.cuda.reset_peak_memory_stats(self.device)
            before = torch.cuda.memory_stats(self.device)
        t = time.perf_counter()
        step()   # synchronizes on CUDA
        self.times[key].append(time.perf_counter() - t)
        if self.cuda:
            after = torch.cuda.memory_stats(self.device)
            m = self.mem.setdefault(key, {"alloc_peak": 0, "reserved_peak": 0, **dict.fromkeys(ALLOC_COUNTERS, 0)})
            m["alloc_peak"] = max(m["alloc_peak"], after.get("allocated_bytes.all.peak", 0))
            m["reserved_peak"] = max(m["reserved_peak"], after.get("reserved_bytes.all.peak", 0))
            for c in ALLOC_COUNTERS:
                m[c] += after.get(c, 0) - before.get(c, 0)

    def ms(self, key: str) -> float:
        """Median step time in ms."""
        v = sorted(self.times[key])
        return 1e3 * v[len(v) // 2]


def print_memory(title: str, rec: Recorder) -> None:
    gib = 2.0 ** 30
    print(f"\nCUDA memory, {title}: peaks during the mode's steps, counters summed over them; its step times")
    print(f"{'mode':20s} {'alloc GiB':>9s} {'resv GiB':>9s} {'retries':>8s} {'cudaMallocs':>11s}  ms min/median/max")
    for key, m in rec.mem.items():
        ms = sorted(1e3 * t for t in rec.times[key])
        print(f"{key:20s} {m['alloc_peak'] / gib:9.2f} {m['reserved_peak'] / gib:9.2f} "
              f"{m['num_alloc_retries']:8d} {m['num_device_alloc']:11d}  "
              f"{ms[0]:.1f} / {ms[len(ms) // 2]:.1f} / {ms[-1]:.1f}")


def compiled_regions(step) -> list[str]:
    """The torch.compile frames one call of step runs, as dynamo names them ('0/0': frame 0, its first graph)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step()
    tag = "Torch-Compiled Region: "
    return sorted(e.name[len(tag):] for e in prof.events() if e.name.startswith(tag))


def regions_changed(key: str, before: list[str], after: list[str]) -> str | None:
    """A warning when a compiled mode's step no longer runs the graphs it ran right after its build."""
    if before == after:
        return None

    def show(names: list[str]) -> str:
        c = Counter(names)
        parts = [n if k == 1 else f"{n} x{k}" for n, k in sorted(c.items())]
        return "[" + ", ".join(parts[:8]) + (", ..." if len(parts) > 8 else "") + "]"

    return (f"WARNING {key}: its step ran compiled frames {show(before)} after its build, {show(after)} after the "
            "later builds: a later mode changed its graphs (e.g. a graph break that made dynamo skip the model's "
            "shared forward frame), so its times are not its own compiled model's")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", nargs="+", default=DEFAULT,
                    help=f"<{'|'.join(MODES)}|any recipe, e.g. nvfp4>:<eager|compiled|blocks> (blocks: each "
                         "transformer block compiled, TrainConfig compile_scope=blocks)")
    ap.add_argument("--recipe", nargs="+", default=[],
                    help="simulated recipes to time too, eager and compiled (nvfp4, mxfp4, mxfp8, fmt:E3M4, ...)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    add_model_args(ap, batch=16)
    ap.add_argument("--qdq-kernel", nargs="+", default=["compiled"], choices=QDQ_KERNEL_MODES,
                    help="how eager quantizers run (numerics/kernels.py); compiled = auto's steady state, "
                         "compiled during the warm-up steps; dynamo = compiled, called through dynamo's frame hook "
                         "every call (before kernel_direct.py); several: each quantized mode once per kernel mode, "
                         "named <mode>/<kernel>, side by side")
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16"), help="bf16 = autocast forward")
    ap.add_argument("--also-consecutive", type=int, default=0, metavar="N",
                    help="after the interleaved rounds, time each mode for N steps in a row too and print both")
    args = ap.parse_args(argv)
    check_device(ap, args.device)
    args.modes = list(dict.fromkeys(args.modes + [f"{r}:{how}" for r in args.recipe for how in ("eager", "compiled")]))
    for key in args.modes:   # every mode checked before any is built
        mode, _, how = key.rpartition(":")
        if how not in ("eager", "compiled", "blocks"):
            ap.error(f"mode {key!r}: expected <mode>:<eager|compiled|blocks>")
        try:
            recipe_backend(mode)
        except ValueError as e:
            ap.error(f"mode {key!r}: {e}")

    torch.set_num_threads(args.threads)
    kernels = list(dict.fromkeys(args.qdq_kernel))
    # (key, qdq kernel mode): fp32 has no quantizer, so it runs once
    runs = [(k if len(kernels) == 1 or recipe_backend(k.rpartition(":")[0])[0] == "hp" else f"{k}/{kern}", kern)
            for k in args.modes for kern in kernels]
    runs = list(dict(runs).items())
    torch._dynamo.config.recompile_limit = 64     # one graph per quantizer config is fine; don't fall back to eager
    torch._dynamo.config.cache_size_limit = 64
    cfg = GPTConfig(n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd, block_size=args.block_size,
                    vocab_size=args.vocab)
    where = torch.cuda.get_device_name(args.device) + " | CPU " + cpu_model() if args.device.startswith("cuda") \
        else cpu_model()
    print(f"torch {torch.__version__} | {where} | {args.precision} | threads {args.threads} | "
          f"{cfg.short_str()} | batch {args.batch} | qdq kernels {' '.join(kernels)} | median of {args.steps} "
          f"interleaved rounds after {args.warmup} warmup steps")
    steps, warm_s, regions = {}, {}, {}
    for key, kern in runs:
        try:
            steps[key], warm_s[key] = build(key, cfg, args.batch, args.warmup, args.device, args.precision, kern)
            print(f"{key:20s} ready (build + warmup {warm_s[key]:.0f}s)", flush=True)
            if args.device.startswith("cuda") and not key.partition("/")[0].endswith(":eager"):
                regions[key] = compiled_regions(steps[key])   # one more step, on CUDA only (CPU output unchanged)
        except Exception as e:  # a failing mode should not hide the others
            print(f"{key:20s} FAILED: {type(e).__name__}: {str(e).splitlines()[0][:150]}", flush=True)
    for key, before in regions.items():   # models share code objects, so one mode's build can change another's graphs
        warning = regions_changed(key, before, compiled_regions(steps[key]))
        if warning:
            print(warning, flush=True)
    if args.device.startswith("cuda"):
        print(f"CUDA after the builds: {torch.cuda.memory_reserved(args.device) / 2 ** 30:.2f} GiB reserved, "
              f"{torch.cuda.memory_allocated(args.device) / 2 ** 30:.2f} GiB allocated", flush=True)
    # interleave the modes round by round so that load drift on a shared machine hits all modes alike
    rec = Recorder(args.device)
    for _ in range(args.steps):
        for key, step in steps.items():
            rec.run(key, step)
    tok_s = {k: args.batch * cfg.block_size * 1e3 / rec.ms(k) for k in rec.times}
    print(f"\n{'mode':20s} {'tok/s':>9s} {'ms/step':>9s}  overhead vs fp32 (same mode)")
    for key, ts in tok_s.items():
        base = tok_s.get("fp32:" + key.partition("/")[0].rpartition(":")[2])
        ratio = f"{base / ts:.2f}x" if base else "n/a"
        print(f"{key:20s} {ts:9.0f} {1e3 * args.batch * cfg.block_size / ts:9.1f}  {ratio}")
    if rec.cuda:
        print_memory("interleaved rounds", rec)
    if args.also_consecutive > 0:
        report_consecutive(steps, rec, args.also_consecutive, args.device)


def report_consecutive(steps: dict, interleaved: Recorder, n: int, device: str) -> None:
    """Time each mode for n steps in a row (after the interleaved rounds), next to its interleaved median."""
    rec = Recorder(device)
    for key, step in steps.items():
        for _ in range(n):
            rec.run(key, step)
    print(f"\n{'mode':20s} {'interleaved':>11s} {'consecutive':>11s}  ms/step, median; consecutive = {n} steps "
          "of the mode in a row")
    for key in steps:
        ratio = interleaved.ms(key) / rec.ms(key)
        print(f"{key:20s} {interleaved.ms(key):11.1f} {rec.ms(key):11.1f}  interleaved/consecutive {ratio:.2f}x")
    if rec.cuda:
        print_memory("consecutive steps", rec)


if __name__ == "__main__":
    main()
