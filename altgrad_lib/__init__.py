"""AltGrad: simulated 8-bit float formats and a format-aware optimizer for small GPTs.

The package is flat; README.md lists every module's role. The most used names are re-exported lazily so
that `import altgrad_lib` stays cheap (no torch import until one of them is touched).
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

_LAZY = {
    "get_format": "formats", "FloatFormat": "formats", "BUILTIN_FORMATS": "formats",
    "ScalingConfig": "scaling", "QuantSpec": "quant", "Quantizer": "quant", "fake_quant": "quant",
    "GPT": "model", "GPTConfig": "model", "get_policy": "surgery", "quantize_model": "surgery",
    "TokenCorpus": "data", "load_corpus": "data", "get_tokenizer": "tokenizers",
    "TrainConfig": "train_config", "Run": "runs",
}
__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'altgrad_lib' has no attribute {name!r}")
