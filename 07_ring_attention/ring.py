"""Stage 07: ring attention. Attention over a sequence cut across the ranks of a process group
(context parallelism), exact, forward and backward, over torch.distributed: gloo on CPUs, NCCL on
GPUs, the same code.

Each of the `world` ranks holds one shard of the sequence: Q, O, dO [B, H, n, d] and K, V
[B, H_kv, n, d], n = N / world. Q stays where it is; the K/V shards travel around the ring
rank -> rank + 1, one hop a step, so after `world` steps every Q shard has met every K/V shard.
Each step runs the course's attention on the local pair (fa_course's op: stage 04 on the CPU,
stage 05 on the GPU), which returns that key block's (O_s, LSE_s), and merges it into the running
(O, LSE): stage 03's merge() of two partial softmax states, written in LSE form (merge_() below).
The next block's send/receive is started before the step's attention and waited for after it, so
the communication runs under the computation.

    step s:   rank r holds K/V of rank src = r - s (mod world)
              start sending it to r + 1, receiving the next from r - 1
              (O_s, LSE_s) = attention(Q_r, K_src, V_src)       (masked as the plan says)
              (O, LSE)     = merge((O, LSE), (O_s, LSE_s))
              wait for the next block

Causal attention makes the ring lopsided: with contiguous shards, rank r's queries see only the
keys of ranks <= r, so rank 0 idles while rank world - 1 works every step. Zigzag sharding cuts
the sequence into 2 * world chunks and gives rank r chunks r and 2 * world - 1 - r, one early and
one late: every step then costs every rank the same half block (step_plan()).

The backward (ring_backward()) runs the same ring. dQ stays with its rank; each K/V block
travels with a dK, dV accumulator that every rank adds its share to, and after the last step the
accumulator takes one more hop, home to the block's owner. Each share is exact because stage
06's backward reads the *merged* O and LSE: P = exp(S - LSE) is then the global softmax
restricted to the block, and D = rowsum(dO * O) the global row sum.

Shards: shard() and unshard() cut a full [B, H, N, d] tensor and join the pieces. N must be a
multiple of world (contiguous) or 2 * world (zigzag): a ring needs equal shards. Anything else is
refused with one message (see shard()): padding is the caller's (at the end of the sequence it is
exact for causal attention; without causal the padded keys would need a mask the op lacks).

Names as everywhere in the course: Q K V O LSE (m, l: stage 03's state), dO dQ dK dV, D.
"""
import math
import numbers
import zlib
from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist

import fa_course
from fa_course._op import MAX_HEAD_DIM, _valid_scale  # the op's widest head dim and its scale rule (read, not changed)

LAYOUTS = ("zigzag", "contiguous")


# ---- 1. Sharding: which chunks of the sequence a rank holds ------------------------------------

def chunks_of(rank, world, layout):
    """The chunk indices rank holds, in the order it stores them. contiguous: the sequence is cut
    into `world` chunks, rank r holds chunk r. zigzag: into 2 * world chunks, rank r holds chunk r
    (early) and chunk 2 * world - 1 - r (late), in that order."""
    return [rank] if layout == "contiguous" else [rank, 2 * world - 1 - rank]


def _check_layout(layout):
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {', '.join(LAYOUTS)}, found {layout!r}")


def shard(x, rank, world, layout="zigzag", dim=2):
    """Rank `rank`'s shard of the full tensor x (the sequence on `dim`): the chunks_of() it holds,
    concatenated. N must split into equal chunks: world of them (contiguous), 2 * world (zigzag)."""
    _check_layout(layout)
    parts = world if layout == "contiguous" else 2 * world
    N = x.shape[dim]
    if N % parts != 0:
        raise ValueError(f"N: expected a sequence length divisible by {parts} ({layout}: "
                         f"{'world' if layout == 'contiguous' else '2 * world'}, world = {world}), found {N}; "
                         f"pad the sequence first (causal: padding at the end is exact for the real rows)")
    pieces = x.chunk(parts, dim)
    return torch.cat([pieces[c] for c in chunks_of(rank, world, layout)], dim)


def unshard(shards, layout="zigzag", dim=2):
    """The full tensor from every rank's shard (shards[r] from rank r): shard()'s inverse."""
    _check_layout(layout)
    world = len(shards)
    if layout == "contiguous":
        return torch.cat(list(shards), dim)
    chunks = [None] * (2 * world)
    for r, s in enumerate(shards):
        early, late = s.chunk(2, dim)
        chunks[r], chunks[2 * world - 1 - r] = early, late
    return torch.cat(chunks, dim)


