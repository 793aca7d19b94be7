"""`autotune --help` must stay fast: importing the CLI pulls in no heavy module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HEAVY = ("ray", "optuna", "scipy", "matplotlib", "vllm", "torch", "sqlalchemy", "numpy")


def test_help_imports_no_heavy_module() -> None:
    code = (
        "import sys\n"
        "from autotune.cli import cli\n"
        "try:\n"
        "    cli.main(['--help'], standalone_mode=False)\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print('HEAVY:' + ','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Usage: " in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "HEAVY:"


def test_help_works_as_a_real_subprocess() -> None:
    for args in (["--help"], ["start", "--help"], ["export", "--help"], ["traffic", "inspect",
                                                                          "--help"]):
        out = subprocess.run([sys.executable, "-m", "autotune.cli", *args], capture_output=True,
                             text=True)
        assert out.returncode == 0, out.stderr
        assert "Example" in out.stdout or "Commands" in out.stdout


def test_read_only_commands_import_no_numpy_or_search(tmp_path: Path) -> None:
    """Listing and exporting read the database only: no numpy, pydantic, Optuna or Ray."""
    db = f"sqlite:///{tmp_path / 'a.db'}"
    subprocess.run([sys.executable, "-m", "autotune.cli", "db", "upgrade", "--db", db],
                   capture_output=True, text=True, check=True)
    code = (
        "import sys\n"
        "from autotune.cli import cli\n"
        "try:\n"
        "    cli.main(sys.argv[1:], standalone_mode=False)\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('LOADED:' + ','.join(m for m in ('numpy', 'pydantic', 'optuna', 'ray', 'scipy') "
        "if m in sys.modules))\n"
    )
    for args in (["recommendations"], ["trials"], ["runs"], ["recommendations", "--history"]):
        out = subprocess.run([sys.executable, "-c", code, *args, "--db", db],
                             capture_output=True, text=True, check=True)
        assert out.stdout.strip().splitlines()[-1] == "LOADED:", (args, out.stdout, out.stderr)
