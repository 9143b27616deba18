"""Plot the Google Benchmark results under docs/results/ into PNGs under docs/img/.

Reads every docs/results/bench_*.json (Google Benchmark's --benchmark_out JSON) and draws, for
d = 64 and no mask (the one configuration every stage's benchmark covers):
  docs/img/bench_time_vs_N.png     forward time vs N, stages 01-04 and the BLAS baseline
  docs/img/bench_memory_vs_N.png   measured extra bytes vs N, same series
  docs/img/bench_04_pct_peak.png   stage 04 and BLAS as % of the measured fp32 FMA peak, d = 64/128
and, from docs/results/io_vs_N.json (tools/io_sweep.py: counted, not timed):
  docs/img/io_vs_N.png             HBM traffic vs N in bytes, stages 01, 03 and 04, causal and not

Where two files hold the same stage (bench_01_naive.json and the in-process copy in
bench_04_tiled_cpu.json), the stage-04 file wins: its numbers come from one process, one machine
state, so the ratios are fair.

Usage: python3 tools/plot_results.py [--results docs/results] [--out docs/img]
(tools/plots.sh makes the venv with matplotlib and runs this and tools/plot_numerics.py.)
"""
import argparse
import glob
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Benchmark family (name before the first '/') -> series label.
FAMILIES = {
    "BM_naive_forward": "01 naive",
    "BM_stage01": "01 naive",
    "BM_safe_softmax_forward": "02 safe softmax",
    "BM_stage02": "02 safe softmax",
    "BM_online_softmax_forward": "03 online softmax",
    "BM_stage03": "03 online softmax",
    "BM_tiled": "04 tiled",
    "BM_blas": "BLAS materialised",
}
STYLE = {
    "01 naive": ("tab:red", "o"),
    "02 safe softmax": ("tab:orange", "s"),
    "03 online softmax": ("tab:olive", "^"),
    "04 tiled": ("tab:blue", "D"),
    "BLAS materialised": ("tab:gray", "x"),
}
TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def arg(name, key, default=None):
    """Value of `key:V` in a benchmark name like BM_tiled/N:4096/d:64/causal:0/threads:2."""
    for part in name.split("/")[1:]:
        if part.startswith(key + ":"):
            return int(part.split(":")[1])
    return default


MACHINES = {}  # file name -> "date, ISA, L2, CPUs" from its Google Benchmark context


def machine(context):
    """The machine a JSON was measured on, in a few words, from Google Benchmark's context."""
    l2 = [c["size"] for c in context.get("caches", []) if c.get("level") == 2]
    parts = [context.get("date", "?")[:10], context.get("isa", "ISA not recorded").split(",")[0]]
    if l2:
        parts.append(f"L2 {l2[0] >> 10} KiB")
    parts.append(f"{context.get('num_cpus', '?')} CPUs")
    return ", ".join(parts)


def footnote(fig, rows_used):
    """Which file (so which machine and date) each plotted point comes from, under the plot."""
    sources = sorted({v["source"] for v in rows_used})
    fig.text(0.01, 0.005, "\n".join(f"{s}: {MACHINES[s]}" for s in sources), fontsize=6, color="0.35")
    fig.tight_layout(rect=(0, 0.025 * len(sources), 1, 1))


def load(results_dir):
    rows = {}  # (label, threads, N, d, causal) -> row; the stage-04 file is read last and wins
    files = sorted(glob.glob(os.path.join(results_dir, "bench_*.json")),
                   key=lambda f: "bench_04" in f)
    for path in files:
        with open(path) as f:
            data = json.load(f)
        MACHINES[os.path.basename(path)] = machine(data.get("context", {}))
        for b in data.get("benchmarks", []):
            if b.get("run_type", "iteration") != "iteration":
                continue
            fam = b["name"].split("/")[0]
            if fam not in FAMILIES:
                continue
            N = int(b.get("N", arg(b["name"], "N", 0)) or int(b["name"].split("/")[1]))
            d = int(b.get("d", arg(b["name"], "d", 64)))
            causal = int(b.get("causal", arg(b["name"], "causal", 0)))
            threads = int(b.get("threads", arg(b["name"], "threads", 1)))
            key = (FAMILIES[fam], threads, N, d, causal)
            rows[key] = {
                "ms": b["real_time"] * TO_MS[b.get("time_unit", "ns")],
                "bytes": b.get("extra_bytes"),
                "pct": b.get("pct_peak"),
                "source": os.path.basename(path),
            }
    return rows


