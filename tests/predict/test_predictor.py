"""The predictor: the replica model's physics, calibration and fitting.

Behaviour, not formulas: acceptance against drafts drawn one by one, what an observation reads
against a replica whose step time is known, orderings the physics implies, and how the fits
and residuals carry what the runs show (the step cost is tests/predict/test_step_cost.py)."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest

from autotune.predict import Observation, Prediction, Predictor, decode_stats
from autotune.predict.facts import kimi_h200_facts
from autotune.types import AcceptanceCounts, Measurement, Request, Slo, TrialConfig


def requests(n: int = 120, c: float = 0.85, prompt: int = 300, out: int = 200,
             gap: float | None = 0.2) -> list[Request]:
    return [Request(id=str(i), prompt_tokens=prompt + (i % 7) * 40,
                    output_tokens=out + (i % 5) * 30,
                    arrival_s=None if gap is None else i * gap,
                    acceptance=(c,) * 8) for i in range(n)]


def predictor(reqs: list[Request], configs: list[TrialConfig], **kw: object) -> Predictor:
    args: dict[str, object] = {"block": 8, "objective": "goodput", "slo": Slo(3000, 100),
                               "warmup": 4, "facts": kimi_h200_facts()}
    args.update(kw)
    return Predictor(reqs, configs, **args)  # type: ignore[arg-type]


def test_predictions_are_complete_and_consistent() -> None:
    configs = [TrialConfig(n, av, s, t) for n in (1, 4, 7) for av in (False, True)
               for s in (8, 64) for t in (2048, 8192)]
    preds = predictor(requests(), configs).predict()
    assert set(preds) == set(configs)
    for p in preds.values():
        assert 0 < p.low <= p.value <= p.high
        assert 0.0 <= p.risk <= 1.0
        assert p.log_sd > 0


def test_closed_loop_physics_window_gains_shrink_with_batch() -> None:
    """At one request in flight a wide window pays (seed table: n=7 beats n=3 at batch 1);
    under a large batch the MoE experts are all touched anyway and verifying is compute."""
    configs = [TrialConfig(n, False, 256, 16384) for n in (1, 3, 7)]

    def tokens_per_s(concurrency: int) -> dict[int, float]:
        p = predictor(requests(c=0.9, gap=None), configs, objective="output_tokens_per_s",
                      slo=Slo(None, None), mode="closed", concurrency=concurrency)
        out = p.model_outcomes()
        return {c.num_speculative_tokens: float(v) for c, v in zip(configs, out.value,
                                                                  strict=True)}

    single, busy = tokens_per_s(1), tokens_per_s(256)
    assert single[7] > single[3] > single[1]
    assert single[7] / single[1] > busy[7] / busy[1]


def test_closed_loop_under_slos_is_feasible_at_modest_concurrency() -> None:
    """Without arrival times a replay is closed-loop: requests enter as others leave, so the
    TTFT is a prompt's own prefill (plus its share of the queue), not the whole sample's."""
    configs = [TrialConfig(n, False, 64, 8192) for n in (1, 4)]
    p = predictor(requests(gap=None), configs, mode="closed", concurrency=16,
                  slo=Slo(3000, 100))
    out = p.model_outcomes()
    assert (out.ttft_p99_ms < 3000).all() and out.feasible.all()
    crowded = predictor(requests(gap=None), configs, mode="closed", concurrency=600,
                        slo=Slo(3000, 100)).model_outcomes()
    assert (crowded.ttft_p99_ms > out.ttft_p99_ms).all()


def test_configs_vllm_refuses_or_samples_that_cannot_fit_are_risky() -> None:
    bad = TrialConfig(3, False, 256, 128)           # max_num_batched_tokens < max_num_seqs
    good = TrialConfig(3, False, 64, 4096)
    preds = predictor(requests(), [bad, good]).predict()
    assert preds[bad].risk >= 0.5 > preds[good].risk
    long = [*requests(), Request(id="huge", prompt_tokens=19000, output_tokens=2000,
                                 arrival_s=30.0)]
    risky = predictor(long, [good], max_model_len=20000).predict()
    assert risky[good].risk == 1.0


def drawn_drafts(conditional: list[float], drafts: int,
                 seed: int = 0) -> tuple[AcceptanceCounts, npt.NDArray[np.int64]]:
    """Drafts of a window of ``len(conditional)`` drawn one by one, position k accepted with
    probability ``conditional[k]`` when every earlier position was: the vLLM counters they
    make, and each draft's accepted length."""
    rng = np.random.default_rng(seed)
    accepted = np.ones(drafts, dtype=bool)
    per_pos, lengths = [], np.zeros(drafts, dtype=np.int64)
    for c in conditional:
        accepted &= rng.random(drafts) < c
        per_pos.append(int(accepted.sum()))
        lengths += accepted
    window = len(conditional)
    return AcceptanceCounts(drafts, drafts * window, int(lengths.sum()), tuple(per_pos)), lengths


