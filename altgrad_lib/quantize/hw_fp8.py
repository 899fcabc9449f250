"""Real-dtype FP8 backends for E4M3/E5M2 linears: torchao float8 training and a hand-written `torch._scaled_mm` path.

These are the peers the simulator (`quantize.linear.QuantizedLinear`, backend "sim") is checked against:

- backend "torchao":   `torchao.float8.convert_to_float8_training` with per-tensor dynamic ("current") scaling,
  cast targets taken from the policy (E4M3 X/W, E5M2 dY for fp8_hybrid).
- backend "scaled_mm": `ScaledMMLinear`, whose autograd.Function casts X and W to torch.float8_e4m3fn with
  per-tensor scales and calls `torch._scaled_mm` for Y = X·Wᵀ; in backward dY is cast once to float8_e5m2 and
  `_scaled_mm` computes both dX = dY·W and dW = dYᵀ·X.

On a GPU with FP8 tensor cores (H100/MI300/RTX 40xx) these are the real hardware paths. On CPU there are no FP8
GEMMs: by default (`cpu_fp8_gemm() == "dequant"`) both backends compute each GEMM of CPU tensors as dequantize +
FP32 GEMM: ScaledMMLinear as torch's own CPU emulation of `_scaled_mm` does (ATen's `_scaled_mm_out_cpu_emulated`:
codes·(1/s) per operand, then matmul; bit-identical to it, tests/test_quantize_hw_fp8.py), torchao through its
`emulate=True` GEMMs (codes/s per operand: the same FP8 codes and scales, each dequantized operand within a few ulp
of codes·fl(1/s), so results agree to fp32 rounding, a bound the tests derive). Both apply the scales before the
fp32 accumulation; cuBLAS and oneDNN apply them to the accumulator (fp32 rounding again, GPU numbers are not
CPU numbers to the bit either way). `torch._scaled_mm` itself is an option, not the default: on
CPUs with AMX (Intel Sapphire Rapids and later) torch routes it to oneDNN, which took 750-930 ms for one
1024x64 @ 64x256 GEMM (2,000-3,000x FP32; 1.23 s on another AMX Xeon, bench/cpu_fp8_gemm.py) and made notebook 03
take hours. Ask for it with the environment
variable ALTGRAD_CPU_FP8_GEMM=scaled_mm (inherited by study workers) or `set_cpu_fp8_gemm("scaled_mm")` before
building the model. Which CPU kernel runs is not part of a run's config hash, as the CPU vendor is not. CUDA
tensors always go through `torch._scaled_mm`. Only the two hardware formats are supported; exotic formats
(E3M4, E2M1, ...) need backend="sim".
"""
from __future__ import annotations

import contextlib
import logging

import torch
import torch.nn as nn

from altgrad_lib.choices import HW_BACKENDS
from altgrad_lib.errors import ProcessMode

HW_DTYPES = {"E4M3": torch.float8_e4m3fn, "E5M2": torch.float8_e5m2}
GEMM_MULTIPLE = 16  # FP8 tensor-core GEMMs need every dim to be a multiple of 16


# ----------------------------------------------------------------------------- how CPU tensors do their FP8 GEMMs

CPU_FP8_GEMMS = ("dequant", "scaled_mm")   # dequantize + FP32 GEMM (default) | torch._scaled_mm (slow with AMX)
CPU_FP8_GEMM_ENV = "ALTGRAD_CPU_FP8_GEMM"
_CPU_FP8_GEMM = ProcessMode("CPU FP8 GEMM mode", CPU_FP8_GEMM_ENV, CPU_FP8_GEMMS, "dequant")


def set_cpu_fp8_gemm(mode: str | None) -> None:
    """Choose how hardware-backend GEMMs of CPU tensors run: "dequant" or "scaled_mm" (None: back to the
    environment variable / default). Set it before building the model: torchao modules read it when built or
    moved (`.to()`), ScaledMMLinear at each call."""
    _CPU_FP8_GEMM.set(mode)


def cpu_fp8_gemm() -> str:
    """The CPU FP8 GEMM mode in force: set_cpu_fp8_gemm's, else $ALTGRAD_CPU_FP8_GEMM, else "dequant"."""
    return _CPU_FP8_GEMM.get()


def _dequant_gemm(device: torch.device) -> bool:
    return device.type == "cpu" and cpu_fp8_gemm() == "dequant"


# ----------------------------------------------------------------------------- validation

