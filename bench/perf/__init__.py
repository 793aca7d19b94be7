"""Performance benchmarks: simulator speed (``python -m bench.perf.sim_speed``) and memory
(``bench.perf.sim_memory``), scale of a million-request sample, a large store and a long-running
daemon (``bench.perf.scale``), and parallel trials on Ray (``bench.perf.parallel``)."""
