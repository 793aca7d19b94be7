"""The regret benchmark's economy: what a run would cost on real replicas, its regret at an equal
GPU-hour budget, the trials it spends on configs that meet the SLO at no rate, and the
binding-SLO scoring, on constructed readings."""

from __future__ import annotations

import math

import pytest

from autotune.cost import TrialCost
from bench.regret import report
from bench.regret.binding import (
    RULE,
    SEPARATION_Z,
    Tail,
    TailName,
    bound,
    capacity,
    changed_winner,
    choose,
    rate_to_serve,
    record,
    replay_noise,
    separation,
    serving,
)
from bench.regret.economy import gpu_h_to, no_rate_trials, trial_gpu_h, within_budget
from bench.regret.oracle import Table
from bench.regret.reading import Reading
from bench.regret.records import Detail, Json, RunRow
from bench.regret.report import binding_lines, checks, result, summarize, tuned_on_lines
from bench.regret.worlds import SPENT, TUNED_ON, held_out_worlds

#: One p99 TTFT (ms) for every config of the ITL-only tests: it separates none of them.
TTFT = 500.0


def reading(value: float, *, start_s: float = 600.0, replay_s: float = 1800.0, gpus: int = 8,
            scale: float = 2.0, met: bool = True) -> Reading:
    """A capacity reading: ``value`` at ``scale`` × the sample's rate (``met``: the SLO was met
    there), costing a server start and replay time on a replica of ``gpus`` GPUs."""
    summary: dict[str, Json] = {"load_scale": scale, "capacity_met_slo": 1.0 if met else 0.0,
                                **TrialCost(start_s, replay_s, gpus).metrics()}
    return Reading(value, met, {"itl": -1.0 if met else 5.0}, summary)


def test_a_trial_of_the_config_the_server_already_serves_pays_no_start() -> None:
    trials = [("a", reading(1.0)), ("a", reading(1.0)), ("b", reading(1.0)),
              ("a", reading(1.0, gpus=4))]
    spent = trial_gpu_h(trials)
    assert spent == pytest.approx([(600 + 1800) / 3600 * 8, 1800 / 3600 * 8,
                                   (600 + 1800) / 3600 * 8, (600 + 1800) / 3600 * 4])


def test_a_run_whose_readings_lack_their_cost_has_none() -> None:
    bare = Reading(1.0, True, {}, {"load_scale": 1.0})
    assert trial_gpu_h([("a", reading(1.0)), ("b", bare)]) is None


def test_a_budget_pays_for_the_leading_trials_it_covers() -> None:
    spent = [2.0, 1.0, 3.0, 0.5]
    assert within_budget(spent, 3.0) == 2
    assert within_budget(spent, 2.9) == 1
    assert within_budget(spent, 1.0) == 0
    assert within_budget(spent, 100.0) == 4


def test_gpu_hours_to_one_percent_count_every_trial_before_it() -> None:
    regrets = {1: 0.2, 2: 0.05, 3: 0.0, 4: 0.0}
    assert gpu_h_to([2.0, 1.0, 3.0, 0.5], regrets.__getitem__) == pytest.approx(6.0)
    assert math.isinf(gpu_h_to([2.0, 1.0], regrets.__getitem__))


def test_search_trials_on_configs_meeting_the_slo_at_no_rate_are_counted() -> None:
    table = Table({"base": [reading(1.0, met=False)] * 2, "ok": [reading(2.0)] * 2,
                   "never": [reading(0.5, met=False)] * 2,
                   "split": [reading(2.0), reading(0.5, met=False), reading(0.5, met=False)]})
    trials = ["base", "never", "ok", "split", "never"]
    # the baseline's trial is not a search trial, however its config fares
    assert no_rate_trials(trials, table.meets_somewhere, "base") == 3


def test_a_binding_slo_scores_serving_the_rate_not_capacity_at_any_rate() -> None:
    """The config with the most capacity serves only half the rate to serve: under a binding
    SLO the best is the one that serves the rate, and a pick of the other is worth nothing."""
    readings = {"fast": [reading(10.0, scale=0.5)] * 2, "slow": [reading(6.0, scale=1.2)] * 2,
                "slower": [reading(5.4, scale=1.1)] * 2}
    anywhere, binding = Table(readings), Table(readings, binding=True)
    assert anywhere.oracle() == ("fast", 10.0)
    assert binding.oracle() == ("slow", 6.0)
    assert binding.regret("fast") == 1.0
    assert binding.regret("slower") == pytest.approx(0.1)
    assert anywhere.regret("slow") == pytest.approx(0.4)


