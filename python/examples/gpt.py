#!/usr/bin/env python3
"""A small GPT, trained from scratch on one public-domain text, with its attention switchable:
fa_course.attention (the course's kernels) or PyTorch's scaled_dot_product_attention.

Same seed, same initial weights, same batches in the same order for every choice, so two runs
differ only in how attention rounds. Characters are the tokens (the text's own alphabet).

    PYTHONPATH=python python3 python/examples/gpt.py --attn fa --steps 200
    PYTHONPATH=python python3 python/examples/gpt.py --compare fa,sdpa_math --steps 200   # both, and the gap

On a GPU: --device cuda --dtype bf16 (autocast) or --dtype fp16 (autocast and a GradScaler).
"""
# Two OpenMP runtimes share the cores here: PyTorch's own copy and the system's, which the course's
# libraries use. Their threads spin-wait between parallel regions by default and starve each
# other: on 2 busy cores a small GPT trained 20-40x slower. Passive waiting, set before torch is
# imported (each runtime reads it once, when it starts), removes that (docs/pytorch.md).
import os
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

TEXT = Path(__file__).resolve().parents[2] / "data" / "kjv_genesis_1-11.txt"
BACKENDS = {"sdpa_math": SDPBackend.MATH, "sdpa_flash": SDPBackend.FLASH_ATTENTION,
            "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION}


def attend(q, k, v, how):
    """Causal self-attention, q, k, v [B, H, N, d]; N_q == N_k, so top-left = bottom-right."""
    if how == "fa":
        import fa_course
        return fa_course.attention(q, k, v, causal=True)
    with sdpa_kernel(BACKENDS[how]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Block(nn.Module):
    def __init__(self, dim, heads, how):
        super().__init__()
        self.heads, self.how = heads, how
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        y = attend(q, k, v, self.how)                       # [B, H, N, d]
        x = x + self.proj(y.transpose(1, 2).reshape(B, N, C))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, ctx, dim, heads, layers, how):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(ctx, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, how) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def train(how, steps=200, ctx=64, batch=16, dim=64, heads=4, layers=2, lr=3e-3, seed=0, device="cpu",
          dtype="fp32", text=TEXT, log_every=0):
    """Trains one model; returns {losses, grad_norms, skipped, tokens_per_s, ...} (lists per step)."""
    data = text.read_text(encoding="utf-8")
    chars = sorted(set(data))
    ids = torch.tensor([chars.index(c) for c in data], dtype=torch.long)
    torch.manual_seed(seed)                                   # the same initial weights for every `how`
    model = GPT(len(chars), ctx, dim, heads, layers, how).to(device)
    if dtype == "fp64":
        model = model.double()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype)
    scaler = torch.amp.GradScaler(device, enabled=(dtype == "fp16"))
    order = torch.Generator().manual_seed(seed + 1)           # the same batches, in the same order
    out = {"attn": how, "dtype": dtype, "steps": steps, "ctx": ctx, "batch": batch, "dim": dim, "heads": heads,
           "layers": layers, "lr": lr, "seed": seed, "vocab": len(chars), "text": text.name,
           "losses": [], "grad_norms": [], "skipped": 0}
    t0 = None
    for step in range(steps):
        if step == 1:
            if device != "cpu":
                torch.cuda.synchronize()
            t0 = time.perf_counter()                          # step 0 (warm-up) not timed
        start = torch.randint(0, len(ids) - ctx - 1, (batch,), generator=order)
        xb = torch.stack([ids[s:s + ctx] for s in start]).to(device)
        yb = torch.stack([ids[s + 1:s + ctx + 1] for s in start]).to(device)
        with torch.autocast(device_type=torch.device(device).type, dtype=amp, enabled=amp is not None):
            logits = model(xb)
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), yb.view(-1))
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scale_before = scaler.get_scale() if scaler.is_enabled() else 1.0
        scaler.step(opt)
        scaler.update()
        if scaler.is_enabled() and scaler.get_scale() < scale_before:
            out["skipped"] += 1                               # inf/NaN gradients: this step was skipped
        out["losses"].append(float(loss.detach()))
        out["grad_norms"].append(float(norm))
        if log_every and step % log_every == 0:
            print(f"  {how} step {step:4d} loss {float(loss):.4f} |g| {float(norm):.3f}", file=sys.stderr)
    if device != "cpu":
        torch.cuda.synchronize()
    out["tokens_per_s"] = (steps - 1) * batch * ctx / (time.perf_counter() - t0) if steps > 1 else 0.0
    return out


def max_rel_gap(a, b):
    """max over steps of |a - b| / |b| (two loss curves)."""
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--attn", default="fa", help="fa, " + ", ".join(BACKENDS))
    ap.add_argument("--compare", default=None, help="two or more --attn values, comma-separated: run each")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--ctx", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32", help="fp32, fp64 (sdpa only), bf16, fp16 (autocast)")
    ap.add_argument("--json", default=None, help="write every run's curves here")
    ap.add_argument("--log-every", type=int, default=50)
    a = ap.parse_args()
    kw = dict(steps=a.steps, ctx=a.ctx, batch=a.batch, dim=a.dim, heads=a.heads, layers=a.layers, lr=a.lr,
              seed=a.seed, device=a.device, dtype=a.dtype, log_every=a.log_every)
    runs = [train(h, **kw) for h in (a.compare.split(",") if a.compare else [a.attn])]
    for r in runs:
        L = r["losses"]
        print(f"{r['attn']:>14} {r['dtype']}: loss {L[0]:.4f} -> {sum(L[-10:]) / len(L[-10:]):.4f} (last 10), "
              f"max |g| {max(r['grad_norms']):.3f}, skipped {r['skipped']}, {r['tokens_per_s']:.0f} tokens/s")
    for r in runs[1:]:
        print(f"max relative loss gap {runs[0]['attn']} vs {r['attn']}: {max_rel_gap(runs[0]['losses'], r['losses']):.3e}")
    if a.json:
        Path(a.json).write_text(json.dumps(runs))


if __name__ == "__main__":
    main()
