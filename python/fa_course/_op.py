"""The op: fa_course::attention_fwd and fa_course::attention_bwd (torch.library custom ops), the
autograd formula that joins them, and the public attention(); fa_course::decode_fwd and decode(),
attention on a KV cache (stage 05's v14)."""
from typing import Optional

import torch

from . import _lib

MAX_HEAD_DIM = 256  # the largest d the course's kernels run (every one of them on the GPU, from padded widths)
_DTYPE_CODE = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


# ---- checks, in the course's one-line form: "argument: expected ..., found ..." --------------

def _check_tensors(q, k, v, rank, layout, gpu_dtypes, gpu_names):
    """q, k, v: tensors of `rank` dimensions (`layout` names them), one device (cpu or cuda), one
    dtype: float32 on the CPU, one of gpu_dtypes (named gpu_names) on the GPU."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, found {type(t).__name__}")
        if t.dim() != rank:
            raise ValueError(f"{name}: expected {rank} dimensions {layout}, found shape {tuple(t.shape)}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v: expected one device, found {q.device}, {k.device}, {v.device}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v: expected one dtype, found {q.dtype}, {k.dtype}, {v.dtype}")
    if q.device.type == "cpu":
        if q.dtype != torch.float32:
            raise TypeError(f"dtype: expected torch.float32 on the CPU (stage 04), found {q.dtype}")
    elif q.device.type == "cuda":
        if q.dtype not in gpu_dtypes:
            raise TypeError(f"dtype: expected {gpu_names} on the GPU, found {q.dtype}")
    else:
        raise ValueError(f"device: expected cpu or cuda, found {q.device}")


def _check(q, k, v, causal, scale, kernel, window_left=-1, window_right=-1, softcap=0.0):
    _check_tensors(q, k, v, 4, "[B, H, N, d]", _DTYPE_CODE, "float32, float16 or bfloat16")
    _check_shapes(q, k, v, causal, scale)
    if not isinstance(kernel, str):
        raise TypeError(f"kernel: expected a name, found {type(kernel).__name__}")
    _check_variant_args(window_left, window_right, softcap)


def _check_shapes(q, k, v, causal, scale):
    """q [B, H, N_q, d], k and v [B, H_kv, N_k, d] (4-dimensional tensors: _check_tensors) with every
    size >= 1, H % H_kv == 0 and d <= 256; the scale None or a normal float32 > 0; causal a bool."""
    B, H, N_q, d = q.shape
    if k.shape != v.shape:
        raise ValueError(f"--k/--v: expected k and v of one shape, found {tuple(k.shape)} and {tuple(v.shape)}")
    Bk, H_kv, N_k, dk = k.shape
    if Bk != B:
        raise ValueError(f"--batch: expected k's batch {Bk} to equal q's, found {B}")
    if dk != d:
        raise ValueError(f"--head-dim: expected k's head dim {dk} to equal q's, found {d}")
    for flag, x in (("--batch", B), ("--heads", H), ("--seq-q", N_q), ("--kv-heads", H_kv), ("--seq-k", N_k),
                    ("--head-dim", d)):
        if x < 1:
            raise ValueError(f"{flag}: expected an integer >= 1, found {x}")
    if H % H_kv != 0:
        raise ValueError(f"--kv-heads: expected a divisor of --heads ({H}), found {H_kv}")
    if d > MAX_HEAD_DIM:
        raise ValueError(f"--head-dim: expected at most {MAX_HEAD_DIM}, found {d}")
    if scale is not None and not _valid_scale(scale):
        raise ValueError(f"--scale: expected a number between {_F32_TINY:.7g} and {_F32_MAX:.7g} (a normal float32 "
                         f"> 0), or None for 1/sqrt(d), found {scale!r}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal: expected True or False, found {causal!r}")


def _check_variant_args(window_left, window_right, softcap):
    """The ops' window sides (-1: unbounded) and softcap (0: none; None skips its check, as the
    fakes pass it: it may be symbolic there)."""
    for side, x in (("left", window_left), ("right", window_right)):
        if not _is_int(x):
            raise TypeError(f"--window: expected an integer {side} side, found {type(x).__name__}")
        if not -1 <= x <= _I64_MAX:
            raise ValueError(f"--window: expected each side >= -1 (-1: unbounded), found {window_left},{window_right}")
    if softcap is not None and softcap != 0 and not _valid_scale(softcap):
        raise ValueError(f"--softcap: expected 0 (none) or a number between {_F32_TINY:.7g} and {_F32_MAX:.7g} "
                         f"(a normal float32 > 0), found {softcap!r}")


_I64_MAX = 2 ** 63 - 1


def _is_int(x):
    """An integer that is not a bool: int, torch.SymInt or a numpy integer."""
    if isinstance(x, bool):
        return False
    if isinstance(x, (int, torch.SymInt)):
        return True
    try:
        import numpy as np
        return isinstance(x, np.integer)
    except ImportError:
        return False


def _variant_args(window, softcap, causal):
    """attention()'s window and softcap as the ops take them: (window_left, window_right, softcap),
    -1, -1, 0.0 for none; with causal the right side is 0 (FlashAttention's window_size), and a
    window whose left side is -1 is none (causal alone)."""
    if window is None:
        left, right = -1, -1
    else:
        if not isinstance(window, (tuple, list)) or len(window) != 2:
            raise TypeError(f"--window: expected None or (left, right), two integers >= -1 (-1: unbounded), "
                            f"found {window!r}")
        left, right = window
        for x in (left, right):
            if not _is_int(x):
                raise TypeError(f"--window: expected None or (left, right), two integers >= -1 (-1: unbounded), "
                                f"found {window!r}")
        if not (-1 <= left <= _I64_MAX and -1 <= right <= _I64_MAX):
            raise ValueError(f"--window: expected None or (left, right), two integers >= -1 (-1: unbounded), "
                             f"found ({left}, {right})")
        left, right = int(left), int(right)
        if causal:  # causal sees no key past the diagonal, whatever the right side says; and with the
            right = 0 if left >= 0 else -1  # left side unbounded the window is causal alone (the plain op)
    if softcap is None:
        cap = 0.0
    else:
        if isinstance(softcap, (bool, str)) or not _is_number(softcap):
            raise TypeError(f"--softcap: expected None or a number > 0, found {type(softcap).__name__}")
        if not _valid_scale(softcap):
            raise ValueError(f"--softcap: expected None or a number between {_F32_TINY:.7g} and {_F32_MAX:.7g} "
                             f"(a normal float32 > 0), found {softcap!r}")
        cap = float(softcap)
    return left, right, cap


def _is_number(x):
    if isinstance(x, (int, float, torch.SymFloat, torch.SymInt)):
        return True
    try:
        import numpy as np
        return isinstance(x, (np.floating, np.integer))
    except ImportError:
        return False


_F32_TINY, _F32_MAX = 1.1754944e-38, 3.4028235e38  # the kernels take the scale as a float32


def _valid_scale(scale):
    """A scale the kernels can take: a real number (not a bool) that is a normal float32 > 0. A
    smaller one would round to 0, which the C ABIs read as "the default 1/sqrt(d)". Comparisons
    only (NaN fails both), so that torch.compile can trace a scale passed as an argument."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float, torch.SymFloat, torch.SymInt)):
        try:
            import numpy as np  # a numpy scalar is a number too
            if not isinstance(scale, np.floating):
                return False
        except ImportError:
            return False
    return _F32_TINY <= scale <= _F32_MAX


def _check_saved_like(do, q, o):
    """dO and O: tensors like q (shape, dtype, device)."""
    for name, t in (("dO", do), ("o", o)):
        if not isinstance(t, torch.Tensor) or t.shape != q.shape or t.dtype != q.dtype or t.device != q.device:
            raise ValueError(f"{name}: expected a tensor like q ({tuple(q.shape)}, {q.dtype}, {q.device}), found "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}"
                             f"{', ' + str(t.dtype) + ', ' + str(t.device) if isinstance(t, torch.Tensor) else ''}")


