#!/usr/bin/env python3
"""Plots of the numerics chapter (docs/numerics.md), from committed JSON only.

Reads  docs/results/precision.json   (written by build/numerics/numerics_precision)
Writes docs/img/numerics_error_vs_n.png       O error vs N per format and accumulator
       docs/img/numerics_error_vs_block.png   O error vs key block size Bc (N = 4096)
       docs/img/numerics_ablation.png         which rounded part makes the 16-bit error

Run it through tools/plots.sh (pinned matplotlib in build/plot-venv), which also draws the
stage benchmarks' time and memory plots (tools/plot_results.py).
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "docs", "results")
IMG = os.path.join(ROOT, "docs", "img")

# (format, accum) -> colour; solid = fp32 arithmetic, dashed = storage-precision arithmetic.
STYLE = {
    ("fp32", "fp32"): ("black", "-"),
    ("fp16", "fp32"): ("tab:blue", "-"),
    ("fp16", "fp16"): ("tab:blue", "--"),
    ("bf16", "fp32"): ("tab:red", "-"),
    ("bf16", "bf16"): ("tab:red", "--"),
}


def load_precision():
    with open(os.path.join(RESULTS, "precision.json")) as f:
        return json.load(f)


def select(rows, **kw):
    return [r for r in rows if all(r[k] == v for k, v in kw.items())]


def series(rows, x, y):
    pts = sorted((r[x], r[y]) for r in rows if r[y] is not None and r[y] > 0)
    return [p[0] for p in pts], [p[1] for p in pts]


def footer(fig, meta):
    fig.text(0.01, 0.005, f"{meta['command']}  |  {meta['date'][:10]}  |  {meta['cpu']}, 1 thread",
             fontsize=7, color="0.4")


def plot_error_vs_n(data):
    rows = select(data["rows"], sweep="N")
    inputs = [("randn", "logits ~ N(0, 1)"), ("randn_sharp", "logits ~ N(0, 16): sharp rows"),
              ("randn_flat", "logits ~ N(0, 0.0025): nearly uniform rows")]
    fig, axes = plt.subplots(1, 3, figsize=(16, 5.2), sharey=True)
    for ax, (inp, title) in zip(axes, inputs):
        for (fmt, acc), (col, ls) in STYLE.items():
            xs, ys = series(select(rows, input=inp, format=fmt, accum=acc, order="online"), "N", "O_rms")
            ax.plot(xs, ys, ls, color=col, marker="o", ms=3, label=f"{fmt} inputs, {acc} arithmetic (stage 03)")
            if acc == "fp32":
                xs, ys = series(select(rows, input=inp, format=fmt, accum=acc, order="tiled", Bc=16), "N", "O_rms")
                if fmt != "fp32":
                    continue
                ax.plot(xs, ys, ":", color=col, marker="s", ms=3, label="fp32, stage 04 tiled, Bc = 16")
        for fmt, col in (("fp16", "tab:blue"), ("bf16", "tab:red")):
            xs, ys = series(select(rows, input=inp, format=fmt, order="ablate:inputs"), "N", "O_rms")
            ax.plot(xs, ys, ":", color=col, lw=2.5, alpha=0.5, label=f"{fmt}: exact arithmetic on rounded inputs")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("N (keys)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("RMS error of O vs float64 reference")
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle("Attention output error vs sequence length (d = 64, 128 query rows per N)")
    footer(fig, data["meta"])
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    fig.savefig(os.path.join(IMG, "numerics_error_vs_n.png"), dpi=110)
    plt.close(fig)


def plot_error_vs_block(data):
    rows = select(data["rows"], sweep="blocks")
    inputs = [("randn", "logits ~ N(0, 1)"), ("randn_sharp", "logits ~ N(0, 16)")]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2), sharey=True)
    for ax, (inp, title) in zip(axes, inputs):
        sel = select(rows, input=inp)
        if not sel:
            continue
        N = sel[0]["N"]
        for (fmt, acc), (col, ls) in STYLE.items():
            xs, ys = series(select(sel, format=fmt, accum=acc, order="merge"), "Bc", "O_rms")
            ax.plot(xs, ys, ls, color=col, marker="o", ms=3, label=f"{fmt}/{acc}: stage 03 partial + merge")
            if acc == "fp32":
                xs, ys = series(select(sel, format=fmt, accum=acc, order="tiled"), "Bc", "O_rms")
                ax.plot(xs, ys, ":", color=col, marker="s", ms=3, label=f"{fmt}/{acc}: stage 04 tiled")
            safe = select(sel, format=fmt, accum=acc, order="safe")
            if safe and safe[0]["O_rms"]:
                ax.axhline(safe[0]["O_rms"], color=col, ls=ls, lw=0.8, alpha=0.5)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{title}, N = {N} (thin lines: stage 02, materialised)", fontsize=10)
        ax.set_xlabel("Bc (keys per block); N / Bc blocks are merged")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("RMS error of O vs float64 reference")
    axes[0].legend(fontsize=7, loc="center left")
    fig.suptitle("Attention output error vs key block size")
    footer(fig, data["meta"])
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    fig.savefig(os.path.join(IMG, "numerics_error_vs_block.png"), dpi=110)
    plt.close(fig)


def plot_ablation(data):
    rows = select(data["rows"], sweep="N")
    parts = [("inputs", "tab:gray"), ("scores", "tab:orange"), ("exp", "tab:olive"),
             ("sum", "tab:purple"), ("output", "tab:green"), ("all", "black")]
    panels = [("randn", "fp16"), ("randn", "bf16"), ("randn_flat", "fp16")]
    fig, axes = plt.subplots(1, 3, figsize=(16, 5.2), sharey=True)
    for ax, (inp, fmt) in zip(axes, panels):
        for part, col in parts:
            xs, ys = series(select(rows, input=inp, format=fmt, order="ablate:" + part), "N", "O_rms")
            ax.plot(xs, ys, "-", color=col, marker="o", ms=3,
                    lw=2.5 if part == "all" else 1.5, label=f"only {part} rounded to {fmt}")
        xs, ys = series(select(rows, input=inp, format=fmt, accum="fp32", order="online"), "N", "O_rms")
        ax.plot(xs, ys, "--", color="tab:blue", label=f"stage 03, {fmt} inputs, fp32 arithmetic")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{inp}, {fmt}", fontsize=10)
        ax.set_xlabel("N (keys)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("RMS error of O vs float64 reference")
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle("Ablation: safe softmax in float64 with ONE part rounded to the 16-bit format")
    footer(fig, data["meta"])
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    fig.savefig(os.path.join(IMG, "numerics_ablation.png"), dpi=110)
    plt.close(fig)



def main():
    os.makedirs(IMG, exist_ok=True)
    data = load_precision()
    plot_error_vs_n(data)
    plot_error_vs_block(data)
    plot_ablation(data)
    for name in sorted(os.listdir(IMG)):
        if name.startswith("numerics_"):
            print("wrote", os.path.join("docs", "img", name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
