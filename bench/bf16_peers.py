"""Benchmark: BF16 weight storage without a master copy against the FP32 run and against torchao's / optimi's
all-BF16 AdamW, on notebook 05's cpu profile, 3 seeds, paired by seed.

Runs (params/05_manifold_optimizer/cpu.yaml: 2 x 64, byte-level tokens; 600 steps and lr 2e-3 when
results/bf16_peers.md was measured, lr 1e-3 since the round-3 cpu profile, 400 steps since round 4):
  hp                      torch.optim.AdamW on FP32 weights (notebook 05's `hp`, the reference)
  hp control              the same with the blocks frozen (freeze_blocks): the window
  BF16 adamw grid_sr      ours, notebook 05's configs (studies.variants.optimizer_runs): FP32 grads and Adam
  BF16 adamw error_feedback_sr   states, the block Linear weights stored on the BF16 grid (SR / error feedback)
  torchao _AdamW bf16 SR  torchao.optim._AdamW(bf16_stochastic_round=True) on the block Linear weights held as
                          torch.bfloat16 tensors: their grads and Adam states are bf16 too (all-BF16 AdamW)
  optimi AdamW Kahan      optimi.AdamW(kahan_sum=True) on the same bf16 tensors (bf16 states and Kahan buffer)
The peers use the parameter set of ours (optim.factory.weight_formats: every block Linear weight; embeddings,
LayerNorms and biases stay FP32 tensors, which both peers step as plain AdamW) and torch AdamW's groups, betas,
eps 1e-8 and weight decay. Their forward is exact: a parametrization returns the bf16 weight cast to fp32
(exact), so the GEMM is the FP32 one of hp and only the storage differs; the weight's gradient comes back through
that cast, i.e. rounded to bf16 (round-to-nearest-even).

    .venv/bin/python bench/bf16_peers.py --out /tmp/bf16 --jobs 2 --md bench/results/bf16_peers.md
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch
import yaml

from altgrad_lib.studies.variants import HP, HP_CONTROL
from state_precision import _peer_optimizer

PROFILE = "params/05_manifold_optimizer/cpu.yaml"
NOTEBOOK_KEYS = ("formats", "variants", "pairs", "references", "grid_lr", "madam_lr", "seeds", "stats_every",
                 "osc_window")
OURS = ("adamw grid_sr", "adamw error_feedback_sr")
PEERS = {"torchao _AdamW bf16 SR": "torchao", "optimi AdamW Kahan": "optimi"}


NOTES = """
## How the runs differ

