"""The one error hierarchy of autotune.

Every expected failure (bad input, a backend that cannot start, an unreachable database) is an
:class:`AutotuneError`. The CLI turns these into one clear message and a non-zero exit; anything
else is a bug and keeps its traceback. Subclasses also inherit the matching built-in so callers
that catch ``ValueError`` or ``RuntimeError`` keep working.

Messages say what happened, the offending value, and the fix.
"""

from __future__ import annotations

__all__ = [
    "AutotuneError",
    "BackendError",
    "ConfigError",
    "DependencyError",
    "ExportError",
    "PlanError",
    "SearchError",
    "StoreError",
    "TrafficError",
    "TrialFailed",
]


class AutotuneError(Exception):
    """Base of every error autotune raises on purpose."""

    exit_code: int = 1


class ConfigError(AutotuneError, ValueError):
    """A policy, flag or setting is invalid."""

    exit_code = 2


class TrafficError(AutotuneError, ValueError):
    """A traffic sample cannot be read; the message names ``file:line: field: reason``."""

    exit_code = 2

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 field: str | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.line = line
        self.field = field
        self.reason = reason

    @classmethod
    def at(cls, path: str, line: int | None, field: str | None, reason: str) -> TrafficError:
        """Build the error for one place in a sample: ``file:line: field: reason``."""
        where = f"{path}:{line}" if line is not None else path
        text = f"{where}: {field}: {reason}" if field else f"{where}: {reason}"
        return cls(text, path=path, line=line, field=field, reason=reason)


class BackendError(AutotuneError, RuntimeError):
    """A replica could not be started, measured or stopped."""


class TrialFailed(BackendError):
    """One trial failed (server crash, timeout, OOM); the run goes on with the next trial."""

    def __init__(self, reason: str, *, log_tail: str = "") -> None:
        super().__init__(reason if not log_tail else f"{reason}\n--- log tail ---\n{log_tail}")
        self.reason = reason
        self.log_tail = log_tail


class SearchError(AutotuneError, RuntimeError):
    """The search could not proceed (empty space, no feasible trial...)."""


class StoreError(AutotuneError, RuntimeError):
    """The database is unreachable, refuses the credentials, or has an unexpected schema."""


class ExportError(AutotuneError, RuntimeError):
    """A recommendation could not be exported."""


class PlanError(AutotuneError, ValueError):
    """A capacity plan cannot be made from these inputs (a bad growth factor, headroom or peak
    window, or a run with no workload a plan can size)."""

    exit_code = 2


class DependencyError(AutotuneError, ImportError):
    """An optional dependency is missing; the message says which extra installs it."""

    @classmethod
    def missing(cls, module: str, extra: str, feature: str) -> DependencyError:
        return cls(
            f"{feature} needs the Python package {module!r}, which is not installed; "
            f"install it with: pip install 'autotune[{extra}]'"
        )
