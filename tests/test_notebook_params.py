"""Notebook parameters: unknown injected names and bad values fail, papermill documents every parameter, and
every params/ YAML key is a declared parameter of its notebook.

Cells are simulated by exec'ing their source into one namespace, as IPython does (module-level annotated
assignments land in the namespace's `__annotations__`); two tests run papermill itself on the first cells of the
real notebooks 01 and 03 (a kernel start each, no training).
"""
from __future__ import annotations

import ast
import json
import keyword
from pathlib import Path

import nbformat
import pytest
import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from altgrad_lib.notebook import analysis
from altgrad_lib.choices import BACKENDS
from altgrad_lib.notebook.params import check_value, closest_name

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SETUP = ("from typing import Optional\nfrom altgrad_lib.notebook import params as notebook_params\n"
         "guard = notebook_params.watch(globals())\n")
PARAMS = ("lr: float = 1e-3             # learning rate\n"
          "max_docs: Optional[int] = None\n"
          "backends: list[str] = ['sim']\n"
          "compile_model: bool = False\n")


def run_cells(*sources: str) -> dict:
    ns: dict = {"__name__": "__main__"}
    for i, src in enumerate(sources):
        exec(compile(src, f"<cell {i}>", "exec"), ns)
        ns[f"_i{i + 1}"] = src                           # IPython's own history names appear between cells
    return ns


def check(*injected: str, **kw):
    ns = run_cells(SETUP, PARAMS, *injected)
    return ns, ns["guard"].check(ns, **kw)


# ----------------------------------------------------------------------------- the guard


def test_no_injection_returns_the_declared_parameters_in_order():
    ns, p = check()
    assert list(p) == ["lr", "max_docs", "backends", "compile_model"]
    assert p == {"lr": 1e-3, "max_docs": None, "backends": ["sim"], "compile_model": False}


def test_injected_known_names_are_accepted_and_ints_become_floats():
    ns, p = check("lr = 1\nmax_docs = 5\nbackends = ['sim', 'torchao']\n")
    assert p["lr"] == 1.0 and isinstance(p["lr"], float) and isinstance(ns["lr"], float)   # namespace agrees
    assert p["max_docs"] == 5 and p["backends"] == ["sim", "torchao"]


@pytest.mark.parametrize("typo,guess", [("learning_rate", "lr"), ("max_doc", "max_docs"), ("backend", "backends"),
                                        ("compile", "compile_model")])
def test_unknown_injected_name_fails_naming_the_closest(typo, guess):
    with pytest.raises(ValueError) as ei:
        check(f"{typo} = 0.1\n")
    msg = str(ei.value)
    assert f"unknown notebook parameter {typo!r} (did you mean {guess!r}?)" in msg
    assert "valid parameters: lr, max_docs, backends, compile_model" in msg and "\n" not in msg


def test_unknown_name_with_nothing_close_and_several_problems_in_one_error():
    with pytest.raises(ValueError) as ei:
        check("zzz = 1\nlr = 'fast'\n")
    msg = str(ei.value)
    assert "'zzz' (no declared parameter is close)" in msg and "lr='fast' has type str, expected float" in msg


@settings(max_examples=50, deadline=None)
@given(st.from_regex(r"[a-z][a-z0-9_]{0,15}", fullmatch=True).filter(lambda n: not keyword.iskeyword(n)))
def test_any_undeclared_public_name_is_rejected_by_name(name):
    assume(name not in ("lr", "max_docs", "backends", "compile_model", "guard"))
    with pytest.raises(ValueError, match=f"unknown notebook parameter '{name}'"):
        check(f"{name} = 1\n")


def test_rebinding_a_name_defined_before_the_parameters_is_rejected():
    with pytest.raises(ValueError, match="unknown notebook parameter 'notebook_params'"):
        check("notebook_params = 1\n")                  # -p plots 1 would shadow the notebook's import


def test_private_names_and_the_guard_itself_are_not_parameters():
    ns, p = check("_scratch = 1\n")   # IPython defines _i3, _3, ... between cells
    assert "guard" not in p and "_scratch" not in p


@pytest.mark.parametrize("injected,match", [
    ("backends = 'sim'\n", r"backends='sim' has type str, expected list\[str\].*-y or -f"),   # papermill -p: text
    ("backends = ['sim', 'tpu']\n", r"'tpu' invalid; valid choices: \('sim', 'torchao', 'scaled_mm'\)"),
    ("backends = []\n", r"backends=\[\] is empty"),
    ("backends = ['sim', 'torchao', 'sim']\n", r"repeats 'sim'"),
    ("max_docs = 1.5\n", r"max_docs=1.5 has type float, expected int \| None"),
    ("compile_model = 1\n", r"compile_model=1 has type int, expected bool"),
])
def test_values_are_checked_against_type_and_choices(injected, match):
    with pytest.raises(ValueError, match=match):
        check(injected, choices={"backends": BACKENDS})