# ---- 2. The plan: what rank r computes with the K/V block of rank src ------------------------

@dataclass(frozen=True)
class Step:
    q_rows: slice   # the rows of the local Q (and O, LSE, dO, dQ) this step touches
    kv_rows: slice  # the rows of the K/V block held at this step
    causal: bool    # True only on the diagonal block (src == rank): causal within it


def step_plan(rank, src, world, n, causal, layout):
    """The attention rank `rank` runs on the K/V block of rank `src` (n rows each), or None when
    every pair is masked (skipped: the block is still passed on). Global causal means query
    position i sees key position j iff j <= i (N_q = N_k, so bottom-right is top-left)."""
    every = slice(0, n)
    if not causal:
        return Step(every, every, False)
    if src == rank:
        # Both shards hold the same positions in the same order, so the global mask on them is
        # the local causal mask. Zigzag too: the early chunk's queries see the early chunk
        # causally and none of the late one; the late chunk's see all of the early one and the
        # late one causally: exactly "j <= i" on the 2 chunks stored one after the other.
        return Step(every, every, True)
    if layout == "contiguous":
        # Chunk src lies wholly before chunk rank (seen in full) or wholly after it (skipped).
        return Step(every, every, False) if src < rank else None
    c = n // 2  # zigzag: chunks rank and 2w-1-rank here; src and 2w-1-src in the block
    if src < rank:
        # chunk src is before both of ours: all our queries see it in full; chunk 2w-1-src is
        # after both of ours (2w-1-src > 2w-1-rank): seen by none.
        return Step(every, slice(0, c), False)
    # src > rank: our early chunk (rank < src, and rank < w <= 2w-1-src) sees neither of its
    # chunks; our late chunk 2w-1-rank is after both (src < w, 2w-1-src < 2w-1-rank): sees all.
    return Step(slice(c, n), every, False)


def pairs(step):
    """Query-key pairs a step computes (the visible ones): its work, counted not timed."""
    if step is None:
        return 0
    rows = step.q_rows.stop - step.q_rows.start
    cols = step.kv_rows.stop - step.kv_rows.start
    return rows * (rows + 1) // 2 if step.causal else rows * cols


# ---- 3. Stage 03's merge, in LSE form ------------------------------------------------------------

def merge_(O, LSE, O_s, LSE_s):
    """(O, LSE) <- the state over both key sets, in place; O [B,H,rows,d] (float32 in the ring), LSE [B,H,rows].

    Stage 03's merge() (online_softmax.hpp: Milakov & Gimelshein Sec. 3.1's operator; Dao et al.
    2022 Alg. 1 lines 11-12) works on (m, l, o) with o unnormalised. A finished state (O, LSE) is
    the same state written as (m, l, o) = (LSE, 1, O): m + log l = LSE and o / l = O. Merging two
    such states and finishing (O = o / l, LSE = m + log l):
        m = max(LSE, LSE_s),   alpha = exp(LSE - m),   beta = exp(LSE_s - m)
        l = alpha + beta,      O = (alpha O + beta O_s) / l,   LSE = m + log l
    exp() never sees a positive argument, as with the row max of stage 02. When both are -inf (a
    row that has seen no key yet on either side) m is -inf: subtract 0 instead (stage 03's
    exp_minus()), and l = 0 gives O = 0, LSE = -inf, never NaN.
    """
    m = torch.maximum(LSE, LSE_s)
    m = torch.where(m == -math.inf, torch.zeros_like(m), m)  # exp_minus(): -inf - -inf would be NaN
    alpha, beta = torch.exp(LSE - m), torch.exp(LSE_s - m)
    l = alpha + beta
    l_safe = torch.where(l == 0, torch.ones_like(l), l)
    O.copy_((alpha / l_safe)[..., None] * O + (beta / l_safe)[..., None] * O_s.to(O.dtype))
    LSE.copy_(m + torch.log(l))  # log(0) = -inf where nothing was seen


# ---- 4. The ring: one hop of a list of tensors, rank -> rank + 1 -------------------------------

def _peers(group):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    to_global = (lambda r: r) if group is None else (lambda r: dist.get_global_rank(group, r))
    return rank, world, to_global((rank + 1) % world), to_global((rank - 1) % world)


def _hop(send, recv, nxt, prv, group, tag):
    """Starts sending `send` to the next rank and receiving `recv` from the previous one; returns
    the requests to wait on. One batch (batch_isend_irecv): NCCL needs a rank's send and receive
    grouped, or two ranks that both send first would each wait for the other's receive. Every
    rank posts its batches in the same order, so sends and receives pair up (NCCL matches by
    order; gloo by tag, given here as well)."""
    ops = [dist.P2POp(dist.isend, t, nxt, group, tag + i) for i, t in enumerate(send)]
    ops += [dist.P2POp(dist.irecv, t, prv, group, tag + i) for i, t in enumerate(recv)]
    return dist.batch_isend_irecv(ops)