def _row(regret: float, gpu_h: float, at_gpu_h: float, to1: float, no_rate: int) -> RunRow:
    return {"regret": regret, "runs": 6, "regret_se": None, "regret_at_6": regret,
            "to_2pct": 3.0, "chosen": "c", "stop": "", "trials": [], "gpu_h": gpu_h,
            "trial_gpu_h": [gpu_h], "regret_at_gpu_h": at_gpu_h, "gpu_h_to_1pct": to1,
            "no_rate_trials": no_rate}


def _unit(guided: list[RunRow], tpe: list[RunRow]) -> Detail:
    return {"slo": {"ttft_p99_ms": 3000.0, "itl_p99_ms": 60.0, "dilation": [1.0, 1.0, 1.0]},
            "oracle": "c", "oracle_value": 1.0, "oracle_feasible": True, "default_regret": 0.2,
            "default_meets_slo": True, "runs": {"guided": guided, "tpe": tpe},
            "workload": "chat"}


def test_the_summary_gives_regret_against_gpu_hours_and_the_no_rate_trials() -> None:
    guided = [_row(0.0, 10.0, 0.0, 4.0, 0), _row(0.01, 12.0, 0.01, 12.0, 1),
              _row(0.0, 8.0, 0.0, 8.0, 2)]
    tpe = [_row(0.0, 40.0, 0.09, 30.0, 3), _row(0.02, 40.0, 0.3, math.inf, 4),
           _row(0.0, 40.0, 0.06, math.inf, 5)]
    res = summarize([_unit(guided, tpe)], 3)
    g, t = res["methods"]["guided"], res["methods"]["tpe"]
    assert (g["median_gpu_h"], g["regret_at_guided_gpu_h"], g["median_gpu_h_to_1pct"],
            g["median_no_rate_trials"]) == (10.0, 0.0, 8.0, 1.0)
    assert t["median_gpu_h"] == 40.0 and t["regret_at_guided_gpu_h"] == 0.09
    assert t["median_gpu_h_to_1pct"] is None  # not reached in half the runs
    assert res.get("equal_gpu_h") == {"gpu_h": 10.0, "guided": 0.0,
                                      "at_guided_gpu_h": {"tpe": 0.09}, "guided_over_tpe": 0.0}
    lines = checks("w", res, [_unit(guided, tpe)])
    assert ("PASS at guided's GPU-hours (10 GPU-h median) guided 0.00% <= tpe 9.00% / 3; PASS "
            "guided median search trials on configs meeting the SLO at no rate 1 <= 1"
            ) in lines[-1]
    # TPE as good as guided at guided's GPU-hours: no ratio, and the target needs guided's 0
    even = summarize([_unit(guided, [_row(0.0, 40.0, 0.0, 30.0, 3)])], 1).get("equal_gpu_h")
    assert even is not None and even["guided_over_tpe"] is None


def test_rows_recorded_before_cost_keep_the_old_summary_and_checks() -> None:
    old: RunRow = {"regret": 0.0, "runs": 6, "regret_se": None, "regret_at_6": 0.0,
                   "to_2pct": 3.0, "chosen": "c", "stop": "", "trials": []}
    res = summarize([_unit([old], [old])], 1)
    assert "median_gpu_h" not in res["methods"]["guided"]
    assert "median_no_rate_trials" not in res["methods"]["guided"]
    assert len(checks("w", res, [_unit([old], [old])])) == 2


def test_the_rate_to_serve_is_the_median_capacity_of_the_configs_meeting_the_slo() -> None:
    """Half the configs that meet the workload's own SLO at some rate carry the rate to serve;
    a config's capacity is its readings' mean load scale."""
    assert capacity([reading(1.0, scale=0.5), reading(1.0, scale=0.7)]) == pytest.approx(0.6)
    assert rate_to_serve([0.2, 0.9, 0.5, 0.0, 0.6]) == pytest.approx(0.55)  # 0: no rate
    assert rate_to_serve([0.0, math.nan]) is None