def test_second_check_without_watch_only_validates_values():
    # JupyterLab: re-running the check cell after later cells defined `cfg` etc. must not call them unknown
    ns = run_cells(SETUP, PARAMS, "learning_rate = 1\n")
    with pytest.raises(ValueError, match="learning_rate"):
        ns["guard"].check(ns)
    ns["cfg"] = object()
    assert ns["guard"].check(ns)["lr"] == 1e-3
    ns["lr"] = "x"
    with pytest.raises(ValueError, match="lr='x'"):
        ns["guard"].check(ns)


def test_a_parameters_cell_without_annotations_is_refused():
    ns = run_cells(SETUP, "lr = 1e-3\n")
    with pytest.raises(ValueError, match="annotated assignments"):
        ns["guard"].check(ns)


def test_check_value_types():
    assert check_value("x", True, bool) is True
    for bad, tp in ((True, int), (1, bool), ("1", int), (None, int), ([1], list[str]), ({"a": 1}, list[int])):
        with pytest.raises(TypeError):
            check_value("x", bad, tp)
    assert check_value("x", "3e-4", float) == 3e-4                     # YAML 1.1 reads 3e-4 as text
    assert check_value("x", {"recipe": "fp8_hybrid"}, "Union[str, dict]") == {"recipe": "fp8_hybrid"}
    assert check_value("x", (1, 2), list[int]) == [1, 2]


def test_closest_name():
    names = ["lr", "min_lr", "n_layer", "n_embd", "seeds", "seed"]
    assert closest_name("learning_rate", names) == "lr"          # initials beat difflib's 'min_lr'
    assert closest_name("n_embed", names) == "n_embd" and closest_name("nlayer", names) == "n_layer"
    assert closest_name("tokenizer", names) is None


# ----------------------------------------------------------------------------- the real notebooks, statically


def parameters_cell(nb_path: Path):
    nb = nbformat.read(nb_path, as_version=4)
    i = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    return nb, i


def declared(nb_path: Path) -> dict[str, tuple[str, object]]:
    """name -> (annotation source, default value), parsed with ast independently of papermill."""
    nb, i = parameters_cell(nb_path)
    out = {}
    for node in ast.parse(nb.cells[i].source).body:
        assert isinstance(node, ast.AnnAssign), f"{nb_path.name}: not `name: type = default`: {ast.unparse(node)}"
        out[node.target.id] = (ast.unparse(node.annotation), ast.literal_eval(node.value))
    return out


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_papermill_infers_every_parameter_with_type_default_and_help(nb_path):
    import papermill as pm

    found = pm.inspect_notebook(str(nb_path))
    decl = declared(nb_path)
    assert list(found) == list(decl)                      # no line papermill cannot parse, nothing extra
    for name, (annotation, default) in decl.items():
        p = found[name]
        assert p["inferred_type_name"] == annotation, (name, p)
        assert ast.literal_eval(p["default"]) == default, (name, p)
        assert p["help"], f"{nb_path.name}: parameter {name} has no help comment"
        check_value(name, default, annotation)            # each default is valid for its own type


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_guard_surrounds_the_parameters_cell(nb_path):
    # watch() in the cell before, check() first thing in the cell after (where papermill's injected cell lands)
    nb, i = parameters_cell(nb_path)
    assert "notebook_params.watch(globals())" in nb.cells[i - 1].source.splitlines()[-1]
    assert nb.cells[i + 1].source.startswith("P = guard.check(globals()")


@pytest.mark.parametrize("yaml_path", sorted(p for p in (ROOT / "params").glob("*/*.yaml")
                                             if p.parent.name != "studies"),
                         ids=lambda p: f"{p.parent.name}/{p.stem}")   # params/studies/: study files (test_study.py)
def test_every_params_yaml_key_is_a_declared_parameter_of_its_notebook(yaml_path):
    decl = declared(ROOT / "notebooks" / f"{yaml_path.parent.name}.ipynb")
    values = yaml.safe_load(yaml_path.read_text()) or {}
    unknown = sorted(set(values) - set(decl))
    assert not unknown, f"{yaml_path}: {unknown} are not parameters of the notebook (valid: {list(decl)})"
    for k, v in values.items():
        check_value(k, v, decl[k][0], BACKENDS if k == "backends" else None)
    if "recipe" in decl:   # a training notebook: the merged parameters make a valid TrainConfig
        params = {**{k: d for k, (_, d) in decl.items()}, **values}
        analysis.train_config_from(params, extra=("backends", "seeds"))


