#!/usr/bin/env python3
"""A packed variable-length batch on the GPU: v13 in one launch against padding, in one process.

Issue 34's measurement (common/varlen.hpp gives the semantics): a batch of sequences of different
lengths, packed along the token axis (Q [total_q, H, d], cu_seqlens), run
  - packed : fa05_forward_varlen("v13"), one launch, each tile its sequence's offsets;
  - padded : fa05_forward("v13") on the same sequences copied into [B, H, N_max, d] (the copy is
             not timed): what a caller without varlen runs, every sequence as long as the longest;
  - looped : fa05_forward("v13") once per sequence on [1, H, n, d] views (one launch each);
  - torch varlen: PyTorch's torch.nn.attention.varlen.varlen_attn (its FlashAttention-2 varlen
             kernel) on the same packed tensors, where this PyTorch has it.
TFLOP/s count the useful work only: each sequence's own causal (query, key) pairs, 4 d per pair
(AttnProblem::forward_flops), so padding shows as lost speed. Packed and torch varlen are checked
against each other (max |diff|).

With --lib06 (libfa06.so) the backward too, the same four ways: fa06_backward_varlen (gpu_v3 in one
launch), fa06_backward on the padded copies and once per sequence (kernel "auto": gpu_v2, gpu_v4 or
gpu_v3 by d), and varlen_attn's autograd (forward and backward minus forward); 2.5x the forward's
FLOPs (the FlashAttention convention).

  python3 tools/varlen_bench.py --lib build-gpu/05_cuda_tiled/libfa05.so [--lib06 .../libfa06.so] --json OUT.json

bf16, causal, H = 16 (H_kv = 16 and 4), d = 128 and 64; batches: lengths uniform in 128 ... 4096
(about 64k tokens), 512 short sequences of 16 ... 256, and one long sequence with many short
ones. Needs a CUDA GPU and PyTorch; not part of the README's two commands.
"""
import argparse
import ctypes
import json
import os
import random
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_torch import open_gpu, time_ms  # noqa: E402

CODE = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


def bind(lib):
    i64, vp, ci, cf = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int, ctypes.c_float
    lib.fa05_forward_varlen.argtypes = [ctypes.c_char_p] + [vp] * 7 + [i64] * 8 + [ci, ci, cf, i64, i64, cf, vp]
    lib.fa05_forward_varlen.restype = ci
    lib.fa05_forward.argtypes = [ctypes.c_char_p] + [vp] * 5 + [i64] * 6 + [ci, ci, cf, vp]
    lib.fa05_forward.restype = ci


def bind06(lib):
    i64, vp, ci, cf = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int, ctypes.c_float
    lib.fa06_backward_varlen.argtypes = [ctypes.c_char_p] + [vp] * 11 + [i64] * 8 + [ci, ci, cf, i64, i64, cf, vp]
    lib.fa06_backward_varlen.restype = ci
    lib.fa06_backward.argtypes = [ctypes.c_char_p] + [vp] * 9 + [i64] * 6 + [ci, ci, cf, vp]
    lib.fa06_backward.restype = ci
    lib.fa06_last_error.restype = ctypes.c_char_p


def check(lib, s, what):
    if s != 0:
        raise RuntimeError(f"{what}: status {s}: {lib.fa05_last_error().decode()}")


def packed_call(lib, q, k, v, o, lse, cu_q, cu_k, max_q, max_k, scale):
    """fa05_forward_varlen (05_cuda_tiled/fa05.h) on q [total_q, H, d], k, v [total_k, H_kv, d]."""
    s = lib.fa05_forward_varlen(b"v13", q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(),
                                cu_q.data_ptr(), cu_k.data_ptr(), cu_q.numel() - 1, q.shape[0], k.shape[0], max_q,
                                max_k, q.shape[1], k.shape[1], q.shape[2], CODE[q.dtype], 1, float(scale), -1, -1, 0.0,
                                torch.cuda.current_stream().cuda_stream)
    check(lib, s, "fa05_forward_varlen")


def dense_call(lib, q, k, v, o, lse, scale):
    """fa05_forward on q [B, H, N_q, d], k, v [B, H_kv, N_k, d], causal."""
    B, H, Nq, d = q.shape
    s = lib.fa05_forward(b"v13", q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(), B, H,
                         k.shape[1], Nq, k.shape[2], d, CODE[q.dtype], 1, float(scale),
                         torch.cuda.current_stream().cuda_stream)
    check(lib, s, "fa05_forward")


def torch_varlen():
    try:
        from torch.nn.attention.varlen import varlen_attn
        return varlen_attn
    except ImportError:
        return None