def _wait(reqs):
    for r in reqs:
        r.wait()


class _Buffers:
    """Two spare K/V buffers used in turn: the block received in step s is sent in step s + 1
    while the next arrives in the other. The caller's own K, V are sent first and never written."""

    def __init__(self, k, v):
        self.spare = [(torch.empty_like(k), torch.empty_like(v)) for _ in range(2)]

    def __getitem__(self, s):
        return self.spare[s % 2]


# ---- 5. Forward -------------------------------------------------------------------------------

def ring_forward(q, k, v, causal, scale, layout, group, kernel):
    """O (q's dtype) and LSE (float32 [B, H, n]) of the local queries over the whole sequence."""
    rank, world, nxt, prv = _peers(group)
    n = q.shape[2]
    O = torch.zeros(q.shape, dtype=torch.float32, device=q.device)        # the running state:
    LSE = torch.full(q.shape[:3], -math.inf, dtype=torch.float32, device=q.device)  # empty_state()
    bufs = _Buffers(k, v)
    k_cur, v_cur = k, v
    for s in range(world):
        src = (rank - s) % world  # whose K/V this rank holds now
        if s < world - 1:  # pass it on before computing with it: the hop runs under the step
            k_next, v_next = bufs[s]
            reqs = _hop([k_cur, v_cur], [k_next, v_next], nxt, prv, group, tag=10 * s)
        st = step_plan(rank, src, world, n, causal, layout)
        if st is not None:
            O_s, LSE_s = torch.ops.fa_course.attention_fwd(q[:, :, st.q_rows], k_cur[:, :, st.kv_rows],
                                                           v_cur[:, :, st.kv_rows], causal=st.causal,
                                                           scale=scale, kernel=kernel)
            merge_(O[:, :, st.q_rows], LSE[:, :, st.q_rows], O_s, LSE_s)
        if s < world - 1:
            _wait(reqs)
            k_cur, v_cur = k_next, v_next
    return O.to(q.dtype), LSE


# ---- 6. Backward ------------------------------------------------------------------------------

def ring_backward(dO, q, k, v, O, LSE, causal, scale, layout, group, kernel):
    """dQ, dK, dV of the local shards. dQ is summed here; a K/V block's dK, dV are summed along
    its way around the ring, one step behind it, and arrive at its owner after the last step."""
    rank, world, nxt, prv = _peers(group)
    n = q.shape[2]
    f32 = dict(dtype=torch.float32, device=q.device)
    dQ = torch.zeros(q.shape, **f32)
    bufs = _Buffers(k, v)
    k_cur, v_cur = k, v
    grad_reqs, dK_in, dV_in = None, None, None  # the accumulator arriving for the current block
    for s in range(world):
        src = (rank - s) % world
        if s < world - 1:
            k_next, v_next = bufs[s]
            kv_reqs = _hop([k_cur, v_cur], [k_next, v_next], nxt, prv, group, tag=10 * s)
        dK_blk, dV_blk = torch.zeros(k.shape, **f32), torch.zeros(v.shape, **f32)  # this rank's share
        st = step_plan(rank, src, world, n, causal, layout)
        if st is not None:
            rows = st.q_rows
            dq, dk, dv = torch.ops.fa_course.attention_bwd(
                dO[:, :, rows], q[:, :, rows], k_cur[:, :, st.kv_rows], v_cur[:, :, st.kv_rows],
                O[:, :, rows], LSE[:, :, rows], causal=st.causal, scale=scale, kernel=kernel)
            dQ[:, :, rows] += dq
            dK_blk[:, :, st.kv_rows] += dk
            dV_blk[:, :, st.kv_rows] += dv
        if grad_reqs is not None:  # the shares of the ranks this block visited before
            _wait(grad_reqs)
            dK_blk += dK_in
            dV_blk += dV_in
        # Pass the block's gradients on after it. At s = world - 1 the next rank is the block's
        # owner (src = rank + 1), and what arrives here is this rank's own block, complete.
        dK_in, dV_in = torch.empty_like(dK_blk), torch.empty_like(dV_blk)
        grad_reqs = _hop([dK_blk, dV_blk], [dK_in, dV_in], nxt, prv, group, tag=10 * s + 5)
        if s < world - 1:
            _wait(kv_reqs)
            k_cur, v_cur = k_next, v_next
    _wait(grad_reqs)
    return dQ.to(q.dtype), dK_in.to(k.dtype), dV_in.to(v.dtype)


