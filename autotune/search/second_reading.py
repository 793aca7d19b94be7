"""What a second reading of a leader read once is worth: the value of separating it from the
runner-up, in the units the guided search stops by (a share of the objective per trial).

A leader read once may lead by its luck. Reading it again moves its mean by half of what its
second reading differs from its first: a normal with sd ``noise / √2`` for one reading's noise
``noise`` (log objective). When the move puts it below the runner-up, the runner-up is the pick
and the search gains the difference; otherwise the pick stays and it gains nothing. The
expected gain is the knowledge gradient of that reading (Frazier, Powell & Dayanik, SIAM J.
Control Optim. 2008):

    worth = s · (φ(z) − z · Φ(−z)),   s = noise / √2,   z = lead / s,

with ``lead`` the log of the leader's value over the runner-up's mean. It is largest at a tie
(about 0.4 · s) and falls fast with the lead: with one reading's noise at 2%, a tie is worth
0.56% and a lead of 1% is worth 0.20%. A second reading is worth a trial when this is at least
``search.epsilon``, the floor under which the guided search stops reading new configs: one
rule for what a trial must be expected to gain, whether it reads a new config or an old one.

How noisy one reading is comes from the run itself where it read some config more than once
(:func:`reading_noise`: the pooled spread of those readings), against the prior
:data:`~autotune.predict.residual.GP_NOISE` (2%) counted as one such repeat. At 2% a second
reading is worth the default epsilon (0.5%) only for a lead under 0.13%; at 3.4% (the noisiest
of the simulated worlds) under 1.1%; at 8% (a config whose p99 flips across its bound with the
replay) under 5.6%, where a lead of 4% is worth 0.82%.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from statistics import NormalDist

from autotune.objective import Outcome, pooled_log_sd
from autotune.predict.residual import GP_NOISE

__all__ = ["PRIOR_REPEATS", "reading_noise", "second_reading_worth"]

#: Degrees of freedom the prior noise (:data:`~autotune.predict.residual.GP_NOISE`) counts
#: for against the run's own repeats: one, as much as one config read twice.
PRIOR_REPEATS = 1.0

_NORMAL = NormalDist()


def reading_noise(readings: Iterable[Sequence[Outcome | None]]) -> float:
    """One reading's noise (sd of the log objective) for a run with these readings (each
    config's): the prior :data:`~autotune.predict.residual.GP_NOISE`, with the pooled spread of
    the configs read more than once (successful, positive readings) weighed in by their degrees
    of freedom."""
    sd, dof = pooled_log_sd([o.value for o in outs if o is not None and o.value > 0]
                            for outs in readings)
    if sd is None:
        return GP_NOISE
    return math.sqrt((PRIOR_REPEATS * GP_NOISE**2 + dof * sd**2) / (PRIOR_REPEATS + dof))


def second_reading_worth(lead: float, noise: float) -> float:
    """The expected gain (a share of the objective) of reading once more a leader read once
    that leads the runner-up by ``lead`` (log of their ratio, ≥ 0), one reading's noise being
    ``noise`` (see the module doc)."""
    if noise <= 0:
        return 0.0
    s = noise / math.sqrt(2.0)
    z = max(lead, 0.0) / s
    return s * (_NORMAL.pdf(z) - z * _NORMAL.cdf(-z))
