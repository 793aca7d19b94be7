"""Grouping by what changes the best window: sources that differ only in acceptance."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from autotune.backends.sim import generate_requests
from autotune.cli import cli
from autotune.traffic.grouping import SINGLE_GROUP, group_requests
from autotune.traffic.writer import request_record
from autotune.types import Request


def shared_lengths(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """One length distribution for every source (lognormal, no length structure)."""
    rng = np.random.default_rng(seed)
    prompt = np.clip(np.rint(np.exp(rng.normal(6.5, 0.9, n))), 1, 16000).astype(np.int64)
    output = np.clip(np.rint(np.exp(rng.normal(5.0, 0.8, n))), 1, 4000).astype(np.int64)
    return prompt, output


def mix(sources: dict[str, int], seed: int = 0) -> tuple[list[Request], list[str]]:
    """Unlabelled requests of the simulator's per-benchmark acceptance priors, lengths from
    one shared distribution, sources interleaved; and each request's source."""
    total = sum(sources.values())
    prompt, output = shared_lengths(total, seed)
    order = np.random.default_rng(seed + 1).permutation(total)
    requests: list[Request] = []
    truth: list[str] = []
    start = 0
    for source, n in sources.items():
        rows = order[start:start + n]
        start += n
        for r in generate_requests(n, workload=source, seed=seed, prompt_tokens=prompt[rows],
                                   output_tokens=output[rows], id_prefix=f"{source}-"):
            requests.append(replace(r, workload=None))
            truth.append(source)
    shuffle = np.random.default_rng(seed + 2).permutation(len(requests))
    return [requests[i] for i in shuffle], [truth[i] for i in shuffle]


def purity(labels: list[str | None], truth: list[str]) -> float:
    best: dict[str | None, int] = {}
    for (group, _), n in Counter(zip(labels, truth, strict=True)).items():
        best[group] = max(best.get(group, 0), n)
    return sum(best.values()) / len(truth)


def test_sources_whose_best_windows_differ_are_split_though_lengths_are_shared() -> None:
    # Chat (c1 ~0.73, flat) and LiveCodeBench (c1 ~0.61, falling fast): the simulator's best
    # windows are 6-7 and 3-4.
    requests, truth = mix({"chat": 1500, "livecodebench": 1000})
    grouping = group_requests(requests, seed=0)
    labels = [r.workload for r in grouping.requests]
    assert grouping.k == 2, grouping.as_dict()
    assert sorted(set(labels)) == ["high-acceptance", "low-acceptance"]
    assert purity(labels, truth) > 0.95
    low = Counter(t for lab, t in zip(labels, truth, strict=True) if lab == "low-acceptance")
    assert low.most_common(1)[0][0] == "livecodebench"
    split = grouping.acceptance[0]
    assert split["gain"] >= 0.005 and split["groups"] == 2
    windows = split["best_windows"]
    assert any(w[0] < w[1] for w in windows.values())  # the low group prefers shorter windows


def test_one_source_stays_one_group() -> None:
    for source in ("chat", "gsm8k", "livecodebench"):
        requests, _ = mix({source: 2500}, seed=3)
        grouping = group_requests(requests, seed=0)
        assert grouping.k == 1, (source, grouping.as_dict())
        assert {r.workload for r in grouping.requests} == {SINGLE_GROUP}


def test_sources_that_do_not_change_the_window_stay_one_group() -> None:
    # Chat and SPEED-Bench coding differ in their curves (the mixture sees two components)
    # but not in the window they prefer: one group.
    requests, _ = mix({"chat": 1500, "speed-bench-coding": 1000}, seed=5)
    grouping = group_requests(requests, seed=0)
    assert grouping.k == 1, grouping.as_dict()
    assert grouping.acceptance[0]["components"] >= 2
    assert grouping.acceptance[0]["groups"] == 1


def test_grouping_by_acceptance_is_deterministic_and_labels_win() -> None:
    requests, truth = mix({"chat": 800, "livecodebench": 600}, seed=7)
    first = [r.workload for r in group_requests(requests, seed=0).requests]
    assert first == [r.workload for r in group_requests(requests, seed=0).requests]
    labelled = [replace(r, workload=t) if i % 2 else r
                for i, (r, t) in enumerate(zip(requests, truth, strict=True))]
    out = group_requests(labelled, seed=0).requests
    assert all(after.workload == before.workload for before, after in
               zip(labelled, out, strict=True) if before.workload is not None)


def test_traffic_inspect_splits_an_unlabelled_mix_end_to_end(tmp_path: Path) -> None:
    requests, truth = mix({"chat": 900, "livecodebench": 600}, seed=11)
    path = tmp_path / "mix.jsonl"
    path.write_text("".join(json.dumps(request_record(r)) + "\n" for r in requests))
    result = CliRunner().invoke(cli, ["traffic", "inspect", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = {r["workload"]: r for r in json.loads(result.stdout)}
    assert {"high-acceptance", "low-acceptance"} <= set(rows)
    counts = Counter(truth)
    assert abs(rows["low-acceptance"]["requests"] - counts["livecodebench"]) < 0.05 * len(truth)
    table = CliRunner().invoke(cli, ["traffic", "inspect", str(path)], terminal_width=100)
    assert table.exit_code == 0 and "low-acceptance" in table.output
    assert max(len(line) for line in table.output.splitlines()) <= 100
