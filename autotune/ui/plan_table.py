"""The capacity plan in the terminal: the capacities it rests on, one table per growth factor,
then the headline, split against shared, and the caveats.

The first table gives per workload the rate planned for and each config's capacity per replica
(the requests/s of the planned traffic one replica serves: the interval from the rate met to
the rate missed,
:mod:`autotune.plan.measured`); each growth table the GPUs (replicas) of
the recommended and the baseline configs, the probability the SLO holds, and the GPUs saved.
A count that flips inside the capacity interval shows the other count (``/ 1 if high``); a
figure outside what was measured is starred.
"""

from __future__ import annotations

from rich.table import Table

from autotune.plan import MeasuredCapacity, Plan, Sizing, duration_text
from autotune.ui.console import print_table
from autotune.ui.tables import new_table

__all__ = ["plan_notes", "plan_tables", "print_plan", "rate_notes"]


def _count(s: Sizing) -> str:
    flip = f"/{s.replicas_if_high} if high" if s.flips else ""
    far = " *" if s.outside_measured else ""
    return f"{s.gpus} ({s.replicas}{flip}){far}"


def _p(s: Sizing) -> str:
    return "-" if s.probability is None else f"{s.probability:.2f}"


def _capacity(c: MeasuredCapacity | None) -> str:
    return "-" if c is None else f"{c.low_per_s:.3g}-{c.high_per_s:.3g}"


def plan_tables(plan: Plan) -> list[Table]:
    """The capacities table, then one table per growth factor (see module doc)."""
    caps = new_table("workload", "req/s planned", "recommended config", "req/s per replica",
                     "baseline req/s per replica", numeric=("req/s planned",),
                     title="capacities (req/s of the planned traffic one replica serves: "
                           "rate met - rate missed)",
                     fold=("recommended config",))
    for w in plan.workloads:
        if w.rates is None or w.recommended is None:
            caps.add_row(w.workload, "-", "left out", "-", "-")
            continue
        caps.add_row(w.workload, f"{w.rates.planned_per_s:.3g}", w.recommended.config.short(),
                     _capacity(w.recommended), _capacity(w.baseline) if w.baseline else
                     "no rate")
    tables = [caps]
    for i, k in enumerate(plan.settings.growth):
        t = new_table("workload", "req/s", "recommended: GPUs (replicas)", "P(SLO)",
                      "baseline: GPUs (replicas)", "P(SLO) ", "GPUs saved",
                      numeric=("req/s", "GPUs saved"),
                      fold=("recommended: GPUs (replicas)", "baseline: GPUs (replicas)",
                            "GPUs saved"),
                      title=(f"traffic × {k:g}, headroom {plan.settings.headroom:.0%}, "
                             f"{plan.settings.gpus_per_replica} GPUs per replica"))
        for w in plan.workloads:
            if not w.planned:
                t.add_row(w.workload, "-", "left out", "-", "-", "-", "-")
                continue
            rec = w.recommended_sizing[i]
            base = w.baseline_sizing[i] if w.baseline_sizing else None
            t.add_row(w.workload, f"{rec.rate_per_s:.3g}", _count(rec), _p(rec),
                      _count(base) if base else "no rate", _p(base) if base else "-",
                      f"{base.gpus - rec.gpus}" if base else "-")
        tables.append(t)
    return tables


def rate_notes(plan: Plan) -> list[str]:
    """Which rate the plan serves: one line when every workload's is the same kind."""
    rates = [(w.workload, w.rates) for w in plan.workloads if w.rates is not None]
    notes = sorted({r.note for _, r in rates})
    if len(notes) <= 1:
        return notes
    if all(r.basis == "mean" for _, r in rates):
        spans = [duration_text(s) for s in sorted(r.span_s for _, r in rates)]
        return [f"the mean rate: every workload's sample ({spans[0]} to {spans[-1]}) is "
                "shorter than the default peak window (5m)"]
    return [f"{name}: {r.note}" for name, r in rates]


def plan_notes(plan: Plan) -> list[str]:
    """The headline, split against shared, and every caveat, one line each."""
    lines = [f"plan of run {plan.run_id} ({plan.backend}): {plan.headline()}"]
    lines += [f"rate planned for: {n}" for n in rate_notes(plan)]
    if plan.shared is not None:
        lines += [f"split or shared at × {row.growth:g}: {row.verdict}"
                  for row in plan.shared.rows]
        if plan.shared.note:
            lines.append(plan.shared.note)
    else:
        lines.append(f"split or shared: not measured: {plan.shared_note or 'no mixed sample'}")
    for w in plan.workloads:
        if w.left_out:
            lines.append(f"{w.workload}: left out: {w.left_out}")
            continue
        if w.recommended is not None and w.recommended.trusted:
            lines.append(f"{w.workload}: capacity: {w.recommended.trusted}")
        if w.baseline is not None and w.baseline.trusted:
            lines.append(f"{w.workload}: baseline capacity: {w.baseline.trusted}")
        if w.baseline_note:
            lines.append(f"{w.workload}: {w.baseline_note}")
        for k, s in zip(plan.settings.growth, w.recommended_sizing, strict=True):
            lines += [f"{w.workload} at × {k:g}: {n}" for n in s.notes()]
    return lines


def print_plan(plan: Plan) -> None:
    tables = plan_tables(plan)
    for t in tables[:-1]:
        print_table(t)
    print_table(tables[-1], plan_notes(plan))
