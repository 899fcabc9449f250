"""Training loop: TrainConfig -> a run directory with metrics, checkpoints and (if it blew up) a divergence record.

`train(config)` builds the token corpus, the GPT, applies the quantization policy, and trains with AdamW,
warmup + cosine LR, gradient clipping, FP32 or BF16 autocast. It is resumable bit-exactly on CPU: batches are
a pure function of (seed, step), and checkpoints hold model (incl. quantizer state), optimizer and every RNG.
A finished run with the same config hash is returned without retraining.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
import random
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import yaml

from altgrad_lib.errors import Interrupted, UserError
from altgrad_lib.io import read_json, remove_stale_tmp, truncate_csv, write_json
from altgrad_lib.model import compile_gpt, compile_units, freeze_blocks
from altgrad_lib.monitors.config import DiagnosticsConfig
from altgrad_lib.monitors.diagnostics import Diagnostics
from altgrad_lib.numerics import kernels
from altgrad_lib.optim.constraints import constrained_params
from altgrad_lib.optim.factory import build_optimizer, muon_split, step_metrics, stored_weight_grids
from altgrad_lib.quantize.convert import format_conversion, quantized_modules
from altgrad_lib.quantize.linear import accum_loop_steps, set_hp_gemms, set_rng_step
from altgrad_lib.state import Snapshots, restore_snapshot
from altgrad_lib.training import checkpoint as ckpt
from altgrad_lib.training.config import NON_RESULT_FIELDS, NUMERICS_VERSION, TrainConfig
from altgrad_lib.training.data import TokenCorpus
from altgrad_lib.training.guards import GradientFlowError, check_gradient_flow  # noqa: F401  (re-exported)
from altgrad_lib.training.interrupt import RESUME_HINT, InterruptScope
from altgrad_lib.training.preflight import BuiltModel, check_device, preflight
from altgrad_lib.training.progress import progress_bar
from altgrad_lib.training.run_dir import (METRICS_FILE, METRICS_HEADER, MetricsWriter, Run, divergence_where,
                                          hold_run_lock, make_provenance, now_iso, perplexity, read_metrics,
                                          run_dir_is_free, write_config_yaml)
from altgrad_lib.training.schedules import lr_at
from altgrad_lib.training.sub_configs import DataConfig
from altgrad_lib.training.tokenizers import uniform_loss
from altgrad_lib.training.tracking import mirrored   # logger="none": the plain writer, no tracker package imported

# ----------------------------------------------------------------------------------------------
# train


class RunConflictError(UserError, RuntimeError):
    """The run directory already holds a run with a different config."""


def _log(msg: str) -> None:
    print(f"[altgrad] {msg}", flush=True)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


@contextlib.contextmanager
def _process_state_restored():
    """Put back on the way out (also on an error) the process-wide state train() changes: the global RNGs it seeds,
    and with deterministic=True torch's deterministic mode (and warn_only) and CUBLAS_WORKSPACE_CONFIG. Without it
    the caller's next cell, test or run would inherit this run's seed and mode.

    Not restorable: cuBLAS reads CUBLAS_WORKSPACE_CONFIG when it creates a handle, so a handle made during the run
    keeps its workspace; and CUDA generators first initialised by the run have no earlier state, so they stay seeded.
    """
    env = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    det = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    py, npy, cpu = random.getstate(), np.random.get_state(), torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        if env is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = env
        torch.use_deterministic_algorithms(det[0], warn_only=det[1])
        random.setstate(py)
        np.random.set_state(npy)
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


def _make_optimizer(model: torch.nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    """The run's optimizer (optim/factory.py; torch AdamW by default). A name of its own so benches can swap it."""
    return build_optimizer(model, cfg.optim_config, device)


