"""The docs stay true to the code: every policy key is documented as the schema says."""

from __future__ import annotations

from pathlib import Path

from autotune.policy import reference_markdown


def test_policy_reference_is_current(repo: Path) -> None:
    text = (repo / "docs" / "policies.md").read_text()
    assert reference_markdown() in text, (
        "docs/policies.md is stale: regenerate its 'Every key' table with "
        "python -c 'from autotune.policy import reference_markdown; print(reference_markdown())'")


def test_readme_opens_with_its_title_then_the_two_commands(repo: Path) -> None:
    lines = (repo / "README.md").read_text().splitlines()
    assert lines[0] == "# autotune" and lines[1] == ""
    assert lines[2] == "```"
    assert lines[3].startswith("make demo") and lines[4].startswith("make test")
    assert lines[5] == "```"
    ci = [ln for ln in (repo / ".ci" / "run").read_text().splitlines()
          if ln.strip() and not ln.startswith("#")]
    assert ci[-1] == "make test", "CI must run exactly the README's test command"
    makefile = (repo / "Makefile").read_text()
    assert "autotune start --traffic examples/sample.jsonl --once" in makefile


def _layout(repo: Path) -> dict[str, str]:
    """The README's Layout block: path -> what it says the path holds."""
    text = (repo / "README.md").read_text()
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    out = {}
    for line in block.strip().splitlines():
        path, _, what = line.partition(" ")
        out[path] = what.strip()
    return out


def test_readme_layout_matches_the_tree(repo: Path) -> None:
    layout = _layout(repo)
    for path, what in layout.items():
        assert (repo / path).exists(), f"README Layout lists {path}, which does not exist"
        assert what, f"README Layout says nothing about {path}"
    package = repo / "autotune"
    parts = {f"autotune/{p.name}" + ("/" if p.is_dir() else "") for p in package.iterdir()
             if (p.suffix == ".py" and p.name != "__init__.py")
             or (p.is_dir() and (p / "__init__.py").exists())}
    missing = sorted(parts - set(layout))
    assert not missing, f"README Layout omits {missing}"


def test_architecture_names_every_part(repo: Path) -> None:
    text = (repo / "docs" / "architecture.md").read_text()
    for path in _layout(repo):
        if path.startswith("autotune/"):
            name = path.removeprefix("autotune/").rstrip("/").removesuffix(".py")
            assert f"`{name}`" in text or f"autotune/{name}" in text, name
