"""Plot stage 05 beside PyTorch's SDPA backends from docs/results/compare_torch_05.json.

  docs/img/gpu_tflops_vs_N.png   bf16 forward TFLOP/s vs N, d = 64 and 128, causal and not: our
                                 kernels (v1 ... v12, the cuBLAS materialised baseline) and SDPA's
                                 flash, cuDNN, efficient and math backends, measured in one process
  docs/img/gpu_versions.png      the path from v1 to v12: bf16 TFLOP/s per version at N = 8192,
                                 with SDPA's flash (FlashAttention-2) and cuDNN as lines
  docs/img/gpu_bwd_tflops_vs_N.png  the backward: stage 06's GPU kernels (bench_06_backward_gpu.json)
                                 beside SDPA's backward (compare_torch_bwd.json), bf16, vs N
  docs/img/gpu_error_vs_N.png    max |O - O64| vs N per dtype (gpu_numerics.json, tools/gpu_numerics.py):
                                 v2 and v7, the cuBLAS baseline, SDPA's backends, naive16, and the input
                                 rounding, random inputs, d = 64 and 128

Usage: python3 tools/plot_gpu.py [--results docs/results] [--out docs/img]
(tools/plots.sh makes the venv with matplotlib and runs every plot script.)
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {
    "fa05 v1": ("tab:red", "o", "-"),
    "fa05 v2": ("tab:blue", "s", "-"),
    "fa05 v3": ("tab:cyan", "s", "-"),
    "fa05 v4": ("tab:olive", "s", "-"),
    "fa05 v5": ("tab:brown", "*", "-"),
    "fa05 v6": ("tab:pink", "P", "-"),
    "fa05 v7": ("darkred", "X", "-"),
    "fa05 v8": ("darkgreen", "P", "-"),
    "fa05 v9": ("navy", "d", "-"),
    "fa05 v10": ("darkorange", "h", "-"),
    "fa05 v11": ("crimson", "X", "-"),
    "fa05 v12": ("darkviolet", "*", "-"),
    "fa05 cublas": ("tab:orange", "^", "-"),
    "sdpa flash": ("black", "D", "--"),
    "sdpa cudnn": ("tab:gray", "v", "--"),
    "sdpa efficient": ("tab:green", "x", "--"),
    "sdpa math": ("tab:purple", "+", "--"),
}


PANELS = [(64, False), (64, True), (128, False), (128, True)]


def tflops_panels(series, ylabel, title, path):
    """Four panels (d 64/128, causal or not) of TFLOP/s vs N; series: (label, color, marker,
    linestyle, points), points a list of (d, causal, N, TFLOP/s)."""
    fig, axes = plt.subplots(2, 2, figsize=(11, 8), sharex=True, sharey=True)
    for ax, (d, causal) in zip(axes.flat, PANELS):
        for label, color, marker, ls, pts in series:
            xy = sorted((n, t) for dd, c, n, t in pts if dd == d and c == causal)
            if xy:
                ax.plot([p[0] for p in xy], [p[1] for p in xy], ls, color=color, marker=marker, label=label)
        ax.set_xscale("log", base=2)
        ax.set_title(f"d = {d}, {'causal' if causal else 'not causal'}")
        ax.grid(True, alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("sequence length N (B*N = 16384 tokens, H = 2048/d)")
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel)
    # One legend for every series, wherever it has points (a kernel that runs only at d = 128 has
    # none in the first panel), in the order given.
    handles = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    order = [s[0] for s in series if s[0] in handles]
    axes[0, 0].legend([handles[lab] for lab in order], order, fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print("wrote", path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", default="docs/results")
    ap.add_argument("--out", default="docs/img")
    a = ap.parse_args()
    data = json.load(open(os.path.join(a.results, "compare_torch_05.json")))
    rows = [r for r in data["rows"] if r["dtype"] == "bf16" and r["tflops"]]
    os.makedirs(a.out, exist_ok=True)
    series = [(impl, color, marker, ls, [(r["d"], r["causal"], r["N"], r["tflops"]) for r in rows if r["impl"] == impl])
              for impl, (color, marker, ls) in STYLE.items()]
    tflops_panels(series, "TFLOP/s (bf16 forward)",
                  f"Stage 05 beside PyTorch SDPA, {data['device']}, {data['date']} (tools/compare_torch.py)",
                  os.path.join(a.out, "gpu_tflops_vs_N.png"))
    versions(rows, data, a.out)
    backward(a.results, a.out)
    errors(a.results, a.out)


def versions(rows, data, out, n=8192):
    """Bars: TFLOP/s of each version at N = n, four panels (d, causal); flash and cuDNN as lines."""
    names = [v for v in ("fa05 v1", "fa05 v2", "fa05 v3", "fa05 v4", "fa05 v5", "fa05 v6", "fa05 v7", "fa05 v8", "fa05 v9", "fa05 v10", "fa05 v11", "fa05 v12") if any(r["impl"] == v for r in rows)]
    fig, axes = plt.subplots(1, 4, figsize=(15, 4), sharey=True)
    for ax, (d, causal) in zip(axes, [(64, False), (64, True), (128, False), (128, True)]):
        at = {r["impl"]: r["tflops"] for r in rows if r["N"] == n and r["d"] == d and r["causal"] == causal}
        # A version with no row at this point falls back to another there (v8 at d = 64 runs v7,
        # v10 ... v12 run v9): no bar, a "-" as in the tables.
        vals = [at.get(v) for v in names]
        ax.bar([v.split()[1] for v in names], [y or 0 for y in vals], color=[STYLE[v][0] for v in names])
        for x, y in enumerate(vals):
            ax.text(x, y or 0, f"{y:.0f}" if y else "-", ha="center", va="bottom", fontsize=8)
        for ref, ls in (("sdpa flash", "--"), ("sdpa cudnn", ":")):
            if ref in at:
                ax.axhline(at[ref], color="black", ls=ls, lw=1, label=f"{ref} {at[ref]:.0f}")
        ax.set_title(f"d = {d}, {'causal' if causal else 'not causal'}, N = {n}")
        ax.legend(fontsize=7, loc="upper left")
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].set_ylabel("TFLOP/s (bf16 forward)")
    # No date in this title: the lesson embeds this plot; the run's date is in the notebook and the JSON.
    fig.suptitle(f"Stage 05, one idea per version, {data['device']} (tools/compare_torch.py; "
                 "-: falls back to another version there)")
    fig.tight_layout()
    path = os.path.join(out, "gpu_versions.png")
    fig.savefig(path, dpi=110)
    print("wrote", path)


BWD_STYLE = {
    "gpu_v2:bf16": ("tab:blue", "s", "-", "gpu_v2"),
    "gpu_v2_det:bf16": ("tab:blue", "s", ":", "gpu_v2_det"),
    "gpu_v3:bf16": ("tab:brown", "*", "-", "gpu_v3"),
    "gpu_v3_det:bf16": ("tab:brown", "*", ":", "gpu_v3_det"),
    "gpu_v4:bf16": ("tab:red", "P", "-", "gpu_v4"),
    "gpu_v4_det:bf16": ("tab:red", "P", ":", "gpu_v4_det"),
    "sdpa_bwd flash": ("black", "D", "--", "SDPA flash"),
    "sdpa_bwd cudnn": ("tab:gray", "v", "--", "SDPA cuDNN"),
    "sdpa_bwd efficient": ("tab:green", "x", "--", "SDPA efficient"),
}


def backward(results, out):
    """Stage 06's GPU backwards (Google Benchmark) beside SDPA's backward, bf16 TFLOP/s vs N."""
    bench_path, sdpa_path = os.path.join(results, "bench_06_backward_gpu.json"), os.path.join(results, "compare_torch_bwd.json")
    if not (os.path.exists(bench_path) and os.path.exists(sdpa_path)):
        return
    bench, sdpa = json.load(open(bench_path)), json.load(open(sdpa_path))
    pts = []  # (impl, d, causal, N, tflops)
    for b in bench["benchmarks"]:
        if not b["name"].startswith("BM_bwd/") or b.get("error_occurred"):
            continue
        a = dict(p.split(":", 1) for p in b["name"].split("/")[1:] if ":" in p)
        pts.append((b["label"], int(a["d"]), a["causal"] == "1", int(a["N"]), b["TFLOP/s"]))
    pts += [(r["impl"], r["d"], r["causal"], r["N"], r["tflops"]) for r in sdpa["rows"] if r["tflops"]]
    series = [(label, color, marker, ls, [(dd, c, n, t) for i, dd, c, n, t in pts if i == impl])
              for impl, (color, marker, ls, label) in BWD_STYLE.items()]
    tflops_panels(series, "TFLOP/s (bf16 backward, 2.5x forward FLOPs)",
                  f"Stage 06 backward beside PyTorch SDPA's, {sdpa['device']}, {bench['context']['date'][:10]} "
                  "(bench_06_backward_gpu, tools/compare_torch.py --backward)",
                  os.path.join(out, "gpu_bwd_tflops_vs_N.png"))


ERR_STYLE = {
    "fa05 v2": ("tab:blue", "s", "-", "v2 (mma.sync)"),
    "fa05 v7": ("darkred", "X", "-", "v7 (wgmma)"),
    "fa05 cublas": ("tab:orange", "^", "-", "cublas (materialised)"),
    "sdpa flash": ("black", "D", "--", "SDPA flash"),
    "sdpa cudnn": ("tab:gray", "v", "--", "SDPA cuDNN"),
    "sdpa math": ("tab:purple", "+", "--", "SDPA math"),
    "naive16": ("tab:pink", "o", ":", "naive16 (all in the dtype)"),
}


def errors(results, out):
    """Error against float64 vs N on random inputs, one panel per (dtype, d), with the input rounding."""
    path = os.path.join(results, "gpu_numerics.json")
    if not os.path.exists(path):
        return
    data = json.load(open(path))
    rows = [r for r in data["rows"] if r["case"] == "randn" and r["max_err"] is not None]
    fig, axes = plt.subplots(2, 2, figsize=(11, 8), sharex=True, sharey=True)
    for ax, (dt, d) in zip(axes.flat, [("fp16", 64), ("fp16", 128), ("bf16", 64), ("bf16", 128)]):
        sel = [r for r in rows if r["dtype"] == dt and r["d"] == d]
        for impl, (color, marker, ls, label) in ERR_STYLE.items():
            xy = sorted((r["N_k"], r["max_err"]) for r in sel if r["impl"] == impl)
            if xy:
                ax.plot([x for x, _ in xy], [y for _, y in xy], ls, color=color, marker=marker, label=label)
        floor = sorted({(r["N_k"], r["input_rounding"]) for r in sel})
        ax.plot([x for x, _ in floor], [y for _, y in floor], "-", color="tab:green", lw=3, alpha=0.4,
                label="input rounding")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{dt}, d = {d}, random inputs")
        ax.grid(True, alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("N (B = 1, H = 4)")
    for ax in axes[:, 0]:
        ax.set_ylabel("max |O - O64|")
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(f"Error against float64 on the GPU, {data['device']}, {data['date']} (tools/gpu_numerics.py)")
    fig.tight_layout()
    out_path = os.path.join(out, "gpu_error_vs_N.png")
    fig.savefig(out_path, dpi=110)
    print("wrote", out_path)


if __name__ == "__main__":
    main()
