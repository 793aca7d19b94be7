"""The Dockerfile's structure (no Docker engine runs here, so it is checked, not built)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path


def instructions(repo: Path) -> list[tuple[str, str]]:
    text = (repo / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_base_image_is_a_vllm_openai_tag_given_as_build_arg(repo: Path) -> None:
    ins = instructions(repo)
    first_from = next(i for i, (w, _) in enumerate(ins) if w == "FROM")
    args_before = [rest for w, rest in ins[:first_from] if w == "ARG"]
    assert "VLLM_IMAGE_TAG=nightly" in args_before
    assert ins[first_from][1] == "vllm/vllm-openai:${VLLM_IMAGE_TAG}"


def test_installs_autotune_with_its_extras_and_runs_as_non_root(repo: Path) -> None:
    ins = instructions(repo)
    runs = " ".join(rest for w, rest in ins if w == "RUN")
    assert "[vllm,postgres]" in runs and "pip install" in runs
    users = [rest for w, rest in ins if w == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert "useradd" in runs and users[-1].split(":")[0] in runs


def test_entrypoint_cmd_and_healthcheck(repo: Path) -> None:
    ins = dict(instructions(repo))
    assert json.loads(ins["ENTRYPOINT"]) == ["autotune"]
    assert json.loads(ins["CMD"]) == ["start", "--traffic", "/data/traffic.jsonl"]
    health = ins["HEALTHCHECK"]
    assert "CMD" in health
    cmd = json.loads(health[health.index("CMD") + 3:].strip())
    assert cmd[:2] == ["autotune", "status"] and "--check" in cmd
    # every COPY source exists in the repo
    for w, rest in instructions(repo):
        if w == "COPY":
            for src in shlex.split(rest)[:-1]:
                assert (repo / src).exists(), src