def batches(seed):
    r = random.Random(seed)
    mixed = []
    while sum(mixed) < 65536:
        mixed.append(r.randint(128, 4096))
    short = [r.randint(16, 256) for _ in range(512)]
    one_long = [16384] + [r.randint(16, 512) for _ in range(96)]
    return {"mixed 128-4096": mixed, "512 short 16-256": short, "one 16k + 96 short": one_long}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--dims", default="128,64")
    ap.add_argument("--lib06", help="libfa06.so: time the backward too")
    a = ap.parse_args()
    gpu = open_gpu("varlen_bench", a.lib)
    if gpu is None:
        return 2
    fa, dev = gpu
    lib = fa.lib
    bind(lib)
    varlen_attn = torch_varlen()
    lib06 = None
    if a.lib06:
        lib06 = ctypes.CDLL(a.lib06)
        bind06(lib06)
    rows = []

    def save():
        json.dump({"date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "command": "python3 tools/varlen_bench.py " + " ".join(sys.argv[1:]), "rows": rows},
                  open(a.json, "w"), indent=1)

    for d in (int(x) for x in a.dims.split(",")):
        for H, H_kv in ((16, 16), (16, 4)):
            for name, lens in batches(0).items():
                scale = d ** -0.5
                B, total, N = len(lens), sum(lens), max(lens)
                cu = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(B)], dtype=torch.int32, device=dev)
                g = torch.Generator(device=dev).manual_seed(1)
                q = torch.randn(total, H, d, device=dev, generator=g).to(torch.bfloat16)
                k = torch.randn(total, H_kv, d, device=dev, generator=g).to(torch.bfloat16)
                v = torch.randn(total, H_kv, d, device=dev, generator=g).to(torch.bfloat16)
                o = torch.empty_like(q)
                lse = torch.empty(H, total, dtype=torch.float32, device=dev)
                pairs = sum(n * (n + 1) // 2 for n in lens)  # causal, N_q = N_k per sequence
                flops = 4.0 * H * d * pairs

                def record(impl, fn, diff=None, pass_="forward", minus_ms=0.0):
                    ms = time_ms(fn, a.reps, 0) - minus_ms
                    work = flops * (2.5 if pass_ == "backward" else 1.0)
                    row = {"batch": name, "B": B, "total_tokens": total, "N_max": N, "H": H, "H_kv": H_kv, "d": d,
                           "causal": True, "dtype": "bf16", "pass": pass_, "impl": impl, "ms": ms,
                           "useful_TFLOPs": work / ms / 1e9, "max_diff_vs_packed": diff}
                    rows.append(row)
                    print(f"{pass_[:3]} d={d:3d} H={H}/{H_kv:2d} {name:20s} B={B:4d} {impl:14s} {ms:8.3f} ms "
                          f"{row['useful_TFLOPs']:7.1f} TFLOP/s" + (f"  diff {diff:.1e}" if diff is not None else ""))

                packed = lambda: packed_call(lib, q, k, v, o, lse, cu, cu, N, N, scale)
                packed()
                ref = o.clone()
                record("packed", packed)
                # Padded: the sequences in [B, H, N_max, d], zeros past each end (copy not timed).
                qp = torch.zeros(B, H, N, d, dtype=q.dtype, device=dev)
                kp = torch.zeros(B, H_kv, N, d, dtype=q.dtype, device=dev)
                vp = torch.zeros_like(kp)
                for b, n in enumerate(lens):
                    s0 = int(cu[b])
                    qp[b, :, :n] = q[s0:s0 + n].transpose(0, 1)
                    kp[b, :, :n] = k[s0:s0 + n].transpose(0, 1)
                    vp[b, :, :n] = v[s0:s0 + n].transpose(0, 1)
                op = torch.empty_like(qp)
                lp = torch.empty(B, H, N, dtype=torch.float32, device=dev)
                # (Padding at the end with the mask bottom-right aligned shifts each sequence's
                # diagonal: the timing is the point here, the values are not compared.)
                record("padded", lambda: dense_call(lib, qp, kp, vp, op, lp, scale))
                # The backward of the padded batch, from its own forward's O and LSE (not for the one-long
                # batch: 94x the work, seconds a call).
                if lib06 is not None and B * N * N < 2e9:
                    dense_call(lib, qp, kp, vp, op, lp, scale)
                    gp = torch.randn_like(qp)
                    dqp, dkp, dvp = torch.empty_like(qp), torch.empty_like(kp), torch.empty_like(vp)

                    def padded_bwd():
                        check(lib06, lib06.fa06_backward(b"auto", *(t.data_ptr() for t in (qp, kp, vp, op, gp, lp, dqp, dkp,
                                                                                        dvp)),
                                                         B, H, H_kv, N, N, d, 2, 1, float(scale),
                                                         torch.cuda.current_stream().cuda_stream), "fa06_backward")
                    record("padded", padded_bwd, pass_="backward")
                    del gp, dqp, dkp, dvp
                del qp, kp, vp, op, lp
                # Looped: one launch per sequence on contiguous [1, H, n, d] copies (made once).
                seqs = []
                for b, n in enumerate(lens):
                    s0 = int(cu[b])
                    qs, ks, vs = (x[s0:s0 + n].transpose(0, 1).unsqueeze(0).contiguous() for x in (q, k, v))
                    seqs.append((qs, ks, vs, torch.empty_like(qs), torch.empty(1, H, n, dtype=torch.float32, device=dev)))

                def looped():
                    for qs, ks, vs, os_, ls in seqs:
                        dense_call(lib, qs, ks, vs, os_, ls, scale)
                looped()
                diff = max(float((os_[0].transpose(0, 1).float() - ref[int(cu[b]):int(cu[b]) + lens[b]].float())
                                 .abs().max()) for b, (_, _, _, os_, _) in enumerate(seqs))
                record("looped", looped, diff)
                if lib06 is not None:
                    do = torch.randn_like(q)
                    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

                    def packed_bwd():
                        check(lib06, lib06.fa06_backward_varlen(b"gpu_v3", *(t.data_ptr() for t in (q, k, v, o, do, lse, dq, dk,
                                                                                                dv, cu, cu)),
                                                                B, total, total, N, N, H, H_kv, d, 2, 1, float(scale), -1,
                                                                -1, 0.0, torch.cuda.current_stream().cuda_stream),
                              "fa06_backward_varlen")
                    packed()  # O and LSE of the packed forward
                    record("packed", packed_bwd, pass_="backward")
                    ref_dq = (packed_bwd(), dq.clone())[1]
                    sq = []
                    for b, n in enumerate(lens):
                        s0 = int(cu[b])
                        qs, ks, vs, os_, ls = seqs[b]
                        gs = do[s0:s0 + n].transpose(0, 1).unsqueeze(0).contiguous()
                        sq.append((qs, ks, vs, os_, gs, ls, torch.empty_like(qs), torch.empty_like(ks), torch.empty_like(vs)))

                    def looped_bwd():
                        for qs, ks, vs, os_, gs, ls, dqs, dks, dvs in sq:
                            check(lib06, lib06.fa06_backward(b"auto", *(t.data_ptr() for t in (qs, ks, vs, os_, gs, ls, dqs,
                                                                                            dks, dvs)),
                                                             1, H, H_kv, qs.shape[2], qs.shape[2], d, 2, 1, float(scale),
                                                             torch.cuda.current_stream().cuda_stream), "fa06_backward")
                    looped_bwd()
                    bdiff = max(float((s_[6][0].transpose(0, 1).float() - ref_dq[int(cu[b]):int(cu[b]) + lens[b]].float())
                                      .abs().max()) for b, s_ in enumerate(sq))
                    record("looped", looped_bwd, bdiff, pass_="backward")
                    del sq, dq, dk, dv
                del seqs
                if varlen_attn is not None and H == H_kv:
                    def tv_on(q_, k_, v_):
                        try:
                            return varlen_attn(q_, k_, v_, cu, cu, N, N, scale=scale, window_size=(-1, 0))
                        except TypeError:  # an older signature: is_causal
                            return varlen_attn(q_, k_, v_, cu, cu, N, N, is_causal=True)

                    def tv():
                        return tv_on(q, k, v)
                    try:
                        out = tv()
                        record("torch varlen", tv, float((out.float() - ref.float()).abs().max()))
                        if lib06 is not None:  # its backward: forward + backward minus forward
                            qg, kg, vg = (x.detach().clone().requires_grad_() for x in (q, k, v))
                            gout = torch.randn_like(q)
                            fwd_ms = time_ms(lambda: tv_on(qg, kg, vg), a.reps, 0)

                            def tv_fb():
                                tv_on(qg, kg, vg).backward(gout)
                            record("torch varlen", tv_fb, pass_="backward", minus_ms=fwd_ms)
                    except RuntimeError as e:
                        print(f"torch varlen refused: {str(e).splitlines()[0][:100]}")
                del q, k, v, o, lse
                torch.cuda.empty_cache()
                save()
    print("wrote", a.json)


if __name__ == "__main__":
    sys.exit(main())