def _print_layer_table(model: torch.nn.Module, cfg: TrainConfig, rows: list[dict[str, Any]], policy: Any) -> None:
    """quantize_model's table, with the weight grid the forward actually uses where grid storage replaces the
    recipe's weight quantizer (optim.factory.stored_weight_grids)."""
    grids = stored_weight_grids(model, cfg.optim_config)
    print(format_conversion([{**r, "weight": grids.get(r["module"], r["weight"])} for r in rows], policy))
    if grids:
        print(f"optim.storage={cfg.optim_config.storage!r}: the weights of {len(grids)} Linear are stored on their "
              f"format's grid (one power-of-two scale per tensor) and used as they are, in place of the recipe's "
              f"weight quantizer (the weight column)")
    oc = cfg.optim_config
    if oc.name in ("muon", "manifold_muon"):
        split = muon_split(model)
        rule = "Muon" if oc.name == "muon" else "manifold Muon (scaled Stiefel, s = sqrt(out/in))"
        for kind, label in (("muon", rule), ("adamw", "AdamW")):
            names = [n for n, k in split.items() if k == kind]
            print(f"optimizer {oc.name}: {label} on {len(names)} parameter(s): {', '.join(names)}")
    if oc.constraint != "none" and oc.name != "manifold_muon":
        print(f"optim.constraint={oc.constraint!r}: retraction after each step on "
              f"{', '.join(constrained_params(model, oc.constrain, oc.constraint))}")


def _autocast(cfg: TrainConfig, device: torch.device) -> contextlib.AbstractContextManager:
    if cfg.precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


@torch.no_grad()
def evaluate(model: torch.nn.Module, corpus: TokenCorpus, data: DataConfig, device: torch.device,
             autocast: Callable[[], contextlib.AbstractContextManager]) -> dict[str, float]:
    """Mean loss over `data`'s eval_iters fixed val batches (the same batches at every eval and in every run)."""
    was_training = model.training
    model.eval()
    total = 0.0
    for x, y in corpus.val_batches(data, device):
        with autocast():
            _, loss = model(x, y)
        total += float(loss.item())
    model.train(was_training)
    mean = total / data.eval_iters
    return {"val/loss": mean, "val/ppl": perplexity(mean)}


def _progress_bar(total: int, initial: int, enabled: bool | None, desc: str) -> Any:
    return progress_bar(total, desc=desc, enabled=enabled, initial=initial, unit="step")


def _check_run_dir(run_dir: Path, cfg: TrainConfig, h: str) -> TrainConfig | None:
    """The config stored in `run_dir` (None: none yet), refused unless it has `cfg`'s hash. Read back, not `cfg`:
    its non-result fields (diagnostics, logger, ...) are what the stored run was made with."""
    cfg_path = run_dir / "config.yaml"
    if not cfg_path.exists():
        return None
    try:
        stored = TrainConfig.from_dict(yaml.safe_load(cfg_path.read_text()) or {})
    except Exception as e:
        raise RunConflictError(f"{cfg_path} cannot be read as a TrainConfig ({e}); delete {run_dir} or pick "
                               f"another run_name") from e
    sh = stored.config_hash()
    if sh != h:
        a, b = stored.to_dict(), cfg.to_dict()
        diff = {k: (a.get(k), b.get(k)) for k in b if k not in NON_RESULT_FIELDS and a.get(k) != b.get(k)}
        raise RunConflictError(f"{run_dir} holds a run with config hash {sh[:12]}, not {h[:12]} "
                               f"(differs in {diff} as stored vs requested); nothing was overwritten — "
                               f"pick another run_name/out_dir or delete that directory")
    return stored


def _identity(data_sha: str) -> dict[str, Any]:
    """What besides the config determines a run's numbers: recorded in provenance.json and checkpoints."""
    return {"numerics_version": NUMERICS_VERSION, "data_sha256": data_sha}


def _check_same_numbers(run_dir: Path, data_sha: str) -> None:
    """Refuse to reuse or resume a run made by other numerics or on other data (say which, and what to do)."""
    prov_path = run_dir / "provenance.json"
    if not prov_path.exists():
        return
    prov = read_json(prov_path)
    made = prov.get("numerics_version", 1)   # runs from before the version was recorded
    sha = (prov.get("git") or {}).get("sha", "unknown")
    fix = "retrain it with resume=False (CLI: --no-resume), or pick another run_name/out_dir"
    if made != NUMERICS_VERSION:
        raise RunConflictError(f"{run_dir} was made by other code (numerics version {made}, git {sha[:12]}); this "
                               f"code is numerics version {NUMERICS_VERSION}, so its numbers may differ: {fix}")
    old = prov.get("data_sha256")
    if old is not None and old != data_sha:
        raise RunConflictError(f"{run_dir} was trained on other data (content sha256 {old[:12]}, now "
                               f"{data_sha[:12]}: corpus or licensedcode-data version changed?): {fix}")


