"""The report's charts as plotly figures (plotly is imported here, lazily, by the caller).

Every chart is built from :mod:`autotune.report.data` series only; nothing is computed here
that a test could not check on the data. Scatter traces are SVG (never WebGL), so the charts
draw in any browser, including a headless one without a GPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.errors import DependencyError
from autotune.report.data import ReportData, TrialPoint, WorkloadReport
from autotune.report.seed import SEED_SOURCE, SEED_TABLE

__all__ = ["Chart", "build_charts"]

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")
GREY = "#9aa0a6"
FAILED = "#c0392b"


@dataclass(frozen=True)
class Chart:
    """One chart of the page: a DOM id, a heading, a caption, and the plotly figure."""

    id: str
    title: str
    caption: str
    figure: Any


def _plotly() -> tuple[Any, Callable[..., Any]]:
    try:
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots
    except ImportError as e:
        raise DependencyError.missing("plotly", "report", "autotune report") from e
    return go, make_subplots


def _color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _fmt(x: float | None, digits: int = 4) -> str:
    return "n/a" if x is None else f"{x:.{digits}g}"


def _hover(t: TrialPoint, objective: str) -> str:
    state = "baseline · " if t.baseline else ""
    feas = "" if t.feasible is None else (" · meets SLOs" if t.feasible else " · misses SLOs")
    return (f"trial {t.number} · {state}{t.label()}<br>{objective} {_fmt(t.value)}{feas}<br>"
            f"output tok/s {_fmt(t.throughput)} · p99 ITL {_fmt(t.itl_p99_ms)} ms · "
            f"p99 TTFT {_fmt(t.ttft_p99_ms)} ms")


def _once(seen: set[str], key: str) -> bool:
    """True the first time ``key`` is asked for: one legend entry per group across panels."""
    if key in seen:
        return False
    seen.add(key)
    return True


def _grid(n: int, max_cols: int = 3) -> tuple[int, int]:
    cols = max(1, min(max_cols, n))
    return max(1, math.ceil(n / cols)), cols


def _layout(fig: Any, height: int, **extra: Any) -> None:
    fig.update_layout(template="plotly_white", height=height,
                      margin={"l": 60, "r": 20, "t": 40, "b": 50},
                      font={"size": 12}, **extra)


def speedup_chart(data: ReportData) -> Chart:
    go, _ = _plotly()
    fig = go.Figure()
    no_baseline = []
    count = len(data.workloads)
    for i, w in enumerate(data.workloads):
        points = w.by_window()
        if not points:
            continue
        if points[0].speedup is None:
            no_baseline.append(w.name)
            continue
        dx = (i - (count - 1) / 2) * 0.08  # side by side, so workloads do not hide each other
        every = w.relative()
        fig.add_trace(go.Scatter(
            x=[(t.window or 0) + dx for t, _ in every], y=[r for _, r in every],
            name=f"{w.name}: every trial", legendgroup=w.name, showlegend=False,
            mode="markers", marker={"size": 6, "color": _color(i), "opacity": 0.35},
            hovertext=[_hover(t, data.objective) for t, _ in every], hoverinfo="text"))
        fig.add_trace(go.Scatter(
            x=[p.window + dx for p in points], y=[p.speedup for p in points], name=w.name,
            legendgroup=w.name,
            mode="lines+markers", line={"color": _color(i), "width": 2},
            marker={"size": 10, "symbol": ["circle" if p.feasible else "circle-open"
                                           for p in points]},
            hovertext=[f"{w.name} · window {p.window}: {p.speedup or 0.0:.3f}x baseline<br>"
                       + _hover(p.trial, data.objective) for p in points],
            hoverinfo="text"))
    fig.add_hline(y=1.0, line={"dash": "dot", "color": GREY},
                  annotation_text="baseline", annotation_position="bottom right")
    _layout(fig, 420, xaxis={"title": "draft window (num_speculative_tokens)", "dtick": 1},
            yaxis={"title": f"best {data.objective} ÷ baseline's"})
    caption = (f"Per workload and draft window: the best {data.objective} measured at that "
               "window (any batching, adaptive verification on or off) divided by the run's "
               "baseline trial; faint dots are every trial. Filled markers meet the SLOs; open "
               "markers mean no trial at that window did, and the best one is shown. A dip "
               "at a window the search sampled only with poor batching says little about the "
               "window itself: hover the points for their configurations.")
    if no_baseline:
        caption += (" Not drawn (no measured baseline trial): " + ", ".join(no_baseline) + ".")
    return Chart("speedup-vs-window", "Speedup vs draft window, per workload", caption, fig)


def seed_chart() -> Chart:
    go, make_subplots = _plotly()
    benches = list(dict.fromkeys(r.benchmark for r in SEED_TABLE))
    pairs = list(dict.fromkeys((r.target, r.drafter) for r in SEED_TABLE))
    fig = make_subplots(rows=1, cols=len(benches), subplot_titles=benches, shared_yaxes=True,
                        horizontal_spacing=0.04)
    shown: set[tuple[str, str]] = set()
    for col, bench in enumerate(benches, start=1):
        for r in (r for r in SEED_TABLE if r.benchmark == bench):
            pair = (r.target, r.drafter)
            windows = sorted(r.speedup)
            fig.add_trace(go.Scatter(
                x=windows, y=[r.speedup[n] for n in windows], name=f"{r.target} + {r.drafter}",
                legendgroup=f"{r.target}+{r.drafter}", showlegend=pair not in shown,
                mode="lines+markers",
                line={"color": _color(pairs.index(pair)),
                      "dash": "solid" if r.drafter == "DSpark" else "dash"},
                marker={"size": 9},
                hovertext=[f"{r.target} + {r.drafter}, {bench}, n={n}: {r.speedup[n]:.2f}x"
                           for n in windows], hoverinfo="text"), row=1, col=col)
            shown.add(pair)
        fig.update_xaxes(tickvals=[3, 7], range=[2, 8], title_text="draft window", row=1, col=col)
    fig.update_yaxes(title_text="speedup over no speculation", row=1, col=1)
    _layout(fig, 420)
    return Chart("seed-table", "The seed benchmark: speedup vs window (DeepSpec, batch 1)",
                 f"Published batch-1 speedups at windows 3 and 7 ({SEED_SOURCE}). Solid: "
                 "DSpark; dashed: Eagle3-MLA. These are the numbers the simulator's profiles "
                 "are calibrated to; a run's own speedups above are relative to its baseline "
                 "trial under the sampled traffic, so they are not directly comparable.", fig)


def _per_workload(data: ReportData, draw: Callable[[Any, WorkloadReport, int, int, int], None],
                  x_title: str, y_title: str, height_per_row: int = 360) -> Any:
    _, make_subplots = _plotly()
    ws = [w for w in data.workloads if w.trials]
    rows, cols = _grid(len(ws))
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[w.name for w in ws] or None,
                        horizontal_spacing=0.07, vertical_spacing=0.16 if rows > 1 else 0.1)
    for i, w in enumerate(ws):
        row, col = divmod(i, cols)
        draw(fig, w, i, row + 1, col + 1)
        fig.update_xaxes(title_text=x_title, row=row + 1, col=col + 1)
        fig.update_yaxes(title_text=y_title if col == 0 else None, row=row + 1, col=col + 1)
    _layout(fig, 90 + height_per_row * rows)
    return fig


def pareto_chart(data: ReportData) -> Chart:
    go, _ = _plotly()
    objective = data.objective

    seen: set[str] = set()

    def draw(fig: Any, w: WorkloadReport, i: int, row: int, col: int) -> None:
        pts = [t for t in w.measured if t.throughput is not None and t.itl_p99_ms is not None]
        for ok, name in ((True, "trial meeting the SLOs"), (False, "trial missing an SLO")):
            mine = [t for t in pts if not t.baseline and bool(t.feasible) == ok]
            if not mine:
                continue
            fig.add_trace(go.Scatter(
                x=[t.itl_p99_ms for t in mine], y=[t.throughput for t in mine],
                mode="markers", name=name, legendgroup=name, showlegend=_once(seen, name),
                marker={"size": 9, "color": "#4c78a8",
                        "symbol": "circle" if ok else "circle-open"},
                hovertext=[_hover(t, objective) for t in mine], hoverinfo="text"),
                row=row, col=col)
        front = w.pareto()
        fig.add_trace(go.Scatter(
            x=[t.itl_p99_ms for t in front], y=[t.throughput for t in front], mode="lines",
            line={"color": "#f58518", "width": 2, "shape": "hv"}, name="Pareto front",
            legendgroup="front", showlegend=_once(seen, "front"), hoverinfo="skip"),
            row=row, col=col)
        base = [t for t in pts if t.baseline]
        if base:
            fig.add_trace(go.Scatter(
                x=[t.itl_p99_ms for t in base], y=[t.throughput for t in base], mode="markers",
                name="baseline", legendgroup="baseline", showlegend=_once(seen, "baseline"),
                marker={"size": 12, "symbol": "diamond", "color": GREY,
                        "line": {"width": 1, "color": "#333"}},
                hovertext=[_hover(t, objective) for t in base], hoverinfo="text"),
                row=row, col=col)
        rec = w.recommended
        if rec is not None and rec.throughput is not None and rec.itl_p99_ms is not None:
            fig.add_trace(go.Scatter(
                x=[rec.itl_p99_ms], y=[rec.throughput], mode="markers", name="recommended",
                legendgroup="recommended", showlegend=_once(seen, "rec"),
                marker={"size": 20, "symbol": "star", "color": "#e45756",
                        "line": {"width": 1, "color": "#333"}},
                hovertext=["recommended · " + _hover(rec, objective)], hoverinfo="text"),
                row=row, col=col)
        if w.itl_slo_ms is not None:
            fig.add_vline(x=w.itl_slo_ms, line={"dash": "dot", "color": FAILED}, row=row,
                          col=col, annotation_text=f"SLO {w.itl_slo_ms:g} ms",
                          annotation_position="bottom left")

    fig = _per_workload(data, draw, "p99 inter-token latency (ms)", "output tokens/s")
    caption = ("Every measured trial of the run. The orange step line is the Pareto front "
               "(no other trial has both more output tokens/s and a lower p99 ITL); the star "
               "is the configuration recommended, the diamond the policy's baseline, the "
               "dotted line the p99 ITL SLO. Hover a point for its configuration.")
    if any(t.at_capacity for w in data.workloads for t in w.trials):
        caption += (" Trials were read at capacity (the fastest replay of the trace meeting "
                    "the SLOs), so configurations that can serve more load sit just left of "
                    "the SLO line with more tokens/s; points far left of it reached the TTFT SLO "
                    "first (e.g. a small max_num_seqs queues requests).")
    return Chart("pareto", "Throughput vs p99 ITL: Pareto front and the recommended point",
                 caption, fig)


def calibration_chart(data: ReportData) -> Chart:
    go, make_subplots = _plotly()
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1, subplot_titles=[
        "acceptance by draft position (recommended window)", "predicted vs measured"])
    lo = 1.0
    missing = []
    for i, w in enumerate(data.workloads):
        cal = w.calibration()
        if cal is None:
            missing.append(w.name)
            continue
        k = cal.positions
        pos = list(range(1, k + 1))
        pred, meas = list(cal.predicted[:k]), list(cal.measured[:k])
        lo = min(lo, *pred, *meas)
        color = _color(i)
        fig.add_trace(go.Scatter(x=pos, y=pred, name=f"{w.name} predicted", legendgroup=w.name,
                                 mode="lines+markers", line={"color": color, "dash": "dash"},
                                 marker={"symbol": "circle-open", "size": 9},
                                 hovertext=[f"{w.name} position {p}: predicted {v:.3f}"
                                            for p, v in zip(pos, pred, strict=True)],
                                 hoverinfo="text"), row=1, col=1)
        fig.add_trace(go.Scatter(x=pos, y=meas, name=f"{w.name} measured", legendgroup=w.name,
                                 mode="lines+markers", line={"color": color},
                                 marker={"size": 9},
                                 hovertext=[f"{w.name} position {p}: measured {v:.3f}"
                                            for p, v in zip(pos, meas, strict=True)],
                                 hoverinfo="text"), row=1, col=1)
        mae = cal.mean_abs_error
        fig.add_trace(go.Scatter(x=pred, y=meas, mode="markers+text", legendgroup=w.name,
                                 showlegend=False, text=[str(p) for p in pos],
                                 textposition="top left", marker={"color": color, "size": 10},
                                 name=f"{w.name} (mean |error| {_fmt(mae, 3)})",
                                 hovertext=[f"{w.name} position {p}: predicted {a:.3f}, "
                                            f"measured {b:.3f}"
                                            for p, a, b in zip(pos, pred, meas, strict=True)],
                                 hoverinfo="text"), row=1, col=2)
    lo = max(0.0, math.floor(lo * 10) / 10 - 0.05)
    fig.add_trace(go.Scatter(x=[lo, 1.0], y=[lo, 1.0], mode="lines", name="perfect calibration",
                             line={"color": GREY, "dash": "dot"}, hoverinfo="skip"),
                  row=1, col=2)
    fig.update_xaxes(title_text="draft position k", dtick=1, row=1, col=1)
    fig.update_yaxes(title_text="share of drafts with tokens 1..k accepted", row=1, col=1)
    fig.update_xaxes(title_text="predicted (confidence head)", range=[lo, 1.0], row=1, col=2)
    fig.update_yaxes(title_text="measured (vLLM counters)", range=[lo, 1.0], row=1, col=2)
    _layout(fig, 460)
    caption = ("For each workload's recommended window: the prefix survival the sample's "
               "confidence-head predictions imply (dashed) against the per-position acceptance "
               "the trial measured (accepted_per_pos / drafts, solid). Points on the right "
               "above the diagonal: the head was underconfident there; below: overconfident.")
    if missing:
        caption += " No calibration data (no predictions or no acceptance counters): " + \
            ", ".join(missing) + "."
    fits = [f"{w.name} {w.fit.method}, ECE {_fmt(w.fit.ece_before, 3)} before, "
            f"{_fmt(w.fit.ece_after, 3)} after" for w in data.workloads if w.fit]
    if fits:
        caption += (" The guided search recalibrated the head from the runs' counters (ECE "
                    "over draft positions; after: held out): " + "; ".join(fits) + ".")
    return Chart("calibration", "Predicted vs measured acceptance per position (calibration)",
                 caption, fig)


def history_chart(data: ReportData) -> Chart:
    go, _ = _plotly()
    objective = data.objective
    seen: set[str] = set()

    def draw(fig: Any, w: WorkloadReport, i: int, row: int, col: int) -> None:
        hist = w.history()
        done = [h for h in hist if h.value is not None]
        for kind, name in (("ok", "trial meeting the SLOs"), ("miss", "trial missing an SLO"),
                           ("base", "baseline")):
            mine = [h for h in done if ("base" if h.trial.baseline else
                                        "ok" if h.feasible else "miss") == kind]
            if not mine:
                continue
            base_symbol = "diamond" if kind == "base" else "circle"
            fig.add_trace(go.Scatter(
                x=[h.number for h in mine], y=[h.value for h in mine], mode="markers",
                name=name, legendgroup=name, showlegend=_once(seen, name),
                marker={"size": 10 if kind == "base" else 9,
                        "color": GREY if kind == "base" else "#4c78a8",
                        "symbol": [base_symbol + ("" if h.feasible else "-open")
                                   for h in mine]},
                hovertext=[_hover(h.trial, objective) for h in mine], hoverinfo="text"),
                row=row, col=col)
        best = [h for h in hist if h.best_so_far is not None]
        fig.add_trace(go.Scatter(
            x=[h.number for h in best], y=[h.best_so_far for h in best], mode="lines",
            line={"shape": "hv", "color": "#f58518", "width": 2}, name="best so far (feasible)",
            legendgroup="best", showlegend=_once(seen, "best"), hoverinfo="skip"), row=row, col=col)
        failed = [h for h in hist if h.value is None]
        if failed:
            fig.add_trace(go.Scatter(
                x=[h.number for h in failed], y=[0.0] * len(failed), mode="markers",
                name="failed trial", legendgroup="failed", showlegend=_once(seen, "failed"),
                marker={"symbol": "x", "size": 10, "color": FAILED},
                hovertext=[f"trial {h.number} failed · {h.trial.label()}<br>"
                           f"{(h.trial.error or '')[:200]}" for h in failed],
                hoverinfo="text"), row=row, col=col)

    fig = _per_workload(data, draw, "trial number", objective, height_per_row=320)
    return Chart("history", "Optimisation history",
                 f"{objective} of every trial in the order the search ran it (diamond: the "
                 "baseline; open markers miss an SLO; failed trials are red crosses at 0), and "
                 "the best value that met the SLOs so far.", fig)


def build_charts(data: ReportData) -> Sequence[Chart]:
    """The page's charts, in reading order (the capacity plan's when the run has one)."""
    from autotune.report.plan_chart import plan_chart

    plan = plan_chart(data)
    return [speedup_chart(data), *([plan] if plan is not None else []), seed_chart(),
            pareto_chart(data), calibration_chart(data), history_chart(data)]
