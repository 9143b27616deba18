"""fa_course.attention on a CUDA GPU (stage 05 forward, stage 06 backward) against float64.

The rule, per dtype: max |ours - float64| <= 2 * max |SDPA math in the same dtype - float64| + floor
for O, dQ, dK, dV, the floor being 1e-5 (float32) or 1e-3 (fp16/bf16) plus what storing the result
in the dtype alone may cost (half a unit in the last place of its largest value: our gradients are
summed in float32 and rounded once, so they can sit half an ulp off where SDPA's happen to be
closer). Also: the op
runs on the caller's current stream, and torch.compile(fullgraph=True) of a module using it.
With a window or a softcap (issue 34) the reference is util.variant_reference (written out: SDPA has
no softcap), in float64 and, as the baseline, in the dtype; the forward runs v13 and auto in bf16
and v1 in float32, the backward whatever stage 06's GPU plan takes (where it refuses them,
test_variant_backward fails with the plan's NotImplementedError, as it should).
attention_varlen (a packed batch) against util.packed_reference (variant_reference per sequence)
by the same rule, in bf16 and fp16: the forward is stage 05's fa05_forward_varlen, the backward
the op's packed GPU backward (gpu_v3 in one launch), which is also held within one bf16 unit to
attention_bwd (gpu_v3) called on each sequence by hand.
Exits 77 (ctest: skipped) without a GPU."""
import math
import os
import sys
import unittest

import torch

from util import max_err, offsets, packed_reference, sdpa_reference, variant_reference, visible

import fa_course


def gpu_available():
    lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    if any(f.startswith("libcudart") and f.endswith(".stub") for f in os.listdir(lib)):
        return False  # scripts/torch_stub_libs.py stood in for the CUDA runtime: no GPU here
    return torch.cuda.is_available()


CASES = [  # B, H, H_kv, N_q, N_k, d, causal
    (2, 4, 4, 256, 256, 64, False),
    (1, 8, 2, 300, 517, 128, True),    # GQA, ragged, bottom-right causal with N_q < N_k
    (2, 4, 1, 77, 77, 128, True),      # MQA
    (1, 2, 2, 100, 40, 64, True),      # rows that see no key
    (1, 2, 2, 65, 129, 96, False),     # d = 96: v13's native width 96, gpu_v3's
    (1, 2, 1, 70, 90, 40, True),       # d = 40: padded (v13 to 64 by TMA's zero fill, stage 06 on copies)
    (1, 2, 2, 33, 50, 256, False),     # d = 256: the widest
]
FLOOR = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1e-3}
VARIANT_CASES = [  # B, H, H_kv, N_q, N_k, d, causal, scale, window, softcap
    (1, 8, 2, 300, 517, 128, True, None, (64, -1), None),   # left side only, causal, GQA (Mistral)
    (2, 4, 4, 256, 256, 64, False, None, (17, 40), None),   # asymmetric, edges inside v13's blocks
    (1, 2, 2, 200, 90, 64, False, None, (5, 0), None),      # N_q > N_k: 110 rows see no key
    (1, 4, 1, 130, 250, 96, False, 1.0, None, 20.0),        # softcap alone on logits beyond it, MQA, d = 96
    (1, 2, 2, 100, 100, 40, True, 0.5, (30, -1), 5.0),      # both, d = 40 (padded)
    (1, 2, 2, 64, 64, 256, False, None, (0, 0), 1.0),       # the diagonal alone, d = 256
    (1, 4, 2, 1, 700, 128, False, None, (200, 0), 30.0),    # one query (decode: auto takes v14)
]


VARLEN_CASES = [  # lengths of the queries, of the keys; H, H_kv, d, causal, window, softcap
    ([0, 1, 127, 129, 300], [0, 1, 127, 129, 300], 8, 2, 128, False, None, None),  # GQA, every edge length
    ([0, 1, 127, 129, 300], [0, 1, 127, 129, 300], 8, 2, 128, True, None, None),
    ([5, 0, 129, 1, 300], [0, 7, 127, 300, 100], 4, 1, 64, True, None, None),     # N_q != N_k, MQA, rows see none
    ([64, 200, 3], [64, 250, 3], 4, 4, 96, False, (32, 16), None),                 # a window, d = 96
    ([127, 300, 2], [129, 300, 40], 4, 2, 64, True, (40, -1), 20.0),              # window and softcap
]


