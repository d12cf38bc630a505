"""The words of the reports: glossary and figure captions, kept apart from the layout code.

Everything a newcomer needs to read the figures without the code: what each memory category
means (the PagedAttention paper's section 3.1 and allocator/waste.py), how the latency metrics
are defined (vLLM's benchmark), and one caption per figure saying what to look for.
"""
from __future__ import annotations

GLOSSARY = (
    ("Allocators", ("paged = vLLM's PagedAttention block manager with prefix caching; "
     "paged-nocache = the same without prefix caching; max / pow2 / oracle = contiguous "
     "reservation of the maximum length, of the prompt plus a power-of-two output bound, or of "
     "the exact final length (Orca-style iteration-level batching); ft = max reservation with "
     "request-level batching, like FasterTransformer.")),
    ("Token states", "KV slots holding tokens already computed: the only useful memory."),
    ("Reserved", ("slots a request holds for tokens it will still generate: used eventually, "
     "but unavailable to other requests until then.")),
    ("Internal fragmentation", ("slots a request holds but will never write: over-reservation "
     "beyond its final length, allocator rounding, the unused tail of a paged request's last "
     "block.")),
    ("External fragmentation", ("free slots outside the largest free contiguous region, which a "
     "contiguous allocator cannot hand out whole (always 0 for paged allocation).")),
    ("Cached (evictable)", ("free blocks that still hold prefix-cache content: reusable by a "
     "request with the same prefix, or evicted when space is needed.")),
    ("Free", "the rest of the KV capacity."),
    ("TTFT / TPOT", ("time to first token = first token - arrival; time per output token = "
     "(end-to-end - TTFT) / (output tokens - 1), for requests with more than one output token; "
     "in milliseconds, as vllm bench serve reports them.")),
    ("Normalised latency", ("end-to-end latency / output tokens, averaged over requests "
     "(ms per output token): the PagedAttention paper's main latency metric.")),
    ("Batch size", ("requests running at once; memory not wasted turns into a larger batch and "
     "higher throughput.")),
)

RUN_FIGURES = {
    "waste_bars": (
        "Average memory use and waste",
        ("Left: how the KV memory that requests held was used, averaged over the run, as in the "
        "PagedAttention paper's Fig. 2; green is useful, the rest is waste. Right: the same "
        "averages as shares of the whole KV capacity, with cached and free memory.")),
    "memory_timeline": (
        "KV memory over time",
        ("One panel per allocator: the share of KV capacity in each category over simulated "
        "time (time-averaged into bins). Contiguous allocators fill capacity with reserved and "
        "fragmented slots long before the token states do; paged memory stays mostly tokens, "
        "with the rest free or cached.")),
    "fragmentation_cdfs": (
        "Fragmentation and utilisation distributions",
        ("Duration-weighted CDFs of the per-step internal fragmentation, external fragmentation "
        "and KV utilisation (token states), as shares of capacity. A curve further left means "
        "less of that category; for utilisation, further right means more useful memory.")),
    "batch_size": (
        "Batch size over time",
        ("Running requests after each step (time-binned), one panel per allocator; the dashed "
        "line is the run's duration-weighted mean batch size.")),
    "latency_cdfs": (
        "Latency distributions",
        ("CDFs over finished requests of TTFT, TPOT and normalised latency, in milliseconds; a "
        "curve further left is faster. The dot on each curve is its median (p50), the diamond "
        "its p99. Queueing for memory shows up mostly in TTFT and normalised latency.")),
    "prefix_cache": (
        "Prefix cache hit rate",
        ("Share of looked-up prompt tokens served from the prefix cache, per time bin (top) and "
        "cumulative since the start (bottom), for allocators with prefix caching on. A request "
        "re-admitted after preemption finds its own blocks still cached and those hits count, "
        "so the achieved rate can sit above the ideal line (first admissions only).")),
}

SWEEP_FIGURES = {
    "latency_vs_rate": (
        "Normalised latency vs request rate",
        ("Mean normalised latency (ms/token) at each request rate, one curve per allocator, as "
        "in the PagedAttention paper's Fig. 12. The dotted vertical lines mark each allocator's "
        "capacity: the highest rate before its latency crosses the SLO (grey dashed line). "
        "The y axis stops at 5 SLOs; a point above it is a triangle on the top edge with its "
        "value printed. A rate grid of equal ratios is drawn on a log axis.")),
    "waste_vs_block_size": (
        "KV waste vs block size",
        ("Share of occupied KV memory that is wasted (reserved plus internal and external "
        "fragmentation) at each block size. Paged waste grows with the block size (the unused "
        "tail of each request's last block); contiguous reservation hardly depends on it.")),
}