def hw_dtype(spec, backend: str, role: str, fqn: str) -> torch.dtype:
    """torch float8 dtype for a QuantSpec, or a clear error when the hardware cannot do what the spec asks."""
    hint = (f"backend {backend!r} supports only E4M3/E5M2 forward and E5M2 grads with current per-tensor "
            f"scaling and round-to-nearest; use backend='sim'")
    if spec is None:
        raise ValueError(f"{fqn}.{role}: high precision operand inside an FP8 GEMM is not possible; {hint}")
    fmt = spec.fmt
    dtype = HW_DTYPES.get(fmt.name)
    # the torch dtype must have the very same grid (E4M3 here is the "fn" variant: max 448, no inf)
    if dtype is None or float(torch.finfo(dtype).max) != float(fmt.max):
        raise ValueError(f"{fqn}.{role}: format {fmt.short_str()} not supported; {hint}")
    if role == "grad_output" and fmt.name != "E5M2":
        raise ValueError(f"{fqn}.{role}: grads must be E5M2, got {fmt.short_str()}; {hint}")
    if spec.scaling.kind != "current" or spec.scaling.pow2 or spec.scaling.margin != 0:
        raise ValueError(f"{fqn}.{role}: scaling {spec.scaling.short_str()} not supported; {hint}")
    if spec.rounding != "nearest" or not spec.saturate:
        raise ValueError(f"{fqn}.{role}: rounding={spec.rounding!r} saturate={spec.saturate} not supported; {hint}")
    return dtype


def check_hw_gemm(backend: str, layer_spec, where: str) -> None:
    """A LayerSpec with `gemm` options (GEMM-faithful path) cannot run on a hardware backend: these paths quantize
    each tensor once, for every GEMM, so hp_gemms, the RHT and operand overrides would be silently ignored."""
    if getattr(layer_spec, "gemm", None) is not None:
        raise ValueError(f"{where}: gemm options ({layer_spec.gemm.short_str()}) are not possible on backend "
                         f"{backend!r}; use backend='sim' or drop 'gemm'")


def check_hw_layer(backend: str, layer_spec, fqn: str, linear: nn.Linear) -> tuple[torch.dtype, ...]:
    """Validate one Linear for a hardware backend; returns (x_dtype, w_dtype, g_dtype)."""
    if backend not in HW_BACKENDS:
        raise ValueError(f"unknown hardware backend {backend!r}; valid choices: {HW_BACKENDS}")
    cpu_fp8_gemm()   # a bad $ALTGRAD_CPU_FP8_GEMM is refused here, when the model is built (preflight), not mid-run
    dtypes = tuple(hw_dtype(getattr(layer_spec, r), backend, r, fqn) for r in ("input", "weight", "grad_output"))
    check_hw_gemm(backend, layer_spec, fqn)
    if linear.in_features % GEMM_MULTIPLE or linear.out_features % GEMM_MULTIPLE:
        raise ValueError(
            f"{fqn}: shape (out={linear.out_features}, in={linear.in_features}) must be multiples of "
            f"{GEMM_MULTIPLE} for FP8 GEMMs on backend {backend!r}; keep this layer high precision "
            f"(policy layer -> null) or use backend='sim'"
        )
    return dtypes


# ----------------------------------------------------------------------------- torch._scaled_mm path

