#!/usr/bin/env python3
"""Stage 04 beside PyTorch's CPU scaled_dot_product_attention, in one process, on the same data.

Loads build/04_tiled_cpu/libfa04.so with ctypes (the C ABI of 04_tiled_cpu/fa04.h) and hands it
PyTorch CPU tensors' data pointers, so stage 04 and PyTorch read the same memory.

For each point of the grid (B = 1, H = 8, fp32, d 64 and 128, N = N_q = N_k 1024 ... 16384,
causal and not; causal is the same mask for both since N_q = N_k):
1. Check: O of both against float64 on head 0 (PyTorch's SDPA in float64 on the upcast inputs),
   and stage 04's LSE against the logsumexp that PyTorch's CPU flash kernel
   (aten._scaled_dot_product_flash_attention_for_cpu) returns. Stage 04 passes when its O error is
   at most 2x PyTorch's + 1e-5 (FlashAttention's test rule, PyTorch in float32 as the baseline)
   and its LSE within 1e-4 * max(1, |LSE|).
2. Timing: warm-up, then calls alternating (stage 04, PyTorch, stage 04, ...) with a 20 ms pause
   between (so the other library's OpenMP threads have stopped spinning), at least --min-calls
   each and --min-seconds in all per side; the median wall time of each. GFLOP/s by the
   FlashAttention convention (4 B H N^2 d, halved for causal), % of the FMA peak measured by
   libfa04 (fa04_fma_peak_gflops, before and after the grid; the larger is used), and the ratio
   torch time / stage 04 time (> 1: stage 04 faster): the median over the pairs of consecutive
   calls (JSON "ratio"; the ratio of the two medians is kept as "ratio_of_medians").
3. The two GEMMs alone: the attention's two products done by PyTorch's sgemm (MKL) with S
   materialised (S = Q K^T, then O = S V, d 64 and 128, N = 4096, best of 5 calls), in GFLOP/s
   by the same convention and % of the same peak: the same multiply-adds with no softmax between
   them, but S (512 MiB at N = 4096, H = 8) going through main memory; always at N = 4096, also
   with --quick or --N (JSON context "gemm_alone"; "gemm_ceiling" in run 6 of 2026-12-01, a name
   it did not deserve: stage 04 beat it).
The JSON records the machine: CPU model, the ISA stage 04 was built for, PyTorch's CPU capability,
L2 per core, cores, threads, versions, date.

Usage (tools/compare_torch_cpu.sh sets up the venv and the library, then runs this):
  python3 tools/compare_torch_cpu.py --lib build/04_tiled_cpu/libfa04.so [--threads 2]
         [--json docs/results/compare_torch_cpu.json] [--quick] [--d 64,128] [--N 1024,4096]
Exit code: 0 when every check passes, 1 when one fails, 2 on bad arguments or a missing library.
"""
import argparse
import ctypes
import datetime
import json
import os
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F


