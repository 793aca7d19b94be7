"""The predictor's check on its own spread: how far each prediction it made missed the reading
that followed.

The residual process (:mod:`autotune.predict.residual`) learns how wrong the replica model is
from the model's errors at the runs; but the model's step cost and factors were fitted to those
same runs, so its errors there are smaller than at a config no run has read (an in-sample
residual understates the out-of-sample error, the more so the more of the model the runs
fitted). The search stops when no unread config is predicted worth a trial, so a spread that
is too narrow stops it early on a worse config.

Every first reading of a config made once some run is in is a prediction put to the test (the
prediction the search held when it chose to read it): its score is

    z = (log reading - log median) / sqrt(model sd^2 + noise^2)

with the residual process's own sd (before this module widens it) and one reading's noise
:data:`~autotune.predict.residual.GP_NOISE`. Calibrated predictions give z^2 a mean of 1. The
spread of every unread config is multiplied by :func:`spread_factor`, the root of the mean z^2
shrunk towards 1 by :data:`PRIOR_CHECKS` checks at 1, never below 1: the residual process is
the model's best account of its error, and the checks only say when the runs show it larger.
(The config the search reads is the one whose prediction looked best, so a mean z below 0,
predictions too hopeful where the search looks, counts in z^2 as any miss does.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from autotune.predict.observation import Observation
from autotune.predict.residual import GP_NOISE

if TYPE_CHECKING:
    from autotune.predict.predictor import Prediction

__all__ = ["PRIOR_CHECKS", "check_score", "checks_prediction", "spread_factor"]

#: How many calibrated checks (z^2 = 1) the factor starts from: a single check of 3 sds
#: widens the spread by 1.9x, not 3x; with five such checks, 2.6x.
PRIOR_CHECKS = 2.0


def checks_prediction(obs: Observation, before: Sequence[Observation]) -> bool:
    """Whether ``obs`` tests a prediction: a config's first reading with a value, made once
    some run (``before``, the observations so far) had one (the first run tests the facts'
    prior, whose workload-wide offset every later prediction has learned)."""
    return (obs.feasible and obs.value is not None and obs.value > 0
            and any(o.value is not None for o in before)
            and all(o.config != obs.config for o in before))


def check_score(obs: Observation, held: Prediction) -> float:
    """z of the reading ``obs`` against the prediction ``held`` for it before (the module
    doc): against the residual process's own sd, before :func:`spread_factor` widened it."""
    assert obs.value is not None and obs.value > 0
    sd = held.detail.get("model_sd", held.log_sd)
    return (math.log(obs.value) - held.log_mean) / math.hypot(sd, GP_NOISE)


def spread_factor(scores: Sequence[float]) -> float:
    """How much wider than the residual process's the spread of an unread config is: the
    root of the mean squared score, shrunk towards 1 by :data:`PRIOR_CHECKS`; at least 1."""
    total = PRIOR_CHECKS + sum(z * z for z in scores)
    return max(1.0, math.sqrt(total / (PRIOR_CHECKS + len(scores))))