class _RingAttention(torch.autograd.Function):
    """Autograd: the forward saves the local Q, K, V and the merged O and LSE (O(n d) a rank)."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, layout, group, kernel):
        q, k, v = (t.contiguous() for t in (q, k, v))  # sent as they are: the hops need dense tensors
        O, LSE = ring_forward(q, k, v, causal, scale, layout, group, kernel)
        ctx.save_for_backward(q, k, v, O, LSE)
        ctx.args = (causal, scale, layout, group, kernel)
        ctx.mark_non_differentiable(LSE)
        return O, LSE

    @staticmethod
    def backward(ctx, dO, _dLSE):
        q, k, v, O, LSE = ctx.saved_tensors
        dQ, dK, dV = ring_backward(dO.contiguous(), q, k, v, O, LSE, *ctx.args)
        return dQ, dK, dV, None, None, None, None, None


# ---- 7. Checks: the same verdict on every rank, before any hop ----------------------------------

_DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.float64: 3}


def _describe(q, k, v, causal, scale, layout, kernel):
    """What this rank was given, as numbers (a tensor field: its rank, shape, dtype, device)."""
    row = []
    for t in (q, k, v):
        if isinstance(t, torch.Tensor):
            shape = list(t.shape)[:4] + [-1] * (4 - min(4, t.dim()))
            row += [t.dim()] + shape + [_DTYPES.get(t.dtype, 9), {"cpu": 0, "cuda": 1}.get(t.device.type, 9)]
        else:
            row += [-1] * 7
    row.append({True: 1, False: 0}.get(causal, -1) if isinstance(causal, bool) else -1)
    # (NaN as -3: NaN != NaN would make equal scales look different across ranks.)
    row.append(-1.0 if scale is None else -3.0 if isinstance(scale, numbers.Real) and not isinstance(scale, bool)
               and math.isnan(scale) else float(scale) if isinstance(scale, numbers.Real) and not
               isinstance(scale, bool) else -2.0)
    row.append(LAYOUTS.index(layout) if layout in LAYOUTS else -1)
    row.append(zlib.crc32(kernel.encode()) if isinstance(kernel, str) else -1)
    return row


def _render(row, i):
    """Field i's value in a description row, as text (the same on every rank)."""
    names = {v: k for k, v in _DTYPES.items()}
    if i < 21:
        f = row[7 * (i // 7):7 * (i // 7) + 7]
        if f[0] < 0:
            return "not a tensor"
        shape = [int(x) for x in f[1:1 + min(4, int(f[0]))]]
        return f"{shape} {str(names.get(int(f[5]), 'another dtype')).replace('torch.', '')} " \
               f"{ {0: 'cpu', 1: 'cuda'}.get(int(f[6]), 'another device')}"
    x = row[i]
    if i == 21:
        return {1: "True", 0: "False"}.get(int(x), "not a bool")
    if i == 22:
        return "None" if x == -1 else "not a number" if x == -2 else f"{x:g}"
    if i == 23:
        return LAYOUTS[int(x)] if x >= 0 else "an unknown layout"
    return "another kernel name"


def _shown(x):
    return f"{list(x.shape)} {str(x.dtype).replace('torch.', '')} on {x.device}" if isinstance(x, torch.Tensor) \
        else type(x).__name__


_FIELD_NAMES = ["q"] * 7 + ["k"] * 7 + ["v"] * 7 + ["causal", "scale", "layout", "kernel"]


def _check(q, k, v, causal, scale, layout, group, kernel):
    """Raises one ValueError/TypeError, the same on every rank, or returns. The ranks first share
    what each was given (one small all_gather): if they differ, every rank names the first rank
    that differs; if they agree, the local checks below give every rank the same verdict. Either
    way no rank enters the ring alone, so a bad setup fails everywhere instead of hanging."""
    if not dist.is_available() or not dist.is_initialized():
        raise ValueError("group: expected an initialised torch.distributed process group "
                         "(dist.init_process_group), found none")
    world = dist.get_world_size(group)
    if world < 2:
        raise ValueError(f"world size: expected at least 2 ranks (one rank is fa_course.attention), found {world}")
    backend = str(dist.get_backend(group))
    row = _describe(q, k, v, causal, scale, layout, kernel)
    dev = torch.device("cuda", torch.cuda.current_device()) if "nccl" in backend else torch.device("cpu")
    mine = torch.tensor(row, dtype=torch.float64, device=dev)
    rows = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(rows, mine, group=group)
    rows = [r.cpu().tolist() for r in rows]
    for r in range(1, world):
        if rows[r] != rows[0]:
            i = next(i for i, (a, b) in enumerate(zip(rows[0], rows[r])) if a != b)
            name = _FIELD_NAMES[i]
            what = "shape, dtype and device" if i < 21 else "value"
            raise ValueError(f"{name}: expected the same {what} on every rank (equal shards of one sequence), "
                             f"found {_render(rows[0], i)} on rank 0 and {_render(rows[r], i)} on rank {r}")
    # Every rank holds the same description now: the checks below agree everywhere.
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name}: expected a 4-dimensional tensor [B, H, n, d] (a shard), found {_shown(t)}")
    _check_layout(layout)
    if not isinstance(causal, bool):
        raise TypeError(f"causal: expected True or False, found {causal!r}")
    # The op's own rule (a normal float32 > 0), checked here before any hop is posted: a scale the
    # op refused inside the ring would leave the first hop's send and receive hanging.
    if scale is not None and not _valid_scale(scale):
        raise ValueError(f"scale: expected a normal float32 > 0 (1.1754944e-38 ... 3.4028235e38), or None for "
                         f"1/sqrt(d), found {scale!r}")
    if not (q.device == k.device == v.device) or not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v: expected one device and one dtype, found {_shown(q)}, {_shown(k)}, {_shown(v)}")
    B, H, n, d = q.shape
    if k.shape != v.shape:
        raise ValueError(f"k/v: expected one shape, found {tuple(k.shape)} and {tuple(v.shape)}")
    Bk, H_kv, n_k, d_k = k.shape
    if Bk != B or n_k != n or d_k != d:
        raise ValueError(f"k: expected [B, H_kv, n, d] = [{B}, H_kv, {n}, {d}] (the same sequence's shard as q), "
                         f"found {list(k.shape)}")
    if min(B, H, H_kv, n, d) < 1:
        raise ValueError(f"q/k: expected sizes >= 1, found q {list(q.shape)}, k {list(k.shape)}")
    if H % H_kv != 0:
        raise ValueError(f"k: expected kv heads dividing q's {H} heads, found {H_kv}")
    if d > MAX_HEAD_DIM:
        raise ValueError(f"q: expected a head dim of at most {MAX_HEAD_DIM}, found {d}")
    if layout == "zigzag" and n % 2 != 0:
        raise ValueError(f"q: expected an even shard length for zigzag (two chunks of N / (2 world)), found {n}")
    if q.device.type == "cpu":
        if "gloo" not in backend or q.dtype != torch.float32:
            raise TypeError(f"q: expected float32 CPU tensors with the gloo backend (stage 04), found "
                            f"{q.dtype} with {backend}")
    elif q.device.type == "cuda":
        if "nccl" not in backend or q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
            raise TypeError(f"q: expected fp16, bf16 or float32 CUDA tensors with the nccl backend, found "
                            f"{q.dtype} with {backend}")
    else:
        raise ValueError(f"q: expected a cpu or cuda tensor, found {q.device}")
    if not isinstance(kernel, str):
        raise TypeError(f"kernel: expected a name, found {type(kernel).__name__}")
    fa_course.kernels_for(q.device, q.dtype, d, kernel)  # a kernel name the device does not run


# ---- 8. The public function -----------------------------------------------------------------------

def ring_attention(q, k, v, *, causal=False, scale=None, layout="zigzag", group: Optional[object] = None,
                   kernel="auto", return_lse=False):
    """Attention of this rank's queries over the whole sequence, differentiable; call it on every
    rank of `group` (default: the world) with that rank's shards.

    q: [B, H, n, d], k, v: [B, H_kv, n, d] (H % H_kv == 0), this rank's shard of one sequence of
        N = world * n tokens, cut by shard(x, rank, world, layout); equal shapes on every rank.
    causal: query position i sees key position j iff j <= i (over the whole sequence).
    layout: "zigzag" (rank r holds chunks r and 2 world - 1 - r of 2 world: balanced causal work)
        or "contiguous" (chunk r of world). Without causal both do the same work.
    scale: default 1/sqrt(d). kernel: as fa_course.attention's.
    Returns O [B, H, n, d] (this rank's rows), and LSE [B, H, n] (float32) with return_lse.
    Bad input raises ValueError or TypeError, one line, the same on every rank.
    """
    _check(q, k, v, causal, scale, layout, group, kernel)
    O, LSE = _RingAttention.apply(q, k, v, causal, 0.0 if scale is None else float(scale), layout, group, kernel)
    return (O, LSE) if return_lse else O
