"""The daemon and the nightly job: when to run tuning passes, and stopping cleanly.

``run_daemon`` tunes once, then sleeps until the next pass is due — the policy's cron schedule,
or ``--every`` — or until the traffic file changes (size or mtime first, then its sha256), and
tunes again. Scheduled and change-triggered passes re-tune only workloads whose traffic drifted
since their active recommendation was tuned (``autotune.traffic.drift``). SIGTERM and SIGINT
stop it: the trial in flight is aborted (its replica stopped), the run is marked
``interrupted`` and the process exits 0. A state file (default ``storage/daemon.json``) says
what the daemon is doing, for ``autotune status``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from autotune.errors import ConfigError, TrafficError
from autotune.export import write_atomic
from autotune.orchestrate import Reporter, TuneOptions, TuneResult, tune
from autotune.store import Store
from autotune.traffic import file_sha256

__all__ = [
    "DEFAULT_STATE_PATH",
    "DaemonOptions",
    "newest_samples",
    "next_cron",
    "read_daemon_state",
    "run_daemon",
    "run_nightly",
    "stop_signals",
]

log = logging.getLogger(__name__)

DEFAULT_STATE_PATH = Path("storage/daemon.json")
SAMPLE_SUFFIXES = (".jsonl", ".jsonl.gz", ".json.gz")


@dataclass(frozen=True)
class DaemonOptions:
    tune: TuneOptions
    every_s: float | None = None  # overrides the policy's cron
    cron: str | None = None
    state_path: Path = DEFAULT_STATE_PATH
    poll_s: float = 2.0  # how often the traffic file is checked while sleeping
    max_passes: int | None = None  # stop after this many passes (tests)


def _now() -> datetime:
    return datetime.now(UTC)


def next_cron(expr: str, after: datetime) -> datetime:
    """The next time ``expr`` (5-field cron) fires after ``after``."""
    from croniter import CroniterBadCronError, croniter

    try:
        nxt: datetime = croniter(expr, after).get_next(datetime)
    except (CroniterBadCronError, ValueError, KeyError) as e:
        raise ConfigError(f"schedule.cron: {expr!r} is not a valid cron expression ({e}); "
                          "use five fields, e.g. '0 2 * * *' for 02:00 daily") from e
    return nxt


@contextmanager
def stop_signals() -> Iterator[None]:
    """Make SIGTERM and SIGHUP behave like Ctrl-C (KeyboardInterrupt) while the block runs,
    so every replica is stopped and the run marked interrupted on the way out."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _write_state(path: Path, **state: Any) -> None:
    state = {"pid": os.getpid(), "updated_at": _now().isoformat(timespec="seconds"), **state}
    try:
        write_atomic(path, json.dumps(state, indent=2, default=str) + "\n")
    except Exception as e:  # the state file is informative; never stop tuning for it
        log.warning("cannot write daemon state %s: %s", path, e)


