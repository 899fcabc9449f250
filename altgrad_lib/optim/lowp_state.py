"""Low-precision optimizer state: a state tensor (Adam's m or v) stored as 8-bit codes plus fp32 scales.

`StateFormat(fmt="E4M3", block=256, rounding="nearest", min_numel=4096)`: the flattened tensor is cut into blocks
of `block` elements (0 = one scale for the whole tensor); each block is scaled by the power of two
s_b = 2^floor(log2(fmt.max / amax_b)) (an all-zero block keeps s_b = 1; a power of two makes decoding exact and
independent of how a kernel divides, at the cost of up to one binade of headroom, as MX's E8M0 scales) and
rounded onto the format with our formats.py (RNE, or stochastic with the optimizer's generator).  Stored: uint8 codes (the torch float8 bit pattern for formats torch has, formats.encode
otherwise) + one fp32 scale per block.  Decoding gives Q(x * s_b) / s_b in fp32.  Tensors with fewer than
`min_numel` elements keep fp32 state (as torchao's and bitsandbytes' 8-bit optimizers do): their cost is
negligible and they are the sensitive ones (LayerNorm gains, biases).

Memory: 1 byte per element + 4 bytes per block: 1.016 bytes per element at block 256, so m and v together take
2.03 bytes per parameter instead of 8 (25.4 %).  Unsigned formats for v are not offered: every named format in
formats.py is signed, so v (>= 0) wastes the sign bit.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from altgrad_lib.formats import get_format
from altgrad_lib.scaling import pow2_floor


@dataclass(frozen=True)
class StateFormat:
    """How one optimizer state tensor is stored (see the module docstring)."""

    fmt: str = "E4M3"
    block: int = 256
    rounding: str = "nearest"
    min_numel: int = 4096

    def __post_init__(self) -> None:
        object.__setattr__(self, "fmt", get_format(self.fmt).name)
        if get_format(self.fmt).bits > 8:            # BF16 / FP16 (formats_wide.py) are weight grids, not 8-bit codes
            raise ValueError(f"state format {self.fmt!r} has {get_format(self.fmt).bits} bits; valid: a format of "
                             f"<= 8 bits such as 'E4M3', 'E5M2'")
        if self.rounding not in ("nearest", "stochastic"):
            raise ValueError(f"rounding={self.rounding!r} is invalid; valid choices: ('nearest', 'stochastic')")
        for name in ("block", "min_numel"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name}={v!r} is invalid; valid: an int >= 0")

    def short_str(self) -> str:
        blk = f"b{self.block}" if self.block else "t"
        return f"{get_format(self.fmt).short_str()}/{blk}/{'sr' if self.rounding == 'stochastic' else 'rne'}"

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
        fmt = get_format(self.fmt)
        xb = self._blocks(x)
        amax = xb.abs().amax(dim=1)
        scale = torch.where(amax > 0, pow2_floor(fmt.max / amax.clamp_min(2.0**-126)), torch.ones_like(amax))
        q = fmt.quantize(xb * scale[:, None], self.rounding, generator=generator)
        if fmt.native is not None:
            codes = q.to(getattr(torch, fmt.native)).view(torch.uint8)       # exact: q is already on the grid
        else:
            codes = fmt.encode(q)
        return codes, scale

    @torch.no_grad()
    def decode(self, codes: torch.Tensor, scale: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """fp32 tensor of like's shape."""
        fmt = get_format(self.fmt)
        q = codes.view(getattr(torch, fmt.native)).float() if fmt.native is not None else fmt.decode(codes)
        return (q / scale[:, None]).flatten()[: like.numel()].view(like.shape)

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
