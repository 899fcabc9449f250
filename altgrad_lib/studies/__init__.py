"""Layer 5, studies: many runs and what they say together.

    study.py       Study (base config x axes x points, checked at load), run_study
    study_claims.py  a Study's claims, control check and report (StudyClaims, mixed into Study), checked at load
    runs.py        running points: run_points (executor, reuse / resume, interrupts) and the index study.csv
    variant_runs.py  a notebook's variants x seeds through run_points: train_variants, VariantRuns
    owner.py       which study owns a study directory (study.json), so two studies never share an index
    results.py     one tidy row per run (its config keys and final metrics, did_not_learn): run_frame, load_metrics
    executors.py   where runs train: in-process, local worker processes, Ray; auto_workers
    reaper.py      the driver's reaper process: its workers (and what they started) die with it, even by SIGKILL
    comparison.py  a study file's comparison parsed and checked once: Comparison (axis, baseline, by, levels, paper)
    claims.py      paired claims over seeds: the table, the verdicts, the control check, positive controls, claims.csv
    verdicts.py    a verdict as a value: Kind (decided from the statistics), Verdict (kind, gap, CI, p, δ, MDE, family)
    paired_stats.py  the statistics of the claims' rows: sign-flip p, Holm, TOST, power / MDE, paired-t CIs, α
    papers.py      a study's `paper` findings next to its claims: paper says / AltGrad finds / agreement
    gs_bounds.py   group-sequential boundaries: α-spending, recursive integration, t calibration, Holm calls
    sequential.py  seeds until resolved: the seed plan, the looks replayed from study.csv, sequential verdicts
    until_resolved.py  the same for a notebook's variants (train_variants + the replay, keyed by label)
    stats.py       Welch / Student-t primitives and the frozen-blocks control rule
    envelope.py    LR envelopes: the largest stable LR per format, LR sensitivity
    diagnosis.py   per-format mechanism verdicts from the monitors (notebook 04)
    variants.py    notebook 05's optimizer / storage variants and the labelled runs of a format list
    budget.py      the dry run's estimate: wall time per run and per study, MDE at the study's seeds
    doctor.py      the numerics doctor: per GEMM at a checkpoint gain, cosine, bias, variance, SQNR, the loss it costs,
                   flags and verdicts; the optimizer state's stalled share (doctor_cli.py: `altgrad doctor`'s parser)
    ladder.py      a study's scale ladder: sizes x token budgets, each rung's N, D, lr and batch (study.py's `ladder:`)
    scaling_law.py  L(N, D) = E + A (κN)^-α + B D^-β: the Huber fit, bootstrap intervals, held-out check, predictions
    cli.py         `altgrad study`
    predict_cli.py  `altgrad predict --recipe R --params N --tokens D [--fit STUDY_DIR | FIT.json]`
"""
