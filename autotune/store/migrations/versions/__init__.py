"""Revisions of autotune's schema, one module each, named ``NNNN_what.py``."""
