"""Shared by the fa_course tests: the float64 reference (SDPA's math backend; written out for the
variants; per sequence for a packed batch) and the error rule."""
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def visible(N_q, N_k, causal, device="cpu", window=None):
    """[N_q, N_k] bool: key j visible to query i. Bottom-right causal: j <= i + N_k - N_q; a window
    (left, right), -1 for an unbounded side: i + N_k - N_q - left <= j <= i + N_k - N_q + right."""
    i = torch.arange(N_q, device=device)[:, None]
    j = torch.arange(N_k, device=device)[None, :]
    diag = i + (N_k - N_q)
    mask = torch.ones(N_q, N_k, dtype=torch.bool, device=device)
    if causal:
        mask &= j <= diag
    if window is not None:
        left, right = window
        if left >= 0:
            mask &= j >= diag - left
        if right >= 0:
            mask &= j <= diag + right
    return mask


def sdpa_reference(q, k, v, causal=False, scale=None, window=None):
    """(O, LSE) by SDPA's math backend in the inputs' dtype, with an explicit bottom-right mask
    (and a window's, if given). Rows that see no key: O = 0 and LSE = -inf, the course's rule
    (their mask is opened to one key and the row zeroed after, so no NaN reaches autograd)."""
    N_q, N_k, d = q.shape[2], k.shape[2], q.shape[3]
    mask = visible(N_q, N_k, causal, q.device, window)
    seen = mask.any(-1)  # [N_q]
    safe = mask | ~seen[:, None]
    with sdpa_kernel(SDPBackend.MATH):
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=safe, scale=scale, enable_gqa=True)
    o = torch.where(seen[:, None], o, torch.zeros((), dtype=o.dtype))
    s = (scale or d ** -0.5) * q.double() @ k.double().repeat_interleave(q.shape[1] // k.shape[1], 1).transpose(-1, -2)
    lse = torch.logsumexp(s.masked_fill(~mask, float("-inf")), -1)
    return o, lse


def variant_reference(q, k, v, causal=False, scale=None, window=None, softcap=None):
    """(O, LSE) written out in the inputs' dtype, for the variants SDPA has no argument for
    (docs/math.md section 8): S = scale q k^T (query head h reads kv head h // (H // H_kv)); with a
    softcap c, S = c tanh(S / c); then the mask (causal, window: visible()) sets S = -inf;
    P = softmax(S), O = P v. A row that sees no key: O = 0, LSE = -inf (its scores are opened to 0
    and its P zeroed, so no NaN reaches autograd)."""
    N_q, N_k, d = q.shape[2], k.shape[2], q.shape[3]
    G = q.shape[1] // k.shape[1]
    kk, vv = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)
    s = (scale or d ** -0.5) * (q @ kk.transpose(-1, -2))
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    mask = visible(N_q, N_k, causal, q.device, window)
    seen = mask.any(-1)[:, None]  # [N_q, 1]
    s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.softmax(s.masked_fill(~seen, 0.0), -1) * seen
    return p @ vv, lse


def packed_reference(q, k, v, cu_q, cu_k, causal=False, scale=None, window=None, softcap=None):
    """(O [total_q, H, d], LSE [H, total_q]) of a packed batch in the inputs' dtype, sequence by
    sequence: each sequence transposed to [1, H, N(b), d] and given to variant_reference (without
    a variant SDPA's math, as test_op.py's Variants checks), the results packed back; a
    sequence without keys gets O = 0, LSE = -inf. Differentiable (torch ops only)."""
    H = q.shape[1]
    os_, ls = [], []
    for b in range(len(cu_q) - 1):
        t0, t1, u0, u1 = cu_q[b], cu_q[b + 1], cu_k[b], cu_k[b + 1]
        if t1 == t0:
            continue
        if u1 == u0:
            os_.append(q[t0:t1] * 0)
            ls.append(torch.full((H, t1 - t0), float("-inf"), dtype=torch.float64, device=q.device))
            continue
        seq = lambda x, a, z: x[a:z].transpose(0, 1).unsqueeze(0)  # noqa: E731
        o, lse = variant_reference(seq(q, t0, t1), seq(k, u0, u1), seq(v, u0, u1), causal, scale, window, softcap)
        os_.append(o[0].transpose(0, 1))
        ls.append(lse[0].double())
    return torch.cat(os_), torch.cat(ls, 1)


def offsets(lens):
    """cu_seqlens of sequences of these lengths: [0, l0, l0 + l1, ...]."""
    out = [0]
    for n in lens:
        out.append(out[-1] + n)
    return out


def max_err(a, b):
    """max |a - b| in float64; NaN anywhere counts as infinite."""
    d = (a.detach().double() - b.detach().double()).abs()
    return float("inf") if torch.isnan(d).any() else float(d.max()) if d.numel() else 0.0
