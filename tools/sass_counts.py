#!/usr/bin/env python3
"""Instruction counts per kernel from `cuobjdump -sass` output (what the compiled code really does).

Usage: python3 tools/sass_counts.py sass.txt [OPCODE ...]
Prints one line per kernel (demangled name shortened) with the count of each opcode asked for
(default: FFMA HMMA HGMMA LDSM LDGSTS LDS STS LDG STG LDL STL MUFU BAR): FFMA are fp32 FMAs, HMMA
and HGMMA tensor-core instructions, LDSM ldmatrix, LDGSTS cp.async, LDL/STL local memory (spills).
Standard library only.
"""
import collections
import re
import subprocess
import sys

DEFAULT = "FFMA HMMA HGMMA LDSM LDGSTS LDS STS LDG STG LDL STL MUFU BAR".split()
FUNC = re.compile(r"Function : (\S+)")
INSN = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9]*)")


def main(path, ops):
    counts = collections.OrderedDict()
    func = None
    for line in open(path):
        m = FUNC.search(line)
        if m:
            func = m.group(1)
            counts[func] = collections.Counter()
            continue
        m = INSN.match(line)
        if m and func:
            counts[func][m.group(1)] += 1
    for func, c in counts.items():
        try:  # "void fa05::v1::forward_kernel<float>(...)" -> "v1::forward_kernel<float>"
            name = subprocess.run(["c++filt", func], capture_output=True, text=True).stdout.strip()
            name = re.sub(r"^void fa05::|\(.*$", "", name)
        except OSError:
            name = func
        name = name[:60]
        print(f"{name:60s} " + " ".join(f"{op}={c[op]}" for op in ops) + f" total={sum(c.values())}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or DEFAULT)
