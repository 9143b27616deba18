#!/usr/bin/env python3
"""Regenerate the benchmark tables in the READMEs from docs/results/bench_*.json.

A README marks a table with two HTML comments:
    <!-- bench:docs/results/bench_01_naive.json -->
    ...table, rewritten by this script...
    <!-- /bench -->
Usage: python3 tools/bench_tables.py [FILE.md ...]   (default: every README.md in the repo and
every .md under docs/, the lab notebooks docs/lab/ among them)
Standard library only.
"""
import json
import os
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"(<!-- bench:(?P<src>[^ ]+) -->\n)(?P<body>.*?)(<!-- /bench -->)", re.S)


def fmt_bytes(n):
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def table(src, link):
    data = json.loads((ROOT / src).read_text())
    ctx = data["context"]
    rows = ["| benchmark | time (ms) | GFLOP/s | extra memory |", "|---|---:|---:|---:|"]
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate":
            continue
        t = b["real_time"] * {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
        gf = b.get("GFLOP/s", b.get("GFLOP", 0.0))
        rows.append(f"| `{b['name']}` | {t:.3g} | {gf:.3g} | {fmt_bytes(b.get('extra_bytes', 0))} |")
    cpu = f"{ctx.get('num_cpus')} CPUs at {ctx.get('mhz_per_cpu')} MHz"
    rows.append("")
    rows.append(f"Measured {ctx['date']} on {ctx['host_name']} ({cpu}), `{ctx['executable']}`; "
                f"source: [{src}]({link}).")
    return "\n".join(rows) + "\n"


def is_lesson(path):
    """A stage README (NN_name/README.md) is a lesson: its tables carry no dates (the lab notebook
    docs/lab/NN_name.md keeps each run's date, machine and command)."""
    p = pathlib.Path(path).resolve()
    return p.name == "README.md" and re.match(r"\d\d_\w+$", p.parent.name) is not None


def undated(table):
    """The table with the dates taken out of its caption ("measured 2026-12-01 on" -> "measured on")."""
    return re.sub(r"([Mm]easured) \d{4}-\d\d-\d\d(?:[T ][0-9:.]+Z?)?,? (on|by)", r"\1 \2", table)


def rewrite_readmes(paths, block, render):
    """Replace every `block` match in the READMEs and docs (default: every README.md outside build
    folders and every .md under docs/, so a table works in a lesson or in its lab notebook) with
    render(match, link), link being the match's `src` relative to that README (so it works in any
    viewer). Shared with tools/gpu_tables.py."""
    if not paths:
        paths = [p for p in ROOT.rglob("README.md") if not any(s.startswith("build") for s in p.relative_to(ROOT).parts)]
        paths += sorted((ROOT / "docs").rglob("*.md"))
    for p in map(pathlib.Path, paths):
        text = p.read_text()
        lesson = is_lesson(p)
        new = block.sub(lambda m: undated(render(m, os.path.relpath(ROOT / m.group("src"), p.resolve().parent)))
                        if lesson else render(m, os.path.relpath(ROOT / m.group("src"), p.resolve().parent)), text)
        if new != text:
            p.write_text(new)
            print(f"updated {p}")


def main(paths):
    rewrite_readmes(paths, BLOCK, lambda m, link: m.group(1) + table(m.group("src"), link) + m.group(4))


if __name__ == "__main__":
    main(sys.argv[1:])
