"""``simulate.py --list models|gpus|formats|allocators``: the presets with their key numbers.

Models: layers, attention and KV heads, head size, dtype, parameters, context and KV bytes
per token (one GPU, the model's dtype). GPUs: memory, HBM bandwidth, dense bf16 TFLOP/s and
PCIe bandwidth. Formats: how each is detected from a file's content. Allocators: one line each.
"""
from __future__ import annotations

from allocator.registry import BUILTIN_NAMES
from sim.cost.capacity import kv_bytes_per_token
from sim.cost.gpus import PRESETS as GPUS
from sim.cost.models import PRESETS as MODELS
from traces.loader import FORMATS

FORMAT_DETECTION = {
    "azure": "CSV with the Azure LLM inference columns (TIMESTAMP, ContextTokens, "
             "GeneratedTokens)",
    "burstgpt": "CSV with BurstGPT's columns (Timestamp, Request tokens, Response tokens, ...)",
    "mooncake": "JSONL whose records have hash_ids (Mooncake; --hash-block-size tokens per id)",
    "token-jsonl": "JSONL whose records have input_toks (token ids per request)",
    "vllm": "JSON or JSONL with prompt_len or input_lens (vLLM benchmark results)",
    "sharegpt": "JSON list whose records have conversations (ShareGPT; --tokenizer counts)",
    "csv": "any CSV, never detected: --format csv with --columns NAME=COL,...",
    "jsonl": "any JSONL, detected when --columns NAME=COL,... is given",
}
ALLOCATORS = {
    "paged": "vLLM's paged KV cache with prefix caching (block tables, free queue, LRU reuse)",
    "paged-nocache": "vLLM's paged KV cache without prefix caching",
    "max": "Orca-Max: a contiguous region of max_model_len slots per request",
    "pow2": "Orca-Pow2: prompt + true output rounded up to a power of two, contiguous",
    "oracle": "Orca-Oracle: exactly prompt + true output, contiguous",
    "ft": "FasterTransformer: reserves like max, with request-level batching",
}


def model_lines() -> list[str]:
    """One line per model preset."""
    header = "model: layers, heads / KV heads x head dim, dtype, params, context, KV bytes/token"
    lines = [header]
    for name, m in MODELS.items():
        window = f", sliding window {m.sliding_window}" if m.sliding_window else ""
        lines.append(f"  {name}: {m.num_layers} layers, {m.num_heads} / {m.num_kv_heads} x "
                     f"{m.head_dim}, {m.dtype}, {m.num_params / 1e9:.1f}B params, context "
                     f"{m.max_context_len}, {kv_bytes_per_token(m):,} KV bytes/token{window}")
    return lines


def gpu_lines() -> list[str]:
    """One line per GPU preset."""
    lines = ["gpu: memory, HBM bandwidth, dense bf16 compute, PCIe (one direction)"]
    for name, g in GPUS.items():
        lines.append(f"  {name}: {g.memory_gib:g} GiB, {g.hbm_gbps:g} GB/s HBM, "
                     f"{g.bf16_tflops:g} TFLOP/s, PCIe {g.pcie_gbps:g} GB/s")
    return lines


def format_lines() -> list[str]:
    """One line per trace format, with how it is detected."""
    return ["format: detected from the content when --format is not given"] + [
        f"  {name}: {FORMAT_DETECTION.get(name, 'give --format ' + name)}" for name in FORMATS]


def allocator_lines() -> list[str]:
    """One line per built-in allocator."""
    return ["allocator (--allocators, comma-separated; or module:Class for a plug-in)"] + [
        f"  {name}: {ALLOCATORS.get(name, 'built-in')}" for name in BUILTIN_NAMES]


LISTS = {"models": model_lines, "gpus": gpu_lines, "formats": format_lines,
         "allocators": allocator_lines}


def print_list(kind: str) -> None:
    """Print the ``--list`` of ``kind`` (a key of LISTS) on stdout."""
    print("\n".join(LISTS[kind]()))
