"""The report's capacity-plan chart, alone, as a PNG: the chart ``autotune report`` draws
(:func:`autotune.report.plan_chart.plan_chart`) written to a standalone HTML page (plotly.js
inlined) and screenshotted by headless Chromium, as docs/report.md makes the report's
screenshot.

    .venv/bin/python -m bench.plan.chart_png --db sqlite:////tmp/x.db [--run RUN] -o plan.png
"""

from __future__ import annotations

import argparse
import html as html_text
import shutil
import subprocess
import tempfile
from pathlib import Path

from autotune.report.data import load_report_data
from autotune.report.plan_chart import plan_chart
from autotune.store import Store

#: The page's width in pixels; the height is the figure's own.
WIDTH = 1200


def chart_html(db: str, run_id: str | None) -> tuple[str, int]:
    """The plan chart of ``run_id`` (default: the newest finished run) as a whole HTML page,
    with its title and caption; and the figure's height in pixels."""
    store = Store.open(db)
    try:
        data = load_report_data(store, run_id)
    finally:
        store.close()
    chart = plan_chart(data)
    if chart is None:
        raise SystemExit(f"run {data.run.id} has no plan to draw")
    fig = chart.figure
    fig.update_layout(width=WIDTH)
    body = fig.to_html(full_html=False, include_plotlyjs=True)
    page = (f"<html><head><meta charset='utf-8'></head>"
            f"<body style='margin:8px;font-family:sans-serif;width:{WIDTH}px'>"
            f"<h3>{html_text.escape(chart.title)} (run {data.run.id})</h3>{body}"
            f"<p style='font-size:12px'>{html_text.escape(chart.caption)}</p></body></html>")
    return page, int(fig.layout.height or 500)


def screenshot(html: str, height: int, out: Path) -> None:
    """Headless Chromium's screenshot of ``html``, the page's width and ``height`` plus room
    for the title and caption."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("no chromium on PATH: the PNG needs a headless browser")
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "plan.html"
        page.write_text(html)
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                        "--disable-quic", "--no-first-run", "--disable-background-networking",
                        "--disable-component-update", "--disable-sync",
                        f"--user-data-dir={tmp}/profile", "--hide-scrollbars",
                        f"--window-size={WIDTH + 16},{height + 260}",
                        "--virtual-time-budget=10000", f"--screenshot={out.resolve()}",
                        page.as_uri()], check=True, capture_output=True, timeout=300)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="database URL of the run")
    parser.add_argument("--run", default=None, help="run id (default: the newest finished)")
    parser.add_argument("-o", "--out", type=Path, required=True, help="PNG to write")
    args = parser.parse_args(argv)
    html, height = chart_html(args.db, args.run)
    screenshot(html, height, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
