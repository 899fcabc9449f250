"""Optional experiment tracking: mirror a run's metrics to Weights & Biases or TensorBoard (`logger` setting).

metrics.csv stays the record; a tracker is a mirror for dashboards. `TrainConfig.logger`:
  - "none" (default): nothing is imported, nothing is written.
  - "wandb": `wandb.init(mode=$WANDB_MODE or "offline", dir=<run dir>)`, so the run lands in
    `<run dir>/wandb/offline-run-*` and needs no account or network; `wandb sync <that dir>` uploads it later.
    Project `$WANDB_PROJECT` (default "altgrad"), run name = run dir name, group = run name (a resumed run is a
    second W&B run of the same group), config = the TrainConfig.
  - "tensorboard": `torch.utils.tensorboard.SummaryWriter(<run dir>/tensorboard)`.
Every metrics row is mirrored at its step. When the run closes, the diagnostics files next to metrics.csv
(`diagnostics.csv`, `events.csv`, when present) are mirrored too: TensorBoard gets each diagnostic as a scalar
`diag/<role>/<metric>/<layer>`; W&B gets the files (wandb.save) since its step counter cannot go back.

A tracker must never cost a run: any error (missing package, disk, network) prints one warning and turns the
mirror off; training goes on.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

DIAGNOSTICS_FILES = ("diagnostics.csv", "events.csv")


class TrackedWriter:
    """A MetricsWriter whose log() is also sent to a tracker ("wandb" or "tensorboard")."""

    def __init__(self, writer: Any, logger: str, run_dir: Path, config: dict[str, Any]):
        self.writer, self.logger, self.run_dir = writer, logger, Path(run_dir)
        self._wb = self._tb = None
        self._on = True
        self._guard("start", self._start, config)

    # -- MetricsWriter interface
    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.writer.log(step, metrics)
        if self._on:
            self._guard("log", self._log, int(step), metrics)

    def sync(self) -> None:
        self.writer.sync()

    def close(self) -> None:
        self.writer.close()
        if self._on:
            self._guard("close", self._close)

    def __enter__(self) -> "TrackedWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- trackers
    def _guard(self, what: str, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception as e:  # never let a mirror kill the run
            self._on = False
            msg = str(e).splitlines()[0] if str(e) else ""
            hint = "; install the extra: pip install 'altgrad[tracking]'" if isinstance(e, ImportError) else ""
            warnings.warn(f"logger={self.logger!r} failed at {what} ({type(e).__name__}: {msg}){hint}; "
                          f"mirroring is off for this run, metrics.csv is complete", RuntimeWarning, stacklevel=2)

    def _start(self, config: dict[str, Any]) -> None:
        if self.logger == "wandb":
            import wandb

            name = self.run_dir.name
            self._wb = wandb.init(project=os.environ.get("WANDB_PROJECT", "altgrad"), name=name, group=name,
                                  config=config, dir=str(self.run_dir), mode=os.environ.get("WANDB_MODE", "offline"),
                                  reinit="create_new", settings=wandb.Settings(console="off", silent=True))
        elif self.logger == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(self.run_dir / "tensorboard"))
        else:
            raise ValueError(f"logger={self.logger!r} invalid; valid choices: ('none', 'wandb', 'tensorboard')")

    def _log(self, step: int, metrics: dict[str, float]) -> None:
        if self._wb is not None:
            self._wb.log({k: float(v) for k, v in metrics.items()}, step=step)
        if self._tb is not None:
            for k, v in metrics.items():
                self._tb.add_scalar(k, float(v), step)

    def _close(self) -> None:
        files = [self.run_dir / f for f in DIAGNOSTICS_FILES if (self.run_dir / f).is_file()]
        if self._tb is not None:
            import pandas as pd

            diag = self.run_dir / "diagnostics.csv"
            if diag in files:
                d = pd.read_csv(diag, dtype={"layer": "str", "role": "str", "metric": "str"})
                for row in d.itertuples(index=False):
                    self._tb.add_scalar(f"diag/{row.role}/{row.metric}/{row.layer}", float(row.value), int(row.step))
            self._tb.close()
            self._tb = None
        if self._wb is not None:
            for f in files:
                self._wb.save(str(f), base_path=str(self.run_dir), policy="now")
            self._wb.finish()
            self._wb = None


def mirrored(writer: Any, logger: str, run_dir: Path, config: dict[str, Any]) -> Any:
    """`writer` itself for logger "none", else a TrackedWriter around it."""
    return writer if logger == "none" else TrackedWriter(writer, logger, run_dir, config)
