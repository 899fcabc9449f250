"""Test-session settings.

Quantizers run eager in tests ($ALTGRAD_QDQ_KERNEL=eager unless the caller set it): the default "auto" compiles a
kernel per quantizer configuration after 32 calls, which made the numerics/quantize test files ~2.9x slower
(26 s -> 76 s, bench/results/train_step.md) and pays only in long runs. tests/test_numerics_kernels.py chooses
its modes itself (kernels.set_qdq_kernel), so the compiled path stays tested; study workers spawned by tests
inherit the variable.
"""
from __future__ import annotations

import os

os.environ.setdefault("ALTGRAD_QDQ_KERNEL", "eager")