def tokens_per_step(lengths: npt.NDArray[np.int64], window: int) -> float:
    """Tokens a verify step emits at ``window``, read off drawn drafts: the accepted prefix
    the window keeps, plus the target's own token."""
    return 1.0 + float(np.minimum(lengths, window).mean())


def test_measured_counters_recalibrate_the_acceptance_model() -> None:
    configs = [TrialConfig(n, False, 64, 4096) for n in (1, 3, 5, 7)]
    p = predictor(requests(c=0.85), configs)
    before = {c: p.predict()[c].detail["tokens_per_step"] for c in configs}
    # the head was overconfident: every position is accepted with probability 0.6, not 0.85
    counts, lengths = drawn_drafts([0.6] * 7, 20000)
    p.observe(Observation(TrialConfig(7, False, 1024, 8192), 5.0, True, scale=1.0,
                          itl_p99_ms=50.0, ttft_p99_ms=500.0, counts=counts))
    after = {c: p.predict()[c].detail["tokens_per_step"] for c in configs}
    assert p.calibration.method != "identity"
    assert p.calibration.ece_before is not None and p.calibration.ece_before > 0.2
    for n, c in zip((1, 3, 5, 7), configs, strict=True):
        assert after[c] == pytest.approx(tokens_per_step(lengths, n), rel=0.03)
        assert after[c] < before[c]


def test_a_measured_config_is_predicted_near_its_measurement() -> None:
    configs = [TrialConfig(n, False, s, 4096) for n in (2, 4, 6) for s in (32, 128)]
    p = predictor(requests(), configs)
    target = configs[3]
    model = p.predict()[target].value
    p.observe(Observation(target, model * 1.3, True, scale=1.0, itl_p99_ms=60.0,
                          ttft_p99_ms=900.0))
    pred = p.predict()[target]
    assert pred.value == pytest.approx(model * 1.3, rel=0.05)
    assert pred.log_sd < 0.06            # measured: what is left is measurement noise


def test_a_held_out_prediction_is_what_the_other_runs_alone_predict() -> None:
    configs = [TrialConfig(n, False, 64, 4096) for n in (1, 3, 5, 7)]
    counts, _ = drawn_drafts([0.6] * 7, 20000)
    runs = [Observation(configs[0], 4.0, True, scale=1.0, itl_p99_ms=40.0, ttft_p99_ms=400.0),
            Observation(configs[3], 6.0, True, scale=1.0, itl_p99_ms=60.0, ttft_p99_ms=500.0,
                        counts=counts)]
    both, other = predictor(requests(), configs), predictor(requests(), configs)
    for run in runs:
        both.observe(run)
    other.observe(runs[0])
    before = both.predict()[configs[3]]
    held = both.held_out(configs[3])  # its own run (and its counters) left out
    assert held == other.predict()[configs[3]]
    assert held.value != pytest.approx(before.value, rel=0.05)
    assert both.predict()[configs[3]] == before  # the predictor itself is left as it was


