"""The capacity reading's knee search side by side (``python -m bench.studies.knee``): each
config of a pass's space read with no hint and with hints at, 3× above and 3× below its true
knee, per arm the readings, replica seconds, resolution and the predicted readings and cost
(:mod:`.arms`); and the same figures read from a pass's database (``--pass-db``,
:mod:`.pass_readings`)."""

from __future__ import annotations

from bench.studies.knee.arms import Arm, ArmReading, default_arms, read_unit, summarize
from bench.studies.knee.pass_readings import PassReadings, read_pass

__all__ = ["Arm", "ArmReading", "PassReadings", "default_arms", "read_pass", "read_unit",
           "summarize"]
