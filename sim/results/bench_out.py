"""The benchmark section of summary.json and the ``--json FILE`` written beside it.

``bench_section`` computes ``sim/results/bench.py``'s metrics for every allocator that
completed, from its requests and steps tables, plus how the workload was produced (the
dataset, rate, burstiness, client concurrency and whether token counts are estimated from
characters). ``--json FILE`` holds the same metrics in ``vllm bench serve --save-result``'s
layout: the run's settings at the top level and one flat entry per allocator.
"""
from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from sim.config import Options, RunConfig
from sim.cost.api_path import api_path_of
from sim.results.bench import bench_metrics
from sim.results.outputs import write_json
from traces import Trace


def _step_end(steps: Any) -> np.ndarray:
    cols = steps.select(["time_s", "duration_s"]).to_pydict()
    return (np.array(cols["time_s"], dtype=np.float64)
            + np.array(cols["duration_s"], dtype=np.float64))


def workload_record(config: RunConfig, options: Options, trace: Trace) -> dict[str, Any]:
    """How the requests were produced, in vLLM's option names."""
    meta = trace.metadata
    return {
        "dataset_name": options.dataset_name or ("trace" if options.trace else "default"),
        "num_prompts": len(trace), "request_rate": json_number(options.request_rate),
        "burstiness": json_number(options.burstiness),
        "max_concurrency": config.workload.max_concurrency,
        "tokenizer_id": getattr(meta, "tokenizer", None),
        "tokens_estimated": bool(getattr(meta, "tokens_estimated", False)),
    }


def json_number(value: Any) -> Any:
    """JSON has no inf: an infinite float (a --request-rate) is written "inf", as vLLM
    prints it; anything else is returned as it is."""
    return "inf" if isinstance(value, float) and np.isinf(value) else value


def bench_section(config: RunConfig, options: Options, trace: Trace,
                  outcomes: list[Any]) -> dict[str, Any]:
    """summary.json's "bench" entry: the workload record and each allocator's metrics (token
    times as the client sees them: step ends plus the API path's way out)."""
    delivery = api_path_of(config.cost).output_s
    return {
        "about": "vllm bench serve's metric names and definitions (ms; throughputs per s); "
                 "see sim/results/results_schema.json",
        **workload_record(config, options, trace),
        "allocators": {o.name: bench_metrics(o.requests.to_pydict(),
                                             _step_end(o.steps) + delivery, options)
                       for o in outcomes if o.error is None and o.requests is not None},
    }


def write_bench_json(path: Path, config: RunConfig, section: dict[str, Any]) -> None:
    """``--json FILE``: the run's settings, then one flat metrics entry per allocator."""
    record: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y%m%d-%H%M%S"),
        "backend": "pagedsim", "model_id": config.model.name,
        "gpu": f"{config.gpu.tp}x{config.gpu.spec.name}",
    }
    record.update({k: v for k, v in section.items() if k not in ("about", "allocators")})
    record["allocators"] = section["allocators"]
    write_json(path, record)


def goodput_line(section: dict[str, Any]) -> str:
    """One stdout line: each allocator's request goodput (req/s) under --goodput."""
    cells = [f"{name} {'-' if m['request_goodput'] is None else format(m['request_goodput'], '.3f')}"
             for name, m in section["allocators"].items()]
    return "request goodput (req/s, every --goodput SLO met): " + ", ".join(cells)

