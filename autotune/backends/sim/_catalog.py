"""What the shipped profiles are, in one line each (``autotune sim profiles``,
bench/regret/worlds.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.backends.sim._profile import Profile, TableCost, known_profiles, load_profile

__all__ = ["ProfileSummary", "profile_catalog", "summarize_profile"]


@dataclass(frozen=True, slots=True)
class ProfileSummary:
    """One profile: its target, hardware, cost law, drafters and where its numbers come from."""

    name: str
    model: str
    hardware: str
    gpu: str
    gpu_count: int
    tensor_parallel_size: int
    cost_law: str
    table: str | None
    drafters: tuple[tuple[str, str, str], ...]  # (name, kind parallel|sequential, model)
    source: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model, "hardware": self.hardware,
                "gpu": self.gpu, "gpu_count": self.gpu_count,
                "tensor_parallel_size": self.tensor_parallel_size, "cost_law": self.cost_law,
                "table": self.table,
                "drafters": [{"name": n, "kind": k, "model": m} for n, k, m in self.drafters],
                "source": self.source}

    def cells(self) -> tuple[str, str, str, str, str]:
        """Table cells: profile, model, hardware, cost law, drafters (kind)."""
        drafters = "\n".join(f"{n} ({k})" for n, k, _ in self.drafters)
        hardware = f"{self.gpu_count}x {self.gpu} TP{self.tensor_parallel_size}"
        return self.name, self.model.rsplit("/", 1)[-1], hardware, self.cost_law, drafters


def _hardware(text: str) -> tuple[str, int, int]:
    """(GPU kind, count, tensor parallel size) from a profile's hardware line, e.g.
    '8x NVIDIA H200 141GB (HBM3e), tensor parallel 8, ...' -> ('H200', 8, 8)."""
    head = text.split(",", 1)[0]
    count_text, _, rest = head.partition("x ")
    count = int(count_text) if count_text.strip().isdigit() else 1
    words = [w for w in rest.split() if w.upper() not in ("NVIDIA", "AMD")]
    gpu = words[0] if words else "unknown"
    tp = count
    marker = "tensor parallel "
    if marker in text:
        digits = text.split(marker, 1)[1].split(",", 1)[0].strip()
        tp = int(digits) if digits.isdigit() else count
    return gpu, count, tp


def summarize_profile(profile: Profile) -> ProfileSummary:
    gpu, count, tp = _hardware(profile.hardware)
    table = profile.cost.table_file if isinstance(profile.cost, TableCost) else None
    return ProfileSummary(
        name=profile.name, model=profile.model, hardware=profile.hardware, gpu=gpu,
        gpu_count=count, tensor_parallel_size=tp, cost_law=profile.cost.law, table=table,
        drafters=tuple((name, d.kind, d.model) for name, d in sorted(profile.drafters.items())),
        source=profile.source)


def profile_catalog() -> list[ProfileSummary]:
    """Every shipped profile, by name."""
    return [summarize_profile(load_profile(name)) for name in known_profiles()]
