"""Acceptance-guided search: read the config whose expected improvement per GPU-hour is
highest, until none is worth its cost.

The loop, per workload, after the baseline trial (which doubles as the profiling run: its
acceptance counters calibrate the head, its step times and p99s fit the cost model):

1. the predictor scores every unmeasured config: its objective as a log-normal prediction
   (:class:`~autotune.predict.Prediction`), and the tail model
   (:meth:`~autotune.predict.Predictor.tail_model`, calibrated on every reading of every rate
   the runs made) the chance a reading meets the SLO at the rate to serve and at the slowest
   rate a capacity reading tries (the chance it has any capacity at all);
2. each candidate's expected improvement over the incumbent is E[max(0, V - incumbent)] times
   the chance it meets the SLO by the incumbent's standard (:meth:`Guide.incumbent`): at the
   rate to serve when a measured config serves it, else at some rate (the rate is out of reach
   of every config measured: what is left to find is a config that serves it, with the chance
   the tail model gives, else the most capacity, the fewest replicas:
   :meth:`Candidate.relative`). With a capacity reading, V is the smaller of the
   predictor's objective and the objective at the tail model's capacity, and the chance lies
   inside it (:func:`_expected_improvement`);
3. its cost is predicted in GPU-hours (:meth:`Guide.cost`: a server start and the replay of a
   capacity reading that starts at the predicted capacity, :class:`CapacityHint`), and the
   candidate with the highest expected improvement per GPU-hour is read next, with that hint;
4. the one stop rule: the search stops when that best expected improvement, relative to the
   incumbent (before any config met the SLO, to the value it would find) and per trial of the
   cost the search has seen, is below the policy's ``search.epsilon`` — which covers
   candidates that cannot beat the incumbent, configs the tail model says miss the SLO at
   every rate, and an SLO out of the replica's reach at any rate.

:class:`Guide` holds that state for one workload; :class:`GuidedStrategy` is the ``guided``
strategy of :mod:`autotune.search.strategy` built on it.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass

from autotune.acceptance import HeadCalibration
from autotune.cost import trial_cost
from autotune.objective import (
    Outcome,
    Standard,
    met_at_some_rate,
    rank_measured,
    read_alike,
    unsustained,
)
from autotune.policy import Policy
from autotune.predict import Observation, Prediction, Predictor
from autotune.predict.facts import Facts, UndescribedReplica, describe_replica
from autotune.predict.residual import GP_NOISE
from autotune.search.sampler import create_tpe
from autotune.search.strategy import Proposal, Strategy, StrategySetup
from autotune.slo import MAX_READINGS, MAX_SCALE, MIN_SCALE, predicted_readings
from autotune.types import CapacityHint, Measurement, Request, TrialConfig

__all__ = ["Candidate", "Guide", "GuideDecision", "GuidedStrategy", "create_guided",
           "make_guide", "objective_at_capacity", "policy_facts"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GuideDecision:
    """Why the guide proposed what it did (for logs and reports)."""

    config: TrialConfig | None
    reason: str
    incumbent: float | None
    #: the best candidate's expected improvement, relative, per trial of typical cost
    remaining_gain: float
    candidates: int
    hint: CapacityHint | None = None


@dataclass(frozen=True)
class Candidate:
    """An unmeasured config as the guide weighs it: its prediction, the chance it meets the
    SLO by the incumbent's standard, its expected improvement over the incumbent (objective
    units), its predicted cost (GPU-hours; 1 when no trial recorded one), the capacity
    reading's hint, and the chance it meets the SLO at the rate to serve (``reach``; the same
    as ``chance`` when that is the incumbent's standard)."""

    prediction: Prediction
    chance: float
    gain: float
    cost: float
    hint: CapacityHint | None
    reach: float = 0.0

    def relative(self, incumbent: float | None, standard: Standard) -> float:
        """The improvement it is expected to bring, relative to the incumbent's value: its
        gain over the incumbent; before any config met the SLO at any rate, its chance (of
        meeting it); when none serves the rate to serve, the chance it serves it (that turns
        the answer from out of reach to served, as the recommendation ranks them) plus, if it
        does not, its gain in capacity."""
        if incumbent is None:
            return self.chance
        gain = self.gain / incumbent
        if standard is Standard.AT_SOME_RATE:
            return self.reach + (1.0 - self.reach) * gain
        return gain

    @property
    def config(self) -> TrialConfig:
        return self.prediction.config


