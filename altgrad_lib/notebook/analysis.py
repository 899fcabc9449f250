"""The notebooks' namespace: `from altgrad_lib.notebook import analysis` then `analysis.<name>(...)`.

No logic lives here. Every name is imported from the module that owns it, so there is one copy of each:

  - notebook/tables     : provenance banner, loss / summary / model tables, trained-model loading
  - notebook/table_view : `table(frame)`: any frame displayed with publishable digits, narrow, verdict first
  - notebook/claims_view : claims_report: a notebook's claims block (control check, claims, headline, tables, rules)
  - notebook/names      : one name per term (term, unigram_entropy_name) and runs named by what they are (run_label)
  - studies/results     : tidy run frames (one row per run), final metrics, metric-name lookup
  - studies/variant_runs : train_variants (a notebook's variants x seeds through the study layer)
  - studies/until_resolved : train_until_resolved (train_variants with seeds until resolved), all_seeds
  - studies/claims      : the paired claims table, the frozen-blocks control check, own-seed gaps
  - numerics/anatomy    : binades, rounding error, ULP up/down (stiffness), stochastic-rounding bias/variance,
                          the rounding SQNR of a mantissa width (expected_sqnr_db)
  - numerics/oracles    : our rounding vs torch float8 dtypes, ml_dtypes and gfloat (shared with the tests)
  - training/build     : the GPTConfig of a TrainConfig
  - quantize/layer_sqnr : per-Linear SQNR of a quantized copy vs FP32 (`sqnr_db` itself is numerics.quant.sqnr_db)

New code goes into those modules (tested in tests/test_<package>_<module>.py); add the name below only when a
notebook calls it as `analysis.<name>`.
"""
from __future__ import annotations

# ruff: noqa: F401  (a namespace: every name is re-exported)
from altgrad_lib.notebook.tables import (corpus_summary, git_sha, load_trained_model, loss_table, model_summary,
                                         params_hash, provenance_banner, quantization_table, run_summary,
                                         throughput, train_config_from)
from altgrad_lib.notebook.table_view import Table, table
from altgrad_lib.notebook.claims_view import ClaimsReport, claims_report
from altgrad_lib.notebook.names import run_label, term, unigram_entropy_name
from altgrad_lib.numerics.anatomy import (binade_counts, expected_sqnr_db, format_overview, log_uniform,
                                          positive_values, rounding_error, sr_bias_variance, sr_probe_points,
                                          ulp_at_grid)
from altgrad_lib.numerics.oracles import (REFERENCES, Reference, all_bf16_values, count_mismatches,
                                          gfloat_format_info, matching_references, oracle_agreement)
from altgrad_lib.numerics.quant import sqnr_db
from altgrad_lib.quantize.layer_sqnr import layer_sqnr, quantized_copy_sqnr, sqnr_by_backend
from altgrad_lib.studies.results import (THROUGHPUT, TRAIN_LOSS, VAL_LOSS, final_metrics, find_metric, load_metrics,
                                         metrics_wide, run_frame)
from altgrad_lib.studies.claims import claims_table, control_check, seed_gaps
from altgrad_lib.studies.variant_runs import train_variants
from altgrad_lib.studies.until_resolved import all_seeds, train_until_resolved
from altgrad_lib.training.build import gpt_config
