"""A tiny autotune-like owner of a vLLM replica, run as a subprocess by the interruption tests.

``python vllm_driver.py TARGET DRAFT LOG_DIR replay|startup``: ``replay`` starts a replica,
prints ``PID <server pid>`` and ``URL <server url>``, then ``REPLAYING`` and replays a long
schedule; ``startup`` prints the server's pid as soon as it is launched (still loading). Either
way it runs as the CLI should: inside ``reap_servers_on_signals`` with the replica stopped in
``finally``.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from vllm_helpers import text_requests, tiny_serve

from autotune.backends.vllm import create_vllm_backend as create_vllm
from autotune.backends.vllm import reap_servers_on_signals
from autotune.backends.vllm._process import LIVE_SERVERS
from autotune.types import ReplaySchedule, TrialConfig


def _announce_launch() -> None:
    while True:
        live = LIVE_SERVERS.live()
        if live and live[0].pid is not None:
            print(f"PID {live[0].pid}", flush=True)
            return
        time.sleep(0.05)


def main() -> None:
    target, draft, log_dir, mode = sys.argv[1:5]
    serve = tiny_serve(Path(target), Path(draft))
    backend = create_vllm(serve, {"log_dir": log_dir, "startup_timeout_s": 300,
                                             "stop_grace_s": 20}, seed=0)
    with reap_servers_on_signals():
        if mode == "startup":
            threading.Thread(target=_announce_launch, daemon=True).start()
        replica = backend.start(TrialConfig(3, False, 2, 512))
        try:
            assert replica.server is not None
            print(f"PID {replica.server.pid}", flush=True)
            print(f"URL {replica.base_url}", flush=True)
            requests = text_requests(400, output_tokens=200, gap_s=None)
            print("REPLAYING", flush=True)
            replica.replay(ReplaySchedule(requests, mode="closed", concurrency=2))
            print("FINISHED", flush=True)
        finally:
            replica.stop()


if __name__ == "__main__":
    main()
