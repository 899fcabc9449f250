"""Command line: `altgrad train -f params/x.yaml -p key=value ...` (also `python -m altgrad_lib.cli`), `altgrad study
-f params/studies/x.yaml` and `altgrad fidelity RECIPE [--json]` (quantize/fidelity.py).

Values after `-p` are parsed with yaml.safe_load, so `-p lr=3e-4 -p compile=true -p max_docs=null` work.
`altgrad train --help` lists every TrainConfig key with its default, meaning and valid choices (from the
field metadata in training/config.py). A mistake in the input (errors.UserError: config, YAML file, run directory,
checkpoint, a flag's value out of range: errors.number_arg) prints one line `altgrad: error: ...` and exits 2;
`--debug` shows its traceback. Anything else is a bug and keeps its traceback. SIGTERM / SIGINT (preemption,
Ctrl-C) during training finish the current step, write a checkpoint, print one line `altgrad: interrupted by
SIGTERM at step N; re-run the same command to resume` and exit 75 (EXIT_INTERRUPTED, sysexits' "temporary
failure"); a second signal aborts at once.
"""
from __future__ import annotations

import argparse
import json
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any, Sequence

import yaml

import altgrad_lib
from altgrad_lib.choices import RECIPES, SEED_RANGE
from altgrad_lib.errors import Interrupted, SizeWarning, UserError, number_arg, one_line
from altgrad_lib.studies.cli import add_study_parser, cmd_study   # `altgrad study -f params/studies/x.yaml`
from altgrad_lib.studies.doctor_cli import add_doctor_parser   # `altgrad doctor RUN_DIR`
from altgrad_lib.studies.predict_cli import add_predict_parser, cmd_predict   # `altgrad predict --recipe R ...`
from altgrad_lib.training.config import TrainConfig, key_docs
from altgrad_lib.training.interrupt import EXIT_INTERRUPTED  # 75
# Everything above is torch-free, so `altgrad --help` starts at once; the modules that import torch (run_dir,
# preflight, loop) are imported inside the commands that need them.

EXIT_USER_ERROR = 2   # argparse's code for a usage error
EXIT_RUN_FAILED = 1   # the run could not train (gradient-flow guard)


def _keys_help() -> str:
    docs = key_docs()
    width = max(len(k) for k, *_ in docs)
    dwidth = max(len(repr(d)) for _, d, *_ in docs)
    indent = " " * (2 + width + 2 + dwidth + 2)
    lines = ["config keys (-p key=value, or the same keys in the -f YAML; defaults = a tiny CI run):"]
    for key, default, meaning, choices in docs:
        text = meaning + (f" (choices: {', '.join(choices)})" if choices else "")
        body = textwrap.wrap(text, width=max(40, 118 - len(indent)))
        lines.append(f"  {key:<{width}}  {default!r:<{dwidth}}  {body[0]}")
        lines.extend(indent + b for b in body[1:])
    return "\n".join(lines)


def version_string() -> str:
    """'altgrad <version> (git <sha12>[-dirty])' of the altgrad_lib actually imported."""
    from altgrad_lib.training.run_dir import git_info   # local: imports torch, pandas (--help stays instant)

    g = git_info(Path(altgrad_lib.__file__).resolve().parent)
    sha = g["sha"] if g["sha"] == "unknown" else g["sha"][:12] + ("-dirty" if g["dirty"] else "")
    return f"altgrad {altgrad_lib.__version__} (git {sha})"