#: Worths of two candidates within this share of each other are a tie (:meth:`Guide.propose`).
_TIE = 1e-6
#: The one-sided 95% point of a normal: the optimistic end of a prediction.
_Z95 = 1.645


def _revealed_sd(log_sd: float) -> float:
    """The sd (log) of what one reading with noise :data:`~autotune.predict.residual.GP_NOISE`
    lets the search believe of a quantity predicted with ``log_sd``: s^2 / sqrt(s^2 + noise^2)
    (the one-step knowledge gradient), never wider than the prediction."""
    prior = max(log_sd, 1e-6)
    return max(prior * prior / math.hypot(prior, GP_NOISE), 1e-6)


def _expected_improvement(p: Prediction, incumbent: float,
                          capacity: tuple[float, float] | None = None) -> float:
    """E[max(0, V' - incumbent)] where V' is what one reading of the config will let the search
    believe of it: the posterior median of its value once a reading with noise
    :data:`~autotune.predict.residual.GP_NOISE` (log sd) is in. A reading reveals the config's
    value only up to its noise, and the recommendation is made from readings, so an
    improvement smaller than the noise is found only as often as a reading ranks it: V' is
    lognormal with the prediction's median and sd :func:`_revealed_sd`.

    With ``capacity`` (the log mean and sd of the objective at the capacity the tail model
    gives): a capacity reading credits the fastest rate at which the replica both keeps up and
    meets the SLO's p99s. The predictor's objective is the first (the throughput its replica
    model sustains), the tail model's capacity the second; where the p99s bind below the
    throughput (a prefill chunk's stall, a queue's wait), the objective at capacity is that
    rate's. V' is then the smaller of the two, taken as independent: E = the integral over
    t > incumbent of P(V1' > t) P(V2' > t) — never more than either alone gives."""
    from scipy.stats import norm

    mu, sd = p.log_mean, _revealed_sd(p.log_sd)
    if capacity is None:
        if incumbent <= 0:
            return math.exp(mu + sd * sd / 2.0)
        d = (mu - math.log(incumbent)) / sd
        gain = (math.exp(mu + sd * sd / 2.0) * float(norm.cdf(d + sd))
                - incumbent * float(norm.cdf(d)))
        return max(gain, 0.0)
    import numpy as np
    from scipy.integrate import trapezoid

    mu2, sd2 = capacity[0], _revealed_sd(capacity[1])
    lo = (math.log(incumbent) if incumbent > 0
          else min(mu - _SPAN * sd, mu2 - _SPAN * sd2))
    hi = min(mu + _SPAN * sd, mu2 + _SPAN * sd2)  # above it, one of the two is surely less
    if hi <= lo:
        return 0.0
    u = np.linspace(lo, hi, _POINTS)
    above = norm.sf((u - mu) / sd) * norm.sf((u - mu2) / sd2)
    gain = float(trapezoid(above * np.exp(u), u))
    # without an incumbent, E[V'] = the integral from 0: below lo both exceed t almost surely
    return gain + (math.exp(lo) if incumbent <= 0 else 0.0)


#: How many sds either side of a median :func:`_expected_improvement` integrates over, and at
#: how many points.
_SPAN, _POINTS = 8.0, 400


def objective_at_capacity(hint: CapacityHint, per_scale: float) -> tuple[float, float]:
    """The log mean and sd of the objective at the capacity ``hint`` gives, at ``per_scale``
    objective per unit of arrival scale (what the capacity readings measured)."""
    return math.log(per_scale * hint.scale), hint.log_sd


