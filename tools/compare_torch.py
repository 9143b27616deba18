#!/usr/bin/env python3
"""Stage 05 beside PyTorch's scaled_dot_product_attention, in one process, on one GPU.

Loads build*/05_cuda_tiled/libfa05.so with ctypes (the C ABI of 05_cuda_tiled/fa05.h) and hands
it PyTorch tensors' device pointers, so our kernels and SDPA's backends read the same memory.

1. Checks: every kernel, in fp32, fp16 and bf16, on shapes with ragged N, N_q != N_k, GQA and
   causal, against float64 (SDPA's math backend on the same, upcast inputs, so the reference sees
   exactly the values the kernel sees). O passes when its error is at most 2x the error of SDPA's
   math backend run in the same dtype, plus 1e-5 (FlashAttention's own test rule, with PyTorch's
   attention in that precision as the baseline); LSE (float32) within 1e-4 * max(1, |LSE|).
   Causal: ours is bottom-right aligned (query i sees key j iff j <= i + N_k - N_q), PyTorch's
   is_causal=True is top-left (j <= i). The check uses an explicit bottom-right mask, and shows
   that with N_q != N_k is_causal=True would disagree.
2. Timing: the FlashAttention papers' grid (B*N = 16384 tokens, H = 2048/d, N from 512 to 16384,
   d 64 and 128, causal and not), each of our kernels and each SDPA backend (flash, cuDNN,
   efficient, math), timed alternately in this process with CUDA events: warm-up, then the median
   of several samples, each a run of back-to-back launches between two events (time_ms() says
   why; --launches 1 for one launch per pair). TFLOP/s by the FlashAttention convention: 4*B*H*N_q*N_k*d, halved for
   causal. A backend that refuses a problem (flash and cuDNN take no fp32) is reported as such.

3. With --backward: the same grid in bf16, SDPA's backward alone (flash, cuDNN, efficient): the
   forward runs once, then each timed call is torch.autograd.grad through it (retain_graph), so
   only the backward kernels run; and in the same process, on the same tensors, stage 06's
   backward through libfa06.so (06_backward_recompute/fa06.h: its "auto" kernel, or each of
   --bwd-kernels, from the O and LSE of stage 05's forward), so the ratio to SDPA's backward is
   measured in one process.
   Backward TFLOP/s: 2.5x the forward's FLOPs (FA2's convention).

Usage: python3 tools/compare_torch.py --lib build-gpu/05_cuda_tiled/libfa05.so [--json out.json]
       [--lib06 PATH]   (default: 06_backward_recompute/libfa06.so of the same build)
       [--bwd-kernels gpu_v3,gpu_v4]   (with --backward; default auto)
       [--quick]   (fewer sizes)   [--backward]   [--dtypes fp16]   (default bf16,fp32)
Needs a CUDA GPU and PyTorch (>= 2.5 for enable_gqa); not part of the README's two commands.
"""
import argparse
import ctypes
import json
import math
import platform
import statistics
import sys
import time

import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

DTYPES = {"fp32": (0, torch.float32), "fp16": (1, torch.float16), "bf16": (2, torch.bfloat16)}
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}


