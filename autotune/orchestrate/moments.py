"""Named moments of a tuning pass, announced as audit events.

A pass says where it is — loading its sample, a Ray pool starting, waiting for a trial, a
replica about to replay, a pool stopping, recommending, a workload recommended, the daemon
sleeping — by raising the
audit event ``autotune.moment`` with the moment's name (``sys.audit``, PEP 578). With no audit
hook installed (autotune installs none) raising it costs one C call and does nothing; an
observer that installs a hook with ``sys.addaudithook`` sees each moment in the thread that
reached it, before the pass goes on. The tests use this to hold a process at a moment and
deliver a signal there (``tests/holds``); nothing here knows about them.
"""

from __future__ import annotations

import sys
from typing import Literal

__all__ = ["MOMENT_EVENT", "Moment", "announce_moment"]

#: The audit event every moment is raised as; its one argument is the moment's name.
MOMENT_EVENT = "autotune.moment"

#: The moments, in the order a pass reaches them. ``loading``: a daemon or nightly pass starts
#: (its lease is held, its sample not yet read); ``pool-starting``: a Ray pool is being started
#: (stop signals held); ``trial``: the driver is about to wait for a trial; ``replaying``: a
#: replica has started for a trial and is about to replay (in the process that runs the trial,
#: a Ray replica actor or this one); ``pool-stopping``: a Ray pool is being stopped (stop
#: signals held); ``recommending``: the trials are over, the pass recommends and exports;
#: ``recommended``: one workload's recommendation is stored (and exported), the next one's not
#: yet; ``sleeping``: the daemon waits for its next pass.
Moment = Literal["loading", "pool-starting", "trial", "replaying", "pool-stopping",
                 "recommending", "recommended", "sleeping"]


def announce_moment(moment: Moment) -> None:
    """Raise the ``autotune.moment`` audit event for ``moment`` (see the module docstring)."""
    sys.audit(MOMENT_EVENT, moment)