def _check_saved(do, q, o, lse):
    """The backward's extra inputs: dO and O as q (shape, dtype, device), LSE [B, H, N_q] float32."""
    _check_saved_like(do, q, o)
    want = tuple(q.shape[:3])
    if not isinstance(lse, torch.Tensor) or tuple(lse.shape) != want or lse.dtype != torch.float32 or lse.device != q.device:
        raise ValueError(f"lse: expected float32 [B, H, N_q] = {want} on {q.device}, found "
                         f"{(tuple(lse.shape), lse.dtype, str(lse.device)) if isinstance(lse, torch.Tensor) else type(lse).__name__}")


def _scale_arg(scale):
    """The ops' scale (0 = the default) as _check's (None = the default)."""
    return None if scale == 0 else scale


def kernels_for(device, dtype, d, kernel="auto"):
    """(forward kernel, backward kernel) names that run for this device, dtype and head dim, without a
    window or softcap (with one, the GPU forward's "auto" is v13 on Hopper, v1 elsewhere and in fp32:
    stage 05's plan; the backward's is stage 06's plan's)."""
    fwd, _, bwd = kernel.partition(",")
    bwd = bwd or "auto"
    if torch.device(device).type == "cpu":
        if fwd not in ("auto", "tiled") or bwd not in ("auto", "tiled"):
            raise ValueError(f"kernel: expected 'auto' (stage 04 and 06) on the CPU, found {kernel!r}")
        return "04_tiled_cpu", "06_backward_recompute"
    code = _DTYPE_CODE[dtype]
    runs = _lib.lib("fa05").fa05_runs(fwd.encode(), d, code)
    if runs is None:
        _lib.check("fa05", 1)
    bruns = _lib.lib("fa06").fa06_runs(bwd.encode(), d, code)
    if bruns is None:
        _lib.check("fa06", 1)
    return runs.decode(), bruns.decode()


def library_paths():
    """{name: path} of the course libraries this process loaded (or would load)."""
    out = {}
    for name in ("fa04", "fa05", "fa06"):
        try:
            out[name] = _lib.lib(name).path
        except RuntimeError as e:
            out[name] = str(e)
    return out


