"""Ring attention's benchmark (stage 07): per-GPU TFLOP/s of the ring against one GPU doing the
same per-GPU work, and the hop's time against a step's compute. Written for several GPUs
(NCCL, bf16, d = 128, N 128k ... 1M); until such a machine is lent it has run only as a CPU smoke
run (gloo, float32, small N), which shows that it runs and measures nothing worth quoting.

  torchrun --nproc-per-node 4 07_ring_attention/bench_ring.py --json ring_h200x4.json      # GPUs
  python3 07_ring_attention/bench_ring.py --device cpu --nproc 2 --Ns 256,512 --heads 2 \\
      --kv-heads 2 --head-dim 32 --reps 2 --json docs/results/ring_bench_cpu_smoke.json      # CPU smoke
  python3 07_ring_attention/bench_ring.py --count        # the work table (counted, no processes)

What each row measures, for N, causal and layout (non-causal; causal contiguous; causal zigzag):
  ring_fwd_ms, ring_fwd_bwd_ms   ring_attention() and its backward, median of --reps, the
                                 slowest rank (every rank waits for it at the next hop)
  compute_fwd_ms, compute_bwd_ms this rank's same attention calls back to back, no hops and no
                                 merges: what the ring would take if communication were free
  hop_fwd_ms, hop_bwd_ms         one hop alone (K, V; in the backward K, V, dK, dV), no compute
  step_fwd_ms                    the longest single step's attention call (compute of one step)
  single_tflops_fwd, _bwd        one GPU running the same FLOPs as one rank in one call: non-causal
                                 n queries against all N keys; causal, a causal problem of
                                 N / sqrt(world) tokens (the same pairs)
  ring_tflops_fwd, _bwd          FLOPs / world / time, FlashAttention's convention (forward
                                 4 B H N^2 d, halved for causal; backward 2.5x the forward)
  ratio_fwd, ratio_bwd           ring per-GPU rate / single rate (issue 36's goal: >= 0.85, zigzag)
  hidden_fwd                     compute_fwd_ms / ring_fwd_ms: 1.0 when the hops are all hidden
"""
import argparse
import datetime
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import ring  # noqa: E402


# ---- the work table: pairs per rank, counted from step_plan() -------------------------------------

def work(N, world, layout):
    """[rank][step] visible pairs the ring computes, causal."""
    n = N // world
    return [[ring.pairs(ring.step_plan(r, (r - s) % world, world, n, True, layout)) for s in range(world)]
            for r in range(world)]


def count_table(N=131072, worlds=(2, 4, 8)):
    lines = [f"Causal, N = {N}: pairs a rank computes, over the mean (N (N + 1) / 2 / world); the ring's "
             f"steps are in lock-step, so its time is the sum over steps of the busiest rank's pairs.",
             "", "| world | layout | busiest rank | idlest rank | lock-step time | bound on efficiency |",
             "|---:|---|---:|---:|---:|---:|"]
    for world in worlds:
        for layout in ("contiguous", "zigzag"):
            w = work(N, world, layout)
            mean = N * (N + 1) / 2 / world
            per_rank = [sum(r) for r in w]
            lockstep = sum(max(w[r][s] for r in range(world)) for s in range(world))
            lines.append(f"| {world} | {layout} | {max(per_rank) / mean:.3f} | {min(per_rank) / mean:.3f} | "
                         f"{lockstep / mean:.3f} | {mean / lockstep:.3f} |")
    return "\n".join(lines)


# ---- timing ----------------------------------------------------------------------------------------

def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, warmup, reps):
    """Median wall time (ms) of fn() over reps, each started together on every rank (barrier) and
    ended by the slowest (max over ranks)."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        sync(device)
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        sync(device)
        t = torch.tensor([(time.perf_counter() - t0) * 1e3], dtype=torch.float64,
                         device=device if device.type == "cuda" else "cpu")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        out.append(float(t))
    return statistics.median(out)


def timed_local(fn, device, warmup, reps):
    """Median wall time (ms) of fn() on this rank alone."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        out.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(out)


def flops_fwd(B, H, N_q, N_k, d, causal):
    return 4 * B * H * N_q * N_k * d / (2 if causal else 1)


