#!/usr/bin/env python3
"""Regenerate the GPU tables in the READMEs from the JSON that scripts/gpu_check.sh wrote.

A README marks a table with two HTML comments:
    <!-- gpu:KIND:PATH[:ARG] -->
    ...table, rewritten by this script...
    <!-- /gpu -->
KINDs:
  compare:docs/results/compare_torch_05.json:bf16   TFLOP/s of our kernels and SDPA's backends,
                                                    one process (tools/compare_torch.py), per d,
                                                    causal and N; ARG is the dtype
  bench:docs/results/bench_05_cuda_tiled.json       our kernels in Google Benchmark: TFLOP/s,
                                                    % of the cuBLAS GEMM of the same run, extra
                                                    GPU memory, at N = ARG (default 16384)
  sram:docs/results/bench_05_cuda_tiled.json        v1 across shared-memory budgets M
Usage: python3 tools/gpu_tables.py [README.md ...]   (default: every README.md in the repo)
Standard library only.
"""
import json
import pathlib
import re
import sys

from bench_tables import rewrite_readmes  # the README walk, shared (same folder)

ROOT = pathlib.Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"(<!-- gpu:(?P<kind>\w+):(?P<src>[^ :]+)(?::(?P<arg>[^ ]+))? -->\n)(?P<body>.*?)(<!-- /gpu -->)", re.S)
IMPLS = ["fa05 v1", "fa05 v2", "fa05 cublas", "sdpa flash", "sdpa cudnn", "sdpa efficient", "sdpa math"]


def fmt_bytes(n):
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def compare_table(src, dtype, link):
    data = json.loads((ROOT / src).read_text())
    rows = [r for r in data["rows"] if r["dtype"] == dtype]
    impls = [i for i in IMPLS if any(r["impl"] == i and r["ms"] for r in rows)]
    head = "| d | causal | N | B x H | " + " | ".join(f"`{i}`" for i in impls)
    has_flash = "sdpa flash" in impls and "fa05 v2" in impls
    head += " | v2 / flash |" if has_flash else " |"
    out = [head, "|" + "---:|" * (4 + len(impls) + (1 if has_flash else 0))]
    keys = sorted({(r["d"], r["causal"], r["N"]) for r in rows})
    for d, causal, n in keys:
        cell = {r["impl"]: r for r in rows if (r["d"], r["causal"], r["N"]) == (d, causal, n)}
        any_r = next(iter(cell.values()))
        line = f"| {d} | {'yes' if causal else 'no'} | {n} | {any_r['B']} x {any_r['H']} |"
        for i in impls:
            r = cell.get(i)
            line += f" {r['tflops']:.1f} |" if r and r["tflops"] else " - |"
        if has_flash:
            v2, fl = cell.get("fa05 v2"), cell.get("sdpa flash")
            line += f" {v2['tflops'] / fl['tflops']:.2f} |" if v2 and fl and v2["tflops"] and fl["tflops"] else " - |"
        out.append(line)
    out.append("")
    out.append(f"TFLOP/s (forward, 4·B·H·N²·d, halved for causal), median of CUDA-event times, {dtype}, "
               f"measured {data['date']} on an {data['device']} (PyTorch {data['torch']}, CUDA {data['cuda']}, "
               f"cuDNN {data['cudnn']}) by `scripts/gpu_check.sh` (`python3 tools/compare_torch.py --lib "
               f"build-gpu/05_cuda_tiled/libfa05.so --json ...`); `-`: the backend refuses the dtype, or its S and P "
               f"would pass 40 GiB; source: [{src}]({link}).")
    return "\n".join(out) + "\n"


def bench_rows(src):
    data = json.loads((ROOT / src).read_text())
    rows = [b for b in data["benchmarks"] if b.get("run_type") != "aggregate" and not b.get("error_occurred")]
    return data, rows


def args(name):
    """'BM_attn/kernel:1/dtype:2/N:512/...' -> {'kernel': 1, 'dtype': 2, 'N': 512, ...}"""
    out = {}
    for part in name.split("/")[1:]:
        if ":" in part:
            k, v = part.split(":", 1)
            try:
                out[k] = int(v)
            except ValueError:
                pass
    return out


def ms(b):
    return b["real_time"] * {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]


def bench_table(src, n_arg, link):
    data, rows = bench_rows(src)
    n = int(n_arg or 16384)
    gemm = {b["label"]: b["TFLOP/s"] for b in rows if b["name"].startswith("BM_gemm")}
    kernels = {0: "v1", 1: "v2", 2: "cublas"}
    out = ["| kernel | dtype | d | causal | ms | TFLOP/s | % of cuBLAS GEMM | % of datasheet peak | extra GPU memory |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for b in rows:
        if not b["name"].startswith("BM_attn"):
            continue
        a = args(b["name"])
        if a.get("N") != n:
            continue
        kernel, dtype = b["label"].split(":")
        g = gemm.get(dtype)
        out.append(f"| {kernel} | {dtype} | {a['d']} | {'yes' if a['causal'] else 'no'} | {ms(b):.3g} | "
                   f"{b['TFLOP/s']:.1f} | {100 * b['TFLOP/s'] / g:.1f} | {b['pct_peak']:.1f} | "
                   f"{fmt_bytes(b['gpu_extra_bytes'])} |")
    for dtype, tf in gemm.items():
        out.append(f"| cuBLAS GEMM 8192³ | {dtype} | - | - | - | {tf:.1f} | 100 | "
                   f"{100 * tf / (66.9 if dtype == 'fp32' else 989.4):.1f} | - |")
    ctx = data["context"]
    out.append("")
    out.append(f"N = {n}, B = {16384 // n}, H = 2048/d. Measured {ctx['date'][:10]} on an {ctx.get('gpu', '?')} by "
               f"`scripts/gpu_check.sh` (`build-gpu/05_cuda_tiled/bench_05_cuda_tiled`); datasheet dense peaks: "
               f"fp32 66.9, bf16 989.4 TFLOP/s (H100/H200 SXM); source: [{src}]({link}).")
    return "\n".join(out) + "\n"


def sram_table(src, _, link):
    data, rows = bench_rows(src)
    out = ["| d | M (KiB) | Br | Bc | shared memory per block | ms | TFLOP/s |", "|---:|---:|---:|---:|---:|---:|---:|"]
    for b in rows:
        if not b["name"].startswith("BM_v1_sram"):
            continue
        a = args(b["name"])
        out.append(f"| {a['d']} | {a['M_KiB']} | {int(b['Br'])} | {int(b['Bc'])} | {fmt_bytes(b['smem_bytes'])} | "
                   f"{ms(b):.3g} | {b['TFLOP/s']:.2f} |")
    ctx = data["context"]
    out.append("")
    out.append(f"v1 in bf16, N = 4096, B = 4, H = 2048/d, not causal. Measured {ctx['date'][:10]} on an "
               f"{ctx.get('gpu', '?')} by `scripts/gpu_check.sh`; source: [{src}]({link}).")
    return "\n".join(out) + "\n"


KINDS = {"compare": compare_table, "bench": bench_table, "sram": sram_table}


def main(paths):
    rewrite_readmes(paths, BLOCK,
                    lambda m, link: m.group(1) + KINDS[m.group("kind")](m.group("src"), m.group("arg"), link) + m.group(6))


if __name__ == "__main__":
    main(sys.argv[1:])
