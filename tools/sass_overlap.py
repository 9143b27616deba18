#!/usr/bin/env python3
"""Does a kernel's softmax run beside its own P V? Read from `cuobjdump -sass` output.

Usage: python3 tools/sass_overlap.py sass.txt [--require NAME] [--require NAME ...]
Make sass.txt with `cuobjdump -sass build-gpu/05_cuda_tiled/libfa05.so > sass.txt` (gpu_check.sh's
sass phase does). For every wgmma kernel (one with WARPGROUP.DEPBAR) of every architecture in the
file, prints how many MUFU.EX2 (the softmax's exponentials) sit between a
`WARPGROUP.DEPBAR.LE gsb0, 0x1` (one wgmma group may still run: S_j is done, P V_{j-1} is not)
and the next `WARPGROUP.DEPBAR.LE gsb0, 0x0` (every group done), in program order. 0 means no
exponential of the softmax can overlap the warpgroup's own P V, whatever the source says: ptxas
may move a wait earlier (05 README, "Tried after v11"). A kernel that never waits for one group
(v7, v8: one group at a time, by design) prints "n/a". Names read forward_kernel<T, d, warps, Bc>.
The scan is static and in program order, not along the branches; for the stage 05 kernels it
agrees with a scan along them.
--require NAME (repeatable): exit 1 unless the file has a wgmma kernel named NAME::... and every
such kernel has at least one such exponential (for a version built for that overlap). Exit 1 too
if the file has no wgmma kernel at all. Standard library only (c++filt, if present, for names).
"""
import argparse
import re
import subprocess
import sys

FUNC = re.compile(r"Function : (\S+)")
ARCH = re.compile(r"arch = (sm_\w+)")
INSN = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")


def demangle(func):
    try:  # "void fa05::v12::forward_kernel<...>(...)" -> "v12::forward_kernel<...>"
        name = subprocess.run(["c++filt", func], capture_output=True, text=True).stdout.strip()
        return re.sub(r"^void fa05::|\(.*$", "", name) or func
    except OSError:
        return func


def overlapped_ex2(lines):
    """(waits for one group?, MUFU.EX2 between a 'DEPBAR.LE gsb0, 0x1' and the next '..., 0x0'),
    or None for a kernel with no wgmma wait."""
    seen_wait = seen_one = inside = False
    count = 0
    for op, args in lines:
        if op.startswith("WARPGROUP.DEPBAR"):
            seen_wait = True
            inside = args.strip().endswith("0x1")
            seen_one |= inside
        elif inside and op.startswith("MUFU.EX2"):
            count += 1
    return (seen_one, count) if seen_wait else None


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sass", help="cuobjdump -sass output")
    ap.add_argument("--require", action="append", default=[], metavar="NAME",
                    help="exit 1 unless every NAME:: wgmma kernel has such an exponential (repeatable)")
    a = ap.parse_args(argv)
    kernels, arch, key = {}, "", None  # (arch, mangled name) -> [(opcode, operands)]
    for line in open(a.sass):
        m = ARCH.search(line)
        if m:
            arch = m.group(1)
        m = FUNC.search(line)
        if m:
            key = (arch, m.group(1))
            kernels[key] = []
            continue
        m = INSN.match(line)
        if m and key:
            kernels[key].append((m.group(1), m.group(2)))
    rows = []  # (arch, mangled, readable name, (seen_one, count))
    for (arch_, func), lines in kernels.items():
        r = overlapped_ex2(lines)
        if r is not None:
            rows.append((arch_, func, demangle(func), r))
    if not rows:
        print(f"sass_overlap: no wgmma kernel in {a.sass}", file=sys.stderr)
        return 1
    failed = False
    for name in a.require:
        mine = [r for r in rows if r[2].startswith(name + "::") or f"{len(name)}{name}" in r[1]]
        if not mine:
            print(f"sass_overlap: no wgmma kernel named {name}:: in {a.sass}", file=sys.stderr)
            failed = True
        failed |= any(n == 0 for _, _, _, (_, n) in mine)
    for arch_, _, name, (seen_one, n) in rows:
        print(f"{arch_:7s} {name[:70]:70s} MUFU.EX2 while P V runs: {n if seen_one else 'n/a'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
