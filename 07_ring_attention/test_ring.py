"""Stage 07's tests: ring attention over 2 and 4 gloo processes (forked from this one) against
single-process attention in float64, forward and backward; the plan against a brute-force mask;
bad setups refused on every rank without a hang.

The rule, python/tests' (docs/numerics.md, FlashAttention's own tests): for O, dQ, dK, dV,
    max |ring - float64| <= 2 * max |the same reference in float32 - float64| + 1e-5,
and LSE within 1e-5 * max(1, |LSE|) of float64. The reference is written here as plainly as it
goes: S = scale Q K^T, masked scores -inf, softmax, P V, causal bottom-right (j <= i + N_k - N_q;
here N_q = N_k = N, one sequence). Run: python 07_ring_attention/test_ring.py (ctest: stage07_ring).
"""
import datetime
import math
import os
import sys
import tempfile
import time
import traceback
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import ring  # noqa: E402
from util import max_err, visible  # noqa: E402  (python/tests' helpers: the error, the mask)

TIMEOUT_S = 60  # a whole group of processes; a hang fails the test instead of stalling CI


def reference(q, k, v, causal, scale):
    """(O, LSE) in the inputs' dtype: softmax(scale Q K^T, masked -inf) V, GQA by repeating K/V."""
    G = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)
    S = (scale or q.shape[-1] ** -0.5) * q @ k.transpose(-1, -2)
    S = S.masked_fill(~visible(q.shape[2], k.shape[2], causal), float("-inf"))
    return torch.softmax(S, -1) @ v, torch.logsumexp(S, -1)


# ---- what each rank runs --------------------------------------------------------------------

CASES = {  # world: [(B, H, H_kv, N, d, causal, layout, scale)]
    2: [(1, 2, 2, 48, 16, False, "contiguous", None),   # non-causal
        (2, 2, 2, 40, 16, False, "zigzag", None),       # non-causal, zigzag shards, B = 2
        (1, 4, 2, 64, 32, True, "contiguous", None),    # causal plain ring, GQA
        (1, 4, 1, 72, 16, True, "zigzag", 0.3),         # causal zigzag, MQA, own scale
        (2, 2, 2, 36, 8, True, "zigzag", None)],        # chunks of 9 rows: no block size divides them
    4: [(1, 2, 2, 52, 16, False, "contiguous", None),   # 13 rows a rank
        (1, 4, 2, 72, 16, True, "zigzag", None),        # causal zigzag, GQA, chunks of 9
        (1, 4, 2, 68, 16, True, "contiguous", None),    # causal plain: rank 0 skips 3 of 4 steps
        (2, 2, 1, 40, 32, True, "zigzag", None)],       # MQA, chunks of 5
}


def inputs(B, H, H_kv, N, d, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, h, N, d, generator=g) for h in (H, H_kv, H_kv, H)]  # q, k, v, dO


def grads(fn, q, k, v, dO, dtype):
    xs = [t.to(dtype).requires_grad_() for t in (q, k, v)]
    O, LSE = fn(*xs)
    return [O.detach(), LSE.detach(), *torch.autograd.grad(O, xs, dO.to(dtype))]


def check_case(rank, world, case, seed, fail):
    """One case on this rank's shards: every failure goes to fail(msg), so that every rank runs
    the same collectives whatever it finds (a rank that stopped early would hang the others)."""
    B, H, H_kv, N, d, causal, layout, scale = case
    q, k, v, dO = inputs(B, H, H_kv, N, d, seed)
    ref = grads(lambda *x: reference(*x, causal, scale), q, k, v, dO, torch.float64)
    base = grads(lambda *x: reference(*x, causal, scale), q, k, v, dO, torch.float32)
    cut = lambda t: ring.shard(t, rank, world, layout)  # noqa: E731
    ours = grads(lambda *x: ring.ring_attention(*x, causal=causal, scale=scale, layout=layout, return_lse=True),
                 cut(q), cut(k), cut(v), cut(dO), torch.float32)
    errs = {}
    for i, name in [(0, "O"), (2, "dQ"), (3, "dK"), (4, "dV")]:
        err, bound = max_err(ours[i], cut(ref[i])), 2 * max_err(base[i], ref[i]) + 1e-5
        errs[name] = err
        if not err <= bound:
            fail(f"{case} rank {rank}: {name} error {err:.3g} vs float64 above {bound:.3g}")
    lse_ref = ring.shard(ref[1], rank, world, layout, dim=2)
    d_lse = float(((ours[1].double() - lse_ref).abs() / lse_ref.abs().clamp(min=1)).max())
    if not d_lse <= 1e-5:
        fail(f"{case} rank {rank}: LSE relative error {d_lse:.3g} above 1e-5")
    return errs


