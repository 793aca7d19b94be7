"""The moments a pass announces, and the tests' hook that holds a process at one of them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from holds import Holds
from holds.holding import EVENT

from autotune.orchestrate.moments import MOMENT_EVENT

REPO = Path(__file__).resolve().parents[2]


def held_script(holds: Holds, code: str) -> subprocess.Popen[str]:
    """``code`` in a fresh interpreter started to be held through ``holds``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO),
                                                        os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=holds.env(env))


def test_the_hook_listens_to_the_event_autotune_raises() -> None:
    assert EVENT == MOMENT_EVENT


def test_a_process_is_held_at_the_moment_of_the_pass_named_and_a_signal_lands_there(
        tmp_path: Path) -> None:
    holds = Holds(tmp_path / "holds")
    holds.hold_at("trial@2")
    proc = held_script(holds, """
        import signal
        from autotune.orchestrate.moments import announce_moment

        def stop(signum, frame):
            raise KeyboardInterrupt(signal.Signals(signum).name)

        signal.signal(signal.SIGTERM, stop)
        reached = []
        try:
            for moment in ("loading", "trial", "recommending", "loading", "trial", "sleeping"):
                reached.append(moment)
                announce_moment(moment)
        except KeyboardInterrupt as e:
            print(f"{e} after {' '.join(reached)}")
    """)
    try:
        held = holds.wait(proc, timeout_s=60)
        assert (held.moment, held.pass_number, held.pid) == ("trial", 2, proc.pid)
        proc.send_signal(signal.SIGTERM)
    finally:
        holds.release()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out == "SIGTERM after loading trial recommending loading trial\n"


def test_a_moment_without_a_pass_is_held_once_in_whichever_process_reaches_it(
        tmp_path: Path) -> None:
    holds = Holds(tmp_path / "holds")
    holds.hold_at("replaying")
    code = """
        from autotune.orchestrate.moments import announce_moment
        announce_moment("replaying")
        print("went on")
    """
    first = held_script(holds, code)
    held = holds.wait(first, timeout_s=60)
    assert (held.moment, held.pass_number, held.pid) == ("replaying", 0, first.pid)
    second = held_script(holds, code)  # the hold is taken: this one goes on
    assert second.communicate(timeout=60) == ("went on\n", "")
    assert first.poll() is None  # still held
    holds.release()
    assert first.communicate(timeout=60) == ("went on\n", "")