def train(config: TrainConfig, resume: bool = True, *, progress: bool | None = None, verbose: bool = True,
          on_model: Callable[[torch.nn.Module], None] | None = None,
          on_step: Callable[[int, dict[str, float]], None] | None = None, wait_if_locked: bool = False) -> Run:
    """Train (or resume, or reuse) the run described by `config`; returns its Run.

    resume=True: a finished run with this config is returned as is; an unfinished one continues from
    checkpoints/last.pt. resume=False: start from scratch (the run dir's metrics/checkpoints are replaced).
    on_model(model) is called once after quantization (hooks, monitors); on_step(step, metrics) after every
    step's metrics and checkpoint are written (raising there simulates a crash at that step).
    Mistakes in the config raise ConfigError before the run directory exists (preflight.py); a run directory
    in use by another process raises RunLockedError, or with wait_if_locked=True (studies) is waited for: the
    run is "running elsewhere", and is then reused or resumed.
    SIGTERM / SIGINT finish the current step, write its checkpoint and raise errors.Interrupted (interrupt.py).
    The global RNGs, torch's deterministic mode and CUBLAS_WORKSPACE_CONFIG are as they were when it returns.
    """
    cfg = config.resolved()
    with InterruptScope() as stop, _process_state_restored():
        # recipe, device, sizes, corpus (its hash is identity), the model: nothing written
        corpus, _, policy, built = preflight(cfg)
        if stop:
            raise Interrupted(f"interrupted by {stop.name} before the first step; {RESUME_HINT}")
        with hold_run_lock(cfg.run_dir, wait_if_locked, stop, _log):   # one process per run dir, released when
            return _train_locked(cfg, corpus, policy, built, resume, progress, verbose, on_model, on_step, stop)


