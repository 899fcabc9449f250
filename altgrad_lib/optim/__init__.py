"""The format-aware optimizer: steps measured in grid units, weights stored on the grid.

Files (one job each; the grid maths they step on, ULP in a step's direction, stiffness and code ordinals, is
numerics/grid.py):
  storage.py      weight storage modes: fp32 master, grid_rne, grid_sr (seeded stochastic rounding), kahan,
                  error_feedback (the rounding residual into Adam's m: error_feedback.py, ECO)
  base.py         GridOptimizer: param groups with fmt/storage, the step loop (one flat update per group), LR as
                  a tensor, SR counter and diagnostic counters in state_dict (bit-exact resume)
  adamw.py        AdamW (ours, any storage / low-precision state), StiffnessAdamW (the naive baseline),
                  GridAdamW (Δw = -lr_ulp · ULP(w) · m̂/(√v̂+ε))
  wrapper.py      StiffnessWrapper: any optimizer on g · S(w)^a(t) with a stiffness schedule a(t)
  madam.py        Madam (multiplicative, Bernstein et al. 2021)
  sgd.py          GridSGD: w - lr · S(w) · g (what geoopt's RiemannianSGD does on FP8Manifold)
  error_feedback.py  the ECO-style residual injection into m (its exact update) and the rounding it feeds
  state_codec.py  low-precision state transforms (sqrt, COAT expand) and unsigned UE<x>M<y> state formats
  lowp_state.py   StateFormat: m / v as 8-bit codes + per-tensor or per-block fp32 scales; state_bytes
  manifold.py     FP8Manifold: geoopt Manifold (projx = round, egrad2rgrad = stiffness, retr = step + round)
  osc_reset.py    TetraJet-v2's oscillation reset (optim.osc_reset): latent weights whose grid value oscillates
                  are moved to their grid value (fp32 master or kahan storage)
  stats.py        the optimizer's step statistics: stall rate, update visibility, oscillation ratio, Δcode
                  histogram, code usage / entropy, StepStats
  muon.py         Muon (Newton–Schulz-orthogonalized momentum on the block matrices, AdamW on the rest; NS through a
                  quantized GEMM: ns_fmt) and ManifoldMuon (scaled Stiefel manifold, dual ascent, msign retraction)
  constraints.py  optim.constraint: hypersphere / Stiefel retraction after each step of any optimizer
  config.py       OptimConfig: the validated, torch-free `optim:` section of TrainConfig
  factory.py      build_optimizer(model, oc): what training/loop.py calls (oc: TrainConfig.optim_config)

Import each name from the module that defines it (`from altgrad_lib.optim.adamw import AdamW`): this package
re-exports nothing, so importing `optim.config` (TrainConfig does) stays torch-free.
"""
