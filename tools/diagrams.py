"""Draw the course's explanatory diagrams into docs/img/diagram_*.png (no data: every picture is
drawn from the structure of the code it explains; the numbers in them are the code's constants).

  diagram_online_softmax_merge.png     stage 03: the state (m, l, o) of two key blocks and merge()
  diagram_block_grid_causal.png        stage 04: the Q-block x KV-block grid under the causal mask
  diagram_v1_vs_v2_work_split.png      stage 05: who computes what in v1 and in v2
  diagram_mma_fragment.png             stage 05: the lanes of one mma.sync m16n8k16
  diagram_v3_double_buffer.png         stage 05: v2's copy-then-compute against v3's cp.async ring
  diagram_v12_producer_consumer.png    stage 05: v12's TMA producer, mbarrier rings, two consumers
  diagram_backward_loop.png            stage 06: the backward's K/V-outer loop and dQ's accumulation
  diagram_decode_split_kv.png          stage 05 v14 (docs/decode.md): split-KV, GQA packing, the
                                       combine kernel's merge, and a block table
  diagram_ring_attention.png           stage 07: Q shards fixed, K/V shards rotating, the merge in
                                       LSE form, causal work per rank and step (contiguous, zigzag)
  diagram_variants_band.png            docs/variants.md: a sliding window's band on the Q-block x
                                       KV-block grid (v13's blocks: skipped, masked, full)
  diagram_varlen_tiles.png             stage 05 v13's packed batch: the token axis split at
                                       cu_seqlens, the tiles sequence by sequence (empty ones lead
                                       a short sequence's range), the producers' claims and jumps
  diagram_fp8_v15.png                  stage 05 v15 (docs/fp8.md): where S's accumulator puts a quad's
                                       scores, where the 8-bit A operand wants them, V^T's key order
                                       that makes them agree, and the two warpgroups' ping-pong
  diagram_bwd_v4_wide.png              stage 06's gpu_v4: who owns what in its two warpgroups at
                                       d = 128 (each its 64 keys) and at d = 192 / 256 (the keys
                                       shared; S^T, dP^T split by queries, dK, dV, dQ by head dims)

Timelines (v3, v12, varlen) use schematic durations: the order of the steps and every wait follow the
kernels; the lengths do not come from a measurement.

Usage: python3 tools/diagrams.py [--out docs/img] [--only diagram_NAME.png]
       (tools/plots.sh makes the venv and runs it)
The PNGs carry no timestamp or software tag, so the same matplotlib draws the same bytes.
"""
import argparse
import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, Polygon, Rectangle  # noqa: E402

# ---- one style for every diagram -------------------------------------------------------------
plt.rcParams.update({
    "font.family": "DejaVu Sans",
    "font.size": 10,
    "mathtext.fontset": "dejavusans",
    "savefig.facecolor": "white",
    "figure.facecolor": "white",
})
INK = "#222222"
MUTED = "#6b6b6b"
Q_C = "#4C72B0"      # queries: Q, O, dQ
KV_C = "#DD8452"     # keys and values: K, V, dK, dV
OK_C = "#55A868"     # computed / full
MASK_C = "#C44E52"   # masked, waits, barriers
SKIP_C = "#E3E3E3"   # skipped / idle
EXTRA_C = "#8172B3"  # a fourth colour (warp 3, register 3)
WARP_C = [Q_C, KV_C, OK_C, EXTRA_C]
WIDTH_IN, DPI = 9.0, 100  # 900 px wide: GitHub shows it at full size


def tint(hex_color, f):
    """hex_color mixed with white: f = 0 the colour, f = 1 white."""
    r, g, b = (int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
    return "#%02x%02x%02x" % tuple(round(c + (255 - c) * f) for c in (r, g, b))


def canvas(height_in, xlim, ylim, title):
    fig = plt.figure(figsize=(WIDTH_IN, height_in))
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.axis("off")
    ax.text((xlim[0] + xlim[1]) / 2, ylim[1] - 0.02 * (ylim[1] - ylim[0]), title, ha="center", va="top",
            fontsize=13, fontweight="bold", color=INK)
    return fig, ax


def box(ax, x, y, w, h, fc="white", ec=INK, lw=1.0, text=None, fs=10, color=INK, ha="center", **kw):
    ax.add_patch(Rectangle((x, y), w, h, facecolor=fc, edgecolor=ec, linewidth=lw, **kw))
    if text is not None:
        tx = x + w / 2 if ha == "center" else x + 0.02 * w + 0.05
        ax.text(tx, y + h / 2, text, ha=ha, va="center", fontsize=fs, color=color)


def arrow(ax, x0, y0, x1, y1, color=INK, lw=1.2, style="-|>", ms=12, **kw):
    ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle=style, mutation_scale=ms, color=color,
                                 linewidth=lw, shrinkA=0, shrinkB=0, **kw))


def save(fig, out, name):
    path = os.path.join(out, name)
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    print("wrote", path)


# ---- 1. stage 03: the online-softmax state and merge() ----------------------------------------
def online_softmax_merge(out):
    # An example row: block A holds keys 0-2, block B keys 3-5 (scores S_ij, scale applied).
    SA, SB = [1.0, 3.0, 2.0], [4.0, 0.5, 2.5]
    mA, mB = max(SA), max(SB)
    lA = sum(math.exp(s - mA) for s in SA)
    lB = sum(math.exp(s - mB) for s in SB)
    m = max(mA, mB)
    l = lA * math.exp(mA - m) + lB * math.exp(mB - m)
    l_direct = sum(math.exp(s - m) for s in SA + SB)
    assert abs(l - l_direct) < 1e-12

    fig, ax = canvas(6.0, (0, 18), (0, 12), "Online softmax: the state of two key blocks, and their merge")
    ax.text(9, 11.05, r"one query row $i$;  $S_{ij}$ = scale $q_i \cdot k_j$;  $o$ is the unnormalised "
            r"output ($d$ numbers), $O_i = o\,/\,l$ at the end", ha="center", fontsize=9.5, color=MUTED)
    # The row of scores, split into blocks A and B.
    cw = 1.2
    x0 = 9 - 3 * cw - 0.3
    for k, s in enumerate(SA + SB):
        blockA = k < 3
        x = x0 + k * cw + (0 if blockA else 0.6)
        box(ax, x, 9.1, cw, 0.9, fc=tint(Q_C if blockA else KV_C, 0.7), text=f"{s:g}", fs=10)
        ax.text(x + cw / 2, 8.8, f"j={k}", ha="center", va="top", fontsize=8, color=MUTED)
    ax.text(x0 - 0.25, 9.55, r"$S_{ij}$", ha="right", va="center", fontsize=10)
    ax.text(x0 + 1.5 * cw, 10.25, "key block A", ha="center", fontsize=10, color=Q_C, fontweight="bold")
    ax.text(x0 + 4.5 * cw + 0.6, 10.25, "key block B", ha="center", fontsize=10, color=KV_C, fontweight="bold")

    # The two states, from partial() over each block (add_key, one key at a time).
    def state(x, y, name, c, mv, lv, keys):
        box(ax, x, y, 5.4, 2.3, fc=tint(c, 0.88), ec=c, lw=1.5)
        ax.text(x + 0.2, y + 1.95, f"state {name} = partial(keys {keys})", fontsize=10, fontweight="bold",
                color=c, va="center")
        ax.text(x + 0.2, y + 1.35, rf"$m_{name} = \max\ S_{{ij}} = {mv:g}$", fontsize=11, va="center")
        ax.text(x + 0.2, y + 0.85, rf"$l_{name} = \Sigma_j\, e^{{S_{{ij}} - m_{name}}} = {lv:.3f}$", fontsize=11,
                va="center")
        ax.text(x + 0.2, y + 0.3, rf"$o_{name} = \Sigma_j\, e^{{S_{{ij}} - m_{name}}}\, V_j$", fontsize=11, va="center")

    state(0.6, 5.6, "A", Q_C, mA, lA, "0-2")
    state(12.0, 5.6, "B", KV_C, mB, lB, "3-5")
    arrow(ax, x0 + 1.5 * cw, 8.55, 3.3, 7.95, color=Q_C)
    arrow(ax, x0 + 4.5 * cw + 0.6, 8.55, 14.7, 7.95, color=KV_C)

    # merge(a, b).
    box(ax, 6.3, 4.35, 5.4, 3.55, fc="white", ec=INK, lw=1.5)
    ax.text(9, 7.55, "merge(A, B)", ha="center", fontsize=11, fontweight="bold", va="center")
    ax.text(6.5, 6.85, r"$m = \max(m_A, m_B)$", fontsize=11, va="center")
    ax.text(6.5, 6.25, r"$l = l_A\,e^{m_A-m} + l_B\,e^{m_B-m}$", fontsize=11, va="center")
    ax.text(6.5, 5.6, r"$o = o_A\,e^{m_A-m} + o_B\,e^{m_B-m}$", fontsize=11, va="center")
    ax.text(6.5, 4.85, rf"here: $m$ = {m:g}, $l$ = {l:.3f}, the same as" "\n" r"summing $e^{S_{ij} - m}$ over all 6 keys",
            fontsize=9, va="center", color=MUTED)
    arrow(ax, 6.0, 6.75, 6.3, 6.75)
    arrow(ax, 12.0, 6.75, 11.7, 6.75)

    # finish().
    box(ax, 5.8, 2.75, 6.4, 1.0, fc=tint(OK_C, 0.85), ec=OK_C, lw=1.5,
        text=r"finish():  $O_i = o\,/\,l,\quad LSE_i = m + \log l$", fs=11)
    arrow(ax, 9, 4.35, 9, 3.75)

    # add_key() is merge() with a one-key state.
    box(ax, 0.6, 0.35, 16.8, 1.75, fc="#f7f7f7", ec=MUTED, lw=1.0)
    ax.text(0.85, 1.75, "add_key(st, s, v) is merge() with a one-key state:", fontsize=10,
            fontweight="bold", va="center")
    ax.text(0.85, 1.15, r"one key j alone has $m = S_{ij}$, $l = e^{S_{ij} - S_{ij}} = 1$, $o = V_j$;  "
            r"merge(st, $\{S_{ij}, 1, V_j\}$) gives", fontsize=10, va="center")
    ax.text(0.85, 0.6, r"$m' = \max(m, S_{ij}),\quad l' = l\,e^{m-m'} + e^{S_{ij}-m'},\quad "
            r"o' = o\,e^{m-m'} + e^{S_{ij}-m'}\,V_j$" "   (exactly add_key's alpha and beta)",
            fontsize=10, va="center")
    save(fig, out, "diagram_online_softmax_merge.png")


