"""What the accelerators a replica runs on can do: memory bandwidth, dense BF16 FLOPs, memory.

The figures are the vendors' published peak numbers (sources below); the step-cost model
applies stated achievable fractions of them and fits multipliers to what runs measure. A
replica's hardware comes from the policy (``hardware: {gpu: H200, count: 8}``) or, when the
policy names none, from what Ray reports for the nodes the replicas run on (its
``accelerator_type:<kind>`` node resource, e.g. ``H100``, ``A100-80G``,
``AMD-Instinct-MI300X-OAM``). Hardware the table does not know is not guessed: the predictor
then learns the step cost from the runs it pays for, with wide priors
(:attr:`HardwareFacts.known` is False).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GPU_SPECS", "HardwareFacts", "hardware_facts"]


@dataclass(frozen=True)
class GpuSpec:
    hbm_bytes_per_s: float
    bf16_flops: float   # dense (no sparsity)
    memory_bytes: float
    source: str


#: Published peak figures per GPU kind (names as users write them; lookups ignore case,
#: spaces, dashes and a trailing "SXM").
GPU_SPECS: dict[str, GpuSpec] = {
    "H200": GpuSpec(4.8e12, 989e12, 141e9, "NVIDIA H200 Tensor Core GPU datasheet (SXM)"),
    "H100": GpuSpec(3.35e12, 989e12, 80e9, "NVIDIA H100 Tensor Core GPU datasheet (SXM5)"),
    "H100 PCIE": GpuSpec(2.0e12, 756e12, 80e9, "NVIDIA H100 Tensor Core GPU datasheet (PCIe)"),
    "A100": GpuSpec(2.039e12, 312e12, 80e9, "NVIDIA A100 Tensor Core GPU datasheet (80GB SXM)"),
    "L40S": GpuSpec(0.864e12, 362e12, 48e9, "NVIDIA L40S datasheet"),
    "B200": GpuSpec(8.0e12, 2250e12, 180e9, "NVIDIA DGX B200 / HGX B200 datasheet, per GPU"),
    "MI300X": GpuSpec(5.3e12, 1307e12, 192e9, "AMD Instinct MI300X datasheet"),
}


def _key(name: str) -> str:
    return name.upper().replace("-", " ").replace("_", " ").removesuffix(" SXM").strip()


_BY_KEY = {_key(k): k for k in GPU_SPECS}
#: Ray's accelerator type names (ray.util.accelerators) for the kinds above where they differ.
#: The 40 GB A100 has another bandwidth (1.555 TB/s) and is left unknown.
_BY_KEY.update({_key("A100-80G"): "A100", _key("AMD-Instinct-MI300X-OAM"): "MI300X"})


@dataclass(frozen=True)
class HardwareFacts:
    """One replica's accelerators (``count`` of them, tensor parallel across them)."""

    kind: str
    count: int
    hbm_bytes_per_s: float   # per accelerator
    bf16_flops: float        # per accelerator, dense
    memory_bytes: float      # per accelerator
    source: str
    known: bool = True


def hardware_facts(gpu: str | None, count: int) -> HardwareFacts:
    """The facts of ``count`` × ``gpu``; unknown (and ``known`` False) when the table lacks it.

    Unknown hardware gets H100-like placeholder figures: the step cost is then learned from
    the measured runs, from wide priors, not taken from these numbers.
    """
    name = _BY_KEY.get(_key(gpu)) if gpu else None
    if name is None:
        spec = GPU_SPECS["H100"]
        return HardwareFacts(gpu or "unknown", count, spec.hbm_bytes_per_s, spec.bf16_flops,
                             spec.memory_bytes, "not in autotune's table: learned from the runs",
                             known=False)
    spec = GPU_SPECS[name]
    return HardwareFacts(name, count, spec.hbm_bytes_per_s, spec.bf16_flops, spec.memory_bytes,
                         spec.source)
