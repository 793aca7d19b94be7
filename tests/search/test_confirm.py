"""A winner that passed the SLO by a hair, or leads by less than one reading can call, is read
again before it can be recommended, and a config is judged by all its readings."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from autotune.objective import Outcome, close_call, read_alike
from autotune.policy import policy_from_mapping
from autotune.recommend import Scored, select_best, slo_probability
from autotune.search import open_search
from autotune.slo import Slo
from autotune.types import PEAK_IN_FLIGHT, SEQS_REACHED, TOKENS_REACHED, TrialConfig

SLO = Slo(ttft_p99_ms=1000, itl_p99_ms=45)


def reading(itl_ms: float, value: float) -> Outcome:
    return Outcome(value, {"itl_p99_ms": itl_ms - 45.0, "failed_requests": 0.0},
                   {"itl_p99_ms": itl_ms, "ttft_p99_ms": 300.0})


def policy(trials: int, epsilon: float = 0.005) -> object:
    return policy_from_mapping({
        "name": "t", "serve": {"model": "m", "draft_model": "d", "draft_block_size": 8},
        "space": {"num_speculative_tokens": [1, 3], "max_num_seqs": [4, 16],
                  "max_num_batched_tokens": [4096]},
        "objective": {"slo": {"ttft_p99_ms": 1000, "itl_p99_ms": 45}},
        "replay": {"mode": "closed", "concurrency": 8},
        "budget": {"trials": trials}, "search": {"strategy": "grid", "epsilon": epsilon}})


def test_a_close_call_is_read_again_before_the_search_stops(tmp_path: Path) -> None:
    # ITL 42 ms against a 45 ms bound: a margin of 7%, so one reading is not trusted
    itl = {1: 42.0, 3: 30.0}
    value = {4: 1.0, 16: 3.0}
    s = open_search(policy(8), "r", "w", f"sqlite:///{tmp_path}/s.db")  # type: ignore[arg-type]
    seen = []
    while (sug := s.ask()) is not None:
        c = sug.config
        out = reading(itl.get(c.num_speculative_tokens, 30.0), value.get(c.max_num_seqs, 0.5)
                      + (0.5 if c.num_speculative_tokens == 1 else 0.0))
        seen.append((c, sug.is_repeat))
        s.tell(sug, out)
    winner = TrialConfig(1, False, 16, 4096)
    repeats = [c for c, again in seen if again]
    assert repeats == [winner]
    assert len(s.readings(winner)) == 2
    assert len(seen) == 6  # baseline + 4 configs + the repeat, within the budget of 8


def test_the_last_trial_of_the_budget_confirms_the_winner(tmp_path: Path) -> None:
    s = open_search(policy(3), "r", "w", f"sqlite:///{tmp_path}/s.db")  # type: ignore[arg-type]
    seen = []
    while (sug := s.ask()) is not None:
        seen.append(sug)
        s.tell(sug, reading(43.0 if not sug.is_baseline else 80.0, 2.0))
    assert len(seen) == 3 and seen[-1].is_repeat and seen[-1].config == seen[1].config
    assert s.stop_reason == "budget of 3 trials spent"


def test_a_narrow_lead_is_read_again_and_the_new_leader_too(tmp_path: Path) -> None:
    # every config meets the SLO by far (the baseline, outside the space, reads 0.5); (1, 16)
    # leads (3, 16) by 1% on one reading each: with one reading's noise at the prior's 2%, a
    # second reading is worth 0.20%, above this policy's epsilon of 0.1%. It reads 2.95 then:
    # (3, 16) leads the mean 2.99 by 0.3% on one reading, worth 0.39% at the 1.95% noise the
    # run now measures, and is read again too
    first = {(1, 16): 3.03, (3, 16): 3.0, (1, 4): 1.0, (3, 4): 1.2}
    second = {(1, 16): 2.95, (3, 16): 3.02}
    s = open_search(policy(8, epsilon=0.001), "r", "w",  # type: ignore[arg-type]
                    f"sqlite:///{tmp_path}/s.db")
    seen = []
    while (sug := s.ask()) is not None:
        key = (sug.config.num_speculative_tokens, sug.config.max_num_seqs)
        seen.append(sug)
        s.tell(sug, reading(30.0, (second if sug.is_repeat else first).get(key, 0.5)))
    repeats = [(r.config.num_speculative_tokens, r.config.max_num_seqs) for r in seen
               if r.is_repeat]
    assert repeats == [(1, 16), (3, 16)]
    assert all("a narrow lead" in r.why for r in seen if r.is_repeat)
    assert "1.0% ahead of n=3" in next(r.why for r in seen if r.is_repeat)
    assert "worth 0.20% (one reading's noise 2.0%)" in next(r.why for r in seen if r.is_repeat)
    assert len(seen) == 7 and s.stop_reason  # baseline + 4 configs + 2 repeats, within 8


@pytest.mark.parametrize(("epsilon", "read_again"), [(0.001, True), (0.005, False)])
def test_a_narrow_lead_is_read_again_only_when_a_second_reading_is_worth_a_trial(
        tmp_path: Path, epsilon: float, read_again: bool) -> None:
    # (1, 16) leads (3, 16) by 1% on one reading each: at one reading's noise of 2% a second
    # reading is expected to gain 0.20%, worth a trial under an epsilon of 0.1%, not of 0.5%
    # (the default), where the lead is taken on one reading
    value = {(1, 16): 3.03, (3, 16): 3.0, (1, 4): 1.0, (3, 4): 1.2}
    s = open_search(policy(8, epsilon=epsilon), "r", "w",  # type: ignore[arg-type]
                    f"sqlite:///{tmp_path}/s.db")
    seen = []
    while (sug := s.ask()) is not None:
        seen.append(sug)
        s.tell(sug, reading(30.0, value.get((sug.config.num_speculative_tokens,
                                             sug.config.max_num_seqs), 0.5)))
    winner = TrialConfig(1, False, 16, 4096)
    assert [r.config for r in seen if r.is_repeat] == ([winner] if read_again else [])
    assert s.leader() == winner and len(s.readings(winner)) == 1 + read_again


def test_a_leader_that_keeps_its_lead_is_not_read_again(tmp_path: Path) -> None:
    # (1, 16) leads (3, 16) by 1.2% on one reading each (worth 0.15% against an epsilon of
    # 0.1%) and again on its second: the lead is taken there, without a second reading of the
    # runner-up (reading it again too, judged on python -m bench.regret, moved no world's
    # regret and cost vllm-cpu/eps002 two median runs)
    first = {(1, 16): 3.036, (3, 16): 3.0, (1, 4): 1.0, (3, 4): 1.2}
    second = {(1, 16): 3.036, (3, 16): 3.3}
    s = open_search(policy(8, epsilon=0.001), "r", "w",  # type: ignore[arg-type]
                    f"sqlite:///{tmp_path}/s.db")
    seen: list[Scored] = []
    while (sug := s.ask()) is not None:
        key = (sug.config.num_speculative_tokens, sug.config.max_num_seqs)
        out = reading(30.0, (second if sug.is_repeat else first).get(key, 0.5))
        seen.append(Scored(sug.number, sug.config, out, sug.is_baseline))
        s.tell(sug, out)
    repeats = [(c.config.num_speculative_tokens, c.config.max_num_seqs) for c in seen[5:]]
    assert repeats == [(1, 16)] and len(seen) == 6 and s.stop_reason
    best = select_best(seen, target=1.0, slo=SLO)
    assert best is not None and best.config == TrialConfig(1, False, 16, 4096)


@pytest.mark.parametrize(("peak", "read_again"), [(3.0, False), (4.0, False), (5.0, True),
                                                 (None, True)])
def test_a_narrow_lead_over_a_config_read_alike_is_not_read_again(
        tmp_path: Path, peak: float | None, read_again: bool) -> None:
    # (1, 16) leads (1, 4) by 1% (a second reading worth 0.20%, above an epsilon of 0.1%), the
    # others by far. Below 4 requests in flight in every reading neither cap bound: the two ran
    # the same schedule, their 1% is replay noise and there is no ranking to decide. At 5 the
    # cap of 4 held requests back (and with no count nothing says it did not): the lead is read
    # again.
    value = {(1, 16): 3.03, (1, 4): 3.0, (3, 16): 1.0, (3, 4): 1.2}
    s = open_search(policy(8, epsilon=0.001), "r", "w",  # type: ignore[arg-type]
                    f"sqlite:///{tmp_path}/s.db")
    seen = []
    while (sug := s.ask()) is not None:
        out = reading(30.0, value.get((sug.config.num_speculative_tokens,
                                       sug.config.max_num_seqs), 0.5))
        s.tell(sug, replace(out, summary={**out.summary, PEAK_IN_FLIGHT: peak}))
        seen.append(sug)
    repeats = [r.config for r in seen if r.is_repeat]
    assert repeats == ([TrialConfig(1, False, 16, 4096)] if read_again else [])
    assert len(seen) == 5 + read_again


def test_configs_read_alike_differ_only_in_a_cap_no_reading_reached() -> None:
    def at(peak: float | None) -> Outcome:
        return Outcome(1.0, {}, {PEAK_IN_FLIGHT: peak})

    a, b = TrialConfig(1, False, 16, 4096), TrialConfig(1, False, 4, 4096)
    assert read_alike(a, [at(4.0)], b, [at(2.0), at(3.0)])
    assert read_alike(b, (), a, [at(4.0)])  # a config not read yet is read alike too
    assert not read_alike(a, [at(5.0)], b, [at(2.0)])  # the cap of 4 held one back
    assert not read_alike(a, [at(2.0)], b, [at(2.0), None])  # a failed reading says nothing
    assert not read_alike(a, [at(None)], b, [at(2.0)])
    assert not read_alike(a, [at(1.0)], a, [at(1.0)])
    other = TrialConfig(3, False, 4, 4096)  # another window: another schedule
    assert not read_alike(a, [at(1.0)], other, [at(1.0)])


def test_the_schedulers_counts_decide_both_caps() -> None:
    # the scheduler's own counts (SEQS_REACHED, TOKENS_REACHED) are tighter than the client's
    # requests in flight: 40 in flight, at most 6 ever running, 1,800 tokens ever asked
    def at(seqs: float, tokens: float | None) -> Outcome:
        summary = {PEAK_IN_FLIGHT: 40.0, SEQS_REACHED: seqs}
        return Outcome(1.0, {}, summary if tokens is None else {**summary,
                                                                TOKENS_REACHED: tokens})

    a = TrialConfig(1, False, 32, 8192)
    assert read_alike(a, [at(6.0, 1800.0)], TrialConfig(1, False, 8, 8192), [at(6.0, 1800.0)])
    assert read_alike(TrialConfig(1, False, 8, 2048), (), a, [at(6.0, 1800.0)])
    assert not read_alike(TrialConfig(1, False, 8, 1024), (), a, [at(6.0, 1800.0)])
    assert not read_alike(TrialConfig(1, False, 4, 8192), (), a, [at(6.0, 1800.0)])
    # a backend that cannot count the tokens (vLLM) proves only the seqs cap unbound
    assert read_alike(TrialConfig(1, False, 8, 8192), (), a, [at(6.0, None)])
    assert not read_alike(TrialConfig(1, False, 32, 2048), (), a, [at(6.0, None)])


def test_a_clear_winner_is_not_read_again(tmp_path: Path) -> None:
    value = {(1, 16): 3.2, (3, 16): 3.0, (1, 4): 1.0, (3, 4): 1.2}  # 6.3% ahead
    s = open_search(policy(8), "r", "w", f"sqlite:///{tmp_path}/s.db")  # type: ignore[arg-type]
    seen = []
    while (sug := s.ask()) is not None:
        seen.append(sug)
        s.tell(sug, reading(30.0, value.get((sug.config.num_speculative_tokens,
                                             sug.config.max_num_seqs), 0.5)))
    assert not any(r.is_repeat for r in seen) and len(seen) == 5


def test_a_config_meets_the_slo_only_if_every_reading_does() -> None:
    config = TrialConfig(1, False, 16, 4096)
    other = TrialConfig(3, False, 4, 4096)
    readings = [Scored(0, config, reading(42.0, 3.0)), Scored(1, other, reading(30.0, 2.0)),
                Scored(2, config, reading(57.0, 3.2)), Scored(3, config, reading(42.0, 3.0))]
    best = select_best(readings, target=1.0, slo=SLO)
    assert best is not None and best.config == other  # 42, 57, 42: fails one time in three
    outcomes = [r.outcome for r in readings if r.config == config and r.outcome]
    three = slo_probability(outcomes, SLO, 1.0)
    assert three is not None and three < 0.5
    one = slo_probability([reading(42.0, 3.0)], SLO, 1.0)
    assert one is not None and 0.5 < one < 0.8  # a single reading 7% inside the bound
    two = slo_probability([reading(42.0, 3.0), reading(41.0, 3.1)], SLO, 1.0)
    assert two is not None and two > one
    assert close_call(reading(42.0, 3.0), SLO, 1.0)
    assert not close_call(reading(30.0, 3.0), SLO, 1.0)
    assert not close_call(reading(50.0, 3.0), SLO, 1.0)  # a miss, not a close call


def at_capacity(value: float) -> Outcome:
    """A capacity reading that met the SLO at a quarter of the rate to serve, reading ``value``."""
    return Outcome(value, {"itl_p99_ms": -15.0, "failed_requests": 0.0},
                   {"itl_p99_ms": 30.0, "ttft_p99_ms": 300.0, "load_scale": 0.25,
                    "capacity_met_slo": 1.0})


def test_a_narrow_lead_out_of_reach_of_the_rate_is_read_again(tmp_path: Path) -> None:
    # no config serves the rate to serve: the recommendation gives the most capacity, so the
    # leader is the one with the most, and one lucky reading of it is no more trusted than at
    # the rate. The baseline reads 5.40 first and 4.54 again; (3, 16) reads 5.33 on one reading
    # (1.3% behind, a second reading worth 0.14% against an epsilon of 0.1%): the baseline's
    # lead is read again. (3, 16) then leads by 7.2% on one reading, but the baseline's two
    # readings put one reading's noise at 8.8%: that lead is worth a second reading too (0.41%),
    # which keeps it, and (3, 16) is recommended.
    first = {(1, 16): 4.8, (3, 16): 5.33, (1, 4): 4.2, (3, 4): 4.6}
    s = open_search(policy(8, epsilon=0.001), "r", "w",  # type: ignore[arg-type]
                    f"sqlite:///{tmp_path}/s.db")
    seen: list[Scored] = []
    while (sug := s.ask()) is not None:
        c = sug.config
        key = (c.num_speculative_tokens, c.max_num_seqs)
        again = sum(t.config == c for t in seen)
        out = at_capacity((5.40, 4.54)[again] if key == (7, 1024) else first[key])
        seen.append(Scored(sug.number, c, out, sug.is_baseline))
        s.tell(sug, out)
    read = {t.config: sum(u.config == t.config for u in seen) for t in seen}
    assert read[seen[0].config] == 2 and read[TrialConfig(3, False, 16, 4096)] == 2
    assert sum(read.values()) == len(read) + 2 and seen[-1].config == TrialConfig(3, False, 16,
                                                                                   4096)
    assert s.leader() == TrialConfig(3, False, 16, 4096)
    best = select_best(seen, target=1.0, slo=SLO)
    assert best is not None and best.config == TrialConfig(3, False, 16, 4096)