FP8_CASES = [  # B, H, H_kv, N_q, N_k, causal (d = 128: v15's one width)
    (1, 4, 2, 300, 517, True),   # GQA, ragged, bottom-right causal with N_q < N_k
    (2, 2, 1, 129, 129, False),  # MQA, one row past a block
    (1, 2, 2, 200, 90, True),    # N_q > N_k: 110 rows see no key
]


def fp8_stored_reference(q, k, v, causal, scale):
    """O in float64 as v15 stores it (common/reference.cpp's reference_forward_stored_fp8): P = exp(S - m)
    stored as e4m3 of 256 P (l summed unrounded), O = P v / l rounded to bf16. What storage alone costs."""
    G = q.shape[1] // k.shape[1]
    s = scale * (q @ k.repeat_interleave(G, 1).transpose(-1, -2))
    mask = visible(q.shape[2], k.shape[2], causal, q.device)
    s = s.masked_fill(~mask, float("-inf"))
    m = s.amax(-1, keepdim=True).clamp_min(-1e300)  # a row that sees no key: P = 0 (O = 0)
    p = torch.exp(s - m)
    l = p.sum(-1, keepdim=True)
    p8 = (256 * p).to(torch.float8_e4m3fn).double() / 256
    o = (p8 @ v.repeat_interleave(G, 1)) / torch.where(l > 0, l, torch.ones_like(l))
    return o.to(torch.bfloat16).double()


def rmse(a, b):
    return float(((a.double() - b.double()) ** 2).mean().sqrt())


def fp8_bound(q, k, v, scale, N_k):
    """What v15 may differ from float64 attention on the values its e4m3 inputs stand for (common/
    conformance.cpp's FP8 rule, for O): P stored in e4m3 (2^-4 relative at most, 2^-18 absolute below
    e4m3's normals, over N_k keys; l is summed unrounded), O in bf16 (2^-8 with the float32 sums), and
    the tensor cores' 13-bit accumulation: the scores off by dS = ceil(d / 32) 2^-13 A, A the largest
    scale sum |q k|, which moves P by expm1(2 dS). Returns (O's bound, dS: LSE's, beside float32's 1e-5
    relative)."""
    G = q.shape[1] // k.shape[1]
    A = scale * float((q.abs() @ k.abs().repeat_interleave(G, 1).transpose(-1, -2)).max())
    dS = (q.shape[3] + 31) // 32 * 2.0 ** -13 * A
    vmax = float(v.abs().max())
    return vmax * (2.0 ** -4 + N_k * 2.0 ** -18 + 2.0 ** -8 + math.expm1(2 * dS)), dS


