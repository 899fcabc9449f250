"""Verdict stability: one study trained on two (or more) float paths, each row's verdict on each, and whether they
agree (issue 47 item 5). Two machines of one model name differ in their ISA, and so in a quantized run's last
digits; ATEN_CPU_CAPABILITY=default takes torch's scalar kernels on this very machine, a second float path at no
cost. A disagreement is allowed only in a row whose CI touches ±δ on some path (claims.near_margin), where the
verdict rests on those digits.

    ALTGRAD_OUTPUTS=/tmp/vs/native  altgrad study -f params/studies/cpu_formats.yaml
    ATEN_CPU_CAPABILITY=default ALTGRAD_OUTPUTS=/tmp/vs/default altgrad study -f params/studies/cpu_formats.yaml
    python bench/verdict_stability.py --study params/studies/cpu_formats.yaml \\
        --run native=/tmp/vs/native --run default=/tmp/vs/default --md bench/results/verdict_stability.md
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_md import header, md_table

from altgrad_lib.studies.claims import near_margin
from altgrad_lib.studies.runs import run_machines
from altgrad_lib.studies.study import Study
from altgrad_lib.studies.verdicts import FAMILY_COLUMN, KIND_COLUMN

KEY = ["comparison", "level"]


def stability_table(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per (comparison, level) of the claims tables, keyed by path label: each path's verdict and gap
    [CI], `same` (one verdict kind on every path), `near ±δ` (the CI touches ±δ on some path) and `allowed` (same,
    or near ±δ)."""
    labels = list(tables)
    merged = None
    for lab, t in tables.items():
        part = t[KEY].copy()
        part[f"verdict ({lab})"] = t["verdict"].astype(str)
        part[f"gap [CI] ({lab})"] = [f"{g:+.4f} [{lo:+.4f}, {hi:+.4f}]"
                                     for g, lo, hi in zip(t.gap_nats, t.ci_lo, t.ci_hi)]
        part[f"_kind {lab}"] = t[KIND_COLUMN].astype(str)
        part[f"_near {lab}"] = near_margin(t).to_numpy()
        merged = part if merged is None else merged.merge(part, on=KEY, how="outer")
    kinds = merged[[f"_kind {lab}" for lab in labels]]
    merged["same"] = kinds.nunique(axis=1, dropna=False) == 1
    merged["near ±δ"] = merged[[f"_near {lab}" for lab in labels]].fillna(False).astype(bool).any(axis=1)
    merged["allowed"] = merged["same"] | merged["near ±δ"]
    return merged.drop(columns=[c for c in merged if c.startswith("_")])


def run_differences(frames: dict[str, pd.DataFrame], value: str = "final_val_loss") -> pd.DataFrame:
    """Per run present on every path: the spread of `value` across the paths (max − min), in nats."""
    cols = {lab: f.set_index("run")[value] for lab, f in frames.items()}
    both = pd.DataFrame(cols).dropna()
    return pd.DataFrame({"run": both.index, "spread_nats": (both.max(axis=1) - both.min(axis=1)).to_numpy()})


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--study", required=True, help="study YAML (params/studies/*.yaml)")
    ap.add_argument("--run", action="append", required=True, metavar="LABEL=OUTPUTS",
                    help="a float path's label and the ALTGRAD_OUTPUTS its study ran under (give two or more)")
    ap.add_argument("--md", help="write the markdown report here")
    args = ap.parse_args(argv)
    paths = {}
    for spec in args.run:
        lab, sep, root = spec.partition("=")
        if not sep or not lab or not root:
            ap.error(f"--run {spec!r}: expected LABEL=OUTPUTS, e.g. native=/tmp/vs/native")
        paths[lab] = Path(root)
    if len(paths) < 2:
        ap.error(f"--run given {len(paths)} time(s): two or more float paths are compared")
    tables, frames, lines, machines = {}, {}, {}, {}
    for lab, root in paths.items():
        base = Study.from_yaml(args.study)
        study = Study.from_yaml(args.study, out_dir=str(root / "studies" / base.name))
        frames[lab] = study.results()
        tables[lab], lines[lab] = study.report(frames[lab], study.eval_entropy(), write=False)
        machines[lab] = run_machines(frames[lab])
    stab = stability_table(tables)
    diffs = run_differences(frames)
    out = [header("Verdict stability: one study, two float paths of one machine", sys.argv if argv is None else
                  ["bench/verdict_stability.py", *argv]), ""]
    out.append(f"Study `{args.study}` ({len(next(iter(frames.values())))} runs per path).")
    for lab in paths:
        out.append(f"- **{lab}**: runs on {'; '.join(f'{n} x {k}' for k, n in machines[lab].items())}")
    fam = sorted({str(f) for t in tables.values() for f in t.get(FAMILY_COLUMN, pd.Series(dtype=str))})
    out += ["", f"Verdict families: {'; '.join(fam) or 'none recorded'}.", ""]
    for lab in paths:
        out.append(f"What the study prints before its table on **{lab}**:")
        out += [f"    {ln}" for ln in lines[lab][:-1]] + [""]
    out += ["## Verdicts per row", "", md_table(stab), ""]
    n_same, n_allowed = int(stab.same.sum()), int(stab.allowed.sum())
    out.append(f"{n_same}/{len(stab)} rows get one verdict on every path; {len(stab) - n_same} differ, of which "
               f"{n_allowed - n_same} have a CI touching ±δ (allowed) and {len(stab) - n_allowed} do not "
               f"({'none' if n_allowed == len(stab) else 'a verdict that depends on the machine beyond its margin'}).")
    out += ["", "## The runs themselves", ""]
    identical = int((diffs.spread_nats == 0).sum())
    out.append(f"{len(diffs)} runs on every path; {identical} bit-identical in final validation loss; spread "
               f"(max − min over paths) median {np.median(diffs.spread_nats):.2e}, max {diffs.spread_nats.max():.2e} "
               f"nats ({diffs.loc[diffs.spread_nats.idxmax(), 'run']}).")
    text = "\n".join(out) + "\n"
    print(text)
    if args.md:
        Path(args.md).write_text(text)
        print(json.dumps({"written": args.md}))


if __name__ == "__main__":
    main()
