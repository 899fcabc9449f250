"""What the bench scripts share: the model-size and device flags, one copy (run from the repo root, so
`python bench/x.py` finds this file next to it)."""
from __future__ import annotations

import argparse

import torch


def add_model_args(ap: argparse.ArgumentParser, batch: int) -> None:
    """--batch/--threads/--device and the GPT shape (defaults: the cpu profile's 4x4x128 model, vocab 4097)."""
    ap.add_argument("--batch", type=int, default=batch)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu | cuda | cuda:<i>")
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--block-size", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=4097)


def check_device(ap: argparse.ArgumentParser, device: str) -> None:
    """One-line argparse error when a CUDA device is asked for on a machine without one."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        ap.error(f"--device {device}: CUDA is not available on this machine; valid here: cpu")
