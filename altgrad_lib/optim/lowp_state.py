"""Low-precision optimizer state: a state tensor (Adam's m or v) stored as 8-bit codes plus fp32 scales.

`StateFormat(fmt="E4M3", block=256, rounding="nearest", min_numel=4096, transform="none", scale="pow2")`: the
flattened tensor is cut into blocks of `block` elements (0 = one scale for the whole tensor); each block is scaled
by the power of two s_b = 2^floor(log2(fmt.max / amax_b)) (an all-zero block keeps s_b = 1; a power of two makes
decoding exact and independent of how a kernel divides, at the cost of up to one binade of headroom, as MX's E8M0
scales) and rounded onto the format with our formats.py (RNE, or stochastic with the optimizer's
generator).  Stored: uint8 codes (the torch float8 bit pattern for formats torch has, formats.encode otherwise) +
one fp32 scale per block. Decoding gives Q(x * s_b) / s_b in fp32.  Tensors with fewer than `min_numel` elements
keep fp32 state (as torchao's and bitsandbytes' 8-bit optimizers do): their cost is negligible and they are the
sensitive ones (LayerNorm gains, biases).  `transform` (state_codec.py: none, sqrt, expand) is applied to each block
before the scaling above and inverted after decoding; with "expand" the scale tensor is (n_blocks, 2): the block's
amax and COAT's exponent k instead of the power-of-two scale. scale="amax": s_b = fmt.max / amax_b in fp32 instead
(as torchao's AdamWFp8): decoding is no longer exact, but a block whose values all shrink by the same factor (v's
decay) is followed by s_b even when every code stays.

Rounding: with "nearest", Adam's v <- 0.999 v + 0.001 g^2 cannot decay (a 1e-3 relative step is below half an
ULP of any 8-bit format) and stays several times too large; use "stochastic" (bench/results/state_precision.md).

Memory: 1 byte per element + 4 bytes per block: 1.016 bytes per element at block 256, so m and v together take
2.03 bytes per parameter instead of 8 (25.4 %).  Unsigned formats for v: "UE<x>M<y>" (state_codec.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from altgrad_lib.choices import STATE_SCALES
from altgrad_lib.optim.state_codec import TRANSFORMS, contract, expand, signed_sqrt, signed_square, state_format
from altgrad_lib.numerics.scaling import pow2_floor


@dataclass(frozen=True)
class StateFormat:
    """How one optimizer state tensor is stored (see the module docstring)."""

    fmt: str = "E4M3"
    block: int = 256
    rounding: str = "nearest"
    min_numel: int = 4096
    transform: str = "none"
    scale: str = "pow2"

    def __post_init__(self) -> None:
        object.__setattr__(self, "fmt", state_format(self.fmt).name)
        if state_format(self.fmt).bits > 8:          # BF16 / FP16 (formats_wide.py) are weight grids, not 8-bit codes
            raise ValueError(f"state format {self.fmt!r} has {state_format(self.fmt).bits} bits; valid: a format of "
                             f"<= 8 bits such as 'E4M3', 'E5M2'")
        if self.rounding not in ("nearest", "stochastic"):
            raise ValueError(f"rounding={self.rounding!r} is invalid; valid choices: ('nearest', 'stochastic')")
        if self.transform not in TRANSFORMS:
            raise ValueError(f"transform={self.transform!r} is invalid; valid choices: {TRANSFORMS}")
        if self.scale not in STATE_SCALES:
            raise ValueError(f"scale={self.scale!r} is invalid; valid choices: {STATE_SCALES}")
        for name in ("block", "min_numel"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name}={v!r} is invalid; valid: an int >= 0")

    def short_str(self) -> str:
        blk = f"b{self.block}" if self.block else "t"
        tr = ("" if self.transform == "none" else f"/{self.transform}") + ("" if self.scale == "pow2" else "/amax")
        return f"{state_format(self.fmt).short_str()}/{blk}/{'sr' if self.rounding == 'stochastic' else 'rne'}{tr}"

    def applies_to(self, numel: int) -> bool:
        return numel >= self.min_numel

    # ---- encode / decode
    def _blocks(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.detach().float().flatten()
        b = self.block or flat.numel()
        pad = (-flat.numel()) % b
        if pad:
            flat = torch.cat([flat, flat.new_zeros(pad)])
        return flat.view(-1, b)                                            # (n_blocks, block)

    @torch.no_grad()
    def encode(self, x: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(codes uint8 of shape (n_blocks, block), scales fp32 (n_blocks,))."""
        fmt = state_format(self.fmt)
        xb = self._blocks(x)
        if self.transform == "expand":
            y, scale = expand(xb, fmt)                       # scale: (n_blocks, 2) = [amax, k]
        else:
            xb = signed_sqrt(xb) if self.transform == "sqrt" else xb
            amax = xb.abs().amax(dim=1)
            s = fmt.max / amax.clamp_min(2.0**-126)
            scale = torch.where(amax > 0, pow2_floor(s) if self.scale == "pow2" else s, torch.ones_like(amax))
            y = xb * scale[:, None]
        q = fmt.quantize(y, self.rounding, generator=generator)
        if fmt.native is not None:
            codes = q.to(getattr(torch, fmt.native)).view(torch.uint8)       # exact: q is already on the grid
        else:
            codes = fmt.encode(q)
        return codes, scale

    @torch.no_grad()
    def decode(self, codes: torch.Tensor, scale: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """fp32 tensor of like's shape."""
        fmt = state_format(self.fmt)
        q = codes.view(getattr(torch, fmt.native)).float() if fmt.native is not None else fmt.decode(codes)
        if self.transform == "expand":
            x = contract(q, scale, fmt)
        else:
            x = q / scale[:, None]
            x = signed_square(x) if self.transform == "sqrt" else x
        return x.flatten()[: like.numel()].view(like.shape)

    @staticmethod
    def nbytes(codes: torch.Tensor, scale: torch.Tensor) -> int:
        return codes.numel() * codes.element_size() + scale.numel() * scale.element_size()


def state_bytes(optimizer: torch.optim.Optimizer) -> dict[str, float]:
    """Bytes of optimizer state tensors (all of them, incl. step counters) and bytes per trainable parameter."""
    total = 0
    n = sum(p.numel() for g in optimizer.param_groups for p in g["params"])
    for st in optimizer.state.values():
        for v in st.values():
            if torch.is_tensor(v):
                total += v.numel() * v.element_size()
    return {"state_bytes": total, "params": n, "bytes_per_param": total / max(n, 1)}