class Fa05:
    """The C ABI of fa05.h."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        i64, vp = ctypes.c_int64, ctypes.c_void_p
        self.lib.fa05_forward.argtypes = [ctypes.c_char_p, vp, vp, vp, vp, vp, i64, i64, i64, i64,
                                          i64, i64, ctypes.c_int, ctypes.c_int, ctypes.c_float, vp]
        self.lib.fa05_forward.restype = ctypes.c_int
        self.lib.fa05_last_error.restype = ctypes.c_char_p
        self.lib.fa05_kernel_count.restype = ctypes.c_int
        self.lib.fa05_kernel_name.restype = ctypes.c_char_p
        self.lib.fa05_kernel_name.argtypes = [ctypes.c_int]
        self.lib.fa05_runs.restype = ctypes.c_char_p
        self.lib.fa05_runs.argtypes = [ctypes.c_char_p, i64, ctypes.c_int]
        self.kernels = [self.lib.fa05_kernel_name(i).decode() for i in range(self.lib.fa05_kernel_count())]

    def runs(self, kernel, d, dtype):
        """The kernel that really runs for head dim d in dtype (a tensor-core version may fall back)."""
        code = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}[dtype]
        r = self.lib.fa05_runs(kernel.encode(), d, code)
        return r.decode() if r else None

    def forward(self, kernel, q, k, v, causal, scale, out=None, lse=None):
        """O, LSE of `kernel` for q [B,H,N_q,d], k, v [B,H_kv,N_k,d] (contiguous, one dtype)."""
        B, H, Nq, d = q.shape
        Hkv, Nk = k.shape[1], k.shape[2]
        out = torch.empty_like(q) if out is None else out
        lse = torch.empty(B, H, Nq, dtype=torch.float32, device=q.device) if lse is None else lse
        code = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}[q.dtype]
        status = self.lib.fa05_forward(kernel.encode(), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                       out.data_ptr(), lse.data_ptr(), B, H, Hkv, Nq, Nk, d, code,
                                       int(causal), float(scale), torch.cuda.current_stream().cuda_stream)
        if status != 0:
            raise RuntimeError(f"fa05_forward({kernel}): status {status}: {self.lib.fa05_last_error().decode()}")
        return out, lse


def open_gpu(tool, lib):
    """(Fa05, device) for one of the tools that drive libfa05.so beside SDPA (this one,
    gpu_numerics.py, decode_bench.py), or None after one line on stderr when there is no GPU.
    SDPA's notes on backends it does not use for a shape are silenced: a refusal still raises."""
    if not torch.cuda.is_available():
        print(f"{tool}: expected a CUDA GPU, found none", file=sys.stderr)
        return None
    warnings.filterwarnings("ignore", message=".*(kernel not used|runtime disabled|does not support|same num_heads).*")
    return Fa05(lib), torch.device("cuda")


def bottom_right_mask(nq, nk, device):
    """True where query i sees key j: j <= i + N_k - N_q (FlashAttention >= 2.1)."""
    i = torch.arange(nq, device=device)[:, None]
    j = torch.arange(nk, device=device)[None, :]
    return j <= i + (nk - nq)


def reference(q, k, v, causal, scale):
    """float64 O and LSE from SDPA's math backend on the upcast inputs. A row that sees no key
    gets O = 0, LSE = -inf (our convention; SDPA's math softmax of an all-masked row is not)."""
    g = q.shape[1] // k.shape[1]
    q64, k64, v64 = q.double(), k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    mask = bottom_right_mask(q.shape[2], k.shape[2], q.device) if causal else None
    with sdpa_kernel(SDPBackend.MATH):
        o = F.scaled_dot_product_attention(q64, k64, v64, attn_mask=mask, scale=scale)
    s = (q64 @ k64.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    o = torch.where(torch.isinf(lse)[..., None], torch.zeros_like(o), o)
    return o, lse


def sdpa(backend, q, k, v, causal, scale, bottom_right=True):
    """SDPA with one backend. Causal with N_q == N_k uses is_causal (the same mask either way)."""
    g = q.shape[1] // k.shape[1]
    kw = {"enable_gqa": True} if g > 1 else {}
    with sdpa_kernel(BACKENDS[backend]):
        if causal and q.shape[2] != k.shape[2]:
            from torch.nn.attention.bias import causal_lower_right, causal_upper_left
            bias = (causal_lower_right if bottom_right else causal_upper_left)(q.shape[2], k.shape[2])
            if g > 1:  # CausalBias does not take enable_gqa: expand the kv heads
                k, v, kw = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), {}
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale, **kw)
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, **kw)


def max_err(x, ref):
    x = x.double()
    bad = ~torch.isfinite(x) & ~(torch.isinf(x) & torch.isinf(ref) & (x == ref))
    if bad.any():
        return math.inf
    d = (x - ref).abs()
    d = torch.where(torch.isinf(ref) & (x == ref), torch.zeros_like(d), d)
    return d.max().item()


CHECK_SHAPES = [  # B, H, H_kv, N_q, N_k, d, causal
    (1, 2, 2, 1, 1, 64, False), (2, 4, 4, 17, 17, 64, True), (1, 8, 2, 113, 203, 64, True),
    (1, 8, 2, 203, 113, 64, True), (2, 4, 1, 128, 128, 128, False), (1, 4, 4, 1000, 999, 128, True),
    (1, 2, 2, 77, 77, 32, False), (1, 4, 2, 257, 300, 96, True), (1, 2, 2, 64, 64, 256, True),
]