def test_observation_reads_the_step_time_and_batch_of_a_known_replica() -> None:
    """A replica whose verify step takes 50 ms and emits 2.5 tokens (its counters: 150
    accepted over 100 drafts) serves two requests of 40 and 80 decode steps, one from 0.1 s,
    one from 5.2 s, in a 10 s window: the observation reads back its step time and the mean
    number of requests decoding, which the timeline gives."""
    step_s, emitted, duration = 0.05, 2.5, 10.0
    steps, first_token = np.array([40, 80]), np.array([0.1, 5.2])
    decode = steps * step_s
    m = Measurement(ttft_s=first_token, tpot_s=np.full(2, step_s / emitted),
                    e2e_s=first_token + decode,
                    output_tokens=(1 + steps * emitted).astype(np.int64),
                    ok=np.array([True, True]), itl_s=np.array([step_s]), duration_s=duration,
                    wall_time_s=1.0, acceptance=AcceptanceCounts(100, 300, 150, (80, 50, 20)))
    assert m.acceptance is not None and m.acceptance.mean_accepted_length == emitted
    clock = np.linspace(0.0, duration, 200001)
    decoding = sum((clock >= b) & (clock < b + d) for b, d in zip(first_token, decode,
                                                                  strict=True))
    config = TrialConfig(3, False, 64, 4096)
    obs = Observation.from_result(config, 2.0, True, {"load_scale": 1.5}, m)
    assert obs.step_s == pytest.approx(step_s)
    assert obs.batch == pytest.approx(float(np.mean(decoding)), rel=1e-3)
    assert obs.scale == 1.5 and obs.counts == m.acceptance
    stats = decode_stats(m)
    same = Observation.from_result(config, 2.0, True, {**stats, "acceptance":
                                                       m.acceptance.as_dict()})
    assert same.step_s == pytest.approx(obs.step_s) and same.batch == pytest.approx(obs.batch)
    failed = Observation.from_result(config, None, False, None)
    assert failed.value is None and not failed.feasible
    missed = Observation.from_result(config, 1.0, False, {"capacity_met_slo": 0.0})
    assert missed.margin_censored  # missed at every rate: the margin is an upper bound
    assert math.isfinite(obs.step_s or math.nan)


def test_uniform_grid_interpolation_matches_the_searched_one() -> None:
    from autotune.predict.numerics import interp_rows

    rng = np.random.default_rng(3)
    horizon = rng.uniform(0.5, 50.0, size=(6, 1))
    xp = horizon * np.linspace(0.0, 1.0, 96)[None, :]
    fp = np.cumsum(rng.uniform(0.0, 2.0, size=xp.shape), axis=1)
    x = rng.uniform(-5.0, 60.0, size=(6, 40))
    x[:, :5] = xp[:, 10:15]                  # exactly on knots
    x[0, 5], x[1, 5], x[2, 5] = np.nan, np.inf, -np.inf
    for extend in (False, True):
        searched = interp_rows(xp, fp, x, extend=extend)
        divided = interp_rows(xp, fp, x, extend=extend, uniform=True)
        np.testing.assert_allclose(divided, searched, rtol=1e-12, atol=1e-12)


def test_only_what_a_vllm_server_reports_reaches_the_predictor() -> None:
    """A backend's own extra readings (the simulator's mean step, batch, KV use) change no
    prediction: the observation reads a whitelist of server-observable fields."""
    configs = [TrialConfig(n, False, s, 8192) for n in (1, 3, 5) for s in (8, 64)]
    base = TrialConfig(7, False, 1024, 8192)
    counts = AcceptanceCounts(2000, 14000, 5000, (1500, 1000, 800, 600, 500, 350, 250))
    summary = {"acceptance": counts.as_dict(), "load_scale": 2.0, "capacity_met_slo": 1.0,
               "itl_p99_ms": 60.0, "ttft_p99_ms": 800.0, "decode_time_s": 300.0,
               "decode_tokens": 20000.0, "duration_s": 40.0}
    sim_extras = {"mean_step_ms": 1e6, "mean_batch_size": 1e6, "kv_peak_utilization": 0.99,
                  "steps": 3.0, "preemptions": 1e5, "out_of_order_arrivals": 7.0}
    preds = []
    for extra in ({}, sim_extras):
        p = predictor(requests(), configs)
        p.observe(Observation.from_result(base, 5.0, True, {**summary, **extra},
                                          slo=Slo(3000, 100), target=1.0))
        preds.append({c: (x.value, x.risk) for c, x in p.predict().items()})
    assert preds[0] == preds[1]
    assert (Observation.from_result(base, 5.0, True, {**summary, **sim_extras})
            == Observation.from_result(base, 5.0, True, summary))


