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
    o = fa_course.attention_fp8(q, k, v, causal=True)   # FP8 forward (v15: Hopper, d = 128, bf16 in and out)
The op is fa_course::attention_fwd (returns O and LSE) with its backward fa_course::attention_bwd,
both torch.library custom ops, so autograd, torch.compile and torch.library.opcheck see them;
fa_course::attention_fp8_fwd is forward only (quantize_fp8 gives its e4m3 inputs and their scales).
"""
from ._fp8 import attention_fp8, quantize_fp8
from ._op import attention, attention_varlen, decode, kernels_for, library_paths

__all__ = ["attention", "attention_fp8", "attention_varlen", "decode", "kernels_for", "library_paths", "quantize_fp8"]
