"""The records the regret benchmark's parts hand one another, in the JSON shapes its results files
keep: a method's run on one seed (:class:`RunRow`), a (world, workload) scored (:class:`Detail`),
a method's summary over units (:class:`MethodSummary`), a world's (:class:`Summary`), the result
over every world (:class:`Result`), and the files that hold them. :func:`read_results` is the one
place a results file's JSON is read and checked; everything past it is typed.

A reading's summary stays a JSON object (:data:`Json`): it is autotune's measurement summary,
whose keys the search reads, and the cache keeps it as written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, NotRequired, TypeAlias, TypedDict, cast

#: A JSON value, as ``json.loads`` returns it.
Json: TypeAlias = "bool | int | float | str | list[Json] | dict[str, Json] | None"


class SloRecord(TypedDict):
    """The SLO a unit was held to, as replayed in its world (``dilation``: the factors the
    workload's p99 TTFT and ITL bounds and its arrival times were scaled by)."""

    ttft_p99_ms: float
    itl_p99_ms: float
    dilation: list[float]


class Race(TypedDict):
    """Whether a run's recommendation says it is a close race with its runner-up, and its lead
    (None: no runner-up)."""

    close_race: bool
    lead: float | None


class RunRow(TypedDict):
    """One method's run on one seed, scored against that seed's oracle. ``to_2pct`` is inf when
    the run never came within 2%. A real-engine world's row carries its seed's own oracle and
    default (each seed has its own held-out oracle there). Rows recorded before the close race
    was lack ``close_race`` and ``lead``.

    What the run would cost on real replicas (bench/regret/economy.py; rows recorded before
    readings carried their cost, or whose readings lack it, have none of these):
    ``trial_gpu_h`` (each of ``trials``' GPU-hours), ``gpu_h`` (their sum), ``regret_at_gpu_h``
    (the regret when the method's spending stops at the GPU-hours guided spent on the seed;
    None without a guided run), ``gpu_h_to_1pct`` (GPU-hours before the recommendation comes
    within 1%, inf: never). ``no_rate_trials``: search trials of ``trials`` on configs that
    meet the SLO at no rate by the oracle's readings."""

    regret: float
    runs: int
    regret_se: float | None
    regret_at_6: float
    to_2pct: float
    chosen: str | None
    stop: str
    trials: list[str]
    close_race: NotRequired[bool]
    lead: NotRequired[float | None]
    oracle: NotRequired[str]
    oracle_value: NotRequired[float]
    default_regret: NotRequired[float]
    default_meets_slo: NotRequired[bool]
    trial_gpu_h: NotRequired[list[float]]
    gpu_h: NotRequired[float]
    regret_at_gpu_h: NotRequired[float | None]
    gpu_h_to_1pct: NotRequired[float]
    no_rate_trials: NotRequired[int]


class BindingRecord(TypedDict):
    """A unit's binding SLO (bench/regret/binding.py): the rule, the rate to serve it set
    (``rate_to_serve``, × the sample's rate; None: no config meets the workload's SLO at any
    rate, so the unit kept its own rate and SLO), the tail bound (``bound_tail``: "itl" or
    "ttft"; None: the workload's own bounds both) with its bound (``itl_p99_ms`` or
    ``ttft_p99_ms``; None: the workload's own), and the configs' p99s at the rate it was
    chosen from: of ITL the lowest, the median, the throughput-best's and the interval ends an
    ITL bound would lie between (the lowest interval top and the throughput-best's interval
    bottom); of TTFT the lowest (of the configs within the workload's own ITL bound) and the
    throughput-best's; how many configs kept up there, and
    the throughput-best config (the oracle under the workload's own SLO, by capacity at any
    rate) with whether it serves the rate within the binding SLO. ``reachable`` False: no
    config's capacity reading served the rate under the bound, so the unit was scored by
    capacity at any rate. ``itl_p99_replay_noise`` and ``ttft_p99_replay_noise``: one
    reading's p99 noise of each tail at the rate (sd of its log, from a second reading of every
    config), which that tail's bound must clear. Records made before the rate was set lack
    ``rate_to_serve``, the throughput-best's p99 ITL and the interval ends; those made before
    the noise was read lack it; those made before TTFT could be bound lack the TTFT fields and
    ``bound_tail`` (their bound, if any, is on ITL)."""

    world: str
    rule: str
    rate_to_serve: NotRequired[float | None]
    bound_tail: NotRequired[Literal["itl", "ttft"] | None]
    itl_p99_ms: float | None
    ttft_p99_ms: NotRequired[float | None]
    configs_keeping_up: int
    configs: int
    itl_p99_at_rate_best_ms: float | None
    itl_p99_at_rate_median_ms: float | None
    itl_p99_at_rate_throughput_best_ms: NotRequired[float | None]
    itl_p99_interval_shortest_top_ms: NotRequired[float | None]
    itl_p99_interval_throughput_best_bottom_ms: NotRequired[float | None]
    itl_p99_replay_noise: NotRequired[float | None]
    ttft_p99_at_rate_best_ms: NotRequired[float | None]
    ttft_p99_at_rate_throughput_best_ms: NotRequired[float | None]
    ttft_p99_replay_noise: NotRequired[float | None]
    throughput_best: str
    throughput_best_serves: bool
    reachable: NotRequired[bool]


class Detail(TypedDict):
    """One (world, workload) scored: its SLO, its oracle, the default's regret, every method's
    rows by method (one per seed); under a binding SLO, how it was set (``binding``)."""

    slo: SloRecord
    oracle: str
    oracle_value: float
    oracle_feasible: bool
    default_regret: float
    default_meets_slo: bool
    runs: dict[str, list[RunRow]]
    workload: str
    binding: NotRequired[BindingRecord]


class MethodSummary(TypedDict):
    """A method over a set of units (the seed default: ``median_regret`` alone). Runs to 2% for
    the methods that run on (None: not reached in half the runs); the share of runs said close
    for guided. With rows that carry their cost (bench/regret/economy.py): the median GPU-hours
    of a run, the median regret at guided's GPU-hours (the seed's), the median GPU-hours to
    1% (None: not reached in half the runs); and the median search trials per workload on
    configs that meet the SLO at no rate."""

    median_regret: float
    max_regret: NotRequired[float]
    median_runs: NotRequired[float]
    regret_at_6: NotRequired[float]
    max_regret_se: NotRequired[float | None]
    median_runs_to_2pct: NotRequired[float | None]
    losses_said_close: NotRequired[float | None]
    others_said_close: NotRequired[float | None]
    median_gpu_h: NotRequired[float]
    regret_at_guided_gpu_h: NotRequired[float]
    median_gpu_h_to_1pct: NotRequired[float | None]
    median_no_rate_trials: NotRequired[float]


class BindingCount(TypedDict):
    """Over units scored under a binding SLO (a world's, or all): how many, those whose
    throughput-best config fails the SLO at the rate to serve (``binding_units``, named in
    ``which``), and those out of reach (bench/regret/binding.py)."""

    units: int
    binding_units: int
    which: list[str]
    out_of_reach: list[str]


class BindingSummary(BindingCount):
    """:class:`BindingCount` over every unit, with the rule that set the rates and bounds."""

    rule: str


class EqualGpuH(TypedDict):
    """Regret at an equal GPU-hour budget (bench/regret/economy.py): the budget (``gpu_h``,
    guided's median GPU-hours by its stop; each run is held to its own seed's guided spend),
    guided's median regret there, every other method's median regret when its spending stops
    at guided's (``at_guided_gpu_h``), and guided's over TPE's (``guided_over_tpe``; None when
    TPE's is 0: the target, at most 1/3, is then met only by guided's 0 too)."""

    gpu_h: float
    guided: float
    at_guided_gpu_h: dict[str, float]
    guided_over_tpe: float | None


class Summary(TypedDict):
    """A world's (or every world's) summary: its workloads, seeds and methods; for a world,
    whether the search was tuned on it (bench/regret/worlds.py ``TUNED_ON``; False: scored
    once, new to the search; ``held_out``: a held-out world of bench/regret/held_out/, to be
    scored once with the code frozen); with rows that carry their cost, regret at an equal GPU-hour
    budget (``equal_gpu_h``); for a world scored under a binding SLO, its units counted
    (``binding_slo``)."""

    workloads: list[str]
    seeds: int
    methods: dict[str, MethodSummary]
    tuned_on: NotRequired[bool]
    held_out: NotRequired[bool]
    binding_slo: NotRequired[BindingCount]
    equal_gpu_h: NotRequired[EqualGpuH]


class Provenance(TypedDict):
    """Where a merged result's rows came from: per world and method, the file."""

    merged_from: dict[str, dict[str, str]]
    note: NotRequired[str]


class Result(TypedDict):
    """The result over the units finished: per world and over all of them; the worlds the
    search was tuned on (``tuned_on``); under a binding SLO, its units counted
    (``binding_slo``)."""

    worlds: dict[str, Summary]
    summary: Summary
    provenance: NotRequired[Provenance]
    tuned_on: NotRequired[list[str]]
    binding_slo: NotRequired[BindingSummary]


#: Per world, its units' details.
Units: TypeAlias = "dict[str, list[Detail]]"


class DetailFile(TypedDict):
    """``--detail``'s file and ``python -m bench.regret.merge``'s: the result and its units
    (``complete``: every unit asked for finished; a merge leaves it out)."""

    result: Result
    units: Units
    complete: NotRequired[bool]


def read_results(path: Path) -> tuple[Result, Units | None]:
    """A results file (``--out``'s, ``--detail``'s or a merge's): its result and, when the file
    keeps them, its units' details. An error naming the file when it is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SystemExit(f"{path}: cannot read a regret results file: {e}") from e
    if not isinstance(data, dict):
        raise SystemExit(f"{path}: not a regret results file (a JSON object is expected)")
    result, units = data.get("result", data), data.get("units")
    if not (isinstance(result, dict) and isinstance(result.get("worlds"), dict)
            and isinstance(result.get("summary"), dict)):
        raise SystemExit(f"{path}: not a regret results file (no result with its worlds and "
                         f"summary): pass --out's or --detail's file, or a merge's")
    if units is not None and not (isinstance(units, dict) and set(result["worlds"]) <= set(units)):
        raise SystemExit(f"{path}: its units lack worlds its result summarises")
    return cast(Result, result), cast("Units | None", units)
