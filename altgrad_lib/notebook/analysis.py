"""The notebooks' namespace: `from altgrad_lib import analysis` then `analysis.<name>(...)`.

No logic lives here. Every name is imported from the module that owns it, so there is one copy of each:

  - run_tables  : provenance banner, metric / loss / summary tables, tidy run frames, training-notebook glue
  - anatomy     : binades, rounding error, ULP up/down (stiffness), stochastic-rounding bias/variance
  - oracles     : our rounding vs torch float8 dtypes, ml_dtypes and gfloat (shared with the tests)
  - layer_sqnr  : per-Linear SQNR of a quantized copy vs FP32 (`sqnr_db` itself is quant.sqnr_db)
  - stats       : seed statistics and the claims table (mean ± CI, Welch test, Hedges' g, verdict)

New code goes into those modules (tested in tests/test_<module>.py); add the name below only when a
notebook calls it as `analysis.<name>`.
"""
from __future__ import annotations

from altgrad_lib.anatomy import (binade_counts, format_overview, log_uniform, positive_values,  # noqa: F401
                                 rounding_error, sr_bias_variance, sr_probe_points, ulp_at_grid)
from altgrad_lib.layer_sqnr import layer_sqnr, quantized_copy_sqnr, sqnr_by_backend  # noqa: F401
from altgrad_lib.oracles import (REFERENCES, Reference, all_bf16_values, count_mismatches,  # noqa: F401
                                 gfloat_format_info, matching_references, oracle_agreement)
from altgrad_lib.quant import sqnr_db  # noqa: F401
from altgrad_lib.run_tables import (THROUGHPUT, TRAIN_LOSS, VAL_LOSS, corpus_summary, find_metric,  # noqa: F401
                                    final_metrics, git_sha, gpt_config, load_trained_model, loss_table,
                                    metrics_wide, model_summary, params_hash, provenance_banner, run_frame,
                                    run_summary, throughput, train_config_from, train_variants)
from altgrad_lib.stats import claims_table, control_check, seed_table  # noqa: F401
