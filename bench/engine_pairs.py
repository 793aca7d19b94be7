"""The real-engine benchmark pairs: a 12-layer Llama target and its one-layer early-exit draft.

The recipes and the builder live in tests/fixtures/spec_pair.py (the CI test builds tiny pairs
with the same code): a target whose layers 2..12 write ε-scaled updates into the residual
stream, and a draft that is the target cut after layer 1. ``eps005`` (ε 0.05) and ``eps002``
(ε 0.02) differ only in ε, so the draft agrees with the target less often in the first.
Pairs are built once and cached by the recipe's hash (``$AUTOTUNE_PAIR_CACHE`` or
``~/.cache/autotune-pairs``).

    nice .venv/bin/python bench/engine_pairs.py --json             # build; recipes and paths
    nice .venv/bin/python bench/engine_pairs.py --measure --json   # + agreement, forward ms
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def spec_pair() -> ModuleType:
    """tests/fixtures/spec_pair.py, loaded by path (tests/ is not a package)."""
    name = "autotune_tests_spec_pair"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, REPO / "tests" / "fixtures" / "spec_pair.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def names() -> list[str]:
    return list(spec_pair().BENCH_PAIRS)


def build(name: str, cache: Path | None = None) -> Any:
    """The built (or cached) benchmark pair ``name`` (a ``SpecPair``)."""
    sp = spec_pair()
    if name not in sp.BENCH_PAIRS:
        raise SystemExit(f"unknown pair {name!r}; known: {', '.join(sp.BENCH_PAIRS)}")
    return sp.build_pair(sp.BENCH_PAIRS[name], cache)


def describe(pair: Any, measure: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"digest": pair.digest, "recipe": dataclasses.asdict(pair.recipe),
                           "target": str(pair.target), "draft": str(pair.draft)}
    if measure:
        sp = spec_pair()
        out["greedy_agreement"] = round(sp.greedy_agreement(pair, sp._prompts(8)), 3)
        out["target_forward_ms"] = round(sp.forward_ms(pair.target), 2)
        out["draft_forward_ms"] = round(sp.forward_ms(pair.draft), 2)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pair", action="append", help="only these pairs (default: all)")
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--measure", action="store_true",
                        help="greedy agreement on 8 GSM8K prompts x 32 tokens (teacher-forced) "
                             "and single-token decode forward CPU ms at 128 tokens of "
                             "context (transformers, fp32, one thread)")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args(argv)
    result = {n: describe(build(n, args.cache), args.measure) for n in (args.pair or names())}
    if args.json:
        print(json.dumps(result))
    else:
        for n, d in result.items():
            extra = {k: v for k, v in d.items() if k not in ("recipe", "target", "draft")}
            print(n, d["recipe"]["epsilon"], extra, d["target"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