def expect_error(fail, what, exc, words, fn):
    """fn() must raise exc, one line holding every word; returns the message ('' if it did not)."""
    try:
        fn()
    except exc as e:
        msg = str(e)
        if "\n" in msg or not all(w in msg for w in words):
            fail(f"{what}: message {msg!r} lacks {words} or has several lines")
        return msg
    except Exception as e:  # noqa: BLE001
        fail(f"{what}: expected {exc.__name__}, raised {type(e).__name__}: {e}")
        return ""
    fail(f"{what}: expected {exc.__name__}, nothing raised")
    return ""


def bad_setups(rank, world, fail):
    """Inputs that differ across ranks, or are wrong on all: one error on every rank, the same
    message everywhere, and the group still usable after (the next case runs on it)."""
    x = torch.randn(1, 2, 12, 8)
    short = torch.randn(1, 2, 10, 8)
    att = ring.ring_attention
    msgs = [
        expect_error(fail, "shard lengths differ", ValueError, ["q:", "rank 0", "rank 1", "[1, 2, 12, 8]"],
                     lambda: att(x if rank == 0 else short, x if rank == 0 else short, x if rank == 0 else short)),
        expect_error(fail, "kv heads differ", ValueError, ["k:", "on every rank"],
                     lambda: att(x, x if rank == 0 else x[:, :1], x if rank == 0 else x[:, :1])),
        expect_error(fail, "causal differs", ValueError, ["causal:", "True", "False"],
                     lambda: att(x, x, x, causal=rank == 0)),
        expect_error(fail, "layout differs", ValueError, ["layout:"],
                     lambda: att(x, x, x, layout="zigzag" if rank == 0 else "contiguous")),
        expect_error(fail, "odd zigzag shard", ValueError, ["even shard length", "found 11"],
                     lambda: att(x[:, :, :11], x[:, :, :11], x[:, :, :11], layout="zigzag")),
        expect_error(fail, "float64 on the CPU", TypeError, ["q:", "float32"],
                     lambda: att(x.double(), x.double(), x.double())),
        expect_error(fail, "3-dimensional q", ValueError, ["q:", "4-dimensional", "[2, 12, 8]"],
                     lambda: att(x[0], x[0], x[0])),
        expect_error(fail, "q, k of two dtypes", ValueError, ["one device and one dtype", "float16"],
                     lambda: att(x, x.half(), x.half())),
        expect_error(fail, "H % H_kv", ValueError, ["kv heads"],
                     lambda: att(torch.randn(1, 3, 12, 8), x, x)),
        expect_error(fail, "unknown layout", ValueError, ["layout:", "zigzag, contiguous"],
                     lambda: att(x, x, x, layout="striped")),
        # A scale the op would refuse inside the ring (its hops already posted): refused first.
        expect_error(fail, "scale below float32's normal range", ValueError, ["scale:", "normal float32", "1e-45"],
                     lambda: att(x, x, x, scale=1e-45)),
        expect_error(fail, "NaN scale", ValueError, ["scale:", "normal float32", "nan"],
                     lambda: att(x, x, x, scale=float("nan"))),
        expect_error(fail, "a kernel that is not a name", TypeError, ["kernel:", "int"],
                     lambda: att(x, x, x, kernel=7)),
        expect_error(fail, "N not divisible", ValueError, ["N:", f"divisible by {2 * world}", "found 30"],
                     lambda: ring.shard(torch.randn(1, 1, 30, 4), rank, world, "zigzag")),
    ]
    everyone = [None] * world
    dist.all_gather_object(everyone, msgs)
    if any(m != msgs for m in everyone):
        fail(f"rank {rank}: the ranks' messages differ: {everyone}")


