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
from autotune.policy import DEFAULT_POLICY_PATH


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


def test_the_corpus_holds_at_least_30_kinds_of_bad_lines() -> None:
    assert len(KINDS) >= 30
    assert len({k.name for k in KINDS + FILE_KINDS}) == len(KINDS) + len(FILE_KINDS)


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
