"""One process per database and traffic: a lease row with a heartbeat.

``autotune start`` (daemon or ``--once``) and ``autotune nightly`` hold a lease on the traffic
they tune before they write anything: a row of ``autotune_leases`` keyed by the traffic's
absolute path, naming the holder (host, pid, a random token) with a heartbeat and an expiry.
A background thread renews it every quarter of its time to live (``$AUTOTUNE_LEASE_TTL``
seconds, default 60). A second process on the same database and traffic is refused with
:class:`LeaseHeld` (one line naming the holder's host and pid), unless

- the lease expired (its holder stopped renewing it: killed, frozen, its host lost), or
- the holder ran on this machine, in this pid namespace, and is gone (``kill -9``, a crash):
  then it is taken over at once instead of at expiry.

Taking over is logged with the previous holder. The lease is released on every way out of
the block (a clean exit, a signal, an error). A holder whose lease was taken over meanwhile (it
could not renew it for longer than its time to live) learns it at its next renewal: ``lost``
says by whom, and ``on_lost`` is called (the daemon stops).

The acquisition is one write transaction (SQLite ``BEGIN IMMEDIATE``; PostgreSQL ``SELECT ...
FOR UPDATE`` on the row, and the primary key against two first inserts), so of two processes
starting at once exactly one gets the lease.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError

from autotune.errors import ConfigError, StoreError
from autotune.store.engine import redact
from autotune.store.models import LeaseRow, utcnow
from autotune.store.records import iso
from autotune.store.store import Store

__all__ = [
    "DEFAULT_LEASE_TTL_S",
    "LEASE_TTL_ENV",
    "HeldLease",
    "LeaseHeld",
    "LeaseRecord",
    "lease_key",
    "lease_ttl",
    "leases",
]

log = logging.getLogger(__name__)

LEASE_TTL_ENV = "AUTOTUNE_LEASE_TTL"
DEFAULT_LEASE_TTL_S = 60.0


class LeaseHeld(StoreError):
    """Another live process holds the lease on this traffic and database."""

    exit_code = 3


@dataclass(frozen=True)
class LeaseRecord:
    traffic: str
    host: str
    pid: int
    command: str
    acquired_at: datetime
    heartbeat_at: datetime
    expires_at: datetime

    def live(self, now: datetime) -> bool:
        """False once the holder stopped renewing it for its time to live."""
        return self.expires_at > now

    def describe(self, now: datetime) -> str:
        """``autotune start on host h, pid 7 (since ... UTC, last heartbeat 3 s ago)``."""
        beat = (now - self.heartbeat_at).total_seconds()
        return (f"autotune {self.command} on host {self.host}, pid {self.pid} (since "
                f"{self.acquired_at:%Y-%m-%d %H:%M:%S} UTC, last heartbeat {beat:.0f} s ago)")

    def to_json(self, now: datetime | None = None) -> dict[str, Any]:
        return {"traffic": self.traffic, "host": self.host, "pid": self.pid,
                "command": self.command, "since": iso(self.acquired_at),
                "heartbeat_at": iso(self.heartbeat_at), "expires_at": iso(self.expires_at),
                "live": self.live(now or utcnow())}


def lease_key(traffic: str | Path) -> str:
    """What a lease is on: the traffic's absolute path (a file, or a nightly job's sample)."""
    return str(Path(traffic).expanduser().resolve())


def lease_ttl() -> float:
    """Seconds a lease lives without a heartbeat: ``$AUTOTUNE_LEASE_TTL``, else 60."""
    raw = os.environ.get(LEASE_TTL_ENV)
    if not raw:
        return DEFAULT_LEASE_TTL_S
    try:
        ttl = float(raw)
    except ValueError:
        ttl = -1.0
    if not ttl > 0:
        raise ConfigError(f"${LEASE_TTL_ENV}={raw!r} is not a number of seconds above 0; "
                          f"unset it for the default of {DEFAULT_LEASE_TTL_S:g}")
    return ttl


def _aware(t: datetime) -> datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)  # SQLite drops the zone


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def _start_ticks(pid: int) -> str:
    """The start time of process ``pid`` (clock ticks since boot), '' when there is none."""
    stat = _read(f"/proc/{pid}/stat")
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 and fields[0] != "Z" else ""


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""


def _process_identity(pid: int) -> str:
    return f"{_read('/proc/sys/kernel/random/boot_id')}/{_pid_namespace()}/{_start_ticks(pid)}"


def _holder_gone(row: LeaseRow) -> bool:
    """True when the holder ran on this machine and pid namespace and no longer runs."""
    boot, _, rest = row.process.partition("/")
    namespace, _, started = rest.partition("/")
    if not boot or not namespace or not started:
        return False  # identity unknown: only expiry tells
    mine = _process_identity(os.getpid()).split("/")
    if [boot, namespace] != mine[:2]:
        return False  # another machine or container: its pids are not ours to look at
    return _start_ticks(row.pid) != started


def _describe(row: LeaseRow, now: datetime) -> str:
    return _record(row).describe(now)


def _record(row: LeaseRow) -> LeaseRecord:
    return LeaseRecord(traffic=row.traffic, host=row.host, pid=row.pid, command=row.command,
                       acquired_at=_aware(row.acquired_at),
                       heartbeat_at=_aware(row.heartbeat_at), expires_at=_aware(row.expires_at))


def leases(store: Store) -> list[LeaseRecord]:
    """Every lease in the database (live or expired), by traffic."""
    with store._read() as s:
        return [_record(r) for r in s.scalars(select(LeaseRow).order_by(LeaseRow.traffic))]


class HeldLease:
    """``with HeldLease(store, traffic, "start"):`` holds the lease on ``traffic`` for the block
    (see the module docstring); raises :class:`LeaseHeld` on entry when another holds it."""

    def __init__(self, store: Store, traffic: str | Path, command: str, *,
                 ttl_s: float | None = None,
                 on_lost: Callable[[str], None] | None = None) -> None:
        self.store = store
        self.traffic = lease_key(traffic)
        self.key = hashlib.sha256(self.traffic.encode()).hexdigest()
        self.command = command
        self.ttl_s = lease_ttl() if ttl_s is None else ttl_s
        self.on_lost = on_lost
        self.token = uuid.uuid4().hex
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------------- the block
    def __enter__(self) -> HeldLease:
        try:
            self._acquire()
        except StoreError as e:
            if not isinstance(e.__cause__, IntegrityError):
                raise
            self._acquire()  # another process inserted the row first: now it is seen
        self._thread = threading.Thread(target=self._beat, name="autotune-lease",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.lost is None:
            try:
                with self.store.session() as s:
                    s.execute(delete(LeaseRow).where(LeaseRow.key_sha256 == self.key,
                                                     LeaseRow.holder == self.token))
            except StoreError as e:
                log.warning("cannot release the lease on %s (it expires %g s after the last "
                            "heartbeat): %s", self.traffic, self.ttl_s, e)

    # ---------------------------------------------------------------------- internals
    def _acquire(self) -> None:
        now = utcnow()
        with self.store.session() as s:
            row = s.scalar(select(LeaseRow).where(LeaseRow.key_sha256 == self.key)
                           .with_for_update())
            if row is not None:
                expired = _aware(row.expires_at) <= now
                if not expired and not _holder_gone(row):
                    raise LeaseHeld(
                        f"traffic {self.traffic} is already being tuned on database "
                        f"{redact(self.store.url)} by {_describe(row, now)}; stop that one "
                        "first, or wait for its lease to expire "
                        f"({(_aware(row.expires_at) - now).total_seconds():.0f} s without a "
                        "heartbeat)")
                log.warning("taking over the lease on %s from %s: %s", self.traffic,
                            _describe(row, now),
                            "it expired" if expired else "that process is gone")
                s.delete(row)
                s.flush()
            s.add(LeaseRow(key_sha256=self.key, traffic=self.traffic, holder=self.token,
                           host=socket.gethostname(), pid=os.getpid(),
                           process=_process_identity(os.getpid()), command=self.command,
                           acquired_at=now, heartbeat_at=now,
                           expires_at=now + timedelta(seconds=self.ttl_s)))

    def _renew(self) -> bool:
        """Push the expiry on; False when the lease is no longer this process's."""
        now = utcnow()
        with self.store.session() as s:
            done = s.execute(update(LeaseRow)
                             .where(LeaseRow.key_sha256 == self.key,
                                    LeaseRow.holder == self.token)
                             .values(heartbeat_at=now,
                                     expires_at=now + timedelta(seconds=self.ttl_s)))
            if getattr(done, "rowcount", 1) == 1:
                return True
            row = s.scalar(select(LeaseRow).where(LeaseRow.key_sha256 == self.key))
            self.lost = (f"lost the lease on {self.traffic}: "
                         + (f"taken over by {_describe(row, now)}" if row is not None else
                            "it was removed")
                         + f" after this process could not renew it for {self.ttl_s:g} s")
            return False

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl_s / 4):
            try:
                if self._renew():
                    continue
            except StoreError as e:
                log.warning("cannot renew the lease on %s: %s", self.traffic, e)
                continue
            log.error("%s", self.lost)
            if self.on_lost is not None and self.lost is not None:
                self.on_lost(self.lost)
            return
