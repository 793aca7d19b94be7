"""Finding a model's ``config.json`` without downloading anything.

In order: ``model`` is a local folder holding ``config.json``; the local Hugging Face cache
(``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``) holds a snapshot
of it; autotune's own catalog of published configs (``autotune/predict/catalog/``, each with
its source) has it. Nothing is fetched from a hub at run time.
"""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["catalog_models", "find_model_config"]


def _hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME")
    return (Path(home) if home else Path.home() / ".cache" / "huggingface") / "hub"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _catalog_file(model: str) -> Any:
    root = resources.files("autotune.predict") / "catalog"
    return root / (model.replace("/", "--") + ".json")


def catalog_models() -> list[str]:
    """Models whose published config autotune ships."""
    root = resources.files("autotune.predict") / "catalog"
    return sorted(p.name.removesuffix(".json").replace("--", "/", 1)
                  for p in root.iterdir() if p.name.endswith(".json"))


def find_model_config(model: str) -> tuple[dict[str, Any], str] | None:
    """``(config, where it was found)`` for ``model`` (a path or a hub id), or None."""
    local = Path(model).expanduser()
    if (local / "config.json").is_file():
        cfg = _read(local / "config.json")
        if cfg is not None:
            return cfg, f"{local / 'config.json'}"
    if "/" in model and not local.exists():
        snapshots = _hub_cache() / f"models--{model.replace('/', '--')}" / "snapshots"
        if snapshots.is_dir():
            found = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime)
            for path in reversed(found):
                cfg = _read(path)
                if cfg is not None:
                    return cfg, f"{path} (Hugging Face cache)"
    entry = _catalog_file(model)
    if entry.is_file():
        data = json.loads(entry.read_text(encoding="utf-8"))
        return dict(data["config"]), f"{data['source']} (autotune's catalog)"
    return None
