"""The shared progress bar: text bar outside a kernel, honours `enabled`, counts from `initial`."""
from __future__ import annotations

from altgrad_lib.progress import progress_bar


def test_text_bar_outside_kernel_and_disable_flag():
    with progress_bar(10, desc="t", initial=3, unit="step") as bar:
        bar.update(2)
        assert bar.n == 5 and bar.total == 10 and bar.unit == "step"
        assert type(bar).__module__ == "tqdm.std"
    with progress_bar(10, desc="t", enabled=False) as bar:
        assert bar.disable