# ---- 2. stage 04: the causal block grid -------------------------------------------------------
def block_grid_causal(out):
    T = 8  # N_q = N_k = 8 Br, Br = Bc: the paper's blocks at M = 64 KiB, d = 64 (Br = Bc = 64)
    fig, ax = canvas(6.3, (0, 18), (0, 12.6), "Causal mask on the block grid: what stage 04 never reads")
    cs = 1.05
    gx, gy = 1.5, 1.5  # bottom-left corner of the grid; Q block 0 is the top row
    top = gy + T * cs
    n_full = n_diag = n_skip = 0
    for i in range(T):
        for j in range(T):
            x, y = gx + j * cs, top - (i + 1) * cs
            if j > i:  # past keys_needed = keys_seen(last row of block i): never loaded
                box(ax, x, y, cs, cs, fc=SKIP_C, ec="white", lw=1.5)
                n_skip += 1
            elif j == i:  # crosses the diagonal: loaded, masked above it
                box(ax, x, y, cs, cs, fc=tint(OK_C, 0.35), ec="white", lw=1.5)
                ax.add_patch(Polygon([(x, y + cs), (x + cs, y + cs), (x + cs, y)], closed=True,
                                     facecolor=tint(MASK_C, 0.45), edgecolor="white", linewidth=0.8,
                                     hatch="///"))
                n_diag += 1
            else:
                box(ax, x, y, cs, cs, fc=tint(OK_C, 0.35), ec="white", lw=1.5)
                n_full += 1
    ax.plot([gx, gx + T * cs], [top, gy], color=MASK_C, lw=1.2, ls="--")
    for k in range(T):
        ax.text(gx - 0.15, top - (k + 0.5) * cs, f"i={k}", ha="right", va="center", fontsize=8.5, color=Q_C)
        ax.text(gx + (k + 0.5) * cs, top + 0.15, f"j={k}", ha="center", va="bottom", fontsize=8.5, color=KV_C)
    ax.text(gx + T * cs / 2, top + 0.65, "K/V blocks j (Bc keys each): the inner loop", ha="center",
            fontsize=10, color=KV_C)
    ax.text(gx - 1.15, top - T * cs / 2, "Q blocks i (Br rows each): parallel tasks", rotation=90,
            ha="center", va="center", fontsize=10, color=Q_C)
    ax.text(gx + T * cs / 2, gy - 0.35, f"drawn: N_q = N_k = {T} blocks, Br = Bc", ha="center", va="top",
            fontsize=9, color=MUTED)
    # Row i stops at keys_needed.
    i = 4
    yk = top - (i + 0.5) * cs
    arrow(ax, gx + 0.1, yk, gx + (i + 1) * cs - 0.1, yk, color=INK, lw=1.3)
    ax.text(gx + (i + 1) * cs + 0.1, yk + 0.02, "stop: keys_needed", ha="left", va="center", fontsize=8.5,
            fontweight="bold", bbox=dict(facecolor="white", edgecolor="none", pad=1))

    # Legend and the count.
    lx, ly = 10.7, 10.6
    items = [
        (tint(OK_C, 0.35), None, f"full block, no mask: {n_full}"),
        (tint(MASK_C, 0.45), "///", f"on the diagonal (crosses): -inf above it: {n_diag}"),
        (SKIP_C, None, f"past keys_needed: K_j, V_j not read: {n_skip}"),
    ]
    for k, (fc, hatch, label) in enumerate(items):
        y = ly - k * 0.75
        ax.add_patch(Rectangle((lx, y), 0.5, 0.5, facecolor=fc, edgecolor=MUTED, linewidth=0.6, hatch=hatch))
        ax.text(lx + 0.7, y + 0.25, label, va="center", fontsize=9.5)
    ax.text(lx, 8.2, "keys_needed = keys_seen(last row of block i):\nthe K/V loop of block i ends there, "
            "so every\nblock right of the diagonal is skipped whole.", fontsize=9.5, va="top")
    ax.text(lx, 6.3, "K/V blocks read (Tr = Tc = 8):", fontsize=10, fontweight="bold", va="top")
    # Bars: blocks of K and V loaded, not causal against causal.
    bx, bw = lx, 6.8
    for k, (label, n, c) in enumerate([("not causal", T * T, KV_C), ("causal", n_full + n_diag, OK_C)]):
        y = 5.0 - k * 0.8
        box(ax, bx, y, bw * n / (T * T), 0.55, fc=tint(c, 0.3), ec="none")
        ax.text(bx + 0.1, y + 0.27, f"{label}: {n}", va="center", fontsize=9.5)
    ax.text(lx, 3.4, f"saved: {n_skip} of {T * T} loads (T(T-1)/2 of T\u00b2: half, as T grows).\n"
            "Counted at N = 4096, d = 64, Br = 64 (README):\n"
            "K/V traffic 33.6 M -> 17.0 M elements.", fontsize=9.5, va="top")
    ax.text(lx, 1.55, "With Br \u2260 Bc the block that keys_needed falls in is cut:\n"
            "only its first bn = keys_needed - c0 keys are loaded.", fontsize=8.5, va="top", color=MUTED)
    save(fig, out, "diagram_block_grid_causal.png")


