"""Notebook parameters: unknown injected names and bad values fail, papermill documents every parameter, every
params/ YAML key is a declared parameter of its notebook, and a parameters cell's TrainConfig keys hold TrainConfig's
defaults unless the line says why not (the cells are copied by hand: this is what keeps them in step).

Cells are simulated by exec'ing their source into one namespace, as IPython does (module-level annotated
assignments land in the namespace's `__annotations__`); two tests run papermill itself on the first cells of the
real notebooks 01 and 03 (a kernel start each, no training).
"""
from __future__ import annotations

import ast
import difflib
import io
import json
import keyword
import tokenize
from pathlib import Path

import nbformat
import pytest
import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from altgrad_lib.notebook import analysis
from altgrad_lib.choices import BACKENDS
from altgrad_lib.errors import ConfigError, one_line
from altgrad_lib.notebook.params import check_value, closest_name
from altgrad_lib.training.config import KEY_ALIASES, TrainConfig

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


# ----------------------------------------------------------------------------- parameters cells against TrainConfig
# A training notebook's parameters cell copies TrainConfig keys (the CI run). Rule: each one holds TrainConfig's default
# (compared after TrainConfig's own canonicalisation: "bf16" is "hp") unless its comment says
# `not the default <literal>: <why>`, naming that default, so a changed default or a changed value shows up here.
# Every other name must be one of the notebook's own parameters: the `extra` its next cell passes to
# analysis.train_config_from, which raises on any other name at run time; here it fails before anything runs.

NOT_DEFAULT = "not the default "
DEFAULTS = TrainConfig()


def cell_lines(source: str) -> list[tuple[str, object, str]]:
    """(name, value, trailing comment) of each `name: type = literal  # comment` statement of a parameters cell."""
    comments = {t.start[0]: t.string.lstrip("#").strip()
                for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.COMMENT}
    return [(node.target.id, ast.literal_eval(node.value), comments.get(node.end_lineno, ""))
            for node in ast.parse(source).body]


def stated_default(comment: str) -> tuple[object, str] | None:
    """(default, why) of a comment's `not the default <literal>: <why>`; None without one. The literal ends at the
    first ': ' (or final ':') before which the text parses (a dict literal has ': ' inside)."""
    if NOT_DEFAULT not in comment:
        return None
    rest = comment.split(NOT_DEFAULT, 1)[1]
    for i in (i for i in range(len(rest)) if rest.startswith(": ", i) or rest[i:] == ":"):
        try:
            return ast.literal_eval(rest[:i]), rest[i + 1:].strip()
        except (ValueError, SyntaxError):
            continue
    raise ValueError(f"comment {comment!r}: write `{NOT_DEFAULT}<default as a literal>: <why>`")


def own_parameters(nb_path: Path) -> tuple[str, ...] | None:
    """The `extra` names of the analysis.train_config_from call in the cell after the parameters cell (a literal, or
    a name bound to one in that cell); None when that cell builds no TrainConfig (01, 06)."""
    nb, i = parameters_cell(nb_path)
    tree = ast.parse(nb.cells[i + 1].source)
    bound = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
             if isinstance(t, ast.Name)}
    for node in ast.walk(tree):
        called = getattr(node.func, "attr", getattr(node.func, "id", None)) if isinstance(node, ast.Call) else None
        if called == "train_config_from":   # analysis.train_config_from(...) or a bare imported name
            extra = next((k.value for k in node.keywords if k.arg == "extra"), None)
            if isinstance(extra, ast.Name):
                extra = bound[extra.id]
            return () if extra is None else tuple(ast.literal_eval(extra))
    return None


def close_names(name: str, valid) -> str:
    near = difflib.get_close_matches(name, list(valid), n=3)
    return f"close: {', '.join(near)}" if near else "none close"