All runs: notebook 05's cpu profile model, batches and init (paired by seed), FP32 forward and backward GEMMs.
**Peers**: torchao / optimi on the same parameter set as ours (optim.factory.weight_formats: every block Linear
weight), held as torch.bfloat16 Parameters (initialised as the fp32 init's RNE cast); a parametrization gives the
forward their exact fp32 cast, so their gradient arrives rounded to bf16 (RNE); embeddings, LayerNorms, biases
stay fp32. A peer's TrainConfig is hp's (the optimizer is swapped in `_make_optimizer`; its run directory is
`<peer>-bf16-s<seed>`). **ours** keep FP32 gradients and FP32 Adam states; only
the block Linear weights live on the BF16 grid (FP32 tensors holding BF16 values; `adamw grid_sr` rounds
w − lr·u stochastically onto it, `adamw error_feedback_sr` also feeds the rounding residual into m, see
optim/error_feedback.py). **torchao 0.18** `_AdamW` (torchao/optim/adam.py, `single_param_adam`): states are
`zeros_like(p)` (block_size inf), so bf16 for a bf16 weight; each step upcasts p, grad, m, v to fp32, does AdamW
there, writes m and v back with `copy_` (round-to-nearest-even to bf16) and p with `_fp32_to_bf16_sr`
(rounds away from zero with probability low-16-bits / 2^16, drawn by `torch.randint`: stochastic rounding) — only
where `p.dtype is torch.bfloat16`;
fp32 parameters get plain AdamW. **optimi 0.3.3** `AdamW(kahan_sum=True)` (optimi/adam.py,
`_single_param_adam`): m, v and the Kahan buffer are bf16 and updated by bf16 in-place ops (each op rounds to
nearest), the step is accumulated in the Kahan buffer and its error carried to the next step; fp32 parameters
get plain AdamW. Both peers: lr schedule, clipping, betas, eps 1e-8 and torch AdamW's decay groups as hp.
"""


def overrides() -> dict[str, dict]:
    """label -> TrainConfig overrides, notebook 05's for hp, its control and ours."""
    from altgrad_lib.studies import variants as V

    prof = yaml.safe_load(open(PROFILE))
    ours, _ = V.optimizer_runs(["BF16"], OURS, stats_every=prof["stats_every"], osc_window=prof["osc_window"])
    peers = {label: dict(recipe="hp") for label in PEERS}   # torch AdamW's config; the optimizer is swapped below
    return {HP: dict(recipe="hp"), HP_CONTROL: dict(recipe="hp", freeze_blocks=True), **ours, **peers}


def config(label: str, seed: int, out: str, steps: int | None = None):
    from altgrad_lib.notebook.tables import train_config_from

    prof = yaml.safe_load(open(PROFILE))
    cfg = train_config_from(prof, extra=NOTEBOOK_KEYS).replace(seed=seed, out_dir=out, **overrides()[label])
    if steps:   # a smoke test only (--max-steps): not the profile
        cfg = cfg.replace(max_steps=steps, eval_interval=min(cfg.eval_interval, steps))
    # a peer's config is hp's (the optimizer is not a config key): its own run directory keeps it apart
    return cfg.replace(run_name=f"{PEERS[label]}-bf16-s{seed}") if label in PEERS else cfg.resolved()


class AsFloat(torch.nn.Module):
    """Parametrization: the stored bf16 weight, cast to fp32 (exact) for the forward."""

    def forward(self, w):
        return w.float()


def _bf16_blocks(model) -> None:
    """Every block Linear weight (ours' grid set) becomes a bf16 Parameter whose forward value is its fp32 cast."""
    from torch.nn.utils import parametrize
    from altgrad_lib.optim.factory import weight_formats

    for _, fqn in weight_formats(model, "bf16").values():
        mod = model.get_submodule(fqn)
        mod.weight = torch.nn.Parameter(mod.weight.detach().to(torch.bfloat16))   # RNE, as a user's .bfloat16()
        parametrize.register_parametrization(mod, "weight", AsFloat(), unsafe=True)   # unsafe: dtype changes


def _peer_maker(kind: str):
    def make(model, cfg, device):
        _bf16_blocks(model)
        if kind == "torchao":
            return _peer_optimizer("_AdamW", bf16_stochastic_round=True)(model, cfg, device)
        import optimi

        from altgrad_lib.optim.factory import adamw_param_groups
        return optimi.AdamW(adamw_param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                            eps=1e-8, kahan_sum=True, foreach=False)
    return make


def run_one(label: str, seed: int, out: str, steps: int | None = None) -> tuple[str, int, float, bool]:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    from altgrad_lib.training import loop as T

    cfg, own = config(label, seed, out, steps), T._make_optimizer
    if label in PEERS:
        T._make_optimizer = _peer_maker(PEERS[label])   # this run only (restored below)
    try:
        run = T.train(cfg, verbose=False, progress=False)
    finally:
        T._make_optimizer = own
    v = run.final_val_loss
    return label, seed, float(v if v is not None else math.nan), bool(cfg.freeze_blocks)


def claims(frame):
    """Every BF16 run vs hp (one Holm family, δ = claims.DELTA_NATS), and ours vs each peer (a second family,
    same δ): claims.claims_table with the frozen-blocks control `hp control`."""
    import pandas as pd
    from altgrad_lib.studies import claims as C

    vs_hp = C.claims_table(frame, "label", HP, control_level=HP_CONTROL, comparison="BF16 vs hp")
    delta = float(vs_hp.delta_nats.iloc[0])
    tables = [vs_hp]
    peer_rows = []
    for peer in PEERS:
        sub = frame[frame.label.isin([peer, *[f"BF16 {v}" for v in OURS], HP_CONTROL])]
        peer_rows.append(C.claims_table(sub, "label", peer, control_level=HP_CONTROL, delta=delta,
                                        comparison=f"ours vs {peer}"))
    tables.append(C.judge(pd.concat(peer_rows, ignore_index=True)))   # one family over both peers
    return pd.concat(tables, ignore_index=True), delta


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("ALTGRAD_OUTPUTS", "outputs"), "bf16_peers"))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--jobs", type=int, default=1, help="runs in parallel (one thread each)")
    ap.add_argument("--max-steps", type=int, help="smoke test only: train this many steps, not the profile's")
    ap.add_argument("--md", help="also write the report (with the command) to this markdown file")
    a = ap.parse_args()
    import pandas as pd
    from report_md import header, md_table
    from altgrad_lib.notebook.claims_view import readable

    head = header("BF16 storage without a master copy vs hp and vs torchao / optimi all-BF16 AdamW "
                  "(notebook 05 cpu profile, paired by seed)")
    labels = list(overrides())
    jobs = [(lb, s) for lb in labels for s in a.seeds]
    with ProcessPoolExecutor(a.jobs) as ex:
        rows = list(ex.map(run_one, *zip(*jobs), [a.out] * len(jobs), [a.max_steps] * len(jobs)))
    frame = pd.DataFrame(rows, columns=["label", "seed", "final_val_loss", "freeze_blocks"])
    table, delta = claims(frame)
    losses = frame.pivot(index="label", columns="seed", values="final_val_loss").loc[labels]
    losses.columns = [f"val s{s}" for s in losses.columns]
    view = readable(table, keys=["comparison"])
    view.insert(3, "no worse than +δ (CI hi < δ)", [bool(h < delta) for h in table.gap_hi])
    text = (head + "\n## Final val loss (nats/token)\n\n" + md_table(losses.map(lambda x: f"{x:.4f}").reset_index())
            + f"\n## Paired claims (studies/claims.py; δ = {delta:.4f} nats, claims.DELTA_NATS)\n\n"
            + md_table(view) + NOTES)
    print(text)
    if a.md:
        Path(a.md).write_text(text)


if __name__ == "__main__":
    main()