def _stream(t):
    return torch.cuda.current_stream(t.device).cuda_stream


# ---- the forward op ------------------------------------------------------------------------

@torch.library.custom_op("fa_course::attention_fwd", mutates_args=())
def attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
                  kernel: str, window_left: int = -1, window_right: int = -1,
                  softcap: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """O [B,H,N_q,d] and LSE [B,H,N_q] (float32, natural log); scale 0 means 1/sqrt(d); window
    sides -1 mean unbounded, softcap 0 means none. Checks its inputs itself (it is public, and what
    torch.compile and export call)."""
    _check(q, k, v, causal, _scale_arg(scale), kernel, window_left, window_right, softcap)
    # The C libraries read dense row-major tensors: a strided view is copied here (documented).
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    B, H, N_q, d = q.shape
    _, H_kv, N_k, _ = k.shape
    o = torch.empty_like(q)
    lse = torch.empty((B, H, N_q), dtype=torch.float32, device=q.device)
    variant = (window_left, window_right, softcap) != (-1, -1, 0.0)
    ptrs = [t.data_ptr() for t in (q, k, v, o, lse)]
    if q.device.type == "cpu":
        kernels_for(q.device, q.dtype, d, kernel)  # refuses a GPU kernel name on the CPU
        lib04, sizes = _lib.lib("fa04"), (B, H, H_kv, N_q, N_k, d, int(causal), scale, 0, 0, 0)
        s = (lib04.fa04_forward_variant(*ptrs, *sizes, window_left, window_right, softcap) if variant
             else lib04.fa04_forward(*ptrs, *sizes))
        _lib.check("fa04", s)
    else:
        fwd, _ = kernels_for(q.device, q.dtype, d, kernel)
        lib05, sizes = _lib.lib("fa05"), (B, H, H_kv, N_q, N_k, d, _DTYPE_CODE[q.dtype], int(causal), scale)
        with torch.cuda.device(q.device):
            if variant:  # the kernel asked for ("auto": its plan picks one that takes the window: v13, v14 or v1)
                s = lib05.fa05_forward_variant(kernel.partition(",")[0].encode(), *ptrs, *sizes, window_left,
                                               window_right, softcap, _stream(q))
            else:
                s = lib05.fa05_forward(fwd.encode(), *ptrs, *sizes, _stream(q))
        _lib.check("fa05", s)
    return o, lse


@attention_fwd.register_fake
def _(q, k, v, causal, scale, kernel, window_left=-1, window_right=-1, softcap=0.0):
    # shapes, dtypes, devices, the window (the scale and softcap may be symbolic here)
    _check(q, k, v, causal, None, kernel, window_left, window_right, None)
    B, H, N_q, _ = q.shape
    return torch.empty_like(q, memory_format=torch.contiguous_format), q.new_empty((B, H, N_q), dtype=torch.float32)


# ---- the backward op -----------------------------------------------------------------------

@torch.library.custom_op("fa_course::attention_bwd", mutates_args=())
def attention_bwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                  lse: torch.Tensor, causal: bool, scale: float, kernel: str, window_left: int = -1,
                  window_right: int = -1,
                  softcap: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV from dO and what the forward kept (Q, K, V, O, LSE): stage 06, with the
    forward's window and softcap. Checks its inputs."""
    _check(q, k, v, causal, _scale_arg(scale), kernel, window_left, window_right, softcap)
    _check_saved(do, q, o, lse)
    do, q, k, v, o, lse = (t.contiguous() for t in (do, q, k, v, o, lse))
    B, H, N_q, d = q.shape
    _, H_kv, N_k, _ = k.shape
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    ptrs = [t.data_ptr() for t in (q, k, v, o, do, lse, dq, dk, dv)]
    variant = (window_left, window_right, softcap) != (-1, -1, 0.0)
    lib06 = _lib.lib("fa06")
    if q.device.type == "cpu":
        sizes = (B, H, H_kv, N_q, N_k, d, int(causal), scale, 0, 0, 0)
        s = (lib06.fa06_backward_cpu_variant(*ptrs, *sizes, window_left, window_right, softcap) if variant
             else lib06.fa06_backward_cpu(*ptrs, *sizes))
    else:
        _, bwd = kernels_for(q.device, q.dtype, d, kernel)
        sizes = (B, H, H_kv, N_q, N_k, d, _DTYPE_CODE[q.dtype], int(causal), scale)
        with torch.cuda.device(q.device):
            if variant:  # the kernel asked for: its plan takes the window and softcap, or refuses them
                s = lib06.fa06_backward_variant((kernel.partition(",")[2] or "auto").encode(), *ptrs, *sizes,
                                                window_left, window_right, softcap, _stream(q))
            else:
                s = lib06.fa06_backward(bwd.encode(), *ptrs, *sizes, _stream(q))
    _lib.check("fa06", s)
    return dq, dk, dv


