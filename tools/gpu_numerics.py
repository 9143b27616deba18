#!/usr/bin/env python3
"""The GPU numerics table (docs/numerics.md, "On the GPU"): how far every stage 05 kernel and every
SDPA backend is from float64, in fp16 and bf16, on random and real-model inputs across N, and the
two fp16 cases that break a materialised fp16 attention.

Every implementation reads the same device tensors in one process (stage 05 through libfa05.so's C
ABI, as tools/compare_torch.py does). Errors are max |O - O64| over every element:
  - "own": O64 is float64 attention on the inputs *as rounded* to the dtype (the kernel's own
    arithmetic error: what the evaluation order and the precision of the sums cost);
  - "input rounding": |O64(rounded inputs) - O64(fp32 inputs)| (the floor any 16-bit kernel
    inherits before it computes anything), reported once per case.
A non-finite output (NaN or inf where the reference is finite) is reported as inf.

Implementations: our kernels where they run themselves at that head dim and dtype (a version
that would fall back to another is not repeated); SDPA's flash, cuDNN, efficient and math
backends; and `naive16`, the materialised attention a user writes with PyTorch ops in the dtype:
S = Q K^T (stored in the dtype), P = exp(scale*S - max), l = rowsum(P), O = (P V) / l, every
intermediate tensor stored in the dtype (cuBLAS accumulates each product in fp32 inside).

Cases:
  randn      B = 1, H = 4, Q, K, V ~ N(0, 1), N = 256 ... 16384, d = 64 and 128, not causal
  minilm_lX  all-MiniLM-L6-v2 layers 0, 2, 5 (data/, N = 256, 12 heads, d = 32, scale 1/sqrt(32)),
             zero-padded to d = 64: padding Q and K with zeros leaves S unchanged and padding V
             adds output columns that must be 0, so the tensor-core kernels (d = 64 and 128 only)
             see the real scores
  qk_over_fp16  Q, K ~ 32 + N(0, 1), d = 64, N = 1024: every dot product q.k is about 65536,
             past fp16's largest finite value (65504) before the scale is applied
  rowsum_over_fp16  Q = 0 (every score equal), V ~ 1 + 0.1 N(0, 1), N_q = 64, N_k = 100000: the
             row sum l = N_k is past 65504

Usage: python3 tools/gpu_numerics.py --lib build-gpu/05_cuda_tiled/libfa05.so [--json out.json]
Needs a CUDA GPU and PyTorch; not part of the README's two commands.
"""
import argparse
import json
import math
import pathlib
import platform
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from compare_torch import BACKENDS, DTYPES, max_err, open_gpu, reference, sdpa  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent


def naive16(q, k, v, scale):
    """Materialised attention with every intermediate tensor stored in q's dtype (see above)."""
    s = q @ k.transpose(-1, -2)              # [.., N_q, N_k] in the dtype: may overflow fp16
    s = s * scale
    p = torch.exp(s - s.amax(-1, keepdim=True))
    l = p.sum(-1, keepdim=True)              # the row sum, stored in the dtype
    return (p @ v) / l


def read_npy_f32(path):
    """A little-endian float32, C-order .npy file (format 1.0, as data/PROVENANCE.md describes)."""
    raw = path.read_bytes()
    if raw[:6] != b"\x93NUMPY" or raw[6] != 1:
        raise ValueError(f"{path}: expected an NPY 1.0 file")
    n = int.from_bytes(raw[8:10], "little")
    header = eval(raw[10:10 + n].decode("latin1"), {"__builtins__": {}})  # a Python dict literal
    if header["descr"] != "<f4" or header["fortran_order"]:
        raise ValueError(f"{path}: expected '<f4' in C order, found {header}")
    return torch.frombuffer(bytearray(raw[10 + n:]), dtype=torch.float32).reshape(header["shape"])


