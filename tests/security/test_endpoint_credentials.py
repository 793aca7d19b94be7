"""Credentials in an ``--endpoint`` URL reach the server and nothing else.

A real ``autotune start --backend vllm --endpoint URL`` process attaches to a scripted OpenAI
server (``tests/backends/vllm/fake_openai.py``) that answers 401 to any request without the
URL's basic auth (``user:password@``) and its query token (``?api_key=``). The pass runs at
debug verbosity; then ``runs``, ``trials``, ``recommendations``, ``export`` and ``report`` read
it back. The password, the user and the token must appear in no output, no file written and no
row of the database; the stored provenance names the endpoint with ``***`` in their place. A
second pass with a wrong token fails its trials with an error that does not carry it either.
Run again on two replicas, the URL travels to Ray actors (a local Ray the pass starts): then
every file of Ray's session (its logs and event files, under ``$RAY_TMPDIR``) is searched too.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from autotune.redact import redact_text, redact_url

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "backends" / "vllm"))

from fake_openai import running_fake  # noqa: E402


def _policy(path: Path) -> Path:
    path.write_text(yaml.safe_dump({
        "name": "attach-credentials",
        "serve": {"model": "fake-model", "method": "ngram", "draft_block_size": 4,
                  "tensor_parallel_size": 1, "gpus_per_replica": 0, "max_model_len": 512},
        "space": {"num_speculative_tokens": [1, 2], "enable_adaptive_verification": [False],
                  "max_num_seqs": [4], "max_num_batched_tokens": [512]},
        "objective": {"maximize": "output_tokens_per_s",
                      "slo": {"ttft_p99_ms": 60000, "itl_p99_ms": 60000}},
        "baseline": {"num_speculative_tokens": 1, "enable_adaptive_verification": False,
                     "max_num_seqs": 4, "max_num_batched_tokens": 512},
        "budget": {"trials": 2, "max_retries": 0},
        "search": {"strategy": "grid"},
        "replay": {"mode": "closed", "concurrency": 2, "max_requests": 6,
                   "warmup_requests": 1},
        "outputs": {"prompts": 0},  # the scripted server decodes no real tokens to compare
    }))
    return path


def _traffic(path: Path) -> Path:
    path.write_text("".join(json.dumps({"id": f"r{i}", "workload": "chat", "prompt": "per=2",
                                        "prompt_tokens": 5, "output_tokens": 8}) + "\n"
                            for i in range(6)))
    return path


def _rows(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        return "\n".join(conn.iterdump())


@pytest.fixture
def ray_tmp() -> Iterator[Path]:
    """A short $RAY_TMPDIR (Ray's socket paths must stay short), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("replicas", [
    pytest.param(None, id="in-process"),
    pytest.param(2, id="ray-replicas", marks=[pytest.mark.ray, pytest.mark.slow]),
])
def test_endpoint_credentials_never_leave_memory(tmp_path: Path, ray_tmp: Path,
                                                 replicas: int | None) -> None:
    user, password, token = "alice", f"pw-{uuid.uuid4().hex}", f"tok-{uuid.uuid4().hex}"
    secrets = {"the password": password, "the token": token, "the user": f"{user}:"}
    db = tmp_path / "autotune.db"
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200", "RAY_TMPDIR": str(ray_tmp)}
    for name in ("AUTOTUNE_DB_URL", "RAY_ADDRESS"):
        env.pop(name, None)

    outputs: list[str] = []

    def autotune(*args: str | Path) -> str:
        """Run the command at debug verbosity; keep stdout and stderr, return stdout."""
        proc = subprocess.run([sys.executable, "-m", "autotune.cli", "-vv", *map(str, args)],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)
        outputs.extend([proc.stdout, proc.stderr])
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    policy, traffic = _policy(tmp_path / "policy.yaml"), _traffic(tmp_path / "chat.jsonl")
    common = ("--traffic", traffic, "--policy", policy, "--backend", "vllm", "--once",
              "--db", f"sqlite:///{db}", "--export-dir", tmp_path / "exports",
              *(("--replicas", str(replicas)) if replicas else ()))
    with running_fake(credentials=(user, password), query={"api_key": token}) as fake:
        port = fake.server_address[1]
        endpoint = f"http://{user}:{password}@127.0.0.1:{port}/v1?api_key={token}"
        autotune("start", *common, "--endpoint", endpoint)
        assert fake.refused == 0 and len(fake.exchanges) >= 10  # the client sent them all
        served = len(fake.exchanges)
        wrong = endpoint.replace(token, token[::-1])
        autotune("start", *common, "--seed", "1", "--endpoint", wrong)
        assert fake.refused > 0 and len(fake.exchanges) == served
    shown = f"http://***@127.0.0.1:{port}?api_key=***"
    assert f"attached to {shown.replace('?', '/v1?')}: no restarts" in outputs[1]
    url = f"sqlite:///{db}"
    assert len(json.loads(autotune("runs", "--db", url, "--format", "json"))) == 2
    trials = json.loads(autotune("trials", "--db", url, "--format", "json"))
    failed = [t for t in trials if t["state"] == "failed"]
    assert len(failed) == 2 and all("HTTP 401" in t["error"] for t in failed), failed
    ran_on = {t["replica"] for t in trials}
    assert ran_on == ({"ray-0", "ray-1"} if replicas else {"local-0"}), ran_on
    (rec,) = json.loads(autotune("recommendations", "--db", url, "--history", "--format",
                                 "json"))
    assert rec["provenance"]["backend_details"]["endpoint"] == shown
    autotune("export", "--db", url, "--workload", "chat", "--format", "vllm-args", "-o",
             tmp_path / "chat.sh")
    autotune("report", "--db", url, "-o", tmp_path / "report.html")

    written = sorted(p for p in tmp_path.rglob("*") if p.is_file() and p != db
                     and p.suffix != ".yaml" and p.name != "chat.jsonl")
    assert {p.name for p in written} >= {"chat.sh", "report.html",
                                         "chat.speculative-config.json"}
    texts = {"the commands' output and logs": "\n".join(outputs), "the database": _rows(db)}
    texts.update({str(p): p.read_text(errors="replace") for p in written})
    ray_files = [p for p in ray_tmp.rglob("*") if p.is_file() and not p.is_socket()]
    assert bool(ray_files) == bool(replicas)  # Ray ran exactly when replicas were asked for
    assert not replicas or any(p.name.startswith("worker-") for p in ray_files)  # actors' logs
    texts.update({str(p): p.read_text(errors="replace") for p in ray_files})
    assert shown in texts["the database"]  # the rows searched hold the endpoint, redacted
    for where, text in texts.items():
        for what, secret in secrets.items():
            assert secret not in text, f"{what} found in {where}"