#: The rates (× the rate to serve) the tail model is asked about: the capacity reading's range
#: in steps of 4x; then :data:`_FINE` more inside the step where the chance crosses 1/2, so the
#: capacity's distribution is read at steps of 4^(1/5), 32% (a narrower one reads as that wide).
_RATES = tuple(4.0**k for k in range(-3, 4))
_FINE = 4
#: How many candidates at a time, those with the largest expected improvement, get the finer
#: reading, until the largest are all read finer (the others' cost and value are predicted from
#: the 4x steps, which overstate the sd of their capacity).
_REFINED = 3


def at_least(curve: Mapping[float, float]) -> dict[float, float]:
    """P(capacity >= s) at each rate s of ``curve`` (the chance a reading at each rate meets
    the SLO): a capacity reading credits the fastest rate it reads met, so the capacity is at
    least s when some rate from s up is met — the largest chance from s up. The chance itself
    need not fall with the rate: at the slowest rates a window holds few requests, and the
    drain of one long request can leave a reading there unsustained where faster ones settle
    (:mod:`autotune.predict.settle`); the reading, starting near the knee, never goes there."""
    out, top = {}, 0.0
    for s in sorted(curve, reverse=True):
        top = max(top, curve[s])
        out[s] = top
    return out


def capacity_hint(scales: Sequence[float], chances: Sequence[float]) -> CapacityHint:
    """Where the capacity lies, from the chance a reading meets the SLO at each of ``scales``
    (ascending): P(capacity >= s) (:func:`at_least`), so its median is where that crosses 1/2
    and the sd of its log half the distance between the crossings of 84% and 16%
    (interpolated in log rate; at the ends of ``scales`` when it does not cross)."""
    import numpy as np

    log_s = np.log(np.asarray(scales, dtype=np.float64))
    reach = at_least(dict(zip(scales, chances, strict=True)))
    met = np.asarray([reach[s] for s in scales], dtype=np.float64)

    def crossing(level: float) -> float:
        return float(np.interp(-level, -met - 1e-9 * np.arange(met.size), log_s))

    median = crossing(0.5)
    sd = (crossing(0.16) - crossing(0.84)) / 2.0
    return CapacityHint(math.exp(median), max(sd, 0.0))


