"""autotune: tunes speculative decoding and batching for vLLM serving from production traffic."""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
