"""`import altgrad_lib` is cheap and its lazy re-exports resolve."""
from __future__ import annotations


def test_package_import_is_light_and_lazy_exports_resolve():
    import subprocess
    import sys
    code = ("import sys, altgrad_lib as a; assert 'torch' not in sys.modules; "
            "[getattr(a, n) for n in a.__all__]; print(a.get_format('E4M3').max)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "448.0"
