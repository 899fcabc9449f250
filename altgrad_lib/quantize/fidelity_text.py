"""The text of a fidelity report (quantize/fidelity.py's FidelityReport): the one-screen summary, the tensors touched,
the operand table and the stochastic-rounding Monte-Carlo lines. Reads only the report's fields (no numerics)."""
from __future__ import annotations

import textwrap

WIDTH = 116       # text report width (fits a notebook cell and a terminal)
# the summary's sections: bit-exact vs a library someone else wrote is listed apart from exact vs a hand reference
SUMMARY_TITLES = (("exactly_simulated", "Exactly simulated"),
                  ("exact_vs_hand_reference", "Exact only vs a reference we wrote from the paper's equations (no "
                                              "library has the quantizer)"),
                  ("approximately", "Approximately"), ("not_simulated", "Not simulated"))


def db_str(v: float | None) -> str:
    """An SQNR in dB for text; None (identical, infinite SQNR) is "exact"."""
    return "exact" if v is None else f"{v:.1f}"


def _ref_cells(r: dict) -> str:
    sq = "exact" if r["exact"] else ("∞ (±0)" if r["sqnr_db"] is None else f"{r['sqnr_db']:.1f}")
    return f"{sq:>6} {r['max_abs_err']:>8.3g} {r['mismatches']:>5}/{r['n']:<5} {r['reference']}"


def render_text(rep) -> str:
    """The report as text: the one-screen summary first, then the tensors touched, then the operand table."""
    t = rep.touches
    lines = [f"AltGrad fidelity report: {rep.recipe} (backend {rep.backend})",
             textwrap.fill(rep.to_dict()["operands_note"], WIDTH, initial_indent="  ", subsequent_indent="  "),
             ""]
    for key, title in SUMMARY_TITLES:
        lines.append(f"{title}:")
        lines += [textwrap.fill(s, WIDTH, initial_indent="  - ", subsequent_indent="    ")
                  for s in rep.summary[key]] or ["  (none)"]
    lines += ["", "Tensors touched:",
              f"  quantized:      {', '.join(t['quantized']) or 'none'}",
              textwrap.fill(", ".join(t["high_precision"] + t["always_high_precision"]), WIDTH,
                            initial_indent="  high precision: ", subsequent_indent=" " * 18),
              f"  hp_last_blocks: {t['hp_last_blocks']}"
              + (" (the last N transformer blocks stay high precision)" if t["hp_last_blocks"] else ""),
              f"  attention:      {rep.attention}", ""]
    w = max([20] + [len(op["spec"]) for e in rep.layers if e["spec"] for g in e["gemms"] for op in g["operands"]
                    if "spec" in op])
    head = (f"  {'GEMM':<6}{'op':<3} {'spec':<{w}} {'RHT':<8} {'along':<6} {'q SQNR':>6} {'SQNR':>6} "
            f"{'max|err|':>8} {'mismatch':<11} reference")
    for e in rep.layers:
        if e["spec"] is None:
            lines.append(f"{', '.join(e['layer_classes'])}: high precision (not quantized)")
            continue
        lines += [f"{', '.join(e['layer_classes'])}: {e['path']}", head]
        for g in e["gemms"]:
            if g["high_precision"]:
                lines.append(f"  {g['gemm']:<6}high precision (hp_gemms)")
                continue
            for op in g["operands"]:
                pre = f"  {g['gemm']:<6}{op['operand']:<3} "
                if "spec" not in op:
                    lines.append(pre + "high precision")
                    continue
                along = "last" if op["along"].startswith("last") else op["along"]
                pre += f"{op['spec']:<{w}} {op['rht'] or '-':<8} {along:<6} {op['q_sqnr_db']:>6.1f} "
                refs = op["references"] or [None]
                for i, r in enumerate(refs):
                    body = _ref_cells(r) if r else f"{'':>6} {'':>8} {'':<11} {op['note'].split(';')[0]}"
                    lines.append((pre if i == 0 else " " * len(pre)) + body)
            lines.append(f"  {'':<6}accumulation: {g['accumulation']}")
    srs = [(g["gemm"], op) for e in rep.layers if e["spec"] for g in e["gemms"] for op in g["operands"] if "sr" in op]
    if srs:
        head = (f"Stochastic rounding, Monte-Carlo: sign-aligned total bias Z of the mean of N draws vs the exact "
                f"value; pass when |Z| <= {srs[0][1]['sr']['bound']:g}. (The table above compares an SR operand's "
                f"round-to-nearest twin: same scales, same grid.) Saturated: the elements above the format's max "
                f"after scaling, where SR can only round toward zero; Z without them shows whether they are the bias.")
        lines += ["", textwrap.fill(head, WIDTH)]
        seen = set()
        for gemm, op in srs:
            k = (gemm, op["operand"], op["spec"])
            if k in seen:
                continue
            seen.add(k)
            s = op["sr"]
            lines.append(f"  {gemm:<6}{op['operand']:<3} {op['spec']:<{w}} {op['rht'] or '-':<8} N={s['draws']:<4} "
                         f"Z={s['z']:+.2f}  rel. bias {s['rel_bias']:+.1e}  "
                         f"saturated {100 * s['saturated_frac']:.2g} % (Z without: {s['z_unsaturated']:+.2f})  "
                         f"{'pass' if s['pass'] else 'FAIL'}")
    return "\n".join(lines)
