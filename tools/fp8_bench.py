#!/usr/bin/env python3
"""v15 (FP8) beside our bf16 v13 and PyTorch's SDPA backends, in one process: speed and error.

1. Timing (compare_torch.py's time_ms: CUDA-event medians of back-to-back launches): the
   FlashAttention papers' grid (B N = 16384 tokens, H = 2048 / d, d = 128, N 512 ... 16384, causal
   and not) for v15 from bf16 inputs (fa05_forward_fp8: quantisation, V's transpose, the kernel),
   v15 from e4m3 inputs (fa05_forward_fp8_e4m3: the transpose and the kernel), v13 in bf16, and
   SDPA's flash and cuDNN in bf16, on the same tensors. SDPA with float8_e4m3fn inputs is tried
   once and its answer (an error, in PyTorch 2.11) recorded.
2. Error: RMSE of O against float64 (FlashAttention-3's Table 3 measure) on its distributions,
   N(0, 1) and N(0, 1) + N(0, 100) Bernoulli(0.001) (outliers), B = 1, H = 16, N = 4096, d = 128:
   SDPA cuDNN and v13 in bf16, v15, and v15 after incoherent processing (Q and K multiplied by
   one random-sign Hadamard matrix in float32 before they are cast to bf16, here in PyTorch: the
   kernel is unchanged, since (Q M)(K M)^T = Q K^T for an orthogonal M).

  python3 tools/fp8_bench.py --lib build-gpu/05_cuda_tiled/libfa05.so --json OUT.json [--quick]
Needs a CUDA GPU (sm_90 for v15) and PyTorch; not part of the README's two commands.
"""
import argparse
import ctypes
import json
import math
import os
import platform
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from compare_torch import open_gpu, reference, sdpa, time_ms  # noqa: E402
from fa_course import quantize_fp8 as quantise  # noqa: E402  (v15's quantiser, in PyTorch)


def bind(fa):
    i64, vp, c_int, c_float = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int, ctypes.c_float
    fa.lib.fa05_forward_fp8.argtypes = [vp] * 5 + [i64] * 6 + [c_int, c_float, vp]
    fa.lib.fa05_forward_fp8.restype = c_int
    fa.lib.fa05_forward_fp8_e4m3.argtypes = [vp] * 8 + [i64] * 6 + [c_int, c_float, vp]
    fa.lib.fa05_forward_fp8_e4m3.restype = c_int


def fp8(fa, q, k, v, causal, scale, out, lse):
    B, H, Nq, d = q.shape
    st = fa.lib.fa05_forward_fp8(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), B, H,
                                 k.shape[1], Nq, k.shape[2], d, int(causal), float(scale),
                                 torch.cuda.current_stream().cuda_stream)
    if st != 0:
        raise RuntimeError(f"fa05_forward_fp8: status {st}: {fa.lib.fa05_last_error().decode()}")
    return out


def fp8_e4m3(fa, q8, k8, v8, sq, sk, sv, causal, scale, out, lse):
    B, H, Nq, d = q8.shape
    st = fa.lib.fa05_forward_fp8_e4m3(q8.data_ptr(), k8.data_ptr(), v8.data_ptr(), sq.data_ptr(), sk.data_ptr(),
                                      sv.data_ptr(), out.data_ptr(), lse.data_ptr(), B, H, k8.shape[1], Nq,
                                      k8.shape[2], d, int(causal), float(scale), torch.cuda.current_stream().cuda_stream)
    if st != 0:
        raise RuntimeError(f"fa05_forward_fp8_e4m3: status {st}: {fa.lib.fa05_last_error().decode()}")
    return out


