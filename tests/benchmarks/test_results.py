"""bench/results keeps per benchmark one canonical file, the readings that re-score it and a
manifest: every file there is in its folder's manifest.json with the code commit, machine, date
and command that made it, and every file a manifest names exists. Beside the folders there is one
file, HISTORY.md: what earlier runs measured, run by run."""

from __future__ import annotations

import json

from bench.paths import RESULTS

FACTS = {"what", "commit", "machine", "date", "command"}


def test_every_result_file_is_in_its_manifest_with_its_provenance() -> None:
    folders = sorted(p for p in RESULTS.iterdir() if p.is_dir())
    assert folders and [p.name for p in RESULTS.iterdir() if p.is_file()] == ["HISTORY.md"]
    for folder in folders:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        files = manifest["files"]
        assert manifest["canonical"] in files, folder.name
        on_disk = {str(p.relative_to(folder)) for p in folder.rglob("*")
                   if p.is_file() and p.name != "manifest.json"}
        assert on_disk == set(files), folder.name
        for name, facts in files.items():
            missing = FACTS - {k for k, v in facts.items() if v}
            assert not missing, f"{folder.name}/{name} lacks {sorted(missing)}"


def test_the_regret_result_keeps_its_shape() -> None:
    """regret-worlds.json: each world's methods under ``worlds``, as the docs and the Markdown
    table (python -m bench.regret.table) read it."""
    data = json.loads((RESULTS / "regret" / "regret-worlds.json").read_text(encoding="utf-8"))
    worlds = data["result"]["worlds"]
    assert worlds and all("guided" in w["methods"] for w in worlds.values())
    assert set(data["units"]) == set(worlds)
