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
    plots_optim.py        notebook 05's figures of those statistics (a colour per format, a line style per storage)
    plots_publish.py      the figures low-precision training papers publish, drawn from AltGrad's runs and claims
    plots_doctor.py       the numerics doctor's heatmaps (layers x GEMMs: gain − 1, bias, loss cost)
    names.py              human names and units for metric keys, and layer shorthand ("block 0 attn QKV")
    table_view.py         Table: a DataFrame printed as a paper prints it (digits per kind of number, "none")
    styled.py             the same tables as a pandas Styler (table_view's digits)
    figure_check.py       what every figure must get right, checked on the drawn Figure; watch_displayed()
    profile.py            the first line every notebook prints: its profile, seeds and code version
    report.py             the report `make run` writes: every executed notebook as HTML and one index page
"""