def _train_locked(cfg: TrainConfig, corpus: TokenCorpus, policy: Any, built: BuiltModel, resume: bool,
                  progress: bool | None, verbose: bool,
                  on_model: Callable[[torch.nn.Module], None] | None,
                  on_step: Callable[[int, dict[str, float]], None] | None, stop: InterruptScope) -> Run:
    h = cfg.config_hash()
    run_dir = Path(cfg.out_dir) / cfg.run_name
    ckpt_path = run_dir / "checkpoints" / "last.pt"
    free = run_dir_is_free(run_dir)   # a stub of a failed start holds no result: any config may take it over
    stored = None if free else _check_run_dir(run_dir, cfg, h)
    data_sha = corpus.meta["content_sha256"]
    if resume and not free:
        _check_same_numbers(run_dir, data_sha)
    if resume and (run_dir / "summary.json").exists():
        run = Run.load(run_dir, config=stored)   # the stored config, parsed once above
        run.reused = True
        if verbose:
            _log(f"reusing finished run {run_dir} ({run.status}, config hash {h[:12]}); not retraining")
        # diagnostics are no part of the hash: say which of the asked-for groups the reused run never recorded
        recorded = (run_dir / "diagnostics.csv").exists()
        had = run.config.diagnostics_config if recorded else DiagnosticsConfig(preset="off")
        missing = cfg.diagnostics_config.not_covered_by(had)
        if missing:
            _log(f"note: {run_dir.name} was trained without diagnostics {missing} (they do not change its numbers, "
                 f"so it is reused); retrain with resume=False (CLI: --no-resume) to record them")
        if cfg.logger != "none":   # the mirror follows training; a finished run trains no more
            _log(f"note: {run_dir.name} is finished, so logger={cfg.logger!r} mirrors nothing (metrics.csv holds its "
                 f"metrics); retrain with resume=False (CLI: --no-resume) to mirror them")
        return run
    state = ckpt.load_checkpoint(ckpt_path, h) if resume and ckpt_path.exists() else None  # fail before writing
    if state is not None and run_dir_is_free(run_dir, ignore_checkpoint=True):
        raise RunConflictError(f"{run_dir / METRICS_FILE} is missing or empty but {ckpt_path.name} is at step "
                               f"{state['step']}: resuming would leave steps 0-{state['step']} without metrics; "
                               f"restore the file, or retrain with resume=False (CLI: --no-resume)")

    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "checkpoints").mkdir(exist_ok=True)
    remove_stale_tmp(run_dir / "checkpoints")
    if state is None:  # fresh start: clear leftovers of an earlier attempt
        for name in (METRICS_FILE, "summary.json", "divergence.json"):
            (run_dir / name).unlink(missing_ok=True)
        ckpt_path.unlink(missing_ok=True)
    write_config_yaml(run_dir / "config.yaml", cfg.to_dict())
    prov_path = run_dir / "provenance.json"
    if state is None or not prov_path.exists():
        write_json(prov_path, {**make_provenance(cfg, h), **_identity(data_sha)})

    device = check_device(cfg.device)
    if cfg.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
    seed_everything(cfg.seed)
    model, rows, rng_after = built     # preflight built it from this seed: continue where its build left off
    torch.set_rng_state(rng_after)
    model.to(device)
    if cfg.freeze_blocks:
        freeze_blocks(model)
    if verbose:
        _print_layer_table(model, cfg, rows, policy)
    if on_model is not None:
        on_model(model)
    optimizer = _make_optimizer(model, cfg, device)   # grid storage drops weight quantizers here
    # after the optimizer: the probe's copy must carry the quantizers training actually uses
    diag = Diagnostics.for_run(cfg.diagnostics_config, run_dir, model, lambda: _autocast(cfg, device),
                               backend=cfg.backend, compiled=cfg.compile, grad_clip=cfg.grad_clip,
                               optimizer=optimizer)   # off: no-op
    start = 0
    if state is not None:
        start = ckpt.restore_training_state(state, model=model, optimizer=optimizer, path=ckpt_path)
        dropped = truncate_csv(run_dir / METRICS_FILE, start, METRICS_HEADER)
        prov = read_json(prov_path)
        prov.setdefault("resumes", []).append({"time": now_iso(), "from_step": start,
                                               "command": " ".join(sys.argv)})
        write_json(prov_path, prov)
        _log(f"resuming {run_dir.name} from step {start} ({ckpt_path}); dropped {dropped} metric rows after it")
    diag.start(start, state["extra"].get("diagnostics") if state is not None else None)
    if state is not None and diag.enabled:
        before = set((state["extra"].get("diagnostics") or {}).get("groups") or ())
        new = [g for g in diag.monitors if g not in before]
        if new:
            _log(f"note: diagnostics {new} start at step {start + 1}: steps 1-{start} of {run_dir.name} were "
                 f"trained without them (they do not change its numbers); retrain with resume=False "
                 f"(CLI: --no-resume) to cover the whole run")
    del state
    if verbose:
        n = sum(p.numel() for p in model.parameters())
        _log(f"training {run_dir} | {cfg.short_str()} | {n / 1e6:.2f}M params, vocab {corpus.vocab_size}, "
             f"{device.type}, steps {start}->{cfg.max_steps}")
    run = _loop(cfg, h, run_dir, ckpt_path, corpus, model, optimizer, device, start, progress, on_step, diag,
                stop)
    if verbose and run.status == "completed":
        v, u = run.final_val_loss, uniform_loss(cfg.data_config.tokenizer)
        _log(f"run {run_dir} completed: val/loss={v:.4f}" if v is not None else f"run {run_dir} completed")
        if v is not None and v > u:   # a study indexes it as did_not_learn (studies/results.run_status)
            _log(f"note: {run_dir.name} did not learn: its val/loss {v:.4f} is above ln(V) = {u:.4f}, the loss "
                 f"of a uniform guess over {cfg.tokenizer}'s vocabulary")
    return run


