"""Layer 6, notebook: what the notebooks show. Tables, figures, the dashboard, and the papermill parameter checks.

    analysis.py           the notebooks' namespace (analysis.<name>): imports from the modules below, no logic
    params.py             papermill parameters: declared names, types and choices; did-you-mean errors
    tables.py             provenance banner, loss / summary / model tables, trained-model loading
    plots.py              figures of formats and training curves
    plots_diagnostics.py  figures of the monitors' diagnostics.csv
    plots_bench.py        figures of bench/ timings (FP8 GEMM speed-up vs shape, from bench/gemm_speedup.py)
    dashboard.py          the ipywidgets dashboard of notebook 06 (heatmaps, drill-down); groups runs by configuration
    claims_view.py        claims_report (a notebook's claims block in one call): the claims table in narrow
                          readable tables, the status banner filled in from the claims
    optim_view.py         notebook 05's optimizer statistics: curves, step sizes in ULPs, results-file tables
"""
