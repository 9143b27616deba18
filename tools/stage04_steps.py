#!/usr/bin/env python3
"""What each of stage 04's speed changes bought, measured in one interleaved run (issue 11).

Builds stage 04 several times from the CURRENT sources, each time with the later changes switched
back off by exact text edits of copies of tiled.hpp and microkernel.hpp (an edit that no longer
matches the sources stops the script), and times the builds in turn on the same inputs:

  step 0  the scalar K transpose, exp with its edge handling on every row, buffer rows a multiple
          of 128 bytes, the paper's blocks (Bc = ceil(M/4d), Br = min(Bc, d)), no prefetch
  step 1  + K_j transposed in VW x VW squares through registers (mk::transpose_k)
  step 2  + exp without edge handling where every s - m >= -87 (mk::exp_neg_normal)
  step 3  + buffer rows padded off multiples of 128 bytes (mk::row_stride)
  step 4  + the CPU default blocks (Br = 256, Bc = 512 here: tiled::default_blocks)
  step 5  + V's rows prefetched 4 keys ahead inside the P V micro-kernel
  step 6  + the block buffers on 64-byte cache lines (mk::Buffer), so no vector load is split:
          the current code
(Also tried on 2026-12-01 and dropped: mk::load/store through a may_alias vector type, which
compiles to vmovups where std::memcpy gives vmovdqu8, an integer-domain move; 1.01x at d = 64
and 0.985x at d = 128 in one run of this script as step 7.)
(Tried and dropped, since two runs of this script measured it 0.95-0.97x against step 4: the next key block's K and V prefetched
into L2, a slice per row of S, while the current block computes.)

B = 1, H = 8, N = 4096, d 64 and 128, not causal, 2 threads (compare_torch_cpu.py's setting).
Each build runs --rounds times, in turn; each keeps its best time (the machine is shared: the
best is the least disturbed). Output: a table, and --json.

Usage: python3 tools/stage04_steps.py [--build build] [--rounds 6] [--json docs/results/stage04_steps.json]
Needs the CPU build (scripts/build.sh: build/common/libfa_common.a ...) and g++.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (file, text in the current source, text of the build without the change), newest change first.
# Step k keeps the changes 1..k; a build for step k undoes the edits of every change above k.
UNDO = {
    6: [("microkernel.hpp", "using Buffer = std::vector<float, LineAligned<float>>;",
         "using Buffer = std::vector<float>;")],
    5: [("microkernel.hpp",
         "      __builtin_prefetch(reinterpret_cast<const void*>(ahead + v * VW * sizeof(float)), 0, 3);",
         "      (void)ahead;")],
    3: [("microkernel.hpp", "return w % 32 == 0 ? w + 16 : w;", "return w;")],
    2: [("microkernel.hpp",
         "if (lowest - m >= -87.f && m <= std::numeric_limits<float>::max()) {",
         "if (false) {")],
    1: [("microkernel.hpp",
         "  const int64_t nfull = n / VW * VW, dfull = d / VW * VW;\n",
         "  for (int64_t cb = 0; cb < n; cb += VW)  // the scalar transpose of before\n"
         "    for (int64_t x = 0; x < d; ++x)\n"
         "      for (int64_t c = cb; c < (cb + VW < n ? cb + VW : n); ++c) Kt[x * ldkt + c] = K[c * ldk + x];\n"
         "  return;\n"
         "  const int64_t nfull = n / VW * VW, dfull = d / VW * VW;\n")],
}
NAMES = {0: "paper's blocks, scalar transpose, exp with edge handling",
         1: "+ K transposed in registers", 2: "+ exp fast path", 3: "+ rows off 128-byte multiples",
         4: "+ CPU default blocks", 5: "+ V prefetched in the P V kernel",
         6: "+ block buffers on 64-byte lines"}


def paper_M():
    """M in floats: the L2 size stage 04 reads with sysconf(_SC_LEVEL2_CACHE_SIZE) (getconf)."""
    l2 = int(subprocess.run(["getconf", "LEVEL2_CACHE_SIZE"], check=True, capture_output=True,
                            text=True).stdout.strip() or 0) or 1 << 20
    return l2 // 4


def paper_blocks(d):
    M = paper_M()
    bc = -(-M // (4 * d))
    return min(bc, d), bc


def default_blocks(d):
    """tiled::default_blocks: Br = 256, Bc the largest multiple of 64 up to 512 with
    (Br + 2d) Bc <= M / 2 floats (64 at least)."""
    M = paper_M()
    return 256, max(64, min(512, M // 2 // (256 + 2 * d) // 64 * 64))


def build(step, build_dir, tmp):
    d = os.path.join(tmp, f"step{step}")
    os.makedirs(d)
    for f in ("tiled.hpp", "microkernel.hpp"):
        shutil.copy(os.path.join(ROOT, "04_tiled_cpu", f), d)
    for undo_step, edits in UNDO.items():
        if undo_step <= step:
            continue
        for f, now, before in edits:
            path = os.path.join(d, f)
            text = open(path).read()
            if text.count(now) != 1:
                sys.exit(f"stage04_steps: the edit for step {undo_step} no longer matches {f}: {now!r}")
            open(path, "w").write(text.replace(now, before))
    exe = os.path.join(d, "steps_main")
    b = os.path.join(ROOT, build_dir)
    subprocess.run(["g++", "-O3", "-march=native", "-ffp-contract=fast", "-fopenmp", "-std=c++20",
                    "-I" + d, "-I" + os.path.join(ROOT, "04_tiled_cpu"), "-I" + os.path.join(ROOT, "common"),
                    os.path.join(ROOT, "tools", "stage04_steps", "steps_main.cpp"), "-o", exe,
                    os.path.join(b, "common", "libfa_common.a"), os.path.join(b, "01_naive", "libfa_baseline01.a"),
                    os.path.join(b, "common", "libfa_problem.a")], check=True)
    return exe


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--N", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        exes = {s: build(s, a.build, tmp) for s in (0, 1, 2, 3, 5, 6)}  # step 4 = step 3's build
        rows = []
        for d in (64, 128):
            pb, db = "%dx%d" % paper_blocks(d), "%dx%d" % default_blocks(d)
            best = {}
            for _ in range(a.rounds):
                for s, exe in exes.items():
                    shapes = [pb] if s < 3 else [pb, db] if s == 3 else [db]
                    out = subprocess.run([exe, str(a.N), str(d), "0", str(a.threads), *shapes],
                                         check=True, capture_output=True, text=True).stdout.split("\n")
                    for line, shape in zip(out, shapes):
                        step = 4 if (s == 3 and shape == db and db != pb) else s
                        t = float(line.split()[2])
                        best[step] = min(best.get(step, t), t)
            flops = 4.0 * 8 * a.N * a.N * d
            for step in sorted(best):
                rows.append({"d": d, "N": a.N, "step": step, "change": NAMES[step],
                             "blocks": pb if step < 4 else db, "best_ms": best[step] * 1e3,
                             "gflops": flops / best[step] * 1e-9,
                             "gain_vs_previous": best[step - 1] / best[step] if step > 0 else 1.0})
    print(f"{'d':>4} {'step':>4}  {'change':<58} {'blocks':>9} {'best ms':>9} {'GFLOP/s':>8} {'gain':>6}")
    for r in rows:
        print(f"{r['d']:>4} {r['step']:>4}  {r['change']:<58} {r['blocks']:>9} {r['best_ms']:>9.1f} "
              f"{r['gflops']:>8.1f} {r['gain_vs_previous']:>6.3f}")
    if a.json:
        ctx = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
               "threads": a.threads, "rounds": a.rounds, "B": 1, "H": 8,
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    ctx["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open(a.json, "w") as f:
            json.dump({"context": ctx, "command": " ".join(sys.argv), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
