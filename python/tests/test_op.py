"""fa_course.attention on the CPU (stage 04 forward, stage 06 backward) against float64 SDPA math.

The rule, the course's (docs/numerics.md, FlashAttention's own tests): for O, dQ, dK, dV,
    max |ours - float64| <= 2 * max |SDPA math in float32 - float64| + 1e-5,
and LSE within 1e-5 * max(1, |LSE|) of float64 (-inf exactly where a row sees no key).
With a window or a softcap (issue 34) the reference is util.variant_reference, written out, and
the baseline is the same reference run in float32; it is itself checked against SDPA with an
explicit mask, a plain loop, and torch.autograd.gradcheck."""
import math
import unittest

import torch

from util import max_err, offsets, packed_reference, sdpa_reference, variant_reference, visible

import fa_course

CASES = [  # B, H, H_kv, N_q, N_k, d, causal, scale
    (1, 2, 2, 64, 64, 32, False, None),      # square
    (2, 3, 3, 37, 29, 16, False, None),      # ragged, not a multiple of any block
    (1, 4, 2, 50, 83, 24, True, None),       # GQA, causal with N_q < N_k (bottom-right)
    (2, 4, 1, 41, 41, 8, True, 0.3),         # MQA, causal, own scale
    (1, 2, 1, 70, 23, 16, True, None),       # N_q > N_k causal: 47 rows see no key
    (1, 1, 1, 1, 300, 64, False, None),      # one query (decode)
    (1, 2, 2, 129, 130, 64, True, None),     # past one default block (64 rows at d = 64)
]


VARIANT_CASES = [  # B, H, H_kv, N_q, N_k, d, causal, scale, window, softcap
    (1, 2, 1, 100, 100, 32, True, None, (16, -1), None),    # left side only, causal (Mistral's sliding window)
    (2, 4, 2, 70, 90, 16, False, None, (5, 11), None),      # asymmetric, N_q < N_k, GQA: keys 0-14 seen by no row
    (1, 2, 2, 90, 40, 24, False, None, (3, 0), None),       # N_q > N_k: the 50 rows left of key 0 see no key
    (1, 1, 1, 64, 64, 32, False, None, (0, 0), None),       # the diagonal alone
    (1, 2, 2, 37, 300, 16, False, None, (-1, 2), None),     # right side only, N_q << N_k
    (1, 2, 1, 50, 83, 16, False, 3.0, None, 5.0),           # softcap alone, logits far beyond the cap
    (2, 2, 2, 33, 33, 8, True, 2.0, None, 1.0),             # softcap 1 with causal
    (1, 4, 2, 129, 130, 64, True, None, (40, -1), 30.0),    # both, past one default block (64 rows at d = 64)
    (1, 2, 1, 40, 40, 16, True, 1.5, (200, 7), 2.0),        # a window wider than N; causal drops its right side
    (1, 1, 1, 1, 300, 64, False, None, (31, 0), 10.0),      # one query (decode) in a window
]


def run_case(test, B, H, H_kv, N_q, N_k, d, causal, scale, seed=0, window=None, softcap=None):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, N_q, d, generator=g)
    k = torch.randn(B, H_kv, N_k, d, generator=g)
    v = torch.randn(B, H_kv, N_k, d, generator=g)
    do = torch.randn(B, H, N_q, d, generator=g)

    def grads(fn, dtype):
        xs = [t.to(dtype).requires_grad_() for t in (q, k, v)]
        o, lse = fn(*xs)
        dq, dk, dv = torch.autograd.grad(o, xs, do.to(dtype))
        return o.detach(), lse, dq, dk, dv

    if window is None and softcap is None:
        reference = lambda a, b, c: sdpa_reference(a, b, c, causal, scale)  # noqa: E731
    else:
        reference = lambda a, b, c: variant_reference(a, b, c, causal, scale, window, softcap)  # noqa: E731
    ours = grads(lambda a, b, c: fa_course.attention(a, b, c, causal=causal, scale=scale, return_lse=True,
                                                     window=window, softcap=softcap), torch.float32)
    ref = grads(reference, torch.float64)
    base = grads(reference, torch.float32)
    for i, name in [(0, "O"), (2, "dQ"), (3, "dK"), (4, "dV")]:
        err, bound = max_err(ours[i], ref[i]), 2 * max_err(base[i], ref[i]) + 1e-5
        test.assertLessEqual(err, bound, f"{name}: error {err:.3g} vs float64 above {bound:.3g}")
    lse, lse_ref = ours[1], ref[1].detach()
    mask = visible(N_q, N_k, causal, window=window)
    seen = mask.any(-1).expand_as(lse)
    test.assertTrue(torch.isneginf(lse[~seen]).all(), "LSE: expected -inf where a row sees no key")
    test.assertTrue((ours[0][~seen[..., None].expand_as(ours[0])] == 0).all(), "O: expected 0 where a row sees no key")
    test.assertTrue((ours[2][~seen[..., None].expand_as(ours[2])] == 0).all(), "dQ: expected 0 where a row sees no key")
    unseen_keys = ~mask.any(0)  # [N_k]: keys no query row sees
    for i, name in [(3, "dK"), (4, "dV")]:
        test.assertTrue((ours[i][:, :, unseen_keys] == 0).all(), f"{name}: expected 0 for a key no row sees")
    d_lse = (lse[seen].double() - lse_ref[seen]).abs() / lse_ref[seen].abs().clamp(min=1)
    test.assertLessEqual(float(d_lse.max()) if d_lse.numel() else 0.0, 1e-5)
    for t in ours:
        test.assertFalse(torch.isnan(t).any(), "NaN in an output")