def bench_one(args, device, dtype, N, causal, layout):
    rank, world = dist.get_rank(), dist.get_world_size()
    B, H, H_kv, d = args.batch, args.heads, args.kv_heads, args.head_dim
    n = N // world
    g = torch.Generator(device=device).manual_seed(rank)
    q, dO = (torch.randn(B, H, n, d, generator=g, device=device, dtype=dtype) for _ in range(2))
    k, v = (torch.randn(B, H_kv, n, d, generator=g, device=device, dtype=dtype) for _ in range(2))
    scale = d ** -0.5
    ops = torch.ops.fa_course
    row = dict(N=N, causal=causal, layout=layout, world=world, B=B, H=H, H_kv=H_kv, d=d, dtype=str(dtype))

    # The ring, forward and forward + backward.
    def fwd():
        return ring.ring_attention(q, k, v, causal=causal, layout=layout)

    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))

    def fwd_bwd():
        ring.ring_attention(qg, kg, vg, causal=causal, layout=layout).backward(dO)

    row["ring_fwd_ms"] = timed(fwd, device, args.warmup, args.reps)
    row["ring_fwd_bwd_ms"] = timed(fwd_bwd, device, args.warmup, args.reps)

    # This rank's own attention calls, no hops and no merges (its K/V stand in for every block:
    # the same shapes and masks, so the same work).
    steps = [ring.step_plan(rank, (rank - s) % world, world, n, causal, layout) for s in range(world)]
    steps = [st for st in steps if st is not None]
    O, LSE = ops.attention_fwd(q, k, v, False, scale, "auto")

    def compute_fwd():
        for st in steps:
            ops.attention_fwd(q[:, :, st.q_rows], k[:, :, st.kv_rows], v[:, :, st.kv_rows], st.causal, scale, "auto")

    def compute_bwd():
        for st in steps:
            r = st.q_rows
            ops.attention_bwd(dO[:, :, r], q[:, :, r], k[:, :, st.kv_rows], v[:, :, st.kv_rows], O[:, :, r],
                              LSE[:, :, r], st.causal, scale, "auto")

    row["compute_fwd_ms"] = timed(compute_fwd, device, args.warmup, args.reps)
    row["compute_bwd_ms"] = timed(compute_bwd, device, args.warmup, args.reps)
    row["step_fwd_ms"] = max(timed_local(lambda st=st: ops.attention_fwd(
        q[:, :, st.q_rows], k[:, :, st.kv_rows], v[:, :, st.kv_rows], st.causal, scale, "auto"),
        device, 1, args.reps) for st in steps) if steps else 0.0

    # One hop alone, as the ring makes it.
    _, _, nxt, prv = ring._peers(None)
    kr, vr = torch.empty_like(k), torch.empty_like(v)
    f32 = dict(dtype=torch.float32, device=device)
    dk, dv, dkr, dvr = (torch.zeros(k.shape, **f32) for _ in range(4))
    row["hop_fwd_ms"] = timed(lambda: ring._wait(ring._hop([k, v], [kr, vr], nxt, prv, None, 0)),
                              device, args.warmup, args.reps)
    row["hop_bwd_ms"] = timed(lambda: ring._wait(ring._hop([k, v, dk, dv], [kr, vr, dkr, dvr], nxt, prv, None, 0)),
                              device, args.warmup, args.reps)

    # One device, the same FLOPs as one rank, one call (rank 0 times it; the others wait).
    total = flops_fwd(B, H, N, N, d, causal)
    if causal:
        N1 = max(2, int(round(N / math.sqrt(world))))
        sq, sk = (torch.randn(B, h, N1, d, device=device, dtype=dtype) for h in (H, H_kv))
        shapes, single_flops = (sq, sk, sk.clone(), sq.clone()), flops_fwd(B, H, N1, N1, d, True)
    else:
        sq = torch.randn(B, H, n, d, device=device, dtype=dtype)
        sk = torch.randn(B, H_kv, N, d, device=device, dtype=dtype)
        shapes, single_flops = (sq, sk, sk.clone(), sq.clone()), flops_fwd(B, H, n, N, d, False)
    sq, sk, sv, sdo = shapes
    sO, sLSE = ops.attention_fwd(sq, sk, sv, causal, scale, "auto")
    t_sf = timed_local(lambda: ops.attention_fwd(sq, sk, sv, causal, scale, "auto"), device, args.warmup, args.reps)
    t_sb = timed_local(lambda: ops.attention_bwd(sdo, sq, sk, sv, sO, sLSE, causal, scale, "auto"), device,
                       args.warmup, args.reps)
    dist.barrier()
    row["single_tflops_fwd"] = single_flops / (t_sf * 1e-3) / 1e12
    row["single_tflops_bwd"] = 2.5 * single_flops / (t_sb * 1e-3) / 1e12
    row["ring_tflops_fwd"] = total / world / (row["ring_fwd_ms"] * 1e-3) / 1e12
    ring_bwd_ms = row["ring_fwd_bwd_ms"] - row["ring_fwd_ms"]
    row["ring_tflops_bwd"] = 2.5 * total / world / (ring_bwd_ms * 1e-3) / 1e12 if ring_bwd_ms > 0 else float("nan")
    row["ratio_fwd"] = row["ring_tflops_fwd"] / row["single_tflops_fwd"]
    row["ratio_bwd"] = row["ring_tflops_bwd"] / row["single_tflops_bwd"]
    row["hidden_fwd"] = row["compute_fwd_ms"] / row["ring_fwd_ms"]
    return row