def _to_fp8(x_hp: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-tensor current scaling: x_fp8 = sat(x * s) with s = fp8_max / amax(x); returns (x_fp8, 1/s)."""
    fp8_max = torch.finfo(dtype).max
    amax = x_hp.detach().abs().amax().float().clamp(min=1e-12)   # eps: an all-zero tensor gets a finite scale
    scale = fp8_max / amax
    x_fp8 = (x_hp.float() * scale).clamp(-fp8_max, fp8_max).to(dtype)  # clamp = saturate (e4m3fn has no inf)
    return x_fp8, scale.reciprocal()


def _fp8_gemm(a: torch.Tensor, b: torch.Tensor, a_inv_s: torch.Tensor, b_inv_s: torch.Tensor,
              out_dtype: torch.dtype) -> torch.Tensor:
    """(a_inv_s · a) @ (b_inv_s · b) for FP8 codes a (M, K) and b (K, N), accumulated in fp32.

    CUDA (or cpu_fp8_gemm() == "scaled_mm"): torch._scaled_mm. CPU by default: the very ops of torch's CPU
    emulation of _scaled_mm (ATen Blas.cpp, `_scaled_mm_out_cpu_emulated`: both operands made contiguous, cast to
    fp32, multiplied by their inverse scale, then matmul), so the result is bit-identical to `_scaled_mm` wherever
    torch emulates it (CPUs without AMX, or oneDNN off); with AMX torch calls oneDNN instead (slow; the scales
    are applied around its own accumulation, so results differ there by fp32 rounding)."""
    if _dequant_gemm(a.device):
        return torch.matmul(a.contiguous().float() * a_inv_s, b.contiguous().float() * b_inv_s).to(out_dtype)
    # _scaled_mm wants its second operand column-major (CUDA requires it; CPU accepts either)
    return torch._scaled_mm(a, b.t().contiguous().t(), scale_a=a_inv_s, scale_b=b_inv_s, out_dtype=out_dtype)


class _ScaledMMFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_hp, w_hp, x_dtype, w_dtype, g_dtype):
        lead = x_hp.shape[:-1]
        x2_hp = x_hp.reshape(-1, x_hp.shape[-1])                                  # (M, K)
        x_fp8, x_inv_s = _to_fp8(x2_hp, x_dtype)
        w_fp8, w_inv_s = _to_fp8(w_hp, w_dtype)                                  # (N, K)
        y = _fp8_gemm(x_fp8, w_fp8.t(), x_inv_s, w_inv_s, x_hp.dtype)            # (M, N)
        ctx.save_for_backward(x_fp8, x_inv_s, w_fp8, w_inv_s)
        ctx.g_dtype, ctx.out_dtype, ctx.lead = g_dtype, x_hp.dtype, lead
        return y.reshape(*lead, w_hp.shape[0])

    @staticmethod
    def backward(ctx, grad_y_hp):
        x_fp8, x_inv_s, w_fp8, w_inv_s = ctx.saved_tensors
        g2_hp = grad_y_hp.reshape(-1, grad_y_hp.shape[-1])                       # (M, N)
        g_fp8, g_inv_s = _to_fp8(g2_hp, ctx.g_dtype)                             # one cast feeds both GEMMs
        grad_x = _fp8_gemm(g_fp8, w_fp8, g_inv_s, w_inv_s, ctx.out_dtype)        # dX = dY · W : (M, N) @ (N, K)
        # dW = dYᵀ · X : (N, M) @ (M, K); the transposed dY is made row-major as _scaled_mm's first operand must be
        grad_w = _fp8_gemm(g_fp8.t().contiguous(), x_fp8, g_inv_s, x_inv_s, ctx.out_dtype)
        return grad_x.reshape(*ctx.lead, -1), grad_w, None, None, None


class ScaledMMLinear(nn.Linear):
    """nn.Linear whose GEMMs run in FP8 through `torch._scaled_mm` on GPU (on CPU: `_fp8_gemm`, module docstring).

    Bias is added in high precision and its gradient uses the unquantized dY (as torchao does)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, layer_spec=None,
                 layer_class: str = "", device=None, dtype=None):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.layer_spec = layer_spec
        self.layer_class = layer_class
        self.x_dtype, self.w_dtype, self.g_dtype = check_hw_layer("scaled_mm", layer_spec, layer_class, self)

    @classmethod
    def from_linear(cls, linear: nn.Linear, layer_spec, layer_class: str = "", fqn: str = "") -> "ScaledMMLinear":
        check_hw_layer("scaled_mm", layer_spec, fqn or layer_class, linear)
        new = cls(linear.in_features, linear.out_features, bias=linear.bias is not None,
                  layer_spec=layer_spec, layer_class=layer_class, device="meta")
        new.weight = linear.weight  # same Parameter object: keeps weight tying and optimizer references
        new.bias = linear.bias
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = _ScaledMMFunc.apply(x, self.weight, self.x_dtype, self.w_dtype, self.g_dtype)  # (..., N)
        return y + self.bias if self.bias is not None else y

    def extra_repr(self) -> str:
        names = {v: k.lower() for k, v in HW_DTYPES.items()}
        return (f"{super().extra_repr()}, {self.layer_class}, "
                f"x:{names[self.x_dtype]} w:{names[self.w_dtype]} g:{names[self.g_dtype]} (_scaled_mm)")


# ----------------------------------------------------------------------------- torchao path

# What importing torchao logs on a box without its CUDA kernels (per logger): one "Failed to load <_C*.so>" line
# per kernel library (CUDA-only: mxfp8, cutlass sm90a; the float8 path we use is Python), and torch's notice that
# torchao registers an Enum with register_constant. Neither concerns our use; both landed in notebook outputs.
_TORCHAO_IMPORT_NOISE = {"torchao": ("Failed to load ",),
                         "torch.utils._pytree": ("is an Enum subclass and is now natively supported",)}


