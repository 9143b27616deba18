"""FP8 attention (issue 35): stage 05's v15 as fa_course::attention_fp8_fwd, a forward-only custom op,
and quantize_fp8(), the course's block quantisation in PyTorch (docs/fp8.md, common/fp8.hpp).

    o = fa_course.attention_fp8(q, k, v, causal=True)            # bf16 q, k, v: quantised on the GPU
    q8, sq = fa_course.quantize_fp8(q, 64)                        # or bring e4m3 tensors and their scales
    k8, sk = fa_course.quantize_fp8(k, 128)
    v8, sv = fa_course.quantize_fp8(v, 128)
    o = fa_course.attention_fp8(q8, k8, v8, scales=(sq, sk, sv))  # the same bits as the bf16 call
"""
from typing import Optional

import torch

from . import _lib
from ._op import _check_shapes, _is_int, _stream

ROWS_Q, ROWS_KV = 64, 128  # rows of one (batch, head) per Q scale, per K and per V scale (runner_fp8.hpp)
HEAD_DIM = 128             # v15 is compiled for d = 128 only


def quantize_fp8(x, rows):
    """x [B, H, N, d] (any float dtype and device) in e4m3 with one power-of-two scale per `rows` rows
    of a (batch, head): the course's block quantisation (for bf16 inputs bit for bit what v15's
    quantiser makes on the GPU, and common/fp8.hpp's quantize_e4m3_blocks on the host). Per block,
    s is the smallest 2^k with max |x| <= 448 2^k (but at least 2^-149, float32's smallest: a block
    below 2^-141 in size keeps fewer bits) and x8 = x / s rounded to the nearest e4m3 (ties to even);
    an all-zero block gets s = 1, a block holding a non-finite value s = NaN (v15 then gives NaN
    rows). x is read in float32: a float64 value is rounded to float32 first (one beyond float32's
    range becomes inf, so its block's scale is NaN).

    Returns (x8 [B, H, N, d] torch.float8_e4m3fn, scales [B, H, ceil(N / rows)] float32), both on x's
    device, contiguous, without autograd history: element x8 of a block stands for x8 * its scale
    (exact in float64; in float32 that product overflows where |x| >= 248 x 2^120, near bf16's and
    float32's largest values, though v15 itself never forms it). rows: 64 for Q, 128 for K and V
    (ROWS_Q, ROWS_KV), what attention_fp8 reads.
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        raise ValueError(f"x: expected a torch.Tensor [B, H, N, d], found "
                         f"{'shape ' + str(tuple(x.shape)) if isinstance(x, torch.Tensor) else type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"x: expected a floating-point dtype, found {x.dtype}")
    if not _is_int(rows) or rows < 1:
        raise ValueError(f"rows: expected an integer >= 1 (64 for q, 128 for k and v), found {rows!r}")
    B, H, N, d = x.shape
    if d < 1:
        raise ValueError(f"x: expected a head dim d >= 1, found shape {tuple(x.shape)}")
    rows = int(rows)
    nb = (N + rows - 1) // rows
    x = x.detach().float()
    # one block of N rows when rows >= N (no padding to rows); else at most rows - 1 padded zero rows
    R = N if nb == 1 else rows
    blocks = torch.nn.functional.pad(x, (0, 0, 0, nb * R - N)).view(B, H, nb, R, d)
    amax = blocks.abs().amax(dim=(3, 4))
    finite = torch.isfinite(blocks).all(dim=4).all(dim=3)
    m, e = torch.frexp(amax)  # amax = m 2^e, m in [0.5, 1): the smallest k is e - 9 if 2m <= 1.75, else e - 8
    k = torch.where(2 * m <= 1.75, e - 9, e - 8).clamp_min(-149)
    # 2^k in float64, then float32: exact down to 2^-149 (a bf16 block's scale can be a float32 subnormal)
    s = torch.ldexp(torch.ones_like(amax, dtype=torch.float64), k).float()
    s = torch.where(amax > 0, s, torch.ones_like(s))
    s = torch.where(finite, s, torch.full_like(s, float("nan")))
    # x / 2^k is exact in float32 wherever it matters (only a quotient below 2^-126 could round, and
    # e4m3 sends anything below 2^-10 to 0), so the one rounding is the cast to e4m3
    x8 = (blocks / s[..., None, None]).to(torch.float8_e4m3fn).view(B, H, nb * R, d)[:, :, :N]
    return x8.contiguous(), s.contiguous()


def _check_fp8(q, k, v, causal, scale, scales):
    """The op's checks (its fake makes them too): CUDA tensors, bf16 without scales or e4m3 with
    three float32 scale tensors of the blocks' shapes; the shapes as attention()'s."""
    e4m3 = scales is not None
    want = torch.float8_e4m3fn if e4m3 else torch.bfloat16
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name}: expected a 4-dimensional torch.Tensor [B, H, N, d], found "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
        if t.device.type != "cuda":
            raise ValueError(f"{name}: expected a CUDA tensor (v15 is a Hopper kernel), found one on {t.device}")
        if t.dtype != want:
            raise TypeError(f"{name}: expected {want} ({'with' if e4m3 else 'without'} scales=), found {t.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v: expected one device, found {q.device}, {k.device}, {v.device}")
    _check_shapes(q, k, v, causal, scale)
    if q.shape[3] != HEAD_DIM:
        raise NotImplementedError(f"--head-dim: expected {HEAD_DIM} (v15, the FP8 kernel, is compiled for d = 128 "
                                  f"only), found {q.shape[3]}")
    if e4m3:
        if not isinstance(scales, (tuple, list)) or len(scales) != 3:
            raise ValueError(f"scales: expected (scale_q, scale_k, scale_v), found {type(scales).__name__}")
        B, H, N_q, _ = q.shape
        _, H_kv, N_k, _ = k.shape
        shapes = ((B, H, -(-N_q // ROWS_Q)), (B, H_kv, -(-N_k // ROWS_KV)), (B, H_kv, -(-N_k // ROWS_KV)))
        for name, t, shape in zip(("scale_q", "scale_k", "scale_v"), scales, shapes):
            if not isinstance(t, torch.Tensor) or t.dtype != torch.float32 or t.device != q.device \
                    or tuple(t.shape) != shape:
                raise ValueError(f"scales: expected {name} float32 {list(shape)} on {q.device} (one scale per "
                                 f"{ROWS_Q if name == 'scale_q' else ROWS_KV} rows: quantize_fp8), found "
                                 f"{(t.dtype, tuple(t.shape), str(t.device)) if isinstance(t, torch.Tensor) else type(t).__name__}")


@torch.library.custom_op("fa_course::attention_fp8_fwd", mutates_args=())
def attention_fp8_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale_q: Optional[torch.Tensor],
                      scale_k: Optional[torch.Tensor], scale_v: Optional[torch.Tensor], causal: bool,
                      scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """O [B,H,N_q,128] bf16 and LSE [B,H,N_q] float32 (natural log) from v15; scale 0 means
    1/sqrt(d). bf16 q, k, v with no scales (fa05_forward_fp8 quantises them), or e4m3 q, k, v with
    all three scales (fa05_forward_fp8_e4m3)."""
    given = [t is not None for t in (scale_q, scale_k, scale_v)]
    if any(given) and not all(given):
        raise ValueError("scales: expected all three of scale_q, scale_k, scale_v or none, found some")
    scales = (scale_q, scale_k, scale_v) if all(given) else None
    _check_fp8(q, k, v, causal, None if scale == 0 else scale, scales)
    # The C library reads dense row-major tensors: a strided view is copied here (documented).
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    B, H, N_q, d = q.shape
    _, H_kv, N_k, _ = k.shape
    o = torch.empty((B, H, N_q, d), dtype=torch.bfloat16, device=q.device)
    lse = torch.empty((B, H, N_q), dtype=torch.float32, device=q.device)
    sizes = (B, H, H_kv, N_q, N_k, d, int(causal), scale, _stream(q))
    with torch.cuda.device(q.device):
        if scales is None:
            s = _lib.function("fa05", "fa05_forward_fp8")(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                                                          lse.data_ptr(), *sizes)
        else:
            sq, sk, sv = (t.contiguous() for t in scales)
            s = _lib.function("fa05", "fa05_forward_fp8_e4m3")(q.data_ptr(), k.data_ptr(), v.data_ptr(), sq.data_ptr(),
                                                               sk.data_ptr(), sv.data_ptr(), o.data_ptr(),
                                                               lse.data_ptr(), *sizes)
    _lib.check("fa05", s)
    return o, lse


@attention_fp8_fwd.register_fake
def _(q, k, v, scale_q, scale_k, scale_v, causal, scale):
    given = [t is not None for t in (scale_q, scale_k, scale_v)]
    _check_fp8(q, k, v, causal, None, (scale_q, scale_k, scale_v) if all(given) else None)
    B, H, N_q, d = q.shape
    return (q.new_empty((B, H, N_q, d), dtype=torch.bfloat16), q.new_empty((B, H, N_q), dtype=torch.float32))


def _no_backward(ctx, grad_o, grad_lse):
    raise NotImplementedError("attention_fp8: expected no gradient through it (v15 is a forward kernel, for "
                              "inference; train with fa_course.attention), found a backward call")


torch.library.register_autograd("fa_course::attention_fp8_fwd", _no_backward)


def attention_fp8(q, k, v, *, causal=False, scale=None, scales=None, return_lse=False):
    """softmax(scale * q k^T [+ causal mask]) v with Q, K, V and P in FP8 (e4m3): stage 05's v15,
    FlashAttention-3's FP8 forward design, on an sm_90 GPU (Hopper) at d = 128. Forward only.

    q: [B, H, N_q, 128]; k, v: [B, H_kv, N_k, 128] with H % H_kv == 0 (GQA, as attention()).
    Either bf16 tensors and scales=None: quantised on the GPU, per block of 64 query rows and of 128
        keys, with power-of-two scales (quantize_fp8's rule); or torch.float8_e4m3fn tensors with
        scales=(scale_q, scale_k, scale_v), float32 [B, H, ceil(N_q / 64)], [B, H_kv, ceil(N_k / 128)]
        and the same for v: element x8 of a block stands for x8 * its scale (any finite scale > 0).
    causal: bottom-right aligned, as attention(). scale: the softmax scale (default 1/sqrt(d)).
    Returns O [B, H, N_q, 128] bf16 (and LSE [B, H, N_q], float32, natural log).
    Its error is what e4m3 storage of Q, K, V and P causes (docs/fp8.md measures it against bf16's).
    Another d or a GPU other than Hopper raise NotImplementedError; bad input raises ValueError or
    TypeError with a one-line message naming the argument. The scales' values are not read on the
    host (that would synchronise): a scale that is 0, negative or NaN gives wrong or NaN rows. No
    gradient: backward raises NotImplementedError.
    """
    if scales is not None and (not isinstance(scales, (tuple, list)) or len(scales) != 3):
        raise ValueError(f"scales: expected (scale_q, scale_k, scale_v), found {type(scales).__name__}"
                         f"{' of ' + str(len(scales)) if isinstance(scales, (tuple, list)) else ''}")
    _check_fp8(q, k, v, causal, scale, scales)  # here too: the op's schema would coerce causal and the scale
    sq, sk, sv = (None, None, None) if scales is None else scales
    o, lse = attention_fp8_fwd(q, k, v, sq, sk, sv, causal, 0.0 if scale is None else float(scale))
    return (o, lse) if return_lse else o
