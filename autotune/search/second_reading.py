"""What a second reading of a leader read once is worth: the value of separating it from the
runner-up, in the units the guided search stops by (a share of the objective per trial).

A leader read once may lead by its luck. Reading it again moves its mean by half of what its
second reading differs from its first: for one reading's noise ``σ`` (log objective), a normal
with sd ``σ / √2``. When the move puts it below the runner-up, the runner-up is the pick and
the search gains the difference; otherwise the pick stays and it gains nothing. The expected
gain is the knowledge gradient of that reading (Frazier, Powell & Dayanik, SIAM J. Control
Optim. 2008).

How noisy one reading is, the run does not know: it varies from world to world and from
workload to workload (a capacity reading whose window holds a dozen requests varies with which
prompts the window holds; one over hundreds hardly at all). So ``σ²`` has a scaled inverse-χ²
prior: the scale :data:`~autotune.predict.residual.GP_NOISE` (2%) on :data:`PRIOR_DOF`
degrees of freedom, updated by the run's own repeats (:func:`reading_noise`: the configs it read
more than once, each adding its readings' degrees of freedom). The move is then a Student t
with ``ν`` (the prior's and the repeats' degrees of freedom) and scale ``s = scale / √2``, and
the expected gain

    worth = s · ((ν + z²) / (ν − 1) · f_ν(z) − z · (1 − F_ν(z))),   z = lead / s,

with ``lead`` the log of the leader's value over the runner-up's mean and ``f_ν``, ``F_ν`` the
t density and distribution (the normal's ``φ(z) − z·Φ(−z)`` as ``ν`` grows). The prior's two
degrees of freedom put one reading's noise between 1.2% and 8.8% nine times in ten: the range
measured across the simulated worlds (1.1–2.9% on the GPU worlds, 8.9% on one CPU core, from
the configs read twice in one benchmark sitting). Under the default ``search.epsilon`` (0.5%),
until the run has read a config twice a lead under 1.5% is worth a second reading; once its
repeats agree to 1% over six degrees of freedom not even a tie is (0.41%); a config read twice
9% apart makes a lead under 3.4% worth one.

A second reading is worth a trial when this is at least ``search.epsilon``, the floor under
which the guided search stops reading new configs: one rule for what a trial must be expected
to gain, whether it reads a new config or an old one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from autotune.objective import Outcome, pooled_log_sd
from autotune.predict.residual import GP_NOISE

__all__ = ["PRIOR_DOF", "Noise", "reading_noise", "second_reading_worth"]

#: Degrees of freedom of the prior on one reading's noise (scale
#: :data:`~autotune.predict.residual.GP_NOISE`): two, which puts the noise between 1.2% and 8.8%
#: nine times in ten, the range measured across the simulated worlds (module doc).
PRIOR_DOF = 2.0


class Noise(NamedTuple):
    """One reading's noise (sd of the log objective) as the run knows it: its scale and the
    degrees of freedom it rests on (the prior's and the run's repeats')."""

    scale: float
    dof: float


def reading_noise(readings: Iterable[Sequence[Outcome | None]]) -> Noise:
    """One reading's noise for a run with these readings (each config's): the prior
    :data:`~autotune.predict.residual.GP_NOISE` on :data:`PRIOR_DOF` degrees of freedom, with
    the pooled spread of the configs read more than once (successful, positive readings)
    weighed in by theirs."""
    sd, dof = pooled_log_sd([o.value for o in outs if o is not None and o.value > 0]
                            for outs in readings)
    if sd is None:
        return Noise(GP_NOISE, PRIOR_DOF)
    nu = PRIOR_DOF + dof
    return Noise(math.sqrt((PRIOR_DOF * GP_NOISE**2 + dof * sd**2) / nu), nu)


def second_reading_worth(lead: float, noise: Noise) -> float:
    """The expected gain (a share of the objective) of reading once more a leader read once
    that leads the runner-up by ``lead`` (log of their ratio, ≥ 0), one reading's noise being
    ``noise`` (see the module doc)."""
    from scipy.stats import t

    if noise.scale <= 0:
        return 0.0
    nu, s = noise.dof, noise.scale / math.sqrt(2.0)
    z = max(lead, 0.0) / s
    return s * float((nu + z * z) / (nu - 1.0) * t.pdf(z, nu) - z * t.sf(z, nu))
