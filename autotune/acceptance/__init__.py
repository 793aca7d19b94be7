"""The acceptance model: survival curves, expected tokens per window, head calibration."""

from __future__ import annotations

from autotune.acceptance.calibration import (
    CountsObservation,
    HeadCalibration,
    calibrate,
    ece,
    measured_conditional,
    usable,
)
from autotune.acceptance.curves import (
    UNINFORMED_CONDITIONAL,
    AcceptanceModel,
    curve_from_counts,
    curve_from_predictions,
    prior_conditional,
    survival_matrix,
)

__all__ = [
    "UNINFORMED_CONDITIONAL",
    "AcceptanceModel",
    "CountsObservation",
    "HeadCalibration",
    "calibrate",
    "curve_from_counts",
    "curve_from_predictions",
    "ece",
    "measured_conditional",
    "prior_conditional",
    "survival_matrix",
    "usable",
]
