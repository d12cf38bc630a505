"""Per-step error of the step models against executed steps (calibration artefacts).

    PYTHONPATH=. python benchmarks/step_errors.py [ARTEFACT.json ...] [--plot F.png] [--json F]

For every artefact (default: sim/cost/calibrations/*.json) the points are split by shape: one
in three (a seeded hash of the shape) is held out, the fit (sim/cost/step_fit.py) sees only
the rest. Printed per artefact, kind (decode, prefill, mixed, all) and split (fitted, held):
median and p90 of |predicted / measured - 1| for attention (the attention part's graph),
linear (GEMMs + other launches: the linear and other parts' graphs) and total (the whole
step's graph, `graph_s`), for the fit and for the uncalibrated roofline (its GPU parts, no CPU
overhead). 'calibrated' is the calibrated roofline (sim/cost/step_specs.py) fitted on every
artefact but those of the model evaluated (leave one model out). An artefact with an fp8 (or other non-model-dtype) KV cache is its own row, named
'MODEL kv DTYPE', with the fit and roofline at that cache dtype. This measures agreement with our own forward on our own kernels, not with vLLM.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import statistics
from pathlib import Path
from typing import Any

from sim.cost.calibration import (
    SHIPPED_DIR,
    Calibration,
    kv_dtype_of,
    model_of,
    read_calibration,
    run_kv_dtype,
)
from sim.cost.fit_terms import step_kind
from sim.cost.gpus import get_gpu
from sim.cost.model_config import ModelConfig
from sim.cost.step_fit import MIN_POINTS, FitStepModel, fit_shape, point_batch, samples
from sim.cost.step_roofline import RooflineStepModel
from sim.cost.step_specs import calibrated_coefficients, make_auto, make_calibrated


def held_out(point: dict[str, Any]) -> bool:
    """One shape in three, by a hash of the shape (stable across runs and artefacts)."""
    key = "{num_decode}x{decode_context}+{prefill_new}@{prefill_prefix}".format(**point)
    chunks = len(point_batch(point)[2])
    if chunks > 1:  # one chunk keeps the key shapes had before points could hold several
        key += f"*{chunks}"
    return int(hashlib.sha256(key.encode()).hexdigest(), 16) % 3 == 0


def _predict(step: Any, point: dict[str, Any]) -> tuple[float, float]:
    decodes, ctx_sum, prefills = point_batch(point)
    cap = step.decode_context_cap
    if cap is not None and decodes:
        ctx_sum = decodes * min(ctx_sum // decodes, cap)
    if isinstance(step, FitStepModel):
        att, lin, other = step.gpu_parts(decodes, ctx_sum, prefills)
        return att, lin + other
    st = step.predict_split(decodes, ctx_sum, prefills)
    return st.attention_s, st.linear_s


def rows_for(cal: Calibration, models: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per measured point: measured and predicted parts of every model."""
    out = []
    for p in cal.points:
        if not all(isinstance(p.get(k), float) for k in ("attention_s", "linear_s", "other_s")):
            continue
        row = {"kind": p["kind"], "held": held_out(p), "attention": p["attention_s"],
               "linear": p["linear_s"] + p["other_s"], "total": p["graph_s"],
               "shape": [p["num_decode"], p["decode_context"], p["prefill_new"],
                         p["prefill_prefix"], len(point_batch(p)[2])]}
        for name, step in models.items():
            att, lin = _predict(step, p)
            row[name] = {"attention": att, "linear": lin, "total": att + lin}
        out.append(row)
    return out


def median_p90(errs: list[float]) -> tuple[float, float]:
    """Median and p90 (the value below which 90 % of the sorted errors lie) of `errs`."""
    errs = sorted(errs)
    return statistics.median(errs), errs[min(len(errs) - 1, int(0.9 * len(errs)))]


def _stats(errs: list[float]) -> str:
    if not errs:
        return f"{'-':>15}"
    median, p90 = median_p90(errs)
    return f"{median:6.1%} /{p90:6.1%}"


def report(name: str, rows: list[dict[str, Any]], models: list[str]) -> list[str]:
    """Table lines: per kind and split, median / p90 |pred/meas - 1| per part and model."""
    head = f"{'kind':<8} {'split':<6} {'n':>3} " + " ".join(
        f"{m + ' ' + part:>15}" for m in models for part in ("attention", "linear", "total"))
    lines = [f"## {name}", head]
    for kind in ("decode", "prefill", "mixed", "all"):
        for split in ("fitted", "held"):
            group = [r for r in rows if (kind == "all" or r["kind"] == kind)
                     and r["held"] == (split == "held")]
            cells = [_stats([abs(r[m][part] / r[part] - 1) for r in group
                             if r[part] is not None]) for m in models
                     for part in ("attention", "linear", "total")]
            lines.append(f"{kind:<8} {split:<6} {len(group):>3} " + " ".join(cells))
    return lines


def _label(name: str) -> str:
    """A legend label: an executed file's scenario (its log's folder), else the shape's name."""
    first = name.split(" ")[0]
    if "/" not in first:
        return name
    return f"executed {Path(first).parent.name}" + (" (fit = roofline)" if "fit = roofline"
                                                     in name else "")


