"""The daemon and the nightly job: when to run tuning passes, and stopping cleanly.

``run_daemon`` tunes once, then sleeps until the next pass is due — the policy's cron schedule,
or ``--every`` — or until the traffic file changes (size or mtime first, then its sha256), and
tunes again. Scheduled and change-triggered passes re-tune only workloads whose traffic drifted
since their active recommendation was tuned (``autotune.traffic.drift``).

SIGTERM, SIGINT and SIGHUP stop it at any moment, sent to the process or to its whole process
group (``timeout``, systemd): :func:`~autotune.orchestrate.signals.stop_signals` turns the
first one into KeyboardInterrupt (later ones are ignored while stopping), the trial in flight
is aborted (its replica stopped, a Ray this pass started shut down), the run is marked
``interrupted`` (:func:`run_pass`), the state file says ``stopped`` and the daemon exits 0. A
state file (default ``storage/daemon.json``) says what the daemon is doing, for
``autotune status``. The daemon announces the moments ``loading`` and ``sleeping`` of its
passes (:mod:`~autotune.orchestrate.moments`).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.errors import AutotuneError, ConfigError, StoreError, TrafficError
from autotune.export import write_atomic
from autotune.orchestrate import Reporter, TuneOptions, TuneResult, tune
from autotune.orchestrate.moments import announce_moment
from autotune.orchestrate.processes import process_running
from autotune.orchestrate.signals import stop_signals
from autotune.store import HeldLease, LeaseHeld, Store
from autotune.store.engine import database_error_in
from autotune.traffic import file_sha256

if TYPE_CHECKING:
    from autotune.traffic.load import SampleWorkloads

__all__ = [
    "DEFAULT_STATE_PATH",
    "DaemonOptions",
    "newest_samples",
    "next_cron",
    "read_daemon_state",
    "run_daemon",
    "run_nightly",
    "run_pass",
    "tuning_lease",
    "write_stopped_state",
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


def _stop_main_thread(_why: str) -> None:
    """Stop the main thread as a signal would (the lease was lost)."""
    signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGTERM)


@contextmanager
def tuning_lease(store: Store, traffic: Path, command: str) -> Iterator[HeldLease]:
    """Hold the lease on ``traffic`` in ``store`` while the block runs (one process per database
    and traffic, ``autotune.store.lease``): raises LeaseHeld, naming the holder, when another
    process holds it. If the lease is lost meanwhile (taken over after this process could not
    renew it), the block is stopped as by a signal and ends with a StoreError saying so."""
    lease = HeldLease(store, traffic, command, on_lost=_stop_main_thread)
    with lease:
        try:
            yield lease
        except KeyboardInterrupt as e:
            if lease.lost:
                raise StoreError(lease.lost) from e
            raise


class _RunWatch(Reporter):
    """Passes every hook to ``inner`` and remembers the pass's run id (and says it in the state
    file), so a pass stopped half-way can mark its run."""

    def __init__(self, inner: Reporter, on_run: Callable[[str], None] | None = None) -> None:
        self.inner = inner
        self.on_run = on_run
        self.run_id: str | None = None

    def sample_loaded(self, sample: SampleWorkloads, workloads: Mapping[str, int]) -> None:
        self.inner.sample_loaded(sample, workloads)

    def run_started(self, run_id: str, resumed: bool, finished_trials: int) -> None:
        self.run_id = run_id
        if self.on_run is not None:
            self.on_run(run_id)
        self.inner.run_started(run_id, resumed, finished_trials)

    # The suggestion, outcome and result types belong to parts the daemon does not import.
    def trial_started(self, workload: str, s: Any, budget: int, finished: int) -> None:
        self.inner.trial_started(workload, s, budget, finished)

    def trial_finished(self, workload: str, s: Any, outcome: Any, error: str | None) -> None:
        self.inner.trial_finished(workload, s, outcome, error)

    def replay_progress(self, done: int, total: int | None) -> None:
        self.inner.replay_progress(done, total)

    def workload_finished(self, result: Any) -> None:
        self.inner.workload_finished(result)

    def workload_skipped(self, workload: str, why: str) -> None:
        self.inner.workload_skipped(workload, why)


def run_pass(options: TuneOptions, store: Store, reporter: Reporter | None = None, *,
             sample: SampleWorkloads | None = None,
             on_run: Callable[[str], None] | None = None) -> TuneResult:
    """One tuning pass whose run is never left ``running`` by a stop or an error.

    The pass marks its run ``interrupted`` or ``failed`` when trials are cut short; a stop or
    an error after them (while recommending or exporting) is marked here, so the next start
    with the same inputs resumes the run. A database error raised through another library
    (Optuna's storage shares the database) becomes the same one-line StoreError as autotune's
    own, and leaves the run resumable."""
    watch = _RunWatch(reporter or Reporter(), on_run)
    try:
        return tune(options, store, watch, sample=sample)
    except KeyboardInterrupt:
        _settle(store, watch.run_id, "interrupted", "interrupted by a signal (SIGTERM, SIGINT "
                "or SIGHUP)")
        raise
    except StoreError as e:  # the database failed, not the run: resume it when it is back
        _settle(store, watch.run_id, "interrupted", f"database error: {e}", also="failed")
        raise
    except AutotuneError as e:
        _settle(store, watch.run_id, "failed", f"{type(e).__name__}: {e}")
        raise
    except Exception as e:
        db = database_error_in(e, store.url)  # e.g. from Optuna's storage in the same database
        if db is None:
            _settle(store, watch.run_id, "failed", f"{type(e).__name__}: {e}")
            raise
        _settle(store, watch.run_id, "interrupted", f"database error: {db}", also="failed")
        raise db from e


def _settle(store: Store, run_id: str | None, status: str, why: str,
            also: str | None = None) -> None:
    """Mark ``run_id`` ``status`` if it is still ``running`` (or ``also``: a run the pass marked
    failed for a database error is resumable); never raises for the database."""
    if run_id is None:
        return
    try:
        if store.run(run_id).status in ("running", also):
            store.set_run_status(run_id, status, why)
    except (StoreError, OSError) as e:
        log.warning("cannot mark run %s %s: %s", run_id, status, e)


def _write_state(path: Path, **state: Any) -> None:
    state = {"pid": os.getpid(), "updated_at": _now().isoformat(timespec="seconds"), **state}
    try:
        write_atomic(path, json.dumps(state, indent=2, default=str) + "\n")
    except Exception as e:  # the state file is informative; never stop tuning for it
        log.warning("cannot write daemon state %s: %s", path, e)


def read_daemon_state(path: Path) -> dict[str, Any] | None:
    """The state file's content (plus ``alive``), or None when there is none. A file that
    cannot be read or is not a JSON object (damaged: a full disk, an editor) gives status
    ``unreadable`` with an ``error`` line; the daemon rewrites it whole on its next write."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        return _unreadable(path, f"cannot be read ({e.strerror or e})")
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError as e:  # UnicodeDecodeError included
        return _unreadable(path, f"is not valid JSON ({e})")
    if not isinstance(data, dict):
        return _unreadable(path, f"holds a JSON {type(data).__name__}, not an object")
    try:
        pid = int(data.get("pid") or 0)
    except (TypeError, ValueError):
        return _unreadable(path, f"has a pid that is not a number ({data.get('pid')!r})")
    data["alive"] = process_running(pid) and data.get("status") != "stopped"
    return data


def _unreadable(path: Path, why: str) -> dict[str, Any]:
    error = f"daemon state file {path} {why}; the next `autotune start` rewrites it"
    log.warning("%s", error)
    return {"status": "unreadable", "alive": False, "error": error}


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


def write_stopped_state(path: Path, traffic: Path, last_run: str | None = None,
                        error: str | None = None) -> None:
    """Say in the state file that the daemon stopped (with the error that stopped it)."""
    extra = {"error": error} if error else {}
    _write_state(path, status="stopped", current_run=None, last_run=last_run, next_pass=None,
                 traffic=str(traffic), **extra)


def run_daemon(options: DaemonOptions, store: Store,
               reporter: Callable[[], Reporter] = Reporter,
               on_pass: Callable[[TuneResult, str], None] | None = None) -> int:
    """Tune, then re-tune on schedule or traffic change until stopped; returns the exit code.

    A stop signal ends it with 0 (run interrupted, state ``stopped``); an error ends it with
    the error raised after the state file says ``stopped`` and why."""
    state = options.state_path
    traffic = options.tune.traffic
    watch = _Watch(traffic)
    passes = 0
    last_run: str | None = None
    reason = "start"
    in_pass = False

    def running(run_id: str) -> None:
        _write_state(state, status="tuning", reason=reason, current_run=run_id,
                     last_run=last_run, next_pass=None, traffic=str(traffic))

    try:
        with stop_signals(), tuning_lease(store, traffic, "start"):
            while True:
                in_pass = True
                _write_state(state, status="tuning", reason=reason, current_run=None,
                             last_run=last_run, next_pass=None, traffic=str(traffic))
                announce_moment("loading")
                if watch.path.exists():
                    watch.snapshot()
                opts = replace(options.tune, drift_check=passes > 0)
                try:
                    with reporter() as rep:
                        result = run_pass(opts, store, rep, on_run=running)
                except TrafficError as e:
                    if passes == 0:
                        raise
                    log.error("pass skipped: %s", e)  # keep serving the last recommendations
                    result = None
                in_pass = False
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
                             traffic=str(traffic))
                log.warning("next pass %s; watching %s for changes",
                            f"at {due.isoformat(timespec='seconds')}" if due else
                            "when the traffic changes", traffic)
                announce_moment("sleeping")
                reason = _sleep_until(due, watch, options.poll_s)
    except KeyboardInterrupt as e:
        log.warning("stopping on %s%s", e.args[0] if e.args else "SIGINT",
                    ": the interrupted run resumes on the next start with the same inputs"
                    if in_pass else "")
    except LeaseHeld:
        raise  # another daemon's: its state file is not this one's to write
    except AutotuneError as e:
        write_stopped_state(state, traffic, last_run, error=str(e).splitlines()[0])
        raise
    except BaseException as e:
        write_stopped_state(state, traffic, last_run, error=f"{type(e).__name__}: {e}")
        raise
    write_stopped_state(state, traffic, last_run)
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
        with tuning_lease(store, path, "nightly"):
            announce_moment("loading")
            result = run_pass(replace(options, traffic=path, drift_check=True), store,
                              reporter)
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
            "runner_up": w.race.as_dict() if w.race else None,
            "export": str(w.export_path) if w.export_path else None,
        })
    return {"sample": str(path), "run": result.run_id, "status": result.status,
            "tuned": tuned, "cost": dict(result.cost) or None,
            "budget_stop": result.budget_stop,
            "skipped": [{"workload": n, "reason": why} for n, why in result.skipped],
            "plan": result.plan.headline() if result.plan else None,
            "plan_note": result.plan_note or None}