def checks(fa, device, log):
    ok = True
    torch.manual_seed(0)
    for (B, H, Hkv, Nq, Nk, d, causal) in CHECK_SHAPES:
        for dname, (_, dt) in DTYPES.items():
            q = torch.randn(B, H, Nq, d, device=device).to(dt)
            k = torch.randn(B, Hkv, Nk, d, device=device).to(dt)
            v = torch.randn(B, Hkv, Nk, d, device=device).to(dt)
            scale = 1 / math.sqrt(d)
            o64, lse64 = reference(q, k, v, causal, scale)
            # Baseline: the larger error of SDPA's math and flash backends in this dtype (the math
            # backend upcasts 16-bit inputs to fp32 inside and rounds only O; FlashAttention-2 also
            # multiplies P in 16 bits, as our tensor-core and cuBLAS kernels do). Rows that see no
            # key are set to 0 in theirs, as in ours (their convention differs there).
            g = H // Hkv
            mask = bottom_right_mask(Nq, Nk, device) if causal else None
            with sdpa_kernel(SDPBackend.MATH):
                om = F.scaled_dot_product_attention(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1),
                                                    attn_mask=mask, scale=scale)
            base_from = {"math": om}
            if dt != torch.float32:
                try:
                    base_from["flash"] = sdpa("flash", q, k, v, causal, scale)
                except RuntimeError:
                    pass
            errs = {b: max_err(torch.where(torch.isinf(lse64)[..., None], torch.zeros_like(x), x), o64)
                    for b, x in base_from.items()}
            # A backend that returns NaN (flash's lower-right bias with N_q > N_k does) is no baseline.
            errs = {b: e for b, e in errs.items() if math.isfinite(e)} or {"none (all NaN)": 0.0}
            base_name = max(errs, key=errs.get)
            base = errs[base_name]
            for kern in fa.kernels:
                try:
                    o, lse = fa.forward(kern, q, k, v, causal, scale)
                    torch.cuda.synchronize()
                except RuntimeError as e:
                    if "status 2" in str(e):  # unsupported (e.g. d): reported, not a failure
                        log(f"  {kern:7s} {dname} {(B, H, Hkv, Nq, Nk, d, causal)}: unsupported ({e})")
                        continue
                    raise
                eo, el = max_err(o, o64), max_err(lse, lse64)
                lse_tol = 1e-4 * max(1.0, lse64[torch.isfinite(lse64)].abs().max().item() if torch.isfinite(lse64).any() else 1.0)
                good = eo <= 2 * base + 1e-5 and el <= lse_tol
                ok &= good
                ran = fa.runs(kern, d, dt)
                label = kern if ran == kern else f"{kern}>{ran}"  # e.g. v2>v1: v2 fell back to v1
                log(f"  {'ok  ' if good else 'FAIL'} {label:9s} {dname} B={B} H={H}/{Hkv} Nq={Nq} Nk={Nk} d={d} "
                    f"causal={int(causal)}: O err {eo:.2e} (baseline: SDPA {base_name} in {dname}, {base:.2e}), LSE err {el:.2e}")
    # Bottom-right vs top-left, made explicit on one N_q < N_k problem.
    q = torch.randn(1, 2, 64, 64, device=device, dtype=torch.bfloat16)
    k = torch.randn(1, 2, 200, 64, device=device, dtype=torch.bfloat16)
    v = torch.randn(1, 2, 200, 64, device=device, dtype=torch.bfloat16)
    o, _ = fa.forward(fa.kernels[0], q, k, v, True, 0.125)
    br = sdpa("flash", q, k, v, True, 0.125, bottom_right=True)
    with sdpa_kernel(SDPBackend.MATH):  # flash refuses is_causal with N_q != N_k
        tl = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.125)
    d_br, d_tl = max_err(o, br.double()), max_err(o, tl.double())
    log(f"  causal alignment, N_q = 64, N_k = 200: ours vs SDPA flash with causal_lower_right: {d_br:.2e}; "
        f"vs SDPA math with is_causal=True (top-left): {d_tl:.2e}")
    ok &= d_br < 5e-2 and d_tl > 1e-1
    return ok