def test_the_bound_splits_the_shortest_tail_and_the_throughput_bests_by_equal_margins() -> None:
    """At the rate to serve: the geometric midpoint of the lowest p99 ITL of the configs that
    keep up there (None: falls behind, however short its ITL) and the throughput-best's."""
    at_rate = {"short": Tail(40.0, 36.0, 45.0, TTFT), "best": Tail(90.0, 80.0, 99.0, TTFT),
               "mid": Tail(60.0, 50.0, 70.0, TTFT), "behind": None}
    itl = bound(at_rate, "best")
    assert itl is not None and itl == pytest.approx(60.0)  # sqrt(40 x 90)
    assert math.log(itl / 40.0) == pytest.approx(math.log(90.0 / itl))
    assert bound(at_rate, "short") is None    # it has the shortest tail: no bound fails it alone
    assert bound(at_rate, "behind") is None   # it fails the rate whatever the ITL bound
    assert bound({"a": None, "b": None}, "a") is None


def test_a_bound_inside_one_readings_noise_is_not_set() -> None:
    """Two readings of every config at the rate measure one reading's p99 noise where the
    bound would lie: a bound at the midpoint must leave each side SEPARATION_Z noise sds of
    margin, else the workload keeps its own bound (replay noise, not the search, would decide
    which config serves the rate)."""
    first = {"short": Tail(40.0, 36.0, 45.0, TTFT), "mid": Tail(42.0, 38.0, 46.0, TTFT),
             "best": Tail(44.0, 40.0, 49.0, TTFT), "stall": Tail(90.0, 89.0, 91.0, TTFT),
             "behind": None}
    second = {"short": Tail(42.0, 38.0, 47.0, TTFT), "mid": Tail(44.0, 40.0, 48.0, TTFT),
              "best": Tail(42.0, 38.0, 47.0, TTFT), "stall": Tail(90.0, 89.0, 91.0, TTFT),
              "behind": None}
    noise = replay_noise(first, second, "best")
    # the three between 40 and 44 ms, not the stall's near-deterministic p99
    logs = [math.log(40 / 42), math.log(42 / 44), math.log(44 / 42)]
    assert noise == pytest.approx(math.sqrt(sum(x * x for x in logs) / 3 / 2))
    assert bound(first, "best") == pytest.approx(math.sqrt(40.0 * 44.0))  # no noise: split
    assert bound(first, "best", noise) is None  # 9.5% apart: inside 2 x 1.645 x 3.4%
    apart = {**first, "best": Tail(60.0, 55.0, 66.0, TTFT)}  # 50% apart: well clear of it
    assert bound(apart, "best", noise) == pytest.approx(math.sqrt(40.0 * 60.0))
    assert math.log(60.0 / 40.0) / 2.0 > SEPARATION_Z * noise
    assert replay_noise(first, {k: None for k in first}, "best") is None


def _tails(itl: dict[str, float], ttft: dict[str, float]) -> dict[str, Tail | None]:
    """Readings at the rate of the configs named in ``itl`` (their p99 ITLs, an interval of
    ±10% around each) with their p99 TTFTs."""
    return {k: Tail(v, v * 0.9, v * 1.1, ttft[k]) for k, v in itl.items()}


def _again(first: dict[str, Tail | None], itl: dict[str, float],
           ttft: dict[str, float]) -> dict[str, Tail | None]:
    """A second reading of each config of ``first``, its p99s off by the factors given."""
    return _tails({k: t.p99 * itl[k] for k, t in first.items() if t is not None},
                  {k: t.ttft_p99 * ttft[k] for k, t in first.items() if t is not None})


#: A second reading's factors: a few percent of replay noise on each of four configs.
NOISY = {"best": 1.04, "short": 0.96, "mid": 1.03, "long": 0.97}
#: A tenth of it.
QUIET = {k: 1.0 + (f - 1.0) / 10.0 for k, f in NOISY.items()}


