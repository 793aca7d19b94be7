"""The report's capacity-plan chart: GPUs against traffic rate (plotly, imported lazily).

One subplot per planned workload (recommended against baseline) and one for every workload
together (split by workload against each shared config); each count a step line at the low end
of its capacity interval, with a band to its high-end count; dotted lines mark the rates the
plan sizes (× each growth factor). The series come from :mod:`autotune.report.plan_series`.
"""

from __future__ import annotations

from typing import Any

from autotune.report.data import ReportData
from autotune.report.figures import GREY, Chart, _grid, _layout, _once, _plotly
from autotune.report.plan_series import GpuCurve, plan_panels

__all__ = ["plan_chart"]

_COLORS = {"recommended": "#e45756", "baseline": GREY, "split": "#4c78a8"}
_SHARED = ("#2ca02c", "#9467bd", "#8c564b", "#17becf", "#bcbd22")


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _draw(go: Any, fig: Any, c: GpuCurve, color: str, seen: set[str], row: int,
          col: int) -> None:
    cap = (f" · one replica {c.capacity[0]:.3g}-{c.capacity[1]:.3g} req/s"
           if c.capacity else "")
    fig.add_trace(go.Scatter(x=list(c.rates), y=list(c.gpus_if_high), mode="lines",
                             line={"width": 0, "shape": "hv"}, hoverinfo="skip",
                             showlegend=False, legendgroup=c.label), row=row, col=col)
    fig.add_trace(go.Scatter(
        x=list(c.rates), y=list(c.gpus), mode="lines", fill="tonexty",
        fillcolor=_rgba(color, 0.18), line={"color": color, "width": 2, "shape": "hv"},
        name=c.label, legendgroup=c.label, showlegend=_once(seen, c.label),
        hovertemplate=(f"{c.label}: {c.detail}{cap}<br>%{{x:.3g}} req/s: %{{y}} GPUs"
                       "<extra></extra>")),
        row=row, col=col)


def plan_chart(data: ReportData) -> Chart | None:
    """The chart, or None when the run has no plan (the page says why)."""
    plan = data.plan
    if plan is None:
        return None
    go, make_subplots = _plotly()
    panels = plan_panels(plan)
    rows, cols = _grid(len(panels), max_cols=2)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[p.title for p in panels],
                        horizontal_spacing=0.08, vertical_spacing=0.16 if rows > 1 else 0.1)
    seen: set[str] = set()
    shared_i = 0
    for i, p in enumerate(panels):
        row, col = divmod(i, cols)
        for c in p.curves:
            color = _COLORS.get(c.kind)
            if color is None:
                color, shared_i = _SHARED[shared_i % len(_SHARED)], shared_i + 1
            _draw(go, fig, c, color, seen, row + 1, col + 1)
        for k, rate in p.planned:
            fig.add_vline(x=rate, line={"dash": "dot", "color": "#555", "width": 1},
                          row=row + 1, col=col + 1, annotation_text=f"×{k:g}",
                          annotation_position="top left")
        fig.update_xaxes(title_text="traffic rate (req/s)", rangemode="tozero", row=row + 1,
                         col=col + 1)
        fig.update_yaxes(title_text="GPUs" if col == 0 else None, rangemode="tozero",
                         row=row + 1, col=col + 1)
    _layout(fig, 90 + 380 * rows)
    s = plan.settings
    lines = [plan.headline() + "."]
    notes = sorted({w.rates.note for w in plan.workloads if w.rates is not None})
    lines += [f"Rate planned for: {n}." for n in notes]
    if plan.shared is not None:
        lines += [f"At ×{r.growth:g}: {r.verdict}." for r in plan.shared.rows]
    elif plan.shared_note:
        lines.append(f"Split or shared not measured: {plan.shared_note}.")
    lines += [f"{w.workload} left out: {w.left_out}." for w in plan.workloads if w.left_out]
    caption = (" ".join(lines) + f" GPUs ({s.gpus_per_replica} per replica, headroom "
               f"{s.headroom:.0%}) against the traffic rate: each line is the count at the "
               "rate one replica was measured to sustain within the SLO (req/s on the busiest "
               "slice it replayed), the band reaches the count at the rate it missed (a "
               "count inside the band flips inside the capacity interval); dotted lines are "
               "the rates planned for, × each growth factor.")
    return Chart("plan", "Capacity plan: GPUs against traffic, recommended vs baseline, split "
                         "vs shared", caption, fig)