def time_ms(fn, reps, launches=1):
    """Median milliseconds per launch of fn() over `reps` samples. A sample is `launches` back-to-back
    launches between two CUDA events, divided by their number: the host's cost per call (Python,
    ctypes, PyTorch's dispatcher, a plan) then runs while the launch before it computes, instead of
    being timed as GPU time, as it is when one launch sits between two events and is short (on the
    H200 at d = 128, N = 512, 11% of SDPA flash's time and 5% of v10's: 05 README, "Measuring small
    N"). launches = 0: as many as fill about 5 ms (1 to 20), from one launch timed alone; this
    tool's default since 2026-11-30 (--launches). launches = 1: one launch per pair, the method
    before, which decode_bench.py keeps (its results were taken so)."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()

    def sample(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(n):
            fn()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) / n

    n = launches if launches > 0 else max(1, min(20, round(5.0 / sample(1))))
    return statistics.median(sample(n) for _ in range(reps))


def timing(fa, device, quick, log, dtypes=("bf16", "fp32"), launches=0, dims=(64, 128), kernels=None, Ns=None,
           backends=tuple(BACKENDS)):
    rows = []
    Ns = Ns or ([1024, 4096, 16384] if quick else [512, 1024, 2048, 4096, 8192, 16384])
    for dname in dtypes:
        dt = DTYPES[dname][1]
        for d in dims:
            for causal in (False, True):
                for N in Ns:
                    B, H = 16384 // N, 2048 // d
                    torch.manual_seed(1)
                    q = torch.randn(B, H, N, d, device=device, dtype=dt)
                    k = torch.randn(B, H, N, d, device=device, dtype=dt)
                    v = torch.randn(B, H, N, d, device=device, dtype=dt)
                    flops = 4.0 * B * H * N * N * d * (0.5 if causal else 1.0)
                    scale = 1 / math.sqrt(d)
                    out = torch.empty_like(q)
                    lse = torch.empty(B, H, N, dtype=torch.float32, device=device)
                    # Every kernel that runs itself here (no fallbacks), or those asked for; "auto" as
                    # "fa05 auto=<what it ran>".
                    names = kernels or [kname for kname in fa.kernels if fa.runs(kname, d, dt) == kname]
                    impls = [(f"fa05 {kname}" + (f"={fa.runs(kname, d, dt)}" if kname == "auto" else ""),
                              lambda kname=kname: fa.forward(kname, q, k, v, causal, scale, out, lse)) for kname in names]
                    impls += [(f"sdpa {b}", lambda b=b: sdpa(b, q, k, v, causal, scale)) for b in backends]
                    line = {}
                    for name, fn in impls:
                        # The math backend materialises S and P in the dtype: skip where that alone
                        # passes 40 GiB, and fp32 v1 where one call runs for seconds.
                        if name == "sdpa math" and B * H * N * N * q.element_size() * 3 > 40 * 2**30:
                            ms, note = None, "skipped (S, P > 40 GiB)"
                        else:
                            try:
                                reps = 3 if flops / 1e12 > 5 else 10
                                ms, note = time_ms(fn, reps, launches), ""
                            except RuntimeError as e:
                                ms, note = None, "refused: " + str(e).splitlines()[0][:80]
                        torch.cuda.empty_cache()
                        row = {"impl": name, "dtype": dname, "N": N, "d": d, "causal": causal, "B": B, "H": H,
                               "ms": ms, "tflops": flops / (ms * 1e9) if ms else None, "note": note}
                        rows.append(row)
                        line[name] = row
                    ref = line.get("sdpa flash", {}).get("ms") or line.get("sdpa cudnn", {}).get("ms")
                    cells = []
                    for name, row in line.items():
                        if row["ms"] is None:
                            cells.append(f"{name}: -")
                        else:
                            ratio = f" ({ref / row['ms']:.2f}x flash)" if ref and dname != "fp32" else ""
                            cells.append(f"{name}: {row['tflops']:.1f}{ratio}")
                    log(f"  {dname} d={d} causal={int(causal)} N={N:5d} B={B} H={H} TFLOP/s | " + " | ".join(cells))
    return rows


class Fa06:
    """The GPU half of the C ABI of fa06.h (stage 06's backward)."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        i64, vp = ctypes.c_int64, ctypes.c_void_p
        self.lib.fa06_backward.argtypes = [ctypes.c_char_p] + [vp] * 9 + [i64] * 6 + [ctypes.c_int, ctypes.c_int,
                                                                                          ctypes.c_float, vp]
        self.lib.fa06_backward.restype = ctypes.c_int
        self.lib.fa06_runs.argtypes = [ctypes.c_char_p, i64, ctypes.c_int]
        self.lib.fa06_runs.restype = ctypes.c_char_p
        self.lib.fa06_last_error.restype = ctypes.c_char_p

    def runs(self, kernel, d, dtype):
        r = self.lib.fa06_runs(kernel.encode(), d, DTYPES[dtype][0])
        return r.decode() if r else None

    def backward(self, kernel, q, k, v, o, do, lse, causal, scale, dq, dk, dv):
        B, H, Nq, d = q.shape
        code = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}[q.dtype]
        status = self.lib.fa06_backward(kernel.encode(), *(t.data_ptr() for t in (q, k, v, o, do, lse, dq, dk, dv)),
                                        B, H, k.shape[1], Nq, k.shape[2], d, code, int(causal), float(scale),
                                        torch.cuda.current_stream().cuda_stream)
        if status != 0:
            raise RuntimeError(f"fa06_backward({kernel}): status {status}: {self.lib.fa06_last_error().decode()}")