def test_a_unit_whose_itls_do_not_separate_but_whose_ttfts_do_is_bound_on_ttft() -> None:
    """The throughput-best's short chunks stall decodes no longer than the others' at the rate
    (p99 ITLs a hair apart, inside the noise), but make a long prompt wait through several
    chunk steps (p99 TTFT far above the long-chunk configs'): the TTFT is bound at the geometric
    midpoint of the lowest p99 TTFT and the throughput-best's, the ITL keeps the workload's."""
    first = _tails({"best": 97.45, "short": 97.39, "mid": 97.42, "long": 97.40},
                   {"best": 1100.0, "short": 1000.0, "mid": 600.0, "long": 350.0})
    second = _again(first, NOISY, NOISY)
    choice = choose(first, second, "best")
    itl_noise, ttft_noise = choice.noise["itl"], choice.noise["ttft"]
    assert itl_noise is not None and ttft_noise is not None
    assert bound(first, "best", itl_noise) is None  # the ITLs: inside the noise
    assert choice.tail == "ttft" and choice.bound is not None
    assert choice.bound == pytest.approx(math.sqrt(350.0 * 1100.0))
    assert choice.of("itl") is None and choice.of("ttft") == choice.bound
    assert math.log(choice.bound / 350.0) == pytest.approx(math.log(1100.0 / choice.bound))
    assert math.log(1100.0 / 350.0) / 2.0 >= SEPARATION_Z * ttft_noise
    b = record("w/d", 0.5, choice, first, "best", False)
    assert b.get("bound_tail") == "ttft" and b["itl_p99_ms"] is None
    assert b.get("ttft_p99_ms") == pytest.approx(choice.bound, abs=1e-3)
    assert b.get("ttft_p99_at_rate_best_ms") == 350.0
    assert b.get("ttft_p99_at_rate_throughput_best_ms") == 1100.0
    assert b.get("ttft_p99_replay_noise") == pytest.approx(ttft_noise, abs=1e-5)
    assert b["itl_p99_at_rate_best_ms"] == 97.39  # the ITL figures are kept as before
    from bench.regret.unit import _binding_line

    assert f"bound: p99 TTFT {choice.bound:.1f} ms (p99 ITL: the workload's own)" in (
        _binding_line(b))


def test_when_both_tails_separate_the_one_wider_in_noise_sds_is_bound() -> None:
    """Both tails' candidates clear their noise: the tail whose half log gap is the more noise
    sds is bound, not the one with the wider gap, and only that one (bounding both can leave
    no config serving the rate); with no noise, the wider log gap."""
    first = _tails({"best": 90.0, "short": 40.0, "mid": 50.0, "long": 70.0},
                   {"best": 600.0, "short": 500.0, "mid": 400.0, "long": 300.0})
    assert math.log(90.0 / 40.0) > math.log(600.0 / 300.0)  # the ITLs lie further apart
    cases: list[tuple[dict[str, float], dict[str, float], TailName, TailName]] = [
        (NOISY, QUIET, "ttft", "itl"), (QUIET, NOISY, "itl", "ttft")]
    for itl, ttft, tail, other in cases:
        choice = choose(first, _again(first, itl, ttft), "best")
        mine, theirs = choice.noise[tail] or 0.0, choice.noise[other] or 0.0
        assert bound(first, "best", mine, tail) is not None  # both would bind alone
        assert bound(first, "best", theirs, other) is not None
        assert choice.tail == tail and choice.of(other) is None
        assert (separation(first, "best", tail, mine)[0]
                > separation(first, "best", other, theirs)[0])
        lowest = min(t.of(tail) for t in first.values() if t is not None)
        best = first["best"]
        assert best is not None
        assert choice.bound == pytest.approx(math.sqrt(lowest * best.of(tail)))
    assert choose(first, first, "best").tail == "itl"  # no noise: the wider log gap


