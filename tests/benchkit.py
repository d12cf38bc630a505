"""Load a script from benchmarks/ as a module (the folder is not a package)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """Import ``benchmarks/<name>.py`` under the module name ``name``, with benchmarks/ on
    the import path, as when the script runs (the scripts import their siblings)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.append(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def fp8_decode_case(group: int, scale: float = 0.05) -> dict[str, Any]:
    """Two sequences of 64 and 128 keys over a permuted fp8 cache (2 KV heads of 16, blocks
    of 8, K and V scales `scale`), `group` query heads per KV head: q, k, v, tables, ctx and
    the float64 reference over the dequantised values (`ref`), for the fp8 experiments."""
    import torch

    from kernels.fp8 import quantize
    from kernels.reference import Variant, ref_decode_attention

    gen = torch.Generator().manual_seed(group)
    kv_heads, head, block = 2, 16, 8
    k = quantize(torch.randn(40, block, kv_heads, head, generator=gen), scale)
    v = quantize(torch.randn(40, block, kv_heads, head, generator=gen), scale)
    q = torch.randn(2, kv_heads * group, head, generator=gen).to(torch.bfloat16)
    perm = (torch.randperm(39, generator=gen) + 1).to(torch.int32)
    tables = torch.stack([perm[:16], perm[16:32]])
    lens = [64, 128]
    ref = ref_decode_attention(q, k, v, tables.tolist(), lens,
                               variant=Variant(k_scale=scale, v_scale=scale))
    return {"q": q, "k": k, "v": v, "tables": tables,
            "ctx": torch.tensor(lens, dtype=torch.int32), "ref": ref}