@attention_bwd.register_fake
def _(do, q, k, v, o, lse, causal, scale, kernel, window_left=-1, window_right=-1, softcap=0.0):
    _check(q, k, v, causal, None, kernel, window_left, window_right, None)
    _check_saved(do, q, o, lse)
    return (torch.empty_like(q, memory_format=torch.contiguous_format),
            torch.empty_like(k, memory_format=torch.contiguous_format),
            torch.empty_like(v, memory_format=torch.contiguous_format))


# ---- autograd: the forward saves Q, K, V, O and LSE (O(N d)), never P (O(N^2)) ------------------

def _setup_context(ctx, inputs, output):
    q, k, v, causal, scale, kernel, window_left, window_right, softcap = inputs  # defaults filled in
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.causal, ctx.scale, ctx.kernel = causal, scale, kernel
    ctx.window_left, ctx.window_right, ctx.softcap = window_left, window_right, softcap
    ctx.mark_non_differentiable(lse)


def _backward(ctx, grad_o, grad_lse):
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = attention_bwd(grad_o, q, k, v, o, lse, ctx.causal, ctx.scale, ctx.kernel, ctx.window_left,
                               ctx.window_right, ctx.softcap)
    return dq, dk, dv, None, None, None, None, None, None


torch.library.register_autograd("fa_course::attention_fwd", _backward, setup_context=_setup_context)


# ---- the public function -----------------------------------------------------------------------

def attention(q, k, v, *, causal=False, scale=None, kernel="auto", return_lse=False, window=None, softcap=None):
    """softmax(scale * q k^T [+ causal mask]) v with the course's kernels, differentiable.

    q: [B, H, N_q, d]; k, v: [B, H_kv, N_k, d] with H % H_kv == 0 (GQA/MQA: query head h reads
    kv head h // (H // H_kv), PyTorch's enable_gqa convention). d <= 256.
    causal: BOTTOM-RIGHT aligned, as everywhere in the course and in FlashAttention >= 2.1: query i
        sees key j iff j <= i + N_k - N_q (torch.nn.attention.bias.causal_lower_right). PyTorch's
        scaled_dot_product_attention(is_causal=True) is TOP-LEFT (j <= i); the two agree only when
        N_q == N_k. A query row that sees no key (N_q > N_k) gets O = 0 and LSE = -inf.
    scale: the softmax scale (default 1/sqrt(d)).
    kernel: "auto" (the fastest measured for the GPU, dtype and d: stage 05's and stage 06's own
        "auto"), or a stage 05 kernel name ("v1" ... "v13") for the GPU forward, optionally with a
        stage 06 one after a comma ("v5,gpu_v3"); the CPU takes only "auto".
    return_lse: also return LSE [B, H, N_q] (float32, natural log; not differentiable).
    window: None, or (left, right), integers >= -1: a sliding window, as FlashAttention's
        window_size. Query i sees key j iff
            i + N_k - N_q - left <= j <= i + N_k - N_q + right
        (-1: that side unbounded; with causal the right side is 0). Rows that see no key: O = 0.
    softcap: None, or c > 0: each scaled score s becomes c * tanh(s / c) before the mask and the
        softmax (Gemma 2), in the backward too.
        With either, the GPU forward runs v1 or v13 (kernel "auto", "v1" or "v13"; others raise
        NotImplementedError), the GPU backward what stage 06's plan allows; the CPU runs both.
    Non-contiguous inputs are copied to contiguous ones first (the kernels read dense rows).
    Bad input raises ValueError or TypeError with a one-line message naming the argument.
    """
    _check(q, k, v, causal, scale, kernel)
    left, right, cap = _variant_args(window, softcap, causal)
    if (left, right, cap) == (-1, -1, 0.0):  # the op as before: old graphs and callers unchanged
        o, lse = attention_fwd(q, k, v, causal, 0.0 if scale is None else float(scale), kernel)
    else:
        o, lse = attention_fwd(q, k, v, causal, 0.0 if scale is None else float(scale), kernel, left, right, cap)
    return (o, lse) if return_lse else o


# ---- decode on a KV cache (issue 33; common/kv_cache.hpp gives the semantics) ----------------