def test_a_config_over_the_workloads_itl_bound_does_not_set_the_lowest_ttft() -> None:
    """Long chunks give the shortest TTFTs and, under load, ITL stalls far over the workload's
    own ITL bound, which a TTFT bound leaves in place: such a config cannot serve the rate
    whatever the TTFT bound, so the TTFT bound lies between the configs meeting the ITL bound
    (else it is below every one of them and no config serves the rate)."""
    first = _tails({"best": 160.0, "short": 157.0, "mid": 158.0, "long": 560.0},
                   {"best": 1950.0, "short": 1400.0, "mid": 1700.0, "long": 1000.0})
    own: dict[TailName, float] = {"ttft": 3000.0, "itl": 200.0}
    assert serving(first, "ttft", own)["long"] is None  # kept up, over the ITL bound
    assert serving(first, "itl", own) == first  # every one meets the TTFT bound
    choice = choose(first, first, "best", own)
    assert choice.tail == "ttft" and choice.bound == pytest.approx(math.sqrt(1400.0 * 1950.0))
    assert record("w/d", 0.5, choice, first, "best", False).get(
        "ttft_p99_at_rate_best_ms") == 1400.0
    blind = choose(first, first, "best")  # no own bounds given: the long chunks' TTFT counts
    assert blind.bound == pytest.approx(math.sqrt(1000.0 * 1950.0))
    # a throughput-best over the ITL bound fails the rate whatever the TTFT bound
    over = {**first, "best": Tail(260.0, 234.0, 286.0, 1950.0)}
    assert bound(serving(over, "ttft", own), "best", 0.0, "ttft") is None


def test_a_unit_where_neither_tail_separates_keeps_the_workloads_bounds() -> None:
    """Neither tail's p99s lie apart by more than their noise: no bound is set, the record
    says so, and the unit keeps both of the workload's bounds."""
    first = _tails({"best": 97.45, "short": 97.39, "mid": 97.42, "long": 97.40},
                   {"best": 520.0, "short": 500.0, "mid": 510.0, "long": 505.0})
    choice = choose(first, _again(first, NOISY, NOISY), "best")
    assert choice.tail is None and choice.bound is None
    assert all(n is not None and n > 0 for n in choice.noise.values())
    b = record("w/d", 0.5, choice, first, "best", True)
    assert b.get("bound_tail") is None and b["itl_p99_ms"] is None
    assert b.get("ttft_p99_ms") is None
    from bench.regret.unit import _binding_line

    assert "bound: neither tail separates, the workload's own bounds" in _binding_line(b)
    # the throughput-best with the shortest tails, even without noise: no bound fails it alone
    ahead = {**first, "best": Tail(97.39, 87.0, 107.0, 300.0)}
    assert choose(ahead, ahead, "best").tail is None


def test_the_units_where_the_slo_changes_the_winner_are_counted_per_world() -> None:
    def bound_unit(workload: str, serves: bool, rate: float | None = 0.5,
                   at: dict[str, Tail | None] | None = None, reachable: bool = True,
                   world: str = "w/d") -> Detail:
        unit = _unit([_row(0.0, 1.0, 0.0, 1.0, 0)], [_row(0.0, 1.0, 0.0, 1.0, 0)])
        unit["workload"] = workload
        if at is None:
            at = {"t": Tail(90.0, 80.0, 99.0, TTFT), "s": Tail(40.0, 36.0, 45.0, TTFT)}
        # the same readings twice: no replay noise; the TTFTs all alike, so ITL is bound
        unit["binding"] = record(world, rate, choose(at, at, "t"), at, "t", serves, reachable)
        return unit

    # mixed: no config meets the SLO at any rate; long: none keeps up at the rate; batch:
    # none's capacity reading serves it under the bound
    units = [bound_unit("chat", False), bound_unit("code", True), bound_unit("math", False),
             bound_unit("mixed", False, None, {}, world="v/d"),
             bound_unit("long", False, 0.5, {"t": None}, world="v/d"),
             bound_unit("batch", False, reachable=False, world="v/d")]
    assert units[0]["binding"]["itl_p99_ms"] == pytest.approx(math.sqrt(40.0 * 90.0))
    assert units[0]["binding"].get("bound_tail") == "itl"
    assert units[0]["binding"].get("ttft_p99_ms") is None
    assert units[0]["binding"].get("itl_p99_interval_shortest_top_ms") == 45.0
    assert units[0]["binding"]["itl_p99_at_rate_throughput_best_ms"] == 90.0
    assert changed_winner(units) == ["w/d chat", "w/d math"]
    res = result({"w/d": units[:3], "v/d": units[3:]},
                 ["chat", "code", "math", "mixed", "long", "batch"], {"w/d": 1, "v/d": 1})
    assert res.get("binding_slo") == {"rule": RULE, "units": 6, "binding_units": 2,
                                      "which": ["w/d chat", "w/d math"],
                                      "out_of_reach": ["v/d mixed", "v/d long", "v/d batch"]}
    assert res["worlds"]["w/d"].get("binding_slo") == {
        "units": 3, "binding_units": 2, "which": ["w/d chat", "w/d math"], "out_of_reach": []}
    lines = binding_lines(res)
    assert lines[1].startswith("  w/d: the throughput-best config fails the SLO at the rate to "
                               "serve in 2 of 3 units (PASS at least half)")
    assert "in 0 of 3 units (FAIL at least half)" in lines[2]
    assert lines[2].endswith("SLO): v/d mixed, v/d long, v/d batch")
    assert "in 2 of 6 units (FAIL at least half)" in lines[3]
    plain = result({"w/d": [_unit([_row(0.0, 1.0, 0.0, 1.0, 0)],
                                  [_row(0.0, 1.0, 0.0, 1.0, 0)])]}, ["chat"], {"w/d": 1})
    assert "binding_slo" not in plain and binding_lines(plain) == []


