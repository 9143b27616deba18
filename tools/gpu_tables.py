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
  versions:docs/results/compare_torch_05.json:8192  the path v1 -> v5: each version's TFLOP/s and
                                                    its ratio to SDPA flash at N = ARG, bf16
  shape:docs/results/bench_05_cuda_tiled.json:v5    the block-shape sweep of v5 ... v10 (BM_shape)
  bwd:docs/results/bench_06_backward_gpu.json:docs/results/compare_torch_bwd.json
                                                    stage 06's GPU backwards (their benchmark)
                                                    beside SDPA's backward (compare_torch.py
                                                    --backward) from the same gpu_check run
  bwd_shape:docs/results/bench_06_backward_gpu.json gpu_v2's key-block sweep (BM_bwd_shape)
  numerics:docs/results/gpu_numerics.json           every kernel's and SDPA backend's error against float64
                                                    (tools/gpu_numerics.py), fp16 and bf16
  io:docs/results/runs/gpu_check                         HBM bytes each kernel moved, from the ncu logs
                                                    gpu_check.sh keeps there, beside the bytes it
                                                    must move and the count of math.md (5.6)
Usage: python3 tools/gpu_tables.py [FILE.md ...]   (default: every README.md and every .md under docs/)
Standard library only.
"""
import json
import pathlib
import re
import sys

from bench_tables import rewrite_readmes  # the README walk, shared (same folder)

ROOT = pathlib.Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"(<!-- gpu:(?P<kind>\w+):(?P<src>[^ :]+)(?::(?P<arg>[^ ]+))? -->\n)(?P<body>.*?)(<!-- /gpu -->)", re.S)
VERSIONS = ["fa05 v1", "fa05 v2", "fa05 v3", "fa05 v4", "fa05 v5", "fa05 v6", "fa05 v7", "fa05 v8", "fa05 v9", "fa05 v10", "fa05 v11", "fa05 v12"]
IMPLS = VERSIONS + ["fa05 cublas", "sdpa flash", "sdpa cudnn", "sdpa efficient", "sdpa math"]


def fmt_bytes(n):
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def timing_method(data):
    """How compare_torch.py timed a JSON's rows. Those from before 2026-11-30 have no
    launches_per_event: one launch per CUDA-event pair."""
    n = data.get("launches_per_event", 1)
    if n == 1:
        return "median of CUDA-event times"
    return f"median of CUDA-event times over back-to-back launches (`--launches {n}`; 0: about 5 ms of them)"


def fallbacks(impls):
    """The fallbacks at d = 64 of the versions in a run: 'v8 at d = 64 runs v7, v10 ... v12 run v9'."""
    late = [v.split()[1] for v in ("fa05 v10", "fa05 v11", "fa05 v12") if v in impls]
    text = "v8 at d = 64 runs v7"
    if len(late) == 1:
        text += f", {late[0]} runs v9"
    elif len(late) == 2:
        text += f", {late[0]} and {late[1]} run v9"
    elif late:
        text += f", {late[0]} ... {late[-1]} run v9"
    return text


def compare_table(src, dtype, link):
    data = json.loads((ROOT / src).read_text())
    rows = [r for r in data["rows"] if r["dtype"] == dtype]
    impls = [i for i in IMPLS if any(r["impl"] == i and r["ms"] for r in rows)]
    head = "| d | causal | N | B x H | " + " | ".join(f"`{i}`" for i in impls)
    tensor_core = [v for v in VERSIONS[1:] if v in impls]
    has_flash = "sdpa flash" in impls and bool(tensor_core)
    head += " | newest / flash |" if has_flash else " |"
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
            # The newest version that runs itself at this point (v12 at d = 128; v9 at d = 64, where
            # v10 ... v12 would run v9).
            newest = next((v for v in reversed(tensor_core) if cell.get(v) and cell[v]["tflops"]), None)
            v2, fl = cell.get(newest), cell.get("sdpa flash")
            line += f" {v2['tflops'] / fl['tflops']:.2f} |" if v2 and fl and v2["tflops"] and fl["tflops"] else " - |"
        out.append(line)
    out.append("")
    out.append(f"TFLOP/s (forward, 4·B·H·N²·d, halved for causal), {timing_method(data)}, {dtype}, "
               f"measured {data['date']} on an {data['device']} (PyTorch {data['torch']}, CUDA {data['cuda']}, "
               f"cuDNN {data['cudnn']}) by `scripts/gpu_check.sh` (`python3 tools/compare_torch.py --lib "
               f"build-gpu/05_cuda_tiled/libfa05.so --json ...`); `-`: the backend refuses the dtype, or its S and P "
               f"would pass 40 GiB, or the kernel falls back to another there ({fallbacks(impls)})"
               + ("; newest / flash: the newest version that runs at that point"
                  + (" (v12 at d = 128, v9 at d = 64)" if "fa05 v12" in impls
                     else " (v11 at d = 128, v9 at d = 64)" if "fa05 v11" in impls
                     else " (v10 at d = 128, v9 at d = 64)" if "fa05 v10" in impls else "")
                  + " against SDPA's flash backend" if has_flash else "") + f"; source: [{src}]({link}).")
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


def versions_table(src, n_arg, link):
    data = json.loads((ROOT / src).read_text())
    n = int(n_arg or 8192)
    rows = [r for r in data["rows"] if r["dtype"] == "bf16" and r["N"] == n]
    cols = [(64, False), (64, True), (128, False), (128, True)]
    at = {(r["impl"], r["d"], r["causal"]): r["tflops"] for r in rows}
    head = "| version | " + " | ".join(f"d = {d}{', causal' if c else ''}" for d, c in cols) + " |"
    out = [head, "|---|" + "---:|" * len(cols)]
    for impl in VERSIONS + ["sdpa flash", "sdpa cudnn"]:
        cells = []
        for d, c in cols:
            tf, fl = at.get((impl, d, c)), at.get(("sdpa flash", d, c))
            cells.append(f"{tf:.0f} ({tf / fl:.2f}x)" if tf and fl else "-")
        out.append(f"| `{impl}` | " + " | ".join(cells) + " |")
    out.append("")
    out.append(f"bf16 forward TFLOP/s at N = {n} (B = {16384 // n}, H = 2048/d) and, in brackets, the ratio to "
               f"SDPA's flash backend (FlashAttention-2) in the same process; measured {data['date']} on an "
               f"{data['device']} by `scripts/gpu_check.sh` (`tools/compare_torch.py`); source: [{src}]({link}).")
    return "\n".join(out) + "\n"


def shape_table(src, kernel, link):
    data, rows = bench_rows(src)
    rows = [b for b in rows if b["name"].startswith("BM_shape") and b["label"].startswith(kernel + ":")]
    cols = sorted({(args(b["name"])["d"], args(b["name"])["causal"], args(b["name"])["N"]) for b in rows})
    shapes = sorted({(int(b["Br"]), int(b["Bc"])) for b in rows})
    tf = {}
    for b in rows:
        a = args(b["name"])
        tf[(a["Br"], a["Bc"], a["d"], a["causal"], a["N"])] = b["TFLOP/s"]
    rows_per_warp = 32 if kernel == "v6" else 16  # v5, v7 ... v11: 16 rows per warp
    out = ["| Br x Bc | warps | " + " | ".join(f"d={d} {'c' if c else 'nc'} N={n}" for d, c, n in cols) + " |",
           "|---|---:|" + "---:|" * len(cols)]
    for br, bc in shapes:
        cells = []
        for d, c, n in cols:
            v = tf.get((br, bc, d, c, n))
            best = max(tf.get((s[0], s[1], d, c, n), 0) for s in shapes)
            cells.append("-" if v is None else (f"**{v:.0f}**" if v == best else f"{v:.0f}"))
        out.append(f"| {br} x {bc} | {br // rows_per_warp} | " + " | ".join(cells) + " |")
    ctx = data["context"]
    out.append("")
    out.append(f"{kernel} in bf16, TFLOP/s (bold: the fastest shape of the column); nc/c: not causal/causal; "
               f"B = 16384/N, H = 2048/d. Measured {ctx['date'][:10]} on an {ctx.get('gpu', '?')} by "
               f"`scripts/gpu_check.sh` (`bench_05_cuda_tiled --benchmark_filter=BM_shape`); source: [{src}]({link}).")
    return "\n".join(out) + "\n"


def bwd_table(src, sdpa_src, link):
    data, rows = bench_rows(src)
    ours = {}
    for b in rows:
        if b["name"].startswith("BM_bwd/"):
            a = args(b["name"])
            ours[(a["d"], bool(a["causal"]), a["N"], b["label"])] = b
    sdpa = json.loads((ROOT / sdpa_src).read_text())
    # The second file's link, relative to the README as `link` is (the two sit in one folder).
    sdpa_link = str(pathlib.PurePosixPath(link).parent / pathlib.PurePosixPath(sdpa_src).name)
    assert pathlib.PurePosixPath(src).parent == pathlib.PurePosixPath(sdpa_src).parent
    theirs = {(r["d"], r["causal"], r["N"], r["impl"]): r for r in sdpa["rows"] if r["impl"].startswith("sdpa_bwd")}
    cols = [("gpu_v1:fp32", "`gpu_v1` fp32"), ("gpu_v2:bf16", "`gpu_v2`"), ("gpu_v2_det:bf16", "`gpu_v2_det`"),
            ("gpu_v3:bf16", "`gpu_v3`"), ("gpu_v3_det:bf16", "`gpu_v3_det`"),
            ("gpu_v4:bf16", "`gpu_v4`"), ("gpu_v4_det:bf16", "`gpu_v4_det`"),
            ("sdpa_bwd flash", "SDPA flash"), ("sdpa_bwd cudnn", "SDPA cuDNN"), ("sdpa_bwd efficient", "SDPA efficient")]
    out = ["| d | causal | N | B x H | " + " | ".join(c[1] for c in cols) + " | best / flash | its det / it |",
           "|" + "---:|" * (4 + len(cols) + 2)]
    keys = sorted({k[:3] for k in ours})
    for d, causal, n in keys:
        line = f"| {d} | {'yes' if causal else 'no'} | {n} | {16384 // n} x {2048 // d} |"
        tf = {}
        for key, _ in cols:
            r = ours.get((d, causal, n, key)) or theirs.get((d, causal, n, key))
            v = (r.get("TFLOP/s") or r.get("tflops")) if r else None
            tf[key] = v
            line += f" {v:.1f} |" if v else " - |"
        # The fastest of gpu_v2, gpu_v3 and gpu_v4 against flash, and its deterministic variant against it.
        best = max((k for k in ("gpu_v2:bf16", "gpu_v3:bf16", "gpu_v4:bf16") if tf.get(k)), key=lambda k: tf[k], default=None)
        fl = tf["sdpa_bwd flash"]
        if best and fl:
            line += f" {tf[best] / fl:.2f} ({best.split(':')[0][4:]}) |"
        else:
            line += " - |"
        det = tf.get(best.replace(":", "_det:")) if best else None
        line += f" {det / tf[best]:.2f} |" if det else " - |"
        out.append(line)
    ctx = data["context"]
    out.append("")
    out.append(f"TFLOP/s (backward: 2.5 x the forward's 4·B·H·N²·d, halved for causal); bf16 unless marked; "
               f"`gpu_v1` (the fp32 port) at N <= 4096 only. Ours: Google Benchmark, one backward per CUDA-event "
               f"pair, measured {ctx['date'][:10]} on an {ctx.get('gpu', '?')} (`build-gpu/06_backward_recompute/"
               f"bench_06_backward_gpu`, source: [{src}]({link})); "
               f"SDPA: `torch.autograd.grad` through one forward, {timing_method(sdpa)}, measured {sdpa['date']} "
               f"(PyTorch {sdpa['torch']}, CUDA {sdpa['cuda']}, cuDNN {sdpa['cudnn']}) by `python3 tools/compare_torch.py "
               f"--backward` in the same `scripts/gpu_check.sh` session (source: [{sdpa_src}]({sdpa_link})).")
    return "\n".join(out) + "\n"


def bwd_shape_table(src, _, link):
    data, rows = bench_rows(src)
    out = ["| d | keys a block, Bc | keys a warp | warps | causal | N | ms | TFLOP/s | shared memory per block |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for b in rows:
        if not b["name"].startswith("BM_bwd_shape/"):
            continue
        a = args(b["name"])
        kw = a.get("keys_per_warp", 16)
        out.append(f"| {a['d']} | {a['block_k']} | {kw} | {a['block_k'] // kw} | {'yes' if a['causal'] else 'no'} | "
                   f"{a['N']} | {ms(b):.3g} | {b['TFLOP/s']:.1f} | {fmt_bytes(b['smem_bytes'])} |")
    ctx = data["context"]
    out.append("")
    out.append(f"`gpu_v2`, bf16, B = 16384/N, H = 2048/d; measured {ctx['date'][:10]} on an {ctx.get('gpu', '?')} by "
               f"`scripts/gpu_check.sh` (`bench_06_backward_gpu`, BM_bwd_shape); source: [{src}]({link}).")
    return "\n".join(out) + "\n"


H200_DRAM_GBS = 4800.0  # datasheet HBM3e bandwidth, GB/s: converts ncu's "DRAM Throughput %" to bytes


def ncu_kernels(path):
    """The program's problem line and, per profiled kernel, (duration ms, DRAM GB/s, L2 hit %) from
    an ncu log; DRAM GB/s from "Memory Throughput Gbyte/s" (detailed set) or, for the
    SpeedOfLight section alone, from "DRAM Throughput %" of the datasheet bandwidth."""
    text = path.read_text()
    m = re.search(r"problem  : B=(\d+) H=(\d+) H_kv=(\d+) N_q=(\d+) N_k=(\d+) d=(\d+)", text)
    prob = dict(zip(("B", "H", "H_kv", "N_q", "N_k", "d"), map(int, m.groups())))
    br = re.search(r"Br = (\d+)", text)
    prob["Br"] = int(br.group(1)) if br else None
    kernels = []
    for sec in re.split(r"\n  \S[^\n]*\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)", text)[1:]:
        dur = float(re.search(r"Duration\s+ms\s+([\d.]+)", sec).group(1))
        gbs = re.search(r"Memory Throughput\s+Gbyte/s\s+([\d.]+)", sec)
        if gbs:
            rate, est = float(gbs.group(1)), False
        else:
            rate, est = float(re.search(r"DRAM Throughput\s+%\s+([\d.]+)", sec).group(1)) / 100 * H200_DRAM_GBS, True
        l2 = re.search(r"L2 Hit Rate\s+%\s+([\d.]+)", sec)
        kernels.append((dur, rate, float(l2.group(1)) if l2 else None, est))
    return prob, kernels


def io_table(src, _, link):
    folder = ROOT / src
    rows = [("v1", "ncu_v1.log"), ("v2", "ncu_v2.log"), ("v4", "ncu_v4.log"), ("v5", "ncu_v5.log"),
            ("v5", "ncu_v5_d128.log"), ("cublas (S, P in HBM)", "ncu_cublas.log")]
    out = ["| kernel | B x H, N, d | time (ms) | HBM bytes moved | must move (Q, K, V, O, LSE) | "
           "(5.6) with no cache | S and P too (materialised) | L2 hit rate |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
    for name, log in rows:
        if not (folder / log).exists():
            continue
        p, ks = ncu_kernels(folder / log)
        if name.startswith("cublas"):
            ks = ks[:3]  # one forward: S = Q K^T, the softmax, O = P V (the 4th is the next call's)
        ms_total = sum(k[0] for k in ks)
        moved = sum(k[0] * 1e-3 * k[1] * 1e9 for k in ks)
        est = any(k[3] for k in ks)
        heads = p["B"] * p["H"]
        q, kv = heads * p["N_q"] * p["d"], p["B"] * p["H_kv"] * p["N_k"] * p["d"]
        must = 2 * (2 * q + 2 * kv) + 4 * heads * p["N_q"]  # bf16 tensors, float32 LSE
        if p["Br"]:
            tr = -(-p["N_q"] // p["Br"])
            nocache = heads * (2 * (2 * p["N_q"] * p["d"] + 2 * p["N_k"] * p["d"] * tr) + 4 * p["N_q"])
            nocache_s = f"{nocache / 1e6:,.0f} MB (Br = {p['Br']})"
        else:
            nocache_s = "-"
        # The materialised baseline also writes S (float32) and reads it, writes P (bf16) and reads it.
        mat = must + heads * p["N_q"] * p["N_k"] * (4 + 4 + 2 + 2) if name.startswith("cublas") else None
        l2 = [k[2] for k in ks if k[2] is not None]
        out.append(f"| {name} | {heads // p['H']} x {p['H']}, {p['N_q']}, {p['d']} | {ms_total:.2f} | "
                   f"{'~' if est else ''}{moved / 1e6:,.0f} MB | {must / 1e6:,.0f} MB | {nocache_s} | "
                   f"{f'{mat / 1e6:,.0f} MB' if mat else '-'} | {f'{l2[0]:.0f}%' if l2 else '-'} |")
    out.append("")
    out.append(f"bf16, non-causal, one launch each, profiled with `ncu --set detailed` (cuBLAS: `--section SpeedOfLight`, "
               f"its three kernels summed) by `scripts/gpu_check.sh` on an NVIDIA H200; HBM bytes = DRAM throughput x "
               f"duration as ncu reports them (`~`: from the DRAM throughput in % of the datasheet's "
               f"{H200_DRAM_GBS / 1000:.1f} TB/s); L2 hit rate as ncu prints it (it can read a little over 100%); sources: "
               f"the ncu logs in [{src}]({link}).")
    return "\n".join(out) + "\n"


def numerics_table(src, _, link):
    data = json.loads((ROOT / src).read_text())
    rows = data["rows"]
    impls = []
    for r in rows:
        if r["impl"] not in impls:
            impls.append(r["impl"])
    cases = []
    for r in rows:
        key = (r["case"], r["N_k"], r["d_true"], r["dtype"])
        if key not in cases:
            cases.append(key)
    err = {(r["case"], r["N_k"], r["d_true"], r["dtype"], r["impl"]): r for r in rows}

    def cell(r):
        if r is None or r["max_err"] is None:
            return "-"
        e = r["max_err"]
        return "**inf**" if e == float("inf") else f"{e:.1e}"

    short = [i.replace("fa05 ", "").replace("sdpa ", "") for i in impls]
    out = ["| case | N_k | d | dtype | input rounding | " + " | ".join(f"`{s}`" for s in short) + " |",
           "|---|---:|---:|---|---:|" + "---:|" * len(impls)]
    for c in cases:
        first = next(r for r in rows if (r["case"], r["N_k"], r["d_true"], r["dtype"]) == c)
        out.append(f"| {c[0]} | {c[1]} | {c[2]} | {c[3]} | {first['input_rounding']:.1e} | "
                   + " | ".join(cell(err.get(c + (i,))) for i in impls) + " |")
    versions = [s for s in short if s.startswith("v")]  # the stage 05 versions this JSON has
    out.append("")
    out.append(f"max |O - O64| over every element, O64 = float64 attention on the inputs as rounded to the dtype; "
               f"input rounding: |O64(rounded inputs) - O64(fp32 inputs)|; **inf**: a NaN or inf in O. "
               f"{versions[0]} ... {versions[-1]}, cublas: stage 05's kernels (a version that would fall back to another at that d is left out); flash, "
               f"cudnn, efficient, math: SDPA's backends; naive16: materialised attention in PyTorch ops, every "
               f"intermediate stored in the dtype. Measured {data['date']} on an {data['device']} (PyTorch "
               f"{data['torch']}) by `scripts/gpu_check.sh` (`python3 tools/gpu_numerics.py --lib "
               f"build-gpu/05_cuda_tiled/libfa05.so --json ...`); source: [{src}]({link}).")
    return "\n".join(out) + "\n"


KINDS = {"numerics": numerics_table, "compare": compare_table, "bench": bench_table, "sram": sram_table, "versions": versions_table,
         "shape": shape_table, "bwd": bwd_table, "bwd_shape": bwd_shape_table, "io": io_table}


def main(paths):
    # paths empty: every README and every .md under docs/ (io.md and the lab notebooks hold tables)
    rewrite_readmes(paths, BLOCK,
                    lambda m, link: m.group(1) + KINDS[m.group("kind")](m.group("src"), m.group("arg"), link) + m.group(6))


if __name__ == "__main__":
    main(sys.argv[1:])
