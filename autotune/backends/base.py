"""The replica backend contract (docs/architecture.md, "Replicas").

A :class:`Backend` starts one :class:`Replica` per trial config; the replica replays a schedule
and returns a :class:`~autotune.types.Measurement`; ``stop`` releases it. The contract:

- ``start`` either returns a ready replica or raises :class:`~autotune.errors.TrialFailed`
  (bad flag, OOM, timeout) with the reason; it never leaves a process behind when it raises.
- ``replay`` measures the schedule; a crash mid-replay raises ``TrialFailed``.
- ``stop`` is idempotent and safe to call after a failure; after it returns, nothing the replica
  started is still running.
- A replica that decodes real tokens also implements :class:`GreedyDecoder`: the trial runner
  asks it to decode the schedule's :class:`~autotune.types.OutputCheck` greedily after the
  replay (docs/outputs.md); a backend without tokens (the simulator) does not, and its trials
  are "not checked". Such a backend says ``decodes_tokens = True`` (:func:`decodes_tokens`).
- ``start_s`` is what starting it cost, in the replica's clock (seconds from launch to a server
  ready to serve: measured on real engines, the profile's stated figure on the simulator; 0 for
  a server autotune did not start), and ``start_source`` says where that figure comes from.
  A replica may replay several schedules, for several trials of the same config: the start is
  paid once (:mod:`autotune.cost`).
- Backends never read the search's state or the store; the search never reads a backend's
  internals (the simulator's hidden acceptance truth stays inside ``backends/sim``).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from autotune.types import (
    GreedyOutput,
    Measurement,
    OutputCheck,
    Progress,
    ReplaySchedule,
    TrialConfig,
)

__all__ = ["Backend", "GreedyDecoder", "Replica", "decodes_tokens"]


@runtime_checkable
class Replica(Protocol):
    """One running server (or simulated server) with a fixed trial config."""

    config: TrialConfig
    start_s: float
    start_source: str

    def replay(self, schedule: ReplaySchedule, progress: Progress | None = None) -> Measurement:
        """Replay ``schedule`` and measure it."""
        ...

    def stop(self) -> None:
        """Release the replica; idempotent."""
        ...


@runtime_checkable
class Backend(Protocol):
    """Starts replicas. ``kind`` is its registry name; ``describe`` feeds provenance."""

    kind: str

    def start(self, config: TrialConfig) -> Replica:
        """Start a replica serving with ``config``; raises TrialFailed when it cannot."""
        ...

    def describe(self) -> dict[str, Any]:
        """Provenance of the measurements: backend, profile/hardware, versions."""
        ...


@runtime_checkable
class GreedyDecoder(Protocol):
    """Optional for a replica: decode ``check``'s prompts greedily (temperature 0), one
    :class:`~autotune.types.GreedyOutput` per prompt in order; raises ``TrialFailed`` when the
    server cannot answer."""

    def decode_greedily(self, check: OutputCheck) -> tuple[GreedyOutput, ...]: ...


def decodes_tokens(backend: Backend) -> bool:
    """Whether ``backend``'s replicas decode real tokens (and so have their outputs checked)."""
    return bool(getattr(backend, "decodes_tokens", False))
