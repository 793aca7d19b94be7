"""Every kind of malformed sample in the corpus, through `traffic inspect` and `start --once`.

Each must exit 2 with one line naming ``file:line`` and the reason, no traceback, and nothing
written: no database file, no export, no state file. With ``--skip-invalid`` the bad line is
skipped and counted and the good ones load.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from sample_corpus import FILE_KINDS, KINDS, Kind, write

from autotune.cli import cli
from autotune.errors import TrafficError
from autotune.policy import DEFAULT_POLICY_PATH, load_policy
from autotune.traffic import read_sample
from autotune.traffic.writer import request_record
from autotune.types import Request


def _inspect(path: Path, *extra: str) -> Result:
    return CliRunner().invoke(cli, ["traffic", "inspect", str(path), "--policy",
                                    str(DEFAULT_POLICY_PATH), *extra])


def _start_once(path: Path, workdir: Path, *extra: str) -> Result:
    return CliRunner().invoke(cli, [
        "start", "--once", "--traffic", str(path), "--db", f"sqlite:///{workdir / 'at.db'}",
        "--export-dir", str(workdir / "exports"), "--state-file", str(workdir / "state.json"),
        *extra])


def _assert_refused(res: Result, path: Path, kind: Kind) -> None:
    err = res.stderr
    assert res.exit_code == 2, (kind.name, res.exit_code, err, res.exception)
    assert "Traceback" not in res.output and isinstance(res.exception, SystemExit), err
    (message,) = [line for line in err.splitlines() if line.startswith("error: ")]
    if kind.line is None:
        assert message.startswith(f"error: {path}: "), message
    else:
        where = re.escape(f"{path}:") + (str(kind.line) if kind.line else r"\d+") + ": "
        assert re.match("error: " + where, message), message
    assert kind.says in message, message


def _field_named(kind: Kind, directory: Path) -> str | None:
    """The field the reader names refusing ``kind`` (index dropped: ``acceptance[1]``)."""
    policy = load_policy(DEFAULT_POLICY_PATH)
    sample = read_sample(write(kind, directory), max_acceptance=policy.serve.draft_block_size,
                         max_model_len=policy.serve.max_model_len)
    with pytest.raises(TrafficError) as err:
        list(sample)
    assert err.value.line == (kind.line or err.value.line), (kind.name, str(err.value))
    return err.value.field.split("[")[0] if err.value.field else None


def test_every_field_of_a_sample_line_has_a_bad_value_in_the_corpus(tmp_path: Path) -> None:
    # The fields a sample line can carry: those the writer emits for a request with every
    # field set, and timestamp (the alternative to arrival_s). A field added to the format
    # without a malformed case here fails this test.
    full = Request(id="x", prompt_tokens=1, output_tokens=1, arrival_s=0.0, workload="w",
                   prompt="p", acceptance=(0.5,), temperature=0.5)
    fields = {*request_record(full), "timestamp"}
    named = {_field_named(kind, tmp_path) for kind in KINDS}
    assert fields <= named, f"no corpus kind breaks {sorted(fields - named)}"


@pytest.mark.parametrize("kind", KINDS + FILE_KINDS, ids=lambda k: k.name)
def test_inspect_refuses_naming_file_and_line(kind: Kind, tmp_path: Path) -> None:
    path = write(kind, tmp_path)
    skip = ("--skip-invalid",) if kind in FILE_KINDS and "skip" in kind.name else ()
    _assert_refused(_inspect(path, *skip), path, kind)


@pytest.mark.parametrize("kind", [k for k in KINDS if k.skippable], ids=lambda k: k.name)
def test_inspect_skips_and_counts_the_bad_line(kind: Kind, tmp_path: Path) -> None:
    path = write(kind, tmp_path)
    res = _inspect(path, "--skip-invalid", "--format", "json")
    assert res.exit_code == 0, res.stderr
    assert f"skipped 1 invalid lines of {path}" in res.stderr
    assert '"requests": 1' in res.stdout


@pytest.mark.parametrize("kind", KINDS + FILE_KINDS, ids=lambda k: k.name)
def test_start_once_refuses_and_writes_nothing(kind: Kind, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(kind, tmp_path)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)  # the default storage/ would land here
    skip = ("--skip-invalid",) if kind in FILE_KINDS and "skip" in kind.name else ()
    res = _start_once(path, tmp_path, *skip)
    _assert_refused(res, path, kind)
    assert list(cwd.iterdir()) == [], "start wrote into the working directory"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cwd", path.name], \
        "start wrote a database, an export or a state file"