class Battery(unittest.TestCase):
    def test_cases_against_float64(self):
        for c in CASES:
            with self.subTest(case=c):
                run_case(self, *c)

    def test_non_contiguous_inputs_are_copied(self):
        g = torch.Generator().manual_seed(3)
        base = torch.randn(2, 33, 4, 16, generator=g)  # [B, N, H, d], as a model's projection gives it
        q = base.transpose(1, 2).requires_grad_()        # a strided view [B, H, N, d]
        self.assertFalse(q.is_contiguous())
        o = fa_course.attention(q, q, q, causal=True)
        o_ref, _ = sdpa_reference(q.detach().double(), q.detach().double(), q.detach().double(), True)
        self.assertLess(max_err(o, o_ref), 1e-5)
        o.sum().backward()
        self.assertEqual(q.grad.shape, q.shape)

    def test_lse_is_not_differentiable_and_matches(self):
        q = torch.randn(1, 2, 9, 8, requires_grad=True)
        o, lse = fa_course.attention(q, q, q, return_lse=True)
        self.assertFalse(lse.requires_grad)
        self.assertEqual(lse.dtype, torch.float32)
        s = q.detach().double() @ q.detach().double().transpose(-1, -2) / math.sqrt(8)
        self.assertLess(max_err(lse, torch.logsumexp(s, -1)), 1e-5)

    def test_bad_inputs_raise_one_line(self):
        x = torch.randn(1, 4, 8, 16)
        bad = [
            (lambda: fa_course.attention(x, torch.randn(1, 3, 8, 16), torch.randn(1, 3, 8, 16)), ValueError, "--kv-heads"),
            (lambda: fa_course.attention(x, x, torch.randn(1, 4, 9, 16)), ValueError, "k and v of one shape"),
            (lambda: fa_course.attention(x, torch.randn(1, 4, 8, 8), torch.randn(1, 4, 8, 8)), ValueError, "--head-dim"),
            (lambda: fa_course.attention(x, torch.randn(2, 4, 8, 16), torch.randn(2, 4, 8, 16)), ValueError, "--batch"),
            (lambda: fa_course.attention(x[0], x[0], x[0]), ValueError, "4 dimensions"),
            (lambda: fa_course.attention(x.double(), x.double(), x.double()), TypeError, "float32"),
            (lambda: fa_course.attention(x.half(), x, x), TypeError, "one dtype"),
            (lambda: fa_course.attention(x, x, x, scale=-1.0), ValueError, "--scale"),
            (lambda: fa_course.attention(x, x, x, scale=float("nan")), ValueError, "--scale"),
            (lambda: fa_course.attention(torch.randn(1, 1, 4, 300), torch.randn(1, 1, 4, 300),
                                         torch.randn(1, 1, 4, 300)), ValueError, "--head-dim"),
            (lambda: fa_course.attention(torch.randn(1, 1, 0, 16), x[:, :1], x[:, :1]), ValueError, "--seq-q"),
            (lambda: fa_course.attention(x, x, x, kernel="v12"), ValueError, "kernel"),
            (lambda: fa_course.attention(x, x.to("meta"), x), ValueError, "one device"),
        ]
        for fn, exc, word in bad:
            with self.subTest(word=word):
                with self.assertRaises(exc) as cm:
                    fn()
                self.assertIn(word, str(cm.exception))
                self.assertNotIn("\n", str(cm.exception))

    def test_the_registered_ops_check_their_inputs(self):
        # torch.ops.fa_course.* are public and are what torch.compile and export call: a wrong
        # shape, dtype or layout there must raise, not read out of bounds (it once crashed).
        fwd, bwd = torch.ops.fa_course.attention_fwd.default, torch.ops.fa_course.attention_bwd.default
        q = torch.randn(1, 1, 4, 8)
        o, lse = fwd(q, q, q, False, 0.0, "auto")
        bad = [
            (lambda: fwd(torch.randn(64, 2, 8, 8), q, q, False, 0.0, "auto"), "--batch"),
            (lambda: fwd(q.double(), q.double(), q.double(), False, 0.0, "auto"), "float32"),
            (lambda: fwd(q, q, torch.randn(1, 1, 2, 8), False, 0.0, "auto"), "one shape"),
            (lambda: bwd(o, torch.randn(1, 1, 1 << 12, 8), q, q, o, lse, False, 0.0, "auto"), "dO"),
            (lambda: bwd(o, q, torch.randn(1, 1, 1 << 12, 8), q, o, lse, False, 0.0, "auto"), "one shape"),
            (lambda: bwd(torch.randn(1, 1, 1 << 12, 8), q, q, q, o, lse, False, 0.0, "auto"), "dO"),
            (lambda: bwd(o.double(), q, q, q, o, lse, False, 0.0, "auto"), "dO"),
            (lambda: bwd(o, q, q, q, o, lse[..., :2], False, 0.0, "auto"), "lse"),
        ]
        for fn, word in bad:
            with self.subTest(word=word):
                with self.assertRaises((ValueError, TypeError)) as cm:
                    fn()
                self.assertIn(word, str(cm.exception))

    def test_scales_the_kernels_cannot_take_raise(self):
        # A scale below float32's smallest normal would round to 0, which the C ABIs read as the
        # default 1/sqrt(d): it must raise, not silently run with another scale.
        x = torch.randn(1, 2, 8, 16)
        for scale in (1e-300, 1e-45, 10 ** 400, 3e39, True, "0.5"):
            with self.subTest(scale=scale):
                with self.assertRaises(ValueError) as cm:
                    fa_course.attention(x, x, x, scale=scale)
                self.assertIn("--scale", str(cm.exception))
        with self.assertRaises(TypeError):
            fa_course.attention(x, x, x, causal="no")
        import numpy as np
        self.assertLess(max_err(fa_course.attention(x, x, x, scale=np.float32(0.25)),
                                fa_course.attention(x, x, x, scale=0.25)), 1e-30)

    def test_compile_with_the_scale_as_an_argument(self):
        # The scale traced as an argument: no graph break (the checks compare, never call math.*).
        x = torch.randn(1, 2, 8, 16)
        f = torch.compile(lambda q, s: fa_course.attention(q, q, q, scale=s), fullgraph=True, backend="aot_eager")
        self.assertLess(max_err(f(x, 0.3), fa_course.attention(x, x, x, scale=0.3)), 1e-6)
        # So are a window and a softcap, and the backward gets them.
        x = torch.randn(1, 2, 20, 16, requires_grad=True)
        f = torch.compile(lambda q, w, c: fa_course.attention(q, q, q, window=w, softcap=c), fullgraph=True,
                          backend="aot_eager")
        for w, c in (((3, 1), 2.0), ((6, -1), 0.5)):
            y, ye = f(x, w, c), fa_course.attention(x, x, x, window=w, softcap=c)
            self.assertLess(max_err(y, ye), 1e-6)
            g, = torch.autograd.grad(y.square().sum(), x)
            ge, = torch.autograd.grad(ye.square().sum(), x)
            self.assertLess(max_err(g, ge), 1e-5)

    def test_library_message_reaches_python(self):
        # A check only the C library makes (its block buffers vs the memory) raises its own line.
        from fa_course import _lib
        with self.assertRaises(ValueError) as cm:
            _lib.check("fa04", _lib.lib("fa04").fa04_forward(0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0.0, 0, 0, 0))
        self.assertIn("NULL", str(cm.exception))


