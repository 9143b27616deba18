#!/usr/bin/env python3
"""HBM traffic vs N, counted: stage 04's --io-report over a sweep of N, into one JSON.

For each N (d = 64, one batch and head, causal and not) it runs the stage 04 program with
--io-report --json --no-check and keeps the element counts it prints: stages 01-03 from their
formulas (common/io_count.hpp), stage 04 counted by its block copies (and the formula, which
its test checks equal). tools/plot_results.py draws docs/img/io_vs_N.png from the JSON.

  tools/io_sweep.py [--bin build/04_tiled_cpu/04_tiled_cpu] [--json docs/results/io_vs_N.json]
                    [--sram-bytes 2097152]

Counts are elements (float32: 4 bytes each). Stage 04's blocks come from the paper's rule
(Bc = ceil(M/4d), Br = min(Bc, d)) with M = --sram-bytes (default 2 MiB: Br = 64, Bc = 2048 at
d = 64), not from the machine, so the counts are the same on every machine; the JSON records the
blocks. (The program's own default blocks, tiled::default_blocks, are a measured speed choice.)
"""
import argparse
import json
import platform
import subprocess
import sys
import time

NS = [256, 512, 1024, 2048, 4096, 8192, 16384]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="build/04_tiled_cpu/04_tiled_cpu")
    ap.add_argument("--json", default="docs/results/io_vs_N.json")
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--sram-bytes", type=int, default=2 << 20)
    a = ap.parse_args()
    rows = []
    for causal in (False, True):
        for n in NS:
            cmd = [a.bin, "--batch", "1", "--heads", "1", "--seq-q", str(n), "--head-dim", str(a.head_dim),
                   "--io-report", "--json", "--no-check", "--sram-bytes", str(a.sram_bytes)] + (["--causal"] if causal else [])
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            rep = json.loads(out)["io_report"]
            st = rep["stages"]
            if st["04_tiled_cpu_counted"]["hbm"] != st["04_tiled_cpu_formula"]["hbm"]:
                sys.exit(f"io_sweep: N = {n}: stage 04's count differs from tiled_io()")
            rows.append({"N": n, "d": a.head_dim, "causal": causal, "Br": rep["blocks"]["Br"], "Bc": rep["blocks"]["Bc"],
                         "hbm_elements": {k: v["hbm"] for k, v in st.items()},
                         # Q, K, V read once, O and LSE written once: what any algorithm must move.
                         "compulsory": 4 * n * a.head_dim + n})
            print(f"N = {n:6d} causal = {int(causal)}: 01 {st['01_naive']['hbm']:>14,d}  "
                  f"04 {st['04_tiled_cpu_counted']['hbm']:>12,d} elements")
    json.dump({"command": " ".join(["tools/io_sweep.py"] + sys.argv[1:]), "date": time.strftime("%Y-%m-%d"),
               "machine": platform.machine(),
               "unit": "elements (float32: x4 for bytes)", "rows": rows}, open(a.json, "w"), indent=1)
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