def _loop(cfg: TrainConfig, h: str, run_dir: Path, ckpt_path: Path, corpus: TokenCorpus, model: torch.nn.Module,
          optimizer: torch.optim.Optimizer, device: torch.device, start: int, progress: bool | None,
          on_step: Callable[[int, dict[str, float]], None] | None, diag: Any, stop: InterruptScope) -> Run:
    sched = cfg.hp_schedule   # empty unless precision_schedule: then the GEMMs' phase is a function of the step
    if sched:
        set_hp_gemms(model, sched.hp_gemms_at(start))   # a resumed run continues in its step's phase
    tokens_per_step = cfg.batch_size * cfg.block_size
    if cfg.compile and (steps := accum_loop_steps(compile_units(model, cfg.compile_scope), tokens_per_step)):
        where = ("this model's GEMMs" if cfg.compile_scope == "model"
                 else "the blocks' GEMMs, once per block configuration: blocks of one configuration share a graph")
        _log(f"compile=True with an accumulator recipe: torch.compile unrolls the accumulator loop ({steps} steps "
             f"in {where}), which can take minutes before the first step (measured: bench/results/accum_compile.md); "
             f"compile=false starts at once")
    fwd = compile_gpt(model, cfg.compile_scope) if cfg.compile else model
    params = [p for p in model.parameters() if p.requires_grad]
    quantized = list(quantized_modules(model))
    clip = cfg.grad_clip if cfg.grad_clip > 0 else math.inf
    autocast = functools.partial(_autocast, cfg, device)
    t_run = time.perf_counter()
    model.train()
    with mirrored(MetricsWriter(run_dir / METRICS_FILE), cfg.logger, run_dir, cfg.to_dict()) as writer:
        def save(step: int) -> None:
            writer.sync()  # metrics up to this step are on disk before the checkpoint says so
            diag.sync()
            ckpt.save_checkpoint(ckpt_path, model=model, optimizer=optimizer, step=step, config_hash=h,
                                 extra={**_identity(corpus.meta["content_sha256"]), "diagnostics": diag.state_dict()})

        def interrupted(step: int, saved: bool) -> Interrupted:
            if not saved:
                save(step)
            return Interrupted(f"interrupted by {stop.name} at step {step}; {RESUME_HINT}", step)

        if stop:   # a signal during setup: nothing new to save
            raise Interrupted(f"interrupted by {stop.name} at step {start}; {RESUME_HINT}", start)
        if start == 0:
            val0 = evaluate(fwd, corpus, cfg.data_config, device, autocast)
            writer.log(0, val0)
            if not math.isfinite(val0["val/loss"]):
                return _finish_diverged(cfg, h, run_dir, ckpt_path, 0, val0["val/loss"], math.nan, 0.0,
                                        {"phase": "eval"})
        bar = _progress_bar(cfg.max_steps, start, progress, cfg.run_name)
        snapshots = Snapshots(model)   # each step's pre-step state, copied into the same tensors (valid in its step)
        try:
            for step in range(start + 1, cfg.max_steps + 1):
                it = step - 1
                lr = lr_at(it, cfg)
                for g in optimizer.param_groups:
                    g["lr"] = lr * g.get("lr_mult", 1.0)   # lr_mult: optim/ groups whose lr is in other units
                x, y = corpus.train_batch(cfg.data_config, it, device)                   # (B, T)
                set_rng_step(model, it)   # step-keyed RNGs (per-step RHT signs, per-call SR): a resume draws the same
                if sched and set_hp_gemms(model, sched.hp_gemms_at(step)):
                    _log(f"step {step}: precision_schedule {cfg.precision_schedule} -> GEMMs in high precision: "
                         f"{'+'.join(sched.hp_gemms_at(step))}")
                    if cfg.compile:   # the layers' GEMM options are constants of the compiled graph: compile anew
                        kernels.reset_compiler()   # dynamo's graphs, and the quantize kernels' that call them
                        fwd = compile_gpt(model, cfg.compile_scope)
                snap = snapshots.take()  # cheap: buffers + RNG, so a divergence can be replayed exactly
                t0 = time.perf_counter()
                optimizer.zero_grad(set_to_none=True)
                with autocast():
                    _, loss = fwd(x, y)
                loss.backward()
                diag.after_backward(step, x, y, snap)   # grads before clipping; nothing on steps it skips
                gi = cfg.grad_guard_interval
                if gi >= 0 and (step == start + 1 or (gi > 0 and step % gi == 0)):
                    check_gradient_flow(model, step, quantized)  # raises GradientFlowError
                grad_norm = float(torch.nn.utils.clip_grad_norm_(params, clip))
                loss_v = float(loss.item())
                if not (math.isfinite(loss_v) and math.isfinite(grad_norm)):
                    writer.log(step, {"train/loss": loss_v, "train/lr": lr, "train/grad_norm": grad_norm})
                    diag.after_step(step, loss_v, grad_norm, lr)   # the divergence step's rows and events
                    record = diagnose_nonfinite(model, snap, x, y, autocast)
                    return _finish_diverged(cfg, h, run_dir, ckpt_path, step, loss_v, grad_norm, lr, record)
                optimizer.step()
                if device.type == "cuda":
                    torch.cuda.synchronize()
                dt = time.perf_counter() - t0
                diag.after_step(step, loss_v, grad_norm, lr)
                m = {"train/loss": loss_v, "train/lr": lr, "train/grad_norm": grad_norm}
                if step % cfg.log_interval == 0 or step == cfg.max_steps:
                    m.update(step_metrics(optimizer))   # stall rate / Δcode when optim.track_stats
                    writer.log(step, {**m, "perf/tokens_per_s": tokens_per_step / max(dt, 1e-9)})
                if (cfg.eval_interval and step % cfg.eval_interval == 0) or step == cfg.max_steps:
                    val = evaluate(fwd, corpus, cfg.data_config, device, autocast)
                    writer.log(step, val)
                    m.update(val)
                    if not math.isfinite(val["val/loss"]):   # a NaN/inf validation loss is a divergence too
                        return _finish_diverged(cfg, h, run_dir, ckpt_path, step, val["val/loss"], grad_norm, lr,
                                                {"phase": "eval"})
                saved = bool(cfg.ckpt_interval and step % cfg.ckpt_interval == 0) or step == cfg.max_steps
                if saved:
                    save(step)
                bar.update(1)
                bar.set_postfix(loss=f"{loss_v:.4f}", refresh=False)
                if on_step is not None:
                    on_step(step, m)
                if stop and step < cfg.max_steps:   # preempted: this step is done; save it and stop
                    raise interrupted(step, saved)
        finally:
            bar.close()
            diag.close()
    metrics = read_metrics(run_dir / METRICS_FILE)
    val = metrics[metrics["name"] == "val/loss"]
    final_val = float(val["value"].iloc[-1]) if len(val) else None
    write_json(run_dir / "summary.json", {
        "status": "completed", "final_step": cfg.max_steps, "final_val_loss": final_val,
        "final_val_ppl": perplexity(final_val) if final_val is not None else None,
        "config_hash": h, "end_time": now_iso(), "wall_time_s": time.perf_counter() - t_run, **_kernel_note()})
    return Run.load(run_dir, config=cfg)   # cfg is what config.yaml was written from: not parsed back


