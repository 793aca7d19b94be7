"""The regret benchmark's held-out worlds: registered apart from the worlds the search was tuned
on, marked in the output, and each a simulated world that serves requests."""

from __future__ import annotations

from pathlib import Path

from bench.regret.worlds import (
    HELD_OUT_DIR,
    SPENT,
    TUNED_ON,
    held_out_worlds,
    sim_worlds,
    worlds,
)


def test_a_held_out_world_is_registered_apart_from_the_worlds_tuned_on() -> None:
    held = held_out_worlds()
    assert held and all(w.held_out and w.digest for w in held)
    names = {w.name for w in held}
    assert set(SPENT) <= names  # a spent one was a held-out world, and is now tuned on
    assert not (names - set(SPENT)) & set(TUNED_ON) and set(SPENT) <= set(TUNED_ON)
    assert not names & {w.name for w in sim_worlds()}  # a default run never scores it
    assert names <= {w.name for w in worlds()}          # listed with every world
    for w in held:
        assert w.policy is not None
        assert Path(w.policy["sim"]["profile"]).parent == HELD_OUT_DIR


def test_the_held_out_world_serves_requests_on_its_own_hardware() -> None:
    """The 8x H20 world's policy builds (the hardware is read from its profile: 8 GPUs of a kind
    the predictor's table lacks) and its replica serves a few requests, slower per token than
    the shipped Kimi-K2.6 DSpark world it is scaled from; the 8x B200 world's, faster."""
    from autotune.backends import create_backend
    from autotune.backends.sim import generate_requests
    from autotune.types import ReplaySchedule
    from bench.regret.settings import SMALL_SPACE
    from bench.regret.sim_reader import bench_policy
    from bench.regret.workloads import Workload

    requests = list(generate_requests(4, workload="chat", seed=0, prompt_tokens=[512] * 4,
                                      output_tokens=[64] * 4))
    wl = Workload("few", requests, (3000.0, 60.0), "four requests")
    reference = next(w for w in sim_worlds() if w.name == "kimi-k2.6@8xH200-tp8/dspark")
    held = {w.name: w for w in held_out_worlds()}
    h20, b200 = held["kimi-k2.6@8xH20-tp8/dspark"], held["kimi-k2.6@8xB200-tp8/dspark"]
    itl = {}
    for world in (h20, b200, reference):
        policy = bench_policy(world, wl, "grid", 12, SMALL_SPACE)
        assert policy.gpus_per_replica == 8
        backend = create_backend("sim", policy.serve.spec(), policy.sim.model_dump(), 0)
        replica = backend.start(policy.baseline.config())
        try:
            m = replica.replay(ReplaySchedule(requests, mode="closed", concurrency=1, seed=0))
        finally:
            replica.stop()
        assert m.ok.all()
        itl[world.name] = float(m.itl_s.mean())  # every token gap of the replay
    assert itl[h20.name] > itl[reference.name] > itl[b200.name]


def test_a_binding_unit_serves_its_rate_by_slower_arrivals_and_keys_its_readings_apart() -> None:
    """The rate to serve, × the sample's, slows (or speeds) the arrivals so autotune reads it as
    1 × the new sample's; the bound replaces the ITL bound alone; each step keys the readings
    anew, so none is shared with the unit under its own SLO."""
    from autotune.backends.sim import generate_requests
    from bench.regret.settings import SMALL_SPACE, Settings
    from bench.regret.sim_reader import SimReader
    from bench.regret.workloads import Workload

    requests = list(generate_requests(4, workload="chat", seed=0, prompt_tokens=[512] * 4,
                                      output_tokens=[64] * 4, arrivals=[0.0, 1.0, 2.0, 4.0]))
    world = next(w for w in sim_worlds() if w.name == "kimi-k2.6@8xH200-tp8/dspark")
    reader = SimReader(world, Workload("few", requests, (3000.0, 60.0), ""),
                       Settings(space=SMALL_SPACE))
    own = reader.key
    reader.serve_at(0.5)
    assert [r.arrival_s for r in reader.wl.requests] == [0.0, 2.0, 4.0, 8.0]
    assert reader.key == own + "|rate 0.5" and reader.rate == 0.5
    reader.hold_to("itl", 42.0)
    assert reader.wl.slo == (3000.0, 42.0)
    assert reader.policy.objective.slo.itl_p99_ms == 42.0
    assert reader.policy.objective.slo.ttft_p99_ms == 3000.0
    assert reader.key == own + "|rate 0.5|binding 42" and reader.bound
    # a TTFT bound replaces the TTFT bound alone, keyed apart from an ITL bound of that value
    other = SimReader(world, Workload("few", requests, (3000.0, 60.0), ""),
                      Settings(space=SMALL_SPACE))
    other.serve_at(0.5)
    other.hold_to("ttft", 900.0)
    assert other.wl.slo == (900.0, 60.0)
    assert other.policy.objective.slo.ttft_p99_ms == 900.0
    assert other.policy.objective.slo.itl_p99_ms == 60.0
    assert other.key == own + "|rate 0.5|binding ttft 900" and other.bound


def test_a_world_whose_requests_live_long_is_read_over_eight_of_their_lifetimes() -> None:
    """One CPU core: a request of 512 + 64 tokens alone lives ~8 s here, so the default 60 s
    window holds fewer than 8 of them and the world's readings get a window of 8 unloaded
    request times (keyed apart); on Kimi's H200 world it lives 0.6 s and the default stays."""
    from autotune.backends.sim import generate_requests
    from autotune.policy import load_policy
    from bench.regret.settings import SMALL_SPACE, Settings
    from bench.regret.sim_reader import (
        WINDOW_LIFETIMES,
        SimReader,
        reading_window,
        unloaded_latencies,
    )
    from bench.regret.workloads import Workload

    requests = list(generate_requests(4, workload="chat", seed=0, prompt_tokens=[512] * 4,
                                      output_tokens=[64] * 4, arrivals=[0.0, 1.0, 2.0, 4.0]))
    wl = Workload("few", requests, (3000.0, 60.0), "")
    default = load_policy().replay.window_s
    cpu = next(w for w in sim_worlds() if w.name.startswith("llama768x12@vllm-cpu-1thread"))
    gpu = next(w for w in sim_worlds() if w.name == "kimi-k2.6@8xH200-tp8/dspark")
    lifetime = unloaded_latencies(cpu, wl)[2]
    assert WINDOW_LIFETIMES * lifetime > default
    assert reading_window(cpu, wl) == WINDOW_LIFETIMES * lifetime
    assert WINDOW_LIFETIMES * unloaded_latencies(gpu, wl)[2] < default
    assert reading_window(gpu, wl) is None
    slow = SimReader(cpu, wl, Settings(space=SMALL_SPACE))
    assert slow.policy.replay.window_s == slow.window_s and slow.window_s is not None
    assert slow.window_s > default and slow.key.endswith(f"|window {slow.window_s:.6g}")
    fast = SimReader(gpu, wl, Settings(space=SMALL_SPACE))
    assert fast.policy.replay.window_s == default and "|window" not in fast.key
