"""`import altgrad_lib` is cheap and its lazy re-exports resolve."""
from __future__ import annotations


def test_package_import_is_light_and_lazy_exports_resolve():
    import subprocess
    import sys
    code = ("import sys, altgrad_lib as a; assert 'torch' not in sys.modules; "
            "[getattr(a, n) for n in a.__all__]; print(a.get_format('E4M3').max)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "448.0"


def _import_with_torch_version(v: str, env_extra: dict | None = None):
    import os
    import subprocess
    import sys
    code = ("import importlib.metadata as md; real = md.version; "
            f"md.version = lambda d: {v!r} if d == 'torch' else real(d); import altgrad_lib; print('ok')")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **(env_extra or {})})


def test_torch_outside_the_supported_range_fails_at_import_with_one_clear_message():
    for v in ("2.10.0", "2.15.0+cu130", "3.0.0"):
        out = _import_with_torch_version(v)
        assert out.returncode != 0 and "supports torch 2.11 to 2.14, found torch " + v in out.stderr
    for v in ("2.11.0+cu130", "2.13.0+cpu", "2.14.1"):
        assert _import_with_torch_version(v).stdout.strip() == "ok", v
    assert _import_with_torch_version("2.10.0", {"ALTGRAD_ALLOW_ANY_TORCH": "1"}).stdout.strip() == "ok"