class Guide:
    """The guided-search state of one workload: a predictor, its tail model and the stop rule
    (see the module doc)."""

    def __init__(self, predictor: Predictor, epsilon: float, *, gpus: int = 1,
                 max_replays: int = MAX_READINGS) -> None:
        self.predictor = predictor
        self.epsilon = epsilon
        #: GPUs per replica (a trial's GPU-hours are its replica-hours times these)
        self.gpus = gpus
        #: the most readings one capacity reading takes (its cost without a hint)
        self.max_replays = max_replays
        self.decisions: list[GuideDecision] = []
        #: every reading of every config measured (None: the trial failed), in the order told
        self.readings: dict[TrialConfig, list[Outcome | None]] = {}
        #: (server start s, replica s per reading) of every trial that recorded its cost
        self.costs: list[tuple[float, float]] = []

    # -- measurements -----------------------------------------------------------------------
    def observe(self, config: TrialConfig, outcome: Outcome | None,
                measurement: Measurement | None = None) -> None:
        """Feed one finished trial (``outcome`` None: it failed) back to the predictor."""
        self.readings.setdefault(config, []).append(outcome)
        p = self.predictor
        self.predictor.observe(Observation.from_result(
            config, outcome.value if outcome else None,
            outcome is not None and met_at_some_rate(outcome),
            outcome.summary if outcome else None, measurement, slo=p.slo, target=p.target))
        cost = trial_cost(outcome.summary) if outcome is not None else None
        replays = outcome.summary.get("capacity_replays", 1.0) if outcome is not None else 1.0
        if cost is not None and isinstance(replays, int | float) and replays >= 1:
            self.costs.append((cost.start_s, cost.replay_s / float(replays)))

    def incumbent(self) -> float | None:
        """The value of the best measured config (every reading met the SLO at the rate to
        serve), or None."""
        return self.best_value(Standard.AT_TARGET)

    def best_value(self, standard: Standard) -> float | None:
        """The value of the best measured config meeting ``standard``
        (:func:`~autotune.objective.rank_measured`); None when there is none or it is 0
        (improvement is measured relative to it)."""
        ranked = rank_measured(self.readings.items(), standard, self.predictor.target)
        return ranked[0].value if ranked and ranked[0].value > 0 else None

    # -- the model's view -------------------------------------------------------------------
    def rank(self) -> list[Prediction]:
        """Every candidate by predicted value × P(feasible), best first."""
        preds = self.predictor.predict()
        return sorted((preds[c] for c in self.predictor.configs),
                      key=lambda p: (-p.value * (1.0 - p.risk), p.config))

    def chances(self, configs: Sequence[TrialConfig]) -> tuple[list[float], list[float]]:
        """Per config, the tail model's chance that a reading meets the SLO at the rate to
        serve, and at the slowest rate a capacity reading tries (:data:`MIN_SCALE` of it: the
        chance of any capacity; without a capacity reading, the chance at the rate replayed)."""
        curves = [at_least(c) for c in self._curves(configs)]
        return [c[self.predictor.target] for c in curves], [c[min(c)] for c in curves]

    def _curves(self, configs: Sequence[TrialConfig]) -> list[dict[float, float]]:
        """Per config, the tail model's chance that a reading meets the SLO at each of
        :data:`_RATES` × the rate to serve (within the capacity reading's range), by rate; at
        the rate to serve alone without a capacity reading."""
        p = self.predictor
        rates = ([p.target] if not p.workload.find_capacity else
                 sorted({min(max(p.target * r, MIN_SCALE), MAX_SCALE) for r in _RATES}
                        | {p.target}))
        met = p.tail_model().predict([c for c in configs for _ in rates],
                                     [s for _ in configs for s in rates]).chance_met
        return [{s: float(met[k * len(rates) + j]) for j, s in enumerate(rates)}
                for k in range(len(configs))]

    def _refine(self, configs: Sequence[TrialConfig], curves: Sequence[dict[float, float]]
                ) -> None:
        """Add to each curve the chances at :data:`_FINE` rates inside the step of
        :data:`_RATES` where it crosses 1/2 (where the capacity lies)."""
        fine = []
        for curve in curves:
            lo = max([s for s in curve if curve[s] >= 0.5], default=min(curve))
            hi = min([s for s in curve if s > lo], default=lo)
            fine.append([lo * (hi / lo) ** (i / (_FINE + 1)) for i in range(1, _FINE + 1)])
        met = self.predictor.tail_model().predict(
            [c for c, points in zip(configs, fine, strict=True) for _ in points],
            [s for points in fine for s in points]).chance_met
        for k, points in enumerate(fine):
            curves[k].update({s: float(met[k * _FINE + i]) for i, s in enumerate(points)})

    def cost(self, hint: CapacityHint | None) -> float:
        """The predicted GPU-hours of a trial whose capacity reading starts at ``hint``: the
        mean server start of the trials so far and the readings that reading is predicted to
        take (the capacity reading's own prediction,
        :func:`~autotune.slo.predicted_readings`), each as long as the trials'
        mean reading; 1 before any trial recorded its cost."""
        if not self.costs:
            return 1.0
        start = sum(s for s, _ in self.costs) / len(self.costs)
        reading = sum(r for _, r in self.costs) / len(self.costs)
        replay = predicted_readings(hint.log_sd if hint else None, self.max_replays) * reading
        return (start + replay) / 3600.0 * self.gpus

    def candidates(self, unmeasured: Sequence[Prediction]) -> tuple[list[Candidate], float | None,
                                                                   Standard]:
        """Every unmeasured config weighed against the incumbent (module doc, steps 1-3); the
        incumbent's value (None: no config measured meets the SLO at any rate) and standard."""
        configs = [p.config for p in unmeasured]
        curves = self._curves(configs)
        capacity = self.predictor.workload.find_capacity
        best, standard = self.incumbent(), Standard.AT_TARGET
        if best is None and capacity:
            best, standard = self.best_value(Standard.AT_SOME_RATE), Standard.AT_SOME_RATE
        at = self.predictor.target if standard is Standard.AT_TARGET else MIN_SCALE

        def chance_at(curve: dict[float, float], rate: float) -> float:
            # P(capacity >= rate); a request longer than max_model_len fails everywhere
            if self.predictor.too_long:
                return 0.0
            reach = at_least(curve)
            return reach[min(reach, key=lambda s: abs(s - rate))]

        per_scale = self._per_scale() if capacity else None

        def weigh(p: Prediction, curve: dict[float, float]) -> Candidate:
            hint = (capacity_hint(sorted(curve), [curve[s] for s in sorted(curve)])
                    if capacity else None)
            chance, target = chance_at(curve, at), self.predictor.target
            if hint is None or per_scale is None or not hint.scale > 0:
                return Candidate(p, chance, chance * _expected_improvement(p, best or 0.0),
                                 self.cost(hint), hint, chance_at(curve, target))
            # the capacity the tail gives reaches the incumbent's only where the p99s are met
            # there: its chance is inside the improvement of the smaller of the two
            gain = _expected_improvement(p, best or 0.0, objective_at_capacity(hint, per_scale))
            return Candidate(p, chance, gain, self.cost(hint), hint, chance_at(curve, target))

        weighed = [weigh(p, c) for p, c in zip(unmeasured, curves, strict=True)]
        if not capacity:
            return weighed, best, standard
        # the capacity of the likeliest picks, read finer (their cost, hint and value), until
        # the likeliest are all read finer: the 4x steps overstate a capacity's sd, and with it
        # the improvement, so a pick weighed from them alone is not yet a pick
        refined: set[int] = set()
        while True:
            top = [k for k in sorted(range(len(configs)),
                                     key=lambda k: -weighed[k].relative(best, standard))
                   [:_REFINED] if k not in refined]
            if not top:
                return weighed, best, standard
            self._refine([configs[k] for k in top], [curves[k] for k in top])
            for k in top:
                weighed[k] = weigh(unmeasured[k], curves[k])
            refined.update(top)

    def _per_scale(self) -> float | None:
        """The objective per unit of arrival scale the capacity readings measured (the median
        over the readings that met the SLO at some rate: value / ``load_scale``), or None."""
        ratios = [o.value / float(o.summary["load_scale"])
                  for outs in self.readings.values() for o in outs
                  if o is not None and o.value > 0 and met_at_some_rate(o)
                  and isinstance(o.summary.get("load_scale"), int | float)
                  and float(o.summary["load_scale"]) > 0]
        return float(statistics.median(ratios)) if ratios else None

    # -- proposals --------------------------------------------------------------------------
    def propose(self, exclude: Iterable[TrialConfig] = ()) -> GuideDecision:
        """The next config to run (None: stop), never one of ``exclude`` (measured, running)
        nor one read alike to a measured config (:func:`~autotune.objective.read_alike`: its
        reading would repeat that config's)."""
        skip = set(exclude) | {o.config for o in self.predictor.observations}
        unmeasured = [p for p in self.rank() if p.config not in skip and not any(
            read_alike(p.config, (), c, outs) for c, outs in self.readings.items())]
        if not unmeasured:
            return self._note(None, "every candidate is measured, running or read alike to a "
                                    "measured config", self.incumbent(), 0.0, 0)
        weighed, best, standard = self.candidates(unmeasured)
        # relative to the incumbent; before any config met the SLO, to the value the
        # candidate would find (its gain is then chance x value: the relative gain is the chance)
        typical = sum(self.cost(c.hint) for c in weighed) / len(weighed)

        def worth(c: Candidate) -> float:
            return c.relative(best, standard) * typical / c.cost

        # worths equal to a millionth are a tie (a chance of 1 - 1e-11 against 1 - 2e-11 is
        # no reason to read a config predicted to be worth less): the higher value wins it
        top = max(worth(c) for c in weighed)
        choice = max((c for c in weighed if worth(c) >= top * (1.0 - _TIE)),
                     key=lambda c: (c.prediction.value, worth(c)))
        gain = worth(choice)
        context = self._context(weighed, best, standard)
        if self.predictor.spread > 1.0:
            context += (f" (the unread configs' spread is widened {self.predictor.spread:.2f}x: "
                        f"the predictions missed the first readings that tested them by more "
                        f"than they allowed)")
        if gain < self.epsilon:
            return self._note(None, f"the best expected improvement left, {gain:.2%} per trial "
                                    f"({choice.config.short()}: a {choice.chance:.0%} chance "
                                    f"to meet the SLO {standard.value}), is below epsilon "
                                    f"{self.epsilon:.2%}" + context, best, gain, len(weighed))
        reason = ("highest expected improvement per GPU-hour" if best is not None
                  else "most likely to find a config meeting the SLO")
        return self._note(choice.config, f"{reason} ({choice.chance:.0%} chance to meet the SLO "
                                         f"{standard.value})" + context, best, gain,
                          len(weighed), choice.hint)

    def _context(self, weighed: Sequence[Candidate], best: float | None,
                 standard: Standard) -> str:
        """What the incumbent's standard says of the result, for the reasons."""
        if standard is Standard.AT_TARGET:
            return ""
        likeliest = max((c.chance for c in weighed), default=0.0)
        if best is not None:
            reach = max((c.reach for c in weighed), default=0.0)
            return (f" (the rate to serve is out of reach of every config measured: the search "
                    f"looks for a config that serves it, the likeliest of the {len(weighed)} "
                    f"unmeasured with a {reach:.0%} chance, else for the most capacity)")
        read = [o for outs in self.readings.values() for o in outs if o is not None]
        measured = sum(1 for outs in self.readings.values() if any(o is not None for o in outs))
        if read and all(unsustained(o) for o in read):
            return (f" (none of the {measured} configs measured was read at a sustained rate: "
                    f"within the SLO's bounds, but in windows too short for their requests' "
                    f"lifetimes; the SLO is not shown out of reach: widen replay.window_s as "
                    f"the result says)")
        return (f" (none of the {measured} configs measured meets the SLO at any rate tried "
                f"and the likeliest of the {len(weighed)} unmeasured has a {likeliest:.0%} "
                f"chance to: if the search stops here, the SLO is out of this replica's "
                f"reach; loosen the SLO or change the space or hardware)")

    def _note(self, config: TrialConfig | None, reason: str, incumbent: float | None,
              remaining: float, candidates: int,
              hint: CapacityHint | None = None) -> GuideDecision:
        d = GuideDecision(config, reason, incumbent, remaining, candidates, hint)
        self.decisions.append(d)
        return d


