"""`altgrad study -f params/studies/x.yaml [--executor local|ray] ...`: the study sub-command.

cli.py adds it with `add_study_parser(sub)` and dispatches to `cmd_study`; kept here so the study layer
owns its command line.
"""
from __future__ import annotations

import argparse
import sys

from altgrad_lib.choices import SEED_RANGE
from altgrad_lib.errors import number_arg, one_line


def add_study_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    sp = sub.add_parser("study", help="run a study: base config x axes, reuse finished runs, index study.csv",
                        description="Expand a study file into runs, train the missing ones (reuse finished, resume "
                                    "interrupted), and keep <outputs>/studies/<name>/study.csv.")
    sp.add_argument("-f", "--file", required=True, help="study YAML (params/studies/*.yaml)")
    sp.add_argument("--executor", default="local", choices=("local", "ray"), help="where runs execute (default local)")
    sp.add_argument("--workers", default=0, type=number_arg("--workers", 0, valid=(
                        "0 (auto: on CPU one worker per core for the runs still to train, on a GPU one) or N >= 1")),
                    help="local: worker processes (default 0 = auto: on CPU one single-threaded worker per core for "
                         "the runs still to train, on a GPU one; see executors.py)")
    sp.add_argument("--threads", type=number_arg("--threads", 1, valid="N >= 1 (default: cores // workers)"),
                    default=None,
                    help="torch threads per worker / Ray task (default: cores // workers; Ray: cpus per job)")
    sp.add_argument("--address", default="auto", help="ray: cluster address (default auto = `ray start` on this node)")
    sp.add_argument("--cpus-per-run", type=number_arg("--cpus-per-run", 0, kind=float), default=1,
                    help="ray: CPUs reserved per run")
    sp.add_argument("--gpus-per-run", type=number_arg("--gpus-per-run", 0, kind=float), default=0,
                    help="ray: GPUs reserved per run")
    sp.add_argument("--out", default="", help="study directory (default <outputs>/studies/<name>)")
    sp.add_argument("--no-resume", action="store_true", help="retrain every run from scratch")
    sp.add_argument("--dry-run", action="store_true", help="list the runs and exit")
    sp.add_argument("--until-resolved", action="store_true",
                    help="add seeds to the inconclusive rows (with their baseline and control) until each is worse "
                         "/ better / equivalent or --max-seeds, with group-sequential boundaries "
                         "(studies/sequential.py); "
                         "implied by a `seed: {min, max, step}` axis")
    sp.add_argument("--max-seeds", type=number_arg("--max-seeds", 2, SEED_RANGE[1], valid=(
                        f"an int in [2, {SEED_RANGE[1]}] (a paired test needs 2 seeds)")), default=None,
                    help="--until-resolved: the most seeds a row gets")
    sp.add_argument("--seed-step", type=number_arg("--seed-step", 1, SEED_RANGE[1]), default=1,
                    help="--until-resolved: seeds added per look (default 1)")
    return sp


