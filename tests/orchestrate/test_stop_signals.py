"""How the stop signals stop a pass: one that arrives while Ray starts or stops is held until
the block ends, and Ray cannot replace their handlers meanwhile."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from holds import Holds

REPO = Path(__file__).resolve().parents[2]

#: A pool starting (held at its moment) inside the stop signals' block.
POOL_STARTING = """
    import signal
    from autotune.orchestrate.moments import announce_moment
    from autotune.orchestrate.signals import signals_held, stop_signals

    with stop_signals():
        try:
            with signals_held():
                announce_moment("pool-starting")
                print("Ray's handler kept out:", signal.signal(signal.SIGTERM, signal.SIG_IGN)
                      is not signal.SIG_IGN)
                print("the start finished")
            print("not reached: the held signal is delivered as the block ends")
        except KeyboardInterrupt as e:
            print("stopped on", e)
"""


def test_a_signal_while_ray_starts_is_held_then_stops_the_pass(tmp_path: Path) -> None:
    holds = Holds(tmp_path / "holds")
    holds.hold_at("pool-starting")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(POOL_STARTING)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=holds.env(env))
    try:
        assert holds.wait(proc, timeout_s=60).pid == proc.pid
        proc.send_signal(signal.SIGTERM)
    finally:
        holds.release()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.splitlines() == ["Ray's handler kept out: True", "the start finished",
                                "stopped on SIGTERM"]