def main_rank(args):
    device = torch.device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", dist.get_rank())))
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    rows = []
    for N in [int(x) for x in args.Ns.split(",")]:
        for causal, layout in ((False, "contiguous"), (True, "contiguous"), (True, "zigzag")):
            row = bench_one(args, device, dtype, N, causal, layout)
            rows.append(row)
            if dist.get_rank() == 0:
                print(f"N {N:>8} causal {int(causal)} {layout:<10} ring fwd {row['ring_fwd_ms']:9.2f} ms "
                      f"({row['ring_tflops_fwd']:.3g} TFLOP/s a rank, {row['ratio_fwd']:.2f}x single), "
                      f"fwd+bwd {row['ring_fwd_bwd_ms']:9.2f} ms; hop {row['hop_fwd_ms']:.2f} ms, "
                      f"step {row['step_fwd_ms']:.2f} ms, hidden {row['hidden_fwd']:.2f}", flush=True)
    if dist.get_rank() == 0 and args.json:
        smoke = device.type == "cpu"
        out = {
            "what": ("CPU smoke run: gloo processes on a shared CPU, float32; shows that bench_ring.py runs end "
                     "to end. NOT a measurement of ring attention's speed (see 07_ring_attention/README.md)")
            if smoke else "ring attention on GPUs (NCCL), per-GPU TFLOP/s against one GPU doing the same work",
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": args.command,
            "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__,
                        "backend": str(dist.get_backend()), "world": dist.get_world_size(),
                        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None},
            "rows": [{k: (None if isinstance(x, float) and not math.isfinite(x) else x) for k, x in r.items()}
                     for r in rows],  # NaN (a backward shorter than the noise) as null: strict JSON
        }
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
        print("wrote", args.json)


def worker(rank, world, store, args):
    backend = "nccl" if args.device == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        main_rank(args)
    finally:
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default=None, help="default bf16 (cuda), fp32 (cpu)")
    ap.add_argument("--Ns", default="131072,262144,524288,1048576", help="global sequence lengths")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--nproc", type=int, default=0, help="start this many ranks here (without torchrun)")
    ap.add_argument("--json", help="write the rows here (rank 0)")
    ap.add_argument("--count", action="store_true", help="print the work table (counted) and exit")
    args = ap.parse_args()
    args.dtype = args.dtype or ("bf16" if args.device == "cuda" else "fp32")
    args.command = " ".join(["python3"] + sys.argv)
    if args.count:
        print(count_table())
        return
    if "RANK" in os.environ:  # torchrun
        dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
        try:
            main_rank(args)
        finally:
            dist.destroy_process_group()
        return
    if args.nproc < 2:
        ap.error(f"--nproc: expected at least 2 ranks (or run under torchrun), found {args.nproc}")
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(worker, args=(args.nproc, os.path.join(tmp, "store"), args), nprocs=args.nproc,
                           start_method="spawn" if args.device == "cuda" else "fork")


if __name__ == "__main__":
    main()