def cmd_study(args: argparse.Namespace) -> int:
    from altgrad_lib.studies.claims import margin_line  # deferred: --help needs no pandas/torch
    from altgrad_lib.studies.executors import ExecutorError, get_executor  # deferred, as above
    from altgrad_lib.studies.study import Study, run_study  # deferred, as above

    try:
        study = Study.from_yaml(args.file, out_dir=args.out)
        study, plan_lines, worst = _seed_plan(study, args)
        points = study.check()   # every point's settings (recipe, optimizer, ...) before any run trains
        study.check_dir()        # another study's index in its directory: refused before anything runs
        if args.dry_run:
            print(study.short_str())
            if study.ladder is not None:   # sizes, N and D ranges, budgets (studies/ladder.py)
                print(study.ladder.describe(study.ladder.rungs(study.base)))
            for p in points:
                print(f"  {p.name}  {p.axes}")
            for line in [*plan_lines, *_budget(worst or points, args.workers, args.threads, holm_rows(study))]:
                print(line)
            for c in study.comparisons:   # the equivalence margin, stated before any run
                print(margin_line(c.axis, c.spec["baseline"], c.delta, c.value))   # as the file states it
            return 0
        if args.executor == "local" and args.workers == 0:   # auto, sized by the runs still to train
            executor = None if args.threads is None else get_executor("local", workers=1, threads=args.threads)
        else:
            executor = get_executor(args.executor, workers=args.workers, threads=args.threads, address=args.address,
                                    cpus_per_job=args.cpus_per_run, gpus_per_job=args.gpus_per_run)
        index = run_study(study, executor, resume=not args.no_resume)
    except (ValueError, TypeError, FileNotFoundError, ExecutorError) as e:
        print(f"altgrad study: error: {one_line(e)}", file=sys.stderr)
        return 2
    counts = index.status.value_counts().to_dict()
    print("status: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if study.comparisons:
        print_claims(study, index)
    return 1 if counts.get("failed") else 0


CLAIM_COLUMNS = ("level", "n_seeds", "n_diverged", "n_diverged_baseline", "n", "gap_nats", "ci_level", "ci_lo",
                 "ci_hi", "gap_window", "p_paired", "p_holm", "p_perm", "signs", "p_welch", "delta_nats", "p_tost",
                 "equiv_bound", "mde_nats", "control", "smoke", "verdict")


def print_claims(study, index) -> None:
    """The claims output of a study: its first lines (an unresolved positive control, a smoke-test warning), the rules
    with δ and the MDE, then one table per comparison with its own `by` keys and value, under the line naming its
    verdicts' family (ci_level: the level of the CI beside each verdict, 0.90 beside TOST); claims.csv is written
    next to study.csv."""
    import pandas as pd

    from altgrad_lib.studies.claims import by_columns  # deferred: --help needs no pandas/torch
    from altgrad_lib.studies.paired_stats import ALPHA  # deferred, as above
    from altgrad_lib.studies.verdicts import FAMILY_COLUMN, family_words  # deferred, as above

    try:
        entropy = study.eval_entropy()
    except (OSError, ValueError, RuntimeError) as e:   # the corpus could not be read: the check says so
        print(f"note: unigram entropy of the evaluation tokens unavailable ({e})")
        entropy = None
    claims, lines = study.report(index, entropy)
    print()
    for line in lines:
        print(line)
    with pd.option_context("display.width", 250, "display.max_columns", 40, "display.precision", 4):
        for name, t in claims.groupby("comparison", sort=False):
            by = [c for c in by_columns(t) if t[c].notna().any()]   # this comparison's keys, not another's
            print(f"\nclaims: {name} (paired by seed, gaps in nats; value {t['value'].iloc[0]}; α = {ALPHA}; "
                  f"δ = {t.delta_nats.iloc[0]:.4g} nats; window {t.window_nats.iloc[0]:.4f} nats)")
            fam = family_words(t[FAMILY_COLUMN]) if FAMILY_COLUMN in t else ""
            if fam:   # every printed verdict names its family: once above the rows that share it
                print(fam)
            seq = [c for c in ("look", "p_bound") if c in t]   # a sequential study: each row's last look, bound
            print(t[[*by, *[c for c in CLAIM_COLUMNS if c in t], *seq]].to_string(index=False))
    print(f"\n-> {study.claims_path}")


def _seed_plan(study, args: argparse.Namespace) -> tuple:
    """(study with its seed plan, the plan's dry-run lines, the worst case's points) for --until-resolved or a
    `seed: {min, max, step}` axis; (study, [], []) otherwise."""
    import dataclasses

    from altgrad_lib.studies.sequential import dry_run_lines, plan_for  # deferred: --help needs no pandas/torch

    if not (args.until_resolved or study.seed_plan is not None):
        if args.max_seeds is not None:
            raise ValueError(f"--max-seeds {args.max_seeds} needs --until-resolved")
        return study, [], []
    plan = plan_for(study, args.max_seeds, args.seed_step)
    study = dataclasses.replace(study, seed_plan=plan)
    lines, worst = dry_run_lines(study, plan) if args.dry_run else ([], [])
    return study, lines, worst


def holm_rows(study) -> int:
    """Rows of the study's largest Holm family (one per comparison; the largest has the largest MDE, the one its
    budget states): the comparison's `levels` (else its axis' levels but the baseline), times the levels of every
    other varied axis but the seed (claims_table pairs within each of their combinations)."""
    sizes = []
    for c in study.comparisons:
        m = len(c.levels) or max(1, len(study.axes.get(c.axis, ())) - 1)
        for k, v in study.axes.items():
            if k not in (c.axis, "seed"):
                m *= max(1, len(v))
        sizes.append(m)
    return max(sizes, default=1)


def _budget(points: list, workers: int, threads: int | None = None, holm_rows: int = 1) -> list[str]:
    """studies/budget.py's estimate for the dry run (vocabulary from the tokenizer, workers and threads as the study
    would use them)."""
    from altgrad_lib.studies.budget import process_age_seconds, study_budget  # deferred: --help needs no pandas/torch
    from altgrad_lib.studies.executors import auto_workers, default_threads  # deferred, as above
    from altgrad_lib.training.tokenizers import get_tokenizer  # deferred, as above

    cfg = points[0].config
    n = workers or auto_workers(len(points), cfg.device)   # "auto" resolved as the study's run resolves it

    class _Points:           # the budget reads the points the dry run already checked
        def expand(self):
            return points

    return study_budget(_Points(), get_tokenizer(cfg.data_config.tokenizer).n_vocab, workers=n,
                        threads=threads or (default_threads(n) if n > 1 else None), driver_s=process_age_seconds(),
                        holm_rows=holm_rows)
