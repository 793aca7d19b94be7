"""The acceptance model: survival curves, expected tokens per window, head calibration."""

from __future__ import annotations

from autotune.acceptance.calibration import (
    CountsObservation,
    HeadCalibration,
    calibrate,
    ece,
    usable,
)
from autotune.acceptance.curves import (
    NOVITA_K26_SURVIVAL,
    AcceptanceModel,
    curve_from_counts,
    curve_from_predictions,
    prior_conditional,
    survival_matrix,
)

__all__ = [
    "NOVITA_K26_SURVIVAL",
    "AcceptanceModel",
    "CountsObservation",
    "HeadCalibration",
    "calibrate",
    "curve_from_counts",
    "curve_from_predictions",
    "ece",
    "prior_conditional",
    "survival_matrix",
    "usable",
]
