"""AltGrad: simulated low-precision float formats and format-aware optimizers for small GPTs.

The package is in layers; a module imports only from layers below its own (tests/test_layers.py checks it):

    errors.py choices.py io.py paths.py state.py   layer 0: shared by all (one-line errors, valid values,
                                                  atomic files, where outputs live, RNG / tensor snapshots)
    numerics/   1  formats, rounding, scaling, fake-quant, grid maths   (model_config.py: GPTConfig, layer 1)
    quantize/   2  recipes, QuantizedLinear, model surgery, hardware FP8 peers   (model.py: the GPT, layer 2)
    optim/      3  format-aware optimizers and weight storage modes
    monitors/   3  training diagnostics
    training/   4  one run: config, loop, run directory, checkpoints, data
    studies/    5  many runs: studies, executors, statistics, envelopes
    notebook/   6  what notebooks show: tables, plots, dashboard, papermill parameters
    cli.py      7  `altgrad train | study`

The most used names are re-exported lazily so that `import altgrad_lib` stays cheap (no torch import until one
of them is touched).
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

# torch versions whose numerics we test: 2.13 (CI, CPU) and 2.11 (the stock image of rented GPU boxes).
# Outside this range float8 casts, torch.compile and autograd.Function tracing have changed under us
# before (e.g. 2.11's compiled autograd.Function dropped gradients), so refuse rather than guess.
TORCH_SUPPORTED = ((2, 11), (2, 14))   # inclusive (major, minor) range
_OVERRIDE = "ALTGRAD_ALLOW_ANY_TORCH"


def _check_torch() -> None:
    import os
    import re
    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version("torch")
    except PackageNotFoundError:
        raise ImportError("altgrad_lib needs torch: `pip install torch==2.13.0` (CPU wheel) before the rest") from None
    m = re.match(r"(\d+)\.(\d+)", v)
    lo, hi = TORCH_SUPPORTED
    if m and not (lo <= (int(m[1]), int(m[2])) <= hi) and not os.environ.get(_OVERRIDE):
        raise ImportError(f"altgrad_lib supports torch {lo[0]}.{lo[1]} to {hi[0]}.{hi[1]}, found torch {v}; install "
                          f"torch==2.13.0, or set {_OVERRIDE}=1 to run untested numerics at your own risk")


_check_torch()

# Lazy, not explicit imports: they would import torch on `import altgrad_lib` (tests/test_init.py keeps it
# torch-free) and point from layer 0 up to every layer. In the package, import a name from its module.
_LAZY = {
    "get_format": "numerics.formats", "FloatFormat": "numerics.formats", "BUILTIN_FORMATS": "numerics.formats",
    "ScalingConfig": "numerics.scaling", "QuantSpec": "numerics.quant_spec", "Quantizer": "numerics.quantizer",
    "fake_quant": "numerics.quant", "GPT": "model", "GPTConfig": "model_config", "get_policy": "quantize.recipes",
    "quantize_model": "quantize.convert", "TokenCorpus": "training.data", "load_corpus": "training.data",
    "get_tokenizer": "training.tokenizers", "TrainConfig": "training.config", "Run": "training.run_dir",
}
__all__ = ["__version__", "TORCH_SUPPORTED", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'altgrad_lib' has no attribute {name!r}")
