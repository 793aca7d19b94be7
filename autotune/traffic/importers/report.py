"""The few lines ``autotune traffic import|export`` print about what they did (to stderr)."""

from __future__ import annotations

import click

from autotune.traffic.importers.run import ImportReport

__all__ = ["print_report", "report_lines"]


def report_lines(report: ImportReport, max_errors: int = 5) -> list[str]:
    lines = [f"{report.action} {report.requests:,} requests from {report.source} ({report.format}) "
             f"to {report.out}"]
    if report.span_s is not None:
        lines.append(f"  arrivals span {report.span_s:,.1f} s "
                     f"({report.requests / report.span_s:.2f} requests/s)"
                     if report.span_s > 0 else "  all arrivals at the same instant")
    if report.workloads:
        lines.append("  workloads: " + ", ".join(f"{k} {v:,}"
                                                 for k, v in sorted(report.workloads.items())))
    if report.prompts_attached:
        lines.append(f"  attached {report.prompts_attached:,} real prompt texts by nearest "
                     "length")
    if report.out_of_order:
        lines.append(f"  {report.out_of_order:,} rows are earlier than the row before them "
                     "(kept in file order; replay orders by arrival)")
    if report.skipped:
        lines.append(f"  skipped {report.skipped:,} invalid rows; the first:")
        lines.extend(f"    {e}" for e in report.errors[:max_errors])
    return lines


def print_report(report: ImportReport) -> None:
    for line in report_lines(report):
        click.echo(line, err=True)