def test_a_world_the_search_was_not_tuned_on_is_marked_scored_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    unit = _unit([_row(0.0, 1.0, 0.0, 1.0, 0)], [_row(0.0, 1.0, 0.0, 1.0, 0)])
    tuned = TUNED_ON[0]
    res = result({tuned: [unit], "new-node/dspark": [unit.copy()]},
                 ["chat"], {tuned: 1, "new-node/dspark": 1})
    assert res["worlds"][tuned]["tuned_on"] is True
    assert res["worlds"]["new-node/dspark"]["tuned_on"] is False
    assert res.get("tuned_on") == list(TUNED_ON)
    assert tuned_on_lines([tuned, "new-node/dspark"])[1].endswith(": new-node/dspark")
    held = held_out_worlds()[0].name
    res = result({held: [unit]}, ["chat"], {held: 1})
    assert res["worlds"][held].get("held_out") is True
    assert "held_out" not in result({tuned: [unit]}, ["chat"], {tuned: 1})["worlds"][tuned]
    # it was scored once and then tuned on (SPENT): in-sample now, listed with the tuned-on
    assert held in SPENT and res["worlds"][held]["tuned_on"] is True
    assert tuned_on_lines([tuned, held])[1].endswith(": none")
    # before it was spent, it was marked new to the search and held out
    monkeypatch.setattr(report, "TUNED_ON", tuple(w for w in TUNED_ON if w not in SPENT))
    assert tuned_on_lines([tuned, held])[1].endswith(f": {held} (held out)")


def test_a_run_stopped_at_guideds_gpu_hours_recommends_from_what_it_paid_for() -> None:
    """TPE's run reads a weak config, then the best: at a budget that pays for its first trial
    only it recommends the weak one; its GPU-hours to 1% are both trials'. autotune's own
    recommendation step picks."""
    from autotune.types import TrialConfig
    from bench.regret.unit import _economy

    weak, best = (TrialConfig(n, False, 32, 2048) for n in (1, 5))
    table = Table({weak: [reading(5.0)] * 2, best: [reading(10.0)] * 2})
    trials = [(weak, reading(5.0)), (best, reading(10.0))]
    one = (600 + 1800) / 3600 * 8  # a trial's GPU-hours, start included
    row = _row(0.0, 0.0, 0.0, 0.0, 0)
    _economy(row, table, trials, 2, budget=one * 1.5)
    assert row["trial_gpu_h"] == pytest.approx([one, one], abs=1e-6)
    assert row["gpu_h"] == pytest.approx(2 * one, abs=1e-6)
    assert row["regret_at_gpu_h"] == pytest.approx(0.5)
    assert row["gpu_h_to_1pct"] == pytest.approx(2 * one)
    _economy(row, table, trials, 2, budget=None)  # guided's own: its whole run
    assert row["regret_at_gpu_h"] == 0.0
    _economy(row, table, trials, 2, budget=one / 2)  # pays for nothing: no recommendation
    assert row["regret_at_gpu_h"] == 1.0