class Fa04:
    """The C ABI of fa04.h."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        i64, vp = ctypes.c_int64, ctypes.c_void_p
        self.lib.fa04_forward.argtypes = [vp, vp, vp, vp, vp, i64, i64, i64, i64, i64, i64,
                                          ctypes.c_int, ctypes.c_float, i64, i64, ctypes.c_int]
        self.lib.fa04_forward.restype = ctypes.c_int
        self.lib.fa04_blocks_for.argtypes = [i64, i64, i64, i64, i64, ctypes.c_int, ctypes.c_int,
                                             ctypes.POINTER(i64), ctypes.POINTER(i64)]
        self.lib.fa04_fma_peak_gflops.argtypes = [ctypes.c_int, ctypes.c_int]
        self.lib.fa04_fma_peak_gflops.restype = ctypes.c_double
        self.lib.fa04_isa.restype = ctypes.c_char_p
        self.lib.fa04_last_error.restype = ctypes.c_char_p

    def forward(self, q, k, v, causal, threads, out, lse):
        """O, LSE of stage 04 for q [B,H,N_q,d], k, v [B,H_kv,N_k,d] (contiguous float32)."""
        B, H, Nq, d = q.shape
        s = self.lib.fa04_forward(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                                  lse.data_ptr(), B, H, k.shape[1], Nq, k.shape[2], d, int(causal),
                                  0.0, 0, 0, threads)
        if s != 0:
            raise RuntimeError("fa04_forward: " + self.lib.fa04_last_error().decode())
        return out, lse

    def blocks(self, B, H, N, d, causal, threads):
        """The blocks fa04_forward runs this problem with (tiled::blocks_for)."""
        br, bc = ctypes.c_int64(), ctypes.c_int64()
        if self.lib.fa04_blocks_for(B, H, N, N, d, int(causal), threads, ctypes.byref(br), ctypes.byref(bc)):
            raise RuntimeError("fa04_blocks_for: " + self.lib.fa04_last_error().decode())
        return br.value, bc.value

    def peak(self, threads):
        return self.lib.fa04_fma_peak_gflops(threads, 3)

    def isa(self):
        return self.lib.fa04_isa().decode()


def machine(threads):
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    l2 = 0  # what stage 04 sizes its blocks from (sysconf in C; Python's os.sysconf lacks the name)
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index2/size") as f:
            s = f.read().strip()
            l2 = int(s[:-1]) * {"K": 1 << 10, "M": 1 << 20}[s[-1]] if s[-1] in "KM" else int(s)
    except (OSError, ValueError, KeyError):
        pass
    return {"cpu": model, "cores": os.cpu_count(), "threads": threads, "l2_bytes_per_core": l2,
            "torch": torch.__version__, "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch_mkl": torch.backends.mkl.is_available(), "python": platform.python_version(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def check(lib, q, k, v, causal, threads):
    """Errors of stage 04 and PyTorch against float64 (head 0), and stage 04's LSE against PyTorch's."""
    B, H, N, d = q.shape
    ours = torch.full_like(q, float("nan"))
    lse = torch.full((B, H, N), float("nan"), dtype=torch.float32)
    lib.forward(q, k, v, causal, threads, ours, lse)
    theirs, t_lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)[:2]
    ref = F.scaled_dot_product_attention(q[:, :1].double(), k[:, :1].double(), v[:, :1].double(),
                                         is_causal=causal)
    err_ours = (ours[:, :1].double() - ref).abs().max().item()
    err_torch = (theirs[:, :1].double() - ref).abs().max().item()
    lse_err = ((lse - t_lse).abs() / t_lse.abs().clamp(min=1)).max().item()
    finite = bool(torch.isfinite(ours).all() and torch.isfinite(lse).all())
    ok = finite and err_ours <= 2 * err_torch + 1e-5 and lse_err <= 1e-4
    return {"err_o_stage04": err_ours, "err_o_torch": err_torch, "err_lse_rel": lse_err, "ok": ok}


def time_pair(lib, q, k, v, causal, threads, min_calls, min_seconds):
    """Median wall times (ms) of stage 04 and PyTorch, called alternately, and the median of the
    per-pair ratios (PyTorch's call / the stage 04 call just before it): two calls a few ms apart
    share the machine's state, so the ratio of a pair is steadier than the ratio of two medians
    when another VM takes a core for a while."""
    out, lse = torch.empty_like(q), torch.empty(q.shape[:3], dtype=torch.float32)
    ours = lambda: lib.forward(q, k, v, causal, threads, out, lse)
    theirs = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    ours(), theirs()  # warm-up: first-touch of buffers, thread pools started
    t_ours, t_theirs = [], []
    while len(t_ours) < min_calls or min(sum(t_ours), sum(t_theirs)) < min_seconds * 1e3:  # ms
        for f, ts in ((ours, t_ours), (theirs, t_theirs)):
            time.sleep(0.02)
            t0 = time.perf_counter()
            f()
            ts.append((time.perf_counter() - t0) * 1e3)
    pair = statistics.median(t / o for o, t in zip(t_ours, t_theirs))
    return statistics.median(t_ours), statistics.median(t_theirs), pair, len(t_ours)


def gemm_alone(d, N, heads, calls=5):
    """GFLOP/s (4 heads N^2 d flops) of S = Q K^T then O = S V by torch.matmul, S materialised,
    best of `calls` (the least disturbed): the two GEMMs of attention with nothing in between."""
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(heads, N, d, generator=gen) for _ in range(3))
    s, o = torch.empty(heads, N, N), torch.empty(heads, N, d)
    best = float("inf")
    for i in range(calls + 1):  # the first call warms up
        time.sleep(0.02)
        t0 = time.perf_counter()
        torch.matmul(q, k.transpose(1, 2), out=s)
        torch.matmul(s, v, out=o)
        if i:
            best = min(best, time.perf_counter() - t0)
    return 4.0 * heads * N * N * d / best * 1e-9


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default="build/04_tiled_cpu/libfa04.so")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true", help="N 1024 and 4096 only, fewer calls")
    ap.add_argument("--d", default="64,128")
    ap.add_argument("--N", default="1024,4096,8192,16384")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--min-calls", type=int, default=5)
    ap.add_argument("--min-seconds", type=float, default=1.0)
    a = ap.parse_args()
    try:
        ds = [int(x) for x in a.d.split(",")]
        Ns = [1024, 4096] if a.quick else [int(x) for x in a.N.split(",")]
    except ValueError:
        print(f"--d/--N: expected comma-separated integers, found {a.d!r} / {a.N!r}", file=sys.stderr)
        return 2
    if not (1 <= a.threads <= 256) or min(ds + Ns) < 1 or a.heads < 1:
        print(f"--threads/--d/--N/--heads: expected integers >= 1 (threads at most 256), found "
              f"{a.threads}/{a.d}/{a.N}/{a.heads}", file=sys.stderr)
        return 2
    if a.min_calls < 1 or not (0 <= a.min_seconds <= 3600):
        print(f"--min-calls/--min-seconds: expected >= 1 and 0 to 3600, found {a.min_calls}/{a.min_seconds}",
              file=sys.stderr)
        return 2
    tensor_bytes = max(3 * a.heads * max(Ns) * max(ds) * 4 * 3,  # Q, K, V; two outputs and the float64 check
                       a.heads * 4096 * 4096 * 4)  # S of gemm_alone
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if tensor_bytes > mem // 2:
        print(f"--N/--d/--heads: expected tensors within half of the {mem >> 20} MiB of memory, found "
              f"{tensor_bytes >> 20} MiB", file=sys.stderr)
        return 2
    if a.json and not os.path.isdir(os.path.dirname(os.path.abspath(a.json))):
        print(f"--json: expected a file in an existing folder, found {a.json}", file=sys.stderr)
        return 2
    if not os.path.isfile(a.lib):
        print(f"--lib: expected libfa04.so (cmake --build build --target fa04), found no file {a.lib}",
              file=sys.stderr)
        return 2
    lib = Fa04(a.lib)
    torch.set_num_threads(a.threads)
    min_calls = 3 if a.quick else a.min_calls
    info = machine(a.threads)
    info["stage04_isa"] = lib.isa()
    peak_before = lib.peak(a.threads)
    print(f"# {info['cpu']}, {info['cores']} cores, L2 {info['l2_bytes_per_core'] >> 10} KiB/core, "
          f"{a.threads} threads; stage 04 built for {info['stage04_isa']}; PyTorch {info['torch']} "
          f"(CPU capability {info['torch_cpu_capability']}); FMA peak {peak_before:.1f} GFLOP/s (before)")
    rows, all_ok = [], True
    gen = torch.Generator().manual_seed(0)
    for d in ds:
        for N in Ns:
            for causal in (False, True):
                q, k, v = (torch.randn(1, a.heads, N, d, generator=gen) for _ in range(3))
                c = check(lib, q, k, v, causal, a.threads)
                ms_ours, ms_torch, pair, calls = time_pair(lib, q, k, v, causal, a.threads, min_calls,
                                                     a.min_seconds)
                flops = 4.0 * a.heads * N * N * d * (0.5 if causal else 1.0)
                br, bc = lib.blocks(1, a.heads, N, d, causal, a.threads)
                row = {"d": d, "N": N, "causal": causal, "B": 1, "H": a.heads, "Br": br, "Bc": bc, "stage04_ms": ms_ours, "torch_ms": ms_torch, "calls": calls,
                       "stage04_gflops": flops / ms_ours * 1e-6, "torch_gflops": flops / ms_torch * 1e-6,
                       "ratio": pair, "ratio_of_medians": ms_torch / ms_ours, **c}
                rows.append(row)
                all_ok &= c["ok"]
                print(f"  d={d} N={N} causal={int(causal)}: ratio {row['ratio']:.2f}, "
                      f"{'ok' if c['ok'] else 'FAIL'}", flush=True)
    gemm = {d: gemm_alone(d, 4096, a.heads) for d in ds}
    # The peak divides last: the larger of two measurements, so a moment when another process
    # held a core does not inflate every percentage.
    peak_after = lib.peak(a.threads)
    peak = max(peak_before, peak_after)
    for r in rows:
        r["stage04_pct_peak"] = r["stage04_gflops"] / peak * 100
    info.update(fma_peak_gflops_before=peak_before, fma_peak_gflops_after=peak_after,
                fma_peak_gflops=peak,
                gemm_alone={str(d): {"N": 4096, "H": a.heads, "gflops": g, "pct_peak": g / peak * 100}
                              for d, g in gemm.items()})
    print(f"{'d':>4} {'N':>6} {'causal':>6} {'Br x Bc':>10} {'stage04 ms':>11} {'torch ms':>9} "
          f"{'s04 GF/s':>9} {'torch GF/s':>10} {'s04 %pk':>8} {'ratio':>6}  check")
    for r in rows:
        print(f"{r['d']:>4} {r['N']:>6} {int(r['causal']):>6} {r['Br']:>4} x {r['Bc']:<4} "
              f"{r['stage04_ms']:>11.2f} {r['torch_ms']:>9.2f} {r['stage04_gflops']:>9.1f} "
              f"{r['torch_gflops']:>10.1f} {r['stage04_pct_peak']:>7.1f}% {r['ratio']:>6.2f}  "
              f"{'ok' if r['ok'] else 'FAIL'} (O err {r['err_o_stage04']:.1e} vs torch "
              f"{r['err_o_torch']:.1e}, LSE {r['err_lse_rel']:.1e})")
    print("# the two GEMMs alone (PyTorch's sgemm, S = Q K^T then O = S V, S materialised, N = 4096, best of 5): " +
          ", ".join(f"d={d} {g:.1f} GFLOP/s = {g / peak * 100:.1f}% of peak" for d, g in gemm.items()))
    worst = min(rows, key=lambda r: r["ratio"])
    print(f"# FMA peak {peak_before:.1f} before, {peak_after:.1f} after; worst ratio "
          f"{worst['ratio']:.2f} (d={worst['d']} N={worst['N']} causal={int(worst['causal'])}); "
          f"checks {'all pass' if all_ok else 'FAIL'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"context": info, "command": " ".join(sys.argv), "rows": rows}, f, indent=1)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