@pytest.mark.parametrize("url, shown", [
    ("http://10.0.0.5:8000", "http://10.0.0.5:8000"),  # nothing to hide: unchanged
    ("https://vllm.example/v1", "https://vllm.example/v1"),
    ("http://u:p@10.0.0.5:8000", "http://***@10.0.0.5:8000"),
    ("http://token@[::1]:8000/x", "http://***@[::1]:8000/x"),
    ("https://h/v1?api_key=k&region=eu", "https://h/v1?api_key=***&region=***"),
    ("https://h/#access_token=k", "https://h/#***"),
    ("http://[::1", "***"),  # cannot be parsed: hidden whole
])
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redact_text_hides_each_url_in_a_message() -> None:
    text = ("cannot reach http://a:b@h:1/health?key=s (Client error '401' for url "
            "'http://h:1/v1/models?key=s'), see http://docs.example/x.")
    assert redact_text(text) == (
        "cannot reach http://***@h:1/health?key=*** (Client error '401' for url "
        "'http://h:1/v1/models?key=***'), see http://docs.example/x.")


def test_the_vllm_options_never_show_the_endpoint_credentials() -> None:
    from autotune.backends.vllm import parse_options
    from autotune.errors import ConfigError

    opts = parse_options({"endpoint": "http://u:secret@h:8000/v1/?api_key=tok"})
    assert opts.endpoint == "http://u:secret@h:8000?api_key=tok"  # in memory, for the client
    access = opts.access()
    assert access is not None
    assert (access.url, access.auth, access.params) == (
        "http://h:8000", ("u", "secret"), (("api_key", "tok"),))
    for text in (repr(opts), str(opts), repr(access), opts.shown_endpoint() or ""):
        assert "secret" not in text and "tok" not in text, text
    with pytest.raises(ConfigError) as e:
        parse_options({"endpoint": "ftp://u:secret@h:8000?api_key=tok"})
    assert "secret" not in str(e.value) and "endpoint='ftp://***@h:8000?api_key=***'" in str(
        e.value)


@pytest.mark.parametrize("endpoint", ["ftp://u:secret@h:80?api_key=tok",
                                      "http://u:secret@h:port?api_key=tok",
                                      "http://tok:secret"])
def test_a_bad_endpoint_is_refused_naming_the_flag_without_its_credentials(
        tmp_path: Path, endpoint: str) -> None:
    from click.testing import CliRunner

    from autotune.cli import cli

    db = tmp_path / "a.db"
    result = CliRunner().invoke(cli, [
        "start", "--traffic", str(REPO / "examples" / "small.jsonl"), "--backend", "vllm",
        "--endpoint", endpoint, "--once", "--db", f"sqlite:///{db}"])
    assert result.exit_code == 2 and result.stdout == ""
    assert "Invalid value for --endpoint: '" in result.stderr
    assert "expected an http(s) URL" in result.stderr
    assert "secret" not in result.stderr and "tok" not in result.stderr
    assert not db.exists()  # nothing written
