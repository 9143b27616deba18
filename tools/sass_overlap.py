#!/usr/bin/env python3
"""Does a kernel's softmax run beside its own P V? Read from `cuobjdump -sass` output.

Usage: python3 tools/sass_overlap.py sass.txt [--require NAME ...]
For every wgmma kernel (one with WARPGROUP.DEPBAR), prints how many MUFU.EX2 (the softmax's
exponentials) sit between a `WARPGROUP.DEPBAR.LE gsb0, 0x1` (one wgmma group may still run: S_j is
done, P V_{j-1} is not) and the next `WARPGROUP.DEPBAR.LE gsb0, 0x0` (every group done), in program
order, over the whole kernel. 0 means no exponential of the softmax can overlap the warpgroup's
own P V, whatever the source says: ptxas may move a wait earlier (05 README, "Tried after v11").
--require NAME: exit 1 unless the file has a wgmma kernel named NAME::..., and every such kernel
has at least one such exponential (for a version built for that overlap). Standard library only.
"""
import argparse
import re
import subprocess
import sys

FUNC = re.compile(r"Function : (\S+)")
INSN = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")


def demangle(func):
    try:  # "void fa05::v12::forward_kernel<...>(...)" -> "v12::forward_kernel<...>"
        name = subprocess.run(["c++filt", func], capture_output=True, text=True).stdout.strip()
        return re.sub(r"^void fa05::|\(.*$", "", name) or func
    except OSError:
        return func


def overlapped_ex2(lines):
    """MUFU.EX2 between a 'DEPBAR.LE gsb0, 0x1' and the next 'DEPBAR.LE gsb0, 0x0'; None: no wgmma wait."""
    seen_wait, inside, count = False, False, 0
    for op, args in lines:
        if op.startswith("WARPGROUP.DEPBAR"):
            seen_wait = True
            inside = args.strip().endswith("0x1")
        elif inside and op.startswith("MUFU.EX2"):
            count += 1
    return count if seen_wait else None


def main(argv):
    ap = argparse.ArgumentParser(description="MUFU.EX2 between a wgmma wait for 1 group and the next wait for 0, per kernel")
    ap.add_argument("sass", help="cuobjdump -sass output")
    ap.add_argument("--require", action="append", default=[], metavar="NAME",
                    help="exit 1 unless every NAME:: wgmma kernel has such an exponential (repeatable)")
    a = ap.parse_args(argv)
    path, required = a.sass, a.require
    kernels, func = {}, None
    for line in open(path):
        m = FUNC.search(line)
        if m:
            func = m.group(1)
            kernels[func] = []
            continue
        m = INSN.match(line)
        if m and func:
            kernels[func].append((m.group(1), m.group(2)))
    failed = False
    for name in required:
        found = False
        for func, lines in kernels.items():
            pretty = demangle(func)
            n = overlapped_ex2(lines)
            if n is None or not pretty.startswith(name + "::"):
                continue
            found = True
            failed |= n == 0
        if not found:
            print(f"sass_overlap: no wgmma kernel named {name}:: in {path}", file=sys.stderr)
            failed = True
    for func, lines in kernels.items():
        n = overlapped_ex2(lines)
        if n is not None:
            print(f"{demangle(func)[:70]:70s} MUFU.EX2 while P V runs: {n}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