def test_measured_misses_rule_out_their_neighbours() -> None:
    """Long prompts: configs with a small prefill budget miss the SLO at the sample's rate
    (the capacity reading finds no rate that meets it). After four such misses and one pass
    at 16384 tokens (10× the capacity the model expected), the predictor gives every
    small-budget config under a 10% chance, which the guided search does not run, and brings
    the pass's neighbours back into play."""
    configs = [TrialConfig(n, False, s, t) for n in (1, 3, 5) for s in (8, 64)
               for t in (4096, 8192, 16384)]
    p = predictor(requests(prompt=6000, out=150), configs, slo=Slo(3000, 100))
    miss = {"load_scale": 1 / 64, "capacity_met_slo": 0.0, "itl_p99_ms": 150.0,
            "ttft_p99_ms": 9000.0}
    ok = {"load_scale": 1.2, "capacity_met_slo": 1.0, "itl_p99_ms": 90.0, "ttft_p99_ms": 2500.0}
    missed = [TrialConfig(3, False, 64, 4096), TrialConfig(1, False, 8, 8192),
              TrialConfig(5, False, 8, 4096), TrialConfig(1, False, 64, 8192)]
    for config in missed:
        p.observe(Observation.from_result(config, 0.1, False, miss, slo=Slo(3000, 100)))
    p.observe(Observation.from_result(TrialConfig(3, False, 64, 16384), 2.0, True, ok,
                                      slo=Slo(3000, 100)))
    chance = {c: 1.0 - x.risk for c, x in p.predict().items()}
    small = [c for c in configs if c.max_num_batched_tokens <= 8192]
    assert max(chance[c] for c in small) < 0.10
    neighbours = [c for c in configs if c.max_num_batched_tokens == 16384
                  and c.max_num_seqs == 64]
    assert min(chance[c] for c in neighbours) > 0.10


def test_without_predictions_the_measured_counters_are_the_acceptance_model() -> None:
    """A sample with no head predictions: the baseline's counters at window 7 give the curve
    for every window up to 7 (not another model's published curve)."""
    reqs = [Request(id=str(i), prompt_tokens=300, output_tokens=200, arrival_s=i * 0.2)
            for i in range(80)]
    configs = [TrialConfig(n, False, 64, 8192) for n in (1, 3, 5)]
    p = predictor(reqs, configs)
    counts, lengths = drawn_drafts([0.5, 0.6, 0.66, 0.6, 0.66, 0.62, 0.6], 10000, seed=1)
    p.observe(Observation.from_result(TrialConfig(7, False, 1024, 8192), 2.0, True,
                                      {"acceptance": counts.as_dict(), "load_scale": 1.0,
                                       "capacity_met_slo": 1.0}))
    preds = p.predict()
    assert p.calibration.scheme == "no predictions: measured curve"
    for c in configs:
        n = c.num_speculative_tokens
        assert preds[c].detail["tokens_per_step"] == pytest.approx(tokens_per_step(lengths, n),
                                                                   rel=0.02)


def _run_off_by(k: float) -> tuple[Predictor, dict[TrialConfig, Prediction]]:
    """A predictor after one run read ``k`` times slower than the facts predict (step time,
    p99s; the objective k times lower), and its predictions before that run."""
    configs = [TrialConfig(n, False, s, t) for n in (1, 3) for s in (8, 64)
               for t in (2048, 8192)]
    p = predictor(requests(prompt=3000, out=40), configs)
    before = p.predict()
    at = TrialConfig(3, False, 64, 8192)
    b = before[at]
    p.observe(Observation(at, b.value / k, True, scale=b.detail["scale"],
                          step_s=k * b.detail["step_ms"] / 1000.0, batch=b.detail["batch"],
                          itl_p99_ms=k * b.detail["itl_p99_ms"],
                          ttft_p99_ms=k * b.detail["ttft_p99_ms"]))
    return p, before


