"""`autotune traffic import|export` through click and as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from autotune.cli import cli
from autotune.traffic import read_sample
from autotune.traffic.importers import IMPORTERS

REPO = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("AUTOTUNE_SHARED_DATA") or REPO / ".." / "shared" / "data").resolve()
MOONCAKE = DATA / "mooncake_fast25" / "conversation_trace.jsonl"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], capture_output=True,
                          text=True, cwd=REPO)


def test_import_then_export_with_click(tmp_path: Path) -> None:
    out, bench = tmp_path / "mc.jsonl", tmp_path / "bench.jsonl"
    res = CliRunner().invoke(cli, ["traffic", "import", "--format", "mooncake", str(MOONCAKE),
                                   "-o", str(out), "--workload", "kimi"])
    assert res.exit_code == 0, res.output
    assert "imported 12,031 requests" in res.output
    reqs = list(read_sample(out))
    assert len(reqs) == 12031 and {r.workload for r in reqs} == {"kimi"}

    res = CliRunner().invoke(cli, ["traffic", "export", "--format", "vllm-bench",
                                   str(REPO / "examples" / "small.jsonl"), "-o", str(bench)])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in bench.read_text().splitlines()]
    assert len(rows) == 96 and all(set(r) == {"prompt", "output_tokens"} for r in rows)


def test_import_help_lists_every_registered_format() -> None:
    res = CliRunner().invoke(cli, ["traffic", "import", "--help"])
    assert res.exit_code == 0
    for name in IMPORTERS:
        assert name in res.output
    assert "Example" in res.output


def test_bad_row_exits_nonzero_naming_the_line_without_traceback(tmp_path: Path) -> None:
    src = tmp_path / "t.csv"
    src.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n"
                   "2023-11-16 18:15:47.00,abc,5\n")
    out = tmp_path / "o.jsonl"
    proc = run("traffic", "import", "--format", "azure", str(src), "-o", str(out))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"error: {src}:3: ContextTokens: must be an integer token "
                                   "count, got 'abc'")
    assert not out.exists()

    proc = run("traffic", "import", "--format", "azure", str(src), "-o", str(out),
               "--skip-invalid")
    assert proc.returncode == 0, proc.stderr
    assert "skipped 1 invalid rows" in proc.stderr and f"{src}:3:" in proc.stderr
    assert len(out.read_text().splitlines()) == 1


def test_unknown_format_exits_nonzero_listing_the_known(tmp_path: Path) -> None:
    proc = run("traffic", "import", "--format", "splunk", str(MOONCAKE), "-o",
               str(tmp_path / "o.jsonl"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "unknown traffic format 'splunk'" in proc.stderr
    assert all(name in proc.stderr for name in IMPORTERS)
    proc = run("traffic", "export", "--format", "csv", str(REPO / "examples" / "small.jsonl"),
               "-o", str(tmp_path / "o.jsonl"))
    assert proc.returncode == 2 and "known formats: vllm-bench" in proc.stderr
    assert not (tmp_path / "o.jsonl").exists()
