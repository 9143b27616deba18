#!/usr/bin/env python3
"""Decode-shaped attention on the GPU: one query row per head against a long KV cache.

Why GQA and split-KV exist, measured. For N_q = 1 the forward is a read of K and V: its time
is bounded below by the KV cache's bytes over the HBM bandwidth. This tool times stage 05's
kernels and SDPA's backends (same process, same tensors, CUDA-event medians: compare_torch.py's
timing) on decode shapes, and prints, for each, the bytes of K and V, the bandwidth they imply
(bytes / time) and how many thread blocks one query tile per (batch, head) gives the GPU.

  python3 tools/decode_bench.py --lib build-gpu/05_cuda_tiled/libfa05.so --json OUT.json

bf16, d = 128, not causal. Shapes: B = 1, H = 32, N_k = 131072 with H_kv = 32, 8, 1 (MHA, GQA,
MQA: the cache shrinks 4x and 32x); and B = 16, H = 32, H_kv = 8, N_k = 8192 (512 heads to spread).
--n-q 1,4,16 runs each shape at those query rows (speculative decoding's N_q > 1: where v14 and
a prefill kernel cross); --grid runs issue 33's grid instead (B in 1, 8, 64; N_k in 1k ... 128k;
H / H_kv in 32/32, 32/8, 64/8; d = 128 and 64; caches over 24 GiB left out).
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_torch import open_gpu, sdpa, time_ms  # noqa: E402

SHAPES = [(1, 32, 32, 131072), (1, 32, 8, 131072), (1, 32, 1, 131072), (16, 32, 8, 8192),
          (8, 32, 8, 32768), (64, 32, 32, 4096)]  # the last two: issue 33's table


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--n-q", default="1", help="query rows per sequence, a comma list (default 1)")
    ap.add_argument("--grid", action="store_true", help="issue 33's grid of shapes, d = 128 and 64")
    ap.add_argument("--kernels", default="v5,v13,v14,auto")
    a = ap.parse_args()
    n_qs = [int(x) for x in a.n_q.split(",")]
    shapes = [(B, H, Hkv, Nk, d) for d in (128, 64) for B in (1, 8, 64) for Nk in (1024, 8192, 32768, 131072)
              for H, Hkv in ((32, 32), (32, 8), (64, 8)) if 2 * B * Hkv * Nk * d * 2 <= 24 * 2**30] if a.grid \
        else [(B, H, Hkv, Nk, 128) for B, H, Hkv, Nk in SHAPES]
    gpu = open_gpu("decode_bench", a.lib)
    if gpu is None:
        return 2
    fa, dev = gpu
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    rows = []
    for (B, H, Hkv, Nk, d), n_q in ((sh, n) for sh in shapes for n in n_qs):
        scale = d ** -0.5
        g = torch.Generator(device=dev).manual_seed(0)
        q = torch.randn(B, H, n_q, d, device=dev, generator=g).to(torch.bfloat16)
        k = torch.randn(B, Hkv, Nk, d, device=dev, generator=g).to(torch.bfloat16)
        v = torch.randn(B, Hkv, Nk, d, device=dev, generator=g).to(torch.bfloat16)
        kv_bytes = 2 * k.numel() * k.element_size()
        impls = {f"fa05 {kern}": (lambda kern=kern: fa.forward(kern, q, k, v, False, scale))
                 for kern in a.kernels.split(",") if kern == "auto" or fa.runs(kern, d, torch.bfloat16) == kern}
        for be in ("flash", "cudnn", "efficient"):
            impls[f"sdpa {be}"] = lambda be=be: sdpa(be, q, k, v, False, scale)
        ref = sdpa("math", q.float(), k.float().repeat_interleave(H // Hkv, 1),
                   v.float().repeat_interleave(H // Hkv, 1), False, scale) if B * Hkv * Nk <= 2**22 else None
        for name, fn in impls.items():
            try:
                out = fn()
                o = out[0] if isinstance(out, tuple) else out
                err = float((o.float() - ref).abs().max()) if ref is not None else None
                ms = time_ms(fn, a.reps)
            except RuntimeError as e:  # a backend that refuses the shape
                print(f"{name}: refused ({str(e).splitlines()[0][:80]})")
                continue
            row = {"impl": name, "B": B, "H": H, "H_kv": Hkv, "N_q": n_q, "N_k": Nk, "d": d, "dtype": "bf16",
                   "ms": ms, "max_err_vs_fp32_math": err, "kv_bytes": kv_bytes, "GB_per_s": kv_bytes / ms / 1e6, "query_tiles": B * H}
            rows.append(row)
            print(f"B={B:2d} H={H} H_kv={Hkv:2d} N_q={n_q:2d} N_k={Nk:6d} d={d} KV {kv_bytes / 2**20:8.1f} MiB  {name:15s} "
                  f"{ms:8.3f} ms  {row['GB_per_s']:7.0f} GB/s  ({B * H} query tiles on {sms} SMs)"
                  + (f"  err {err:.1e}" if err is not None else ""))
    json.dump({"date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name(),
               "torch": torch.__version__, "command": "python3 tools/decode_bench.py " + " ".join(sys.argv[1:]),
               "rows": rows}, open(a.json, "w"), indent=1)
    print("wrote", a.json)


if __name__ == "__main__":
    sys.exit(main())
