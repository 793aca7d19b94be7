"""Guided search: best predicted first, optimistic pruning, epsilon stop, Searcher wiring."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from autotune.objective import Outcome
from autotune.policy import Policy, policy_from_mapping
from autotune.predict import Observation, Prediction
from autotune.search import Searcher, open_search
from autotune.search.guided import Guide, GuidedStrategy, make_guide
from autotune.slo import Slo
from autotune.types import AcceptanceCounts, Request, TrialConfig

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


def test_stops_when_the_remaining_gain_is_below_epsilon() -> None:
    g = guide(epsilon=10.0)       # nothing can gain 1000%
    g.observe(BASELINE, Outcome(2.0, {}, summary()))
    d = g.propose()
    assert d.config is None and "epsilon" in d.reason
    assert guide(epsilon=0.0).propose().config is not None


class FixedPredictor:
    """Stands in for the predictor with fixed predictions, to test the decision rule alone."""

    def __init__(self, preds: dict[TrialConfig, tuple[float, float]]) -> None:
        self.configs = tuple(preds)
        self.preds = {c: Prediction(c, v, v / 2, hi, math.log(v), math.log(hi / v) / 1.645, 0.0)
                      for c, (v, hi) in preds.items()}
        self.observations: list[Observation] = []
        self.slo = None  # feasibility as told (the decision rule alone)
        self.target = 1.0

    @property
    def measured(self) -> list[Observation]:
        return [o for o in self.observations if o.value is not None]

    def observe(self, obs: Observation) -> None:
        self.observations.append(obs)

    def predict(self) -> dict[TrialConfig, Prediction]:
        return self.preds


def test_candidates_whose_optimistic_prediction_cannot_beat_the_incumbent_are_skipped() -> None:
    a, b, c = (TrialConfig(n, False, 64, 4096) for n in (1, 2, 3))
    fixed = FixedPredictor({a: (10.0, 12.0), b: (8.0, 9.0), c: (5.0, 6.0)})
    g = Guide(fixed, epsilon=0.0)  # type: ignore[arg-type]
    g.observe(BASELINE, Outcome(9.5, {}))
    d = g.propose()
    assert d.config == a and d.pruned == 2 and d.incumbent == 9.5
    g.observe(a, Outcome(13.0, {}))
    d = g.propose()
    assert d.config is None and d.pruned == 2 and "optimistic" in d.reason


def _hopeless(preds: dict[TrialConfig, tuple[float, float]], risk: float) -> FixedPredictor:
    fixed = FixedPredictor(preds)
    fixed.preds = {c: replace(p, risk=risk) for c, p in fixed.preds.items()}
    return fixed


def test_nothing_left_can_meet_the_slo_once_a_config_meets_it() -> None:
    a, b = (TrialConfig(n, False, 64, 4096) for n in (1, 2))
    g = Guide(_hopeless({a: (20.0, 40.0), b: (15.0, 30.0)}, risk=0.95),  # type: ignore[arg-type]
              epsilon=0.0)
    g.observe(BASELINE, Outcome(9.5, {}))
    d = g.propose()
    assert d.config is None and d.reason.startswith("nothing left can meet the SLO")


def test_a_rate_out_of_reach_searches_for_the_most_capacity() -> None:
    # no config can serve the rate: the answer is infeasible whatever runs, and the config with
    # the most capacity (fewest replicas) is what is left to find; the chances do not rank
    a, b, c = (TrialConfig(n, False, 64, 4096) for n in (1, 2, 3))
    g = Guide(_hopeless({a: (5.0, 6.0), b: (8.0, 12.0), c: (2.0, 2.5)}, risk=0.99),
              epsilon=0.0)  # type: ignore[arg-type]
    g.observe(BASELINE, Outcome(1.0, {"itl_p99_ms": 1.0}))  # met at no rate
    d = g.propose()
    assert d.config == b and "out of reach" in d.reason and d.incumbent is None
    # b met the SLO at a lower rate than the one to serve: its value is the incumbent
    g.observe(b, met_below_target(7.0))
    d = g.propose()
    assert d.config is None and d.incumbent == 7.0
    assert "optimistic" in d.reason and "out of reach" in d.reason


def test_an_slo_met_at_no_rate_by_two_configs_stops_the_search() -> None:
    # The baseline and the best predicted config both missed the SLO at every rate tried and no
    # unmeasured config has a chance: nothing has capacity to rank, so the search stops and says
    # why instead of spending the budget on configs that will read zero.
    a, b, c, d = (TrialConfig(n, False, 64, 4096) for n in (1, 2, 3, 4))
    g = Guide(_hopeless({a: (5.0, 6.0), b: (8.0, 12.0), c: (2.0, 2.5), d: (1.5, 2.0)},
                        risk=0.99), epsilon=0.0)  # type: ignore[arg-type]
    g.observe(BASELINE, MISSED_AT_EVERY_RATE)
    assert g.propose().config == b  # a bad baseline? read the likeliest (all equal: best)
    g.observe(b, None)  # a failed trial says nothing of the SLO
    assert g.propose().config == a
    g.observe(a, MISSED_AT_EVERY_RATE)
    stop = g.propose()
    assert stop.config is None and stop.incumbent is None
    assert "out of this replica's reach" in stop.reason and "loosen the SLO" in stop.reason
    # a config that met the SLO at some lower rate gives capacity to rank: no stop
    g.observe(c, met_below_target(3.0))
    decision = g.propose()
    assert decision.incumbent == 3.0 and "out of this replica's reach" not in decision.reason
    assert decision.config is None and "optimistic" in decision.reason  # d's best case is 2.0


def test_before_calling_the_slo_out_of_reach_the_config_likeliest_to_meet_it_is_read() -> None:
    # The baseline missed at every rate; the config with the most predicted capacity (b) would
    # miss for the same reason, the one least likely to miss (c: a smaller prefill chunk, say)
    # is the test of whether the SLO is out of reach.
    a, b, c = (TrialConfig(n, False, 64, 4096) for n in (1, 2, 3))
    fixed = _hopeless({a: (5.0, 6.0), b: (8.0, 12.0), c: (2.0, 2.5)}, risk=0.99)
    fixed.preds[c] = replace(fixed.preds[c], risk=0.93)
    g = Guide(fixed, epsilon=0.0)  # type: ignore[arg-type]
    g.observe(BASELINE, MISSED_AT_EVERY_RATE)
    d = g.propose()
    assert d.config == c and "most likely to meet the SLO" in d.reason


def _miss_at_every_rate(g: Guide, *configs: TrialConfig) -> None:
    for c in configs:
        g.observe(c, MISSED_AT_EVERY_RATE)


def test_two_misses_at_every_rate_do_not_stop_the_search_while_a_config_may_meet_at_some_rate(
        ) -> None:
    # Every config misses the rate to serve (risk 0.99), but the model gives d a 40% chance of
    # meeting the SLO at some slower rate (Llama-3.1-8B on one H100, code prompts: window 1 with
    # 8192-token chunks met a 200 ms p99 ITL at light load after window 7 x 8192 and window
    # 1 x 2048 missed it at every rate): d is read before the SLO is called out of reach,
    # though b has the most predicted capacity.
    a, b, c, d = (TrialConfig(n, False, 64, 4096) for n in (1, 2, 3, 4))
    fixed = _hopeless({a: (5.0, 6.0), b: (8.0, 12.0), c: (2.0, 2.5), d: (1.5, 2.0)}, risk=0.99)
    fixed.preds = {k: replace(p, risk_any_rate=0.95) for k, p in fixed.preds.items()}
    fixed.preds[d] = replace(fixed.preds[d], risk_any_rate=0.6)
    g = Guide(fixed, epsilon=0.0)  # type: ignore[arg-type]
    _miss_at_every_rate(g, BASELINE, a)
    decision = g.propose()
    assert decision.config == d and "most likely to meet the SLO at some rate" in decision.reason
    _miss_at_every_rate(g, d)
    stop = g.propose()  # b and c are left, each with 5%
    assert stop.config is None and "out of this replica's reach" in stop.reason
    assert "chance to at any rate" in stop.reason


def test_each_prefill_chunk_s_shortest_steps_are_read_before_the_slo_is_called_out_of_reach(
        ) -> None:
    # The baseline (window 7 x 8192) and window 1 x 2048 missed at every rate, and the model
    # gives nothing a chance; window 1 x 8192 has the shortest steps at a chunk no window-1
    # config was read at, so it is read before giving up, and only then does the search stop.
    w1_2048, w1_8192, w3_8192 = (TrialConfig(n, False, 64, tok)
                                 for n, tok in ((1, 2048), (1, 8192), (3, 8192)))
    fixed = _hopeless({w1_2048: (5.0, 6.0), w3_8192: (8.0, 12.0), w1_8192: (2.0, 2.5)},
                      risk=0.99)
    g = Guide(fixed, epsilon=0.0)  # type: ignore[arg-type]
    _miss_at_every_rate(g, BASELINE, w1_2048)
    decision = g.propose()
    assert decision.config == w1_8192 and "shortest steps" in decision.reason
    _miss_at_every_rate(g, w1_8192)
    stop = g.propose()
    assert stop.config is None and "out of this replica's reach" in stop.reason


def _censored_miss(config: TrialConfig, batch: float, itl: float, ttft: float) -> Observation:
    """A reading that missed the SLO at every rate tried (its slowest replay kept)."""
    return Observation(config, 0.0, False, scale=1 / 64, batch=batch, itl_p99_ms=itl,
                       ttft_p99_ms=ttft, margin=-4.2, margin_censored=True)


def test_a_miss_at_light_load_rules_out_every_config_at_least_as_slow() -> None:
    measured = TrialConfig(3, False, 32, 8192)
    wider = TrialConfig(5, False, 128, 8192)           # longer step, same chunk: ruled out
    narrower = TrialConfig(1, False, 32, 8192)          # shorter step: may meet ITL
    smaller_chunk = TrialConfig(3, False, 32, 2048)     # shorter prefill beside each step
    one_slot = TrialConfig(5, False, 1, 8192)           # batches less than the light batch
    adaptive = TrialConfig(5, True, 128, 8192)          # another verification rule
    candidates = (wider, narrower, smaller_chunk, one_slot, adaptive)
    fixed = FixedPredictor({c: (10.0, 20.0) for c in candidates})
    fixed.slo = Slo(ttft_p99_ms=3000.0, itl_p99_ms=60.0)  # type: ignore[assignment]
    g = Guide(fixed, epsilon=0.0)  # type: ignore[arg-type]
    g.predictor.observe(_censored_miss(measured, batch=1.3, itl=75.0, ttft=400.0))
    assert "ITL" in (g.ruled_out(wider) or "")
    assert [c for c in candidates if g.ruled_out(c)] == [wider]
    seen = {measured}
    while (d := g.propose(exclude=seen)).config is not None:
        assert d.config != wider
        seen.add(d.config)
    # the same miss under load (a big batch) says nothing about the unloaded step time
    g2 = Guide(FixedPredictor({wider: (10.0, 20.0)}), epsilon=0.0)  # type: ignore[arg-type]
    g2.predictor.slo = fixed.slo
    g2.predictor.observe(_censored_miss(measured, batch=40.0, itl=75.0, ttft=400.0))
    assert g2.ruled_out(wider) is None and g2.propose().config == wider
    # a TTFT miss at light load rules out wider windows with smaller or equal prefill chunks
    g3 = Guide(FixedPredictor({smaller_chunk: (10.0, 20.0), narrower: (9.0, 18.0)}),
               epsilon=0.0)  # type: ignore[arg-type]
    g3.predictor.slo = fixed.slo
    g3.predictor.observe(_censored_miss(measured, batch=1.0, itl=20.0, ttft=5000.0))
    assert "TTFT" in (g3.ruled_out(smaller_chunk) or "") and g3.ruled_out(narrower) is None
    g3.predictor.observe(_censored_miss(narrower, batch=1.0, itl=20.0, ttft=5000.0))
    d = g3.propose()
    assert d.config is None and d.reason.startswith("nothing left can meet the SLO")
    # an ITL miss speaks only for its own chunk: a bigger one rides fewer, slower steps beside
    # a long prefill, which the p99 may leave out; a wider window at the same chunk is out
    g4 = Guide(FixedPredictor({wider: (10.0, 20.0), smaller_chunk: (9.0, 18.0)}),
               epsilon=0.0)  # type: ignore[arg-type]
    g4.predictor.slo = fixed.slo
    g4.predictor.observe(_censored_miss(TrialConfig(1, False, 32, 2048), batch=1.2, itl=75.0,
                                        ttft=400.0))
    assert g4.ruled_out(wider) is None and "ITL" in (g4.ruled_out(smaller_chunk) or "")


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


@pytest.mark.parametrize("gpu, probes", [("H200", False), ("TPU-v9", True)])
def test_on_hardware_not_in_the_table_the_second_run_is_the_smallest_window(
        gpu: str, probes: bool) -> None:
    # One window cannot split a step between the target's pass and the drafter's: on hardware
    # the facts describe, the guide trusts them; on hardware they do not, the second run is the
    # space's smallest window (the best-ranked config there), whatever the model ranks first.
    policy = make_policy(hardware={"gpu": gpu, "count": 8})
    g = make_guide(requests(), policy.space.configs(), policy)
    assert g.probe_windows is probes
    g.observe(BASELINE, Outcome(2.0, {}, summary()))
    d = g.propose(exclude={BASELINE})
    assert d.config is not None
    at_one = [p.config for p in g.rank() if p.config.num_speculative_tokens == 1]
    if probes:
        assert d.config == at_one[0] and "profiling the drafter" in d.reason
        # once two windows are measured, the model ranks again
        g.observe(d.config, Outcome(2.1, {}, summary()))
        assert "profiling" not in g.propose(exclude={BASELINE, d.config}).reason
    else:
        assert "profiling" not in d.reason


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
    unknown = strategy.guide.propose()
    assert unknown.reason.startswith("profiling the drafter")

    note = strategy.use_hardware("H100")
    assert note is not None and "8 x H100" in note
    facts = strategy.guide.predictor.facts
    assert facts.hardware.known and facts.hardware.kind == "H100"
    assert [o.config for o in strategy.guide.predictor.observations] == [BASELINE]
    assert strategy.guide.incumbent() == 4.0  # the readings are kept too
    assert not strategy.guide.propose().reason.startswith("profiling the drafter")
    # Ray's names for the table's kinds are understood; a kind it lacks stays unknown
    assert "A100" in (strategy.use_hardware("A100-80G") or "")
    assert "does not describe" in (strategy.use_hardware("A100-40G") or "")


def test_the_policy_s_gpu_wins_over_what_the_cluster_reports() -> None:
    policy = make_policy()  # hardware: 8 x H200
    search = open_search(policy, "r", "w", "sqlite:///:memory:", requests=requests())
    assert isinstance(search.strategy, GuidedStrategy)
    assert search.strategy.use_hardware("A100") is None
    assert search.strategy.guide.predictor.facts.hardware.kind == "H200"