class _VersionAction(argparse.Action):
    """--version, computed only when asked (git is not run for every command)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kw: Any) -> None:
        super().__init__(option_strings, dest=dest, nargs=0, default=argparse.SUPPRESS,
                         help="print the package version and git SHA, then exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        print(version_string())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="altgrad", description="AltGrad: small GPTs with simulated low-precision floats")
    ap.add_argument("--version", action=_VersionAction)
    ap.add_argument("--debug", action="store_true", help="show the traceback of input errors too")
    sub = ap.add_subparsers(dest="command", required=True)
    tp = sub.add_parser("train", help="train (or resume / reuse) one run",
                        description="Train one run; the run dir holds config.yaml, metrics.csv, checkpoints. "
                                    "Input errors print one line and exit 2.",
                        epilog=_keys_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    tp.add_argument("-f", "--file", help="YAML file of TrainConfig keys")
    tp.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                    help="override one key (repeatable); VALUE is parsed as YAML")
    tp.add_argument("--no-resume", action="store_true",
                    help="start from scratch even if the run dir holds a checkpoint or a finished run")
    tp.add_argument("--no-progress", action="store_true", help="no progress bar")
    tp.add_argument("--print-config", action="store_true",
                    help="check recipe, backend, tokenizer and device, print the resolved config and exit")
    tp.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                    help="show the traceback of input errors too")
    add_study_parser(sub)
    add_doctor_parser(sub)
    add_predict_parser(sub)
    fp = sub.add_parser("fidelity", help="what a recipe simulates exactly, approximately and not at all",
                        description="Per layer class, GEMM and operand: the format, scaling, rounding and RHT the "
                                    "recipe sets, AltGrad's quantization of a fixed synthetic operand against every "
                                    "available reference (torch float8, ml_dtypes, gfloat, torchao MX / NVFP4), the "
                                    "stochastic-rounding Monte-Carlo, the accumulator and attention settings and the "
                                    "tensors the recipe touches. CPU, offline, a few seconds.")
    fp.add_argument("recipe", help=f"a recipe ({', '.join(RECIPES)}), a recipe dict in YAML / JSON, or a .yaml / "
                                   f".json file holding one")
    fp.add_argument("--json", action="store_true", help="print the report as JSON")
    fp.add_argument("--seed", type=number_arg("--seed", *SEED_RANGE), default=0,
                    help="seed of the synthetic operands and of the SR draws")
    fp.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                    help="show the traceback of input errors too")
    return ap


def _cmd_train(args: argparse.Namespace) -> int:
    cfg = TrainConfig.from_yaml(args.file, args.param)
    if args.print_config:
        from altgrad_lib.training.preflight import check_config   # local: imports torch (--help stays instant)

        check_config(cfg)
        print(json.dumps(cfg.resolved().to_dict(), indent=2))
        return 0
    print(f"config: {cfg.short_str()}")
    from altgrad_lib.training.loop import GradientFlowError, train   # local: imports torch (--help stays instant)

    try:
        run = train(cfg, resume=not args.no_resume, progress=not args.no_progress)
    except GradientFlowError as e:
        _error(e)
        return EXIT_RUN_FAILED
    print(f"run_dir: {run.dir}")
    print(f"status: {run.status}{' (reused)' if run.reused else ''}")
    if run.diverged:
        # the result of a diverged run is the divergence; its last validation loss is stale (e.g. step 0)
        print(f"result: {run.divergence_str()}; no final loss (see {run.dir / 'divergence.json'})")
        return 0
    last = run.metrics.groupby("name")["value"].last() if len(run.metrics) else {}
    for name in ("train/loss", "val/loss", "val/ppl"):
        if name in last:
            print(f"{name}: {last[name]:.6g}")
    return 0


def _recipe_arg(text: str) -> str | dict:
    """A recipe name, or a dict from inline YAML / JSON or from a .yaml / .json file."""
    path = Path(text)
    if path.suffix.lower() in (".yaml", ".yml", ".json"):
        if not path.is_file():
            raise UserError(f"recipe file {text!r} does not exist; valid: a recipe name ({', '.join(RECIPES)}) or "
                            f"a .yaml / .json file")
        text = path.read_text()
    elif not text.lstrip().startswith("{"):
        return text
    try:
        d = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise UserError(f"recipe {text!r} is not valid YAML / JSON: {one_line(e)}") from None
    if not isinstance(d, dict):
        raise UserError(f"recipe {text!r}: expected a dict, got {type(d).__name__}")
    return d


def _cmd_fidelity(args: argparse.Namespace) -> int:
    recipe = _recipe_arg(args.recipe)
    from altgrad_lib.quantize.recipes import get_policy   # local: imports torch (--help stays instant)

    try:    # every recipe mistake (name, switch, format, dict key) before anything is computed
        policy = get_policy(recipe)
    except (ValueError, TypeError) as e:
        raise UserError(f"altgrad fidelity: {one_line(e)}") from None
    from altgrad_lib.quantize.fidelity import fidelity_report   # local: imports torch, torchao, ml_dtypes, gfloat

    report = fidelity_report(policy, seed=args.seed)
    print(report.to_json() if args.json else report)
    return 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    from altgrad_lib.studies.doctor import doctor_report   # local: imports torch (--help stays instant)
    from altgrad_lib.notebook.plots_doctor import doctor_figure   # local: matplotlib

    report = doctor_report(args.run_dir, args.step, args.batches, args.draws, args.inject)
    print(report)
    out = Path(args.out) if args.out else Path(args.run_dir) / "doctor"
    report.to_csv(out / "doctor.csv")
    report.optimizer.to_csv(out / "doctor_optimizer.csv", index=False)
    report.layers.to_csv(out / "doctor_layers.csv", index=False)
    doctor_figure(report).savefig(out / "doctor.png")
    print(f"wrote {out / 'doctor.csv'}, {out / 'doctor_optimizer.csv'}, {out / 'doctor_layers.csv'}, "
          f"{out / 'doctor.png'}")
    return 0


def _error(e: BaseException) -> None:
    print(f"altgrad: error: {one_line(e)}", file=sys.stderr)


def _show_warning(message: Any, category: type, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
    print(f"altgrad: warning: {one_line(message)}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except UserError as e:   # a flag's value (errors.number_arg): argparse lets it through, one line as any input error
        if "--debug" in (sys.argv[1:] if argv is None else argv):
            raise
        _error(e)
        return EXIT_USER_ERROR

    prev = warnings.showwarning
    warnings.showwarning = lambda m, c, *a, **k: (_show_warning(m, c, *a, **k) if issubclass(c, SizeWarning)
                                                   else prev(m, c, *a, **k))
    try:
        if args.command == "train":
            return _cmd_train(args)
        if args.command == "study":
            return cmd_study(args)
        if args.command == "predict":
            return cmd_predict(args)
        if args.command == "fidelity":
            return _cmd_fidelity(args)
        if args.command == "doctor":
            return _cmd_doctor(args)
    except UserError as e:
        if args.debug:
            raise
        _error(e)
        return EXIT_USER_ERROR
    except Interrupted as e:   # preempted / Ctrl-C: the state is saved; one line, no traceback
        print(f"altgrad: {e}", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    finally:
        warnings.showwarning = prev
    return EXIT_USER_ERROR  # unreachable: argparse enforces the sub-command


if __name__ == "__main__":
    sys.exit(main())
