"""``python -m bench.regret``: the regret benchmark's command line (:mod:`bench.regret.run`)."""

from __future__ import annotations

from bench.regret.run import main

if __name__ == "__main__":
    raise SystemExit(main())
