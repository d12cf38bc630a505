"""GPU presets: memory, HBM bandwidth, dense bf16 tensor throughput and PCIe bandwidth.

These four numbers drive the KV capacity (memory), the roofline step time (bandwidth and
FLOP/s) and the swap cost (PCIe). Presets come from NVIDIA datasheets (cited per entry); a
custom GPU is built from explicit numbers, or a preset with some numbers overridden. A run on
`tp` GPUs uses `tp` identical GPUs (tensor parallelism; see ModelConfig.check_tp).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from sim.cost.names import alias_table, norm_name

GIB = 1 << 30


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    """One GPU. Units: GiB, GB/s (1e9 B/s), TFLOP/s (1e12), PCIe GB/s in one direction.

    Invariant: every number > 0. `bf16_tflops` is the dense (no 2:4 sparsity) tensor-core rate.
    `sms` (streaming multiprocessors) sets how many attention programs run at once in the
    fitted step model's tile-wave term; a custom GPU gets the H100 / H200 count unless given.
    """

    name: str
    memory_gib: float
    hbm_gbps: float
    bf16_tflops: float
    pcie_gbps: float
    sms: int = 132

    def __post_init__(self) -> None:
        for field in ("memory_gib", "hbm_gbps", "bf16_tflops", "pcie_gbps", "sms"):
            value = getattr(self, field)
            if not value > 0:
                raise ValueError(f"gpu {self.name}: {field} must be > 0, got {value}")

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * GIB)

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_gbps * 1e9

    @property
    def flops_per_s(self) -> float:
        return self.bf16_tflops * 1e12

    @property
    def pcie_bytes_per_s(self) -> float:
        return self.pcie_gbps * 1e9


# SMs: the architecture whitepapers (A100 108, H100 SXM5 132, H200 the H100's GH100 die with
# 132, L4 58, L40S 142, RTX 4090 128).
# PCIe: datasheets quote both directions together (Gen4 x16 "64 GB/s", Gen5 x16 "128 GB/s");
# a swap copies one way, so the presets hold half. Tensor rates are the datasheets' dense bf16
# figures (the headline numbers with sparsity are twice these). Memory is the nominal size read
# as GiB, as the PagedAttention paper does; CUDA exposes about 1% less (H200 measured below).
PRESETS: dict[str, GpuSpec] = {g.name: g for g in (
    # NVIDIA A100 Tensor Core GPU datasheet (SXM4): 40GB HBM2, 1,555 GB/s, BF16 312 TFLOPS,
    # PCIe Gen4 64 GB/s.
    GpuSpec(name="A100-40GB", memory_gib=40, hbm_gbps=1555, bf16_tflops=312,
            pcie_gbps=32, sms=108),
    # Same datasheet, 80GB HBM2e SXM4: 2,039 GB/s.
    GpuSpec(name="A100-80GB", memory_gib=80, hbm_gbps=2039, bf16_tflops=312,
            pcie_gbps=32, sms=108),
    # NVIDIA H100 Tensor Core GPU datasheet (SXM): 80GB HBM3, 3.35 TB/s, BF16 1,979 TFLOPS with
    # sparsity (989 dense), PCIe Gen5 128 GB/s.
    GpuSpec(name="H100-80GB", memory_gib=80, hbm_gbps=3350, bf16_tflops=989,
            pcie_gbps=64, sms=132),
    # NVIDIA H200 datasheet (SXM): 141GB HBM3e, 4.8 TB/s, BF16 989 dense, PCIe Gen5 128 GB/s.
    # Memory: torch.cuda.mem_get_info() on an H200 reported 150,109,880,320 B = 139.8 GiB total,
    # the figure vLLM multiplies by gpu_memory_utilization.
    GpuSpec(name="H200-141GB", memory_gib=139.8, hbm_gbps=4800, bf16_tflops=989,
            pcie_gbps=64, sms=132),
    # NVIDIA L4 datasheet: 24GB GDDR6, 300 GB/s, BF16 242 TFLOPS with sparsity, PCIe Gen4 x16.
    GpuSpec(name="L4", memory_gib=24, hbm_gbps=300, bf16_tflops=121,
            pcie_gbps=32, sms=58),
    # NVIDIA L40S datasheet: 48GB GDDR6, 864 GB/s, BF16 362.05 TFLOPS dense, PCIe Gen4 x16.
    GpuSpec(name="L40S", memory_gib=48, hbm_gbps=864, bf16_tflops=362,
            pcie_gbps=32, sms=142),
    # NVIDIA Ada GPU architecture whitepaper, GeForce RTX 4090: 24GB GDDR6X, 1,008 GB/s,
    # BF16 (FP32 accumulate) 165.2 TFLOPS dense, PCIe Gen4 x16.
    GpuSpec(name="RTX-4090", memory_gib=24, hbm_gbps=1008, bf16_tflops=165.2,
            pcie_gbps=32, sms=128),
)}

_EXTRA_ALIASES: dict[str, tuple[str, ...]] = {
    "A100-40GB": ("a100-40g", "a100-sxm4-40gb", "NVIDIA A100-SXM4-40GB"),
    "A100-80GB": ("a100-80g", "a100-sxm4-80gb", "NVIDIA A100-SXM4-80GB"),
    "H100-80GB": ("h100", "h100-sxm", "h100-80gb-hbm3", "NVIDIA H100 80GB HBM3"),
    "H200-141GB": ("h200", "h200-sxm", "NVIDIA H200"),
    "L4": ("NVIDIA L4",),
    "L40S": ("NVIDIA L40S",),
    "RTX-4090": ("4090", "geforce-rtx-4090", "NVIDIA GeForce RTX 4090"),
}


_ALIASES = alias_table(PRESETS, _EXTRA_ALIASES)


def resolve_gpu_name(name: str) -> str | None:
    """Canonical preset name (case-insensitive; '-', '_', spaces ignored; torch device names
    such as 'NVIDIA H200' accepted), or None."""
    return _ALIASES.get(norm_name(name))


def get_gpu(name: str) -> GpuSpec:
    """A preset by name or alias. Raises ValueError listing the presets when unknown."""
    canonical = resolve_gpu_name(name)
    if canonical is None:
        raise ValueError(f"unknown gpu {name!r}; presets: {', '.join(PRESETS)}; or give "
                         "--gpu custom with --gpu-mem-gib --gpu-hbm-gbps --gpu-tflops "
                         "--gpu-pcie-gbps")
    return PRESETS[canonical]


def make_gpu(name: str = "A100-80GB", *, memory_gib: float | None = None,
             hbm_gbps: float | None = None, tflops: float | None = None,
             pcie_gbps: float | None = None) -> GpuSpec:
    """A preset with any given numbers overridden, or (name 'custom') a GPU from all four.

    Raises:
        ValueError: unknown preset, 'custom' without all four numbers, or a number <= 0.
    """
    given = {"memory_gib": memory_gib, "hbm_gbps": hbm_gbps, "bf16_tflops": tflops,
             "pcie_gbps": pcie_gbps}
    overrides = {key: value for key, value in given.items() if value is not None}
    if norm_name(name) == "custom":
        missing = [key for key, value in given.items() if value is None]
        if missing:
            raise ValueError(f"a custom gpu needs all of memory_gib, hbm_gbps, bf16_tflops, "
                             f"pcie_gbps; missing {', '.join(missing)}")
        return GpuSpec(name="custom", **overrides)
    base = get_gpu(name)
    if not overrides:
        return base
    return replace(base, name=f"{base.name} (custom)", **overrides)