def series(rows, label, threads, d=64, causal=0):
    pts = sorted((k[2], v) for k, v in rows.items()
                 if k[0] == label and k[1] == threads and k[3] == d and k[4] == causal)
    return [p[0] for p in pts], [p[1] for p in pts]


def plot_vs_n(rows, field, ylabel, title, out):
    fig, ax = plt.subplots(figsize=(7, 5))
    used = []
    for label, (color, marker) in STYLE.items():
        for threads in (1, 2):
            xs, vs = series(rows, label, threads)
            ys = [v[field] for v in vs]
            if not xs or any(y is None for y in ys):
                continue
            used += vs
            ax.plot(xs, ys, marker=marker, color=color, linestyle="-" if threads == 1 else "--",
                    label=f"{label} ({threads} thread{'s' if threads > 1 else ''})")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("N (= N_q = N_k), d = 64, no mask, B = H = 1")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    footnote(fig, used)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print("wrote", out)


def plot_pct_peak(rows, out):
    fig, ax = plt.subplots(figsize=(7, 5))
    used = []
    for label in ("04 tiled", "BLAS materialised"):
        color, marker = STYLE[label]
        for d, ls in ((64, "-"), (128, ":")):
            for threads in (1, 2):
                xs, vs = series(rows, label, threads, d=d)
                if not xs:
                    continue
                used += vs
                ax.plot(xs, [v["pct"] for v in vs], marker=marker, color=color, linestyle=ls,
                        alpha=1.0 if threads == 1 else 0.55,
                        label=f"{label}, d={d}, {threads} thr")
    ax.axhline(35, color="k", linewidth=0.8, linestyle="--")
    ax.text(256, 36, "target: 35% of peak", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("N, no mask")
    ax.set_ylabel("% of measured fp32 FMA peak (same thread count)")
    ax.set_title("Stage 04 vs BLAS: share of the FMA peak")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    footnote(fig, used)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print("wrote", out)


def plot_io(path, out):
    """HBM bytes vs N (float32, 4 bytes per element) from tools/io_sweep.py's counts."""
    data = json.load(open(path))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key, label, color, marker in (("01_naive", "01 naive (S, P in HBM)", "tab:red", "o"),
                                      ("03_online_softmax", "03 online softmax (K, V per query row)", "tab:olive", "^"),
                                      ("04_tiled_cpu_counted", "04 tiled (counted)", "tab:blue", "D")):
        for causal in (False, True):
            pts = sorted((r["N"], 4 * r["hbm_elements"][key]) for r in data["rows"] if r["causal"] == causal)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, color=color,
                    linestyle="--" if causal else "-", label=f"{label}{', causal' if causal else ''}")
    pts = sorted((r["N"], 4 * r["compulsory"]) for r in data["rows"] if not r["causal"])
    ax.plot([p[0] for p in pts], [p[1] for p in pts], color="black", linestyle=":",
            label="read Q, K, V and write O, LSE once")
    rows = data["rows"]
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(f"N (= N_q = N_k), d = {rows[0]['d']}, B = H = 1; stage 04 blocks Br = {rows[0]['Br']}")
    ax.set_ylabel("bytes to and from HBM (float32, counted)")
    ax.set_title("Attention forward: HBM traffic vs N")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print("wrote", out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default="docs/results")
    ap.add_argument("--out", default="docs/img")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rows = load(a.results)
    if not rows:
        raise SystemExit(f"no benchmark results in {a.results}/bench_*.json")
    plot_vs_n(rows, "ms", "forward time (ms)", "Attention forward: time vs N",
              os.path.join(a.out, "bench_time_vs_N.png"))
    plot_vs_n(rows, "bytes", "extra memory (bytes, measured)", "Attention forward: extra memory vs N",
              os.path.join(a.out, "bench_memory_vs_N.png"))
    plot_pct_peak(rows, os.path.join(a.out, "bench_04_pct_peak.png"))
    io = os.path.join(a.results, "io_vs_N.json")
    if os.path.exists(io):
        plot_io(io, os.path.join(a.out, "io_vs_N.png"))


if __name__ == "__main__":
    main()
