"""Command line: `altgrad train -f params/x.yaml -p key=value ...` (also `python -m altgrad_lib.cli`).

Values after `-p` are parsed with yaml.safe_load, so `-p lr=3e-4 -p compile=true -p max_docs=null` work.
`altgrad train --help` lists every TrainConfig key with its default.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields
from typing import Sequence


def _keys_help() -> str:
    from altgrad_lib.train_config import TrainConfig  # torch-free: --help stays instant

    width = max(len(f.name) for f in fields(TrainConfig))
    lines = ["config keys (-p key=value; defaults = tiny CI run):"]
    for f in fields(TrainConfig):
        lines.append(f"  {f.name:<{width}}  {f.default!r}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="altgrad", description="AltGrad: small GPTs with simulated low-precision floats")
    sub = ap.add_subparsers(dest="command", required=True)
    tp = sub.add_parser("train", help="train (or resume / reuse) one run",
                        description="Train one run; the run dir holds config.yaml, metrics.csv, checkpoints.",
                        epilog=_keys_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    tp.add_argument("-f", "--file", help="YAML file of TrainConfig keys")
    tp.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                    help="override one key (repeatable); VALUE is parsed as YAML")
    tp.add_argument("--no-resume", action="store_true",
                    help="start from scratch even if the run dir holds a checkpoint or a finished run")
    tp.add_argument("--no-progress", action="store_true", help="no progress bar")
    tp.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    from altgrad_lib.study_cli import add_study_parser  # `altgrad study -f params/studies/x.yaml`

    add_study_parser(sub)
    return ap


def _cmd_train(args: argparse.Namespace) -> int:
    from altgrad_lib.train_config import TrainConfig

    try:
        cfg = TrainConfig.from_yaml(args.file, args.param)
    except (ValueError, TypeError, FileNotFoundError) as e:
        print(f"altgrad train: error: {e}", file=sys.stderr)
        return 2
    if args.print_config:
        print(json.dumps(cfg.resolved().to_dict(), indent=2))
        return 0
    print(f"config: {cfg.short_str()}")
    from altgrad_lib.checkpoint import CheckpointError
    from altgrad_lib.train import GradientFlowError, RunConflictError, train

    try:
        run = train(cfg, resume=not args.no_resume, progress=not args.no_progress)
    except (CheckpointError, RunConflictError, GradientFlowError) as e:
        print(f"altgrad train: error: {e}", file=sys.stderr)
        return 1
    print(f"run_dir: {run.dir}")
    print(f"status: {run.status}{' (reused)' if run.reused else ''}")
    if run.diverged and run.divergence:
        first = run.divergence.get("first_nonfinite") or {}
        print(f"diverged_at_step: {run.divergence.get('step')}  first_nonfinite: "
              f"{first.get('kind', '?')} {first.get('name', '?')}")
    last = run.metrics.groupby("name")["value"].last() if len(run.metrics) else {}
    for name in ("train/loss", "val/loss", "val/ppl"):
        if name in last:
            print(f"{name}: {last[name]:.6g}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "train":
        return _cmd_train(args)
    if args.command == "study":
        from altgrad_lib.study_cli import cmd_study

        return cmd_study(args)
    return 2  # unreachable: argparse enforces the sub-command


if __name__ == "__main__":
    sys.exit(main())
