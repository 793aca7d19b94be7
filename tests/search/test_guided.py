"""Guided search: best predicted first, optimistic pruning, epsilon stop, Searcher wiring."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from autotune.objective import Outcome
from autotune.policy import Policy, policy_from_mapping
from autotune.predict import Observation, Prediction
from autotune.search import Searcher, open_search
from autotune.search.guided import Guide, GuidedStrategy, capacity_hint, make_guide
from autotune.slo import MIN_SCALE
from autotune.types import PEAK_IN_FLIGHT, AcceptanceCounts, Request, TrialConfig

BASELINE = TrialConfig(7, False, 1024, 8192)


def requests(n: int = 100) -> list[Request]:
    return [Request(id=str(i), prompt_tokens=250 + (i % 9) * 60, output_tokens=150 + (i % 4) * 50,
                    arrival_s=i * 0.25, acceptance=(0.85, 0.8, 0.8, 0.75, 0.75, 0.7, 0.7, 0.7))
            for i in range(n)]


def make_policy(**over: Any) -> Policy:
    data: dict[str, Any] = {
        "name": "t",
        "serve": {"model": "moonshotai/Kimi-K2.6", "draft_model": "novita/kimi-k2.6-dspark",
                  "draft_block_size": 8},
        "hardware": {"gpu": "H200", "count": 8},
        "space": {"num_speculative_tokens": [1, 3, 5, 7],
                  "enable_adaptive_verification": [False],
                  "max_num_seqs": [8, 64, 256], "max_num_batched_tokens": [2048, 8192]},
        "objective": {"slo": {"ttft_p99_ms": 3000, "itl_p99_ms": 100}},
        "replay": {"warmup_requests": 4},
        "budget": {"trials": 8},
        "search": {"strategy": "guided", "epsilon": 0.005},
    }
    for k, v in over.items():
        data[k] = {**data.get(k, {}), **v} if isinstance(v, dict) else v
    return policy_from_mapping(data)


def summary(scale: float = 1.0) -> dict[str, Any]:
    counts = AcceptanceCounts(20000, 140000, 40000, (15000, 10000, 6000, 4000, 2500, 1500, 1000))
    return {"acceptance": counts.as_dict(), "load_scale": scale, "itl_p99_ms": 90.0,
            "ttft_p99_ms": 1500.0, "tpot_mean_ms": 25.0, "requests_per_s": 4.0,
            "output_tokens_per_s": 900.0}


#: a capacity reading that met the SLO at no rate down to the slowest it tried
MISSED_AT_EVERY_RATE = Outcome(0.0, {"itl_p99_ms": 50.0},
                               {"load_scale": 1 / 64, "capacity_met_slo": 0.0})


def met_below_target(value: float) -> Outcome:
    """A capacity reading that met the SLO at half the rate to serve, not at it."""
    return Outcome(value, {}, {"load_scale": 0.5, "capacity_met_slo": 1.0})


def guide(epsilon: float = 0.005) -> Guide:
    policy = make_policy()
    return make_guide(requests(), policy.space.configs(), policy, epsilon=epsilon)


def test_first_proposal_without_measurements_is_the_best_predicted() -> None:
    g = guide()
    ranked = g.rank()
    decision = g.propose()
    assert decision.config == ranked[0].config
    assert decision.incumbent is None


def test_proposals_can_beat_the_incumbent_and_never_repeat() -> None:
    g = guide()
    g.observe(BASELINE, Outcome(2.0, {}, summary()))
    seen: set[TrialConfig] = {BASELINE}
    for _ in range(4):
        d = g.propose(exclude=seen)
        if d.config is None:
            break
        preds = g.predictor.predict()
        assert d.config not in seen
        assert d.incumbent is not None and preds[d.config].high > d.incumbent
        # the choice has the largest expected improvement among the unpruned candidates
        assert d.remaining_gain >= 0.0
        seen.add(d.config)
        g.observe(d.config, Outcome(preds[d.config].value, {}, summary()))


def test_a_config_read_alike_to_a_measured_one_is_not_proposed() -> None:
    # the baseline (n=7, 1024 seqs, 8192 tokens) held at most 6 requests at once: at 8 or 64
    # seqs, window 7 would replay the same schedule; window 1's readings filled 64 slots
    policy = make_policy(space={"num_speculative_tokens": [1, 7], "max_num_seqs": [8, 64],
                                "max_num_batched_tokens": [8192]})
    g = make_guide(requests(), policy.space.configs(), policy, epsilon=0.0)
    g.observe(BASELINE, Outcome(2.0, {}, {**summary(), PEAK_IN_FLIGHT: 6.0}))
    seen: set[TrialConfig] = {BASELINE}
    while (d := g.propose(exclude=seen)).config is not None:
        seen.add(d.config)
        g.observe(d.config, Outcome(1.0, {}, {**summary(), PEAK_IN_FLIGHT: 70.0}))
    window_1 = {TrialConfig(1, False, n, 8192) for n in (8, 64)}
    assert seen == {BASELINE, *window_1} and "read alike" in d.reason


def test_stops_when_the_remaining_gain_is_below_epsilon() -> None:
    g = guide(epsilon=10.0)       # nothing can gain 1000% per trial
    g.observe(BASELINE, Outcome(2.0, {}, summary()))
    d = g.propose()
    assert d.config is None and "below epsilon" in d.reason
    assert guide(epsilon=0.0).propose().config is not None


class FixedForecast:
    """A tail forecast with fixed chances: per config, (at the rate to serve, at the slowest),
    or for the configs of ``capacity`` a log-normal capacity (median scale, sd of its log)."""

    def __init__(self, chances: dict[TrialConfig, tuple[float, float]],
                 capacity: dict[TrialConfig, tuple[float, float]]) -> None:
        self.chances, self.capacity = chances, capacity

    def predict(self, configs: list[TrialConfig], scales: list[float]) -> Any:
        from scipy.special import ndtr

        def met(c: TrialConfig, s: float) -> float:
            if c in self.capacity:
                median, sd = self.capacity[c]
                return float(ndtr(math.log(median / s) / sd))
            return self.chances[c][1 if s <= MIN_SCALE else 0]

        return SimpleNamespace(chance_met=[met(c, s) for c, s in zip(configs, scales,
                                                                      strict=True)])


class FixedPredictor:
    """Stands in for the predictor with fixed predictions and tail chances, to test the
    decision rule alone."""

    def __init__(self, preds: dict[TrialConfig, tuple[float, float]],
                 chances: dict[TrialConfig, tuple[float, float]] | None = None) -> None:
        self.configs = tuple(preds)
        self.preds = {c: Prediction(c, v, v / 2, hi, math.log(v), math.log(hi / v) / 1.645, 0.0)
                      for c, (v, hi) in preds.items()}
        self.chances = chances or {c: (1.0, 1.0) for c in preds}
        self.capacity: dict[TrialConfig, tuple[float, float]] = {}
        self.observations: list[Observation] = []
        self.slo = None  # feasibility as told (the decision rule alone)
        self.target = 1.0
        self.too_long = False
        self.workload = SimpleNamespace(find_capacity=True)
        self.spread = 1.0  # the predictions' own check (prequential.py): their spread as given

    @property
    def measured(self) -> list[Observation]:
        return [o for o in self.observations if o.value is not None]

    def observe(self, obs: Observation) -> None:
        self.observations.append(obs)

    def predict(self) -> dict[TrialConfig, Prediction]:
        return self.preds

    def tail_model(self) -> FixedForecast:
        return FixedForecast(self.chances, self.capacity)


def test_candidates_whose_optimistic_prediction_cannot_beat_the_incumbent_are_not_worth_a_trial(
        ) -> None:
    a, b, c = (TrialConfig(n, False, 64, 4096) for n in (1, 2, 3))
    fixed = FixedPredictor({a: (10.0, 12.0), b: (8.0, 9.0), c: (5.0, 6.0)})
    g = Guide(fixed, epsilon=0.005)  # type: ignore[arg-type]
    g.observe(BASELINE, Outcome(9.5, {}))
    d = g.propose()
    assert d.config == a and d.incumbent == 9.5
    g.observe(a, Outcome(13.0, {}))
    d = g.propose()
    assert d.config is None and "below epsilon" in d.reason and d.remaining_gain < 0.005


def test_the_chance_to_meet_the_slo_at_the_rate_to_serve_weighs_the_improvement() -> None:
    # b is predicted the best, but the tail model gives it a 2% chance to meet the SLO at the
    # rate to serve: a, nearly as good and sure to meet it, is read first
    a, b = (TrialConfig(n, False, 64, 4096) for n in (1, 2))
    fixed = FixedPredictor({a: (12.0, 14.0), b: (14.0, 17.0)}, {a: (0.95, 1.0), b: (0.02, 1.0)})
    g = Guide(fixed, epsilon=0.005)  # type: ignore[arg-type]
    g.observe(BASELINE, Outcome(10.0, {}))
    weighed = {c.config: c for c in g.candidates(list(fixed.preds.values()))[0]}
    assert weighed[b].chance == 0.02 and weighed[a].gain > weighed[b].gain
    assert g.propose().config == a


def test_a_config_the_tail_model_says_misses_at_every_rate_is_never_read() -> None:
    # nothing measured meets the SLO at any rate; c is predicted the best but its tail model
    # misses at the slowest rate too (no capacity): the search reads b, and once b misses and
    # nothing left has a chance, it stops and says the SLO is out of the replica's reach
    a, b, c = (TrialConfig(n, False, 64, 4096) for n in (1, 2, 3))
    fixed = FixedPredictor({a: (5.0, 6.0), b: (4.0, 5.0), c: (9.0, 12.0)},
                           {a: (0.0, 0.001), b: (0.0, 0.6), c: (0.0, 0.0)})
    g = Guide(fixed, epsilon=0.005)  # type: ignore[arg-type]
    g.observe(BASELINE, MISSED_AT_EVERY_RATE)
    d = g.propose()
    assert d.config == b and d.incumbent is None and "60% chance" in d.reason
    g.observe(b, MISSED_AT_EVERY_RATE)
    stop = g.propose()
    assert stop.config is None and "out of this replica's reach" in stop.reason


def test_readings_never_sustained_stop_the_search_without_calling_the_slo_out_of_reach() -> None:
    # the same search, but every reading stayed within the bounds and kept up in windows too
    # short for its requests' lifetimes: the stop says the window, not the SLO, is the cause
    a, b, c = (TrialConfig(n, False, 64, 4096) for n in (1, 2, 3))
    fixed = FixedPredictor({a: (5.0, 6.0), b: (4.0, 5.0), c: (9.0, 12.0)},
                           {a: (0.0, 0.0), b: (0.0, 0.6), c: (0.0, 0.0)})
    short = Outcome(0.03, {"itl_p99_ms": -5.0}, {"load_scale": 1 / 64, "capacity_met_slo": 0.0,
                                                  "capacity_sustained": 0.0, "kept_up": 1.0})
    g = Guide(fixed, epsilon=0.005)  # type: ignore[arg-type]
    g.observe(BASELINE, short)
    g.observe(b, short)
    stop = g.propose()
    assert stop.config is None and "was read at a sustained rate" in stop.reason
    assert "replay.window_s" in stop.reason and "out of this replica's reach" not in stop.reason
    # one reading that missed a bound is evidence the SLO may be out of reach
    g.observe(a, MISSED_AT_EVERY_RATE)
    assert "out of this replica's reach" in g.propose().reason


def test_a_rate_out_of_reach_searches_for_the_most_capacity() -> None:
    # no config measured serves the rate; b met the SLO at half of it (7.0: 14 per unit of
    # rate): the search ranks capacity, the smaller of what the throughput and the p99s allow.
    # c's throughput is predicted the highest, but the tail model puts its p99s' capacity at
    # 0.3x the rate (worth 4.2), below b's: a, whose p99s allow 0.9x, is read
    a, b, c = (TrialConfig(n, False, 64, 4096) for n in (1, 2, 3))
    fixed = FixedPredictor({a: (9.0, 11.0), b: (8.0, 12.0), c: (12.0, 14.0)})
    fixed.capacity = {a: (0.9, 0.2), c: (0.3, 0.2)}
    g = Guide(fixed, epsilon=0.005)  # type: ignore[arg-type]
    g.observe(BASELINE, Outcome(1.0, {"itl_p99_ms": 1.0}))  # met at no rate
    g.observe(b, met_below_target(7.0))
    d = g.propose()
    assert d.incumbent == 7.0 and "out of reach" in d.reason
    weighed = {w.config: w for w in g.candidates([fixed.preds[a], fixed.preds[c]])[0]}
    assert weighed[c].gain < 0.05 * weighed[a].gain
    assert d.config == a


def test_while_no_config_serves_the_rate_the_chance_one_does_is_worth_a_reading() -> None:
    # the baseline met the SLO at half the rate to serve (10.0). The tail model gives a's p99s
    # a 60% chance to be met at the rate: a 60% chance to turn an infeasible answer into a
    # feasible one, on top of its capacity gain; b, predicted the higher throughput, has no
    # chance there (nor any capacity above 1/64 of the rate): it is not read
    a, b = (TrialConfig(n, False, 64, 4096) for n in (1, 2))
    fixed = FixedPredictor({a: (12.0, 13.2), b: (15.0, 16.5)}, {a: (0.6, 1.0), b: (0.0, 1.0)})
    g = Guide(fixed, epsilon=0.005)  # type: ignore[arg-type]
    g.observe(BASELINE, met_below_target(10.0))
    weighed = {c.config: c for c in g.candidates(list(fixed.preds.values()))[0]}
    assert weighed[a].reach == 0.6 and weighed[b].reach == 0.0
    d = g.propose()
    gain = weighed[a].gain / 10.0
    assert d.config == a and d.remaining_gain == pytest.approx(0.6 + 0.4 * gain, rel=0.01)
    assert "looks for a config that serves it" in d.reason and "60% chance" in d.reason


def test_expected_improvement_is_weighed_by_the_predicted_cost_of_the_reading() -> None:
    # a's capacity is predicted to within 5%, b's within a factor of 3: b's capacity reading
    # takes more readings (a dearer trial), so b is read first only when its expected
    # improvement exceeds a's by more than its cost does
    a, b = (TrialConfig(n, False, 64, 4096) for n in (1, 2))
    fixed = FixedPredictor({a: (12.0, 14.0), b: (12.0, 14.0)})
    fixed.capacity = {a: (2.0, 0.05), b: (2.0, 1.1)}
    g = Guide(fixed, epsilon=0.005)  # type: ignore[arg-type]
    cost = {"cost_start_s": 600.0, "cost_replay_s": 420.0, "cost_replica_h": 0.28,
            "cost_gpu_h": 2.27, "capacity_replays": 7.0}
    g.observe(BASELINE, Outcome(10.0, {}, cost))
    picks = set()
    for shift in (-3.0, -2.5, -2.0, -1.5, -1.0, -0.5):
        for config, sd, mean in ((a, 0.05, math.log(12.0)), (b, 1.1, math.log(12.0) + shift)):
            fixed.preds[config] = replace(fixed.preds[config], log_sd=sd, log_mean=mean)
        weighed = {c.config: c for c in g.candidates(list(fixed.preds.values()))[0]}
        assert weighed[a].cost < weighed[b].cost
        hint = weighed[a].hint  # read off the tail model's chances at several rates
        assert hint is not None and abs(math.log(hint.scale / 2.0)) < 0.05 and hint.log_sd < 0.3
        d = g.propose()
        ratio = weighed[b].gain / weighed[a].gain
        assert d.config == (b if ratio > weighed[b].cost / weighed[a].cost else a)
        assert d.hint == weighed[d.config].hint
        picks.add(d.config)
    assert picks == {a, b}  # the shifts cross the cost ratio


def _miss_everywhere(config: TrialConfig, itl: float) -> Outcome:
    """A capacity reading that missed a p99 ITL bound at every rate it tried (1, 1/2 .. 1/64)."""
    summary: dict[str, Any] = {"load_scale": 1 / 64, "capacity_met_slo": 0.0,
                               "itl_p99_ms": itl, "ttft_p99_ms": 400.0}
    for i, scale in enumerate((1.0, 0.5, 0.25, 0.125, 1 / 16, 1 / 32, 1 / 64)):
        summary.update({f"replay{i}_scale": scale, f"replay{i}_itl_p99_ms": itl,
                        f"replay{i}_ttft_p99_ms": 400.0})
    return Outcome(0.5, {"itl_p99_ms": itl}, summary)


def test_a_config_measured_to_miss_lowers_its_neighbours_chances_more_than_others() -> None:
    # the real predictor and tail model: a config read to miss the p99 ITL bound at every rate
    # lowers every config's chance (the workload-wide offset), its neighbours' the most
    g = guide()
    configs = list(g.predictor.configs)
    measured = TrialConfig(5, False, 64, 8192)
    near, far = TrialConfig(5, False, 256, 8192), TrialConfig(1, False, 8, 2048)
    _, before = g.chances([near, far])
    g.observe(measured, _miss_everywhere(measured, 400.0))
    _, after = g.chances([near, far])
    assert after[0] < before[0] and after[1] < before[1]
    assert after[0] / before[0] < after[1] / before[1]
    assert measured in configs


def test_failed_and_infeasible_trials_are_not_incumbents() -> None:
    g = guide()
    g.observe(BASELINE, None)
    assert g.incumbent() is None
    g.observe(TrialConfig(1, False, 8, 2048), Outcome(50.0, {"itl_p99_ms": 5.0}, summary()))
    assert g.incumbent() is None
    assert g.propose().incumbent is None


def drive(s: Searcher, value: Any) -> list[tuple[TrialConfig, bool]]:
    seen = []
    while (sug := s.ask()) is not None:
        seen.append((sug.config, sug.is_baseline))
        v = value(sug.config)
        s.tell(sug, Outcome(v, {"itl_p99_ms": -1.0}, summary()))
    return seen


def test_searcher_asks_the_guide_after_the_baseline_and_stops_with_it(tmp_path: Path) -> None:
    policy = make_policy(budget={"trials": 30})
    g = make_guide(requests(), policy.space.configs(), policy)
    s = open_search(policy, "r", "w", f"sqlite:///{tmp_path}/o.db", seed=1,
                    strategy=GuidedStrategy(g))
    predicted = {c: p.value for c, p in g.predictor.predict().items()}
    seen = drive(s, lambda c: predicted.get(c, 1.0))
    assert seen[0] == (BASELINE, True)
    configs = [c for c, _ in seen]
    first = list(dict.fromkeys(configs))
    # a config runs twice only as the searcher's repeat of a narrow lead (values are the
    # predictions, some a few per cent apart), never as the guide's pick
    assert all(len(s.readings(c)) == 2 for c in configs if configs.count(c) > 1)
    assert len(configs) - len(first) <= 2
    assert len(seen) < 30 and s.done() and s.stop_reason       # stopped before the budget
    assert len(g.predictor.observations) == len(seen)           # every result fed back
    picks = [d.config for d in g.decisions if d.config is not None]
    assert first[1:] == picks


def test_a_reading_far_above_its_prediction_is_read_again_before_it_is_recommended(
        tmp_path: Path) -> None:
    # every config reads its prediction, except the guide's first pick, whose first reading
    # is a lucky replay at twice its prediction: it leads by far, so no narrow lead, yet one
    # reading that far above the model is not trusted
    policy = make_policy(budget={"trials": 6})
    g = make_guide(requests(), policy.space.configs(), policy)
    s = open_search(policy, "r", "w", f"sqlite:///{tmp_path}/o.db", seed=1,
                    strategy=GuidedStrategy(g))
    predicted = {c: p.value for c, p in g.predictor.predict().items()}
    seen = []
    while (sug := s.ask()) is not None:
        lucky = len(seen) == 1
        seen.append(sug)
        v = predicted.get(sug.config, 1.0) * (2.0 if lucky else 1.0)
        s.tell(sug, Outcome(v, {"itl_p99_ms": -1.0}, summary()))
    first_pick = seen[1].config
    repeats = [r for r in seen if r.is_repeat]
    assert [r.config for r in repeats if "surprise" in r.why] == [first_pick]
    assert "above its prediction" in repeats[0].why
    assert len(s.readings(first_pick)) == 2
    assert s.stop_reason


def test_guided_without_requests_falls_back_to_tpe_and_says_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    policy = make_policy(budget={"trials": 5})
    s = open_search(policy, "r", "w", f"sqlite:///{tmp_path}/o.db")
    assert s.strategy.kind == "tpe"
    assert "TPE searches instead" in caplog.text
    seen = drive(s, lambda c: float(c.num_speculative_tokens))
    assert len(seen) == 5 and seen[0][1]


@pytest.mark.slow
def test_guided_finds_a_near_best_config_on_the_simulator(tmp_path: Path) -> None:
    """End to end against the simulator (the test may use a backend; the guide may not)."""
    from autotune.backends import create_backend
    from autotune.objective import score_measurement
    from autotune.orchestrate.pool import run_trial

    policy = make_policy(budget={"trials": 12}, replay={"warmup_requests": 4,
                                                        "max_requests": 2000})
    reqs = requests(120)
    backend = create_backend("sim", policy.serve.spec(), policy.sim.model_dump(), 0)
    slo = policy.objective.slo.slo()
    cache: dict[TrialConfig, Outcome] = {}

    def measure(c: TrialConfig) -> tuple[Outcome, Any]:
        m = run_trial(backend, c, policy.replay.schedule(reqs, seed=1, slo=slo))
        out = score_measurement(m, "goodput", slo)
        cache[c] = out
        return out, m

    g = make_guide(reqs, policy.space.configs(), policy)
    s = open_search(policy, "r", "w", f"sqlite:///{tmp_path}/o.db", seed=0,
                    strategy=GuidedStrategy(g))
    while (sug := s.ask()) is not None:
        out, m = measure(sug.config)
        s.tell(sug, out, m)
    guided = [c for c in cache]
    best_guided = max(cache[c].value for c in guided if cache[c].feasible)
    everything = [measure(c)[0].value for c in policy.space.configs() if c not in cache]
    best = max([best_guided, *everything])
    assert len(guided) <= 12
    assert best_guided >= 0.95 * best
    assert g.predictor.calibration.ece_before is not None
    assert math.isfinite(g.predictor.model_error)


def test_a_replica_the_predictor_cannot_describe_falls_back_to_tpe_and_says_why(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    policy = make_policy(serve={"model": "acme/unknown-model"})
    s = open_search(policy, "r", "w", f"sqlite:///{tmp_path}/o.db", requests=requests())
    assert s.strategy.kind == "tpe"
    warning = " ".join(r.getMessage() for r in caplog.records)
    assert "cannot describe the replica: no config.json for 'acme/unknown-model'" in warning
    assert "TPE searches instead" in warning


def _policy_without_gpu() -> Policy:
    data = make_policy().model_dump(mode="json")
    data["hardware"] = {}
    return policy_from_mapping(data)


def test_the_gpu_kind_the_cluster_reports_replaces_unknown_hardware() -> None:
    # A policy without `hardware.gpu` is learned from the runs (wide priors, the window probe);
    # when the pool reports the replicas' GPUs (Ray's accelerator_type), the guide is rebuilt
    # on their published figures and keeps the runs it has seen.
    policy = _policy_without_gpu()
    search = open_search(policy, "r", "w", "sqlite:///:memory:", requests=requests())
    strategy = search.strategy
    assert isinstance(strategy, GuidedStrategy)
    assert not strategy.guide.predictor.facts.hardware.known
    sug = search.ask()
    assert sug is not None and sug.is_baseline
    search.tell(sug, Outcome(4.0, {"ttft_p99_ms": -1.0, "itl_p99_ms": -1.0}, summary()))

    note = strategy.use_hardware("H100")
    assert note is not None and "8 x H100" in note
    facts = strategy.guide.predictor.facts
    assert facts.hardware.known and facts.hardware.kind == "H100"
    assert [o.config for o in strategy.guide.predictor.observations] == [BASELINE]
    assert strategy.guide.incumbent() == 4.0  # the readings are kept too
    # Ray's names for the table's kinds are understood; a kind it lacks stays unknown
    assert "A100" in (strategy.use_hardware("A100-80G") or "")
    assert "does not describe" in (strategy.use_hardware("A100-40G") or "")


def test_the_policy_s_gpu_wins_over_what_the_cluster_reports() -> None:
    policy = make_policy()  # hardware: 8 x H200
    search = open_search(policy, "r", "w", "sqlite:///:memory:", requests=requests())
    assert isinstance(search.strategy, GuidedStrategy)
    assert search.strategy.use_hardware("A100") is None
    assert search.strategy.guide.predictor.facts.hardware.kind == "H200"


def test_the_tail_model_is_fitted_once_per_run_observed() -> None:
    g = guide()
    model = g.predictor.tail_model()
    assert g.predictor.tail_model() is model
    g.observe(BASELINE, Outcome(4.0, {}, summary()))
    assert g.predictor.tail_model() is not model


def test_an_improvement_smaller_than_a_reading_s_noise_is_worth_less_than_its_prediction_says(
        ) -> None:
    from autotune.predict.residual import GP_NOISE
    from autotune.search.guided import _expected_improvement

    def ei(median: float, sd: float) -> float:
        return _expected_improvement(Prediction(BASELINE, median, 0.0, 0.0, math.log(median),
                                                sd, 0.0), 10.0)

    def plain(median: float, sd: float) -> float:  # E[max(0, V - 10)], V lognormal
        from scipy.stats import norm
        d = (math.log(median) - math.log(10.0)) / sd
        return median * math.exp(sd * sd / 2) * norm.cdf(d + sd) - 10.0 * norm.cdf(d)

    # a prediction as narrow as one reading's noise: one reading reveals about half of it
    assert ei(9.8, GP_NOISE) < 0.5 * plain(9.8, GP_NOISE)
    # a wide prediction: one reading reveals nearly all of it
    assert ei(9.8, 0.3) == pytest.approx(plain(9.8, 0.3), rel=0.02)


def test_a_reading_as_noisy_as_every_reading_is_not_a_surprise() -> None:
    a = TrialConfig(3, False, 64, 4096)
    strategy = GuidedStrategy(guide())
    narrow = Prediction(a, 10.0, 10.0, 10.0, math.log(10.0), 0.001, 0.0)
    strategy._expected[a] = narrow
    assert strategy.surprise(a, Outcome(10.3, {})) is None      # 1.5 sd of one reading's noise
    assert strategy.surprise(a, Outcome(11.0, {})) is not None  # 4.8 sd


def test_a_capacity_the_tail_puts_below_the_throughput_holds_the_improvement_down() -> None:
    """A capacity reading credits the fastest rate where the replica keeps up *and* meets the
    p99s: what a reading will show is the smaller of the predictor's objective (throughput) and
    the tail model's capacity x the objective per unit of rate."""
    import numpy as np

    from autotune.search.guided import _expected_improvement, _revealed_sd

    p = Prediction(BASELINE, 9.0, 0.0, 0.0, math.log(9.0), 0.2, 0.0)
    alone = _expected_improvement(p, 5.0)
    # the p99s bind at a rate worth 2.7 (a prefill chunk's stall): nothing over 5.0 to find
    assert _expected_improvement(p, 5.0, (math.log(2.7), 0.05)) < 1e-6 < alone
    # they bind far above the throughput: the throughput's improvement
    assert _expected_improvement(p, 5.0, (math.log(60.0), 0.1)) == pytest.approx(alone,
                                                                                rel=1e-3)
    # a capacity known to a factor of 50 never adds to the upside
    assert _expected_improvement(p, 8.0, (math.log(64.0), 3.9)) <= _expected_improvement(p, 8.0)
    # near each other: E[max(0, min(V1, V2) - incumbent)], as a sample of the two says
    rng = np.random.default_rng(0)
    v1 = rng.normal(math.log(9.0), _revealed_sd(0.2), 400_000)
    v2 = rng.normal(math.log(10.0), _revealed_sd(0.3), 400_000)
    sampled = float(np.maximum(np.exp(np.minimum(v1, v2)) - 8.5, 0.0).mean())
    assert _expected_improvement(p, 8.5, (math.log(10.0), 0.3)) == pytest.approx(sampled,
                                                                                  rel=0.02)
    # with no incumbent, the mean of the smaller
    mean = float(np.exp(np.minimum(v1, v2)).mean())
    assert _expected_improvement(p, 0.0, (math.log(10.0), 0.3)) == pytest.approx(mean, rel=0.01)


