#!/usr/bin/env python3
"""The GPU training grid of docs/results/torch_training_gpu.md: gpt.py at N = 1024 and a long
context, fa_course vs SDPA flash in bf16 and in fp16 (autocast; fp16 with a GradScaler), beside
an fp32 run (SDPA's efficient backend) as the yardstick; same seed, weights and batches.

    PYTHONPATH=python python3 python/examples/gpu_curves.py --json curves.json
"""
import os
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import argparse
import json
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--ctxs", default="1024,4096")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--heads", type=int, default=4)     # d = 128: stage 05's v12, stage 06's gpu_v4
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    runs = []
    grid = []
    for ctx in (int(c) for c in a.ctxs.split(",")):
        grid += [(ctx, a.batch, "sdpa_efficient", "fp32")]
        grid += [(ctx, a.batch, how, dt) for dt in ("bf16", "fp16") for how in ("fa", "sdpa_flash")]
    long_ctx = max(int(c) for c in a.ctxs.split(","))
    grid += [(long_ctx, 1, how, "fp16") for how in ("fa", "sdpa_flash")] + [(long_ctx, 1, "sdpa_efficient", "fp32")]
    for ctx, batch, how, dt in grid:
        t = time.time()
        try:
            r = gpt.train(how, steps=a.steps, ctx=ctx, batch=batch, dim=a.dim, heads=a.heads, layers=a.layers,
                          lr=1e-3, seed=0, device=a.device, dtype=dt)
        except Exception as e:  # a backend that refuses a shape: say so, go on
            print(f"ctx {ctx} batch {batch} {how} {dt}: FAILED {type(e).__name__}: {str(e).splitlines()[0][:200]}", flush=True)
            continue
        runs.append(r)
        L = r["losses"]
        print(f"ctx {ctx:5d} batch {batch} {how:>14} {dt}: loss {L[0]:.4f} -> {sum(L[-20:]) / 20:.4f} (last 20), "
              f"max |g| {max(r['grad_norms']):.3f}, non-finite |g| {sum(1 for g in r['grad_norms'] if g != g or g == float('inf'))}, "
              f"skipped {r['skipped']}, {r['tokens_per_s']:.0f} tokens/s, {time.time() - t:.1f} s", flush=True)
    # The gaps: each 16-bit curve against the fp32 one of its context, and fa vs flash in one dtype.
    by = {(r["ctx"], r["batch"], r["attn"], r["dtype"]): r["losses"] for r in runs}
    for (ctx, batch, how, dt), L in sorted(by.items()):
        ref = by.get((ctx, batch, "sdpa_efficient", "fp32"))
        if ref and dt != "fp32":
            print(f"gap ctx {ctx} batch {batch} {how} {dt} vs fp32: max relative {gpt.max_rel_gap(L, ref):.3e}, "
                  f"final {abs(L[-1] - ref[-1]) / ref[-1]:.3e}")
        if how == "fa":
            fl = by.get((ctx, batch, "sdpa_flash", dt))
            if fl:
                print(f"gap ctx {ctx} batch {batch} fa vs sdpa_flash {dt}: max relative {gpt.max_rel_gap(L, fl):.3e}")
    with open(a.json, "w") as f:
        json.dump({"device": torch.cuda.get_device_name() if a.device == "cuda" else "cpu", "torch": torch.__version__,
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "runs": runs}, f)


if __name__ == "__main__":
    main()
