"""Signals at any moment of a daemon's life: one case = (signal, target, moment, pool).

A case starts ``autotune start --every 1h`` as its own process group, held at the moment
(``tests/holds``: the daemon announces its moments as audit events, and a hook the test puts on
its path holds it at the one named): once it is held, the case sends the signal to the process
or to its whole group (as ``timeout`` and systemd do), releases the hold, and records

- the exit status (a stop that hangs is given up on after :data:`STOP_GIVE_UP_S`) and the
  seconds from the signal to the exit (a figure for the matrix, not a pass/fail bound),
- the state file's status, the runs' statuses,
- the processes left behind: every process the daemon started (its Ray's GCS, raylet and
  workers, replicas) carries a tag in its environment, so any survivor is found in ``/proc``,
- whether ``start --once`` with the same inputs then resumes the run without measuring a
  finished trial again.

``tests/daemon/test_signals.py`` runs a representative subset in CI; the whole matrix runs
with ``python tests/daemon/signal_cases.py [--json]`` and prints one row per case.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SMALL = REPO / "examples" / "small.jsonl"
#: How long a case waits for the daemon to exit after the signal before calling it hung: far
#: above the few seconds a stop takes, below the minute a call to a Ray GCS that the same group
#: signal stopped would wait.
STOP_GIVE_UP_S = 45.0

#: moment → (where the daemon is held, whether a traffic change must trigger a second pass)
MOMENTS: dict[str, tuple[str, bool]] = {
    "loading": ("loading@1", False),
    "first-pass": ("trial@1", False),
    "drift-pass": ("trial@2", True),
    "pool-starting": ("pool-starting@1", False),
    "drift-pool-starting": ("pool-starting@2", True),
    "pool-stopping": ("pool-stopping@1", False),
    "sleeping": ("sleeping@1", False),
    "exporting": ("recommending@1", False),
}
RAY_ONLY = {"pool-starting", "drift-pool-starting", "pool-stopping"}
SIGNALS = {"TERM": signal.SIGTERM, "INT": signal.SIGINT, "HUP": signal.SIGHUP}


@dataclass(frozen=True)
class Case:
    sig: str  # TERM | INT | HUP
    target: str  # process | group
    moment: str  # a key of MOMENTS
    ray: bool  # replicas on a local Ray (2 replicas) or in the process (1 sim replica)

    @property
    def name(self) -> str:
        return f"SIG{self.sig}-{self.target}-{self.moment}-{'ray' if self.ray else 'serial'}"


@dataclass
class Outcome:
    case: str
    exit_code: int | None = None
    stop_s: float | None = None
    state: str | None = None
    runs: list[str] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    resumed: bool | None = None
    repeated: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (self.exit_code == 0 and self.state == "stopped" and not self.leftovers
                and not self.repeated and all(r in ("interrupted", "finished") for r in self.runs)
                and self.resumed is not False)

    def row(self) -> str:
        return (f"{self.case:42} exit={self.exit_code} stop={self.stop_s or 0:5.1f}s "
                f"state={self.state} runs={','.join(self.runs) or '-'} "
                f"leftovers={len(self.leftovers)} resumed={self.resumed} "
                f"repeated={len(self.repeated)} {'OK' if self.ok else 'FAIL'}")


PG_ENV = "AUTOTUNE_TEST_POSTGRES_URL"


@contextlib.contextmanager
def pg_schema(admin: str) -> Iterator[str]:
    """A URL of the PostgreSQL server ``admin`` whose search_path is a fresh, empty schema
    (dropped afterwards)."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    schema = f"autotune_test_{uuid.uuid4().hex[:12]}"
    engine = create_engine(admin)
    with engine.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    parsed = make_url(admin)
    url = parsed.set(query={**parsed.query, "options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with engine.begin() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        engine.dispose()


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a fresh, empty schema (dropped afterwards); the
    test skips when the server is not configured (CI sets it; see .ci/run)."""
    admin = os.environ.get(PG_ENV)
    if not admin:
        pytest.skip(f"{PG_ENV} is not set (CI sets it; see .ci/run)")
    with pg_schema(admin) as url:
        yield url


def write_inputs(folder: Path, trials: int = 2) -> tuple[Path, Path]:
    """A two-workload sample (code, math) and a quick policy."""
    from autotune.policy import DEFAULT_POLICY_PATH

    data = yaml.safe_load(DEFAULT_POLICY_PATH.read_text())
    data["budget"]["trials"] = trials
    data["replay"]["max_requests"] = 30
    data["replay"]["warmup_requests"] = 2
    data["search"] = {"strategy": "random"}  # cheap to ask: the moments are what matters
    policy = folder / "policy.yaml"
    policy.write_text(yaml.safe_dump(data))
    traffic = folder / "traffic.jsonl"
    write_traffic(traffic, code_output_scale=1)
    return traffic, policy


def write_traffic(path: Path, code_output_scale: int) -> None:
    rows = [json.loads(x) for x in SMALL.read_text().splitlines()]
    rows = [r for r in rows if r["workload"] in ("code", "math")]
    for r in rows:
        if r["workload"] == "code":
            r["output_tokens"] *= code_output_scale
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(path)


def tagged(tag: str) -> list[str]:
    """Live processes whose environment carries ``AUTOTUNE_TEST_TAG=tag`` (pid and name)."""
    needle = f"AUTOTUNE_TEST_TAG={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, state = stat[stat.index("(") + 1:stat.rindex(")")], stat.rsplit(")", 1)[1].split()[0]
        if state != "Z":
            found.append(f"{entry.name}:{name}")
    return found


def _runs(db: str) -> list[dict[str, Any]]:
    from autotune.store import Store

    store = Store.open(db, existing=True)
    try:
        return [r.to_json() for r in store.runs()]
    finally:
        store.close()


def _complete_trials(db: str) -> dict[tuple[str, str, int], dict[str, Any]]:
    from autotune.store import Store

    store = Store.open(db, existing=True)
    try:
        return {(t.run, t.workload, t.number): t.to_json() for t in store.trials()
                if t.state == "complete"}
    finally:
        store.close()


def _state(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _wait(what: str, check: Any, timeout: float, proc: subprocess.Popen[bytes]) -> None:
    """Poll ``check`` until it holds; fail when the daemon exits first or after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if proc.poll() is not None:
            raise AssertionError(f"the daemon exited ({proc.returncode}) before {what}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def processes_left(tag: str, give_up_s: float = 30.0) -> list[str]:
    """The tagged processes still running once they have had ``give_up_s`` to exit (a Ray's
    replica processes exit on their own once their raylet is gone, usually within a second)."""
    deadline = time.monotonic() + give_up_s
    while (left := tagged(tag)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def run_case(case: Case, folder: Path, *, resume: bool = True, timeout: float = 240.0
             ) -> Outcome:
    """Run one case in ``folder`` (fresh) and return what happened."""
    from holds import Holds  # imported here: `python signal_cases.py` puts tests/ on the path

    folder.mkdir(parents=True, exist_ok=True)
    out = Outcome(case.name)
    traffic, policy = write_inputs(folder)
    db = f"sqlite:///{folder / 'a.db'}"
    state = folder / "daemon.json"
    hold_at, drift = MOMENTS[case.moment]
    holds = Holds(folder / "holds")
    holds.hold_at(hold_at)
    tag = uuid.uuid4().hex
    env = {**os.environ, "AUTOTUNE_TEST_TAG": tag, "COLUMNS": "200",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    common = ["--traffic", str(traffic), "--policy", str(policy), "--db", db,
              "--export-dir", str(folder / "exports")]
    replicas = ["--replicas", "2"] if case.ray else ["--replicas", "1"]
    log = open(folder / "daemon.log", "wb")  # noqa: SIM115 (closed after the process ends)
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", "start", *common, "--every", "1h",
         "--state-file", str(state), *replicas],
        cwd=folder, stdout=log, stderr=subprocess.STDOUT, env=holds.env(env),
        start_new_session=True)
    try:
        if drift:
            _wait("the first pass", lambda: _state(state).get("status") == "sleeping", timeout,
                  proc)
            write_traffic(traffic, code_output_scale=6)  # code drifts, math does not
        held = holds.wait(proc, timeout)
        assert held.pid == proc.pid, held  # the daemon itself, not one of its replicas
        before = _complete_trials(db) if Path(folder / "a.db").exists() else {}
        t0 = time.monotonic()
        if case.target == "group":
            os.killpg(proc.pid, SIGNALS[case.sig])
        else:
            proc.send_signal(SIGNALS[case.sig])
        holds.release()
        try:
            out.exit_code = proc.wait(timeout=STOP_GIVE_UP_S)
            out.stop_s = round(time.monotonic() - t0, 2)
        except subprocess.TimeoutExpired:
            out.notes.append(f"still running {STOP_GIVE_UP_S:g} s after the signal")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    left = processes_left(tag)
    out.leftovers = left
    for pid in (int(p.split(":")[0]) for p in left):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    out.state = _state(state).get("status")
    runs = _runs(db) if (folder / "a.db").exists() else []
    out.runs = [r["status"] for r in runs]
    if not resume:
        return out
    unfinished = [r["run"] for r in runs if r["status"] != "finished"]
    again = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "start", *common, "--once", "--replicas", "1"],
        cwd=folder, capture_output=True, text=True, env=env,
        timeout=timeout)
    (folder / "resume.log").write_text(again.stderr)
    if again.returncode != 0:
        out.resumed = False
        out.notes.append(f"resume exited {again.returncode}: {again.stderr[-300:]}")
        return out
    if unfinished:
        out.resumed = f"resuming run {unfinished[0]}" in again.stderr and \
            next(r for r in _runs(db) if r["run"] == unfinished[0])["status"] == "finished"
    after = _complete_trials(db)
    out.repeated = [f"{k}" for k, t in before.items()
                    if k not in after or after[k]["id"] != t["id"]
                    or after[k]["metrics"] != t["metrics"]]
    return out


def matrix(ray: bool = True) -> list[Case]:
    """Every signal × target × moment (the Ray moments on a Ray pool; the others on both)."""
    cases = []
    for moment in MOMENTS:
        if moment in RAY_ONLY and not ray:
            continue
        for pool in ((True,) if moment in RAY_ONLY else ((False, True) if ray else (False,))):
            cases.extend(Case(sig, target, moment, pool)
                         for sig in SIGNALS for target in ("process", "group"))
    return cases


def main(argv: list[str]) -> int:
    import tempfile

    as_json = "--json" in argv
    only = [a for a in argv if not a.startswith("--")]
    cases = [c for c in matrix("--no-ray" not in argv) if not only or
             any(o in c.name for o in only)]
    results = []
    with tempfile.TemporaryDirectory(prefix="autotune-signals-") as tmp:
        for i, case in enumerate(cases):
            t0 = time.monotonic()
            try:
                o = run_case(case, Path(tmp) / f"case{i}")
            except AssertionError as e:
                o = Outcome(case.name, notes=[str(e)])
            o.notes.append(f"case took {time.monotonic() - t0:.0f} s")
            results.append(o)
            print(o.row() if not as_json else json.dumps(asdict(o) | {"ok": o.ok}),
                  flush=True)
    failed = [o for o in results if not o.ok]
    print(f"{len(results) - len(failed)}/{len(results)} cases OK", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path[:0] = [str(REPO), str(REPO / "tests")]  # autotune, and tests/holds
    sys.exit(main(sys.argv[1:]))