# ----------------------------------------------------------------------------- papermill on the real notebooks


def _first_cells(nb_path: Path, out: Path) -> Path:
    """The notebook up to the cell after its parameters (imports, guard, parameters, check): no training."""
    nb, i = parameters_cell(nb_path)
    nb.cells = nb.cells[: i + 2]
    nbformat.write(nb, out)
    return out


@pytest.mark.slow
def test_papermill_fails_on_a_typo_and_runs_with_a_valid_parameter(tmp_path):
    import papermill as pm

    src = _first_cells(ROOT / "notebooks" / "01_formats.ipynb", tmp_path / "01.ipynb")
    with pytest.raises(pm.PapermillExecutionError) as ei:
        pm.execute_notebook(str(src), str(tmp_path / "bad.ipynb"), parameters={"format": "E5M2", "learning_rate": 0.1},
                            kernel_name="python3", cwd=str(ROOT / "notebooks"), progress_bar=False)
    assert ei.value.ename == "ValueError"
    assert "unknown notebook parameter 'format' (did you mean 'fmt'?)" in ei.value.evalue
    assert "unknown notebook parameter 'learning_rate'" in ei.value.evalue
    pm.execute_notebook(str(src), str(tmp_path / "ok.ipynb"), parameters={"fmt": "E5M2", "n_sr": 64},
                        kernel_name="python3", cwd=str(ROOT / "notebooks"), progress_bar=False)
    banner = "".join(o.get("text", "") for o in nbformat.read(tmp_path / "ok.ipynb", 4).cells[-1].outputs)
    assert "fmt=E5M2" in banner and "n_sr=64" in banner


@pytest.mark.slow
def test_papermill_rejects_a_bad_backend_before_anything_trains(tmp_path, monkeypatch):
    import papermill as pm

    outputs = tmp_path / "outputs"
    monkeypatch.setenv("ALTGRAD_OUTPUTS", str(outputs))
    src = _first_cells(ROOT / "notebooks" / "03_fp8_baseline.ipynb", tmp_path / "03.ipynb")
    with pytest.raises(pm.PapermillExecutionError) as ei:
        pm.execute_notebook(str(src), str(tmp_path / "bad.ipynb"), parameters={"backends": ["sim", "torchoa"]},
                            kernel_name="python3", cwd=str(ROOT / "notebooks"), progress_bar=False)
    assert "'torchoa' invalid; valid choices: ('sim', 'torchao', 'scaled_mm')" in ei.value.evalue
    assert not (outputs / "runs").exists()
    nb = json.loads((tmp_path / "bad.ipynb").read_text())
    assert any("injected-parameters" in c["metadata"].get("tags", []) for c in nb["cells"])


@pytest.mark.slow
def test_papermill_rejects_a_bad_comparison_before_the_study_trains(tmp_path, monkeypatch):
    import papermill as pm

    outputs = tmp_path / "outputs"
    monkeypatch.setenv("ALTGRAD_OUTPUTS", str(outputs))
    src = _first_cells(ROOT / "notebooks" / "06_analysis.ipynb", tmp_path / "06.ipynb")
    for params, message in (({"comparison_axis": "recipes", "baseline": "hp"},
                             "'recipes' is not an axis of study 'ci_formats'; axes: ['recipe', 'freeze_blocks']"),
                            ({"comparison_axis": "recipe", "baseline": "fp8"},   # Study.level names the levels
                             "'fp8' is not a level of recipe in study 'ci_formats'; levels: ['hp', 'fp8_hybrid']"),
                            ({"value": "val_loss"}, "value='val_loss': 'val_loss' invalid")):
        with pytest.raises(pm.PapermillExecutionError) as ei:
            pm.execute_notebook(str(src), str(tmp_path / "bad.ipynb"), parameters=params, kernel_name="python3",
                                cwd=str(ROOT / "notebooks"), progress_bar=False)
        assert message in ei.value.evalue, ei.value.evalue
    assert not outputs.exists()
    for ok in ({"comparison_axis": "recipe", "baseline": "bf16"},              # an alias of hp
               {"comparison_axis": "freeze_blocks", "baseline": False}):       # a bool level, as papermill -p passes it
        pm.execute_notebook(str(src), str(tmp_path / "ok.ipynb"), parameters=ok, kernel_name="python3",
                            cwd=str(ROOT / "notebooks"), progress_bar=False)
        ns_out = "".join(o.get("text", "") for o in nbformat.read(tmp_path / "ok.ipynb", 4).cells[-1].outputs)
        assert f"comparison_axis={ok['comparison_axis']}" in ns_out
