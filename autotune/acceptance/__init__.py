"""The acceptance model: survival curves and expected tokens from confidence-head predictions."""

from __future__ import annotations

from autotune.acceptance.curves import curve_from_predictions, survival_matrix

__all__ = ["curve_from_predictions", "survival_matrix"]
