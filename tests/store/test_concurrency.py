"""While a run writes, concurrent readers (the CLI's read commands) see whole results only.

Four reader processes run `recommendations`, `recommendations --history`, `trials` and
`export` in a loop through the real CLI while a writer records trials and promotes
recommendations as fast as it can, until every reader has completed a few reads during the
writes and the writer has written a few rounds (each reader reports its reads in a file, the
writer its rounds in a counter; the test polls both, with a generous give-up deadline). Every
read must succeed (no lock error) and be consistent: exactly one active recommendation, no trial
half-written, counts that never go back.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from autotune.store import Store
from autotune.types import TrialConfig

#: Reads each reader must complete while the writer writes, and the writer's rounds meanwhile.
READS_DURING_WRITES = 4
WRITES_DURING_READS = 10
#: Give-up deadline of each wait (a hung reader or writer, not a slow machine).
GIVE_UP_S = 300.0

READER = textwrap.dedent('''
    import contextlib, io, json, os, shlex, sys, time
    from pathlib import Path
    from autotune.cli import cli

    url, run_id, kind, progress, stop = sys.argv[1:6]

    def call(*args):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            cli.main(list(args), standalone_mode=False)
        return out.getvalue()

    def check_active(rec):
        c = rec["config"]
        assert rec["status"] == "active", rec
        assert rec["speculative_config"]["num_speculative_tokens"] == c["num_speculative_tokens"]
        assert rec["value"] == c["max_num_seqs"] + 0.5, rec

    seen = 0
    iterations = 0
    Path(progress).write_text("0")
    while True:
        last = Path(stop).exists()
        if kind == "recommendations":
            recs = json.loads(call("recommendations", "--workload", "code", "--db", url,
                                   "--format", "json"))
            assert len(recs) == 1, recs
            check_active(recs[0])
            assert recs[0]["config"]["max_num_seqs"] >= seen, (recs[0], seen)
            seen = recs[0]["config"]["max_num_seqs"]
        elif kind == "history":
            recs = json.loads(call("recommendations", "--workload", "code", "--history",
                                   "--db", url, "--format", "json"))
            active = [r for r in recs if r["status"] == "active"]
            assert len(active) == 1, [r["status"] for r in recs]
            check_active(active[0])
            ids = {r["id"] for r in recs}
            for r in recs:
                if r["status"] == "retired":
                    assert r["retired_by"] in ids and r["retired_at"], r
            assert len(recs) >= seen
            seen = len(recs)
        elif kind == "trials":
            trials = json.loads(call("trials", "--run", run_id, "--db", url, "--format", "json"))
            for t in trials:
                if t["state"] == "complete":
                    assert t["value"] == t["number"] + 0.25, t
                    assert t["metrics"]["goodput"] == t["value"], t
                else:
                    assert t["state"] == "running" and t["value"] is None, t
            assert len(trials) >= seen
            seen = len(trials)
        else:
            spec = json.loads(call("export", "--workload", "code", "--db", url))
            assert 1 <= spec["num_speculative_tokens"] <= 7, spec
            args = shlex.split(call("export", "--workload", "code", "--db", url,
                                    "--format", "vllm-args"), comments=True)
            assert args[:3] == ["vllm", "serve", "m"], args
            seqs = int(args[args.index("--max-num-seqs") + 1])
            assert seqs >= seen, (seqs, seen)
            seen = seqs
        iterations += 1
        # whole or not at all: the test reads this file while it is rewritten
        Path(progress + ".tmp").write_text(str(iterations))
        os.replace(progress + ".tmp", progress)
        if last:
            break
    print(iterations)
''')


def _recommend(store: Store, rid: str, i: int) -> None:
    k = i % 7 + 1
    store.add_recommendation(
        workload="code",
        config=TrialConfig(k, False, i, 8192),
        speculative_config={"method": "dspark", "model": "d", "num_speculative_tokens": k},
        serve={"model": "m"}, objective="goodput", value=i + 0.5, baseline_value=1.0,
        run_id=rid, trial_id=None, backend="sim", provenance={}, promote=True,
        reason=f"write {i}")


def _writer(url: str, rid: str, stop: threading.Event, done: list[Any],
            rounds: list[int]) -> None:
    store = Store.open(url)
    i = 1
    try:
        per_request = {"ttft_s": [0.1] * 500, "tpot_s": [0.02] * 500, "e2e_s": [2.0] * 500,
                       "output_tokens": [100] * 500, "ok": [True] * 500}
        while not stop.is_set():
            store.record_trial(run_id=rid, workload="code", number=i, state="running",
                               params={"n": i})
            store.record_trial(run_id=rid, workload="code", number=i, state="complete",
                               params={"n": i}, value=i + 0.25, metrics={"goodput": i + 0.25},
                               per_request=per_request)
            _recommend(store, rid, i + 1)
            rounds[0] = i
            i += 1
        done.append(i)
    except BaseException as e:  # reported by the test
        done.append(e)
    finally:
        store.close()


@pytest.mark.slow
def test_readers_never_see_partial_results_while_a_run_writes(db_url: str,
                                                              tmp_path: Path) -> None:
    store = Store.open(db_url)
    sid = store.record_sample(path="x", sha256="c" * 64, size_bytes=1, requests=1,
                              skipped_lines=0, workloads={"code": {"requests": 1}})
    rid = store.create_run(backend="sim", policy_name="p", policy_sha256="h", policy={},
                           sample_id=sid, seed=0)
    _recommend(store, rid, 1)
    store.close()

    stop = tmp_path / "stop"
    kinds = ["recommendations", "history", "trials", "export"]
    readers = []
    for kind in kinds:
        progress = tmp_path / f"progress-{kind}"
        readers.append((progress, subprocess.Popen(
            [sys.executable, "-c", READER, db_url, rid, kind, str(progress), str(stop)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))

    def reads() -> list[int]:
        return [int(p.read_text() or 0) if p.exists() else -1 for p, _ in readers]

    def readers_alive() -> bool:
        return all(proc.poll() is None for _, proc in readers)

    def wait_until(condition: Callable[[], bool]) -> None:
        """Poll until ``condition`` holds, a reader died, or the give-up deadline passed."""
        deadline = time.monotonic() + GIVE_UP_S
        while not condition() and readers_alive() and time.monotonic() < deadline:
            time.sleep(0.05)

    wait_until(lambda: min(reads()) >= 0)  # every reader is up

    done: list[Any] = []
    rounds = [0]
    writing = threading.Event()
    writer = threading.Thread(target=_writer, args=(db_url, rid, writing, done, rounds))
    writer.start()
    before = reads()

    def during() -> list[int]:
        return [a - b for a, b in zip(reads(), before, strict=True)]

    wait_until(lambda: not writer.is_alive() or (min(during()) >= READS_DURING_WRITES
                                                 and rounds[0] >= WRITES_DURING_READS))
    reads_during, writes_during = during(), rounds[0]
    writing.set()
    writer.join(timeout=GIVE_UP_S)
    stop.touch()
    results = []
    for (_, proc), kind in zip(readers, kinds, strict=True):
        out, err = proc.communicate(timeout=GIVE_UP_S)
        results.append((kind, proc.returncode, out.strip(), err.strip()[-2000:]))
    assert done and isinstance(done[0], int), done
    for kind, rc, _, err in results:
        assert rc == 0, f"{kind} reader failed:\n{err}"
    assert min(reads_during) >= READS_DURING_WRITES, dict(zip(kinds, reads_during, strict=True))
    assert writes_during >= WRITES_DURING_READS  # the writer really wrote meanwhile