# ---- 3. stage 05: v1's thread-block layout against v2's warp split ----------------------------
def v1_vs_v2(out):
    d = 64
    # v1: runner.cu's v1_blocks: M = 48 KiB of floats, Bc = ceil(M / 4d), Br = min(Bc, d).
    M = 48 * 1024 // 4
    Bc1 = -(-M // (4 * d))
    Br1 = min(Bc1, d)
    threads1 = 128
    v1_floats = Br1 * d + Bc1 * (d | 1) + Bc1 * d + Br1 * (Bc1 + 1) + Br1 * d + 3 * Br1  # v1::Layout
    # v2: kWarps = 4, Br = 16 kWarps, Bc = 64, tiles of (rows, D + 8) 16-bit values.
    warps2, Br2, Bc2 = 4, 64, 64
    v2_bytes = (Br2 + 2 * Bc2) * (d + 8) * 2

    fig, ax = canvas(6.9, (0, 18), (0, 13.8), f"Who computes what: v1 (a block of {threads1} threads) "
                     f"against v2 ({warps2} warps), d = {d}")
    u = 0.085  # size of one element of S
    for panel, (x0, name) in enumerate([(0.5, "v1"), (9.4, "v2")]):
        Br, Bc = (Br1, Bc1) if panel == 0 else (Br2, Bc2)
        y_top = 12.2
        ax.text(x0, y_top + 0.45, f"{name}: S_ij, a Br x Bc = {Br} x {Bc} tile", fontsize=11,
                fontweight="bold", va="center")
        for r in range(Br):
            for c in range(Bc):
                w = ((r * Bc + c) % threads1) // 32 if panel == 0 else r // 16
                ax.add_patch(Rectangle((x0 + c * u, y_top - (r + 1) * u), u, u, facecolor=tint(WARP_C[w], 0.15),
                                       edgecolor="none"))
        ax.add_patch(Rectangle((x0, y_top - Br * u), Bc * u, Br * u, facecolor="none", edgecolor=INK, lw=1))
        ax.text(x0 + Bc * u / 2, y_top - Br * u - 0.1, f"Bc = {Bc} keys", ha="center", va="top", fontsize=9)
        ax.text(x0 - 0.1, y_top - Br * u / 2, f"Br = {Br} rows", rotation=90, ha="right", va="center", fontsize=9)
        tx = x0 + Bc * u + 0.3
        if panel == 0:
            ax.text(tx, y_top - 0.1, "S step: element\ne = r Bc + c goes to\nthread e % 128: a warp's\n"
                    "elements spread over\nevery row", fontsize=9.5, va="top")
            ax.text(tx, y_top - 2.1, "softmax: thread r owns row r\n"
                    f"({Br} of {threads1} threads busy)", fontsize=9.5, va="top")
            ax.text(tx, y_top - 3.3, "so every step reads what\nother warps wrote: S, O_i, m, l\n"
                    "live in shared memory", fontsize=9.5, va="top")
        else:
            for w in range(warps2):
                ax.text(x0 + Bc * u / 2, y_top - (w * 16 + 8) * u, f"warp {w}: rows {16 * w}-{16 * w + 15}, "
                        f"all {Bc} keys", fontsize=9.5, ha="center", va="center", color="white", fontweight="bold")
            ax.text(tx, y_top - 0.1, "each warp: its 16\nrows of S, P, O_i,\nm, l; every warp\nreads all of\n"
                    "K_j and V_j", fontsize=9.5, va="top")
        # Legend of the warps (same colours in both panels).
    for w in range(4):
        ax.add_patch(Rectangle((0.5 + w * 2.0, 6.25), 0.35, 0.35, facecolor=tint(WARP_C[w], 0.15), edgecolor="none"))
        ax.text(0.95 + w * 2.0, 6.42, f"warp {w}", va="center", fontsize=9)

    # What lives where, and the steps of one K/V block.
    rows1 = [
        ("shared memory (fp32, %.1f KiB):" % (v1_floats * 4 / 1024), True),
        (f"Q_i {Br1}x{d}, K_j {Bc1}x{d | 1}, V_j {Bc1}x{d},", False),
        (f"S {Br1}x{Bc1 + 1}, O_i {Br1}x{d}, m, l, alpha", False),
        ("per K/V block, 4 __syncthreads:", True),
        ("1  all threads copy K_j, V_j   | barrier", False),
        ("2  S = scale Q_i K_j^T, 1 thread/element   | barrier", False),
        ("3  softmax, 1 thread/row   | barrier", False),
        ("4  O_i = alpha O_i + P V_j, 1 thread/element", False),
        ("    | barrier (before the next copy)", False),
        ("scalar fp32 FMAs, 2 shared reads each", True),
    ]
    rows2 = [
        ("shared memory (16-bit, %.0f KiB): only" % (v2_bytes / 1024), True),
        (f"Q_i, K_j, V_j, {Br2}x{d + 8} each (+8 padding)", False),
        ("registers of each warp: its S, P, O_i, m, l", False),
        ("per K/V block, 2 __syncthreads:", True),
        ("   barrier | all threads copy K_j, V_j | barrier", False),
        ("each warp, alone, on its 16 rows:", False),
        ("1  S = Q_i K_j^T: mma.sync m16n8k16", False),
        ("2  softmax: a row lives in one quad (4 lanes),", False),
        ("    2 __shfl_xor_sync: no other warp needed", False),
        ("3  O_i += P V_j: P reused from registers", False),
    ]
    for x0, rows in [(0.5, rows1), (9.4, rows2)]:
        y = 5.6
        for text, bold in rows:
            ax.text(x0, y, text, fontsize=9.5, va="center", fontweight="bold" if bold else "normal",
                    family="DejaVu Sans Mono" if not bold else "DejaVu Sans")
            y -= 0.52
    ax.plot([9.0, 9.0], [0.3, 13.0], color=SKIP_C, lw=1.5)
    save(fig, out, "diagram_v1_vs_v2_work_split.png")


# ---- 4. stage 05: the mma.sync m16n8k16 fragments ---------------------------------------------
def mma_fragment(out):
    # PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type" (.f16/.bf16 A, B;
    # .f32 C, D), as ptx.cuh restates it. groupID g = lane >> 2, threadID_in_group t = lane % 4.
    A = {}  # (row, col) -> (lane, register 0..3)
    B = {}
    C = {}
    for lane in range(32):
        g, t = lane >> 2, lane % 4
        for i in range(8):  # a0..a7: four registers of two halves
            row = g if (i < 2 or 4 <= i < 6) else g + 8
            col = t * 2 + (i & 1) + (8 if i >= 4 else 0)
            A[(row, col)] = (lane, i // 2)
        for i in range(4):  # b0..b3: two registers of two halves
            row = t * 2 + (i & 1) + (8 if i >= 2 else 0)
            B[(row, g)] = (lane, i // 2)
        for i in range(4):  # c0..c3: four fp32 registers
            row = g if i < 2 else g + 8
            C[(row, t * 2 + (i & 1))] = (lane, i)
    assert len(A) == 256 and len(B) == 128 and len(C) == 128

    fig, ax = canvas(6.6, (0, 38.5), (-5.1, 19.4), "One mma.sync.m16n8k16: which lane holds which element")
    reg_c = [tint(c, 0.55) for c in WARP_C]

    def grid(x0, rows, cols, cells, name, sub, regname):
        for (r, c), (lane, reg) in cells.items():
            ax.add_patch(Rectangle((x0 + c, 16 - r - 1), 1, 1, facecolor=reg_c[reg], edgecolor="white", lw=0.8))
            ax.text(x0 + c + 0.5, 16 - r - 0.5, str(lane), ha="center", va="center", fontsize=7.2, color=INK)
        ax.add_patch(Rectangle((x0, 16 - rows), cols, rows, facecolor="none", edgecolor=INK, lw=1.0))
        ax.text(x0 + cols / 2, 16.9, name, ha="center", va="center", fontsize=11, fontweight="bold")
        ax.text(x0 + cols / 2, 16.25, sub, ha="center", va="center", fontsize=8.5, color=MUTED)
        for k in range(4):
            lx = x0 + (k % 2) * 4 if cols == 8 else x0 + k * 4
            ly = -1.1 - (k // 2) * 0.9 if cols == 8 else -1.1
            ax.add_patch(Rectangle((lx, ly), 0.7, 0.7, facecolor=reg_c[k], edgecolor="none"))
            ax.text(lx + 0.85, ly + 0.35, f"{regname}[{k}]", va="center", fontsize=8.5)

    grid(0.5, 16, 16, A, "A: 16 x 16 (Q, or P)", "row-major, 16-bit; a[k] = 2 halves", "a")
    # B has only b[0], b[1]: draw its legend by hand.
    for (r, c), (lane, reg) in B.items():
        ax.add_patch(Rectangle((18 + c, 16 - r - 1), 1, 1, facecolor=reg_c[reg], edgecolor="white", lw=0.8))
        ax.text(18 + c + 0.5, 16 - r - 0.5, str(lane), ha="center", va="center", fontsize=7.2)
    ax.add_patch(Rectangle((18, 0), 8, 16, facecolor="none", edgecolor=INK, lw=1.0))
    ax.text(22, 16.9, "B: 16 x 8 (K_j^T, or V_j)", ha="center", va="center", fontsize=11, fontweight="bold")
    ax.text(22, 16.25, "\"col\", 16-bit; b[k] = 2 halves", ha="center", va="center", fontsize=8.5, color=MUTED)
    for k in range(2):
        ax.add_patch(Rectangle((18 + k * 4, -1.1), 0.7, 0.7, facecolor=reg_c[k], edgecolor="none"))
        ax.text(18 + k * 4 + 0.85, -0.75, f"b[{k}]", va="center", fontsize=8.5)
    grid(27.5, 16, 8, C, "C, D: 16 x 8 (S, or O)", "fp32; c[k] = 1 float", "c")
    ax.text(17.25, 8, "x", ha="center", va="center", fontsize=16)
    ax.text(26.75, 8, "=", ha="center", va="center", fontsize=16)
    # A quad: row 1 of C is lanes 4-7, row 9 the same lanes.
    for r in (1, 9):
        ax.add_patch(Rectangle((27.5, 16 - r - 1), 8, 1, facecolor="none", edgecolor=MASK_C, lw=2.2))
    ax.text(27.5 + 8.3, 16 - 1.5, "row 1\n(g = 1)", va="center", fontsize=8.5, color=MASK_C)
    ax.text(27.5 + 8.3, 16 - 9.5, "row 9\n(g + 8)", va="center", fontsize=8.5, color=MASK_C)

    notes = [
        "lane = 4 g + t:  g = lane / 4 picks rows g and g + 8,  t = lane % 4 picks columns 2t, 2t + 1 "
        "(and 8 + 2t, 8 + 2t + 1 in A).",
        "v2's row max: a row of S's C fragment sits in one quad (lanes 4g .. 4g + 3, red): each lane takes "
        "the max of its own values, then",
        "2 shuffles, __shfl_xor_sync(.., 1) and (.., 2), give all 4 lanes the row max; no shared memory, "
        "no other warp.",
        "v2's P: two C fragments side by side (keys 16k .. 16k + 15) are, lane for lane, the A fragment of "
        "P V_j: pack2() to 16 bits, reuse.",
    ]
    for k, t in enumerate(notes):
        ax.text(0.5, -2.85 - k * 0.6, t, fontsize=9, va="center")
    save(fig, out, "diagram_mma_fragment.png")


# ---- 5. stage 05: v3's double buffer ----------------------------------------------------------
def v3_double_buffer(out):
    n_blocks = 3
    LOAD, COMP, SYNC, QLOAD = 1.0, 1.6, 0.1, 0.5  # schematic
    H = 0.75  # bar height

    fig, ax = canvas(4.9, (-2.2, 10.4), (-0.2, 9.6), "K/V loads: v2 copies, then computes; v3 copies "
                     "block j+1 while it computes block j")

    def lane_names(lanes):
        for name, y in lanes.items():
            ax.text(-0.15, y + H / 2, name, ha="right", va="center", fontsize=9.5)

    def barrier(t, y0, y1):
        ax.plot([t, t], [y0, y1], color=MASK_C, lw=1.8)

    # v2: __syncthreads, load K_j and V_j (global -> registers -> shared), __syncthreads, compute.
    ax.text(-2.1, 8.55, "v2", fontsize=12, fontweight="bold", va="center")
    ax.text(-1.55, 8.55, "one K and one V buffer: the copy waits for the compute, the compute for the copy",
            fontsize=9, color=MUTED, va="center")
    l2 = {"copy": 7.15, "compute": 6.2}
    lane_names(l2)
    t = 0.0
    box(ax, t, l2["copy"], QLOAD, H, fc=tint(Q_C, 0.5), ec="white", text="Q", fs=8.5)
    box(ax, t, l2["compute"], QLOAD, H, fc=SKIP_C, ec="white")
    t += QLOAD
    barrier(t, 6.1, 8.05)
    t += SYNC
    for j in range(n_blocks):
        if j:
            barrier(t, 6.1, 8.05)  # every warp is done with K_j-1, V_j-1
            t += SYNC
        box(ax, t, l2["copy"], LOAD, H, fc=tint(KV_C, 0.45), ec="white", text=f"K{j},V{j}", fs=8.5)
        box(ax, t, l2["compute"], LOAD, H, fc=SKIP_C, ec="white", text="idle", fs=8, color=MUTED)
        t += LOAD
        barrier(t, 6.1, 8.05)  # K_j, V_j complete
        t += SYNC
        box(ax, t, l2["compute"], COMP, H, fc=tint(OK_C, 0.4), ec="white", text=f"block {j}", fs=8.5)
        t += COMP
    end2 = t

    # v3: cp.async.wait_group 0 + __syncthreads, issue K_j+1, V_j+1 into the other buffer, compute j.
    ax.text(-2.1, 4.85, "v3", fontsize=12, fontweight="bold", va="center")
    ax.text(-1.55, 4.85, "two K and two V buffers: block j+1 is copied into one while block j is read "
            "from the other", fontsize=9, color=MUTED, va="center")
    l3 = {"cp.async": 3.45, "compute": 2.5}
    lane_names(l3)
    t = 0.0
    box(ax, t, l3["cp.async"], LOAD, H, fc=tint(KV_C, 0.45), ec="white", text="Q,K0,V0", fs=8.5)
    box(ax, t, l3["compute"], LOAD, H, fc=SKIP_C, ec="white", text="idle", fs=8, color=MUTED)
    landed, t = LOAD, LOAD
    for j in range(n_blocks):
        start = max(t, landed)  # cp.async.wait_group 0: this thread's copies of block j have landed
        if start > t:
            box(ax, t, l3["compute"], start - t, H, fc=SKIP_C, ec="white")
        barrier(start, 2.4, 4.35)  # __syncthreads: everyone's copies, and block j-1 done
        start += SYNC
        if j + 1 < n_blocks:
            box(ax, start, l3["cp.async"], LOAD, H, fc=tint(KV_C, 0.45), ec="white",
                text=f"K{j + 1},V{j + 1}\n-> buf {(j + 1) % 2}", fs=8)
            landed = start + LOAD
        box(ax, start, l3["compute"], COMP, H, fc=tint(OK_C, 0.4), ec="white", text=f"block {j}, buf {j % 2}",
            fs=8.5)
        t = start + COMP
    end3 = t
    ax.annotate("", xy=(end3, 2.0), xytext=(end2, 2.0), arrowprops=dict(arrowstyle="<->", color=INK, lw=1.0))
    ax.plot([end2, end2], [1.8, 6.1], color=MUTED, lw=0.8, ls=":")
    ax.text((end2 + end3) / 2, 1.75, "saved: the copies of blocks\n1 and 2 ran under compute", ha="center",
            va="top", fontsize=8.5)

    # Legend.
    ly = 0.75
    ax.plot([0, 0], [ly - 0.25, ly + 0.25], color=MASK_C, lw=1.8)
    ax.text(0.15, ly, "__syncthreads: v2, 2 per block; v3, 1 per block (after cp.async.wait_group 0)",
            va="center", fontsize=8.5)
    box(ax, 0, ly - 0.85, 0.3, 0.4, fc=tint(OK_C, 0.4), ec="none")
    ax.text(0.45, ly - 0.65, "block j: S = Q_i K_j^T, softmax, O_i += P V_j.  Lengths schematic, "
            "not measured.", va="center", fontsize=8.5, color=MUTED)
    save(fig, out, "diagram_v3_double_buffer.png")


# ---- 6. stage 05: v12's producer and consumers ------------------------------------------------
def simulate_v12(tiles, Tc, d):
    """An event simulation of v12's synchronisation (v12_warp_specialized.cuh): one producer thread,
    rings of 2 K, 2 V and 2 Q buffers, mbarriers full[s] (the copy landed) and empty[s] (all 256
    consumer threads, both warpgroups, arrived), two consumer warpgroups sharing the tensor cores.
    Durations d are schematic. Each actor is a generator that yields ("at", t) before it changes
    shared state and ("wait", table, key, t) for a barrier phase; the scheduler always resumes the
    actor with the earliest time. Returns the intervals to draw: (lane, t0, t1, label, kind)."""
    full, empty, arrivals = {}, {}, {}
    intervals = []
    engine = [0.0]   # the copy engine: copies land one after another
    tc_free = [0.0]  # the tensor cores: both warpgroups' wgmma run one after another

    def producer():
        t, n = 0.0, 0
        for step in range(tiles + 1):
            if step >= 2:  # empty_q: the tile two before has written its O
                t0 = t
                t = yield ("wait", empty, ("q", step - 2), t)
                if t > t0:
                    intervals.append(("producer", t0, t, "", "wait"))
            t = yield ("at", t)
            if step == tiles:  # no more tiles: arrive on full_q, the consumers stop
                full[("q", step)] = t
                return
            copies = [("q", step, f"Q{step}")]
            for j in range(Tc):
                copies += [("k", n + j, f"K{j}"), ("v", n + j, f"V{j}")]
            for ring, use, label in copies:
                if ring != "q" and use >= 2:  # empty_k / empty_v of the buffer's previous use
                    t0 = t
                    t = yield ("wait", empty, (ring, use - 2), t)
                    if t > t0:
                        intervals.append(("producer", t0, t, "", "wait"))
                t = yield ("at", t)
                if step % 2:
                    label += "\u2032"  # tile 1's blocks are primed
                intervals.append(("producer", t, t + d["issue"], label, "issue"))
                t += d["issue"]
                land = max(t, engine[0]) + d["copy_" + ring]
                engine[0] = land
                intervals.append((f"{ring.upper()} buf {use % 2}", t, land, label, "fill"))
                full[(ring, use)] = land
            n += Tc

    def consumer(w):
        t, n0 = 0.0, 0
        sm_lane, tc_lane = f"WG{w + 1} softmax", f"WG{w + 1} tensor cores"

        def mma(t, dur, label):
            start = max(t, tc_free[0])
            tc_free[0] = start + dur
            intervals.append((tc_lane, start, start + dur, label, "mma"))
            return start + dur

        def release(ring, n, t):
            arrivals.setdefault((ring, n), []).append(t)
            if len(arrivals[(ring, n)]) == 2:
                empty[(ring, n)] = max(arrivals[(ring, n)])

        for step in range(tiles + 1):
            t = yield ("wait", full, ("q", step), t)
            if step == tiles:
                return
            p = "\u2032" if step % 2 else ""
            t = yield ("wait", full, ("k", n0), t)  # block 0: S_0 alone
            t = yield ("at", t)
            t = mma(t, d["s"], f"S0{p}")
            t = yield ("at", t)
            release("k", n0, t)
            intervals.append((sm_lane, t, t + d["softmax"], f"softmax 0{p}", "softmax"))
            t += d["softmax"]
            for j in range(1, Tc):
                t = yield ("wait", full, ("k", n0 + j), t)
                t = yield ("wait", full, ("v", n0 + j - 1), t)
                t = yield ("at", t)
                s_end = mma(t, d["s"], f"S{j}{p}")
                pv_end = mma(s_end, d["pv"], f"PV{j - 1}{p}")
                t = yield ("at", s_end)  # wgmma_wait<1>: S_j done, K_j read
                release("k", n0 + j, t)
                intervals.append((sm_lane, t, t + d["softmax"], f"softmax {j}{p}", "softmax"))
                t = yield ("at", max(t + d["softmax"], pv_end))  # wgmma_wait<0>: V_{j-1} read
                release("v", n0 + j - 1, t)
            t = yield ("wait", full, ("v", n0 + Tc - 1), t)
            t = yield ("at", t)
            t = mma(t, d["pv"], f"PV{Tc - 1}{p}")
            t = yield ("at", t)
            release("v", n0 + Tc - 1, t)
            intervals.append((sm_lane, t, t + d["write"], f"write O{p}", "write"))
            t += d["write"]
            t = yield ("at", t)
            release("q", step, t)
            n0 += Tc

    pending = {}
    for a in (producer(), consumer(0), consumer(1)):
        pending[a] = next(a)
    while pending:
        best, best_t = None, None
        for a, req in pending.items():
            if req[0] == "at":
                te = req[1]
            elif req[2] in req[1]:
                te = max(req[3], req[1][req[2]])
            else:
                continue
            if best is None or te < best_t:
                best, best_t = a, te
        if best is None:
            raise RuntimeError("v12 simulation deadlocked")
        try:
            pending[best] = best.send(best_t)
        except StopIteration:
            del pending[best]
    # A K or V buffer is held from its landing until empty[s] completes.
    for (ring, n), t_empty in empty.items():
        if ring in "kv":
            intervals.append((f"{ring.upper()} buf {n % 2}", full[(ring, n)], t_empty, "", "held"))
        else:
            intervals.append((f"Q buf {n % 2}", full[(ring, n)], t_empty, "", "held"))
    return intervals


def v12_producer_consumer(out):
    Tc = 3  # key blocks per tile, two tiles
    dur = dict(issue=0.12, copy_q=0.9, copy_k=0.7, copy_v=0.7, s=0.55, pv=0.55, softmax=0.75, write=0.6)
    iv = simulate_v12(2, Tc, dur)
    lanes = ["producer", "Q buf 0", "Q buf 1", "K buf 0", "K buf 1", "V buf 0", "V buf 1",
             "WG1 tensor cores", "WG1 softmax", "WG2 tensor cores", "WG2 softmax"]
    names = {"producer": "producer (1 thread)", "WG1 tensor cores": "WG1: wgmma",
             "WG1 softmax": "WG1: softmax, O", "WG2 tensor cores": "WG2: wgmma",
             "WG2 softmax": "WG2: softmax, O"}
    t_end = max(t1 for _, _, t1, _, _ in iv)
    left = -0.2 * t_end
    fig, ax = canvas(6.8, (left, t_end + 0.2), (-3.0, len(lanes) + 1.3),
                     "v12: a TMA producer thread, rings of 2 buffers, two consumer warpgroups")
    ys = {name: len(lanes) - 1 - k for k, name in enumerate(lanes)}
    for name, y in ys.items():
        ax.text(-0.1, y + 0.4, names.get(name, name), ha="right", va="center", fontsize=9)
        if name in ("Q buf 0", "WG1 tensor cores"):
            ax.plot([left, t_end + 0.2], [y + 0.95, y + 0.95], color=SKIP_C, lw=1)
    style = {"issue": tint(KV_C, 0.2), "wait": SKIP_C, "fill": tint(KV_C, 0.15), "held": tint(KV_C, 0.55),
             "mma": tint(OK_C, 0.35), "softmax": tint(Q_C, 0.55), "write": tint(Q_C, 0.2)}
    for lane, t0, t1, label, kind in iv:
        y, h = ys[lane], 0.8
        if lane.startswith("Q") and kind == "held":
            fc = tint(EXTRA_C, 0.55)
        elif lane.startswith("Q") and kind == "fill":
            fc = tint(EXTRA_C, 0.3)
        else:
            fc = style[kind]
        ax.add_patch(Rectangle((t0, y), t1 - t0, h, facecolor=fc, edgecolor="white", lw=0.8,
                               hatch="////" if kind == "fill" else None))
        if label and t1 - t0 > 0.25:
            ax.text((t0 + t1) / 2, y + h / 2, label, ha="center", va="center", fontsize=7.5, color=INK,
                    bbox=dict(facecolor="white", edgecolor="none", pad=0.8) if kind == "fill" else None)
    leg = [(tint(KV_C, 0.15), "////", "TMA copy in flight; its landing completes full[s]"),
           (tint(KV_C, 0.55), None, "K/V buffer full, in use until empty[s] (256 consumer threads)"),
           (SKIP_C, None, "producer waits on empty[s]: the buffer's use 2 before released"),
           (tint(EXTRA_C, 0.55), None, "Q buffer in use until the tile's O is written"),
           (tint(OK_C, 0.35), None, "wgmma: S_j issued together with PV of block j-1"),
           (tint(Q_C, 0.55), None, "softmax of S_j, beside the other group's wgmma (dark: O)")]
    for k, (fc, hatch, text) in enumerate(leg):
        x = left + 0.1 + (k % 2) * (t_end - left) / 2
        y = -0.75 - (k // 2) * 0.55
        ax.add_patch(Rectangle((x, y - 0.18), 0.35, 0.36, facecolor=fc, edgecolor="white", hatch=hatch))
        ax.text(x + 0.5, y, text, va="center", fontsize=8.5)
    ax.text(left + 0.1, -2.6, "Primed labels: the next tile, copied while this one ends: the producer runs ahead by "
            "whole buffers. Ring depth 2 for K, V, Q.\nBoth warpgroups compute one tile (64 of its Br = 128 rows "
            "each, Bc = 128 at d = 128). Durations schematic; order and waits as in the code.",
            fontsize=8.5, color=MUTED, va="center")
    save(fig, out, "diagram_v12_producer_consumer.png")


# ---- 7. stage 06: the backward's K/V-outer loop -----------------------------------------------
def backward_loop(out):
    Tr, Tc = 5, 5
    fig, ax = canvas(6.0, (0, 18), (1.4, 13.2), "Backward: K/V blocks outside, Q blocks inside; "
                     "dQ_i collects a share from every j")
    cs = 1.0
    gx, gy = 1.4, 4.2
    top = gy + Tr * cs
    jj, ii = 2, 3
    for i in range(Tr):
        for j in range(Tc):
            fc = tint(KV_C, 0.6) if j == jj else "#f0f0f0"
            if j == jj and i == ii:
                fc = tint(KV_C, 0.15)
            box(ax, gx + j * cs, top - (i + 1) * cs, cs, cs, fc=fc, ec="white", lw=1.5)
    for k in range(Tr):
        ax.text(gx - 0.12, top - (k + 0.5) * cs, f"i={k}", ha="right", va="center", fontsize=8.5, color=Q_C)
    for k in range(Tc):
        ax.text(gx + (k + 0.5) * cs, top + 0.12, f"j={k}", ha="center", va="bottom", fontsize=8.5, color=KV_C)
    ax.text(gx + Tc * cs / 2, top + 0.65, "K/V blocks j: one task each", ha="center", fontsize=10, color=KV_C)
    ax.text(gx - 0.95, top - Tr * cs / 2, "Q blocks i: the inner loop", rotation=90, ha="center",
            va="center", fontsize=10, color=Q_C)
    xcol = gx + (jj + 0.5) * cs
    arrow(ax, xcol, top - 0.15, xcol, gy + 0.15, color=INK, lw=1.6)
    box(ax, gx + jj * cs - 0.3, gy - 1.2, cs + 0.6, 0.75, fc=tint(KV_C, 0.4), ec=KV_C, text="dK_j, dV_j", fs=8.5)
    ax.text(xcol, gy - 1.35, "on chip for the whole column,\nwritten to HBM once", ha="center", va="top",
            fontsize=8.5)
    # Row i: every j adds into dQ_i.
    ydq = top - (ii + 1) * cs
    ax.add_patch(Rectangle((gx, ydq), Tc * cs, cs, facecolor="none", edgecolor=Q_C, lw=2.0))
    box(ax, gx + Tc * cs + 0.55, ydq + 0.1, 1.2, 0.8, fc=tint(Q_C, 0.4), ec=Q_C, text="dQ_i", fs=9)
    arrow(ax, gx + Tc * cs + 0.05, ydq + 0.5, gx + Tc * cs + 0.55, ydq + 0.5, color=Q_C, lw=1.4)
    ax.text(gx + Tc * cs + 1.15, ydq - 0.1, "+= dS K_j\nfrom every j", ha="center", va="top", fontsize=8.5,
            color=Q_C)

    # One step (j, i), in the order the code runs it.
    sx, sy = 9.0, 11.9
    ax.text(sx, sy, "one step (j, i), the dark cell; FA2 Alg. 2's lines:", fontsize=10.5, fontweight="bold",
            va="center")
    steps = [  # (the paper's Algorithm 2 line, the step, a note), in the order the code runs them
        (10, "S = scale Q_i K_j^T", "recomputed"),
        (11, "P = exp(S - LSE_i)", "no running max: LSE saved"),
        (12, "dV_j += P^T dO_i", "stays on chip"),
        (13, "dP = dO_i V_j^T", ""),
        (14, "dS = P * (dP - D_i)", "D_i = rowsum(dO_i * O_i)"),
        (16, "dK_j += scale dS^T Q_i", "on chip; scale at the write"),
        (15, "dQ_i += scale dS K_j", "summed across j: below"),
    ]
    for k, (line, f, note) in enumerate(steps):
        y = sy - 0.65 - k * 0.52
        c = Q_C if "dQ" in f else (KV_C if ("dV" in f or "dK" in f) else INK)
        ax.text(sx + 0.1, y, f"{line}  {f}", fontsize=9.5, va="center", color=c, family="DejaVu Sans Mono")
        ax.text(sx + 4.75, y, note, fontsize=8.5, va="center", color=MUTED)

    # How dQ's sum is done, GPU and CPU.
    def panel(y_top, title, lines, fc, ec):
        h = 0.55 + 0.42 * len(lines)
        box(ax, sx, y_top - h, 8.7, h, fc=fc, ec=ec)
        ax.text(sx + 0.15, y_top - 0.3, title, fontsize=9.5, fontweight="bold", va="center")
        for k, t in enumerate(lines):
            ax.text(sx + 0.15, y_top - 0.75 - 0.42 * k, t, fontsize=8.5, va="center")
        return y_top - h

    y = panel(7.6, "GPU, bwd_v2_mma.cuh: one pass, dQ by atomics", [
        "a thread block per j walks every i; line 15 adds dS K_j into an",
        "fp32 dQacc in HBM with atomicAdd: the order of the additions",
        "varies run to run; the _det variant takes turns j = 0, 1, ...",
    ], tint(Q_C, 0.9), Q_C)
    panel(y - 0.25, "CPU, backward_tiled.hpp: two passes, no atomics", [
        "pass 1, a task per j: lines 10-14 and 16 for every i -> dK_j, dV_j",
        "pass 2, a task per i: S and dP recomputed, dQ_i += dS K_j in",
        "fixed j order: 7 block products instead of 5, bit-identical",
    ], "#f4f4f4", MUTED)
    ax.text(0.5, 1.8, "Drawn without a mask. Causal: a column j starts at the first Q block that sees its "
            "keys; the blocks above the diagonal are skipped.", fontsize=8.5, color=MUTED, va="center")
    save(fig, out, "diagram_backward_loop.png")


# ---- 8. stage 05 v14: decode by split-KV, and the block table -------------------------------
def decode_split_kv(out):
    # Issue 33's shape and what split_kv_plan() (runner.cu) makes of it on 132 SMs at d = 128:
    # G = H / H_kv query heads packed into one kRows = 16 tile, 64-key tiles, one wave of one block
    # an SM (s = SMs / units, which here keeps 128 of the 132 SMs busy).
    B, H, Hkv, Nk, sms = 8, 32, 8, 32768, 132
    G, kRows, Bc, kWarps = H // Hkv, 16, 64, 4
    units, tiles = B * Hkv, Nk // Bc
    max_s = max(1, min(128, tiles // 4))
    S = min(max(1, sms // units), max_s)
    assert units * S >= 0.85 * sms  # the one-wave regime of split_kv_plan()
    kps = -(-tiles // S) * Bc  # keys per split
    assert (S, kps) == (2, 16384)

    fig, ax = canvas(6.4, (0, 18), (0, 12.8), "Decode by split-KV (v14): one (batch, kv head), its keys "
                     "in splits, the splits merged")
    ax.text(7.6, 11.6, f"B = {B}, H = {H}, H_kv = {Hkv}, N_k = {Nk}, N_q = 1:  {units} (b, kv head) units x "
            f"{S} splits = {units * S} blocks on 132 SMs", ha="center", fontsize=9.5, color=MUTED)

    # The key axis of one (b, g), cut into S splits of whole 64-key tiles.
    x0, seg = 3.0, 10.6 / S
    ky = 9.95
    for s in range(S):
        x = x0 + s * seg
        box(ax, x, ky, seg, 0.95, fc=tint(KV_C, 0.55 - 0.1 * (s % 2)), ec="white", lw=1.5)
        for t in range(1, 8):  # schematic tile ticks (each split holds kps / Bc tiles)
            ax.plot([x + t * seg / 8] * 2, [ky, ky + 0.12], color="white", lw=0.8)
        ax.text(x + seg / 2, ky + 0.5, f"split {s}\nkeys {s * kps}-{(s + 1) * kps - 1}", ha="center",
                va="center", fontsize=8.5, color=INK)
    ax.text(x0 - 0.15, ky + 0.47, f"K, V of (b, g)\n{tiles} tiles of {Bc} keys", ha="right", va="center",
            fontsize=9)

    # The packed Q tile: G query heads (one row each at N_q = 1) of kRows rows; the rest masked.
    qx, qy, rh = 0.5, 4.9, 0.25
    for r in range(kRows):
        used = r < G
        box(ax, qx, qy + (kRows - 1 - r) * rh, 1.5, rh, fc=tint(Q_C, 0.35) if used else SKIP_C, ec="white", lw=0.6)
        if used:
            ax.text(qx + 0.75, qy + (kRows - 1 - r) * rh + rh / 2, f"head {G}g+{r}" if r else f"head {G}g",
                    ha="center", va="center", fontsize=7, color="white")
    ax.text(qx + 0.75, qy + kRows * rh + 0.2, f"Q tile, {kRows} rows", ha="center", fontsize=9,
            fontweight="bold", color=Q_C)
    ax.text(qx + 0.75, qy - 0.15, f"GQA packing:\nthe {G} query heads\nof kv head g, one\nrow each; "
            f"{kRows - G}\nrows masked", ha="center", va="top", fontsize=8.5)
    # The same Q tile goes to every split's block: a bus above the blocks.
    bus_y = 9.35
    ax.plot([qx + 1.5, qx + 1.5 + 0.3, qx + 1.5 + 0.3], [qy + 3.0, qy + 3.0, bus_y], color=Q_C, lw=1.2)
    ax.plot([qx + 1.8, x0 + (S - 1) * seg + 0.45], [bus_y, bus_y], color=Q_C, lw=1.2)

    # One block per split: 4 warps, each 16 keys of every 64-key tile, merged in shared memory.
    by, bh = 5.8, 3.0
    for s in range(S):
        x = x0 + s * seg + 0.15
        w = seg - 0.3
        arrow(ax, x0 + s * seg + seg / 2 + 0.2, ky, x0 + s * seg + seg / 2 + 0.2, by + bh, color=KV_C)
        arrow(ax, x + 0.3, bus_y, x + 0.3, by + bh, color=Q_C)
        box(ax, x, by, w, bh, fc="white", ec=INK, lw=1.2)
        ax.text(x + w / 2, by + bh - 0.3, f"block (b, g, s = {s})", ha="center", va="center", fontsize=8,
                fontweight="bold")
        for k in range(kWarps):
            yy = by + bh - 0.85 - k * 0.42
            box(ax, x + 0.15, yy, w - 0.3, 0.34, fc=tint(WARP_C[k], 0.55), ec="none",
                text=f"warp {k}: keys {16 * k}-{16 * k + 15}", fs=8)
        ax.text(x + w / 2, by + 0.45, f"(of each {Bc}-key tile);\nthe 4 states merged\nin shared memory", ha="center", va="center", fontsize=7.5,
                color=MUTED)
        # Its partial state.
        box(ax, x + 0.1, 4.5, w - 0.2, 0.7, fc=tint(OK_C, 0.75), ec=OK_C, lw=1.0,
            text=f"$O_{s}$, $LSE_{s}$ (fp32)", fs=9)
        arrow(ax, x + w / 2, by, x + w / 2, 5.2)
        arrow(ax, x + w / 2, 4.5, x0 + S * seg / 2 + (s - (S - 1) / 2) * 1.2, 3.65)

    # The combine kernel: stage 03's merge in log form.
    cx0, cw = x0, S * seg
    box(ax, cx0, 1.75, cw, 1.9, fc="#f7f7f7", ec=INK, lw=1.5)
    ax.text(cx0 + cw / 2, 3.3, "combine_kernel(): stage 03's merge() in log form, a warp per query row",
            ha="center", va="center", fontsize=9, fontweight="bold")
    ax.text(cx0 + cw / 2, 2.7, r"$M = \max_s LSE_s,\quad LSE = M + \log \Sigma_s\, e^{LSE_s - M}$", ha="center",
            va="center", fontsize=10.5)
    ax.text(cx0 + cw / 2, 2.1, r"$O = \Sigma_s\, e^{LSE_s - LSE}\, O_s$" "   (exact: the splits are disjoint "
            "and cover the keys)", ha="center", va="center", fontsize=10)
    box(ax, cx0 + cw / 2 - 2.3, 0.45, 4.6, 0.75, fc=tint(Q_C, 0.75), ec=Q_C, lw=1.0,
        text=f"O, LSE of the {G} query rows", fs=9.5)
    arrow(ax, cx0 + cw / 2, 1.75, cx0 + cw / 2, 1.2)

    # Inset: a block table maps a sequence's logical pages to scattered physical pages.
    ix = 14.3
    ax.plot([ix - 0.25, ix - 0.25], [0.4, 11.2], color=SKIP_C, lw=1.5)
    ax.text(ix + 1.6, 10.85, "paged: the block table", ha="center", fontsize=10, fontweight="bold")
    table = [5, 1, 8, 3, 10]  # a made-up table: sequence b's logical page n is physical page table[n]
    shared = {3}  # a page another sequence's table also lists (a common prefix)
    ph = 0.62
    ax.text(ix + 0.5, 10.2, "table[b, n]", ha="center", fontsize=8.5)
    ax.text(ix + 2.6, 10.2, "pages (K, V)", ha="center", fontsize=8.5)
    for n, page in enumerate(table):
        y = 9.3 - n * 1.0
        box(ax, ix, y, 1.0, 0.7, fc="white", ec=INK, text=f"n={n}: {page}", fs=8.5)
    for q in range(12):
        y = 9.55 - q * ph
        mine = q in table
        fc = tint(KV_C, 0.35) if mine else SKIP_C
        box(ax, ix + 2.0, y, 1.2, ph - 0.08, fc=fc, ec="white", text=f"page {q}" + (" *" if q in shared else ""),
            fs=7.5, color=INK if mine else MUTED)
    for n, page in enumerate(table):
        arrow(ax, ix + 1.0, 9.3 - n * 1.0 + 0.35, ix + 2.0, 9.55 - page * ph + (ph - 0.08) / 2, color=KV_C, lw=1.0,
              ms=9)
    ax.text(ix + 1.6, 1.4, "key j of sequence b: row j % P\nof page table[b, j / P]\n(page_of(): looked up a tile\n"
            "ahead; the arithmetic unchanged)\n* also in another sequence's\ntable (a shared prefix)", ha="center",
            va="center", fontsize=7.8)
    save(fig, out, "diagram_decode_split_kv.png")


# ---- 9. stage 07: ring attention, the ring and the zigzag -------------------------------------
def ring_attention(out):
    # World 4. Which chunks a rank holds: contiguous, chunk r of 4; zigzag, chunks r and 7 - r of 8
    # (ring.py's chunks_of()). The masks below are computed from those positions (query i sees key
    # j iff j <= i), not drawn by hand; the counts under the grids are the visible pairs.
    W, c = 4, 4  # ranks; rows a zigzag chunk is drawn with (a shard: 2c rows)
    n = 2 * c

    def positions(r, layout):
        if layout == "contiguous":
            return list(range(r * n, (r + 1) * n))
        return list(range(r * c, (r + 1) * c)) + list(range((2 * W - 1 - r) * c, (2 * W - r) * c))

    fig, ax = canvas(8.2, (0, 18), (0, 16.4), "Ring attention: Q stays, K/V travel, each step merged "
                     "(world = 4)")
    # --- top left: the ring at step s = 1.
    s_shown = 1
    cx, cy, rad = 4.3, 11.3, 2.75
    spots = [(cx, cy + rad), (cx + rad, cy), (cx, cy - rad), (cx - rad, cy)]  # rank 0 on top, clockwise
    for r, (x, y) in enumerate(spots):
        src = (r - s_shown) % W
        box(ax, x - 1.25, y - 0.55, 2.5, 1.1, fc="white", ec=INK, lw=1.2)
        ax.text(x, y + 0.3, f"rank {r}", ha="center", va="center", fontsize=9, fontweight="bold")
        box(ax, x - 1.1, y - 0.45, 1.05, 0.5, fc=tint(Q_C, 0.35), ec="none", text=f"Q{r}", fs=9)
        box(ax, x + 0.05, y - 0.45, 1.05, 0.5, fc=tint(KV_C, 0.2 + 0.15 * src), ec="none", text=f"K/V{src}", fs=9)
    for r in range(W):
        (x0, y0), (x1, y1) = spots[r], spots[(r + 1) % W]
        mx, my = (x0 + x1) / 2, (y0 + y1) / 2
        ox, oy = (mx - cx) * 0.35, (my - cy) * 0.35  # bow the arrows outward
        arrow(ax, x0 + (x1 - x0) * 0.3 + ox, y0 + (y1 - y0) * 0.3 + oy, x0 + (x1 - x0) * 0.7 + ox,
              y0 + (y1 - y0) * 0.7 + oy, color=KV_C, lw=1.6, connectionstyle="arc3,rad=-0.25")
    ax.text(cx, cy + 0.25, f"step s = {s_shown}:\nrank r holds\nthe K/V of\nrank r - s", ha="center",
            va="center", fontsize=8.5, color=MUTED)
    ax.text(cx, 7.35, "K/V hop to rank r + 1 while the step computes\n(isend / irecv, started before the "
            "attention)", ha="center", va="center", fontsize=8.5, color=KV_C)

    # --- top right: the schedule, and the merge.
    gx, gy, cw, ch = 10.0, 10.3, 1.6, 0.62
    ax.text(gx + 2 * cw, gy + (W + 1) * ch + 0.15, "which K/V block rank r holds at step s", ha="center",
            fontsize=9.5, fontweight="bold")
    for s in range(W):
        ax.text(gx + (s + 0.5) * cw, gy + W * ch + 0.3, f"s = {s}", ha="center", fontsize=8.5)
    for r in range(W):
        y = gy + (W - 1 - r) * ch
        ax.text(gx - 0.15, y + ch / 2, f"rank {r}", ha="right", va="center", fontsize=8.5, color=Q_C)
        for s in range(W):
            src = (r - s) % W
            box(ax, gx + s * cw, y, cw, ch, fc=tint(KV_C, 0.2 + 0.15 * src), ec="white", lw=1.2,
                text=f"K/V{src}" + (" (own)" if s == 0 else ""), fs=8)
    box(ax, 8.9, 7.0, 8.9, 2.85, fc="#f7f7f7", ec=INK, lw=1.2)
    ax.text(13.35, 9.5, "after each step: stage 03's merge(), in LSE form (merge_())", ha="center",
            fontsize=9.5, fontweight="bold")
    ax.text(9.2, 8.85, r"$m = \max(LSE, LSE_s),\ \ \alpha = e^{LSE - m},\ \ \beta = e^{LSE_s - m}$", fontsize=10.5,
            va="center")
    ax.text(9.2, 8.2, r"$O \leftarrow (\alpha\, O + \beta\, O_s)\,/\,(\alpha + \beta),\ \ "
            r"LSE \leftarrow m + \log(\alpha + \beta)$", fontsize=10.5, va="center")
    ax.text(9.2, 7.45, "(O, LSE) is the state (m, l, o) = (LSE, 1, O); start: O = 0, LSE = -inf.\n"
            "Backward: dQ stays; dK, dV follow their block, then hop home.", fontsize=8.5,
            va="center", color=MUTED)

    # --- bottom: causal work per (rank, step), contiguous against zigzag.
    def grid(x0, layout):
        cs = 0.9  # one (rank, step) cell: the n x n mask of Q_r against K/V of src
        px = cs / n
        top = 5.6
        ax.text(x0 + W * cs / 2 + 0.35, top + 0.75, f"causal, {layout}", ha="center", fontsize=10,
                fontweight="bold")
        busiest = [0] * W
        per_rank = []
        for r in range(W):
            qpos = positions(r, layout)
            y = top - (r + 1) * (cs + 0.12)
            ax.text(x0 - 0.1, y + cs / 2, f"rank {r}", ha="right", va="center", fontsize=8, color=Q_C)
            tot = 0
            for s in range(W):
                src = (r - s) % W
                kpos = positions(src, layout)
                x = x0 + s * (cs + 0.12)
                seen = 0
                for a, i in enumerate(qpos):
                    for b, j in enumerate(kpos):
                        ok = j <= i
                        seen += ok
                        ax.add_patch(Rectangle((x + b * px, y + cs - (a + 1) * px), px, px,
                                               facecolor=tint(OK_C, 0.25) if ok else SKIP_C, linewidth=0.3,
                                               edgecolor=tint(OK_C, 0.25) if ok else SKIP_C))
                ax.add_patch(Rectangle((x, y), cs, cs, facecolor="none", edgecolor=MUTED, linewidth=0.6))
                tot += seen
                busiest[s] = max(busiest[s], seen)
            per_rank.append(tot)
            ax.text(x0 + W * (cs + 0.12) + 0.1, y + cs / 2, f"{tot}", ha="left", va="center", fontsize=8)
        for s in range(W):
            ax.text(x0 + s * (cs + 0.12) + cs / 2, top + 0.15, f"s={s}", ha="center", fontsize=7.5)
        ax.text(x0 + W * (cs + 0.12) + 0.1, top + 0.15, "pairs", ha="left", fontsize=7.5)
        return per_rank, busiest

    pc, bc_ = grid(1.3, "contiguous")
    pz, bz = grid(6.9, "zigzag")
    assert sum(pc) == sum(pz) == W * n * (W * n + 1) // 2 and len(set(pz)) == 1
    mean = sum(pc) / W
    tx = 12.55
    ax.text(tx, 5.6, "All ranks wait for each hop, so a step\nlasts as long as its busiest rank.", fontsize=9,
            va="top")
    ax.text(tx, 4.5, f"contiguous: rank 0 computes {pc[0]} pairs,\nrank 3 {pc[3]}; the steps take the\n"
            f"busiest's, {sum(bc_)} = {sum(bc_) / mean:.2f}x the mean.", fontsize=9, va="top")
    ax.text(tx, 2.85, f"zigzag: rank r holds chunks r and 7 - r\n(one early, one late): {pz[0]} pairs\n"
            f"each; the steps take {sum(bz)} = {sum(bz) / mean:.2f}x.", fontsize=9, va="top")
    ax.text(tx, 1.15, f"drawn: N = {W * n} tokens, {n} a rank;\ngreen visible (j <= i), grey masked\n"
            "(skipped by the plan).", fontsize=8, va="top", color=MUTED)
    save(fig, out, "diagram_ring_attention.png")


# ---- 10. docs/variants.md: a sliding window's band on the block grid ------------------------
def variants_band(out):
    # A toy problem at the scale of the picture: N_q = N_k = 96, Br = Bc = 8 (T = 12 blocks each way),
    # causal with a window of w = 36 keys back (row i sees keys i - 36 ... i, problem.hpp's
    # key_range()). The blocks are classified by v13's rule (Tile::j0, the mask in softmax()):
    # a tile reads the key blocks j0 = key_begin(r0) / Bc ... ceil(key_end(last row) / Bc) - 1 and
    # masks a block that ends past its first row's key_end or starts before its last row's key_begin.
    T, Br, w = 12, 8, 36
    Bc, N = Br, T * Br

    def key_range(i):  # AttnProblem::key_range for N_q = N_k = N, causal, window (w, 0)
        return max(0, i - w), min(N, i + 1)

    kinds = {}  # (query block, key block) -> "full" | "mask" | "skip"
    for qb in range(T):
        r0 = qb * Br
        j0, end = key_range(r0)[0] // Bc, -(-key_range(r0 + Br - 1)[1] // Bc)
        for kb in range(T):
            c0 = kb * Bc
            if not j0 <= kb < end:
                kinds[qb, kb] = "skip"
            elif c0 + Bc > key_range(r0)[1] or c0 < key_range(r0 + Br - 1)[0]:
                kinds[qb, kb] = "mask"
            else:
                kinds[qb, kb] = "full"
    n_full = sum(k == "full" for k in kinds.values())
    n_mask = sum(k == "mask" for k in kinds.values())
    n_skip = sum(k == "skip" for k in kinds.values())
    n_causal = T * (T + 1) // 2  # blocks full causal reads
    pairs = sum(key_range(i)[1] - key_range(i)[0] for i in range(N))
    assert (n_full, n_mask, n_skip) == (30, 27, 87) and pairs == 2886, (n_full, n_mask, n_skip, pairs)

    fig, ax = canvas(6.6, (0, 18), (0, 13.2), "A sliding window on the block grid: one band of key "
                     "blocks per query block")
    cs = 0.8
    gx, gy = 1.3, 1.3
    top = gy + T * cs
    ex = cs / Br  # one element (key or row) in plot units

    def xy(key, row):  # an element's corner: key along x, query row down from the top
        return gx + key * ex, top - row * ex

    # The keys outside the band, as two staircases at element level: right of row i's key i (the
    # causal diagonal) and left of its key i - w. Hatched where they fall in a loaded block.
    right = [xy(N, 0)] + [p for i in range(N) for p in (xy(i + 1, i), xy(i + 1, i + 1))]
    left = [xy(0, w + 1)] + [p for i in range(w + 1, N) for p in (xy(i - w, i), xy(i - w, i + 1))] + [xy(0, N)]
    outside = [Polygon(right, closed=True), Polygon(left, closed=True)]
    for (qb, kb), kind in kinds.items():
        x, y = gx + kb * cs, top - (qb + 1) * cs
        if kind == "skip":
            box(ax, x, y, cs, cs, fc=SKIP_C, ec="white", lw=1.5)
            continue
        box(ax, x, y, cs, cs, fc=tint(OK_C, 0.35), ec="white", lw=1.5)
        if kind == "mask":
            for region in outside:
                r = Rectangle((x, y), cs, cs, facecolor=tint(MASK_C, 0.45), edgecolor="white", linewidth=0.8,
                              hatch="///")
                ax.add_patch(r)
                r.set_clip_path(Polygon(region.get_xy(), closed=True, transform=ax.transData))
    ax.plot(*zip(*right[1:]), color=MASK_C, lw=1.0)
    ax.plot(*zip(*left[1:-1]), color=MASK_C, lw=1.0)
    for k in range(T):
        ax.text(gx - 0.12, top - (k + 0.5) * cs, f"i={k}", ha="right", va="center", fontsize=8, color=Q_C)
        ax.text(gx + (k + 0.5) * cs, top + 0.12, f"{k}", ha="center", va="bottom", fontsize=8, color=KV_C)
    ax.text(gx + T * cs / 2, top + 0.55, "key blocks j (Bc keys each)", ha="center", fontsize=10, color=KV_C)
    ax.text(gx - 1.0, top - T * cs / 2, "query blocks i (Br rows each)", rotation=90, ha="center",
            va="center", fontsize=10, color=Q_C)
    ax.text(gx + T * cs / 2, gy - 0.3, f"drawn: N_q = N_k = {N}, Br = Bc = {Br}, causal, window ({w}, 0)",
            ha="center", va="top", fontsize=9, color=MUTED)
    # Query block 8's keys: from its first row's key_begin to its last row's key_end.
    qb = 8
    r0 = qb * Br
    kf, kn = key_range(r0)[0], key_range(r0 + Br - 1)[1]
    yk = top - (qb + 0.5) * cs
    arrow(ax, xy(kf, 0)[0], yk, xy(kn, 0)[0], yk, color=INK, lw=1.3, style="|-|", ms=4)
    ax.text(xy(kn, 0)[0] + 0.12, yk, "block i = 8 reads keys\nkey_begin(r0) ... key_end(r0 + Br - 1)",
            ha="left", va="center", fontsize=8, fontweight="bold",
            bbox=dict(facecolor="white", edgecolor="none", pad=1))

    # Legend, counts and the rule.
    lx, ly = 11.4, 11.4
    items = [
        (tint(OK_C, 0.35), None, f"inside the band, no mask: {n_full}"),
        (tint(MASK_C, 0.45), "///", f"an edge crosses it: loaded, masked: {n_mask}"),
        (SKIP_C, None, f"outside the band: never loaded: {n_skip}"),
    ]
    for k, (fc, hatch, label) in enumerate(items):
        y = ly - k * 0.7
        ax.add_patch(Rectangle((lx, y), 0.45, 0.45, facecolor=fc, edgecolor=MUTED, linewidth=0.6, hatch=hatch))
        ax.text(lx + 0.65, y + 0.22, label, va="center", fontsize=9)
    ax.text(lx, 9.0, "Row i sees keys i + N_k - N_q - left ...\ni + N_k - N_q + right (math.md (8.1)). "
            "Both ends\nrise with i, so a query block sees ONE range\nof keys: from its first row's "
            "begin to its\nlast row's end.", fontsize=9, va="top")
    ax.text(lx, 6.85, "Key blocks read:", fontsize=10, fontweight="bold", va="top")
    bw = 3.6
    for k, (label, n, c) in enumerate([("not causal", T * T, KV_C), ("causal", n_causal, OK_C),
                                       (f"causal, window {w}", n_full + n_mask, MASK_C)]):
        y = 5.75 - k * 0.7
        box(ax, lx, y, bw * n / (T * T), 0.5, fc=tint(c, 0.3), ec="none")
        ax.text(lx + bw * n / (T * T) + 0.12, y + 0.25, f"{label}: {n}", va="center", fontsize=9)
    ax.text(lx, 3.55, f"A query block reads about (w + Br) / Bc + 1\nkey blocks, whatever N is: the "
            f"work grows\nas N (w + Br), not N\u00b2. Pairs the mask\nkeeps here: {pairs} of {N * N}.",
            fontsize=9, va="top")
    ax.text(lx, 1.5, "v13 reads whole blocks from j0 = key_begin(r0) / Bc\n(TMA); stage 04 and v1 start "
            "their first block at\nkey_begin(r0) itself: no key left of the band is read.", fontsize=8,
            va="top", color=MUTED)
    save(fig, out, "diagram_variants_band.png")


# ---- 11. stage 05 v13: a packed batch's tiles and the producer's jumps ------------------------
def varlen_tiles(out):
    # A toy packed batch (common/varlen.hpp): B = 4 sequences of N_q(b) = N_k(b) tokens, one of them
    # empty, H = 2 heads, Br = Bc = 4 rows (the kernel's are 128), not causal, G = 2 persistent
    # blocks. v13's tile() numbers the tiles of the longest sequence's padded problem sequence by
    # sequence: t -> b = t / (Tr H), query block qb = Tr - 1 - t % (Tr H) / H, head h = t % H.
    N, H, Br, Bc, G = [3, 12, 0, 9], 2, 4, 4, 2
    B, Tr = len(N), -(-max(N) // Br)
    cu = [sum(N[:b]) for b in range(B + 1)]
    per_seq, n_tiles = Tr * H, B * Tr * H

    def tile(t):  # (b, qb, h, rows): v13's tile() for a packed batch; rows = br > 0
        b, qb = t // per_seq, Tr - 1 - t % per_seq // H
        return b, qb, t % H, N[b] - qb * Br > 0

    def first_with_rows(b):  # next_with_rows(): (b Tr + Tr - ceil(N_q(b) / Br)) H
        return (b * Tr + Tr - -(-N[b] // Br)) * H

    tiles = [tile(t) for t in range(n_tiles)]
    empty = [t for t in range(n_tiles) if not tiles[t][3]]
    assert cu == [0, 3, 15, 15, 24] and Tr == 3 and n_tiles == 24
    assert empty == [0, 1, 2, 3] + list(range(12, 18)) and len(empty) == sum((Tr - -(-n // Br)) * H for n in N)
    assert all(first_with_rows(b) == min(t for t in range(b * per_seq, (b + 1) * per_seq + 1)
                                         if t == (b + 1) * per_seq or tiles[t][3]) for b in range(B))

    # The producers' claims: each block's producer runs next_with_rows() on the shared counter
    # (tile = G + atomicAdd(counter, 1); a tile without rows: atomicMax(counter, first - G) if
    # first > G, then claim again). Durations schematic: a claim or an atomicMax takes one slot,
    # a tile with rows Tc = ceil(N_k(b) / Bc) key blocks; ties go to block 0.
    SLOT, BLK = 0.75, 0.42
    counter = [0]
    chips = []  # (block, t0, t1, kind, label): kind "empty" | "max" | "noop" | "work" | "done"

    def producer(g):
        now, t = 0.0, g
        while True:
            while t < n_tiles and not tiles[t][3]:
                chips.append((g, now, now + SLOT, "empty", f"{t}"))
                now = yield now + SLOT
                first = first_with_rows(tiles[t][0])
                if first > G:
                    old = counter[0]
                    counter[0] = max(old, first - G)
                    chips.append((g, now, now + SLOT, "max" if counter[0] > old else "noop", f"max {first - G}"))
                    now = yield now + SLOT
                t, counter[0] = G + counter[0], counter[0] + 1
            if t >= n_tiles:
                chips.append((g, now, now + SLOT, "done", f"{t}: done"))
                return
            b = tiles[t][0]
            dur = BLK * -(-N[b] // Bc)  # N_k(b) = N_q(b)
            chips.append((g, now, now + dur, "work", f"{t}"))
            now = yield now + dur
            t, counter[0] = G + counter[0], counter[0] + 1

    live = {g: producer(g) for g in range(G)}
    at = {g: next(live[g]) for g in range(G)}
    while live:
        g = min(live, key=lambda k: (at[k], k))
        try:
            at[g] = live[g].send(at[g])
        except StopIteration:
            del live[g]
    claimed = {}  # tile -> the block whose producer claimed it (its own first tile included)
    for g, _, _, kind, label in chips:
        if kind in ("empty", "work"):
            claimed[int(label)] = g
    work = sorted(int(lab) for _, _, _, k, lab in chips if k == "work")
    jumps = [c for c in chips if c[3] == "max"]
    assert work == [t for t in range(n_tiles) if tiles[t][3]]  # every tile with rows, once
    assert sorted(claimed) == [0, 1, 4, 5] + list(range(6, 14)) + list(range(18, 24))
    assert len(jumps) == 2 and sum(c[3] == "noop" for c in chips) == 2

    SEQ_C = [Q_C, KV_C, EXTRA_C, "#937860"]
    fig, ax = canvas(7.6, (0, 18), (0, 15.2), "v13's packed batch: tiles sequence by sequence, "
                     "the empty ones skipped")
    x0, W = 1.3, 15.9

    # 1. The packed tensor: the token axis, split at cu_seqlens; query blocks of Br rows inside.
    ax.text(0.25, 13.95, "1  the packed Q", fontsize=10, fontweight="bold", va="center")
    ax.text(3.0, 13.95, f"B = {B} sequences, N_q(b) = N_k(b) = {tuple(N)}, H = {H}, Br = Bc = {Br}: "
            f"Tr = ceil({max(N)} / {Br}) = {Tr} query blocks (the longest)", fontsize=8.5, va="center",
            color=MUTED)
    tw, by, bh = W / cu[-1], 12.55, 0.6
    for b in range(B):
        for i in range(N[b]):
            x = x0 + (cu[b] + i) * tw
            box(ax, x, by, tw, bh, fc=tint(SEQ_C[b], 0.45 + 0.2 * (i // Br % 2)), ec="white", lw=0.6,
                text=f"{cu[b] + i}", fs=6.5)
        for qb in range(-(-N[b] // Br)):
            ax.text(x0 + (cu[b] + qb * Br + min(Br, N[b] - qb * Br) / 2) * tw, by + bh + 0.08, f"qb {qb}",
                    ha="center", va="bottom", fontsize=6.5, color=SEQ_C[b])
        if N[b]:
            ax.text(x0 + (cu[b] + N[b] / 2) * tw, by - 0.35, f"sequence {b}", ha="center", va="center",
                    fontsize=8, color=SEQ_C[b], fontweight="bold")
    for b, c in enumerate(cu):
        x = x0 + c * tw
        ax.plot([x, x], [by - 0.12, by + bh + 0.05], color=INK, lw=1.3)
        if b == 2:
            continue
        label = f"cu[{b}] = {c}" if b != 3 else f"cu[2] = cu[3] = {c}"
        ax.text(x, by - 0.72, label, ha="center", va="center", fontsize=7.5)
    ax.text(x0 + cu[2] * tw, by - 1.05, "sequence 2: 0 tokens", ha="center", va="center", fontsize=7.5,
            color=SEQ_C[2], fontweight="bold")
    ax.text(x0, 11.05, f"Q [total_q, H, d] = [{cu[-1]}, {H}, d], token-major: token t's H heads adjacent, a "
            "head's rows H d apart (the tensor map's row stride).\nA tile reads its sequence's first token and "
            "length from the offsets (struct Packed: cu_q, cu_k); nothing is padded.", fontsize=7.5,
            va="center", color=MUTED)

    # 2. The tiles as tile() numbers them, and the jumps above them.
    ax.text(0.25, 10.35, "2  the tiles", fontsize=10, fontweight="bold", va="center")
    ax.text(2.5, 10.2, f"t = 0 ... B Tr H - 1 = {n_tiles - 1}, sequence by sequence: b = t / (Tr H), qb = Tr - 1 "
            "- t % (Tr H) / H, h = t % H (query blocks last first,\nheads inside). Grey: empty, the block starts "
            "past its sequence's end (qb >= ceil(N_q(b) / Br)); green: it has rows.", fontsize=8, va="center",
            color=MUTED)
    cw, ty, th = W / n_tiles, 7.75, 0.8
    for t, (b, qb, h, rows) in enumerate(tiles):
        x = x0 + t * cw
        box(ax, x, ty, cw, th, fc=tint(OK_C, 0.35) if rows else SKIP_C, ec="white", lw=1.2)
        ax.text(x + cw / 2, ty + th / 2, f"qb {qb}\nh {h}", ha="center", va="center", fontsize=6.5,
                color=INK if rows else MUTED, linespacing=1.0)
        ax.text(x + cw / 2, ty - 0.12, f"{t}", ha="center", va="top", fontsize=7.5)
        who = f"P{claimed[t]}" if t in claimed else "\u2013"  # a dash: never claimed, jumped over
        ax.text(x + cw / 2, ty - 0.5, who, ha="center", va="top", fontsize=6.5, color=MUTED)
    ax.text(x0 - 0.1, ty - 0.2, "t", ha="right", va="top", fontsize=7.5)
    ax.text(x0 - 0.1, ty - 0.55, "claimed by", ha="right", va="top", fontsize=6.5, color=MUTED)
    for b in range(B):
        xa, xb = x0 + b * per_seq * cw + 0.05, x0 + (b + 1) * per_seq * cw - 0.05
        yb = ty - 1.0
        ax.plot([xa, xa, xb, xb], [yb + 0.12, yb, yb, yb + 0.12], color=SEQ_C[b], lw=1.2)
        n_empty = (Tr - -(-N[b] // Br)) * H
        ax.text((xa + xb) / 2, yb - 0.12, f"sequence {b}: {n_empty} empty", ha="center", va="top",
                fontsize=7.5, color=SEQ_C[b], fontweight="bold")
    for g, t0, _, _, label in jumps:  # from the empty tile that made it to the tile the next claim gets
        src = max((c for c in chips if c[0] == g and c[3] == "empty" and c[1] < t0), key=lambda c: c[1])
        s, d = int(src[4]), int(label.split()[1]) + G
        arrow(ax, x0 + (s + 0.5) * cw, ty + th + 0.05, x0 + (d + 0.5) * cw, ty + th + 0.05, color=MASK_C,
              lw=1.4, connectionstyle="arc3,rad=-0.45")
        ax.text(x0 + (s + d + 1) / 2 * cw, ty + th + 0.15 + 0.23 * (d - s) * cw, f"P{g}: atomicMax(counter, "
                f"{d - G}): the next claim is tile {d}", ha="center", va="bottom", fontsize=7.5, color=MASK_C,
                bbox=dict(facecolor="white", edgecolor="none", pad=0.5))

    # 3. The claims on one timeline: each producer's tiles, claims and atomicMax in order.
    ax.text(0.25, 5.75, "3  the producers' claims", fontsize=10, fontweight="bold", va="center")
    ax.text(4.25, 5.75, f"G = {G} persistent blocks: producer Pg starts at its own tile g, then claims tile "
            "G + atomicAdd(counter, 1);\nan empty tile of sequence b: atomicMax(counter, first - G), first = "
            "(b Tr + Tr - ceil(N_q(b) / Br)) H; claim again.", fontsize=8, va="center", color=MUTED)
    t_end = max(c[2] for c in chips)
    sx = W / t_end
    lane_y = {0: 4.3, 1: 3.35}
    style = {"empty": (SKIP_C, None, MUTED), "max": (tint(MASK_C, 0.45), None, INK),
             "noop": (tint(MASK_C, 0.85), "////", MUTED), "work": (tint(OK_C, 0.35), None, INK),
             "done": ("white", None, MUTED)}
    for g, y in lane_y.items():
        ax.text(x0 - 0.1, y + 0.32, f"P{g}", ha="right", va="center", fontsize=9, fontweight="bold")
    for g, t0, t1, kind, label in chips:
        fc, hatch, color = style[kind]
        x, y = x0 + t0 * sx, lane_y[g]
        ax.add_patch(Rectangle((x, y), (t1 - t0) * sx, 0.65, facecolor=fc, edgecolor="white" if kind != "done"
                               else MUTED, linewidth=1.0, hatch=hatch))
        ax.text(x + (t1 - t0) * sx / 2, y + 0.32, label, ha="center", va="center", fontsize=7, color=color,
                bbox=dict(facecolor=fc, edgecolor="none", pad=0.3) if hatch else None)
    ax.annotate("", xy=(x0 + t_end * sx, 3.1), xytext=(x0, 3.1),
                arrowprops=dict(arrowstyle="-|>", color=MUTED, lw=0.8))
    ax.text(x0 + t_end * sx, 2.9, "time (durations schematic, the order the kernel's)", ha="right", va="top",
            fontsize=7.5, color=MUTED)
    leg = [(tint(OK_C, 0.35), None, "a tile with rows: Q, K, V copied (width: its key blocks)"),
           (SKIP_C, None, "a claimed tile without rows: nothing copied, no consumer sees it"),
           (tint(MASK_C, 0.45), None, "atomicMax(counter, first - G): the counter jumps to the "
            "sequence's first tile with rows"),
           (tint(MASK_C, 0.85), "////", "the other producer's atomicMax, after it: a no-op (a max never moves "
            "the counter back)"),
           ("white", None, f"a claim past the last tile (t >= {n_tiles}): the producer stops")]
    for k, (fc, hatch, text) in enumerate(leg):
        y = 2.5 - k * 0.36
        ax.add_patch(Rectangle((x0, y - 0.14), 0.4, 0.28, facecolor=fc, edgecolor="white" if fc != "white"
                               else MUTED, hatch=hatch))
        ax.text(x0 + 0.55, y, text, va="center", fontsize=8)
    ax.text(9, 0.36, "a short sequence's empty tiles lead its range: one atomicMax moves the tile counter past "
            "them,\nso the consumers never see an empty tile", ha="center", va="center", fontsize=9.5,
            fontweight="bold", color=INK)
    save(fig, out, "diagram_varlen_tiles.png")


# ---- 12. stage 06: gpu_v4's two warpgroups at d = 128 and at d = 192 / 256 --------------------
def v4_wide_dims(D, wg):
    """bwd_v4_wide.cuh's Dims<D>: warpgroup wg's head dims as (first dim, width) pieces, in the order
    of the dims (the kernel puts the 64-wide piece first in its accumulator)."""
    dim0 = 128 if (D == 192 and wg == 1) else wg * D // 2  # the 64-wide piece
    dim1 = 96 if (D == 192 and wg == 1) else wg * D // 2 + 64  # the other, D / 2 - 64 wide
    pieces = sorted([(dim0, 64), (dim1, D // 2 - 64)])
    for first, width in pieces:  # a wgmma's N columns of an MN-major operand stay in one atom
        assert first // 64 == (first + width - 1) // 64
    return pieces


def bwd_v4_wide(out):
    Br, threads_wg = 64, 128        # bwd_v2::Br; 128 threads a warpgroup
    Bc128, Bc_wide = 128, 64        # bwd_v4::Bc = 64 kWarpgroups; bwd_v4_wide::Bc
    regs128 = 2 * (Bc128 // 2) * 128 // threads_wg  # dk + dv: its 64 keys x all 128 dims, two of them
    regs_wide = {D: 2 * Bc_wide * (D // 2) // threads_wg for D in (192, 256)}
    assert regs128 == 128 and regs_wide == {192: 96, 256: 128}
    for D in (192, 256):
        assert sum(w for wg in (0, 1) for _, w in v4_wide_dims(D, wg)) == D

    fig, ax = canvas(6.3, (0, 18), (0, 12.6), "gpu_v4's two warpgroups: who owns what, at D = 128 and at "
                     "D = 192 / 256")
    u = 1.4 / 64  # one element (row or column) of a tile
    reg_fc = [tint(WARP_C[w], 0.35) for w in (0, 1)]
    smem_fc = [tint(WARP_C[w], 0.8) for w in (0, 1)]

    def part(x, y_top, w, h, wg, smem=False, text=None, fs=8):
        """One warpgroup's part of a tile: solid = its accumulator registers, hatched = shared
        memory it writes (both warpgroups read it)."""
        y = y_top - h
        if smem:
            ax.add_patch(Rectangle((x, y), w, h, facecolor=smem_fc[wg], edgecolor=WARP_C[wg], lw=0, hatch="///"))
        else:
            ax.add_patch(Rectangle((x, y), w, h, facecolor=reg_fc[wg], edgecolor="none"))
        if text:  # on a plain patch of its colour, over the hatching and the atoms' lines
            ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fs, color=INK,
                    bbox=dict(facecolor=smem_fc[wg] if smem else reg_fc[wg], edgecolor="none", pad=0.6))

    def outline(x, y_top, w, h):
        ax.add_patch(Rectangle((x, y_top - h), w, h, facecolor="none", edgecolor=INK, lw=1.0))

    def atoms(x, y_top, h, D):  # the 128-byte swizzle's 64-column atoms of the dims
        for a in range(64, D, 64):
            ax.plot([x + a * u] * 2, [y_top - h, y_top], color=INK, lw=0.6, ls=(0, (2, 2)))

    def header(x, w, y, name, extent):
        ax.text(x + w / 2, y, name, ha="center", va="bottom", fontsize=9.5, fontweight="bold")
        ax.text(x + w / 2, y - 0.08, extent, ha="center", va="top", fontsize=8, color=MUTED)

    top, low = 9.55, 5.75  # the tiles' tops: keys x (queries, dims), and the second row

    # ---- left: bwd_v4_wgmma.cuh, D = 128, Bc = 128: a warpgroup owns its 64 keys ----
    D = 128
    xs, xd = 1.0, 2.8  # the queries column (S^T, dS^T) and the dims column (dK_j, dV_j, dQ_i)
    ax.text(0.3, 11.25, f"D = {D} (bwd_v4_wgmma.cuh): Bc = {Bc128} keys", fontsize=11, fontweight="bold",
            va="center")
    ax.text(0.3, 10.8, "each warpgroup owns 64 keys of the block", fontsize=9, color=MUTED, va="center")
    header(xs, Br * u, 10.05, "S^T, dP^T", f"Br = {Br} queries")
    header(xd, D * u, 10.05, "dK_j, dV_j", f"D = {D} dims")
    h = Bc128 * u
    for wg in (0, 1):
        yt = top - wg * h / 2
        part(xs, yt, Br * u, h / 2, wg, text=f"WG {wg}\nkeys\n{64 * wg}-{64 * wg + 63}")
        part(xd, yt, D * u, h / 2, wg, text=f"WG {wg}: keys {64 * wg}-{64 * wg + 63}\nx all {D} dims")
    outline(xs, top, Br * u, h)
    outline(xd, top, D * u, h)
    atoms(xd, top, h, D)
    ax.text(xs - 0.12, top - h / 2, f"Bc = {Bc128} keys", rotation=90, ha="right", va="center", fontsize=9)
    ax.text(xd + D * u + 0.25, top - 0.05, "P^T never leaves\nthe registers: S^T's\naccumulator is dV's\n"
            "A operand, lane\nfor lane", fontsize=8.5, va="top")
    # Second row: dS^T in shared memory (for dQ_i), dQ_i split by dims.
    header(xs, Br * u, low + 0.5, "dS^T", "shared mem.")
    header(xd, D * u, low + 0.5, "dQ_i", f"{Br} queries x {D} dims")
    for wg in (0, 1):
        part(xs, low - wg * h / 2, Br * u, h / 2, wg, smem=True,
             text=f"WG {wg}\nwrites\nkeys\n{64 * wg}-{64 * wg + 63}", fs=7.5)
        part(xd + 64 * wg * u, low, 64 * u, Br * u, wg, text=f"WG {wg}\ndims\n{64 * wg}-{64 * wg + 63}")
    outline(xs, low, Br * u, h)
    outline(xd, low, D * u, Br * u)
    ax.text(xd, low - Br * u - 0.2, "dQ_i += dS K_j: each warpgroup its 64 dims,\nover all 128 keys: "
            "it reads both halves\nof dS^T after a barrier", fontsize=8.5, va="top")

    # ---- right: bwd_v4_wide.cuh, D = 192 (drawn) and 256, Bc = 64: both warpgroups share the keys ----
    D = 192
    xs, xd = 10.0, 11.8
    ax.text(9.3, 11.25, f"D = 192 / 256 (bwd_v4_wide.cuh): Bc = {Bc_wide} keys", fontsize=11, fontweight="bold",
            va="center")
    ax.text(9.3, 10.8, "both warpgroups share the 64 keys; D = 192 drawn", fontsize=9, color=MUTED, va="center")
    header(xs, Br * u, 10.05, "S^T, dP^T", f"Br = {Br} queries")
    header(xd, D * u, 10.05, "dK_j, dV_j", "D dims")
    h = Bc_wide * u
    for wg in (0, 1):
        part(xs + 32 * wg * u, top, 32 * u, h, wg, text=f"WG {wg}")
        ax.text(xs + (32 * wg + 16) * u, top - h - 0.08, f"{32 * wg}-{32 * wg + 31}", ha="center", va="top",
                fontsize=7.5, color=MUTED)
        part(xd + wg * D // 2 * u, top, D // 2 * u, h, wg,
             text=f"WG {wg}: keys 0-63\nx dims {wg * D // 2}-{(wg + 1) * D // 2 - 1}")
        for first, width in v4_wide_dims(D, wg):
            ax.text(xd + (first + width / 2) * u, top - h - 0.08, str(width), ha="center", va="top", fontsize=7.5,
                    color=MUTED)
    outline(xs, top, Br * u, h)
    outline(xd, top, D * u, h)
    atoms(xd, top, h, D)
    ax.text(xs - 0.12, top - h / 2, f"Bc = {Bc_wide} keys", rotation=90, ha="right", va="center", fontsize=8)
    # D = 256: the same split, 64 + 64 a warpgroup.
    D2, ys, hs = 256, top - h - 0.55, 0.4
    for wg in (0, 1):
        part(xd + wg * D2 // 2 * u, ys, D2 // 2 * u, hs, wg,
             text=f"WG {wg}: dims {wg * D2 // 2}-{(wg + 1) * D2 // 2 - 1}", fs=7.5)
        for first, width in v4_wide_dims(D2, wg):
            ax.text(xd + (first + width / 2) * u, ys - hs - 0.08, str(width), ha="center", va="top", fontsize=7.5,
                    color=MUTED)
    outline(xd, ys, D2 * u, hs)
    atoms(xd, ys, hs, D2)
    ax.text(xd - 0.12, ys - hs / 2, "D = 256:", ha="right", va="center", fontsize=8.5)
    # Second row: P^T and dS^T in shared memory, dQ_i split by dims as dK_j, dV_j.
    header(xs, Br * u, low + 0.5, "P^T, dS^T", "shared mem.")
    header(xd, D * u, low + 0.5, "dQ_i", f"{Br} queries x D dims")
    for wg in (0, 1):
        part(xs + 32 * wg * u, low, 32 * u, h, wg, smem=True, text=f"WG\n{wg}", fs=7.5)
        part(xd + wg * D // 2 * u, low, D // 2 * u, Br * u, wg,
             text=f"WG {wg}\ndims {wg * D // 2}-{(wg + 1) * D // 2 - 1}")
    outline(xs, low, Br * u, h)
    outline(xd, low, D * u, Br * u)
    atoms(xd, low, Br * u, D)
    ax.text(9.4, low - h - 0.2, "each WG stores its 32 queries' columns; after a barrier\n"
            "both read all of it: dV_j += P^T dO_i and dK_j += dS^T Q_i\n"
            "sum over all 64 queries, dQ_i += dS K_j over all 64 keys", fontsize=8.5, va="top")

    # ---- the register counts, side by side ----
    yr, hr = 2.6, 1.05
    box(ax, 0.3, yr - hr, 8.3, hr, fc="#f7f7f7", ec=MUTED, lw=0.8)
    ax.text(0.45, yr - 0.3, "dK_j + dV_j: 2 x 64 keys x 128 dims / 128 threads", fontsize=9, va="center")
    ax.text(0.45, yr - 0.7, f"= {regs128} fp32 registers a thread", fontsize=9, va="center", fontweight="bold")
    box(ax, 9.3, yr - hr, 8.4, hr, fc="#f7f7f7", ec=MUTED, lw=0.8)
    ax.text(9.45, yr - 0.25, "dK_j + dV_j: 2 x 64 keys x D/2 dims / 128 threads", fontsize=9, va="center")
    ax.text(9.45, yr - 0.57, f"= {regs_wide[192]} (D = 192), {regs_wide[256]} (D = 256) fp32 registers a thread",
            fontsize=9, va="center", fontweight="bold")
    ax.text(9.45, yr - 0.87, "if one WG kept all D dims of its keys: 192 / 256 (a thread has 255)", fontsize=8.5,
            va="center", color=MUTED)

    # ---- legend ----
    items = [(reg_fc[0], None, WARP_C[0], "WG 0: warpgroup 0 (threads 0-127)"),
             (reg_fc[1], None, WARP_C[1], "WG 1: warpgroup 1 (threads 128-255)"),
             (smem_fc[0], "///", WARP_C[0], "hatched: shared memory, written by that WG, read by both"),
             (None, None, None, "dashed: a 64-column swizzle atom (no wgmma piece crosses it)")]
    pos = [(0.3, 1.1), (9.3, 1.1), (0.3, 0.55), (9.3, 0.55)]
    for (fc, hatch, ec, text), (x, y) in zip(items, pos):
        if fc is None:
            ax.plot([x + 0.17, x + 0.17], [y - 0.2, y + 0.2], color=INK, lw=0.6, ls=(0, (2, 2)))
        else:
            ax.add_patch(Rectangle((x, y - 0.17), 0.35, 0.34, facecolor=fc, edgecolor=ec, lw=0, hatch=hatch))
        ax.text(x + 0.5, y, text, va="center", fontsize=8.5)
    ax.plot([9.0, 9.0], [3.0, 11.5], color=SKIP_C, lw=1.5)
    save(fig, out, "diagram_bwd_v4_wide.png")


# ---- stage 05 v15: FP8's operand layout and the ping-pong ---------------------------------------
def vt_key(k):
    """runner_fp8.hpp's vt_key: the key that column k of V^T holds (a permutation of each 16)."""
    return (k & ~15) | (2 * ((k >> 2) & 3) + (k & 1) + 8 * ((k >> 1) & 1))


def fp8_v15(out):
    fig, ax = canvas(5.6, (-7.8, 33.2), (-4.6, 12.2), "v15 (FP8): P's registers, V^T's key order, and the ping-pong")
    lane_c = [tint(c, 0.45) for c in WARP_C]
    # Row g of S (fp32 accumulator, m64nNk16 C layout): key c sits in lane t4 = (c % 8) / 2.
    rows = [(9.2, "S accumulator\n(fp32), row g:\nkey held by lane t4", [(c, (c % 8) // 2) for c in range(32)]),
            (6.2, "P as 8-bit A\noperand, k = 0..31:\nlane t4 holds\n4t4..4t4+3, 16+..",
             [(vt_key(k), (k % 16) // 4) for k in range(32)]),
            (3.2, "V^T column k\nholds key vt_key(k)", [(vt_key(k), None) for k in range(32)])]
    for y, label, cells in rows:
        ax.text(-0.4, y + 0.5, label, ha="right", va="center", fontsize=8.5)
        for x, (key, lane) in enumerate(cells):
            fc = lane_c[lane] if lane is not None else tint(KV_C, 0.6)
            ax.add_patch(Rectangle((x, y), 1, 1, facecolor=fc, edgecolor="white", lw=0.8))
            ax.text(x + 0.5, y + 0.5, str(key), ha="center", va="center", fontsize=7.5)
        ax.add_patch(Rectangle((0, y), 32, 1, facecolor="none", edgecolor=INK, lw=1.0))
    for k in (0, 1, 2, 3):  # lane 0's four scores of the first 16 keys: where pack_p puts them
        key = vt_key(k)
        arrow(ax, key + 0.5, 9.15, k + 0.5, 7.25, color=MASK_C, lw=1.0, ms=8)
    ax.text(16, 10.75, "each cell: a key of one 32-key step; colour: the lane of the quad (t4 = 0 .. 3) that holds it",
            ha="center", fontsize=8.5, color=MUTED)
    ax.text(21.5, 8.55, "pack_p: lane t4's keys 2t4, 2t4+1, 8+2t4, 9+2t4 become\nits bytes k = 4t4 .. 4t4+3 (red arrows: lane 0)",
            ha="center", va="center", fontsize=8.5, color=MASK_C)
    ax.text(16, 2.55, "the transpose pre-pass stores V^T's keys in that order, so P V pairs every weight with its own key",
            ha="center", fontsize=8.5, color=MUTED)
    # The ping-pong: schematic; order from the kernel (named barriers 1 and 2).
    y0 = 0.6
    ax.text(-0.4, y0 + 0.4, "WG0", ha="right", va="center", fontsize=9)
    ax.text(-0.4, y0 - 1.0 + 0.4, "WG1", ha="right", va="center", fontsize=9)
    for step in range(4):
        for wg in (0, 1):
            y, t = y0 - wg * 1.0, 7.2 * step + 3.6 * wg  # WG1's turn comes as WG0's products end
            ax.add_patch(Rectangle((t, y), 3.6, 0.8, facecolor=tint(OK_C, 0.35), edgecolor="white"))
            ax.text(t + 1.8, y + 0.4, f"S{step}, PV{step - 1}" if step else "S0", ha="center", va="center", fontsize=7.5)
            ax.add_patch(Rectangle((t + 3.6, y), 3.6, 0.8, facecolor=tint(Q_C, 0.55), edgecolor="white"))
            ax.text(t + 5.4, y + 0.4, f"softmax {step}", ha="center", va="center", fontsize=7.5)
    ax.text(-7.6, -1.9, "green: the warpgroup's turn at the tensor cores (wgmma issued after bar.sync on its own named barrier, "
            "then bar.arrive on the other's);\nblue: its softmax (64 x 128 exponentials on the special-function unit) while "
            "the other warpgroup's products run. Durations schematic.", ha="left", va="center", fontsize=8, color=MUTED)
    ax.text(-7.6, -3.6, "Block scales: one per 64 query rows (a warpgroup's), one per 128 keys of K and of V: "
            "c_j = scale log2(e) sQ sK_j in the softmax;\nO_j = P_j V_j in an accumulator of its own, then "
            "O = alpha O + sV_j O_j in float32 (FP8 wgmma accumulates with ~13 significand bits).",
            ha="left", va="center", fontsize=8)
    save(fig, out, "diagram_fp8_v15.png")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "img"))
    ap.add_argument("--only", help="draw only this diagram (its file name, e.g. diagram_decode_split_kv.png)")
    args = ap.parse_args()
    out = os.path.normpath(args.out)
    os.makedirs(out, exist_ok=True)
    drawings = {
        "diagram_online_softmax_merge.png": online_softmax_merge,
        "diagram_block_grid_causal.png": block_grid_causal,
        "diagram_v1_vs_v2_work_split.png": v1_vs_v2,
        "diagram_mma_fragment.png": mma_fragment,
        "diagram_v3_double_buffer.png": v3_double_buffer,
        "diagram_v12_producer_consumer.png": v12_producer_consumer,
        "diagram_backward_loop.png": backward_loop,
        "diagram_decode_split_kv.png": decode_split_kv,
        "diagram_ring_attention.png": ring_attention,
        "diagram_variants_band.png": variants_band,
        "diagram_varlen_tiles.png": varlen_tiles,
        "diagram_bwd_v4_wide.png": bwd_v4_wide,
        "diagram_fp8_v15.png": fp8_v15,
    }
    if args.only and args.only not in drawings:
        ap.error(f"--only: expected one of {', '.join(drawings)}, found {args.only}")
    for name, draw in drawings.items():
        if not args.only or name == args.only:
            draw(out)


if __name__ == "__main__":
    main()
