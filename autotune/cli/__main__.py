"""``python -m autotune.cli``: the command line."""

from autotune.cli import main

main()
