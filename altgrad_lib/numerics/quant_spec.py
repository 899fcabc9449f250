"""QuantSpec: what one fake-quantization point simulates (format, scaling, rounding, saturation, STE), validated
when it is built; quant.py does the fake quantization it describes.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from altgrad_lib.choices import SR_RNG
from altgrad_lib.errors import check_choice, check_keys, did_you_mean
from altgrad_lib.numerics.block_scaling import BLOCK_KINDS, BlockScaling, is_block_kind
from altgrad_lib.numerics.formats import ROUNDING_MODES, FloatFormat, get_format
from altgrad_lib.numerics.scaling import SCALING_KINDS, ScalingConfig

STE_MODES = ("identity", "clipped")
# every kind a QuantSpec's `scaling` takes (a string or a dict's "kind"): the per-tensor / per-row kinds of
# scaling.py, TransformerEngine's delayed defaults, and the block formats of block_scaling.py ("per_block" = "mx")
SPEC_SCALING_KINDS = (*SCALING_KINDS, "te_delayed", *BLOCK_KINDS, "per_block")
_ROUND_TAG = {"nearest": "rne", "stochastic": "sr", "toward_zero": "rz"}


@dataclass(frozen=True)
class QuantSpec:
    """What one fake-quantization point simulates: format, scaling, rounding, saturation and STE."""

    fmt: FloatFormat | str  # normalized to FloatFormat (a name or a dict of FloatFormat fields also work)
    scaling: ScalingConfig | BlockScaling = ScalingConfig()  # a dict or a kind string is normalized too
    rounding: str = "nearest"  # formats.ROUNDING_MODES
    saturate: bool = True  # clamp to +-fmt.max (otherwise overflow follows the format's specials)
    ste: str = "identity"  # STE_MODES
    sr_bits: int | None = None  # stochastic rounding: random bits (None = formats.py default)
    # stochastic rounding's RNG policy (choices.SR_RNG): "per_quantizer" = the Quantizer's own seeded stream,
    # continued call after call (checkpointed); "per_call" = bits that are a pure function of (seed, step, call
    # within the step), as TransformerEngine's Philox seed/offset per kernel launch (Quantizer.set_rng_step)
    sr_rng: str = "per_quantizer"

    def __post_init__(self) -> None:
        fmt = self.fmt
        if isinstance(fmt, dict):
            fmt = FloatFormat(**fmt)
        object.__setattr__(self, "fmt", get_format(fmt))
        kind = (self.scaling if isinstance(self.scaling, str) else
                self.scaling.get("kind", "current") if isinstance(self.scaling, dict) else None)
        if kind is not None and kind not in SPEC_SCALING_KINDS:
            raise ValueError(f"kind={kind!r} is invalid; valid choices: {', '.join(map(repr, SPEC_SCALING_KINDS))}"
                             f"{did_you_mean(kind, SPEC_SCALING_KINDS)}")
        if is_block_kind(self.scaling):   # "nvfp4" / "mx" (alias "per_block"): block_scaling.py
            object.__setattr__(self, "scaling", BlockScaling.from_dict(self.scaling))
            if self.ste != "identity" or self.saturate is not True:
                raise ValueError(f"scaling kind {self.scaling.kind!r} needs ste='identity' and saturate=True "
                                 f"(got ste={self.ste!r}, saturate={self.saturate!r}): block formats saturate")
        else:
            object.__setattr__(self, "scaling", ScalingConfig.from_dict(self.scaling))
        check_choice("rounding", self.rounding, ROUNDING_MODES)
        check_choice("ste", self.ste, STE_MODES)
        if not isinstance(self.saturate, bool):
            raise ValueError(f"saturate={self.saturate!r} is invalid; valid choices: True, False")
        if self.sr_bits is not None:
            if isinstance(self.sr_bits, bool) or not isinstance(self.sr_bits, int) or self.sr_bits < 1:
                raise ValueError(f"sr_bits={self.sr_bits!r} is invalid; valid: None or an int >= 1")
            if self.rounding != "stochastic":
                raise ValueError(
                    f"sr_bits={self.sr_bits!r} only applies to rounding='stochastic' (got rounding={self.rounding!r})"
                )
        check_choice("sr_rng", self.sr_rng, SR_RNG)
        if self.sr_rng != SR_RNG[0] and self.rounding != "stochastic":
            raise ValueError(f"sr_rng={self.sr_rng!r} only applies to rounding='stochastic' (got rounding="
                             f"{self.rounding!r}); valid: sr_rng={SR_RNG[0]!r} (the default) or rounding='stochastic'")

    def short_str(self) -> str:
        """e.g. "e4m3fn/cur/rne", "e5m2/dly16max-m0/sr8/clip"."""
        rnd = _ROUND_TAG.get(self.rounding, self.rounding)
        if self.sr_bits is not None:
            rnd += str(self.sr_bits)
        if self.sr_rng == "per_call":
            rnd += "@call"
        parts = [self.fmt.short_str(), self.scaling.short_str(), rnd]
        if self.ste != "identity":
            parts.append("clip")
        if not self.saturate:
            parts.append("nosat")
        return "/".join(parts)

    def to_dict(self) -> dict:
        """Plain dict (YAML/JSON friendly); from_dict(to_dict()) == self."""
        try:
            fmt: Any = self.fmt.name if get_format(self.fmt.name) == self.fmt else asdict(self.fmt)
        except (ValueError, KeyError):
            fmt = asdict(self.fmt)  # custom format that its name does not reproduce
        out = {
            "fmt": fmt,
            "scaling": self.scaling.to_dict(),
            "rounding": self.rounding,
            "saturate": self.saturate,
            "ste": self.ste,
            "sr_bits": self.sr_bits,
        }
        if self.sr_rng != SR_RNG[0]:   # only when set: every spec from before keeps its dict (and run hashes)
            out["sr_rng"] = self.sr_rng
        return out

    @classmethod
    def from_dict(cls, d: dict | str | QuantSpec) -> QuantSpec:
        """From a YAML dict, e.g. {"fmt": "E5M2", "scaling": {"kind": "delayed"}, "rounding": "stochastic"}.

        A bare string is a format name with default settings.
        """
        if isinstance(d, QuantSpec):
            return d
        if isinstance(d, (str, FloatFormat)):
            return cls(fmt=d)
        if not isinstance(d, dict):
            raise TypeError(f"QuantSpec.from_dict expects a dict or str, got {type(d).__name__}")
        valid = check_keys(cls, d, "QuantSpec")
        if "fmt" not in d:
            raise ValueError(f"QuantSpec needs 'fmt'; valid keys: {', '.join(valid)}")
        return cls(**d)
