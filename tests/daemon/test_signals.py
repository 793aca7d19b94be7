"""Signals at moments of a daemon's life (a representative subset of the matrix in
``signal_cases.py``; the whole matrix: ``python tests/daemon/signal_cases.py``).

Each case: the daemon held at the moment, the signal sent to the process or its whole group,
then exit 0 (a stop that hangs is given up on, see ``STOP_GIVE_UP_S``), the run interrupted
(or finished), the state file ``stopped``, no process of the daemon's left (its Ray included),
and ``start --once`` with the same inputs resumes the run without measuring a finished trial
again.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from signal_cases import Case, run_case

pytestmark = pytest.mark.slow

CI_CASES = [
    # Ray's own SIGTERM handler (sys.exit(15): run failed) and its GCS, stopped by the same
    # group signal, which made the stop hang for a minute on the way out (`timeout`, systemd).
    pytest.param(Case("TERM", "group", "pool-starting", ray=True), marks=pytest.mark.ray),
    # The pass a traffic change triggered (it exited 15 and failed the run on Ray).
    Case("TERM", "process", "drift-pass", ray=False),
    # After the trials, while recommending and exporting: the run was left `running`.
    Case("INT", "process", "exporting", ray=False),
]


@pytest.mark.parametrize("case", CI_CASES, ids=lambda c: c.name)
def test_a_stop_signal_at_this_moment_stops_cleanly_and_resumes(case: Case,
                                                                 tmp_path: Path) -> None:
    out = run_case(case, tmp_path)
    log = (tmp_path / "daemon.log").read_text(errors="replace")
    assert out.exit_code == 0, (out.notes, log)
    assert out.state == "stopped"
    assert out.runs and all(r in ("interrupted", "finished") for r in out.runs), out.runs
    assert "interrupted" in out.runs
    assert out.leftovers == []
    assert out.resumed is True, out.notes
    assert out.repeated == []
    assert "Traceback" not in log


def test_sighup_to_the_group_while_sleeping(tmp_path: Path) -> None:
    out = run_case(Case("HUP", "group", "sleeping", ray=False), tmp_path, resume=False)
    assert (out.exit_code, out.state, out.runs, out.leftovers) == (0, "stopped", ["finished"], [])
