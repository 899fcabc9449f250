"""`altgrad doctor RUN_DIR [--step N] [--batches K] [--draws R] [--inject KIND:LAYER:GEMM[:VALUE]] [--out DIR]`: the
parser (torch-free, so `altgrad --help` stays instant). What it computes: studies/doctor.py; cli.py runs it and
writes the text, the CSVs and the figure (notebook/plots_doctor.py)."""
from __future__ import annotations

import argparse

from altgrad_lib.errors import number_arg

FAULT_HELP = ("KIND:LAYER:GEMM[:VALUE], repeatable: put a known fault in first (gain: output x VALUE, default 0.88; "
              "correlated_sr: the same random bits every call; scale_swap: block scales on the next block; "
              "few_bit_sr: SR with VALUE random bits, default 1), e.g. gain:transformer.h.1.mlp.c_fc:wgrad:0.88")


def add_doctor_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    dp = sub.add_parser(
        "doctor", help="which GEMM's quantization costs the loss, at a run's checkpoint",
        description="At the run's checkpoint, on K held-out batches: per quantized Linear and GEMM (fprop, dgrad, "
                    "wgrad) and quantized attention, the gain, cosine, relative bias (mean of R draws minus the "
                    "high-precision product of the same operands), relative variance and SQNR; then the loss each "
                    "GEMM costs (that GEMM alone in high precision, paired over the K batches); the optimizer "
                    "state's stalled share; the loss each layer costs. Prints the ranked table and one verdict per "
                    "flag; writes doctor.csv, doctor_optimizer.csv, doctor_layers.csv and doctor.png. Input errors "
                    "print one line before anything is computed.")
    dp.add_argument("run_dir", help="a run directory (<outputs>/runs/<run_name>) holding checkpoints/last.pt")
    dp.add_argument("--step", type=number_arg("--step", 0), default=None,
                    help="the checkpoint's step (the run keeps one: last.pt)")
    dp.add_argument("--batches", type=number_arg("--batches", 2, 10_000), default=4,
                    help="held-out batches K (>= 2; default 4)")
    dp.add_argument("--draws", type=number_arg("--draws", 1, 10_000), default=8,
                    help="draws R of each stochastically rounded GEMM (default 8)")
    dp.add_argument("--inject", action="append", default=[], metavar="KIND:LAYER:GEMM[:VALUE]", help=FAULT_HELP)
    dp.add_argument("--out", default=None, help="where the CSVs and the figure go (default RUN_DIR/doctor)")
    dp.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                    help="show the traceback of input errors too")
    return dp
