"""Behaviour studies on the simulator: automatic grouping on samples with known sources
(``python -m bench.studies.grouping``) and the speculative gain under load
(``python -m bench.studies.load_sweep``)."""
