#!/usr/bin/env python3
"""A sliding window and a softcap on the GPU: stage 05 beside SDPA with the same mask, in one process.

Issue 34's measurements (docs/math.md section 8 gives the semantics):
  - the window: v13 (auto) with a causal sliding window of w keys (query i sees keys i - w ... i,
    as Mistral's), beside our own full causal on the same tensors, and beside SDPA given the
    equivalent explicit boolean mask (it has no window argument: its cuDNN and efficient backends
    take a mask; flash takes none). TFLOP/s count the (query, key) pairs the mask keeps,
    4 d per pair (AttnProblem::forward_flops), so "as fast per unit of work" compares these.
  - the softcap (Gemma 2, c tanh(s / c)): v13 with softcap 30 against without, causal and not.
    SDPA has no softcap; none is timed beside it.

  python3 tools/variant_bench.py --lib build-gpu/05_cuda_tiled/libfa05.so --json OUT.json

bf16, B = 1, H = 16 (H_kv = 16), d = 128 and 64, N in {4096, 16384, 32768}, w in {256, 1024, 4096}.
Needs a CUDA GPU and PyTorch; not part of the README's two commands.
"""
import argparse
import ctypes
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_torch import BACKENDS, open_gpu, time_ms  # noqa: E402


def forward_variant(fa, kernel, q, k, v, causal, scale, left, right, softcap):
    """O of fa05_forward_variant (05_cuda_tiled/fa05.h) for q [B,H,N_q,d], k, v [B,H_kv,N_k,d]."""
    lib = fa.lib
    if not getattr(lib.fa05_forward_variant, "argtypes", None):
        i64, vp = ctypes.c_int64, ctypes.c_void_p
        lib.fa05_forward_variant.argtypes = [ctypes.c_char_p] + [vp] * 5 + [i64] * 6 + [
            ctypes.c_int, ctypes.c_int, ctypes.c_float, i64, i64, ctypes.c_float, vp]
        lib.fa05_forward_variant.restype = ctypes.c_int
    B, H, Nq, d = q.shape
    o = torch.empty_like(q)
    lse = torch.empty(B, H, Nq, dtype=torch.float32, device=q.device)
    code = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}[q.dtype]
    s = lib.fa05_forward_variant(kernel.encode(), q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                                 lse.data_ptr(), B, H, k.shape[1], Nq, k.shape[2], d, code, int(causal), float(scale),
                                 left, right, float(softcap), torch.cuda.current_stream().cuda_stream)
    if s != 0:
        raise RuntimeError(f"fa05_forward_variant({kernel}): status {s}: {lib.fa05_last_error().decode()}")
    return o


def key_mask(nq, nk, causal, left, right, device):
    """True where query i sees key j (problem.hpp's key_range, written out as a mask)."""
    i = torch.arange(nq, device=device)[:, None] + (nk - nq)  # row i's diagonal key
    j = torch.arange(nk, device=device)[None, :]
    keep = torch.ones(nq, nk, dtype=torch.bool, device=device)
    if left >= 0:
        keep &= j >= i - left
    r = 0 if causal else right
    if r >= 0:
        keep &= j <= i + r
    return keep


def pairs_kept(nq, nk, causal, left, right):
    """The (query, key) pairs the mask keeps, row by row (no N^2 mask made)."""
    i = torch.arange(nq, dtype=torch.int64) + (nk - nq)
    lo = (i - left).clamp(0, nk) if left >= 0 else torch.zeros_like(i)
    r = 0 if causal else right
    hi = (i + r + 1).clamp(0, nk) if r >= 0 else torch.full_like(i, nk)
    return int((hi - lo).clamp(min=0).sum())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--Ns", default="4096,16384,32768")
    ap.add_argument("--windows", default="256,1024,4096")
    ap.add_argument("--dims", default="128,64")
    ap.add_argument("--kernel", default="auto")
    a = ap.parse_args()
    gpu = open_gpu("variant_bench", a.lib)
    if gpu is None:
        return 2
    fa, dev = gpu
    rows = []

    def save(rows):
        json.dump({"date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "command": "python3 tools/variant_bench.py " + " ".join(sys.argv[1:]), "rows": rows},
                  open(a.json, "w"), indent=1)

    def record(what, name, B, H, N, d, causal, left, softcap, fn, ref=None):
        try:
            o = fn()
            err = float((o.float() - ref.float()).abs().max()) if ref is not None else None
            ms = time_ms(fn, a.reps, 0)
        except RuntimeError as e:  # a backend that refuses the problem
            print(f"{what} {name}: refused ({str(e).splitlines()[0][:90]})")
            return None
        pairs = pairs_kept(N, N, causal, left, -1)
        tflops = 4.0 * B * H * d * pairs / ms / 1e9
        row = {"what": what, "impl": name, "B": B, "H": H, "N": N, "d": d, "causal": causal, "window_left": left,
               "softcap": softcap, "dtype": "bf16", "ms": ms, "pairs": pairs, "TFLOPs": tflops, "max_diff_vs": err}
        rows.append(row)
        print(f"{what:8s} N={N:6d} d={d:3d} causal={int(causal)} w={left:5d} c={softcap:4.0f} {name:16s} "
              f"{ms:8.3f} ms {tflops:7.1f} TFLOP/s" + (f"  diff {err:.1e}" if err is not None else ""))
        return row

    for d in (int(x) for x in a.dims.split(",")):
        for N in (int(x) for x in a.Ns.split(",")):
            B, H = 1, 16
            scale = d ** -0.5
            g = torch.Generator(device=dev).manual_seed(0)
            q, k, v = (torch.randn(B, H, N, d, device=dev, generator=g).to(torch.bfloat16) for _ in range(3))
            ours = lambda causal, left=-1, cap=0.0: forward_variant(fa, a.kernel, q, k, v, causal, scale, left, -1, cap)
            # Full causal: ours and SDPA flash (is_causal: N_q = N_k, so top-left = bottom-right).
            record("causal", f"fa05 {a.kernel}", B, H, N, d, True, -1, 0.0, lambda: ours(True))
            with sdpa_kernel(BACKENDS["flash"]):
                record("causal", "sdpa flash", B, H, N, d, True, -1, 0.0,
                       lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale))
            for w in (int(x) for x in a.windows.split(",")):
                if w >= N:
                    continue
                mine = ours(True, w)
                record("window", f"fa05 {a.kernel}", B, H, N, d, True, w, 0.0, lambda w=w: ours(True, w))
                mask = key_mask(N, N, True, w, -1, dev)
                for be in ("cudnn", "efficient"):
                    with sdpa_kernel(BACKENDS[be]):
                        record("window", f"sdpa {be} mask", B, H, N, d, True, w, 0.0,
                               lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale), ref=mine)
                del mask
            # The softcap's cost: the same problem with and without it.
            for causal in (False, True):
                record("nocap", f"fa05 {a.kernel}", B, H, N, d, causal, -1, 0.0, lambda c=causal: ours(c))
                record("softcap", f"fa05 {a.kernel}", B, H, N, d, causal, -1, 30.0, lambda c=causal: ours(c, -1, 30.0))
            del q, k, v
            torch.cuda.empty_cache()
            save(rows)  # after every shape: a run cut short by a time limit keeps what it measured
    print("wrote", a.json)


if __name__ == "__main__":
    sys.exit(main())
