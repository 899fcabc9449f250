"""bench/manifold_grid.py (issue 50 item 3) on one tiny shape: retract then round stays within the rounding bound of
the format's unit roundoff; round then retract leaves the weight on the manifold and off the grid."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import manifold_grid

SHAPE = (16, 8)


@pytest.mark.parametrize("kind", ["stiefel", "hypersphere"])
def test_retract_then_round_is_within_the_rounding_bound_in_bf16(kind):
    """Round to nearest moves each entry by at most u|w| (bf16's grid is unscaled: grid_exp is 0, no subnormal at
    these magnitudes). Stiefel: Ŵq = Ŵ + E with ‖E‖_F ≤ u‖Ŵ‖_F = u√n, so ‖ŴqᵀŴq − I‖_F / √n ≤ (2‖Ŵ‖_2‖E‖_F +
    ‖E‖_F²) / √n ≤ 2u + u²√n. Hypersphere: ‖q_i − w_i‖ ≤ u‖w_i‖ = u, so |‖q_i‖ − 1| ≤ u (+ fp32 rounding)."""
    r = manifold_grid.measure("bf16", SHAPE, kind, steps=2)
    u, n = r["u"], min(SHAPE)
    bound = 2 * u + u * u * math.sqrt(n) if kind == "stiefel" else u
    assert r["fp32 residual"] < r["(a) residual"] <= bound + 1e-6
    assert r["(c) worst residual @0.02"] <= bound + 1e-6          # every step's rounding obeys the same bound


def test_round_then_retract_leaves_entries_off_the_e2m5_grid():
    r = manifold_grid.measure("E2M5", SHAPE, "stiefel", steps=2)
    assert r["(b) off-grid"] > 0.5 and 0 < r["(b) mean ULPs"] <= 0.5     # misalignment is at most half an ULP
    assert r["(b) residual"] < 1e-5                                     # on the manifold to fp32 rounding
    assert r["(c) (b) off-grid @0.02"] > 0.5


def test_the_report_tables_and_conclusion_build():
    rows = [manifold_grid.measure(f, SHAPE, k, steps=2) for f in ("bf16", "E2M5", "E1M6")
            for k in manifold_grid.CONSTRAINTS]
    ab, c = manifold_grid.tables(rows, (0.02,))
    assert len(ab) == len(c) == 6
    text = manifold_grid.conclusion(pd.DataFrame(rows), (0.02,), 2)
    assert "Verdict on the one-line refusal" in text and "nan" not in text