def _check_cache(q, k_cache, v_cache, cache_lens, block_table, validate):
    """The cache's checks; returns (N_k, page_size, pages_per_seq, num_pages)."""
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name}: expected a 4-dimensional torch.Tensor, found "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    if q.device.type != "cuda" or q.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"q: expected a CUDA fp16 or bf16 tensor (stage 05's v14), found {q.dtype} on {q.device}")
    if not (q.device == k_cache.device == v_cache.device) or not (q.dtype == k_cache.dtype == v_cache.dtype):
        raise ValueError("q, k_cache, v_cache: expected one device and one dtype")
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache/v_cache: expected one shape, found {tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    if k_cache.shape[3] != q.shape[3]:
        raise ValueError(f"--head-dim: expected k_cache's head dim {k_cache.shape[3]} to equal q's, found {q.shape[3]}")
    B = q.shape[0]
    for name, t, n in (("cache_lens", cache_lens, 1), ("block_table", block_table, 2)):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.device != q.device or t.dim() != n \
                or t.shape[0] != B:
            raise ValueError(f"{name}: expected an int32 tensor on {q.device} of {n} dimension(s), first {B} (the "
                             f"batch), found {t.dtype if isinstance(t, torch.Tensor) else type(t).__name__} "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else ''}")
    if block_table is None:
        if k_cache.shape[0] != B:
            raise ValueError(f"k_cache: expected [B, H_kv, N_k, d] with B = {B} (no block_table), found {tuple(k_cache.shape)}")
        N_k, P, pages, num_pages = k_cache.shape[2], 0, 0, 0
    else:
        num_pages, _, P, _ = k_cache.shape  # [num_pages, H_kv, page_size, d]
        pages = block_table.shape[1]
        N_k = pages * P
        if not 16 <= P <= 256:
            raise ValueError(f"k_cache: expected pages of 16 ... 256 keys ([num_pages, H_kv, page_size, d]), found {P}")
        if validate and block_table.numel() and (block_table.min() < 0 or block_table.max() >= num_pages):
            # (entries past a sequence's last key are never read, but are held to the range too)
            raise ValueError(f"block_table: expected pages 0 ... {num_pages - 1}, found "
                             f"{int(block_table.min())} ... {int(block_table.max())}")
    if validate and cache_lens is not None and cache_lens.numel() and (cache_lens.min() < 0 or cache_lens.max() > N_k):
        raise ValueError(f"cache_lens: expected lengths 0 ... {N_k} (the cache's capacity), found "
                         f"{int(cache_lens.min())} ... {int(cache_lens.max())}")
    return N_k, P, pages, num_pages


@torch.library.custom_op("fa_course::decode_fwd", mutates_args=())
def decode_fwd(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_lens: Optional[torch.Tensor],
               block_table: Optional[torch.Tensor], causal: bool, scale: float, kernel: str,
               validate: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """O [B,H,N_q,d] and LSE [B,H,N_q] of q against a KV cache; scale 0 means 1/sqrt(d)."""
    N_k, P, pages, num_pages = _check_cache(q, k_cache, v_cache, cache_lens, block_table, validate)
    q, k_cache, v_cache = q.contiguous(), k_cache.contiguous(), v_cache.contiguous()
    cache_lens = None if cache_lens is None else cache_lens.contiguous()
    block_table = None if block_table is None else block_table.contiguous()
    B, H, N_q, d = q.shape
    H_kv = k_cache.shape[1]
    o = torch.empty_like(q)
    lse = torch.empty((B, H, N_q), dtype=torch.float32, device=q.device)
    ptr = lambda t: None if t is None else t.data_ptr()  # noqa: E731
    with torch.cuda.device(q.device):
        s = _lib.lib("fa05").fa05_forward_kvcache(kernel.encode(), q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(),
                                                  o.data_ptr(), lse.data_ptr(), B, H, H_kv, N_q, N_k, d,
                                                  _DTYPE_CODE[q.dtype], int(causal), scale, ptr(cache_lens),
                                                  ptr(block_table), P, pages, num_pages, _stream(q))
    _lib.check("fa05", s)
    return o, lse


@decode_fwd.register_fake
def _(q, k_cache, v_cache, cache_lens, block_table, causal, scale, kernel, validate):
    B, H, N_q, _ = q.shape
    return torch.empty_like(q, memory_format=torch.contiguous_format), q.new_empty((B, H, N_q), dtype=torch.float32)


def decode(q, k_cache, v_cache, *, cache_lens=None, block_table=None, causal=False, scale=None, kernel="auto",
           return_lse=False, validate=True):
    """Attention of a few new query rows against a KV cache (stage 05's v14: split-KV, GQA packing).

    q: [B, H, N_q, d] fp16/bf16 on the GPU (N_q: 1, or a few for speculative decoding).
    k_cache, v_cache: [B, H_kv, N_k, d] (N_k the capacity per sequence), or with block_table
        [num_pages, H_kv, page_size, d] (page_size 16 ... 256). NB the course's pages are head-major;
        vLLM's and FlashAttention's are [num_pages, page_size, H_kv, d]: pass k.transpose(1, 2).
    cache_lens: int32 [B] on the GPU, sequence b's keys (0 ... N_k); None: N_k each. The causal
        diagonal is aligned to it (query i sees key j iff j <= i + cache_lens[b] - N_q).
    block_table: int32 [B, pages_per_seq] on the GPU; row b lists sequence b's pages in order.
    validate: check the lengths and the table's entries (one GPU-to-host copy, a synchronisation);
        False skips it (the kernel then clamps lengths and reads zeros for a page out of range).
    Returns O [B, H, N_q, d] (and LSE [B, H, N_q], float32). Not differentiable (a decode step).
    Bad input raises ValueError or TypeError with a one-line message naming the argument.
    """
    if scale is not None and not _valid_scale(scale):
        raise ValueError(f"scale: expected a normal float32 > 0 or None, found {scale!r}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal: expected True or False, found {causal!r}")
    o, lse = decode_fwd(q, k_cache, v_cache, cache_lens, block_table, causal, 0.0 if scale is None else float(scale),
                        kernel, validate)
    return (o, lse) if return_lse else o


# ---- packed variable-length batches (issue 34; common/varlen.hpp gives the semantics) --------

_I32_MAX = 2 ** 31 - 1


def _check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, kernel, window_left=-1, window_right=-1,
                  softcap=0.0):
    """The varlen ops' checks that read no tensor's values (the fakes make them too): the packed
    tensors [total, heads, d], the offsets' dtype, device and size, and what _check holds a plain
    problem to."""
    _check_tensors(q, k, v, 3, "[total_tokens, heads, d] (a packed batch)", (torch.float16, torch.bfloat16),
                   "float16 or bfloat16 (the packed GPU kernels)")
    if k.shape != v.shape:
        raise ValueError(f"k, v: expected one shape, found {tuple(k.shape)} and {tuple(v.shape)}")
    total_q, H, d = q.shape
    total_k, H_kv, dk = k.shape
    if dk != d:
        raise ValueError(f"--head-dim: expected k's head dim {dk} to equal q's, found {d}")
    for flag, x in (("--heads", H), ("--kv-heads", H_kv), ("--head-dim", d)):
        if x < 1:
            raise ValueError(f"{flag}: expected an integer >= 1, found {x}")
    for name, x in (("q", total_q), ("k", total_k)):
        if not 1 <= x <= _I32_MAX:
            raise ValueError(f"{name}: expected 1 to 2^31 - 1 tokens (int32 offsets), found {x}")
    if H % H_kv != 0:
        raise ValueError(f"--kv-heads: expected a divisor of --heads ({H}), found {H_kv}")
    if d > MAX_HEAD_DIM:
        raise ValueError(f"--head-dim: expected at most {MAX_HEAD_DIM}, found {d}")
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if not isinstance(cu, torch.Tensor) or cu.dtype != torch.int32 or cu.device != q.device or cu.dim() != 1 \
                or cu.shape[0] < 2:
            raise ValueError(f"{name}: expected an int32 tensor [B + 1] (B >= 1) on q's device {q.device}, found "
                             + (f"{cu.dtype} {tuple(cu.shape)} on {cu.device}" if isinstance(cu, torch.Tensor)
                                else type(cu).__name__))
    if cu_seqlens_k.shape[0] != cu_seqlens_q.shape[0]:
        raise ValueError(f"cu_seqlens_k: expected {cu_seqlens_q.shape[0]} offsets (as cu_seqlens_q: B + 1), found "
                         f"{cu_seqlens_k.shape[0]}")
    if scale is not None and not _valid_scale(scale):
        raise ValueError(f"--scale: expected a number between {_F32_TINY:.7g} and {_F32_MAX:.7g} (a normal float32 "
                         f"> 0), or None for 1/sqrt(d), found {scale!r}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal: expected True or False, found {causal!r}")


_I32_MAX = 2**31 - 1


def _check_max_seqlen(name, x):
    """max_seqlen_q/k as the ops take them: an integer >= 0 (at most 2^31 - 1), or -1 for "compute it"."""
    if not _is_int(x) or x < -1 or x > _I32_MAX:
        raise (TypeError if not _is_int(x) else ValueError)(
            f"{name}: expected None or an integer >= the longest sequence, found {x!r}")


def _varlen_offsets(cu_seqlens_q, cu_seqlens_k, total_q, total_k, max_seqlen_q, max_seqlen_k):
    """The offsets' values, checked on one host copy of each array (a device-to-host copy and a
    synchronisation on the GPU): cu[0] = 0, non-decreasing, cu[B] = the token count, and
    max_seqlen_q/k (-1: none given) >= every sequence's length. Returns (cu_q, cu_k, max_q, max_k):
    the offsets as Python lists and the longest lengths."""
    out = []
    for name, cu, total, given, mname in (("cu_seqlens_q", cu_seqlens_q, total_q, max_seqlen_q, "max_seqlen_q"),
                                          ("cu_seqlens_k", cu_seqlens_k, total_k, max_seqlen_k, "max_seqlen_k")):
        c = cu.tolist()
        if c[0] != 0:
            raise ValueError(f"{name}: expected cu[0] = 0, found cu[0] = {c[0]}")
        for b in range(1, len(c)):
            if c[b] < c[b - 1]:
                raise ValueError(f"{name}: expected non-decreasing offsets (lengths cu[b+1] - cu[b] >= 0), found "
                                 f"cu[{b}] = {c[b]} < cu[{b - 1}] = {c[b - 1]}")
        which = "q" if name.endswith("q") else "k"
        if c[-1] != total:
            raise ValueError(f"{name}: expected cu[B] = {total} ({which}'s tokens), found cu[{len(c) - 1}] = {c[-1]}")
        longest = max(c[b + 1] - c[b] for b in range(len(c) - 1))
        if given != -1 and given < longest:
            raise ValueError(f"{mname}: expected None or an integer >= the longest sequence ({longest}), found {given}")
        out.append(c)
        out.append(longest)
    cq, mq, ck, mk = out
    return cq, ck, mq, mk


@torch.library.custom_op("fa_course::attention_varlen_fwd", mutates_args=())
def attention_varlen_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                         cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, causal: bool, scale: float,
                         kernel: str, window_left: int = -1, window_right: int = -1,
                         softcap: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """O [total_q, H, d] and LSE [H, total_q] (float32, natural log) of a packed batch; max_seqlen
    -1 means "compute it", scale 0 means 1/sqrt(d), window sides -1 unbounded, softcap 0 none.
    Checks its inputs itself, the offsets' values on one host copy of each."""
    _check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, _scale_arg(scale), kernel, window_left, window_right,
                  softcap)
    _check_max_seqlen("max_seqlen_q", max_seqlen_q)
    _check_max_seqlen("max_seqlen_k", max_seqlen_k)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    cu_q, cu_k = cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous()
    total_q, H, d = q.shape
    total_k, H_kv, _ = k.shape
    _, _, max_q, max_k = _varlen_offsets(cu_q, cu_k, total_q, total_k, max_seqlen_q, max_seqlen_k)
    B = cu_q.shape[0] - 1
    o = torch.empty_like(q)
    lse = torch.empty((H, total_q), dtype=torch.float32, device=q.device)
    ptrs = [t.data_ptr() for t in (q, k, v, o, lse, cu_q, cu_k)]
    if q.device.type == "cpu":
        kernels_for(q.device, q.dtype, d, kernel)  # refuses a GPU kernel name on the CPU
        s = _lib.lib("fa04").fa04_forward_varlen(*ptrs, B, total_q, total_k, H, H_kv, d, int(causal), scale, 0, 0, 0,
                                                 window_left, window_right, softcap)
        _lib.check("fa04", s)
    else:
        fwd = _lib.function("fa05", "fa05_forward_varlen")
        with torch.cuda.device(q.device):
            s = fwd(kernel.partition(",")[0].encode(), *ptrs, B, total_q, total_k, max_q, max_k, H, H_kv, d,
                    _DTYPE_CODE[q.dtype], int(causal), scale, window_left, window_right, softcap, _stream(q))
        _lib.check("fa05", s)
    return o, lse


@attention_varlen_fwd.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, scale, kernel, window_left=-1,
      window_right=-1, softcap=0.0):
    _check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, None, kernel, window_left, window_right, None)
    total_q, H, _ = q.shape
    return torch.empty_like(q, memory_format=torch.contiguous_format), q.new_empty((H, total_q), dtype=torch.float32)