def _kernel_note() -> dict[str, str]:
    """summary.json's kernel_direct_off where the quantize kernels' direct path was off in this process (a torch whose
    private dynamo API differs: the same numbers, slower steps; numerics/kernel_direct.py), else nothing."""
    why = kernels.direct_path_off()
    return {} if why is None else {"kernel_direct_off": why}


def _finish_diverged(cfg: TrainConfig, h: str, run_dir: Path, ckpt_path: Path, step: int, loss_v: float,
                     grad_norm: float, lr: float, record: dict[str, Any]) -> Run:
    last_good = None
    if ckpt_path.exists():
        with contextlib.suppress(ckpt.CheckpointError):
            last_good = ckpt.load_checkpoint(ckpt_path, h)["step"]
    div = {"step": step, "loss": loss_v, "grad_norm": grad_norm, "lr": lr, **record,
           "last_good_checkpoint": str(ckpt_path) if last_good is not None else None,
           "last_good_checkpoint_step": last_good, "config_hash": h, "time": now_iso()}
    write_json(run_dir / "divergence.json", div)
    write_json(run_dir / "summary.json", {"status": "diverged", "final_step": step, "final_val_loss": None,
                                          "config_hash": h, "end_time": now_iso(), **_kernel_note()})
    _log(f"run {run_dir.name} DIVERGED at step {step}: loss={loss_v}, grad_norm={grad_norm}; "
         f"{divergence_where(div)}; "
         f"last good checkpoint step {last_good}")
    return Run.load(run_dir, config=cfg)


def _tensors(obj: Any) -> list[torch.Tensor]:
    if torch.is_tensor(obj):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for o in obj for t in _tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors(o)]
    return []


def _nonfinite(ts: list[torch.Tensor]) -> bool:
    return any(t.is_floating_point() and not bool(torch.isfinite(t).all()) for t in ts)


