"""The report file: self-contained, escaped, written atomically, reachable from the CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from report_run import FilledRun, fill_run

from autotune.cli import cli
from autotune.errors import ExportError
from autotune.report import load_report_data, render_report, write_report
from autotune.store import Store


def test_page_loads_nothing_from_the_network(filled: FilledRun, tmp_path: Path) -> None:
    html = write_report(filled.store, tmp_path / "r.html").path.read_text(encoding="utf-8")
    tags = re.findall(r"<(?:script|link|img|iframe)\b[^>]*>", html, flags=re.I)
    assert tags and all(re.fullmatch(r'<script( type="text/javascript")?>', t) for t in tags), tags
    # outside the inlined library (whose source mentions map-tile URLs it never loads here),
    # nothing points at the network
    library_end = html.index("</script>")
    assert "plotly.js v" in html[:library_end]
    page = html[library_end:]
    assert not re.search(r"""\b(?:src|href)\s*=\s*["']?(?:https?:)?//""", page, flags=re.I)
    assert not re.search(r"(?:https?:)?//cdn", page, flags=re.I)
    for section in ("recommendations", "speedup-vs-window", "seed-table", "pareto",
                    "calibration", "history"):
        assert f'id="{section}"' in html


def test_recommendation_table_shows_config_and_provenance(filled: FilledRun,
                                                         tmp_path: Path) -> None:
    html = render_report(load_report_data(filled.store))
    for rec in filled.store.recommendations(run_id=filled.run_id):
        spec = json.dumps(dict(rec.speculative_config or {}),
                          sort_keys=True).replace('"', "&quot;")
        assert f"--speculative-config '{spec}'" in html
        assert rec.provenance["traffic"]["sha256"] in html
        assert f"{rec.speedup_vs_baseline:.3g}x" in html
    assert filled.run_id in html and "kimi-k2.6-default" in html


def test_text_from_the_database_is_escaped(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'r.db'}")
    evil = '<img src=x onerror="alert(1)">'
    fill_run(store, sample_path=evil + ".jsonl", workloads={evil: 0.8, "</script>": 0.7})
    html = render_report(load_report_data(store))
    body = html.split("</head>", 1)[1]
    assert "<img" not in body
    assert body.count("</script>") == len(re.findall(r"<script\b", body))
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in body


def test_write_is_atomic_and_replaces_the_old_file(filled: FilledRun, tmp_path: Path) -> None:
    out = tmp_path / "out" / "report.html"
    out.parent.mkdir()
    out.write_text("old")
    done = write_report(filled.store, out)
    assert done.path == out and out.stat().st_size == done.size_bytes
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in out.parent.iterdir()) == ["report.html"]  # no temp left
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ExportError, match="cannot write"):
        write_report(filled.store, blocker / "report.html")


def test_cli_report(filled: FilledRun, tmp_path: Path) -> None:
    url = filled.store.url
    out = tmp_path / "cli.html"
    res = CliRunner().invoke(cli, ["report", "--db", url, "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert f"run {filled.run_id}" in res.output and out.exists()
    res = CliRunner().invoke(cli, ["report", "--db", url, "--run", "missing", "-o", str(out)])
    assert res.exit_code != 0 and "no run 'missing'" in res.output
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    Store.open(empty).close()  # a database with no run in it
    res = CliRunner().invoke(cli, ["report", "--db", empty, "-o", str(tmp_path / "e.html")])
    assert res.exit_code != 0 and "no finished run" in res.output
    assert not (tmp_path / "e.html").exists()
    missing = f"sqlite:///{tmp_path / 'missing.db'}"
    res = CliRunner().invoke(cli, ["report", "--db", missing, "-o", str(tmp_path / "m.html")])
    assert res.exit_code != 0 and "no autotune database at" in res.output
    assert not (tmp_path / "missing.db").exists() and not (tmp_path / "m.html").exists()


def test_a_run_without_measurements_still_renders(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'r.db'}")
    sid = store.record_sample(path="s.jsonl", sha256="c" * 64, size_bytes=1, requests=1,
                              skipped_lines=0, workloads={})
    rid = store.create_run(backend="sim", policy_name="p", policy_sha256="d" * 64, policy={},
                           sample_id=sid, seed=0)
    store.record_trial(run_id=rid, workload="only-failures", number=0, state="failed",
                       params={"num_speculative_tokens": 7}, is_baseline=True,
                       error="replica died")
    store.set_run_status(rid, "failed", "every replica died")
    data = load_report_data(store, rid)
    (w,) = data.workloads
    assert w.by_window() == [] and w.pareto() == [] and w.calibration() is None
    html = write_report(store, tmp_path / "r.html", rid).path.read_text(encoding="utf-8")
    assert "this run made no recommendation" in html
    assert "every replica died" in html and '<b class="bad">failed</b>' in html