def strided_inputs(rank, world, fail):
    """Q, K, V as a model's projection gives them, [B, n, H, d] viewed as [B, H, n, d] (strided):
    the same O and gradients as from contiguous copies (the hops need dense tensors)."""
    g = torch.Generator().manual_seed(11 + rank)
    base = torch.randn(1, 12, 2, 8, generator=g)
    xs = [base.transpose(1, 2).requires_grad_() for _ in range(3)]  # q = k = v: one strided view each
    dense = [base.transpose(1, 2).contiguous().requires_grad_() for _ in range(3)]
    outs = []
    for ins in (xs, dense):
        O = ring.ring_attention(*ins, causal=True)
        O.backward(torch.ones_like(O))
        outs.append([O.detach()] + [t.grad for t in ins])
    if any(not torch.equal(a, b) for a, b in zip(*outs)):
        fail(f"rank {rank}: strided inputs give another result than their contiguous copies")


def mutants(rank, world, fail):
    """The rule can fail: two wrong rings, each must exceed the bound on some rank."""
    case = (1, 2, 2, 48, 16, True, "zigzag", None)
    good_merge, good_plan = ring.merge_, ring.step_plan

    def merge_no_rescale(O, LSE, O_s, LSE_s):  # the new block's O added without its weight
        good_merge(O, LSE, O_s, LSE_s)
        O.add_(0.5 * (O_s.float() - O))

    def plan_diagonal_not_causal(*args):  # the diagonal block run without its mask
        st = good_plan(*args)
        return ring.Step(st.q_rows, st.kv_rows, False) if st is not None and st.causal else st

    for name, attr, mutant in [("merge", "merge_", merge_no_rescale), ("plan", "step_plan", plan_diagonal_not_causal)]:
        found = []
        setattr(ring, attr, mutant)
        try:
            check_case(rank, world, case, 7, found.append)
        finally:
            ring.merge_, ring.step_plan = good_merge, good_plan
        caught = [None] * world
        dist.all_gather_object(caught, bool(found))
        if not any(caught):
            fail(f"mutant {name}: passed the rule on every rank (the test cannot fail)")


def worker(rank, world, store, job):
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S))
    failures = []
    try:
        if job == "world1":
            x = torch.randn(1, 1, 8, 4)
            expect_error(failures.append, "world size 1", ValueError, ["world size", "at least 2", "found 1"],
                         lambda: ring.ring_attention(x, x, x))
        else:
            bad_setups(rank, world, failures.append)
            strided_inputs(rank, world, failures.append)
            worst = {}
            for n, case in enumerate(CASES[world]):
                for name, err in check_case(rank, world, case, 100 + n, failures.append).items():
                    worst[name] = max(worst.get(name, 0.0), err)
            mutants(rank, world, failures.append)
            if rank == 0:
                print(f"world {world}: {len(CASES[world])} cases, largest errors vs float64 "
                      + ", ".join(f"{k} {v:.2e}" for k, v in worst.items()), flush=True)
        dist.barrier()
    except Exception:  # noqa: BLE001
        failures.append(traceback.format_exc())
    finally:
        dist.destroy_process_group()
    if failures:
        raise AssertionError("\n".join(failures))


def run_group(test, world, job):
    """Forks `world` processes (fork: no second import of torch, ~0.1 s a process) and waits at
    most TIMEOUT_S for them; a hang is killed and reported."""
    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.start_processes(worker, args=(world, os.path.join(tmp, "store"), job), nprocs=world,
                                 join=False, start_method="fork")
        deadline = time.monotonic() + TIMEOUT_S
        try:
            while not ctx.join(timeout=max(0.1, deadline - time.monotonic())):
                if time.monotonic() > deadline:
                    for p in ctx.processes:
                        p.kill()
                    test.fail(f"{job} with {world} ranks: no result within {TIMEOUT_S} s (a hang)")
        except mp.ProcessException as e:  # a rank raised (its traceback), or died (gloo aborts on a mismatch)
            test.fail(f"{job} with {world} ranks:\n{e}")


