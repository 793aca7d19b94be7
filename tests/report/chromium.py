"""Headless Chromium for the report tests: the DOM after scripts ran, and what plotly drew.

``make test`` installs Debian's ``chromium`` (``.ci/install-chromium``); ``AUTOTUNE_CHROMIUM``
points at another binary. A missing browser is a test failure with the install line, never a skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars"]
INSTALL = "apt-get update && apt-get install -y chromium"


def chromium() -> str:
    env = os.environ.get("AUTOTUNE_CHROMIUM")
    found = env or next((p for name in ("chromium", "chromium-browser", "google-chrome")
                         if (p := shutil.which(name))), None)
    if not found:
        raise AssertionError(f"no Chromium found for the report test; install it ({INSTALL}) "
                             "or set AUTOTUNE_CHROMIUM")
    return found


def run_chromium(page: Path, *args: str, timeout: float = 90.0) -> str:
    """Run headless Chromium on ``page`` with ``args``; return its stdout."""
    with tempfile.TemporaryDirectory(prefix="autotune-chromium-") as profile:
        proc = subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", *args,
                               page.resolve().as_uri()],
                              capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"chromium exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc.stdout


def dump_dom(page: Path) -> str:
    """The DOM after the page's scripts ran (with network-free virtual time to settle)."""
    return run_chromium(page, "--virtual-time-budget=10000", "--dump-dom")


def screenshot(page: Path, png: Path, width: int = 1360, height: int = 4000) -> Path:
    run_chromium(page, f"--window-size={width},{height}", f"--screenshot={png}")
    return png


class PlotCensus(HTMLParser):
    """Per plot div (id ``*-plot``): SVG roots, and the data markers and data lines plotly
    drew (legend swatches not counted)."""

    def __init__(self) -> None:
        super().__init__()
        # for each open element: the plot it belongs to, and whether it is inside the legend
        self.stack: list[tuple[str | None, bool]] = []
        self.svgs: Counter[str] = Counter()
        self.points: Counter[str] = Counter()
        self.lines: Counter[str] = Counter()
        self.legend_items: Counter[str] = Counter()

    _VOID = frozenset({"br", "img", "meta", "link", "input", "hr"})

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        plot, legend = self.stack[-1] if self.stack else (None, False)
        pid = a.get("id") or ""
        classes = set((a.get("class") or "").split())
        if tag == "div" and pid.endswith("-plot"):
            plot = pid
        if plot is not None:
            if tag == "g" and "legend" in classes:
                legend = True
            elif tag == "svg" and "main-svg" in classes:
                self.svgs[plot] += 1
            elif tag == "g" and "traces" in classes and legend:
                self.legend_items[plot] += 1
            elif tag == "path" and "point" in classes and not legend:
                self.points[plot] += 1
            elif tag == "path" and "js-line" in classes and not legend:
                self.lines[plot] += 1
        if tag not in self._VOID:
            self.stack.append((plot, legend))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in self._VOID:
            self.stack.pop()

    def handle_endtag(self, tag: str) -> None:
        if tag not in self._VOID and self.stack:
            self.stack.pop()


def census(dom: str) -> PlotCensus:
    parser = PlotCensus()
    parser.feed(dom)
    return parser
