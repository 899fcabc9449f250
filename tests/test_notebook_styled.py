"""Tables with sensible digits (notebook/styled.py): the kind of each column sets its digits; NaN reads "none"."""
from __future__ import annotations

import numpy as np
import pandas as pd

from altgrad_lib.notebook.styled import cell_text, column_kind, styled


def test_column_kinds_come_from_name_and_dtype():
    f = pd.DataFrame({"final_val_loss": [6.8], "gap_nats": [0.01], "out_sqnr_db": [26.0], "grad SNR dB": [3.0],
                      "p_holm": [0.2], "n": [3], "verdict": ["worse"], "diverged": [False], "kurtosis": [1.0]})
    assert {c: column_kind(c, f[c]) for c in f} == {
        "final_val_loss": "loss", "gap_nats": "gap", "out_sqnr_db": "dB", "grad SNR dB": "dB", "p_holm": "p",
        "n": "int", "verdict": "text", "diverged": "text", "kurtosis": "float"}


def test_cells_read_none_never_negative_zero_and_keep_their_digits():
    assert cell_text(np.nan, "gap") == "none" and cell_text(None, "float") == "none"
    assert cell_text(-0.0, "float") == "0" and cell_text(-0.00001, "dB") == "0" and cell_text(-0.0004, "loss") == "0"
    assert cell_text(0.0123456, "gap") == "+0.0123" and cell_text(-0.000451234, "gap") == "-0.000451"
    assert cell_text(26.5432, "dB") == "26.5" and cell_text(6.83012, "loss") == "6.830"
    assert cell_text(0.00002, "p") == "< 0.001" and cell_text(0.03125, "p") == "0.031"
    assert cell_text(1997.0, "int") == "1,997" and cell_text(3.12e-7, "float") == "3.12e-07"


def test_styled_renders_html_with_those_cells():
    f = pd.DataFrame({"gap_nats": [0.0123456, np.nan], "sqnr_db": [-0.00001, 30.04]}, index=["E4M3", "E5M2"])
    html = styled(f).to_html()
    assert ">+0.0123<" in html and ">none<" in html and ">0<" in html and ">30.0<" in html and "-0" not in html
