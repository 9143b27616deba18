"""fa_course: the FlashAttention course's kernels as one PyTorch attention op, with autograd.

    import fa_course
    o = fa_course.attention(q, k, v, causal=True)          # q [B,H,N_q,d], k, v [B,H_kv,N_k,d]
    o.sum().backward()                                      # stage 06's backward, from O and LSE
    o = fa_course.attention(q, k, v, causal=True, window=(255, 0), softcap=50.0)  # sliding window, softcap

What runs (kernel="auto"):
    CPU float32           stage 04's tiled forward (libfa04.so), stage 06's CPU backward (libfa06.so)
    CUDA fp16 / bf16      stage 05's auto (v13 at every head dim on Hopper, v14 for decode shapes),
                          stage 06's fastest backward (fa06_runs("auto"))
    CUDA float32          stage 05's v1 and stage 06's gpu_v1
    o = fa_course.decode(q, k_cache, v_cache, cache_lens=lens, block_table=table)  # a KV cache (v14)
    o = fa_course.attention_varlen(q, k, v, cu_q, cu_k, causal=True)  # a packed batch: q [total_q,H,d]
The op is fa_course::attention_fwd (returns O and LSE) with its backward fa_course::attention_bwd,
both torch.library custom ops, so autograd, torch.compile and torch.library.opcheck see them.
"""
from ._op import attention, attention_varlen, decode, kernels_for, library_paths

__all__ = ["attention", "attention_varlen", "decode", "kernels_for", "library_paths"]