def test_a_fit_far_from_the_facts_is_uncertain_where_no_run_pins_it() -> None:
    """A run 3x slower than the facts predict moves the fitted step cost and factors. Where
    the run pins a config (same batching, another window) the fitted reading is trusted and
    the interval narrows; at a prefill budget no run measured, the fitted and the facts'
    readings are both kept: the interval ends wider than before any run, which the Gaussian
    process on residuals alone can never do. A run that agrees with the facts narrows it."""
    p, before = _run_off_by(3.0)
    after = p.predict()
    assert any(p.cost.log_scale)
    near = TrialConfig(1, False, 64, 8192)
    far = TrialConfig(1, False, 64, 2048)
    assert after[near].log_sd < before[near].log_sd
    assert after[far].log_sd > 2 * before[far].log_sd
    agreeing, before = _run_off_by(1.0)
    assert agreeing.predict()[far].log_sd < before[far].log_sd


def test_unpinned_is_zero_at_a_run_and_grows_with_distance_in_prefill_budget() -> None:
    from autotune.predict.residual import unpinned

    configs = [TrialConfig(3, False, 64, 8192), TrialConfig(7, True, 8, 8192),
               TrialConfig(3, False, 64, 4096), TrialConfig(3, False, 64, 2048),
               TrialConfig(3, False, 64, 16384)]
    share = unpinned(configs, 8, [0])
    assert share[0] == 0.0
    assert share[1] < 0.05                      # another window and slot count, same budget
    assert 0.0 < share[2] < share[3] <= 1.0
    assert share[4] == pytest.approx(share[2])  # one doubling either way
    assert (unpinned(configs, 8, []) == 1.0).all()
    assert unpinned(configs, 8, [0, 3])[2] < share[2]  # runs on both sides pin the middle


def test_floors_come_from_uncapped_runs_for_higher_caps_only() -> None:
    """``max_num_seqs`` is a cap: a run whose mean decoding batch stayed far below it makes
    (almost) the same steps with a higher cap, so those configs may not be predicted much
    below it; a run that filled its slots, or another window or budget, says nothing."""
    from autotune.predict.residual import uncapped

    configs = [TrialConfig(n, False, s, t) for n in (1, 3) for s in (8, 32, 128)
               for t in (2048, 8192)]
    index = {c: i for i, c in enumerate(configs)}
    light, other = TrialConfig(1, False, 8, 8192), TrialConfig(1, False, 32, 8192)
    stand = dict(uncapped(configs, [(light, 2.0, 1.9), (other, 2.5, 3.0)]))
    # 32 was measured itself; 128 stands on the better of the two runs, at most 5% below it
    assert list(stand) == [index[TrialConfig(1, False, 128, 8192)]]
    floor = math.exp(next(iter(stand.values())))
    assert 0.95 * 2.5 <= floor < 2.5
    # a mean batch of 4 would fill 8 slots 5% of the time: the cap bound now and then
    assert uncapped(configs, [(light, 2.0, 4.0)]) == []


def test_runs_that_read_alike_across_the_cap_carry_their_reading_to_the_other_caps() -> None:
    """How far the model's error carries along ``max_num_seqs`` is learned from runs that
    differ only in it: where two caps read alike (batches below both), most of their reading
    carries to the third; where they read apart (a burst the smaller cap clipped), it stays
    uncertain. Two runs make a long lengthscale likelier, not certain: the prediction averages
    over the lengthscales by how well each explains them."""
    from autotune.predict.residual import fit_residual

    configs = [TrialConfig(1, False, s, 8192) for s in (8, 32, 128)]
    model = np.zeros(len(configs))
    alike = fit_residual(configs, model, 8, [(0, math.exp(0.3)), (1, math.exp(0.3))])
    apart = fit_residual(configs, model, 8, [(0, math.exp(0.3)), (1, math.exp(-0.1))])
    assert 0.2 < alike.log_mean[2] < 0.3
    # with the lengthscale fixed at 1.5 (log2 units) the two sds were 0.223 and 0.235; with the
    # likeliest lengthscale alone 0.3 was carried whole; averaged: 0.245, sds 0.181 and 0.220
    assert alike.log_sd[2] < 0.85 * apart.log_sd[2]


