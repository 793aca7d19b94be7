"""Requests as columns: the same summaries and groups as from request objects, in one pass."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from autotune.cli import cli
from autotune.traffic.columns import collect_columns
from autotune.traffic.drift import reference
from autotune.traffic.grouping import group_columns, group_requests
from autotune.traffic.load import load_sample, read_workloads, split_workloads, workload_requests
from autotune.traffic.summary import summarize
from autotune.traffic.writer import request_record
from autotune.types import Request

REPO = Path(__file__).resolve().parents[2]


def _two_kinds(n: int = 600, seed: int = 0) -> list[Request]:
    """Short prompts that accept well, long ones that do not; every 7th labelled, some without
    acceptance, curves of varying length."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        good = i % 2 == 0
        length = int(rng.integers(0, 9)) if i % 5 else 8
        acc = tuple(float(round(x, 4)) for x in rng.uniform(
            0.8 if good else 0.2, 0.95 if good else 0.5, length)) or None
        out.append(Request(id=f"r{i}", arrival_s=float(rng.uniform(0, 100)),
                           prompt_tokens=int(rng.integers(20, 80) if good
                                             else rng.integers(2000, 4000)),
                           output_tokens=int(rng.integers(10, 400)), acceptance=acc,
                           workload="given" if i % 7 == 0 else None))
    return out


def test_columns_hold_every_field_of_every_request() -> None:
    reqs = [*_two_kinds(50), Request(id="x", prompt_tokens=3, output_tokens=4)]
    cols = collect_columns(iter(reqs))
    assert len(cols) == len(reqs) and cols.names == ("given",)
    for i, r in enumerate(reqs):
        assert (cols.prompt_tokens[i], cols.output_tokens[i]) == (r.prompt_tokens, r.output_tokens)
        got = tuple(cols.acceptance[cols.offsets[i]:cols.offsets[i + 1]])
        assert got == (r.acceptance or ())
        assert cols.workload[i] == (0 if r.workload else -1)
        assert (np.isnan(cols.arrival_s[i]) if r.arrival_s is None
                else cols.arrival_s[i] == r.arrival_s)


def test_summary_by_hand() -> None:
    reqs = [Request(id="a", prompt_tokens=10, output_tokens=1, arrival_s=3.0,
                    acceptance=(0.5, 0.25)),
            Request(id="b", prompt_tokens=20, output_tokens=2, arrival_s=1.0,
                    acceptance=(1.0,), workload="default"),
            Request(id="c", prompt_tokens=30, output_tokens=3, arrival_s=0.0),
            Request(id="d", prompt_tokens=40, output_tokens=4, workload="x",
                    acceptance=(0.1, 0.2, 0.3))]
    rows = {s.workload: s for s in summarize(reqs)}
    assert set(rows) == {"default", "x", "all"}  # unlabelled and "default" are one workload
    d = rows["default"]
    assert d.requests == 3 and d.with_acceptance == 2
    assert d.mean_acceptance == pytest.approx((0.75, 0.25))
    assert d.arrival_rate_per_s == pytest.approx(2 / 3.0)  # arrivals 0, 1, 3
    assert d.prompt_tokens["p50"] == 20.0
    assert rows["all"].mean_acceptance == pytest.approx(((0.5 + 1.0 + 0.1) / 3, 0.45 / 2, 0.3))
    assert summarize([]) == []


@pytest.mark.parametrize("seed", [0, 3])
def test_group_columns_gives_the_labels_group_requests_gives(seed: int) -> None:
    reqs = _two_kinds(seed=seed)
    grouping = group_requests(reqs, seed=seed)
    grouped = group_columns(collect_columns(reqs), seed=seed)
    names = grouped.columns.names
    assert [names[c] for c in grouped.columns.workload] == [r.workload for r in
                                                            grouping.requests]
    assert grouped.as_dict() == grouping.as_dict()
    assert grouping.k == 2 and {g.name for g in grouping.groups} >= {"given"}


def test_inspect_groups_in_one_pass_as_start_would(tmp_path: Path) -> None:
    reqs = _two_kinds()
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(request_record(r)) + "\n" for r in reqs))
    res = CliRunner().invoke(cli, ["traffic", "inspect", str(path), "--format", "json"])
    assert res.exit_code == 0, res.stderr
    assert "grouped automatically: 2 group(s)" in res.stderr
    expected = [s.as_dict() for s in summarize(group_requests(reqs, seed=0).requests)]
    assert json.loads(res.stdout) == json.loads(json.dumps(expected))


def _legacy(path: Path, max_requests: int, **kw: object) -> dict[str, tuple[object, ...]]:
    """What a tuning pass took from load_sample + split_workloads, per workload."""
    loaded = load_sample(path, **kw)  # type: ignore[arg-type]
    out = {}
    for name, reqs in split_workloads(loaded.requests, seed=0).items():
        out[name] = (len(reqs), workload_requests(reqs, max_requests),
                     summarize(reqs, total=False)[0].as_dict(), reference(reqs, seed=0))
    return out


@pytest.mark.parametrize("variant", ["labelled", "unlabelled", "timestamps unsorted, skips"])
def test_read_workloads_gives_a_pass_what_load_sample_gave(variant: str,
                                                           tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    kw: dict[str, object] = {}
    if variant == "labelled":
        path.write_bytes((REPO / "examples" / "sample.jsonl").read_bytes())
    else:
        reqs = _two_kinds(900)
        lines = []
        for i, r in enumerate(reqs):
            rec = request_record(replace(r, workload=None) if variant == "unlabelled" else r)
            if variant != "unlabelled":
                rec["timestamp"] = 1.7e9 + rec.pop("arrival_s")  # not in time order
                if i % 50 == 3:
                    lines.append('{"broken": ')
            lines.append(json.dumps(rec))
        path.write_text("\n".join(lines) + "\n")
        kw = {"skip_invalid": variant != "unlabelled"}
    legacy = _legacy(path, 100, **kw)
    lean = read_workloads(path, max_requests=100, seed=0, **kw)  # type: ignore[arg-type]
    assert list(lean.workloads) == list(legacy)
    assert lean.requests == sum(v[0] for v in legacy.values())  # type: ignore[misc]
    for name, (count, replay, summary, ref) in legacy.items():
        w = lean.workloads[name]
        assert w.requests == count and w.summary == summary
        assert w.replay == replay
        assert reference(w.features, seed=0) == ref
