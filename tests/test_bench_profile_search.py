"""bench/profile_search.py's `--study-noise`: the evaluation's sampling error on a finished study's own runs."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from helpers import tiny_study_dict

from altgrad_lib.studies.study import Study, run_study

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import profile_search


def test_study_noise_pairs_each_level_with_the_baseline_of_its_seed(tmp_path, monkeypatch):
    """A tiny study (hp, fp8_hybrid x seeds 0, 1): each claims row's error is the worst seed's per-batch sd of
    (level - baseline) on the same val batches over sqrt(eval_iters), recomputed here from each run's cached
    per-batch losses by seed (a mix-up of seeds or runs changes it); the first eval_iters batches reproduce the
    runs' own final val loss (checked inside; a mismatch stops)."""
    monkeypatch.setenv("ALTGRAD_OUTPUTS", str(tmp_path / "outputs"))
    s = Study.from_dict(tiny_study_dict(tmp_path), out_dir=str(tmp_path / "st"))
    idx = run_study(s, log=lambda m: None)
    s.report(idx)
    noise = profile_search.study_eval_noise(tmp_path / "st", 8)
    assert noise.level.tolist() == ["fp8_hybrid"] and noise.seeds.tolist() == [2]
    runs = {(r.recipe, r.seed): Path(r.run_dir) for r in idx.itertuples()}
    sd = [np.std(np.load(runs[("fp8_hybrid", k)] / "val_batches_8.npy")
                 - np.load(runs[("hp", k)] / "val_batches_8.npy"), ddof=1) for k in (0, 1)]
    e = int(noise.eval_iters.iloc[0])
    row = noise.iloc[0]
    assert row["sampling error of one eval"] == max(sd) / math.sqrt(e) > 0
    claims = pd.read_csv(tmp_path / "st" / "claims.csv")
    assert row["MDE / error"] == claims.mde_nats.iloc[0] / row["sampling error of one eval"]
