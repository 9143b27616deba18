#!/usr/bin/env python3
"""Plots docs/results/torch_gpu/curves*.json (python/examples/gpu_curves.py's output): per context
and batch, each 16-bit run's loss relative to the fp32 run, step by step, and the loss itself.
Needs matplotlib (tools/plots.sh's venv: build/plot-venv/bin/python).

    build/plot-venv/bin/python python/examples/plot_curves.py docs/results/torch_gpu/curves.json \
        docs/results/torch_gpu/curves_8192.json --out docs/results/torch_gpu/training_gpu.png
"""
import argparse
import json

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json", nargs="+")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    runs, meta = [], None
    for path in a.json:
        d = json.load(open(path))
        meta = meta or d
        runs += d["runs"]
    groups = sorted({(r["ctx"], r["batch"]) for r in runs})
    fig, axes = plt.subplots(2, len(groups), figsize=(4.2 * len(groups), 6.4), squeeze=False)
    for col, (ctx, batch) in enumerate(groups):
        rs = [r for r in runs if (r["ctx"], r["batch"]) == (ctx, batch)]
        ref = next(r for r in rs if r["dtype"] == "fp32")["losses"]
        for r in rs:
            label = f"{'fa_course' if r['attn'] == 'fa' else r['attn']} {r['dtype']}"
            axes[0][col].plot(r["losses"], label=label, lw=0.8)
            if r["dtype"] != "fp32":
                rel = [(x - y) / y for x, y in zip(r["losses"], ref)]
                axes[1][col].plot(rel, label=label, lw=0.8)
        axes[0][col].set_title(f"N = {ctx}, batch {batch}")
        axes[0][col].set_ylabel("training loss")
        axes[1][col].set_ylabel("(loss - loss fp32) / loss fp32")
        axes[1][col].set_xlabel("step")
        axes[1][col].axhline(0, color="k", lw=0.5)
        axes[0][col].legend(fontsize=7)
        axes[1][col].legend(fontsize=7)
    fig.suptitle(f"small GPT (python/examples/gpt.py), {meta['device']}, torch {meta['torch']}, {meta['date']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