def diagnose_nonfinite(model: torch.nn.Module, snap: dict[str, Any], x: torch.Tensor, y: torch.Tensor,
                       autocast: Callable[[], contextlib.AbstractContextManager]) -> dict[str, Any]:
    """Replay the failed step from its pre-step snapshot with hooks and name where the first non-finite value
    was made (children finish before parents, so the first event is the innermost module):
    - "parameter": a parameter was already non-finite before the step (the previous optimizer step made it);
    - "forward_output": the first module whose output is non-finite while its inputs are finite (if none is, e.g.
      a functional op of the root made it, the first module with a non-finite output; see inputs_finite);
    - "input_grad": the first module whose backward made a non-finite gradient w.r.t. its inputs from a finite
      gradient w.r.t. its outputs; else "param_grad": the first non-finite parameter gradient; else
      "output_grad": the first module whose output gradient is non-finite (an op outside any module made it)."""
    restore_snapshot(model, snap)
    fwd_events: list[dict[str, Any]] = []
    bwd_events: list[dict[str, Any]] = []
    handles = []
    bad_params = [n for n, p in model.named_parameters() if not bool(torch.isfinite(p).all())]

    def fwd_hook(name: str) -> Callable:
        def hook(mod: torch.nn.Module, inp: Any, out: Any) -> None:
            outs = _tensors(out)
            if _nonfinite(outs) and not any(e["inputs_finite"] for e in fwd_events):
                fwd_events.append({"kind": "forward_output", "name": name, "module_type": type(mod).__name__,
                                   "inputs_finite": not _nonfinite(_tensors(inp))})
            for t in outs:
                if t.requires_grad:
                    t.register_hook(lambda g, name=name: _bwd(g, "output_grad", name))
        return hook

    def bwd_hook(name: str) -> Callable:
        def hook(mod: torch.nn.Module, grad_input: Any, grad_output: Any) -> None:
            gi = [g for g in _tensors(grad_input) if g is not None]
            if _nonfinite(gi) and not _nonfinite(_tensors(grad_output)):
                _bwd(gi[0], "input_grad", name, check=False)
        return hook

    def _bwd(g: torch.Tensor, kind: str, name: str, check: bool = True) -> None:
        if not any(e["kind"] == kind for e in bwd_events) and g is not None and (not check or _nonfinite([g])):
            bwd_events.append({"kind": kind, "name": name})

    for name, mod in model.named_modules():
        if name:
            handles.append(mod.register_forward_hook(fwd_hook(name)))
            handles.append(mod.register_full_backward_hook(bwd_hook(name)))
    for name, p in model.named_parameters():
        if p.requires_grad:
            handles.append(p.register_hook(lambda g, name=name: _bwd(g, "param_grad", name)))
    replay_loss, overflow = math.nan, None
    try:
        model.zero_grad(set_to_none=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # "full backward hook will not fire" for modules like Embedding
            with autocast():
                _, loss = model(x, y)
            replay_loss = float(loss.item())
            loss.backward()
        overflow = _grad_norm_overflow(model) if not (fwd_events or bwd_events or bad_params) else None
    except Exception as e:  # the diagnosis must never turn a clean divergence stop into a crash
        bwd_events.append({"kind": "replay_error", "name": f"{type(e).__name__}: {e}"})
    finally:
        for hd in handles:
            hd.remove()
        model.zero_grad(set_to_none=True)
    fwd_first = next((e for e in fwd_events if e["inputs_finite"]), fwd_events[0] if fwd_events else None)
    bwd_first = next((e for k in ("input_grad", "param_grad", "output_grad", "replay_error")
                      for e in bwd_events if e["kind"] == k), None)
    first = fwd_first or bwd_first or overflow
    if bad_params:
        first = {"kind": "parameter", "name": bad_params[0]}
    return {"first_nonfinite": first, "forward_first": fwd_first, "backward_first": bwd_first,
            "nonfinite_params": bad_params, "replay_loss": replay_loss,
            "replay_reproduced": not math.isfinite(replay_loss) or bool(bwd_events) or overflow is not None}


def _grad_norm_overflow(model: torch.nn.Module) -> dict[str, Any] | None:
    """Every tensor finite but the clipping norm inf (e.g. lr=1e6): float32 norms square the elements, so a
    gradient whose norm exceeds ~1.8e19 overflows. Names the first parameter whose float32 gradient norm is inf
    (else the largest) with its norm in float64."""
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    n32 = {n: float(g.float().norm()) for n, g in grads.items()}   # as clip_grad_norm_ computes them
    if not n32 or math.isfinite(float(torch.tensor(list(n32.values())).norm())):
        return None
    name = next((n for n, v in n32.items() if not math.isfinite(v)), max(n32, key=n32.__getitem__))
    return {"kind": "grad_norm_overflow", "name": name, "norm": float(grads[name].double().norm()),
            "total_norm": math.sqrt(sum(float(g.double().norm()) ** 2 for g in grads.values()))}