def read_daemon_state(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if isinstance(data, dict):
        data["alive"] = _alive(int(data.get("pid", 0))) and data.get("status") != "stopped"
        return data
    return None


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class _Watch:
    """Cheap change detection: size and mtime first, then the content hash."""

    path: Path
    size: int = -1
    mtime: float = -1.0
    sha256: str = ""

    def snapshot(self) -> None:
        st = self.path.stat()
        self.size, self.mtime = st.st_size, st.st_mtime
        self.sha256 = file_sha256(self.path)

    def changed(self) -> bool:
        try:
            st = self.path.stat()
        except OSError:
            return False  # being replaced; look again at the next poll
        if (st.st_size, st.st_mtime) == (self.size, self.mtime):
            return False
        digest = file_sha256(self.path)
        self.size, self.mtime = st.st_size, st.st_mtime
        if digest == self.sha256:
            return False
        self.sha256 = digest
        return True


def _due(options: DaemonOptions, last_end: datetime) -> datetime | None:
    if options.every_s is not None:
        return datetime.fromtimestamp(last_end.timestamp() + options.every_s, UTC)
    if options.cron:
        return next_cron(options.cron, last_end)
    return None


def run_daemon(options: DaemonOptions, store: Store,
               reporter: Callable[[], Reporter] = Reporter,
               on_pass: Callable[[TuneResult, str], None] | None = None) -> int:
    """Tune, then re-tune on schedule or traffic change until stopped; returns the exit code."""
    state = options.state_path
    watch = _Watch(options.tune.traffic)
    passes = 0
    last_run: str | None = None
    reason = "start"
    in_pass = False
    try:
        with stop_signals():
            while True:
                if watch.path.exists():
                    watch.snapshot()
                _write_state(state, status="tuning", reason=reason, current_run=None,
                             last_run=last_run, next_pass=None,
                             traffic=str(options.tune.traffic))
                opts = replace(options.tune, drift_check=passes > 0)
                try:
                    in_pass = True
                    with reporter() as rep:
                        result = tune(opts, store, rep)
                    in_pass = False
                except TrafficError as e:
                    in_pass = False
                    if passes == 0:
                        raise
                    log.error("pass skipped: %s", e)  # keep serving the last recommendations
                    result = None
                passes += 1
                if result is not None:
                    last_run = result.run_id or last_run
                    if on_pass is not None:
                        on_pass(result, reason)
                if options.max_passes is not None and passes >= options.max_passes:
                    break
                due = _due(options, _now())
                _write_state(state, status="sleeping", current_run=None, last_run=last_run,
                             next_pass=due.isoformat(timespec="seconds") if due else None,
                             traffic=str(options.tune.traffic))
                log.warning("next pass %s; watching %s for changes",
                            f"at {due.isoformat(timespec='seconds')}" if due else
                            "when the traffic changes", options.tune.traffic)
                reason = _sleep_until(due, watch, options.poll_s)
    except KeyboardInterrupt:
        log.warning("stopping%s", ": the interrupted run resumes on the next start with the "
                    "same inputs" if in_pass else "")
    _write_state(state, status="stopped", current_run=None, last_run=last_run, next_pass=None,
                 traffic=str(options.tune.traffic))
    return 0


def _sleep_until(due: datetime | None, watch: _Watch, poll_s: float) -> str:
    """Block (sleeping, not spinning) until ``due`` or a traffic change; say which."""
    while True:
        if watch.changed():
            return "traffic file changed"
        remaining = (due - _now()).total_seconds() if due else poll_s
        if due is not None and remaining <= 0:
            return "schedule"
        time.sleep(max(0.05, min(poll_s, remaining)))


def newest_samples(directory: Path, count: int = 1) -> list[Path]:
    """The ``count`` newest sample files (by modification time) in ``directory``."""
    if not directory.is_dir():
        raise ConfigError(f"--traffic-dir {directory}: not a directory")
    files = [p for p in directory.iterdir()
             if p.is_file() and p.name.endswith(SAMPLE_SUFFIXES)]
    if not files:
        raise ConfigError(f"--traffic-dir {directory}: holds no sample "
                          f"({', '.join('*' + s for s in SAMPLE_SUFFIXES)})")
    return sorted(files, key=lambda p: (p.stat().st_mtime, p.name), reverse=True)[:count]


def run_nightly(options: TuneOptions, store: Store, traffic_dir: Path, count: int = 1,
            reporter: Reporter | None = None) -> dict[str, Any]:
    """One pass over the newest sample(s); only drifted or new workloads are re-tuned."""
    summary: dict[str, Any] = {"status": "finished", "samples": []}
    for path in newest_samples(traffic_dir, count):
        result = tune(replace(options, traffic=path, drift_check=True), store, reporter)
        summary["samples"].append(pass_summary(path, result))
    return summary


def pass_summary(path: Path, result: TuneResult) -> dict[str, Any]:
    """What a pass tuned, promoted and skipped, and why (JSON-ready)."""
    tuned = []
    for w in result.workloads:
        rec = w.recommendation
        tuned.append({
            "workload": w.workload,
            "promoted": w.promoted,
            "status": rec.status if rec else "failed",
            "reason": w.reason,
            "config": dict(rec.config) if rec else None,
            "value": rec.value if rec else None,
            "speedup_vs_baseline": rec.speedup_vs_baseline if rec else None,
            "trials": w.trials,
            "stop_reason": w.stop_reason,
            "export": str(w.export_path) if w.export_path else None,
        })
    return {"sample": str(path), "run": result.run_id, "status": result.status,
            "tuned": tuned,
            "skipped": [{"workload": n, "reason": why} for n, why in result.skipped]}