def make_guide(requests: Sequence[Request], configs: Iterable[TrialConfig], policy: Policy,
               *, epsilon: float | None = None, facts: Facts | None = None) -> Guide:
    """A guide for one workload of a policy (its SLO, objective, replay, serve block, and the
    facts of its model, drafter and hardware: :func:`policy_facts`)."""
    replay = policy.replay
    facts = facts if facts is not None else policy_facts(policy)
    predictor = Predictor(
        requests, configs, block=policy.serve.draft_block_size,
        objective=policy.objective.maximize, slo=policy.objective.slo.slo(),
        warmup=replay.warmup_requests, mode=replay.mode, time_scale=replay.time_scale,
        concurrency=replay.concurrency, find_capacity=replay.find_capacity,
        max_model_len=policy.serve.max_model_len, window_s=replay.window_s,
        facts=facts)
    return Guide(predictor, policy.search.epsilon if epsilon is None else epsilon,
                 gpus=policy.gpus_per_replica)


def policy_facts(policy: Policy, gpu: str | None = None) -> Facts:
    """The predictor's facts for a policy's replica (raises UndescribedReplica); ``gpu``: the
    GPU kind the cluster reports, used where the policy names none."""
    serve, hw = policy.serve, policy.hardware
    return describe_replica(model=serve.model, draft_model=serve.draft_model,
                            method=serve.method, tensor_parallel=serve.tensor_parallel_size,
                            gpu=hw.gpu or gpu,
                            gpu_count=hw.count or max(serve.gpus_per_replica, 1))