def _check_saved_varlen(do, q, o, lse):
    """The varlen backward's extra inputs: dO and O as q, LSE [H, total_q] float32."""
    _check_saved_like(do, q, o)
    want = (q.shape[1], q.shape[0])
    if not isinstance(lse, torch.Tensor) or tuple(lse.shape) != want or lse.dtype != torch.float32 or lse.device != q.device:
        raise ValueError(f"lse: expected float32 [H, total_q] = {want} on {q.device}, found "
                         f"{(tuple(lse.shape), lse.dtype, str(lse.device)) if isinstance(lse, torch.Tensor) else type(lse).__name__}")


@torch.library.custom_op("fa_course::attention_varlen_bwd", mutates_args=())
def attention_varlen_bwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                         lse: torch.Tensor, cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor, max_seqlen_q: int,
                         max_seqlen_k: int, causal: bool, scale: float, kernel: str, window_left: int = -1,
                         window_right: int = -1,
                         softcap: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV of a packed batch from dO and what the forward kept. On the CPU stage 06's
    backward on the packed batch (fa06_backward_cpu_varlen); on the GPU stage 06's gpu_v3 on the
    packed batch in one launch (fa06_backward_varlen). Checks its inputs."""
    _check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, _scale_arg(scale), kernel, window_left, window_right,
                  softcap)
    _check_saved_varlen(do, q, o, lse)
    _check_max_seqlen("max_seqlen_q", max_seqlen_q)
    _check_max_seqlen("max_seqlen_k", max_seqlen_k)
    do, q, k, v, o, lse = (t.contiguous() for t in (do, q, k, v, o, lse))
    cu_q, cu_k = cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous()
    total_q, H, d = q.shape
    total_k, H_kv, _ = k.shape
    cq, ck, max_q, max_k = _varlen_offsets(cu_q, cu_k, total_q, total_k, max_seqlen_q, max_seqlen_k)
    B = len(cq) - 1
    if q.device.type == "cpu":
        kernels_for(q.device, q.dtype, d, kernel)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        ptrs = [t.data_ptr() for t in (q, k, v, o, do, lse, dq, dk, dv, cu_q, cu_k)]
        s = _lib.lib("fa06").fa06_backward_cpu_varlen(*ptrs, B, total_q, total_k, H, H_kv, d, int(causal), scale, 0, 0,
                                                      0, window_left, window_right, softcap)
        _lib.check("fa06", s)
        return dq, dk, dv
    # The GPU: stage 06's gpu_v3 on the packed batch in one launch (fa06_backward_varlen: each key
    # block reads its sequence's offsets; "auto" runs gpu_v3).
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    bwd = _lib.function("fa06", "fa06_backward_varlen")
    ptrs = [t.data_ptr() for t in (q, k, v, o, do, lse, dq, dk, dv, cu_q, cu_k)]
    with torch.cuda.device(q.device):
        s = bwd((kernel.partition(",")[2] or "auto").encode(), *ptrs, B, total_q, total_k, max_q, max_k, H,
                H_kv, d, _DTYPE_CODE[q.dtype], int(causal), scale, window_left, window_right,
                softcap, _stream(q))
    _lib.check("fa06", s)
    return dq, dk, dv


@attention_varlen_bwd.register_fake
def _(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, scale, kernel,
      window_left=-1, window_right=-1, softcap=0.0):
    _check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, None, kernel, window_left, window_right, None)
    _check_saved_varlen(do, q, o, lse)
    return (torch.empty_like(q, memory_format=torch.contiguous_format),
            torch.empty_like(k, memory_format=torch.contiguous_format),
            torch.empty_like(v, memory_format=torch.contiguous_format))


def _setup_context_varlen(ctx, inputs, output):
    (q, k, v, cu_q, cu_k, max_q, max_k, causal, scale, kernel, window_left, window_right, softcap) = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_k)
    ctx.max_q, ctx.max_k, ctx.causal, ctx.scale, ctx.kernel = max_q, max_k, causal, scale, kernel
    ctx.window_left, ctx.window_right, ctx.softcap = window_left, window_right, softcap
    ctx.mark_non_differentiable(lse)


def _backward_varlen(ctx, grad_o, grad_lse):
    q, k, v, o, lse, cu_q, cu_k = ctx.saved_tensors
    dq, dk, dv = attention_varlen_bwd(grad_o, q, k, v, o, lse, cu_q, cu_k, ctx.max_q, ctx.max_k, ctx.causal,
                                      ctx.scale, ctx.kernel, ctx.window_left, ctx.window_right, ctx.softcap)
    return (dq, dk, dv) + (None,) * 10


torch.library.register_autograd("fa_course::attention_varlen_fwd", _backward_varlen,
                                setup_context=_setup_context_varlen)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, *, causal=False,
                     scale=None, kernel="auto", return_lse=False, window=None, softcap=None):
    """attention() on a packed batch of sequences of different lengths, differentiable: the shape
    of FlashAttention's flash_attn_varlen_func.

    q: [total_q, H, d]; k, v: [total_k, H_kv, d] (H % H_kv == 0, d <= 256): B sequences
        concatenated along the token axis, no padding.
    cu_seqlens_q, cu_seqlens_k: int32 [B + 1] on q's device, cumulative offsets: cu[0] = 0,
        non-decreasing, cu_seqlens_q[B] = total_q, cu_seqlens_k[B] = total_k. Sequence b is the
        queries cu_seqlens_q[b] .. cu_seqlens_q[b+1] - 1 and the keys cu_seqlens_k[b] ..
        cu_seqlens_k[b+1] - 1; a length may be 0. Each sequence is attended as a problem of its
        own: no query sees a key of another sequence.
    max_seqlen_q, max_seqlen_k: None (computed), or an integer >= every sequence's length.
    causal, scale, kernel, window, softcap: as attention(), per sequence (the causal diagonal and
        the window aligned to each sequence's N_k(b) - N_q(b), bottom-right). A row that sees no
        key (its sequence has no key, or the mask) gets O = 0, LSE = -inf and dQ = 0; a key no
        row sees gets dK = dV = 0.
    return_lse: also return LSE [H, total_q] (float32, natural log; not differentiable), the
        layout of flash_attn_varlen_func.
    Returns O [total_q, H, d].

    What runs: on the CPU (float32) stage 04's forward and stage 06's backward on the packed
    batch (fa04_forward_varlen, fa06_backward_cpu_varlen: the stage's own loops per sequence, on
    offset pointers, no copies). On a GPU (float16, bfloat16) stage 05's packed forward
    (fa05_forward_varlen; kernel "auto" or "v13") and stage 06's packed backward
    (fa06_backward_varlen: gpu_v3 in one launch; kernel's backward part "auto" or "gpu_v3").
    The op reads the offsets' values: one host copy of cu_seqlens_q and of cu_seqlens_k per
    forward and per backward (on the GPU a device-to-host copy, which synchronises).
    Bad input raises ValueError or TypeError with a one-line message naming the argument (dtypes,
    devices, shapes, offsets that do not start at 0, decrease or do not end at the token count,
    a max_seqlen below a sequence's length).
    """
    _check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, kernel)
    left, right, cap = _variant_args(window, softcap, causal)
    maxes = []
    for name, x in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if x is None:
            maxes.append(-1)
            continue
        if not _is_int(x):
            raise TypeError(f"{name}: expected None or an integer >= the longest sequence, found {type(x).__name__}")
        if x < 0 or x > _I32_MAX:  # the kernels' token offsets are int32
            raise ValueError(f"{name}: expected None or an integer >= the longest sequence and <= 2^31 - 1, found {x}")
        maxes.append(int(x))
    o, lse = attention_varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, maxes[0], maxes[1], causal,
                                  0.0 if scale is None else float(scale), kernel, left, right, cap)
    return (o, lse) if return_lse else o