def plot(rows_by: dict[str, list[dict[str, Any]]], path: str) -> None:
    import matplotlib  # optional: only for --plot

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 7.5))
    every = [v * 1e3 for rows in rows_by.values() for r in rows
             for v in (r["total"], r["fit"]["total"], r["roofline"]["total"])]
    lo, hi = min(every) / 1.5, max(every) * 1.5
    for ax, model in zip(axes, ("fit", "roofline")):
        for name, rows in rows_by.items():
            for held, marker in ((False, "."), (True, "x")):
                pts = [(r["total"] * 1e3, r[model]["total"] * 1e3) for r in rows
                       if r["held"] == held]
                if pts:
                    ax.scatter(*zip(*pts), marker=marker, s=14,
                               label=f"{_label(name)} {'held' if held else 'fitted'}")
        ax.plot([lo, hi], [lo, hi], "k:", lw=0.8)
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi),
               xlabel="executed step (graph), ms", ylabel=f"{model} predicted, ms",
               title=f"{model} vs executed (x: held out)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.22, 1, 1))
    fig.savefig(path, dpi=120)


def executed_rows(path: str) -> tuple[str, list[dict[str, Any]]]:
    """Steps of an executed-steps file (python -m kernels.execute) against the shipped fit for
    its model (the roofline where none is shipped: the title says so), the calibrated roofline
    and the roofline."""
    lines = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]
    header = lines[0]
    model, gpu = model_of(header["model"], path), get_gpu(header["device"]["name"])
    kv = kv_dtype_of(header["model"], path)
    kv = "auto" if kv == model.dtype else kv
    fit = make_auto(model, gpu, 1, kv)  # the shipped fit, else the roofline (said in the title)
    models = {"fit": fit, "calibrated": make_calibrated(model, gpu, 1, kv),
              "roofline": RooflineStepModel(model, gpu, kv_cache_dtype=kv)}
    out = []
    for step in lines[1:]:
        b = step["batch"]
        if not step.get("graph_s"):
            continue
        parts = isinstance(step.get("attention_s"), float)  # not under --no-parts
        row = {"kind": step_kind(b["num_decode"], len(b["prefill"])), "held": True,
               "attention": step["attention_s"] if parts else None,
               "linear": step["linear_s"] + step["other_s"] if parts else None,
               "total": step["graph_s"]}
        for name, m in models.items():
            decodes, ctx, prefills = b["num_decode"], b["decode_context_sum"], b["prefill"]
            if isinstance(m, FitStepModel):
                att, lin, other = m.gpu_parts(decodes, ctx, [tuple(p) for p in prefills])
                lin += other
            else:
                st = m.predict_split(decodes, ctx, [tuple(p) for p in prefills])
                att, lin = st.attention_s, st.linear_s
            row[name] = {"attention": att, "linear": lin, "total": att + lin}
        out.append(row)
    note = "" if isinstance(fit, FitStepModel) else "; no shipped calibration: fit = roofline"
    return f"{header['log']} ({row_name(model, kv)}, {len(out)} executed steps{note})", out


def row_name(model: ModelConfig, kv_cache_dtype: str) -> str:
    """The model's name, with its KV cache dtype where that is not the model dtype."""
    kv = run_kv_dtype(model, kv_cache_dtype)
    return model.name if kv == model.dtype else f"{model.name} kv {kv}"


def joined(cals: list[Calibration]) -> list[Calibration]:
    """Artefacts of one model shape, KV cache dtype and GPU joined into one (as the 'fit' spec
    joins them)."""
    groups: dict[tuple[Any, str, str], list[Calibration]] = {}
    for cal in cals:
        groups.setdefault((cal.model, cal.kv_dtype, cal.gpu_name), []).append(cal)
    return [Calibration(" + ".join(Path(c.source).name for c in group), group[0].model,
                        group[0].gpu_name, group[0].device, group[0].date,
                        [p for c in group for p in c.points], group[0].kv_dtype)
            for group in groups.values()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("artefacts", nargs="*", help="default: sim/cost/calibrations/*.json")
    ap.add_argument("--plot", help="PNG of predicted against executed totals")
    ap.add_argument("--json", help="every row, as JSON")
    ap.add_argument("--executed", nargs="*", default=[],
                    help="executed-steps files (python -m kernels.execute) to check as well")
    args = ap.parse_args(argv)
    paths = args.artefacts or sorted(str(p) for p in SHIPPED_DIR.glob("*.json"))
    cals = joined([read_calibration(p) for p in paths])
    rows_by: dict[str, list[dict[str, Any]]] = {}
    for cal in cals:
        fitted = [p for p in cal.points if not held_out(p)]
        kv = cal.kv_cache_dtype
        models: dict[str, Any] = {
            "fit": FitStepModel(cal.model, cal.gpu, 1,
                                fit_shape(samples(cal, fitted)), "fit", kv_cache_dtype=kv),
            "roofline": RooflineStepModel(cal.model, cal.gpu, kv_cache_dtype=kv)}
        others = [c for c in cals if c.model != cal.model]
        if sum(len(samples(c)) for c in others) >= MIN_POINTS:
            coef, _, _ = calibrated_coefficients(others, cal.gpu, cal.kv_dtype.startswith("fp8"),
                                                 cal.model.moe)
            models["calibrated"] = FitStepModel(cal.model, cal.gpu, 1, coef, "calibrated",
                                                kv_cache_dtype=kv)
        name = f"{row_name(cal.model, kv)} on {cal.gpu_name}"
        rows_by[name] = rows_for(cal, models)
        print("\n".join(report(f"{name}: {cal.describe()}", rows_by[name], list(models))),
              flush=True)
    for path in args.executed:
        title, rows = executed_rows(path)
        rows_by[title] = rows
        lines = report(f"executed schedule {title}", rows, ["fit", "calibrated", "roofline"])
        print("\n".join(line for line in lines if " fitted " not in line), flush=True)
    if args.plot:
        plot(rows_by, args.plot)
    if args.json:
        Path(args.json).write_text(json.dumps(rows_by, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
