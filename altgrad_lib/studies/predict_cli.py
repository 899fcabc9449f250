"""`altgrad predict --recipe R --params N --tokens D [--fit STUDY_DIR | FIT.json]`: a recipe's predicted loss and
its gap to the baseline at N parameters and D tokens, from a precision scaling-law fit (scaling_law.py).

cli.py adds it with `add_predict_parser(sub)` and dispatches to `cmd_predict`. Without --fit it reads the committed
fit of the cpu ladder (COMMITTED_FIT); none is committed yet (the ladder has not been run), so it says so in one
line. Every refusal (no fit, a recipe the fit lacks, N or D not positive, an extrapolation the fit's rungs do not
span: scaling_law's rule) is one line `altgrad predict: error: ...` and exit 2.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from altgrad_lib.choices import unalias_recipe
from altgrad_lib.errors import number_arg, one_line

# the committed fit of params/studies/cpu_ladder.yaml (ScalingFit.to_json), relative to the repository root
COMMITTED_FIT = Path(__file__).resolve().parents[2] / "bench" / "results" / "cpu_ladder_fit.json"


def add_predict_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    pp = sub.add_parser("predict", help="predicted loss and gap vs hp at N params, D tokens, from a scaling-law fit",
                        description="A recipe's predicted final validation loss and its gap to the baseline (hp) at "
                                    "N parameters and D tokens, with bootstrap intervals, from a fit of L = E + "
                                    "A (κN)^-α + B D^-β to a ladder study (studies/scaling_law.py); the "
                                    "extrapolation factor beyond the fit's rungs, a warning past 100x, and a "
                                    "refusal past what the rungs' span licenses.")
    pp.add_argument("--recipe", required=True, help="a recipe the fit holds (e.g. nvfp4)")
    pp.add_argument("--params", required=True, type=number_arg("--params", 1, kind=float),
                    help="N: parameters (e.g. 1e9)")
    pp.add_argument("--tokens", required=True, type=number_arg("--tokens", 1, kind=float),
                    help="D: training tokens (e.g. 2e10)")
    pp.add_argument("--fit", default="", help="a ladder study's directory (its study.csv is fitted now) or a fit "
                                              f".json file (default: the committed {COMMITTED_FIT.name})")
    pp.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                    help="show the traceback of input errors too")
    return pp


def cmd_predict(args: argparse.Namespace) -> int:
    from altgrad_lib.studies.scaling_law import load_fit, predict_lines  # deferred: --help needs no numpy / scipy

    try:
        if not args.fit and not COMMITTED_FIT.is_file():
            raise ValueError(f"no fit to predict from: no committed fit at bench/results/{COMMITTED_FIT.name} "
                             f"(the cpu ladder has not been run yet); valid: --fit STUDY_DIR (a ladder study's "
                             f"directory, e.g. after `altgrad study -f params/studies/cpu_ladder.yaml`) or --fit "
                             f"FILE.json")
        fit = load_fit(args.fit or COMMITTED_FIT)
        recipe = unalias_recipe(args.recipe)
        lines = predict_lines(fit, recipe, args.params, args.tokens)
    except (ValueError, FileNotFoundError) as e:
        print(f"altgrad predict: error: {one_line(e)}", file=sys.stderr)
        return 2
    for line in lines:
        print(line)
    return 0