def cell_problems(source: str, own: tuple[str, ...]) -> list[str]:
    """What breaks the rule above in a parameters cell whose notebook's own (non-TrainConfig) parameters are `own`."""
    keys = TrainConfig.keys()
    problems, given = [], {}
    for name, value, comment in cell_lines(source):
        if KEY_ALIASES.get(name, name) in keys:
            given[name] = (KEY_ALIASES.get(name, name), value, comment)
        elif name not in own:
            problems.append(f"{name!r} is neither a TrainConfig key ({close_names(name, [*keys, *KEY_ALIASES])}) nor "
                            f"one of the notebook's own parameters {list(own)} (train_config_from's extra)")
    try:   # (a) the library's own validation, of the keys together (n_head and n_embd are checked as a pair)
        cfg = TrainConfig.from_dict({name: value for name, (_, value, _) in given.items()})
    except ConfigError as e:
        return [*problems, f"not a valid TrainConfig: {one_line(e)}"]
    for name, (key, value, comment) in given.items():
        default = getattr(DEFAULTS, key)
        try:
            stated = stated_default(comment)
        except ValueError as e:
            problems.append(f"{name}: {e}")
            continue
        if stated is None:
            if getattr(cfg, key) != default:
                problems.append(f"{name}={value!r} is not TrainConfig's default {default!r}: keep it or say why in its "
                                f"comment, `# ...; {NOT_DEFAULT}{default!r}: <why>`")
            continue
        said, why = stated
        try:
            said_ok = getattr(TrainConfig(**{key: said}), key) == default
        except ConfigError:
            said_ok = False
        if getattr(cfg, key) == default:
            problems.append(f"{name}={value!r} is TrainConfig's default, yet its comment says {NOT_DEFAULT.strip()!r}")
        elif not said_ok:
            problems.append(f"{name}: its comment names the default {said!r}, TrainConfig's is {default!r}")
        elif not why:
            problems.append(f"{name}: its comment says {NOT_DEFAULT}{said!r} but not why (`: <why>`)")
    return problems


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_parameters_cell_keys_are_trainconfig_defaults_or_say_why(nb_path):
    nb, i = parameters_cell(nb_path)
    own = own_parameters(nb_path)
    if own is None:   # builds no TrainConfig: its names are its own (01's seed seeds the SR draws)
        pytest.skip(f"{nb_path.stem} builds no TrainConfig from its parameters")
    problems = cell_problems(nb.cells[i].source, own)
    assert not problems, f"{nb_path.stem}: " + "; ".join(problems)


def test_the_training_notebooks_are_the_ones_checked_against_trainconfig():
    # the test above skips a notebook whose next cell lost its train_config_from call: that must not go unnoticed
    assert [p.stem[:2] for p in NOTEBOOKS if own_parameters(p) is not None] == ["02", "03", "04", "05"]


SYNTHETIC = ("# papermill parameters\n"
             f"seed: int = {DEFAULTS.seed}           # init\n"
             f"warmup_steps: int = {DEFAULTS.warmup_steps}   # linear warmup\n"
             "seeds: list[int] = [0]  # the notebook's own\n")
STEPS = DEFAULTS.max_steps


@pytest.mark.parametrize("line,error", [
    ("warmup_step: int = 5  # a typo of a key", "'warmup_step' is neither a TrainConfig key (close: warmup_steps"),
    ("n_layers: int = 2  # a typo of a key", "'n_layers' is neither a TrainConfig key (close: n_layer"),
    ("seeds_: list[int] = [0]  # a typo of an own parameter", "own parameters ['seeds']"),
    (f"max_steps: int = {STEPS + 1}  # optimizer steps", f"max_steps={STEPS + 1} is not TrainConfig's default {STEPS}"),
    (f"max_steps: int = {STEPS + 1}  # steps; {NOT_DEFAULT}{STEPS + 2}: short",
     f"max_steps: its comment names the default {STEPS + 2}, TrainConfig's is {STEPS}"),
    (f"max_steps: int = {STEPS}  # steps; {NOT_DEFAULT}{STEPS}: short", "is TrainConfig's default, yet its comment"),
    (f"max_steps: int = {STEPS + 1}  # steps; {NOT_DEFAULT}{STEPS}:", "but not why"),
    (f"max_steps: int = {STEPS + 1}  # steps; {NOT_DEFAULT}fifty, it is short", "write `not the default <"),
    ('recipe: str = "fp8_hybrid"  # the recipe under test', "recipe='fp8_hybrid' is not TrainConfig's default 'hp'"),
    ("compile_model: bool = True  # torch.compile", "compile_model=True is not TrainConfig's default False"),
    ("n_head: int = 3  # heads; not the default 2: odd", "not a valid TrainConfig: TrainConfig: n_embd=64 must be "
                                                         "divisible by n_head=3"),
    ('mlp: str = "gelo"  # a bad choice', "not a valid TrainConfig: TrainConfig.mlp='gelo' is invalid"),
])
def test_a_planted_error_in_a_parameters_cell_fails_in_one_line(line, error):
    problems = cell_problems(SYNTHETIC + line + "\n", own=("seeds",))
    assert len(problems) == 1 and "\n" not in problems[0]
    assert error in problems[0], problems


