"""Automatic workload grouping on mixes of the real traces, labels, determinism, criterion."""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from autotune.traffic import read_sample
from autotune.traffic.grouping import (
    SINGLE_GROUP,
    assign_workloads,
    describe_groups,
    group_requests,
)
from autotune.traffic.importers import import_traffic
from autotune.types import Request

REPO = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("AUTOTUNE_SHARED_DATA") or REPO / ".." / "shared" / "data").resolve()
AZURE = DATA / "azure_llm_2023"
NAME = re.compile(r"^((short|medium|long)-(prompt|output)|(low|medium|high)-acceptance)"
                  r"(-((short|medium|long)-(prompt|output)|(low|medium|high)-acceptance))*$")


@pytest.fixture(scope="module")
def azure_mix(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Request], list[str]]:
    """The Azure code and conversation traces, whole, imported without labels; the truth."""
    tmp = tmp_path_factory.mktemp("mix")
    requests: list[Request] = []
    truth: list[str] = []
    for source in ("code", "conv"):
        out = tmp / f"{source}.jsonl"
        import_traffic("azure", AZURE / f"AzureLLMInferenceTrace_{source}.csv", out)
        got = list(read_sample(out))
        requests += got
        truth += [source] * len(got)
    return requests, truth


def purity(labels: list[str | None], truth: list[str]) -> float:
    """Share of requests in their group's majority source."""
    pairs = Counter(zip(labels, truth, strict=True))
    best: dict[str | None, int] = {}
    for (group, _), n in pairs.items():
        best[group] = max(best.get(group, 0), n)
    return sum(best.values()) / len(truth)


def test_groups_are_found_in_the_unlabelled_azure_code_and_conv_mix(
        azure_mix: tuple[list[Request], list[str]]) -> None:
    requests, truth = azure_mix
    assert all(r.workload is None for r in requests)
    grouping = group_requests(requests, seed=0)
    labels = [r.workload for r in grouping.requests]
    names = {g.name for g in grouping.groups}
    assert 2 <= grouping.k <= 6 and len(names) == grouping.k
    assert all(NAME.match(n) for n in names), names
    assert all(g.automatic for g in grouping.groups)
    assert sum(g.requests for g in grouping.groups) == len(requests)
    # The groups carry the sources' difference: far purer than the majority share (0.69).
    majority = max(Counter(truth).values()) / len(truth)
    assert purity(labels, truth) >= majority + 0.1
    # Code completions (output median 13 tokens) land mostly in short-output groups, the
    # conversation service (median 129) mostly not.
    short = [(lab or "").find("short-output") >= 0 for lab in labels]
    code_short = np.mean([s for s, t in zip(short, truth, strict=True) if t == "code"])
    conv_short = np.mean([s for s, t in zip(short, truth, strict=True) if t == "conv"])
    assert code_short > 0.7 and conv_short < 0.5
    # The names describe the groups: a short-output group's median output is below a
    # long-output group's, likewise for prompts.
    for dim, field in (("output", "output_tokens_p50"), ("prompt", "prompt_tokens_p50")):
        shorts = [getattr(g, field) for g in grouping.groups if f"short-{dim}" in g.name]
        longs = [getattr(g, field) for g in grouping.groups if f"long-{dim}" in g.name]
        if shorts and longs:
            assert max(shorts) < min(longs)


def test_grouping_is_deterministic_and_stable_across_seeds(
        azure_mix: tuple[list[Request], list[str]]) -> None:
    requests, _ = azure_mix
    first = [r.workload for r in assign_workloads(requests, seed=0)]
    assert first == [r.workload for r in assign_workloads(requests, seed=0)]
    other = [r.workload for r in assign_workloads(requests, seed=7)]
    assert set(other) == set(first)  # same groups, same names
    agree = np.mean([a == b for a, b in zip(first, other, strict=True)])
    assert agree > 0.95


def test_labels_win(azure_mix: tuple[list[Request], list[str]]) -> None:
    requests, truth = azure_mix
    labelled = [replace(r, workload=t) for r, t in zip(requests, truth, strict=True)]
    assert assign_workloads(labelled) == labelled
    # Half labelled: those keep theirs, only the others are grouped, with names of their own.
    half = [replace(r, workload="code") if t == "code" else r
            for r, t in zip(requests, truth, strict=True)]
    grouping = group_requests(half, seed=0)
    for before, after in zip(half, grouping.requests, strict=True):
        if before.workload is not None:
            assert after.workload == before.workload
        else:
            assert after.workload is not None and after.workload != "code"
    assert {g.name: g.automatic for g in grouping.groups}["code"] is False
    assert sum(g.automatic for g in grouping.groups) == grouping.k


def test_acceptance_curves_separate_groups_that_lengths_do_not(
        azure_mix: tuple[list[Request], list[str]]) -> None:
    """The code trace's real lengths (no length structure) with two acceptance profiles."""
    requests, truth = azure_mix
    code = [r for r, t in zip(requests, truth, strict=True) if t == "code"][:3000]
    assert group_requests(code, seed=0).k == 1
    rng = np.random.default_rng(3)
    easy = rng.random(len(code)) < 0.4
    with_curves = []
    for r, e in zip(code, easy, strict=True):
        level = 0.95 if e else 0.55
        curve = np.clip(level + rng.normal(0.0, 0.03, size=8), 0.0, 1.0)
        with_curves.append(replace(r, acceptance=tuple(float(c) for c in curve)))

    grouping = group_requests(with_curves, seed=0)
    assert grouping.k == 2 and grouping.features[-1] == "acceptance_logit_level_slope"
    assert sorted(g.name for g in grouping.groups) == ["high-acceptance", "low-acceptance"]
    high = [r.workload == "high-acceptance" for r in grouping.requests]
    assert np.mean([h == e for h, e in zip(high, easy, strict=True)]) > 0.98
    by_name = {g.name: g for g in grouping.groups}
    assert (by_name["high-acceptance"].expected_tokens or 0) > \
        (by_name["low-acceptance"].expected_tokens or 0) + 2


def test_one_length_regime_without_structure_stays_one_group() -> None:
    rng = np.random.default_rng(0)
    requests = [Request(id=str(i), prompt_tokens=int(np.exp(rng.normal(6.0, 1.0))) + 1,
                        output_tokens=int(np.exp(rng.normal(4.0, 1.0))) + 1)
                for i in range(3000)]
    grouping = group_requests(requests, seed=0)
    assert grouping.k == 1 and {r.workload for r in grouping.requests} == {SINGLE_GROUP}
    assert grouping.silhouettes and max(grouping.silhouettes.values()) < 0.5


def test_tiny_and_degenerate_inputs() -> None:
    same = [Request(id=str(i), prompt_tokens=100, output_tokens=50) for i in range(40)]
    assert {r.workload for r in assign_workloads(same)} == {SINGLE_GROUP}
    assert [r.workload for r in assign_workloads(same[:3])] == [SINGLE_GROUP] * 3
    assert assign_workloads([]) == []


def test_describe_groups_is_json_ready(azure_mix: tuple[list[Request], list[str]]) -> None:
    import json

    requests, _ = azure_mix
    info = describe_groups(requests[::10], seed=0)
    text = json.dumps(info)
    assert info["criterion"].startswith("silhouette") and info["features"][:2] == [
        "log_prompt_tokens", "log_output_tokens"]
    assert sum(g["requests"] for g in info["groups"]) == len(requests[::10])
    assert set(info["silhouettes"]) <= {"2", "3", "4", "5", "6"} and text
