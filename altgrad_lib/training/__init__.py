"""Layer 4, training: one run, from a validated config to a run directory that resumes exactly.

    config.py      TrainConfig: the frozen, validated config every notebook / YAML / CLI call goes through
    sub_configs.py ModelConfig, DataConfig, PrecisionSchedule: TrainConfig's model and data parts and its parsed
                   precision_schedule, as build.py, data.py and the loop take them
    loop.py        train(): preflight, build, the step loop, eval, checkpoints, divergence records
    schedules.py   what changes with the step: the learning rate, the GEMMs precision_schedule keeps in high precision
                   (each phase checked against the recipe at load)
    build.py       the GPTConfig and the quantized GPT of a TrainConfig
    preflight.py   every check a config can pass before its run directory exists (incl. memory / time estimates)
    run_dir.py     Run (the result object), run directories (free / locked), provenance, the tidy metrics writer
    checkpoint.py  atomic, sha256-checked checkpoints with every RNG and the data position
    data.py        corpora (embedded licence texts, EurLex, local files), memmap token cache, deterministic batches
    tokenizers.py  tiktoken encodings: GPT-2 (sha256-checked) and truncated gpt2-<N>
    interrupt.py   SIGTERM / SIGINT: finish the step, checkpoint, stop with errors.Interrupted (exit 75 in the CLI)
    guards.py      gradient-flow guard: stops a run whose parameters get no gradient
    tracking.py    optional W&B / TensorBoard mirrors of metrics.csv
    progress.py    one progress bar for terminals and notebooks
"""