def test_a_budget_gain_read_at_one_window_carries_to_a_window_that_reads_alike() -> None:
    """How much of the model's error belongs to the batching alone, the same at every window,
    is learned from the runs: a 2048-token gain read at window 5, where window 3 read like
    window 5 at 8192 tokens, carries mostly to window 3; where windows 1 and 5 moved apart
    with the budget, window 3's stays uncertain."""
    from autotune.predict.residual import fit_residual

    configs = [TrialConfig(w, False, 128, t) for w in (1, 3, 5, 7) for t in (2048, 8192)]
    at = {(c.num_speculative_tokens, c.max_num_batched_tokens): i for i, c in enumerate(configs)}
    model = np.zeros(len(configs))

    def fit(readings: dict[tuple[int, int], float]) -> tuple[float, float]:
        res = fit_residual(configs, model, 7, [(at[k], math.exp(v)) for k, v in readings.items()])
        return float(res.log_mean[at[3, 2048]]), float(res.log_sd[at[3, 2048]])

    gain = {(5, 8192): 0.0, (5, 2048): 0.2}
    alike_mean, alike_sd = fit(gain | {(3, 8192): 0.0, (1, 8192): 0.0})
    _, apart_sd = fit(gain | {(1, 8192): 0.0, (1, 2048): -0.2})
    # with the window's lengthscale alone: 0.126 and sd 0.088 against 0.116; averaged over
    # the shares (and the other hyperparameters): 0.163 and sd 0.085 against 0.110
    assert 0.15 < alike_mean < 0.2
    assert alike_sd < 0.8 * apart_sd


def test_configs_where_the_model_predicts_a_tail_no_run_sits_in_are_marked_novel() -> None:
    """The model's error size learned where it says p99 ITL binds does not cover a config
    where it says the queue (p99 TTFT) does (Llama-70B on one MI300X: a queue-bound best read
    4.5 of the runs' error sds above its prediction); a run where it says TTFT binds covers
    every such config, whatever tail the run itself read."""
    from autotune.predict.residual import binding_tail, novel_regime

    slo = Slo(3000, 100)  # p99 TTFT 3000 ms, p99 ITL 100 ms
    itl = np.array([80.0, 85.0, 50.0, 45.0, 40.0])
    ttft = np.array([300.0, 200.0, 2900.0, 2950.0, float("nan")])
    tails = binding_tail(itl, ttft, slo)
    assert tails[:4].tolist() == [0.0, 0.0, 1.0, 1.0] and np.isnan(tails[4])
    assert novel_regime(tails, [0, 1]).tolist() == [0.0, 0.0, 1.0, 1.0, 0.0]
    assert novel_regime(tails, [0, 2]).tolist() == [0.0] * 5
    assert novel_regime(tails, []).tolist() == [0.0] * 5   # no run: the prior covers all
    assert novel_regime(binding_tail(itl, ttft, Slo(None, 100)), [0]).tolist() == [0.0] * 5


def _predicted_after(points: list[tuple[float, float, float]]) -> npt.NDArray[np.float64]:
    """The log of the predicted value of twelve configs, after one run of window 3 whose
    capacity reading replayed at ``points`` (scale, mean step, batch); its capacity is the
    last point's scale."""
    config = TrialConfig(3, False, 64, 4096)
    others = [TrialConfig(n, False, s, t) for n in (1, 5, 7) for s in (8, 64)
              for t in (2048, 8192)]
    p = predictor(requests(), [config, *others])
    p.observe(Observation(config, 4.0, True, scale=points[-1][0], itl_p99_ms=60.0,
                          ttft_p99_ms=900.0, points=tuple(points)))
    predicted = p.predict()
    return np.log([predicted[c].value for c in others])


def test_a_crowd_of_readings_at_one_load_weighs_about_what_one_reading_there_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A capacity reading that pins its knee reads several rates a few per cent apart: the
    same batch, about the same step. A run whose knee was read five times predicts the other
    configs about as one whose knee was read once does; counted as five independent
    readings, the crowd pulls the step-cost fit towards its load at the other's expense."""
    import autotune.predict.predictor as predictor_module

    low = (0.25, 0.05, 2.0)
    knee = [(0.5 * (1 + 0.02 * i), 0.12, 8.0) for i in range(5)]
    once = _predicted_after([low, knee[0]])
    crowded = _predicted_after([low, *knee[1:], knee[0]])
    monkeypatch.setattr(predictor_module, "_SAME_LOAD", 0.0)
    apart = _predicted_after([low, *knee[1:], knee[0]])
    off, off_apart = np.abs(crowded - once).max(), np.abs(apart - once).max()
    assert off < off_apart / 2, (off, off_apart)