class _DropMessages(logging.Filter):
    def __init__(self, needles: tuple[str, ...]):
        super().__init__()
        self.needles = needles

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not any(n in msg for n in self.needles)


@contextlib.contextmanager
def quiet_torchao_import():
    """Import torchao inside this to drop only its import-time noise (above); every other record still shows."""
    filters = [(logging.getLogger(name), _DropMessages(needles)) for name, needles in _TORCHAO_IMPORT_NOISE.items()]
    for lg, f in filters:
        lg.addFilter(f)
    try:
        import torchao  # noqa: F401  (the first import is the noisy one)
        yield
    finally:
        for lg, f in filters:
            lg.removeFilter(f)


def torchao_config(layer_spec, fqn: str = "", linear: nn.Linear | None = None):
    """Float8LinearConfig matching a LayerSpec (dynamic tensorwise scaling, dtypes from the spec).

    emulate=False: the GEMMs call torch._scaled_mm. convert_torchao's modules switch to torchao's `emulate=True`
    GEMMs (dequantize, FP32 GEMM) while their weights are on the CPU (module docstring)."""
    with quiet_torchao_import():
        from torchao.float8 import Float8LinearConfig
        from torchao.float8.config import CastConfig

    if linear is not None:
        x_dtype, w_dtype, g_dtype = check_hw_layer("torchao", layer_spec, fqn, linear)
    else:
        x_dtype, w_dtype, g_dtype = (hw_dtype(getattr(layer_spec, r), "torchao", r, fqn)
                                     for r in ("input", "weight", "grad_output"))
    return Float8LinearConfig(
        cast_config_input=CastConfig(target_dtype=x_dtype),
        cast_config_weight=CastConfig(target_dtype=w_dtype),
        cast_config_grad_output=CastConfig(target_dtype=g_dtype),
    )


_DEVICE_AWARE: list[type] = []   # the Float8Linear subclass, made once torchao is imported (import cost)


def _device_aware_float8_linear() -> type:
    """torchao's Float8Linear whose GEMMs follow its weight's device: emulated (dequantize, FP32 GEMM) on CPU
    when cpu_fp8_gemm() is "dequant", torch._scaled_mm otherwise. torchao fixes `emulate` per module when it builds
    it, and our models are converted on CPU, then moved; so the choice is remade whenever the module moves."""
    if not _DEVICE_AWARE:
        from torchao.float8.float8_linear import Float8Linear

        class DeviceAwareFloat8Linear(Float8Linear):
            def _apply(self, fn, recurse=True):   # .to() / .cuda() / .cpu() all come through here
                out = super()._apply(fn, recurse)
                self.follow_device()
                return out

            def follow_device(self) -> None:
                emulate = _dequant_gemm(self.weight.device)
                self.linear_mm_config = type(self.linear_mm_config)(
                    *(c._replace(emulate=emulate) for c in self.linear_mm_config))

        _DEVICE_AWARE.append(DeviceAwareFloat8Linear)
    return _DEVICE_AWARE[0]


def convert_torchao(model: nn.Module, layer_specs: dict[str, object]) -> None:
    """Swap the Linears named in `layer_specs` (fqn -> LayerSpec) for torchao Float8Linear, in place (as the
    device-aware subclass above)."""
    with quiet_torchao_import():
        from torchao.float8 import convert_to_float8_training

    modules = dict(model.named_modules())
    groups: dict[tuple, list[str]] = {}
    for fqn, spec in layer_specs.items():
        check_hw_layer("torchao", spec, fqn, modules[fqn])
        key = tuple(hw_dtype(getattr(spec, r), "torchao", r, fqn) for r in ("input", "weight", "grad_output"))
        groups.setdefault(key, []).append(fqn)
    # one conversion call per distinct config; module_filter_fn selects exactly the requested fqns
    for fqns in groups.values():
        wanted = set(fqns)
        config = torchao_config(layer_specs[fqns[0]], fqns[0])
        convert_to_float8_training(model, config=config, module_filter_fn=lambda mod, fqn: fqn in wanted)
    cls = _device_aware_float8_linear()
    for fqn in layer_specs:
        m = model.get_submodule(fqn)
        m.__class__ = cls   # adds no state, only the _apply hook: torchao built it, we keep its __init__
        m.follow_device()


def is_float8_linear(m: nn.Module) -> bool:
    """A torchao Float8Linear (ours or torchao's own), without importing torchao."""
    return any(c.__name__ == "Float8Linear" for c in type(m).__mro__)
