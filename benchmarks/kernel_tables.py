"""Summary tables of bench_kernels.py's JSON results (printed last, so a log's tail holds them)."""

from __future__ import annotations


def _f(x: object, fmt: str = ".1f") -> str:
    return format(x, fmt) if isinstance(x, (int, float)) else str(x)


def _decode(r: dict) -> None:
    print(f"{'shape':>10} {'us':>7} {'TB/s':>5} {'v1 us':>7} {'new/v1':>6} {'sdpa':>7} "
          f"{'vllm':>5} {'sp':>3} {'err64':>8} {'graph':>6} {'host':>6} {'py':>5}")
    for d in r["decode"]:
        v1 = d.get("v1_us")
        print(f"{d['batch']:>4}x{d['ctx']:<5} {d['us']:7.1f} {d['tbps']:5.2f} {_f(v1):>7} "
              f"{_f(d['us'] / v1 if v1 else '-', '.3f'):>6} {d['sdpa_us']:7.1f} "
              f"{d['issue_vllm_us']:5.0f} {d['splits']:3d} {d['err64']:8.1e} "
              f"{d['graph_us']:6.1f} {d['host_us']:6.1f} {d['py_us']:5.1f}")


def _rows(title: str, rows: list[dict]) -> None:
    print(title)
    for row in rows:
        print("   ", ", ".join(f"{k}={_f(v, '.3g')}" for k, v in row.items()))


def print_tables(r: dict) -> None:
    print(f"\n== {r['device']} | torch {r['torch']} | triton {r['triton']} | {r['date']}")
    if isinstance(r.get("copy"), dict) and "tbps" in r["copy"]:
        print(f"copy: {r['copy']['tbps']:.2f} TB/s (read + write of a 4 GiB copy)")
    for name in ("decode", "ragged", "fp8", "extend", "mixed", "prefill", "sdpa", "cache_ops"):
        val = r.get(name)
        if val is None:
            continue
        if isinstance(val, dict) and "error" in val:
            print(f"{name}: ERROR {val['error'][:400]}")
        elif name == "decode":
            _decode(r)
        elif isinstance(val, list):
            _rows(name, val)
        else:
            _rows(name, [val])
    for key in sorted(k for k in r if k.startswith("sweep_")):
        print(key)
        val = r[key]
        for shape, res in (val.items() if isinstance(val, dict) else []):
            text = (" ".join(f"{k}:{_f(v, '.1f')}" for k, v in res.items())
                    if isinstance(res, dict) else _f(res))
            print(f"    {shape}: {text}"[:600])
