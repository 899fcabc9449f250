"""errors.invalid / check_choice: the one "bad value; valid choices" error of the package (it replaced five local
variants), and no package module importing another's private name."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from altgrad_lib.errors import ConfigError, check_choice, exc_line, invalid
from altgrad_lib.monitors.config import DiagnosticsConfig
from altgrad_lib.numerics.quant_spec import QuantSpec
from altgrad_lib.training.config import TrainConfig

PKG = Path(__file__).resolve().parents[1] / "altgrad_lib"


def test_invalid_names_the_value_a_near_choice_and_every_choice_on_one_line():
    e = invalid("optim.storage", "grid_rn", ("fp32", "grid_rne", "grid_sr"))
    assert type(e) is ValueError
    assert str(e) == ("optim.storage='grid_rn' is invalid; did you mean 'grid_rne'?; valid choices: "
                      "('fp32', 'grid_rne', 'grid_sr')")
    assert str(invalid("interval", -1, "an int >= 0")) == "interval=-1 is invalid; valid: an int >= 0"
    with pytest.raises(ConfigError, match=r"^x='zz' is invalid; valid choices: \('a', 'b'\)$"):
        check_choice("x", "zz", ("a", "b"), ConfigError)
    check_choice("x", "a", ("a", "b"))


@pytest.mark.parametrize("make, needle", [
    (lambda: TrainConfig(precision="bf61"), "TrainConfig.precision='bf61' is invalid; did you mean 'bf16'?"),
    (lambda: TrainConfig(device="cdua"), "valid choices: ('auto', 'cpu', 'cuda', 'cuda:<i>')"),
    (lambda: DiagnosticsConfig(preset="chep"), "DiagnosticsConfig.preset='chep' is invalid; did you mean 'cheap'?"),
    (lambda: QuantSpec(fmt="E4M3", rounding="stochastc"),
     "rounding='stochastc' is invalid; did you mean 'stochastic'?"),
])
def test_config_errors_go_through_it(make, needle):
    with pytest.raises(ValueError) as ei:
        make()
    assert needle in str(ei.value) and "\n" not in str(ei.value)


def test_no_package_module_imports_a_private_name_of_another():
    bad = []
    for f in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("altgrad_lib"):
                bad += [f"{f.relative_to(PKG)}: {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    assert not bad, bad


def test_exc_line_keeps_the_cause_that_a_header_line_introduces():
    """dynamo's BackendCompilerFailed says only "backend='inductor' raised:" on its first line; the cause is on the
    next one, and a failed kernel's warning showed nothing else (seen under ATEN_CPU_CAPABILITY=default)."""
    wrapped = RuntimeError("backend='inductor' raised:\nCppCompileError: C++ compile error\n\nCommand:\ng++ ...")
    assert exc_line(wrapped) == "RuntimeError: backend='inductor' raised: CppCompileError: C++ compile error"
    assert exc_line(ValueError("three is bad\nsecond line never shown")) == "ValueError: three is bad"
    assert exc_line(KeyError(), limit=5) == "KeyEr"
