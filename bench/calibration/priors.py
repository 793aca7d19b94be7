"""Fit the simulator profiles' acceptance priors to the seed table (bench/calibration/seed.py).

Run: ``python -m bench.calibration.priors [--data ../shared/data] [--write]`` (``--write``
rewrites the priors in the profiles' YAML files under autotune/backends/sim/profiles/).

What is fixed and what is fitted (docs/simulator.md has the reasoning):

- the step-cost model (target and drafters) is fixed from public facts and stated assumptions;
- per model and drafter, the acceptance priors are fitted, with as many free parameters as
  published numbers: DSpark has (c1, slope) for LiveCodeBench, for SPEED-Bench Coding, and a
  shared (level, slope) for GSM8K/MATH-500/AIME/HumanEval whose relative offsets are fixed
  (:data:`GROUP_OFFSETS`) — 6 parameters for 6 numbers; Eagle3-MLA has (c1, slope) for
  LiveCodeBench and one (level, slope) shift applied to every DSpark prior of the same model —
  4 parameters for 4 numbers.

The fit minimises an analytic batch-1 model (expected tokens per step by Gauss-Hermite over the
step noise, step times from the cost model), corrected by the ratio simulator/analytic from a
full simulator run of every cell, and iterates until the simulator itself matches.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from autotune.backends.sim import (
    BENCHMARKS,
    PER_BENCHMARK,
    POSITION_SD,
    AcceptancePrior,
    AnalyticCost,
    AnalyticStepCost,
    DrafterProfile,
    Profile,
    hashed_normals,
    load_profile,
    logit,
    request_keys,
    seed_benchmark_requests,
)
from autotune.types import Request
from bench.calibration.seed import DRAFTERS, MODELS, seed_targets
from bench.calibration.speedup import DEFAULT_SEEDS, baselines, speedup
from bench.paths import shared_data

FloatArray = npt.NDArray[np.float64]

#: Assumed logit offsets of the four benchmarks the seed only reports on average.
GROUP_OFFSETS = {"gsm8k": 0.30, "humaneval": 0.20, "math500": 0.0, "aime": -0.20}
WINDOWS = (3, 7)
_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(24)
_WEIGHTS = _WEIGHTS / _WEIGHTS.sum()


@dataclasses.dataclass(frozen=True)
class _Bench:
    prompt: FloatArray
    output: FloatArray
    #: per simulator seed, per request and position: request shift + position jitter (logits)
    noise: tuple[FloatArray, ...]


def _bench(reqs: Sequence[Request], request_sd: float, block: int,
           seeds: Sequence[int]) -> _Bench:
    noise = []
    for seed in seeds:
        keys = request_keys([r.id for r in reqs], seed)
        noise.append(request_sd * hashed_normals(keys, 1, salt=1)
                     + POSITION_SD * hashed_normals(keys, block, salt=2))
    return _Bench(np.array([r.prompt_tokens for r in reqs], dtype=np.float64),
                  np.array([r.output_tokens for r in reqs], dtype=np.float64), tuple(noise))


def _emitted(lines: FloatArray, step_sd: float, n: int) -> FloatArray:
    """Expected tokens per decode step per request: 1 + Σ_k E_z[Π_{j≤k} σ(L_j + z)]."""
    x = lines[:, None, :n] + step_sd * _NODES[None, :, None]
    surv = np.cumprod(1.0 / (1.0 + np.exp(-x)), axis=2).sum(axis=2)
    out: FloatArray = 1.0 + surv @ _WEIGHTS
    return out


def _time(cost: AnalyticStepCost, n: int, b: _Bench, emitted: FloatArray,
          cache: dict[tuple[int, int], tuple[FloatArray, FloatArray]] | None = None) -> float:
    """Seconds to serve benchmark ``b`` one request at a time at window ``n`` (0: no drafter).

    The prefill and per-step times do not depend on acceptance: ``cache`` keeps them per
    (benchmark, window) across calls."""
    key = (id(b), n)
    hit = cache.get(key) if cache is not None else None
    if hit is None:
        c = cost.cost
        prefill = np.array([cost.target(p, 0.0, p * p / 2.0) for p in b.prompt])
        step = c.fixed_s + cost.expert_seconds(1 + n) + c.token_s * (1 + n) \
            + c.kv_token_s * (b.prompt + b.output / 2.0)
        if n > 0:
            prefill = prefill + np.array([cost.draft_time(n, 1, int(p)) for p in b.prompt])
            step = step + cost.draft_time(n, 1, 0)
        hit = (prefill, step)
        if cache is not None:
            cache[key] = hit
    prefill, step = hit
    steps = (b.output - 1.0) / emitted + 0.5 * (1.0 - 1.0 / emitted)
    return float((prefill + steps * step).sum())


class AnalyticModel:
    """Analytic batch-1 speedups of one (profile, drafter) for candidate priors."""

    def __init__(self, profile: Profile, drafter: str,
                 benchmarks: Mapping[str, Sequence[Request]], seeds: Sequence[int]) -> None:
        self.profile = profile
        self.drafter = profile.drafters[drafter]
        if not isinstance(profile.cost, AnalyticCost):
            raise ValueError(f"profile {profile.name}: the seed-table fit needs cost.law analytic")
        self.cost = AnalyticStepCost(profile.cost, self.drafter)
        block = self.drafter.block_size
        sd = self.drafter.priors["default"].request_sd
        self.benches = {name: _bench(reqs, sd, block, seeds)
                        for name, reqs in benchmarks.items()}
        self._cache: dict[tuple[int, int], tuple[FloatArray, FloatArray]] = {}
        self.base = {name: _time(self.cost, 0, b, np.ones(b.output.size), self._cache)
                     for name, b in self.benches.items()}

    def speedup(self, name: str, prior: AcceptancePrior, n: int) -> float:
        b = self.benches[name]
        out = 0.0
        for noise in b.noise:
            lines = logit(prior.c1) + prior.slope * np.arange(noise.shape[1]) + noise
            out += self.base[name] / _time(self.cost, n, b,
                                           _emitted(lines, prior.step_sd, n), self._cache)
        return out / len(b.noise)


def with_prior(prior: AcceptancePrior, level: float, slope: float) -> AcceptancePrior:
    c1 = float(1.0 / (1.0 + np.exp(-level)))
    return prior.model_copy(update={"c1": c1, "slope": slope})


def shift_prior(prior: AcceptancePrior, d_level: float, d_slope: float) -> AcceptancePrior:
    return with_prior(prior, float(logit(prior.c1)) + d_level, prior.slope + d_slope)


def _solve(residuals: Callable[[FloatArray], FloatArray], x0: Sequence[float]) -> FloatArray:
    from scipy.optimize import least_squares

    fit = least_squares(residuals, np.asarray(x0, dtype=np.float64),
                        bounds=([-3.0, -1.5] * (len(x0) // 2), [6.0, 1.5] * (len(x0) // 2)))
    out: FloatArray = fit.x
    return out


def fit_drafter(profile: Profile, drafter: str, benchmarks: Mapping[str, Sequence[Request]],
                targets: Mapping[str, Mapping[str, float]],
                correction: Mapping[tuple[str, int], float],
                reference: DrafterProfile | None,
                seeds: Sequence[int] = DEFAULT_SEEDS) -> dict[str, AcceptancePrior]:
    """Priors for ``drafter`` whose (corrected) analytic speedups hit ``targets``."""
    model = AnalyticModel(profile, drafter, benchmarks, seeds)
    priors = dict(model.drafter.priors)

    def sp(name: str, prior: AcceptancePrior, n: int) -> float:
        return model.speedup(name, prior, n) * correction.get((name, n), 1.0)

    def pair(name: str) -> AcceptancePrior:
        goal = targets[name]
        start = priors[name]

        def res(x: FloatArray) -> FloatArray:
            p = with_prior(start, x[0], x[1])
            return np.array([sp(name, p, n) / goal[str(n)] - 1.0 for n in WINDOWS])

        x = _solve(res, [float(logit(start.c1)), start.slope])
        return with_prior(start, x[0], x[1])

    group = list(GROUP_OFFSETS)
    if reference is None:  # DSpark: own LCB and SPEED pairs, shared group level/slope
        for name in ("livecodebench", "speed-bench-coding"):
            priors[name] = pair(name)
        fixed = ["livecodebench", "speed-bench-coding"]

        def make(x: FloatArray) -> dict[str, AcceptancePrior]:
            return {b: with_prior(priors[b], x[0] + GROUP_OFFSETS[b], x[1]) for b in group}
        x0 = [float(logit(priors["math500"].c1)), priors["math500"].slope]
    else:  # Eagle3: own LCB pair, one shift of the reference drafter's priors elsewhere
        priors["livecodebench"] = pair("livecodebench")
        fixed = ["livecodebench"]
        shifted = [*group, "speed-bench-coding"]

        def make(x: FloatArray) -> dict[str, AcceptancePrior]:
            return {b: shift_prior(reference.priors[b], x[0], x[1]) for b in shifted}
        x0 = [0.0, 0.0]
    fixed_sp = {n: sum(sp(b, priors[b], n) for b in fixed) for n in WINDOWS}

    def res_avg(x: FloatArray) -> FloatArray:
        cand = make(x)
        out = []
        for n in WINDOWS:
            total = fixed_sp[n] + sum(sp(b, p, n) for b, p in cand.items()
                                      if b not in fixed)
            out.append(total / len(BENCHMARKS) / targets["avg"][str(n)] - 1.0)
        return np.array(out)

    x = _solve(res_avg, x0)
    priors.update(make(x))
    if reference is not None:  # chat/default priors move with the same shift
        for name in ("chat", "default"):
            priors[name] = shift_prior(reference.priors[name], x[0], x[1])
    return priors


def _replace_priors(profile: Profile, drafter: str,
                    priors: Mapping[str, AcceptancePrior]) -> Profile:
    drafters = dict(profile.drafters)
    drafters[drafter] = drafters[drafter].model_copy(update={"acceptance": dict(priors)})
    return profile.model_copy(update={"drafters": drafters})


def calibrate_profile(model: str, benchmarks: Mapping[str, Sequence[Request]], rounds: int = 4,
                      tolerance: float = 0.004, seeds: Sequence[int] = DEFAULT_SEEDS,
                      log: bool = True) -> Profile:
    """Fit both drafters of ``model`` to the seed table, iterating with the simulator."""
    profile = load_profile(MODELS[model])
    base = {b: baselines(profile, reqs, seeds) for b, reqs in benchmarks.items()}
    for drafter in DRAFTERS:
        targets = seed_targets()[model][drafter]
        correction: dict[tuple[str, int], float] = {}
        reference = profile.drafters["dspark"] if drafter != "dspark" else None
        for rnd in range(rounds):
            priors = fit_drafter(profile, drafter, benchmarks, targets, correction, reference,
                                 seeds)
            profile = _replace_priors(profile, drafter, priors)
            analytic = AnalyticModel(profile, drafter, benchmarks, seeds)
            worst = 0.0
            sim: dict[tuple[str, int], float] = {}
            for b, reqs in benchmarks.items():
                for n in WINDOWS:
                    sim[(b, n)] = speedup(profile, drafter, n, reqs, seeds, base[b])
                    correction[(b, n)] = sim[(b, n)] / analytic.speedup(b, priors[b], n)
            for cell, goal in targets.items():
                for n_text, value in goal.items():
                    n = int(n_text)
                    got = (sum(sim[(b, n)] for b in BENCHMARKS) / len(BENCHMARKS)
                           if cell == "avg" else sim[(cell, n)])
                    worst = max(worst, abs(got / value - 1.0))
            if log:
                print(f"{model}/{drafter} round {rnd + 1}: worst error {100 * worst:.2f}%",
                      file=sys.stderr)
            if worst <= tolerance:
                break
    return profile


_LINE = re.compile(r"^(\s+)([a-z0-9-]+): \{c1: [0-9.]+, slope: -?[0-9.]+\}(.*)$")


def write_priors(path: Path, profile: Profile) -> None:
    """Rewrite the ``name: {c1: .., slope: ..}`` lines of each drafter section in place."""
    lines = path.read_text(encoding="utf-8").splitlines()
    current = None
    for i, line in enumerate(lines):
        head = re.match(r"^  ([a-z0-9-]+):\s*$", line)
        if head:
            current = head.group(1)
            continue
        m = _LINE.match(line)
        if m and current is not None and current in profile.drafters:
            prior = profile.drafters[current].priors.get(m.group(2))
            if prior is not None:
                lines[i] = (f"{m.group(1)}{m.group(2)}: {{c1: {prior.c1:.4f}, "
                            f"slope: {prior.slope:.4f}}}{m.group(3)}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.calibration.priors",
                                     description="Fit sim acceptance priors to the seed table")
    parser.add_argument("--data", type=Path, default=shared_data(), help="shared data folder")
    parser.add_argument("--per-benchmark", type=int, default=PER_BENCHMARK)
    parser.add_argument("--write", action="store_true", help="update the profile YAML files")
    args = parser.parse_args(argv)
    benchmarks = seed_benchmark_requests(args.data, args.per_benchmark)
    for model, name in MODELS.items():
        profile = calibrate_profile(model, benchmarks)
        for drafter in DRAFTERS:
            for b in (*BENCHMARKS, "chat", "default"):
                p = profile.drafters[drafter].priors[b]
                print(f"{model} {drafter:10s} {b:20s} c1={p.c1:.4f} slope={p.slope:+.4f}")
        if args.write:
            write_priors(Path(load_profile(name).source), profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