def hadamard(d, seed, device):
    """H_d diag(signs) / sqrt(d): orthogonal, so (Q M)(K M)^T = Q K^T."""
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    g = torch.Generator().manual_seed(seed)
    signs = torch.where(torch.rand(d, generator=g) < 0.5, -1.0, 1.0).to(torch.float64)
    return (signs[:, None] * h / math.sqrt(d)).to(device)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="N = 1024, 8192 only")
    a = ap.parse_args()
    gpu = open_gpu("fp8_bench", a.lib)
    if gpu is None:
        return 2
    fa, dev = gpu
    bind(fa)
    d = 128
    out = {"tool": "tools/fp8_bench.py", "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           "device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "host": platform.node(), "timing": [], "error": []}
    # SDPA with FP8 inputs: does this PyTorch offer it?
    try:
        x = torch.randn(1, 2, 64, d, device=dev).to(torch.float8_e4m3fn)
        F.scaled_dot_product_attention(x, x, x)
        out["sdpa_fp8"] = "ran"
    except Exception as e:  # noqa: BLE001 - the answer is the message
        out["sdpa_fp8"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    print("SDPA with float8_e4m3fn inputs:", out["sdpa_fp8"])
    for causal in (False, True):
        for N in ((1024, 8192) if a.quick else (512, 1024, 2048, 4096, 8192, 16384)):
            B, H = 16384 // N, 2048 // d
            g = torch.Generator(device=dev).manual_seed(N)
            q, k, v = (torch.randn(B, H, N, d, device=dev, generator=g).to(torch.bfloat16) for _ in range(3))
            scale = d ** -0.5
            o = torch.empty_like(q)
            lse = torch.empty(B, H, N, device=dev)
            q8, sq = quantise(q, 64)
            k8, sk = quantise(k, 128)
            v8, sv = quantise(v, 128)
            impls = {"v15 (bf16 in)": lambda: fp8(fa, q, k, v, causal, scale, o, lse),
                     "v15 (e4m3 in)": lambda: fp8_e4m3(fa, q8, k8, v8, sq, sk, sv, causal, scale, o, lse),
                     "v13 bf16": lambda: fa.forward("v13", q, k, v, causal, scale, o, lse),
                     "sdpa flash bf16": lambda: sdpa("flash", q, k, v, causal, scale),
                     "sdpa cudnn bf16": lambda: sdpa("cudnn", q, k, v, causal, scale)}
            flops = 4 * B * H * N * N * d / (2 if causal else 1)
            row = {"N": N, "d": d, "causal": causal, "B": B, "H": H}
            for name, fn in impls.items():
                try:
                    ms = time_ms(fn, a.reps, 0)
                    row[name] = {"ms": ms, "TFLOP/s": flops / ms * 1e-9}
                except RuntimeError as e:
                    row[name] = {"error": str(e).splitlines()[0][:200]}
            out["timing"].append(row)
            print(f"N={N:6d} causal={int(causal)} " + " ".join(
                f"{n}: {r['TFLOP/s']:.0f}" if "TFLOP/s" in r else f"{n}: refused" for n, r in row.items()
                if isinstance(r, dict)), flush=True)
    # Error against float64 (FlashAttention-3, Table 3), not causal.
    B, H, N = 1, 16, 4096
    M = hadamard(d, 1, dev)
    for dist in ("normal", "outliers"):
        g = torch.Generator(device=dev).manual_seed(1)
        x = [torch.randn(B, H, N, d, device=dev, generator=g, dtype=torch.float64) for _ in range(3)]
        if dist == "outliers":
            x = [t + 10 * torch.randn_like(t) * (torch.rand(t.shape, device=dev, generator=g) < 0.001) for t in x]
        q, k, v = (t.to(torch.bfloat16) for t in x)
        scale = d ** -0.5
        o64, _ = reference(q, k, v, False, scale)
        rmse = lambda o: ((o.double() - o64) ** 2).mean().sqrt().item()  # noqa: E731
        o = torch.empty_like(q)
        lse = torch.empty(B, H, N, device=dev)
        row = {"dist": dist, "B": B, "H": H, "N": N, "d": d,
               "sdpa cudnn bf16": rmse(sdpa("cudnn", q, k, v, False, scale)),
               "v13 bf16": rmse(fa.forward("v13", q, k, v, False, scale)[0]),
               "v15": rmse(fp8(fa, q, k, v, False, scale, o, lse))}
        qi, ki = ((t.double() @ M).to(torch.bfloat16) for t in (x[0], x[1]))  # incoherent processing
        oi64, _ = reference(qi, ki, v, False, scale)
        row["v15 + incoherent"] = ((fp8(fa, qi, ki, v, False, scale, o, lse).double() - o64) ** 2).mean().sqrt().item()
        row["bf16 reference after the transform vs before"] = ((oi64 - o64) ** 2).mean().sqrt().item()
        out["error"].append(row)
        print(f"RMSE vs float64, {dist}: " + ", ".join(f"{n} {r:.2e}" for n, r in row.items() if isinstance(r, float)))
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