def timing_backward(device, quick, log, launches=0, fa=None, fa06=None, dims=(64, 128), Ns=None, bwd_kernels=("auto",)):
    rows = []
    Ns = Ns or ([1024, 4096, 16384] if quick else [512, 1024, 2048, 4096, 8192, 16384])
    for d in dims:
        for causal in (False, True):
            for N in Ns:
                B, H = 16384 // N, 2048 // d
                torch.manual_seed(1)
                q, k, v = (torch.randn(B, H, N, d, device=device, dtype=torch.bfloat16, requires_grad=True)
                           for _ in range(3))
                do = torch.randn(B, H, N, d, device=device, dtype=torch.bfloat16)
                flops = 2.5 * 4.0 * B * H * N * N * d * (0.5 if causal else 1.0)
                cells = []
                if fa is not None and fa06 is not None:
                    # Stage 06 from stage 05's O and LSE (its fastest forward for d), same tensors.
                    fwd = "auto"
                    with torch.no_grad():
                        o, lse = fa.forward(fwd, q.detach(), k.detach(), v.detach(), causal, 1 / math.sqrt(d))
                    dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
                    for asked in bwd_kernels:
                        kname = fa06.runs(asked, d, "bf16")
                        label = kname if asked == kname else f"{asked}={kname}"
                        try:
                            ms = time_ms(lambda: fa06.backward(asked, q.detach(), k.detach(), v.detach(), o, do, lse,
                                                               causal, 1 / math.sqrt(d), dq, dk, dv),
                                         3 if flops / 1e12 > 5 else 10, launches)
                            note = ""
                        except RuntimeError as e:
                            ms, note = None, "refused: " + str(e).splitlines()[0][:80]
                        rows.append({"impl": f"fa06 {label}", "dtype": "bf16", "N": N, "d": d, "causal": causal,
                                     "B": B, "H": H, "ms": ms, "tflops": flops / (ms * 1e9) if ms else None,
                                     "note": note})
                        cells.append(f"fa06 {label}: {flops / (ms * 1e9):.1f}" if ms else f"fa06 {label}: -")
                    o = lse = dq = dk = dv = None
                for b in ("flash", "cudnn", "efficient"):
                    try:
                        out = sdpa(b, q, k, v, causal, 1 / math.sqrt(d))
                        ms = time_ms(lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True),
                                     3 if flops / 1e12 > 5 else 10, launches)
                        note = ""
                    except RuntimeError as e:
                        ms, note = None, "refused: " + str(e).splitlines()[0][:80]
                    out = None
                    torch.cuda.empty_cache()
                    rows.append({"impl": f"sdpa_bwd {b}", "dtype": "bf16", "N": N, "d": d, "causal": causal, "B": B,
                                 "H": H, "ms": ms, "tflops": flops / (ms * 1e9) if ms else None, "note": note})
                    cells.append(f"{b}: {flops / (ms * 1e9):.1f}" if ms else f"{b}: -")
                log(f"  backward bf16 d={d} causal={int(causal)} N={N:5d} B={B} H={H} TFLOP/s | " + " | ".join(cells))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True, help="path to libfa05.so")
    ap.add_argument("--json", help="write the checks' verdict and the timing rows here")
    ap.add_argument("--quick", action="store_true", help="N in {1024, 4096, 16384} only")
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--no-checks", action="store_true", help="skip the checks against float64 (timing only)")
    ap.add_argument("--backward", action="store_true", help="also time SDPA's and stage 06's backward (bf16)")
    ap.add_argument("--bwd-kernels", default="auto",
                    help="stage 06 backwards to time with --backward, e.g. gpu_v3,gpu_v4 (default auto)")
    ap.add_argument("--lib06", help="path to libfa06.so (default: beside --lib's build, 06_backward_recompute/)")
    ap.add_argument("--dtypes", default="bf16,fp32", help="the forward timing's dtypes (default bf16,fp32)")
    ap.add_argument("--dims", default="64,128", help="head dims of the timing grid (default 64,128)")
    ap.add_argument("--kernels", help="stage 05 kernels to time, e.g. v12,v13,auto (default: every one that runs itself)")
    ap.add_argument("--Ns", help="sequence lengths of the timing grid, e.g. 512,2048,8192 (default: the papers' 512 ... 16384)")
    ap.add_argument("--backends", default=",".join(BACKENDS), help="SDPA backends to time (default: all four)")
    ap.add_argument("--launches", type=int, default=0,
                    help="back-to-back launches per CUDA-event pair (default 0: about 5 ms of them, 1 to 20; "
                         "1: one launch per pair, the method before 2026-11-30)")
    args = ap.parse_args()
    try:
        dims = [int(x) for x in args.dims.split(",")]
        Ns = [int(x) for x in args.Ns.split(",")] if args.Ns else None
    except ValueError:
        print(f"compare_torch: --dims/--Ns: expected comma-separated integers, found {args.dims!r}/{args.Ns!r}",
              file=sys.stderr)
        return 2
    kernels = args.kernels.split(",") if args.kernels else None
    gpu = open_gpu("compare_torch", args.lib)
    if gpu is None:
        return 2
    fa, device = gpu

    def log(s):
        print(s, flush=True)

    props = torch.cuda.get_device_properties(device)
    log(f"compare_torch: {props.name}, torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN "
        f"{torch.backends.cudnn.version()}), kernels {fa.kernels}, {time.strftime('%Y-%m-%d')}")
    ok = True
    if not args.no_checks:
        log("checks (vs float64):")
        ok = checks(fa, device, log)
        log(f"checks: {'PASS' if ok else 'FAIL'}")
    rows = [] if args.no_timing else (log("timing (TFLOP/s, median of CUDA-event times):") or timing(
        fa, device, args.quick, log, args.dtypes.split(","), args.launches, dims, kernels, Ns, args.backends.split(",")))
    if args.backward:
        log("backward timing (TFLOP/s = 2.5 x forward FLOPs / time, median of CUDA-event times):")
        import os
        lib06 = args.lib06 or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(args.lib))),
                                           "06_backward_recompute", "libfa06.so")
        fa06 = Fa06(lib06) if os.path.isfile(lib06) else None
        if fa06 is None:
            log(f"  (no {lib06}: SDPA's backward alone)")
        rows += timing_backward(device, args.quick, log, args.launches, fa, fa06, dims, Ns, args.bwd_kernels.split(","))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": props.name, "torch": torch.__version__, "cuda": torch.version.cuda,
                       "cudnn": torch.backends.cudnn.version(), "date": time.strftime("%Y-%m-%d"),
                       "host": platform.node(), "launches_per_event": args.launches, "checks_pass": ok,
                       "rows": rows}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
