"""cuDNN's decode under ncu (run 3, 2026-12-03): SDPA's cuDNN backend once on one decode shape,
between cudaProfilerStart/Stop, so `ncu --profile-from-start off` profiles only its kernels.
Usage: ncu --profile-from-start off ... python3 ncu_cudnn_decode.py B H H_kv N_k"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

B, H, Hkv, Nk = (int(x) for x in sys.argv[1:5])
d = 128
q = torch.randn(B, H, 1, d, device="cuda", dtype=torch.bfloat16)
k = torch.randn(B, Hkv, Nk, d, device="cuda", dtype=torch.bfloat16)
v = torch.randn(B, Hkv, Nk, d, device="cuda", dtype=torch.bfloat16)
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(3):  # warm-up: plan building, the first launches
        F.scaled_dot_product_attention(q, k, v, enable_gqa=Hkv < H)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    F.scaled_dot_product_attention(q, k, v, enable_gqa=Hkv < H)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
