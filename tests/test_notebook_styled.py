"""notebook/styled.py: a Styler whose cells carry table_view's digits (table_view's own tests check the rules)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from altgrad_lib.notebook.styled import styled


def test_styled_renders_html_with_those_cells():
    f = pd.DataFrame({"gap_nats": [0.0123456, np.nan], "sqnr_db": [-0.00001, 30.04],
                      "final_val_loss": [6.83012, -0.0004], "p_value": [0.00002, 0.03125]}, index=["E4M3", "E5M2"])
    html = styled(f).to_html()
    for cell in (">+0.0123<", ">none<", ">30.0<", ">6.830<", ">0.031<", ">0.0<", ">0.000<"):
        assert cell in html, cell
    assert ">< 0.001<" in html or ">&lt; 0.001<" in html
    assert "-0<" not in html and "-0.0<" not in html and "-0.000<" not in html


def test_kinds_override_the_name_and_bad_kinds_are_refused():
    f = pd.DataFrame({"x": [0.0123456]})
    assert ">+0.0123<" in styled(f, {"x": "gap"}).to_html()
    assert ">0.0123<" in styled(f).to_html()
    with pytest.raises(ValueError, match="valid choices"):
        styled(f, {"x": "decibel"})
