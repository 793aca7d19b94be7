"""Acceptance-guided search: run only the configs the predictor says can still win.

The loop, per workload, after the baseline trial (which doubles as the profiling run: its
acceptance counters calibrate the head, its step times and p99s fit the cost model):

1. the predictor scores every candidate config (objective with an interval, and the chance it
   meets the SLO at the rate to serve); on hardware the facts do not describe, the second run
   is first the space's smallest window (:meth:`Guide._window_probe`);
2. a candidate whose chance of meeting the SLO is below :data:`MIN_CHANCE` given the evidence
   (every measured miss lowers its neighbours' chances), or that is at least as slow as a
   config that missed the SLO at every rate down to light load (:meth:`Guide.ruled_out`),
   is not run, nor one whose optimistic
   prediction (95th percentile) cannot beat the incumbent — the value of the best measured
   config (:func:`autotune.objective.rank_measured`: every reading met the SLO at the rate to
   serve, the mean of its readings);
3. among the rest, the one with the highest expected improvement over the incumbent (the best
   predicted config when none met the SLO yet) is run next;
4. each measurement updates the predictor (acceptance calibration, cost fit, residuals);
5. the search stops when the predicted remaining gain — the largest expected improvement
   left, relative to the incumbent — is below the policy's ``search.epsilon``, when nothing
   left can meet the SLO, or when the budget is spent.

When no config measured so far meets the SLO at the rate to serve and no candidate has the
chance to, the rate is out of reach of this replica: the result will be infeasible whatever is
run, and what is left to find is the config with the most capacity (the fewest replicas to
serve the rate). The search then ranks and stops on the predicted value alone, with the best
config measured at some rate as the incumbent, and its reasons say so.
When, in addition, no config measured meets the SLO at any rate tried (there is no capacity
to rank), the search reads the config most likely to meet it at some rate (down to the capacity
reading's slowest), and after :data:`NO_RATE_STOP` such configs stops once no unmeasured one
has :data:`MIN_CHANCE` of meeting it at any rate and every prefill chunk's shortest steps
(the smallest window) were read, and says the SLO is out of the replica's reach.

:class:`Guide` holds that state for one workload; :class:`GuidedStrategy` is the ``guided``
strategy of :mod:`autotune.search.strategy` built on it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, replace

from autotune.acceptance import HeadCalibration
from autotune.objective import Outcome, Standard, met_at_some_rate, rank_measured
from autotune.policy import Policy
from autotune.predict import Observation, Prediction, Predictor
from autotune.predict.facts import Facts, UndescribedReplica, describe_replica
from autotune.search.sampler import create_tpe
from autotune.search.strategy import Proposal, Strategy, StrategySetup
from autotune.types import Measurement, Request, TrialConfig

__all__ = ["LIGHT_BATCH", "MIN_CHANCE", "NO_RATE_STOP", "Guide", "GuideDecision", "GuidedStrategy",
           "create_guided", "make_guide", "policy_facts"]

#: A config whose chance of meeting the SLO is below this is not run.
MIN_CHANCE = 0.10

#: A replay whose mean decode batch is at most this is light load: its p99 ITL is one decode
#: step with (almost) nothing batched beside it, its p99 TTFT one prefill.
LIGHT_BATCH = 2.0

#: When this many configs were measured, none met the SLO at any rate tried (not even the
#: capacity search's lowest) and no unmeasured one has :data:`MIN_CHANCE`, the search stops:
#: there is no capacity to rank, only an SLO the replica cannot meet. (One such config may be a
#: bad baseline; the config most likely to meet the SLO is read once before giving up.)
NO_RATE_STOP = 2

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GuideDecision:
    """Why the guide proposed what it did (for logs and reports)."""

    config: TrialConfig | None
    reason: str
    incumbent: float | None
    remaining_gain: float
    candidates: int
    pruned: int


def _expected_improvement(p: Prediction, incumbent: float) -> float:
    """E[max(0, V - incumbent)] for V lognormal(log_mean, log_sd), times P(feasible)."""
    from scipy.stats import norm

    mu, sd = p.log_mean, max(p.log_sd, 1e-6)
    if incumbent <= 0:
        return math.exp(mu + sd * sd / 2.0) * (1.0 - p.risk)
    d = (mu - math.log(incumbent)) / sd
    gain = math.exp(mu + sd * sd / 2.0) * float(norm.cdf(d + sd)) - incumbent * float(norm.cdf(d))
    return max(gain, 0.0) * (1.0 - p.risk)


def _likeliest_first(p: Prediction) -> tuple[float, float, float, TrialConfig]:
    """Sort key: likeliest to meet the SLO at some rate, then at the rate to serve, then the
    best predicted."""
    return p.reach_risk, p.risk, -p.value, p.config


class Guide:
    """The guided-search state of one workload: a predictor plus the stop rule."""

    def __init__(self, predictor: Predictor, epsilon: float, *,
                 probe_windows: bool = False) -> None:
        self.predictor = predictor
        self.epsilon = epsilon
        #: run a second window early (:meth:`_window_probe`): the hardware is not in the table
        self.probe_windows = probe_windows
        self.decisions: list[GuideDecision] = []
        #: every reading of every config measured (None: the trial failed), in the order told
        self.readings: dict[TrialConfig, list[Outcome | None]] = {}

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

    # -- proposals --------------------------------------------------------------------------
    def rank(self) -> list[Prediction]:
        """Every candidate by predicted value × P(feasible), best first."""
        preds = self.predictor.predict()
        return sorted((preds[c] for c in self.predictor.configs),
                      key=lambda p: (-p.value * (1.0 - p.risk), p.config))

    def propose(self, exclude: Iterable[TrialConfig] = ()) -> GuideDecision:
        """The next config to run (None: stop), never one of ``exclude`` (measured, running)."""
        skip = set(exclude) | {o.config for o in self.predictor.observations}
        unmeasured = [p for p in self.rank() if p.config not in skip]
        best = self.incumbent()
        if not unmeasured:
            return self._note(None, "every candidate is measured or running", best, 0.0, 0, 0)
        live = [p for p in unmeasured if self.ruled_out(p.config) is None]
        if not live:
            return self._note(None, f"nothing left can meet the SLO (each of the "
                                    f"{len(unmeasured)} unmeasured configs is at least as slow "
                                    f"as one that missed it at every rate tried, down to light "
                                    f"load)", best, 0.0, len(unmeasured), len(unmeasured))
        unmeasured = live
        probe = self._window_probe(unmeasured)
        if probe is not None:
            return self._note(probe.config, "profiling the drafter: the hardware is not in the "
                                            "table, so a second window (the smallest) measures "
                                            "what a drafted position costs", best, math.inf,
                              len(unmeasured), 0)
        ranked = [p for p in unmeasured if 1.0 - p.risk >= MIN_CHANCE]
        hopeless = len(unmeasured) - len(ranked)
        if not ranked and best is None:
            return self._out_of_reach(unmeasured)
        if not ranked:
            return self._note(None, f"nothing left can meet the SLO (each of the "
                                    f"{hopeless} unmeasured configs has a chance below "
                                    f"{MIN_CHANCE:.0%} given the runs)", best, 0.0,
                              len(unmeasured), hopeless)
        if best is None:
            return self._note(ranked[0].config, "best predicted (none measured meets the SLO "
                                                "yet)", None, math.inf, len(ranked), hopeless)
        return self._improve(ranked, best, len(unmeasured), "")

    def _window_probe(self, unmeasured: Sequence[Prediction]) -> Prediction | None:
        """On hardware the facts do not describe, the best-ranked config at the space's
        smallest window while every run so far drafted one other window; else None.

        One window cannot split a step between the target's pass (which grows with the
        tokens verified, steeply where compute binds, as on a CPU) and the drafter's passes
        (one per position for a sequential drafter): the fit falls back on facts written for
        GPUs, and on a compute-bound engine it then ranks wide windows far too high. Two
        windows at the ends of the range measure the split.
        """
        if not self.probe_windows:
            return None
        windows = {o.config.num_speculative_tokens for o in self.predictor.observations
                   if o.value is not None}
        smallest = min((c.num_speculative_tokens for c in self.predictor.configs), default=None)
        if smallest is None or len(windows) != 1 or smallest in windows:
            return None
        at_smallest = [p for p in unmeasured if p.config.num_speculative_tokens == smallest]
        return at_smallest[0] if at_smallest else None

    def ruled_out(self, config: TrialConfig) -> str | None:
        """Why ``config`` cannot meet the SLO whatever the predictor says, or None.

        A config that missed the SLO at every rate the capacity search tried, down to light
        load (:data:`LIGHT_BATCH`), missed it on its unloaded step or prefill time. At light
        load the p99 ITL is one decode step, which grows with the window; the p99 TTFT is one
        prefill, which grows with the window and shrinks with the chunk
        (``max_num_batched_tokens``). The p99 ITL is not monotone in the chunk: a bigger chunk
        makes the steps a long prompt's prefill rides in slower but fewer, and when they fall
        under 1% of the gaps the p99 drops below them (Llama-3.1-8B on one H100, code prompts:
        window 1 x 8 sequences read a p99 ITL of 325 ms at 1/64 of the sample's rate with
        2048-token chunks, and 174 ms at 1/61 with 8192), so an ITL miss speaks only for its
        own chunk. The slots (``max_num_seqs``) do not bind when there are more of them than
        the light batch; fewer only queue more (TTFT) or batch less (ITL). So a config that is
        at least as slow on the bound that was missed (same adaptive verification) misses it
        too.
        """
        slo = self.predictor.slo
        if slo is None:
            return None
        for o in self.predictor.observations:
            if not o.margin_censored or o.batch is None or o.batch > LIGHT_BATCH:
                continue
            a = o.config
            if a.enable_adaptive_verification != config.enable_adaptive_verification:
                continue
            wider = config.num_speculative_tokens >= a.num_speculative_tokens
            slots = config.max_num_seqs > LIGHT_BATCH or config.max_num_seqs >= a.max_num_seqs
            if (slo.itl_p99_ms is not None and o.itl_p99_ms is not None
                    and o.itl_p99_ms > slo.itl_p99_ms and wider and slots
                    and config.max_num_batched_tokens == a.max_num_batched_tokens):
                return f"{a.short()} missed p99 ITL at every rate ({o.itl_p99_ms:.0f} ms)"
            if (slo.ttft_p99_ms is not None and o.ttft_p99_ms is not None
                    and o.ttft_p99_ms > slo.ttft_p99_ms and wider
                    and config.max_num_batched_tokens <= a.max_num_batched_tokens):
                return f"{a.short()} missed p99 TTFT at every rate ({o.ttft_p99_ms:.0f} ms)"
        return None

    def _improve(self, ranked: Sequence[Prediction], best: float, unmeasured: int,
                 context: str) -> GuideDecision:
        """The candidate with the highest expected improvement over ``best``, or the stop."""
        alive = [p for p in ranked if p.high > best]
        pruned = unmeasured - len(alive)
        if not alive:
            return self._note(None, "no candidate's optimistic prediction beats the incumbent"
                              + context, best, 0.0, len(ranked), pruned)
        gains = [(_expected_improvement(p, best), p) for p in alive]
        gain, choice = max(gains, key=lambda g: (g[0], g[1].value))
        remaining = gain / best
        if remaining < self.epsilon:
            return self._note(None, f"predicted remaining gain {remaining:.2%} < epsilon "
                                    f"{self.epsilon:.2%}" + context, best, remaining,
                              len(ranked), pruned)
        return self._note(choice.config, "highest expected improvement" + context, best,
                          remaining, len(ranked), pruned)

    def _out_of_reach(self, unmeasured: Sequence[Prediction]) -> GuideDecision:
        """No config can serve the rate: look for the most capacity, on value alone."""
        context = (f" (the rate to serve is out of reach: no config measured meets the SLO "
                   f"at it and none of the {len(unmeasured)} unmeasured has a "
                   f"{MIN_CHANCE:.0%} chance, so the search looks for the most capacity)")
        free = sorted((replace(p, risk=0.0) for p in unmeasured),
                      key=lambda p: (-p.value, p.config))
        best = self.best_value(Standard.AT_SOME_RATE)
        tried = {o.config for o in self.predictor.observations if o.margin_censored}
        reachable = any(1.0 - p.reach_risk >= MIN_CHANCE for p in unmeasured)
        if best is None and len(tried) >= NO_RATE_STOP and not reachable:
            shortest = self._shortest_steps_unread(unmeasured)
            if shortest is not None:
                return self._note(shortest.config, "the shortest steps at a prefill chunk not "
                                                   "yet read at them, before the SLO is called "
                                                   "out of reach" + context, None, math.inf,
                                  len(free), 0)
            return self._note(None, f"the SLO is out of this replica's reach: none of the "
                                    f"{len(tried)} configs measured meets it at any rate "
                                    f"tried and none of the {len(unmeasured)} unmeasured has "
                                    f"a {MIN_CHANCE:.0%} chance to at any rate; loosen the SLO "
                                    f"or change the space or hardware", None, 0.0, len(free),
                              len(free))
        if best is None:
            # no capacity to rank yet: before the SLO is called out of reach, read the config
            # most likely to meet it at some rate (the best predicted among equals), which
            # tests the knob the misses point at, rather than the one with the most predicted
            # capacity
            likeliest = min(unmeasured, key=_likeliest_first)
            return self._note(likeliest.config, "most likely to meet the SLO at some rate"
                              + context, None, math.inf, len(free), 0)
        return self._improve(free, best, len(free), context)

    def _shortest_steps_unread(self, unmeasured: Sequence[Prediction]) -> Prediction | None:
        """The likeliest unmeasured config at the space's smallest window and a prefill chunk
        (``max_num_batched_tokens``) at which no config with that window was read; None when
        every chunk's was.

        At light load a config's p99s are its own step and prefill times: the smallest window
        has the shortest decode steps, and each chunk its own mix of prefill steps (the p99
        ITL is not monotone in the chunk, :meth:`ruled_out`). So before the SLO is called out
        of reach, each chunk's shortest steps are read once, whatever the model says of them:
        on Llama-3.1-8B on one H100 (code prompts) the model fitted to the baseline (window
        7 x 8192) and window 1 x 2048 put window 1 x 8192's light-load p99 ITL at 513 ms
        against a 200 ms bound on one seed, at 83 ms on another; it reads 174 ms.
        """
        smallest = min((c.num_speculative_tokens for c in self.predictor.configs), default=None)
        read = {o.config.max_num_batched_tokens for o in self.predictor.observations
                if o.config.num_speculative_tokens == smallest}
        candidates = [p for p in unmeasured if p.config.num_speculative_tokens == smallest
                      and p.config.max_num_batched_tokens not in read]
        return min(candidates, key=_likeliest_first, default=None)

    def _note(self, config: TrialConfig | None, reason: str, incumbent: float | None,
              remaining: float, candidates: int, pruned: int) -> GuideDecision:
        d = GuideDecision(config, reason, incumbent, remaining, candidates, pruned)
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
        max_model_len=policy.serve.max_model_len,
        facts=facts)
    return Guide(predictor, policy.search.epsilon if epsilon is None else epsilon,
                 probe_windows=not facts.hardware.known)


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
        return Proposal(decision.config, decision.reason)

    def surprise(self, config: TrialConfig, outcome: Outcome) -> str | None:
        """A reading above the optimistic end of the prediction the config was proposed on
        (its ~95th percentile: model error and replay noise both counted)."""
        p = self._expected.get(config)
        if p is None or not p.high > 0 or outcome.value <= p.high:
            return None
        return (f"a surprise: it read {outcome.value:.4g}, {outcome.value / p.value - 1:.0%} "
                f"above its prediction {p.value:.4g} (optimistic end {p.high:.4g})")

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
