"""The docs stay true to the code: every policy key is documented as the schema says."""

from __future__ import annotations

from pathlib import Path

from autotune.policy import reference_markdown


def test_policy_reference_is_current(repo: Path) -> None:
    text = (repo / "docs" / "policies.md").read_text()
    assert reference_markdown() in text, (
        "docs/policies.md is stale: regenerate its 'Every key' table with "
        "python -c 'from autotune.policy import reference_markdown; print(reference_markdown())'")


def test_readme_opens_with_the_two_commands(repo: Path) -> None:
    lines = (repo / "README.md").read_text().splitlines()
    assert lines[0] == "```"
    assert lines[1].startswith("make demo") and lines[2].startswith("make test")
    assert lines[3] == "```"
    ci = (repo / ".ci" / "run").read_text()
    assert "make test" in ci
    makefile = (repo / "Makefile").read_text()
    assert "autotune start --traffic examples/sample.jsonl --once" in makefile