@pytest.mark.parametrize("line", [
    "",
    f"max_steps: int = {STEPS + 1}  # optimizer steps; {NOT_DEFAULT}{STEPS}: a smoke test",
    f'diagnostics: Union[str, dict] = {{"preset": "cheap"}}  # {NOT_DEFAULT}{DEFAULTS.diagnostics!r}: why',
    'recipe: str = "bf16"  # an alias of the default, as TrainConfig records it',
    "compile_model: bool = False  # the notebooks' name of the key compile",
    "lr: float = 0.001  # the default, spelled otherwise",
])
def test_defaults_and_stated_differences_pass(line):
    assert cell_problems(SYNTHETIC + line + "\n", own=("seeds",)) == []


def test_own_parameters_are_read_from_the_next_cell():
    assert own_parameters(ROOT / "notebooks" / "02_bf16_baseline.ipynb") == ()
    assert own_parameters(ROOT / "notebooks" / "03_fp8_baseline.ipynb") == ("backends", "seeds")
    assert "fp4_seeds" in own_parameters(ROOT / "notebooks" / "04_exotic_formats.ipynb")   # via OWN = (...)
    assert own_parameters(ROOT / "notebooks" / "06_analysis.ipynb") is None


def yaml_problems(values: dict, decl: dict, own: tuple[str, ...] | None) -> list[str]:
    """What a params/<notebook>/*.yaml gets wrong: a name the notebook does not declare (papermill's guard would stop
    on it), a value of the wrong type, or (training notebooks) a merged config TrainConfig rejects."""
    problems = []
    for k in values:
        if k not in decl:
            what = ("a TrainConfig key the notebook does not declare (add it to the parameters cell)"
                    if KEY_ALIASES.get(k, k) in TrainConfig.keys() else "not a parameter of the notebook")
            problems.append(f"{k!r} is {what} ({close_names(k, decl)})")
    if problems:
        return problems
    for k, v in values.items():
        try:
            check_value(k, v, decl[k][0], BACKENDS if k == "backends" else None)
        except (TypeError, ValueError) as e:
            problems.append(str(e))
    if own is not None and not problems:   # the run the notebook builds from its defaults and this file
        try:
            analysis.train_config_from({**{k: d for k, (_, d) in decl.items()}, **values}, extra=own)
        except ValueError as e:
            problems.append(one_line(e))
    return problems


@pytest.mark.parametrize("yaml_path", sorted(p for p in (ROOT / "params").glob("*/*.yaml")
                                             if p.parent.name != "studies"),
                         ids=lambda p: f"{p.parent.name}/{p.stem}")   # params/studies/: study files (test_study.py)
def test_every_params_yaml_key_is_a_declared_parameter_of_its_notebook(yaml_path):
    nb_path = ROOT / "notebooks" / f"{yaml_path.parent.name}.ipynb"
    problems = yaml_problems(yaml.safe_load(yaml_path.read_text()) or {}, declared(nb_path), own_parameters(nb_path))
    assert not problems, f"{yaml_path.relative_to(ROOT)}: " + "; ".join(problems)


@pytest.mark.parametrize("values,error", [
    ({"warmup_step": 20}, "'warmup_step' is not a parameter of the notebook (close: warmup_steps"),
    ({"dropout": 0.1}, "'dropout' is a TrainConfig key the notebook does not declare"),
    ({"max_steps": "many"}, "max_steps='many' has type str, expected int"),
    ({"min_lr": 1.0}, "need lr > 0 and 0 <= min_lr <= lr"),
])
def test_a_planted_error_in_a_params_yaml_fails(values, error):
    nb_path = ROOT / "notebooks" / "02_bf16_baseline.ipynb"
    problems = yaml_problems(values, declared(nb_path), own_parameters(nb_path))
    assert len(problems) == 1 and error in problems[0], problems


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