def load_minilm(layer, device):
    x = [read_npy_f32(ROOT / "data" / f"minilm_l{layer}_{t}.npy").to(device) for t in "qkv"]
    return [F.pad(t, (0, 64 - t.shape[-1])) for t in x]  # d 32 -> 64 with zeros


def cases(device):
    """(name, N_k, d, scale, q, k, v) in float32; q [B, H, N_q, d], k and v [B, H, N_k, d]."""
    g = torch.Generator(device=device).manual_seed(7)

    def randn(*shape):
        return torch.randn(*shape, device=device, generator=g)

    for d in (64, 128):
        for n in (256, 1024, 4096, 16384):
            yield "randn", n, d, 1 / math.sqrt(d), randn(1, 4, n, d), randn(1, 4, n, d), randn(1, 4, n, d)
    for layer in (0, 2, 5):
        q, k, v = load_minilm(layer, device)
        yield f"minilm_l{layer}", 256, 32, 1 / math.sqrt(32), q, k, v
    n = 1024
    yield "qk_over_fp16", n, 64, 1 / 8, 32 + randn(1, 2, n, 64), 32 + randn(1, 2, n, 64), randn(1, 2, n, 64)
    n = 100000  # not a power of 2: 1/N_k is not exact in 16 bits (a materialised P stores it rounded)
    yield ("rowsum_over_fp16", n, 64, 1 / 8, torch.zeros(1, 1, 64, 64, device=device), randn(1, 1, n, 64),
           1 + 0.1 * randn(1, 1, n, 64))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True, help="path to libfa05.so")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    gpu = open_gpu("gpu_numerics", args.lib)
    if gpu is None:
        return 2
    fa, device = gpu
    torch.backends.cuda.matmul.allow_tf32 = False  # the float64 reference is float64 anyway
    props = torch.cuda.get_device_properties(device)
    print(f"gpu_numerics: {props.name}, torch {torch.__version__}, kernels {fa.kernels}, {time.strftime('%Y-%m-%d')}",
          flush=True)
    rows = []
    for name, n_k, d_true, scale, q32, k32, v32 in cases(device):
        d = q32.shape[-1]
        o_orig, _ = reference(q32, k32, v32, False, scale)  # float64 on the fp32 inputs
        for dname in ("fp16", "bf16"):
            dt = DTYPES[dname][1]
            q, k, v = q32.to(dt), k32.to(dt), v32.to(dt)
            o64, _ = reference(q, k, v, False, scale)
            floor = (o64 - o_orig).abs().max().item()
            impls = [(f"fa05 {kn}", lambda kn=kn: fa.forward(kn, q, k, v, False, scale)[0])
                     for kn in fa.kernels if fa.runs(kn, d, dt) == kn]
            impls += [(f"sdpa {b}", lambda b=b: sdpa(b, q, k, v, False, scale)) for b in BACKENDS]
            impls += [("naive16", lambda: naive16(q, k, v, scale))]
            cells = []
            for impl, fn in impls:
                try:
                    o = fn()
                    torch.cuda.synchronize()
                    err, note = max_err(o, o64), ""
                except RuntimeError as e:
                    err, note = None, "refused: " + str(e).splitlines()[0][:80]
                o = None
                torch.cuda.empty_cache()
                rows.append({"case": name, "dtype": dname, "N_q": q.shape[2], "N_k": n_k, "d": d, "d_true": d_true,
                             "impl": impl, "max_err": err, "input_rounding": floor, "note": note})
                cells.append(f"{impl.split()[-1]} {err:.1e}" if err is not None else f"{impl.split()[-1]} -")
            print(f"  {name:16s} {dname} N_k={n_k:6d} d={d_true:3d} input rounding {floor:.1e} | " + " | ".join(cells),
                  flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": props.name, "torch": torch.__version__, "cuda": torch.version.cuda,
                       "cudnn": torch.backends.cudnn.version(), "date": time.strftime("%Y-%m-%d"),
                       "host": platform.node(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