class Ring(unittest.TestCase):
    def test_two_ranks(self):
        run_group(self, 2, "cases")

    def test_four_ranks(self):
        run_group(self, 4, "cases")

    def test_world_size_one_is_refused(self):
        run_group(self, 1, "world1")

    def test_no_process_group_is_refused(self):
        x = torch.randn(1, 1, 8, 4)
        with self.assertRaisesRegex(ValueError, "group: expected an initialised"):
            ring.ring_attention(x, x, x)


class Plan(unittest.TestCase):
    """step_plan() against the mask itself, no processes: for every (rank, src) the step covers
    exactly the visible pairs, and a skipped step has none."""

    def test_steps_cover_exactly_the_visible_pairs(self):
        for world in (2, 3, 4, 8):
            for layout in ring.LAYOUTS:
                for causal in (False, True):
                    n = 6 if layout == "zigzag" else 5
                    N = world * n
                    pos = torch.arange(N)[None, None, :, None]  # each row's position in the sequence
                    where = [ring.shard(pos, r, world, layout)[0, 0, :, 0] for r in range(world)]
                    for r in range(world):
                        for src in range(world):
                            i, j = where[r][:, None], where[src][None, :]
                            want = (j <= i) if causal else torch.ones(n, n, dtype=torch.bool)
                            st = ring.step_plan(r, src, world, n, causal, layout)
                            got = torch.zeros(n, n, dtype=torch.bool)
                            if st is not None:
                                rows, cols = st.q_rows.stop - st.q_rows.start, st.kv_rows.stop - st.kv_rows.start
                                block = torch.ones(rows, cols, dtype=torch.bool)
                                got[st.q_rows, st.kv_rows] = block.tril() if st.causal else block
                            with self.subTest(world=world, layout=layout, causal=causal, rank=r, src=src):
                                self.assertTrue(torch.equal(got, want))
                                self.assertEqual(ring.pairs(st), int(want.sum()))

    def test_zigzag_balances_causal_work(self):
        for world in (2, 4, 8):
            n = 2 * 16
            work = {lay: [sum(ring.pairs(ring.step_plan(r, s, world, n, True, lay)) for s in range(world))
                          for r in range(world)] for lay in ring.LAYOUTS}
            N = world * n
            for lay in ring.LAYOUTS:
                self.assertEqual(sum(work[lay]), N * (N + 1) // 2)  # every visible pair once
            self.assertEqual(len(set(work["zigzag"])), 1)             # equal on every rank
            self.assertEqual(work["contiguous"][-1], (world - 1) * n * n + n * (n + 1) // 2)

    def test_shard_unshard_round_trip(self):
        x = torch.arange(2 * 3 * 24 * 2).reshape(2, 3, 24, 2)
        for world in (2, 3, 4):
            for layout in ring.LAYOUTS:
                parts = [ring.shard(x, r, world, layout) for r in range(world)]
                self.assertTrue(torch.equal(ring.unshard(parts, layout), x))

    def test_merge_is_stage_03s(self):
        # Two key blocks merged in LSE form equal one pass over both; an empty state changes nothing.
        g = torch.Generator().manual_seed(1)
        q, k, v = (torch.randn(1, 1, 5, 4, generator=g, dtype=torch.float64) for _ in range(3))
        k2, v2 = torch.randn(1, 1, 7, 4, generator=g, dtype=torch.float64), torch.randn(1, 1, 7, 4, generator=g,
                                                                                     dtype=torch.float64)
        O1, L1 = reference(q, k, v, False, None)
        O2, L2 = reference(q, k2, v2, False, None)
        O, L = reference(q, torch.cat([k, k2], 2), torch.cat([v, v2], 2), False, None)
        O1, L1 = O1.clone(), L1.clone()
        ring.merge_(O1, L1, O2, L2)
        self.assertLess(max_err(O1, O), 1e-14)
        self.assertLess(max_err(L1, L), 1e-14)
        Oe, Le = torch.zeros_like(O), torch.full_like(L, -math.inf)  # empty_state()
        ring.merge_(Oe, Le, Oe.clone(), Le.clone())                      # empty with empty: no NaN
        self.assertTrue(torch.equal(Oe, torch.zeros_like(O)) and torch.isneginf(Le).all())
        ring.merge_(Oe, Le, O, L)
        self.assertLess(max_err(Oe, O), 1e-15)


if __name__ == "__main__":
    unittest.main(verbosity=2)
