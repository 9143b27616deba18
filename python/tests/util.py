"""Shared by the fa_course tests: the float64 reference (SDPA's math backend) and the error rule."""
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def visible(N_q, N_k, causal, device="cpu"):
    """[N_q, N_k] bool: key j visible to query i (bottom-right causal: j <= i + N_k - N_q)."""
    i = torch.arange(N_q, device=device)[:, None]
    j = torch.arange(N_k, device=device)[None, :]
    return j <= i + (N_k - N_q) if causal else torch.ones(N_q, N_k, dtype=torch.bool, device=device)


def sdpa_reference(q, k, v, causal=False, scale=None):
    """(O, LSE) by SDPA's math backend in the inputs' dtype, with an explicit bottom-right mask.
    Rows that see no key: O = 0 and LSE = -inf, the course's rule (their mask is opened to one key
    and the row zeroed after, so no NaN reaches autograd)."""
    N_q, N_k, d = q.shape[2], k.shape[2], q.shape[3]
    mask = visible(N_q, N_k, causal, q.device)
    seen = mask.any(-1)  # [N_q]
    safe = mask | ~seen[:, None]
    with sdpa_kernel(SDPBackend.MATH):
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=safe, scale=scale, enable_gqa=True)
    o = torch.where(seen[:, None], o, torch.zeros((), dtype=o.dtype))
    s = (scale or d ** -0.5) * q.double() @ k.double().repeat_interleave(q.shape[1] // k.shape[1], 1).transpose(-1, -2)
    lse = torch.logsumexp(s.masked_fill(~mask, float("-inf")), -1)
    return o, lse


def max_err(a, b):
    """max |a - b| in float64; NaN anywhere counts as infinite."""
    d = (a.detach().double() - b.detach().double()).abs()
    return float("inf") if torch.isnan(d).any() else float(d.max()) if d.numel() else 0.0