def test_a_capacity_lies_at_the_fastest_rate_likely_met_though_the_slowest_may_not_settle(
) -> None:
    # bursty traffic: at the slowest rates a window holds one burst, which only drains; the
    # reading credits the fastest rate met, so the capacity is where the chance falls for good
    scales = [1 / 64, 1 / 16, 1 / 4, 1.0, 4.0]
    hint = capacity_hint(scales, [0.1, 0.9, 0.95, 0.2, 0.0])
    assert 1 / 4 < hint.scale < 1.0
    # a falling chance is read as before: it crosses 1/2 between 1/16 and 1/4
    hint = capacity_hint(scales, [0.99, 0.9, 0.1, 0.0, 0.0])
    assert 1 / 16 < hint.scale < 1 / 4


def test_a_run_whose_predictions_missed_says_its_spread_is_widened() -> None:
    """Readings three times what the predictions held widen the unread configs' spread
    (autotune/predict/prequential.py), and the guide's reasons say so; readings that land on
    their predictions leave it as the residual process has it."""

    def run(miss: float) -> tuple[float, str]:
        g = guide()
        g.observe(BASELINE, Outcome(2.0, {}, summary()))
        seen: set[TrialConfig] = {BASELINE}
        while (d := g.propose(exclude=seen)).config is not None and len(seen) < 4:
            seen.add(d.config)
            g.observe(d.config, Outcome(g.predictor.predict()[d.config].value * miss, {},
                                        summary()))
        return g.predictor.spread, d.reason

    spread, reason = run(1.0)
    assert spread == 1.0 and "widened" not in reason
    spread, reason = run(3.0)
    assert spread > 1.5 and f"widened {spread:.2f}x" in reason