class Gpu(unittest.TestCase):
    def check(self, case, dtype):
        B, H, H_kv, N_q, N_k, d, causal = case
        g = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(B, H, N_q, d, device="cuda", generator=g)
        k = torch.randn(B, H_kv, N_k, d, device="cuda", generator=g)
        v = torch.randn(B, H_kv, N_k, d, device="cuda", generator=g)
        do = torch.randn(B, H, N_q, d, device="cuda", generator=g)
        q, k, v, do = (t.to(dtype) for t in (q, k, v, do))  # everyone sees the same rounded inputs

        def run(fn, dt):
            xs = [t.to(dt).requires_grad_() for t in (q, k, v)]
            o = fn(*xs)
            return [o.detach()] + list(torch.autograd.grad(o, xs, do.to(dt)))

        ours = run(lambda a, b, c: fa_course.attention(a, b, c, causal=causal), dtype)
        ref = run(lambda a, b, c: sdpa_reference(a, b, c, causal)[0], torch.float64)
        base = run(lambda a, b, c: sdpa_reference(a, b, c, causal)[0], dtype)
        for name, x, r, b in zip(("O", "dQ", "dK", "dV"), ours, ref, base):
            store = 0.5 * torch.finfo(dtype).eps * float(r.abs().max())
            err, bound = max_err(x, r), 2 * max_err(b, r) + FLOOR[dtype] + store
            self.assertLessEqual(err, bound, f"{name} {dtype} {case}: {err:.3g} > {bound:.3g}")

    def check_varlen(self, case, dtype):
        lq, lk, H, H_kv, d, causal, window, softcap = case
        cu_q, cu_k = offsets(lq), offsets(lk)
        g = torch.Generator(device="cuda").manual_seed(1)
        q, do = (torch.randn(cu_q[-1], H, d, device="cuda", generator=g).to(dtype) for _ in range(2))
        k, v = (torch.randn(cu_k[-1], H_kv, d, device="cuda", generator=g).to(dtype) for _ in range(2))
        tq, tk = (torch.tensor(c, dtype=torch.int32, device="cuda") for c in (cu_q, cu_k))

        def run(fn, dt):
            xs = [t.to(dt).requires_grad_() for t in (q, k, v)]
            o = fn(*xs)
            gr = torch.autograd.grad(o, xs, do.to(dt), allow_unused=True)
            return [o.detach()] + [torch.zeros_like(x) if r is None else r for x, r in zip(xs, gr)]

        ours = run(lambda a, b, c: fa_course.attention_varlen(a, b, c, tq, tk, causal=causal, window=window,
                                                              softcap=softcap), dtype)
        ref = run(lambda a, b, c: packed_reference(a, b, c, cu_q, cu_k, causal, None, window, softcap)[0],
                  torch.float64)
        base = run(lambda a, b, c: packed_reference(a, b, c, cu_q, cu_k, causal, None, window, softcap)[0], dtype)
        for name, x, r, b in zip(("O", "dQ", "dK", "dV"), ours, ref, base):
            store = 0.5 * torch.finfo(dtype).eps * float(r.abs().max())
            err, bound = max_err(x, r), 2 * max_err(b, r) + FLOOR[dtype] + store
            self.assertLessEqual(err, bound, f"varlen {name} {dtype} {case}: {err:.3g} > {bound:.3g}")

    def test_varlen(self):
        for dtype in (torch.bfloat16, torch.float16):
            for c in VARLEN_CASES:
                with self.subTest(dtype=dtype, case=c):
                    self.check_varlen(c, dtype)

    def test_varlen_backward_is_attention_bwd_per_sequence(self):
        # The GPU backward of a packed batch is gpu_v3 in one launch (fa06_backward_varlen). Fed
        # the same O and LSE (attention() per sequence, so that this needs no packed forward), it
        # must give what attention_bwd gives with gpu_v3 on each sequence as a contiguous
        # [1, H, N, d] copy, and zeros where a sequence has no key (dQ) or no query (dK, dV).
        # Within one bf16 unit of the largest value rather than the same bits: gpu_v3 sums dQ with
        # float32 atomics, which may round differently from one call to the next; a sequence
        # mixed up or misplaced is off by the values themselves.
        lq, lk = [70, 4, 0, 200], [90, 0, 9, 150]
        cu_q, cu_k = offsets(lq), offsets(lk)
        g = torch.Generator(device="cuda").manual_seed(2)
        H, H_kv, d, kw = 4, 2, 64, dict(causal=True, window=(50, 0), softcap=10.0)
        q, do = (torch.randn(cu_q[-1], H, d, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(2))
        k, v = (torch.randn(cu_k[-1], H_kv, d, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(2))
        seq = lambda x, a, z: x[a:z].transpose(0, 1).unsqueeze(0).contiguous()  # noqa: E731
        o = torch.zeros_like(q)
        lse = torch.full((H, cu_q[-1]), float("-inf"), device="cuda")
        by_hand = {}
        for b in range(len(lq)):
            t0, t1, u0, u1 = cu_q[b], cu_q[b + 1], cu_k[b], cu_k[b + 1]
            if t0 == t1 or u0 == u1:
                continue
            ob, lb = fa_course.attention(seq(q, t0, t1), seq(k, u0, u1), seq(v, u0, u1), return_lse=True, **kw)
            o[t0:t1], lse[:, t0:t1] = ob[0].transpose(0, 1), lb[0]
            by_hand[b] = torch.ops.fa_course.attention_bwd.default(seq(do, t0, t1), seq(q, t0, t1), seq(k, u0, u1),
                                                                   seq(v, u0, u1), ob, lb, True, 0.0, "auto,gpu_v3", 50, 0,
                                                                   10.0)
        tq, tk = (torch.tensor(c, dtype=torch.int32, device="cuda") for c in (cu_q, cu_k))
        dq, dk, dv = torch.ops.fa_course.attention_varlen_bwd.default(do, q, k, v, o, lse, tq, tk, -1, -1, True, 0.0,
                                                                      "auto", 50, 0, 10.0)
        for b, (gq, gk, gv) in by_hand.items():
            with self.subTest(sequence=b):
                t0, t1, u0, u1 = cu_q[b], cu_q[b + 1], cu_k[b], cu_k[b + 1]
                for name, x, r in (("dQ", dq[t0:t1], gq), ("dK", dk[u0:u1], gk), ("dV", dv[u0:u1], gv)):
                    r = r[0].transpose(0, 1)
                    ulp = torch.finfo(torch.bfloat16).eps * float(r.abs().max())
                    self.assertLessEqual(max_err(x, r), ulp, f"{name} of sequence {b}")
        self.assertTrue((dq[70:74] == 0).all())   # sequence 1: queries, no key
        self.assertTrue((dk[90:99] == 0).all() and (dv[90:99] == 0).all())  # sequence 2: keys, no query

    def test_varlen_refusals(self):
        x = torch.randn(10, 2, 64, device="cuda", dtype=torch.bfloat16)
        cu = torch.tensor([0, 4, 10], dtype=torch.int32, device="cuda")
        with self.assertRaisesRegex(TypeError, "float16 or bfloat16"):
            fa_course.attention_varlen(x.float(), x.float(), x.float(), cu, cu)
        with self.assertRaisesRegex(ValueError, "cu_seqlens_k: expected an int32 tensor .* on q's device"):
            fa_course.attention_varlen(x, x, x, cu, cu.cpu())
        with self.assertRaisesRegex(ValueError, "cu_seqlens_q: expected cu\\[B\\] = 10"):
            fa_course.attention_varlen(x, x, x, torch.tensor([0, 4, 12], dtype=torch.int32, device="cuda"), cu)

    def test_battery(self):
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            for c in CASES:
                with self.subTest(dtype=dtype, case=c):
                    self.check(c, dtype)

    def check_variant(self, case, dtype, kernel, backward):
        B, H, H_kv, N_q, N_k, d, causal, scale, window, softcap = case
        g = torch.Generator(device="cuda").manual_seed(3)
        q = torch.randn(B, H, N_q, d, device="cuda", generator=g).to(dtype)
        k = torch.randn(B, H_kv, N_k, d, device="cuda", generator=g).to(dtype)
        v = torch.randn(B, H_kv, N_k, d, device="cuda", generator=g).to(dtype)
        do = torch.randn(B, H, N_q, d, device="cuda", generator=g).to(dtype)

        def run(fn, dt):
            xs = [t.to(dt).requires_grad_(backward) for t in (q, k, v)]
            o = fn(*xs)
            return [o.detach()] + (list(torch.autograd.grad(o, xs, do.to(dt))) if backward else [])

        ours = run(lambda a, b, c: fa_course.attention(a, b, c, causal=causal, scale=scale, kernel=kernel,
                                                       window=window, softcap=softcap), dtype)
        ref = run(lambda a, b, c: variant_reference(a, b, c, causal, scale, window, softcap)[0], torch.float64)
        base = run(lambda a, b, c: variant_reference(a, b, c, causal, scale, window, softcap)[0], dtype)
        for name, x, r, b in zip(("O", "dQ", "dK", "dV"), ours, ref, base):
            store = 0.5 * torch.finfo(dtype).eps * float(r.abs().max())
            err, bound = max_err(x, r), 2 * max_err(b, r) + FLOOR[dtype] + store
            self.assertLessEqual(err, bound, f"{name} {dtype} {kernel} {case}: {err:.3g} > {bound:.3g}")
        seen = visible(N_q, N_k, causal, "cuda", window).any(-1)
        self.assertTrue(torch.equal(ours[0][:, :, ~seen], torch.zeros_like(ours[0][:, :, ~seen])),
                        "O: expected 0 where a row sees no key")

    def test_variant_forward(self):
        for dtype, kernel in ((torch.bfloat16, "v13"), (torch.bfloat16, "auto"), (torch.float16, "auto"),
                              (torch.float32, "v1"), (torch.float32, "auto")):
            for c in VARIANT_CASES:
                with self.subTest(dtype=dtype, kernel=kernel, case=c):
                    self.check_variant(c, dtype, kernel, backward=False)
        # LSE: -inf where a row sees no key, the float64 one's elsewhere (within the dtype's inputs).
        q = torch.randn(1, 2, 90, 64, device="cuda").bfloat16()
        k = torch.randn(1, 2, 40, 64, device="cuda").bfloat16()
        _, lse = fa_course.attention(q, k, k, window=(3, 0), softcap=2.0, return_lse=True)
        _, lse_ref = variant_reference(q.double(), k.double(), k.double(), False, None, (3, 0), 2.0)
        seen = visible(90, 40, False, "cuda", (3, 0)).any(-1)
        self.assertTrue(torch.isneginf(lse[:, :, ~seen]).all())
        self.assertLess(max_err(lse[:, :, seen], lse_ref[:, :, seen]), 1e-3)
        # A kernel that takes no window refuses it (the plan's line), never ignores it.
        with self.assertRaisesRegex(NotImplementedError, "--window"):
            fa_course.attention(q, k, k, window=(3, 0), kernel="v12")
        with self.assertRaisesRegex(NotImplementedError, "--softcap"):
            fa_course.attention(q, k, k, softcap=3.0, kernel="cublas")
        # The op's registration with them (inputs without grad: the forward's checks alone).
        for dt in (torch.bfloat16, torch.float32):
            args = [torch.randn(1, 4, 37, 64, device="cuda", dtype=dt), torch.randn(1, 2, 50, 64, device="cuda", dtype=dt),
                    torch.randn(1, 2, 50, 64, device="cuda", dtype=dt), True, 0.0, "auto", 9, 0, 4.0]
            torch.library.opcheck(torch.ops.fa_course.attention_fwd.default, args)

    def test_variant_backward(self):
        """The gradients with windows and softcaps, bf16 and fp32, through stage 06's GPU backward
        (a plan that refuses them raises NotImplementedError, FA06_UNSUPPORTED: a failure here)."""
        for dtype in (torch.bfloat16, torch.float32):
            for c in VARIANT_CASES:
                with self.subTest(dtype=dtype, case=c):
                    self.check_variant(c, dtype, "auto", backward=True)

    def test_current_stream(self):
        q = torch.randn(4, 8, 1024, 128, device="cuda", dtype=torch.bfloat16)
        expect = fa_course.attention(q, q, q)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            o = fa_course.attention(q, q, q)  # queued on s: reading o on s needs no sync
            same = torch.equal(o, expect)
        torch.cuda.synchronize()
        self.assertTrue(same)

    def test_compile(self):
        lin = torch.nn.Linear(64, 192, device="cuda", dtype=torch.bfloat16)

        def f(x):
            q, k, v = lin(x).view(2, 128, 3, 4, 16).permute(2, 0, 3, 1, 4)
            return fa_course.attention(q, k, v, causal=True).sum()
        x = torch.randn(2, 128, 64, device="cuda", dtype=torch.bfloat16)
        y = torch.compile(f, fullgraph=True)(x)
        ye = float(f(x).detach())
        self.assertLess(abs(float(y.detach()) - ye), 1e-2 * max(1.0, abs(ye)))

    def test_opcheck(self):
        for dt in (torch.bfloat16, torch.float32):
            args = [torch.randn(1, 4, 37, 64, device="cuda", dtype=dt, requires_grad=True),
                    torch.randn(1, 2, 50, 64, device="cuda", dtype=dt, requires_grad=True),
                    torch.randn(1, 2, 50, 64, device="cuda", dtype=dt, requires_grad=True), True, 0.0, "auto"]
            torch.library.opcheck(torch.ops.fa_course.attention_fwd.default, args)

    def test_decode(self):
        """fa_course.decode on a KV cache: ragged lengths (0, 1, ...), paged with scattered and shared
        pages, GQA, causal N_q > 1; each sequence against SDPA on its own keys, by the rule above."""
        g = torch.Generator(device="cuda").manual_seed(1)
        for dtype in (torch.bfloat16, torch.float16):
            for (B, H, H_kv, N_q, d, causal, P) in ((4, 8, 2, 1, 128, False, 0), (4, 8, 2, 1, 128, False, 16),
                                                   (3, 8, 8, 3, 64, True, 64), (5, 16, 2, 2, 96, False, 256)):
                with self.subTest(dtype=dtype, B=B, H_kv=H_kv, N_q=N_q, d=d, causal=causal, page=P):
                    cap = 512
                    lens = torch.tensor([0, 1, 300, cap, 77][:B], dtype=torch.int32, device="cuda")
                    k = torch.randn(B, H_kv, cap, d, device="cuda", generator=g).to(dtype)
                    v = torch.randn(B, H_kv, cap, d, device="cuda", generator=g).to(dtype)
                    q = torch.randn(B, H, N_q, d, device="cuda", generator=g).to(dtype)
                    table = None
                    kc, vc = k, v
                    if P:  # scatter the pages; the last sequence's first page is the first one's too
                        n = cap // P
                        perm = torch.randperm(B * n, generator=torch.Generator().manual_seed(P)).to("cuda")
                        table = perm.view(B, n).to(torch.int32).contiguous()
                        table[B - 1, 0] = table[0, 0]
                        kc = torch.zeros(B * n, H_kv, P, d, device="cuda", dtype=dtype)
                        vc = torch.zeros_like(kc)
                        for b in range(B):
                            kc[table[b].long()] = k[b].view(H_kv, n, P, d).transpose(0, 1)
                            vc[table[b].long()] = v[b].view(H_kv, n, P, d).transpose(0, 1)
                        k[B - 1, :, :P], v[B - 1, :, :P] = k[0, :, :P], v[0, :, :P]  # what the shared page holds
                        kc[table[0, 0].long()] = k[0, :, :P]
                        vc[table[0, 0].long()] = v[0, :, :P]
                    o = fa_course.decode(q, kc, vc, cache_lens=lens, block_table=table, causal=causal)
                    for b in range(B):
                        L = int(lens[b])
                        if L == 0:
                            self.assertTrue(torch.equal(o[b], torch.zeros_like(o[b])), f"length 0: O = 0")
                            continue
                        kb, vb = k[b:b + 1, :, :L], v[b:b + 1, :, :L]
                        ref = sdpa_reference(q[b:b + 1].double(), kb.double(), vb.double(), causal)[0]
                        base = sdpa_reference(q[b:b + 1], kb, vb, causal)[0]
                        store = 0.5 * torch.finfo(dtype).eps * float(ref.abs().max())
                        err, bound = max_err(o[b:b + 1], ref), 2 * max_err(base, ref) + FLOOR[dtype] + store
                        self.assertLessEqual(err, bound, f"sequence {b} (length {L}): {err:.3g} > {bound:.3g}")
        q = torch.randn(2, 4, 1, 64, device="cuda", dtype=torch.bfloat16)
        kc = torch.randn(2, 2, 64, 64, device="cuda", dtype=torch.bfloat16)
        with self.assertRaisesRegex(ValueError, "cache_lens"):
            fa_course.decode(q, kc, kc, cache_lens=torch.tensor([5, 65], dtype=torch.int32, device="cuda"))
        with self.assertRaisesRegex(ValueError, "block_table"):
            fa_course.decode(q, kc.view(8, 2, 16, 64), kc.view(8, 2, 16, 64),
                             block_table=torch.tensor([[0, 1, 2, 3], [4, 5, 6, 8]], dtype=torch.int32, device="cuda"))

    def test_kernels_reported(self):
        print("\nkernels (fwd, bwd):", {(str(dt), d): fa_course.kernels_for("cuda", dt, d)
                                        for dt in (torch.bfloat16, torch.float32) for d in (32, 64, 80, 96, 128, 256)})


    def test_fp8_against_float64_and_the_e4m3_entry(self):
        if torch.cuda.get_device_capability() != (9, 0):
            self.skipTest("v15 needs sm_90")
        for case in FP8_CASES:
            B, H, H_kv, N_q, N_k, causal = case
            with self.subTest(case=case):
                g = torch.Generator(device="cuda").manual_seed(7)
                q = torch.randn(B, H, N_q, 128, device="cuda", generator=g).to(torch.bfloat16)
                k, v = (torch.randn(B, H_kv, N_k, 128, device="cuda", generator=g).to(torch.bfloat16) for _ in range(2))
                o, lse = fa_course.attention_fp8(q, k, v, causal=causal, return_lse=True)
                (q8, sq), (k8, sk), (v8, sv) = (fa_course.quantize_fp8(t, r) for t, r in ((q, 64), (k, 128), (v, 128)))
                # the bf16 entry quantises on the GPU as quantize_fp8 does: the same bits through the e4m3 entry
                o2, lse2 = fa_course.attention_fp8(q8, k8, v8, scales=(sq, sk, sv), causal=causal, return_lse=True)
                self.assertTrue(torch.equal(o.view(torch.int16), o2.view(torch.int16)), "O: bf16 entry vs e4m3 entry")
                self.assertTrue(torch.equal(lse.view(torch.int32), lse2.view(torch.int32)), "LSE: the same")
                deq = [x8.double() * torch.repeat_interleave(s.double(), r, 2)[:, :, :x8.shape[2], None]
                       for x8, s, r in ((q8, sq, 64), (k8, sk, 128), (v8, sv, 128))]
                ref_o, ref_lse = sdpa_reference(*deq, causal)
                bo, dS = fp8_bound(*deq, 128 ** -0.5, N_k)
                self.assertLessEqual(max_err(o, ref_o), bo, f"O {case}")
                # the rule is a worst case; the RMSE is tight: at most twice what storing P and O alone
                # costs (the C++ battery's FP8 RMSE check; measured there 0.97x), which a wrong head or
                # row (errors the size of O itself) cannot meet
                e_store = rmse(fp8_stored_reference(*deq, causal, 128 ** -0.5), ref_o)
                self.assertLessEqual(rmse(o, ref_o), 2 * e_store, f"O's RMSE {case} (storage alone: {e_store:.3g})")
                seen = visible(N_q, N_k, causal, "cuda").any(-1)
                bl = dS + 1e-5 * max(1.0, float(ref_lse[:, :, seen].abs().max()))
                self.assertLessEqual(max_err(lse[:, :, seen], ref_lse[:, :, seen]), bl, f"LSE {case}")
                self.assertTrue(torch.equal(o[:, :, ~seen], torch.zeros_like(o[:, :, ~seen])), "O = 0 where no key")
                self.assertTrue(bool((lse[:, :, ~seen] == float("-inf")).all()), "LSE = -inf where no key")

    def test_fp8_refusals_and_registration(self):
        if torch.cuda.get_device_capability() != (9, 0):
            self.skipTest("v15 needs sm_90")
        x = torch.randn(1, 2, 64, 128, device="cuda", dtype=torch.bfloat16)
        x8, s = fa_course.quantize_fp8(x, 64)
        _, s128 = fa_course.quantize_fp8(x, 128)
        for call, kind, pattern in [
            (lambda: fa_course.attention_fp8(x[..., :64], x[..., :64], x[..., :64]), NotImplementedError, "--head-dim: expected 128"),
            (lambda: fa_course.attention_fp8(x.half(), x.half(), x.half()), TypeError, "q: expected torch.bfloat16"),
            (lambda: fa_course.attention_fp8(x, x, x, scales=(s, s128, s128)), TypeError, "q: expected torch.float8_e4m3fn"),
            (lambda: fa_course.attention_fp8(x8, x8, x8, scales=(s, torch.ones(1, 2, 2, device="cuda"), s128)), ValueError,
             "scales: expected scale_k float32 \\[1, 2, 1\\]"),
            (lambda: fa_course.attention_fp8(x8, x8, x8), TypeError, "q: expected torch.bfloat16 \\(without scales=\\)"),
            (lambda: fa_course.attention_fp8(x, x, x, scale=-1.0), ValueError, "--scale: expected a number"),
            (lambda: fa_course.attention_fp8(x, x, x, scale=0), ValueError, "--scale: expected a number"),
            (lambda: fa_course.attention_fp8(x, x, x, causal=1), TypeError, "causal: expected True or False"),
            (lambda: fa_course.attention_fp8([1.0], x, x), ValueError, "q: expected a 4-dimensional torch.Tensor"),
            (lambda: fa_course.attention_fp8(x8, x8, x8, scales=(1, 2, 3)), ValueError, "scales: expected scale_q float32"),
        ]:
            with self.subTest(pattern=pattern):
                with self.assertRaisesRegex(kind, pattern) as cm:
                    call()
                self.assertNotIn("\n", str(cm.exception))
        xg = x.clone().requires_grad_()
        with self.assertRaisesRegex(NotImplementedError, "attention_fp8: expected no gradient"):
            fa_course.attention_fp8(xg, x, x).float().sum().backward()
        torch.library.opcheck(torch.ops.fa_course.attention_fp8_fwd.default, (x, x, x, None, None, None, True, 0.0),
                              test_utils=("test_schema", "test_faketensor"))
        torch.library.opcheck(torch.ops.fa_course.attention_fp8_fwd.default, (x8, x8, x8, s, s128, s128, False, 0.0),
                              test_utils=("test_schema", "test_faketensor"))


if __name__ == "__main__":
    if not gpu_available():
        print("test_gpu: expected a CUDA GPU, found none: skipped")
        sys.exit(77)
    unittest.main(verbosity=2)
