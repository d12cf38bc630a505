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
    for name in ("decode", "ragged", "fp8", "fp8_ab", "fp8_layout", "host", "extend",
                 "extend_ab", "mixed", "mixed_ab", "prefill", "sdpa", "cache_ops"):
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
    _summary(r)


def _summary(r: dict) -> None:
    """The short table: fp8 speed-ups per variant, ragged TB/s per split rule, wrapper time."""
    print("\n== summary")
    for row in r.get("decode") or []:
        if isinstance(row, dict) and "new_us" in row:
            v1 = row.get("v1_us") or float("nan")
            us = " ".join(f"{k[:-3]}:{v:.1f}({v / v1:.3f})" for k, v in row.items()
                          if k.endswith("_us") and k[:-3] in ("new", "tab64w2s3", "tab32w2s4"))
            print(f"decode {row['batch']}x{row['ctx']}: us(/v1) {us} v1:{v1:.1f} "
                  f"graph:{row['graph_us']:.1f} sdpa:{row['sdpa_us']:.1f}")
    for row in r.get("fp8_ab") or []:
        if isinstance(row, dict) and "bf16_us" in row:
            xs = " ".join(f"{k[:-2]}:{v:.2f}x" for k, v in row.items() if k.endswith("_x"))
            print(f"fp8 {row['batch']}x{row['ctx']}: bf16 {row['bf16_us']:.1f} us | {xs}")
    for row in r.get("fp8_swap") or []:
        if isinstance(row, dict) and "bf16_us" in row:
            xs = " ".join(f"{k[:-2]}:{v:.2f}x" for k, v in row.items() if k.endswith("_x"))
            print(f"fp8_swap {row['batch']}x{row['ctx']}: bf16 {row['bf16_us']:.1f} us | {xs}")
    for row in r.get("extend_ab") or []:
        if isinstance(row, dict) and "decode_us" in row:
            xs = " ".join(f"{k[:-8]}:{v:.2f}x" for k, v in row.items() if k.endswith("_graph_x"))
            print(f"extend {row['seqs']} seqs: decode graph {row['decode_graph_us']:.1f} us |"
                  f" graph {xs}")
    for row in r.get("mixed_ab") or []:
        if isinstance(row, dict) and "two_calls_us" in row:
            xs = " ".join(f"{k[:-2]}:{v:.2f}x" for k, v in row.items() if k.endswith("_x"))
            print(f"mixed {row['decodes']} + {row['chunks']}: two calls {row['two_calls_us']:.1f}"
                  f" us | {xs}")
    for row in r.get("ragged") or []:
        if isinstance(row, dict) and "new_us" in row:
            tb = " ".join(f"{k[:-5]}:{v:.3f}" for k, v in row.items() if k.endswith("_tbps")
                          and k != "tbps")
            print(f"ragged {row['batch']}: TB/s {tb}")
    for row in r.get("extend") or []:
        if isinstance(row, dict) and "extend_host_us" in row:
            print(f"extend {row['seqs']} x {row['new']} over {row['prefix']}: eager "
                  f"{row['extend_us']:.1f} / decode {row['decode_us']:.1f} us "
                  f"({row['ratio']:.2f}x), graph {row['graph_ratio']:.2f}x, host "
                  f"{row['extend_host_us']:.1f} / {row['decode_host_us']:.1f} us "
                  f"({row['host_ratio']:.2f}x), py {row['extend_py_us']:.1f} / "
                  f"{row['decode_py_us']:.1f} us")
    for row in r.get("host") or []:
        if isinstance(row, dict) and "py_us" in row:
            print(f"host {row['shape']}: py {row['py_us']:.2f} us, fresh views "
                  f"{row['py_fresh_us']:.2f} us, eager host {row['host_us']:.1f} us")