class GuidedStrategy(Strategy):
    """The ``guided`` strategy: the guide's pick after every measurement, until it stops."""

    kind = "guided"

    def __init__(self, guide: Guide, setup: StrategySetup | None = None) -> None:
        self.guide = guide
        self.setup = setup
        #: what the predictor expected of each config when it was proposed
        self._expected: dict[TrialConfig, Prediction] = {}

    def propose(self, measured: Mapping[TrialConfig, Outcome | None],
                running: Set[TrialConfig]) -> Proposal:
        decision = self.guide.propose(exclude=set(measured) | set(running))
        if decision.config is not None:
            self._expected[decision.config] = self.guide.predictor.predict()[decision.config]
        return Proposal(decision.config, decision.reason, capacity_hint=decision.hint)

    def surprise(self, config: TrialConfig, outcome: Outcome) -> str | None:
        """A reading above the optimistic end (~95th percentile) of what a reading of the
        config was predicted to read when it was proposed: the prediction's spread and one
        reading's noise (:data:`~autotune.predict.residual.GP_NOISE`) both counted, so a
        reading is not a surprise for being as noisy as every reading is."""
        p = self._expected.get(config)
        if p is None or not p.value > 0:
            return None
        high = math.exp(p.log_mean + _Z95 * math.hypot(p.log_sd, GP_NOISE))
        if outcome.value <= high:
            return None
        return (f"a surprise: it read {outcome.value:.4g}, {outcome.value / p.value - 1:.0%} "
                f"above its prediction {p.value:.4g} (optimistic end {high:.4g})")

    def observe(self, config: TrialConfig, outcome: Outcome | None,
                measurement: Measurement | None) -> None:
        self.guide.observe(config, outcome, measurement)

    def calibration(self) -> HeadCalibration | None:
        cal = self.guide.predictor.calibration
        return cal if cal.ece_before is not None else None

    def use_hardware(self, gpu: str) -> str | None:
        """Rebuild the guide on ``gpu``'s facts when the policy names no GPU (the runs it has
        seen are kept); the note says what the step cost's priors now come from."""
        setup = self.setup
        if setup is None or setup.policy.hardware.gpu:
            return None
        try:
            facts = policy_facts(setup.policy, gpu)
        except UndescribedReplica:
            return None
        if not facts.hardware.known:
            return (f"the cluster reports {gpu} GPUs, which autotune's hardware table does not "
                    f"describe: the step cost is learned from the runs")
        old = self.guide
        self.guide = make_guide(setup.requests, setup.configs, setup.policy,
                                epsilon=old.epsilon, facts=facts)
        for obs in old.predictor.observations:
            self.guide.predictor.observe(obs)
        self.guide.readings = {c: list(r) for c, r in old.readings.items()}
        self.guide.costs = list(old.costs)
        return (f"the cluster reports {gpu} GPUs (the policy names none): the step cost's "
                f"priors are {facts.hardware.count} x {facts.hardware.kind}'s published figures")


def create_guided(setup: StrategySetup) -> Strategy:
    """The guided strategy for a workload; TPE (with a one-line warning saying why) when there
    are no requests to predict from or the replica cannot be described."""
    if not setup.requests:
        log.warning("search.strategy guided needs the workload's requests to predict from; "
                    "none were given, so TPE searches instead")
        return create_tpe(setup)
    try:
        facts = policy_facts(setup.policy)
    except UndescribedReplica as e:
        log.warning("search.strategy guided cannot describe the replica: %s; TPE searches "
                    "instead", e)
        return create_tpe(setup)
    for note in facts.notes:
        log.info("guided search: %s", note)
    return GuidedStrategy(make_guide(setup.requests, setup.configs, setup.policy,
                                     facts=facts), setup)
