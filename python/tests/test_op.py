"""fa_course.attention on the CPU (stage 04 forward, stage 06 backward) against float64 SDPA math.

The rule, the course's (docs/numerics.md, FlashAttention's own tests): for O, dQ, dK, dV,
    max |ours - float64| <= 2 * max |SDPA math in float32 - float64| + 1e-5,
and LSE within 1e-5 * max(1, |LSE|) of float64 (-inf exactly where a row sees no key)."""
import math
import unittest

import torch

from util import max_err, sdpa_reference, visible

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


def run_case(test, B, H, H_kv, N_q, N_k, d, causal, scale, seed=0):
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

    ours = grads(lambda a, b, c: fa_course.attention(a, b, c, causal=causal, scale=scale, return_lse=True),
                 torch.float32)
    ref = grads(lambda a, b, c: sdpa_reference(a, b, c, causal, scale), torch.float64)
    base = grads(lambda a, b, c: sdpa_reference(a, b, c, causal, scale), torch.float32)
    for i, name in [(0, "O"), (2, "dQ"), (3, "dK"), (4, "dV")]:
        err, bound = max_err(ours[i], ref[i]), 2 * max_err(base[i], ref[i]) + 1e-5
        test.assertLessEqual(err, bound, f"{name}: error {err:.3g} vs float64 above {bound:.3g}")
    lse, lse_ref = ours[1], ref[1]
    seen = visible(N_q, N_k, causal).any(-1).expand_as(lse)
    test.assertTrue(torch.isneginf(lse[~seen]).all(), "LSE: expected -inf where a row sees no key")
    test.assertTrue((ours[0][~seen[..., None].expand_as(ours[0])] == 0).all(), "O: expected 0 where a row sees no key")
    d_lse = (lse[seen].double() - lse_ref.detach()[seen]).abs() / lse_ref[seen].abs().clamp(min=1)
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

    def test_library_message_reaches_python(self):
        # A check only the C library makes (its block buffers vs the memory) raises its own line.
        from fa_course import _lib
        with self.assertRaises(ValueError) as cm:
            _lib.check("fa04", _lib.lib("fa04").fa04_forward(0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0.0, 0, 0, 0))
        self.assertIn("NULL", str(cm.exception))


class Registration(unittest.TestCase):
    def test_opcheck(self):
        g = torch.Generator().manual_seed(1)
        samples = [
            (torch.randn(1, 2, 17, 16, generator=g, requires_grad=True), torch.randn(1, 1, 23, 16, generator=g, requires_grad=True),
             torch.randn(1, 1, 23, 16, generator=g, requires_grad=True), True, 0.0, "auto"),
            (torch.randn(2, 2, 8, 32, generator=g, requires_grad=True), torch.randn(2, 2, 8, 32, generator=g, requires_grad=True),
             torch.randn(2, 2, 8, 32, generator=g, requires_grad=True), False, 0.25, "auto"),
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
                y = fa_course.attention(q, k, v, causal=True)
                return self.out(y.transpose(1, 2).reshape(B, N, 32))

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


if __name__ == "__main__":
    unittest.main(verbosity=2)
