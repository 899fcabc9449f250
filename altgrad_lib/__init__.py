"""AltGrad: simulated 8-bit float formats and a format-aware optimizer for small GPTs.

The package is flat; README.md lists every module's role. Heavy modules (training, data) are not
imported here so that `import altgrad_lib` stays cheap.
"""
from __future__ import annotations

__version__ = "0.1.0"
