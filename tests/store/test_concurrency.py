"""While a run writes, concurrent readers (the CLI's read commands) see whole results only.

Four reader processes run `recommendations`, `recommendations --history`, `trials` and
`export` in a loop through the real CLI while a writer records trials and promotes
recommendations as fast as it can. Every read must succeed (no lock error) and be consistent:
exactly one active recommendation, no trial half-written, counts that never go back.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from autotune.store import Store

WRITE_SECONDS = 3.0

READER = textwrap.dedent('''
    import contextlib, io, json, shlex, sys, time
    from pathlib import Path
    from autotune.cli import cli

    url, run_id, kind, ready, stop = sys.argv[1:6]

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
    Path(ready).touch()
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
                                    "--format", "vllm-args"))
            assert args[:3] == ["vllm", "serve", "m"], args
            seqs = int(args[args.index("--max-num-seqs") + 1])
            assert seqs >= seen, (seqs, seen)
            seen = seqs
        iterations += 1
        if last:
            break
    print(iterations)
''')


def _recommend(store: Store, rid: str, i: int) -> None:
    k = i % 7 + 1
    store.add_recommendation(
        workload="code",
        config={"num_speculative_tokens": k, "enable_adaptive_verification": False,
                "max_num_seqs": i, "max_num_batched_tokens": 8192},
        speculative_config={"method": "dspark", "model": "d", "num_speculative_tokens": k},
        serve={"model": "m"}, objective="goodput", value=i + 0.5, baseline_value=1.0,
        run_id=rid, trial_id=None, backend="sim", provenance={}, promote=True,
        reason=f"write {i}")


def _writer(url: str, rid: str, stop_at: float, done: list[Any]) -> None:
    store = Store.open(url)
    i = 1
    try:
        per_request = {"ttft_s": [0.1] * 500, "tpot_s": [0.02] * 500, "e2e_s": [2.0] * 500,
                       "output_tokens": [100] * 500, "ok": [True] * 500}
        while time.monotonic() < stop_at:
            store.record_trial(run_id=rid, workload="code", number=i, state="running",
                               params={"n": i})
            store.record_trial(run_id=rid, workload="code", number=i, state="complete",
                               params={"n": i}, value=i + 0.25, metrics={"goodput": i + 0.25},
                               per_request=per_request)
            _recommend(store, rid, i + 1)
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
        ready = tmp_path / f"ready-{kind}"
        readers.append((ready, subprocess.Popen(
            [sys.executable, "-c", READER, db_url, rid, kind, str(ready), str(stop)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    deadline = time.monotonic() + 60
    while not all(r.exists() for r, _ in readers) and time.monotonic() < deadline:
        if any(p.poll() is not None for _, p in readers):
            break
        time.sleep(0.05)

    done: list[Any] = []
    writer = threading.Thread(target=_writer,
                              args=(db_url, rid, time.monotonic() + WRITE_SECONDS, done))
    writer.start()
    writer.join(timeout=120)
    stop.touch()
    results = []
    for (_, proc), kind in zip(readers, kinds, strict=True):
        out, err = proc.communicate(timeout=120)
        results.append((kind, proc.returncode, out.strip(), err.strip()[-2000:]))
    assert done and isinstance(done[0], int), done
    for kind, rc, out, err in results:
        assert rc == 0, f"{kind} reader failed:\n{err}"
        assert int(out) >= 3, f"{kind} reader ran only {out} times"
    assert done[0] > 20  # the writer really wrote a lot meanwhile