class Variants(unittest.TestCase):
    """window= and softcap= (issue 34) through stage 04's forward and stage 06's CPU backward."""

    def test_cases_against_float64(self):
        for c in VARIANT_CASES:
            with self.subTest(case=c):
                *sizes, window, softcap = c
                run_case(self, *sizes, window=window, softcap=softcap)

    def test_the_reference_against_sdpa_a_loop_and_gradcheck(self):
        # The reference the cases trust: without a variant it is SDPA's math; with a window SDPA
        # with the window's explicit mask; with a softcap a plain loop over the definition; its
        # gradients (the softcap's slope, the mask's zeros) torch.autograd.gradcheck's.
        g = torch.Generator().manual_seed(5)
        q, k, v = (torch.randn(1, 4, n, 8, generator=g, dtype=torch.float64) for n in (23, 31, 31))
        k, v = k[:, :2], v[:, :2]  # GQA
        for causal, window in ((False, None), (True, None), (False, (4, 2)), (True, (6, -1)), (False, (-1, 0))):
            with self.subTest(causal=causal, window=window):
                o, lse = variant_reference(q, k, v, causal, 0.4, window)
                o_s, lse_s = sdpa_reference(q, k, v, causal, 0.4, window)
                self.assertLess(max_err(o, o_s), 1e-12)
                self.assertLess(max_err(lse, lse_s), 1e-12)
        c, scale, window = 1.5, 0.9, (3, 1)
        o, lse = variant_reference(q, k, v, False, scale, window, c)
        mask = visible(23, 31, False, window=window)
        for h in (0, 3):
            for i in (0, 11, 22):
                s = [c * math.tanh(scale * float(q[0, h, i] @ k[0, h // 2, j]) / c) if mask[i, j] else -math.inf
                     for j in range(31)]
                m = max(s)
                w = [math.exp(x - m) for x in s]
                self.assertAlmostEqual(float(lse[0, h, i]), m + math.log(sum(w)), places=12)
                o_row = [sum(w[j] * float(v[0, h // 2, j, x]) for j in range(31)) / sum(w) for x in range(8)]
                self.assertLess(max(abs(a - float(b)) for a, b in zip(o_row, o[0, h, i])), 1e-12)
        xs = [t[:, :, :9, :4].clone().requires_grad_() for t in (q, k, v)]
        for causal, window, cap in ((False, (2, 1), 1.5), (True, (3, -1), 0.7), (False, (1, 0), None)):
            with self.subTest(gradcheck=(causal, window, cap)):
                xs[0] = q[:, :, :12, :4].clone().requires_grad_()  # N_q = 12 > N_k = 9: rows that see no key
                self.assertTrue(torch.autograd.gradcheck(
                    lambda a, b, cc: variant_reference(a, b, cc, causal, 2.0, window, cap)[0], xs))

    def test_causal_drops_the_right_side(self):
        # FlashAttention's window_size: with causal the right side is 0, whatever is passed.
        g = torch.Generator().manual_seed(2)
        q = torch.randn(1, 2, 45, 16, generator=g, requires_grad=True)
        outs = []
        for right in (0, 5, -1):
            o = fa_course.attention(q, q, q, causal=True, window=(9, right), softcap=4.0)
            outs.append((o.detach(),) + torch.autograd.grad(o.square().sum(), q))
        for other in outs[1:]:
            for a, b in zip(outs[0], other):
                self.assertTrue(torch.equal(a, b))
        self.assertFalse(torch.equal(outs[0][0], fa_course.attention(q, q, q, window=(9, 5)).detach()))

    def test_no_variant_is_the_plain_op(self):
        # window (-1, -1) and softcap None are the plain op: the same bits, the same graph node.
        g = torch.Generator().manual_seed(4)
        q, k, v = (torch.randn(2, 2, n, 24, generator=g) for n in (30, 41, 41))
        for causal in (False, True):
            a, la = fa_course.attention(q, k, v, causal=causal, return_lse=True)
            b, lb = fa_course.attention(q, k, v, causal=causal, return_lse=True, window=(-1, -1))
            c, lc = torch.ops.fa_course.attention_fwd.default(q, k, v, causal, 0.0, "auto", -1, -1, 0.0)
            self.assertTrue(torch.equal(a, b) and torch.equal(a, c) and torch.equal(la, lb) and torch.equal(la, lc))
            if causal:  # the left side unbounded: causal alone, whatever the right side
                self.assertTrue(torch.equal(a, fa_course.attention(q, k, v, causal=True, window=(-1, 3))))
        # and a window wider than the sequences sees every key
        self.assertLess(max_err(fa_course.attention(q, k, v, window=(1000, 1000)), fa_course.attention(q, k, v)), 1e-6)

    def test_the_backward_gets_the_forward_s_window_and_softcap(self):
        # Autograd's saved context carries them: the gradients differ from those without them and
        # match the backward op called by hand with them.
        g = torch.Generator().manual_seed(6)
        q, k, v = (torch.randn(1, 2, n, 16, generator=g, requires_grad=True) for n in (20, 27, 27))
        do = torch.randn(1, 2, 20, 16, generator=g)
        o, lse = fa_course.attention(q, k, v, window=(4, 3), softcap=2.5, return_lse=True)
        got = torch.autograd.grad(o, (q, k, v), do)
        by_hand = torch.ops.fa_course.attention_bwd.default(do, q.detach(), k.detach(), v.detach(), o.detach(), lse,
                                                            False, 0.0, "auto", 4, 3, 2.5)
        plain = torch.ops.fa_course.attention_bwd.default(do, q.detach(), k.detach(), v.detach(), o.detach(), lse,
                                                          False, 0.0, "auto")
        for a, b, c in zip(got, by_hand, plain):
            self.assertTrue(torch.equal(a, b))
            self.assertFalse(torch.equal(a, c))

    def test_bad_window_and_softcap_raise_one_line(self):
        x = torch.randn(1, 2, 8, 16)
        bad = [
            (dict(window=(-2, 0)), ValueError, "--window"),
            (dict(window=(3, -5)), ValueError, "--window"),
            (dict(window=(3, -5), causal=True), ValueError, "--window"),  # checked before causal drops it
            (dict(window=(2 ** 63, 0)), ValueError, "--window"),
            (dict(window=5), TypeError, "--window"),
            (dict(window=(1,)), TypeError, "--window"),
            (dict(window=(1, 2, 3)), TypeError, "--window"),
            (dict(window=(1.5, 2)), TypeError, "--window"),
            (dict(window=(True, 0)), TypeError, "--window"),
            (dict(window="4,0"), TypeError, "--window"),
            (dict(softcap=0.0), ValueError, "--softcap"),
            (dict(softcap=-1.0), ValueError, "--softcap"),
            (dict(softcap=float("nan")), ValueError, "--softcap"),
            (dict(softcap=float("inf")), ValueError, "--softcap"),
            (dict(softcap=1e-50), ValueError, "--softcap"),  # would round to 0 in float32: no cap at all
            (dict(softcap="30"), TypeError, "--softcap"),
            (dict(softcap=True), TypeError, "--softcap"),
        ]
        for kw, exc, word in bad:
            with self.subTest(**{k: repr(v) for k, v in kw.items()}):
                with self.assertRaises(exc) as cm:
                    fa_course.attention(x, x, x, **kw)
                self.assertIn(word, str(cm.exception))
                self.assertNotIn("\n", str(cm.exception))
        # The ops check them too (they are public): before any kernel, with the same words.
        fwd, bwd = torch.ops.fa_course.attention_fwd.default, torch.ops.fa_course.attention_bwd.default
        o, lse = fwd(x, x, x, False, 0.0, "auto")
        for fn, word in [(lambda: fwd(x, x, x, False, 0.0, "auto", -2, 0, 0.0), "--window"),
                         (lambda: fwd(x, x, x, False, 0.0, "auto", 0, -3, 0.0), "--window"),
                         (lambda: fwd(x, x, x, False, 0.0, "auto", -1, -1, -1.0), "--softcap"),
                         (lambda: fwd(x, x, x, False, 0.0, "auto", -1, -1, float("nan")), "--softcap"),
                         (lambda: bwd(o, x, x, x, o, lse, False, 0.0, "auto", -5, 1, 0.0), "--window"),
                         (lambda: bwd(o, x, x, x, o, lse, False, 0.0, "auto", 1, 1, float("inf")), "--softcap")]:
            with self.subTest(op_word=word):
                with self.assertRaises(ValueError) as cm:
                    fn()
                self.assertIn(word, str(cm.exception))
        import numpy as np  # numpy numbers are numbers
        self.assertTrue(torch.equal(fa_course.attention(x, x, x, window=(np.int64(2), 1), softcap=np.float32(3.0)),
                                    fa_course.attention(x, x, x, window=(2, 1), softcap=3.0)))

    def test_the_library_refuses_what_python_lets_through(self):
        # The C ABIs' own checks, reached directly: a window side below -1 and a NaN softcap name
        # their flags (python refuses them first; this is the door tools and other callers use).
        from fa_course import _lib
        x = torch.randn(1, 1, 4, 8)
        o, lse = torch.empty_like(x), torch.empty(1, 1, 4)
        ptrs = [t.data_ptr() for t in (x, x, x, o, lse)]
        with self.assertRaisesRegex(ValueError, "--window"):
            _lib.check("fa04", _lib.lib("fa04").fa04_forward_variant(*ptrs, 1, 1, 1, 4, 4, 8, 0, 0.0, 0, 0, 0, -3, 0, 0.0))
        with self.assertRaisesRegex(ValueError, "--softcap"):
            _lib.check("fa04", _lib.lib("fa04").fa04_forward_variant(*ptrs, 1, 1, 1, 4, 4, 8, 0, 0.0, 0, 0, 0, -1, -1,
                                                                     float("nan")))
        bptrs = [t.data_ptr() for t in (x, x, x, o, x, lse, o, o, o)]
        with self.assertRaisesRegex(ValueError, "--window"):
            _lib.check("fa06", _lib.lib("fa06").fa06_backward_cpu_variant(*bptrs, 1, 1, 1, 4, 4, 8, 0, 0.0, 0, 0, 0, 2,
                                                                          -4, 0.0))


VARLEN_CASES = [  # lengths of the queries, of the keys; H, H_kv, d, causal, scale, window, softcap
    ([0, 1, 127, 129, 300], [0, 1, 127, 129, 300], 4, 2, 32, False, None, None, None),  # GQA, every edge length
    ([0, 1, 127, 129, 300], [0, 1, 127, 129, 300], 4, 2, 32, True, None, None, None),   # causal
    ([5, 0, 129, 1, 300], [0, 7, 127, 300, 100], 4, 1, 16, True, None, None, None),     # N_q != N_k, MQA: queries
    #   without keys, keys without queries, a decode row, 200 rows that see no key
    ([64, 129, 1, 300], [64, 129, 30, 300], 2, 2, 24, False, None, (16, 8), None),      # a window across blocks
    ([127, 0, 300, 3], [129, 4, 300, 3], 4, 1, 16, True, 0.5, (40, -1), 5.0),           # window and softcap, MQA
    ([300, 1, 129], [250, 129, 129], 2, 1, 64, False, 2.0, None, 2.0),                  # softcap on logits far above it
]


def run_varlen_case(test, lq, lk, H, H_kv, d, causal, scale, window, softcap, seed=0):
    """attention_varlen's O, LSE, dQ, dK, dV on the CPU against packed_reference in float64, by
    the course's rule (the baseline: the same reference in float32), and its zeros."""
    cu_q, cu_k = offsets(lq), offsets(lk)
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(cu_q[-1], H, d, generator=g)
    k = torch.randn(cu_k[-1], H_kv, d, generator=g)
    v = torch.randn(cu_k[-1], H_kv, d, generator=g)
    do = torch.randn(cu_q[-1], H, d, generator=g)
    tq, tk = torch.tensor(cu_q, dtype=torch.int32), torch.tensor(cu_k, dtype=torch.int32)

    def grads(fn, dtype):
        xs = [t.to(dtype).requires_grad_() for t in (q, k, v)]
        o, lse = fn(*xs)
        dq, dk, dv = torch.autograd.grad(o, xs, do.to(dtype), allow_unused=True)
        dq, dk, dv = (torch.zeros_like(x) if gr is None else gr for x, gr in zip(xs, (dq, dk, dv)))
        return o.detach(), lse, dq, dk, dv

    ours = grads(lambda a, b, c: fa_course.attention_varlen(a, b, c, tq, tk, causal=causal, scale=scale,
                                                            return_lse=True, window=window, softcap=softcap),
                 torch.float32)
    ref = grads(lambda a, b, c: packed_reference(a, b, c, cu_q, cu_k, causal, scale, window, softcap), torch.float64)
    base = grads(lambda a, b, c: packed_reference(a, b, c, cu_q, cu_k, causal, scale, window, softcap), torch.float32)
    test.assertEqual(ours[1].shape, (H, cu_q[-1]))
    for i, name in [(0, "O"), (2, "dQ"), (3, "dK"), (4, "dV")]:
        err, bound = max_err(ours[i], ref[i]), 2 * max_err(base[i], ref[i]) + 1e-5
        test.assertLessEqual(err, bound, f"{name}: error {err:.3g} vs float64 above {bound:.3g}")
    lse, lse_ref = ours[1], ref[1].detach()
    seen = torch.isfinite(lse_ref)  # [H, total_q]
    test.assertTrue(torch.isneginf(lse[~seen]).all(), "LSE: expected -inf where a row sees no key")
    rows = seen.t()[..., None].expand_as(ours[0])  # [total_q, H, d]
    test.assertTrue((ours[0][~rows] == 0).all(), "O: expected 0 where a row sees no key")
    test.assertTrue((ours[2][~rows] == 0).all(), "dQ: expected 0 where a row sees no key")
    unseen = torch.zeros(cu_k[-1], dtype=torch.bool)  # keys no query of their sequence sees
    for b in range(len(lq)):
        m = lk[b]
        if m:
            vis = visible(lq[b], m, causal, window=window) if lq[b] else torch.zeros(0, m, dtype=torch.bool)
            unseen[cu_k[b]:cu_k[b + 1]] = ~vis.any(0)
    for i, name in [(3, "dK"), (4, "dV")]:
        test.assertTrue((ours[i][unseen] == 0).all(), f"{name}: expected 0 for a key no row sees")
    d_lse = (lse[seen].double() - lse_ref[seen]).abs() / lse_ref[seen].abs().clamp(min=1)
    test.assertLessEqual(float(d_lse.max()) if d_lse.numel() else 0.0, 1e-5)
    for t in ours:
        test.assertFalse(torch.isnan(t).any(), "NaN in an output")
    return unseen


class Varlen(unittest.TestCase):
    """attention_varlen (issue 34): stage 04's forward and stage 06's CPU backward on a packed batch."""

    def test_cases_against_float64(self):
        for c in VARLEN_CASES:
            with self.subTest(case=c[:2] + c[2:]):
                unseen = run_varlen_case(self, *c)
                if c[1] == [0, 7, 127, 300, 100]:  # the premise: this case has keys no query sees
                    self.assertTrue(unseen.any())

    def test_each_sequence_is_attention_on_it(self):
        # A packed sequence is the [1, H, N, d] problem attention() runs: the same stage 04 and
        # stage 06 calls on it, so the same bits, forward and backward.
        lq, lk = [40, 5, 0, 129, 3], [50, 0, 6, 100, 3]  # sequence 1: queries, no key; 2: keys, no query
        cu_q, cu_k = offsets(lq), offsets(lk)
        g = torch.Generator().manual_seed(7)
        q = torch.randn(cu_q[-1], 4, 16, generator=g, requires_grad=True)
        k = torch.randn(cu_k[-1], 2, 16, generator=g, requires_grad=True)
        v = torch.randn(cu_k[-1], 2, 16, generator=g, requires_grad=True)
        do = torch.randn(cu_q[-1], 4, 16, generator=g)
        tq, tk = torch.tensor(cu_q, dtype=torch.int32), torch.tensor(cu_k, dtype=torch.int32)
        kw = dict(causal=True, window=(20, 0), softcap=3.0)
        o, lse = fa_course.attention_varlen(q, k, v, tq, tk, return_lse=True, **kw)
        dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
        for b in range(len(lq)):
            t0, t1, u0, u1 = cu_q[b], cu_q[b + 1], cu_k[b], cu_k[b + 1]
            if t0 == t1 or u0 == u1:
                continue
            with self.subTest(sequence=b):
                seq = lambda x, a, z: x.detach()[a:z].transpose(0, 1).unsqueeze(0).requires_grad_()  # noqa: E731
                xs = (seq(q, t0, t1), seq(k, u0, u1), seq(v, u0, u1))
                ob, lb = fa_course.attention(*xs, return_lse=True, **kw)
                gb = torch.autograd.grad(ob, xs, do[t0:t1].transpose(0, 1).unsqueeze(0))
                self.assertTrue(torch.equal(o[t0:t1].detach(), ob[0].transpose(0, 1).detach()))
                self.assertTrue(torch.equal(lse[:, t0:t1], lb[0]))
                self.assertTrue(torch.equal(dq[t0:t1], gb[0][0].transpose(0, 1)))
                self.assertTrue(torch.equal(dk[u0:u1], gb[1][0].transpose(0, 1)))
                self.assertTrue(torch.equal(dv[u0:u1], gb[2][0].transpose(0, 1)))
        # sequence 1's rows see nothing: O = 0, LSE = -inf, dQ = 0; sequence 2's keys: dK = dV = 0
        self.assertTrue((o[40:45] == 0).all() and torch.isneginf(lse[:, 40:45]).all() and (dq[40:45] == 0).all())
        self.assertTrue((dk[50:56] == 0).all() and (dv[50:56] == 0).all())

    def test_max_seqlen_and_lse(self):
        lq = [3, 9, 4]
        cu = torch.tensor(offsets(lq), dtype=torch.int32)
        q = torch.randn(16, 2, 8, requires_grad=True)
        a = fa_course.attention_varlen(q, q, q, cu, cu)
        b, lse = fa_course.attention_varlen(q, q, q, cu, cu, 9, 12, return_lse=True)  # >= the longest: allowed
        self.assertTrue(torch.equal(a, b))
        self.assertFalse(lse.requires_grad)
        self.assertEqual((lse.shape, lse.dtype), ((2, 16), torch.float32))
        s = q.detach().double()[3:12].transpose(0, 1) @ q.detach().double()[3:12].permute(1, 2, 0) / math.sqrt(8)
        self.assertLess(max_err(lse[:, 3:12], torch.logsumexp(s, -1)), 1e-5)

    def test_non_contiguous_inputs_are_copied(self):
        g = torch.Generator().manual_seed(8)
        qkv = torch.randn(30, 3, 2, 16, generator=g)  # [total, 3, H, d], as a fused projection gives it
        q, k, v = qkv.unbind(1)
        self.assertFalse(q.is_contiguous())
        cu = torch.tensor([0, 13, 30], dtype=torch.int32)
        o = fa_course.attention_varlen(q, k, v, cu, cu, causal=True)
        o_ref, _ = packed_reference(q.double(), k.double(), v.double(), [0, 13, 30], [0, 13, 30], True)
        self.assertLess(max_err(o, o_ref), 1e-5)

    def test_bad_inputs_raise_one_line(self):
        x, cu = torch.randn(10, 4, 16), torch.tensor([0, 4, 10], dtype=torch.int32)
        i32 = lambda *c: torch.tensor(c, dtype=torch.int32)  # noqa: E731
        av = fa_course.attention_varlen
        bad = [
            (lambda: av(x, x, x, cu.long(), cu), ValueError, "cu_seqlens_q: expected an int32 tensor"),
            (lambda: av(x, x, x, cu, cu[None]), ValueError, "cu_seqlens_k: expected an int32 tensor"),
            (lambda: av(x, x, x, cu[:1], cu[:1]), ValueError, "B >= 1"),
            (lambda: av(x, x, x, cu, [0, 4, 10]), ValueError, "cu_seqlens_k"),
            (lambda: av(x, x, x, cu, cu.to("meta")), ValueError, "on q's device"),
            (lambda: av(x, x, x, cu, i32(0, 10)), ValueError, "3 offsets (as cu_seqlens_q"),
            (lambda: av(x, x, x, i32(1, 4, 10), cu), ValueError, "cu_seqlens_q: expected cu[0] = 0, found cu[0] = 1"),
            (lambda: av(x, x, x, cu, i32(0, 6, 4)), ValueError, "cu_seqlens_k: expected non-decreasing"),
            (lambda: av(x, x, x, i32(0, 4, 9), cu), ValueError, "cu_seqlens_q: expected cu[B] = 10"),
            (lambda: av(x, x[:8], x[:8], cu, cu), ValueError, "cu_seqlens_k: expected cu[B] = 8"),
            (lambda: av(x, x, x, cu, cu, 5), ValueError, "max_seqlen_q: expected None or an integer >= the longest "
                                                         "sequence (6), found 5"),
            (lambda: av(x, x, x, cu, cu, None, -1), ValueError, "max_seqlen_k"),
            (lambda: av(x, x, x, cu, cu, 6.0), TypeError, "max_seqlen_q"),
            (lambda: av(x[None], x[None], x[None], cu, cu), ValueError, "3 dimensions [total_tokens, heads, d]"),
            (lambda: av(x.double(), x.double(), x.double(), cu, cu), TypeError, "float32"),
            (lambda: av(x, x.half(), x, cu, cu), TypeError, "one dtype"),
            (lambda: av(x, torch.randn(10, 3, 16), torch.randn(10, 3, 16), cu, cu), ValueError, "--kv-heads"),
            (lambda: av(x, x[..., :8], x[..., :8], cu, cu), ValueError, "--head-dim"),
            (lambda: av(x, x, x[:9], cu, cu), ValueError, "k, v: expected one shape"),
            (lambda: av(x[:0], x, x, i32(0, 0), i32(0, 10)), ValueError, "q: expected 1 to 2^31 - 1 tokens"),
            (lambda: av(x, x, x, cu, cu, kernel="v13"), ValueError, "kernel"),
            (lambda: av(x, x, x, cu, cu, window=(-2, 0)), ValueError, "--window"),
            (lambda: av(x, x, x, cu, cu, softcap=-1.0), ValueError, "--softcap"),
            (lambda: av(x, x, x, cu, cu, scale=float("nan")), ValueError, "--scale"),
            (lambda: av(x, x, x, cu, cu, causal=1), TypeError, "causal"),
        ]
        for fn, exc, words in bad:
            with self.subTest(words=words):
                with self.assertRaises(exc) as cm:
                    fn()
                self.assertIn(words, str(cm.exception))
                self.assertNotIn("\n", str(cm.exception))

    def test_the_registered_ops_check_the_offsets(self):
        # torch.ops.fa_course.attention_varlen_* are public (torch.compile and export call them):
        # offsets that would index past the tensors must raise there too, before any kernel.
        fwd = torch.ops.fa_course.attention_varlen_fwd.default
        bwd = torch.ops.fa_course.attention_varlen_bwd.default
        x, cu = torch.randn(10, 2, 8), torch.tensor([0, 4, 10], dtype=torch.int32)
        o, lse = fwd(x, x, x, cu, cu, -1, -1, False, 0.0, "auto")
        far = torch.tensor([0, 4, 1 << 20], dtype=torch.int32)
        bad = [
            (lambda: fwd(x, x, x, far, cu, -1, -1, False, 0.0, "auto"), "cu_seqlens_q: expected cu[B] = 10"),
            (lambda: fwd(x, x, x, cu, cu, 3, -1, False, 0.0, "auto"), "max_seqlen_q"),
            (lambda: fwd(x, x, x, cu, cu, -1, -1, False, 0.0, "auto", -3, 0, 0.0), "--window"),
            (lambda: bwd(o, x, x, x, o, lse, cu, far, -1, -1, False, 0.0, "auto"), "cu_seqlens_k: expected cu[B] = 10"),
            (lambda: bwd(o, x, x, x, o, lse[:, :4], cu, cu, -1, -1, False, 0.0, "auto"), "lse: expected float32 [H, total_q]"),
            (lambda: bwd(o[:4], x, x, x, o, lse, cu, cu, -1, -1, False, 0.0, "auto"), "dO"),
        ]
        for fn, words in bad:
            with self.subTest(words=words):
                with self.assertRaises((ValueError, TypeError)) as cm:
                    fn()
                self.assertIn(words, str(cm.exception))

    def test_the_library_refuses_bad_offsets(self):
        # The C ABIs' own checks, reached directly (python refuses these first).
        from fa_course import _lib
        x = torch.randn(10, 2, 8)
        o, lse = torch.empty_like(x), torch.empty(2, 10)
        cu, bad = torch.tensor([0, 4, 10], dtype=torch.int32), torch.tensor([0, 11, 10], dtype=torch.int32)
        ptrs = [t.data_ptr() for t in (x, x, x, o, lse)]
        with self.assertRaisesRegex(ValueError, "--cu-seqlens-q: expected non-decreasing"):
            _lib.check("fa04", _lib.lib("fa04").fa04_forward_varlen(*ptrs, bad.data_ptr(), cu.data_ptr(), 2, 10, 10, 2,
                                                                    2, 8, 0, 0.0, 0, 0, 0, -1, -1, 0.0))
        bptrs = [t.data_ptr() for t in (x, x, x, o, x, lse, o, o, o)]
        with self.assertRaisesRegex(ValueError, "--cu-seqlens-k: expected cu\\[B\\] = total_k = 9"):
            _lib.check("fa06", _lib.lib("fa06").fa06_backward_cpu_varlen(*bptrs, cu.data_ptr(), cu.data_ptr(), 2, 10, 9,
                                                                         2, 2, 8, 0, 0.0, 0, 0, 0, -1, -1, 0.0))

    def test_opcheck(self):
        g = torch.Generator().manual_seed(9)
        cu_q, cu_k = torch.tensor([0, 5, 5, 17], dtype=torch.int32), torch.tensor([0, 9, 12, 20], dtype=torch.int32)
        q = torch.randn(17, 4, 16, generator=g, requires_grad=True)
        k = torch.randn(20, 2, 16, generator=g, requires_grad=True)
        v = torch.randn(20, 2, 16, generator=g, requires_grad=True)
        for args in ((q, k, v, cu_q, cu_k, -1, -1, True, 0.0, "auto"),
                     (q, k, v, cu_q, cu_k, 12, 9, False, 0.5, "auto", 3, 2, 4.0)):
            torch.library.opcheck(torch.ops.fa_course.attention_varlen_fwd.default, args)

    def test_compile_fullgraph(self):
        # One opaque node, no graph break: the offsets' values are read inside the op, not by the
        # traced Python; gradients as in eager.
        g = torch.Generator().manual_seed(10)
        cu = torch.tensor([0, 7, 7, 30], dtype=torch.int32)
        q = torch.randn(30, 2, 16, generator=g, requires_grad=True)

        def f(x, c):
            return fa_course.attention_varlen(x, x, x, cu, cu, causal=True, window=(5, 0), softcap=c).square().sum()

        from torch._dynamo.testing import CompileCounterWithBackend
        torch._dynamo.reset()
        cnt = CompileCounterWithBackend("aot_eager")
        cf = torch.compile(f, fullgraph=True, backend=cnt)
        y, ye = cf(q, 2.0), f(q, 2.0)
        self.assertLess(max_err(y, ye), 1e-5)
        self.assertEqual(cnt.frame_count, 1)
        self.assertIn("fa_course.attention_varlen_fwd", str(cnt.graphs[0].code))
        gr, = torch.autograd.grad(y, q)
        ge, = torch.autograd.grad(ye, q)
        self.assertLess(max_err(gr, ge), 1e-5)


class Fp8(unittest.TestCase):
    """quantize_fp8 (the course's e4m3 block quantisation) on the CPU, by its defining properties, and
    attention_fp8's refusals that need no GPU. The kernel itself: test_gpu.py's Fp8."""

    def check_blocks(self, x, rows):
        x8, s = fa_course.quantize_fp8(x, rows)
        B, H, N, d = x.shape
        nb = -(-N // rows)
        self.assertEqual((x8.dtype, tuple(x8.shape), s.dtype, tuple(s.shape)),
                         (torch.float8_e4m3fn, (B, H, N, d), torch.float32, (B, H, nb)))
        xd = x.double()
        for b in range(B):
            for h in range(H):
                for i in range(nb):
                    blk, q, sc = xd[b, h, i * rows:(i + 1) * rows], x8[b, h, i * rows:(i + 1) * rows].double(), float(s[b, h, i])
                    amax = float(blk.abs().max())
                    if amax == 0:
                        self.assertEqual(sc, 1.0)
                        continue
                    m, e = math.frexp(sc)
                    self.assertEqual(m, 0.5, f"scale {sc!r}: expected a power of two")
                    # the smallest power of two with amax <= 448 s: half of it would not hold amax
                    self.assertLessEqual(amax, 448 * sc)
                    self.assertGreater(amax, 224 * sc)
                    # each value rounded to the nearest e4m3: within half a step (3 significand bits,
                    # subnormal steps of 2^-9 below 2^-6) and exact where x / s is an e4m3 value
                    step = torch.where(blk.abs() / sc >= 2 ** -6, torch.exp2(torch.floor(torch.log2(blk.abs() / sc)) - 3),
                                       torch.full_like(blk, 2 ** -9))
                    self.assertTrue(bool(((q - blk / sc).abs() <= step / 2).all()), f"block {b, h, i}")
        # quantising what it stands for again gives the same values (the bytes may differ: a block whose
        # largest value rounded down to 224 s gets half the scale)
        deq = x8.double() * torch.repeat_interleave(s.double(), rows, 2)[:, :, :N, None]
        y8, t = fa_course.quantize_fp8(deq, rows)
        self.assertTrue(torch.equal(y8.double() * torch.repeat_interleave(t.double(), rows, 2)[:, :, :N, None], deq))

    def test_blocks_by_their_properties(self):
        g = torch.Generator().manual_seed(5)
        x = torch.randn(2, 3, 150, 16, generator=g, dtype=torch.float64) * 3
        x[0, 1, 64:128] = 0                      # an all-zero block: scale 1
        x[1, 0, :64] *= 2.0 ** -128              # a block whose scale is a float32 subnormal (2^-135 or so)
        x[1, 2, 128:] *= 2.0 ** 40               # a large one
        x = x.to(torch.bfloat16)
        self.check_blocks(x, 64)
        self.check_blocks(x, 128)

    def test_edges(self):
        import numpy as np
        x = torch.randn(1, 2, 5, 8)
        a8, a = fa_course.quantize_fp8(x, 10 ** 12)  # one block of N rows, nothing padded to 10^12
        b8, b = fa_course.quantize_fp8(x, np.int64(5))
        self.assertTrue(torch.equal(a, b) and torch.equal(a8.view(torch.uint8), b8.view(torch.uint8)))
        # float32 values below 2^-141: the scale stops at 2^-149 (not 0, which would make NaN)
        t8, t = fa_course.quantize_fp8(torch.tensor([2.0 ** -142, 2.0 ** -149, 0.0, 0.0]).view(1, 1, 4, 1), 4)
        self.assertEqual(float(t), 2.0 ** -149)
        self.assertEqual(t8.float().view(-1).tolist(), [128.0, 1.0, 0.0, 0.0])
        # no autograd history on the results
        g8, _ = fa_course.quantize_fp8(x.clone().requires_grad_(), 4)
        self.assertFalse(g8.requires_grad)

    def test_non_finite_blocks_get_nan_scales(self):
        x = torch.randn(1, 2, 130, 8)
        x[0, 0, 3, 1], x[0, 1, 129, 0] = float("inf"), float("nan")
        _, s = fa_course.quantize_fp8(x, 128)
        self.assertTrue(torch.equal(torch.isnan(s), torch.tensor([[[True, False], [False, True]]])))

    def test_bad_inputs_raise_one_line(self):
        x = torch.randn(1, 2, 64, 128, dtype=torch.bfloat16)
        for call, kind, pattern in [
            (lambda: fa_course.quantize_fp8(x[0], 64), ValueError, "x: expected a torch.Tensor \\[B, H, N, d\\], found shape"),
            (lambda: fa_course.quantize_fp8(x.int(), 64), TypeError, "x: expected a floating-point dtype, found torch.int32"),
            (lambda: fa_course.quantize_fp8(x[..., :0], 64), ValueError, "x: expected a head dim d >= 1"),
            (lambda: fa_course.quantize_fp8(x, 0), ValueError, "rows: expected an integer >= 1"),
            (lambda: fa_course.quantize_fp8(x, True), ValueError, "rows: expected an integer >= 1"),
            (lambda: fa_course.attention_fp8(x, x, x), ValueError, "q: expected a CUDA tensor \\(v15 is a Hopper kernel\\)"),
            (lambda: fa_course.attention_fp8(x[0], x, x), ValueError, "q: expected a 4-dimensional torch.Tensor"),
            (lambda: fa_course.attention_fp8(x, x, x, scales=(None, None)), ValueError,
             "scales: expected \\(scale_q, scale_k, scale_v\\), found tuple of 2"),
            (lambda: torch.ops.fa_course.attention_fp8_fwd(x, x, x, None, None, torch.ones(1), False, 0.0), ValueError,
             "scales: expected all three"),
        ]:
            with self.subTest(pattern=pattern):
                with self.assertRaisesRegex(kind, pattern) as cm:
                    call()
                self.assertNotIn("\n", str(cm.exception))


class Registration(unittest.TestCase):
    def test_opcheck(self):
        g = torch.Generator().manual_seed(1)
        samples = [
            (torch.randn(1, 2, 17, 16, generator=g, requires_grad=True), torch.randn(1, 1, 23, 16, generator=g, requires_grad=True),
             torch.randn(1, 1, 23, 16, generator=g, requires_grad=True), True, 0.0, "auto"),
            (torch.randn(2, 2, 8, 32, generator=g, requires_grad=True), torch.randn(2, 2, 8, 32, generator=g, requires_grad=True),
             torch.randn(2, 2, 8, 32, generator=g, requires_grad=True), False, 0.25, "auto"),
            (torch.randn(1, 2, 19, 16, generator=g, requires_grad=True), torch.randn(1, 1, 26, 16, generator=g, requires_grad=True),
             torch.randn(1, 1, 26, 16, generator=g, requires_grad=True), True, 0.0, "auto", 5, 0, 3.0),
            (torch.randn(1, 2, 30, 16, generator=g, requires_grad=True), torch.randn(1, 2, 12, 16, generator=g, requires_grad=True),
             torch.randn(1, 2, 12, 16, generator=g, requires_grad=True), False, 0.5, "auto", 2, 3, 0.0),  # rows see none
        ]
        for args in samples:
            torch.library.opcheck(torch.ops.fa_course.attention_fwd.default, args)

    def test_torch_compile_fullgraph(self):
        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.qkv = torch.nn.Linear(32, 96)
                self.out = torch.nn.Linear(32, 32)

            def forward(self, x):
                B, N, _ = x.shape
                q, k, v = self.qkv(x).view(B, N, 3, 2, 16).permute(2, 0, 3, 1, 4)
                y = fa_course.attention(q, k, v, causal=True, window=self.window, softcap=self.softcap)
                return self.out(y.transpose(1, 2).reshape(B, N, 32))

        for window, softcap in ((None, None), ((5, -1), 3.0)):
            with self.subTest(window=window, softcap=softcap):
                Block.window, Block.softcap = window, softcap
                self.compile_fullgraph(Block, window, softcap)

    def compile_fullgraph(self, Block, window, softcap):
        torch._dynamo.reset()
        torch.manual_seed(0)
        m = Block()
        x = torch.randn(2, 21, 32)
        y_eager = m(x)
        y_eager.square().sum().backward()
        g_eager = [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        # fullgraph=True: any graph break is an error, so the op is one node of the graph.
        cm = torch.compile(m, fullgraph=True, backend="aot_eager")
        y = cm(x)
        y.square().sum().backward()
        self.assertLess(max_err(y, y_eager), 1e-6)
        for p, ge in zip(m.parameters(), g_eager):
            self.assertLess(max_err(p.grad, ge), 1e-5)
        # What the graph holds: the custom op, forward and backward, as opaque nodes.
        from torch._dynamo.testing import CompileCounterWithBackend
        cnt = CompileCounterWithBackend("aot_eager")
        torch._dynamo.reset()
        torch.compile(m, fullgraph=True, backend=cnt)(x)
        self.assertEqual(cnt.frame_count, 1)
        self.assertIn("fa_course.attention_fwd", str(cnt.graphs[0].code))
        # The variant reaches the graph's node as its arguments (window (5, -1) under causal: 5, 0).
        node = [n for n in cnt.graphs[0].graph.nodes if "attention_fwd" in str(n.target)][0]
        if window is not None:
            self.assertEqual(tuple(node.args[6:9]), (window[0], 0, softcap))
        else:
            self.assertEqual(len(node.args), 6)  # the plain op's arguments, as before issue 34


if __name__ == "__main__":
    unittest.main(verbosity=2)
