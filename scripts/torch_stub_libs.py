#!/usr/bin/env python3
"""Lets PyTorch's Linux wheel import on a machine without its CUDA libraries.

PyPI's Linux wheel of torch is one build for CPU and GPU: its shared libraries (torch/lib/*.so)
name CUDA libraries (libcudart, libcusparseLt, libnvshmem_host, ...) as load-time dependencies,
which pip would bring as ~5 GB of nvidia-* packages. On the CPU none of their functions is ever
called, but the loader still wants every named library found and every symbol bound (the wheel
is linked to bind all symbols at load time). So for each library the loader cannot find, this
script builds a stand-in in torch/lib (on the libraries' own $ORIGIN search path) that defines
exactly the symbols left unbound, each as a function that traps if it is ever called, under the
symbol versions the wheel asks for. Libraries that are found (e.g. a CUDA toolkit in ld.so.conf)
are used as they are.

Usage: torch_stub_libs.py SITE_PACKAGES/torch/lib     (prints what it made; idempotent)
Needs gcc, ldd, nm and readelf (binutils).
"""
import os
import re
import subprocess
import sys
import tempfile


def run(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def missing_and_found(libs):
    """Sonames ldd reports "not found" for any of libs, and the paths of those it found."""
    missing, found = set(), set()
    for lib in libs:
        for line in run("ldd", lib).splitlines():
            m = re.match(r"\s*(\S+) => not found", line)
            if m:
                missing.add(m.group(1))
            m = re.match(r"\s*\S+ => (/\S+) \(", line)
            if m:
                found.add(os.path.realpath(m.group(1)))
    return missing, found


def version_files(lib):
    """{version name: soname} from the library's version needs (readelf -V)."""
    out, cur = {}, None
    for line in run("readelf", "-V", "-W", lib).splitlines():
        m = re.search(r"File: (\S+)", line)
        if m:
            cur = m.group(1)
            continue
        m = re.search(r"Name: (\S+)", line)
        if m and cur:
            out[m.group(1)] = cur
    return out


def main():
    libdir = os.path.abspath(sys.argv[1])
    # libcaffe2_nvrtc.so is opened only for GPU code generation; it alone needs the driver
    # (libcuda.so.1), which must never get a stand-in: the CUDA runtime opens it by name.
    libs = sorted(os.path.join(libdir, f) for f in os.listdir(libdir)
                  if re.search(r"\.so(\.\d+)*$", f) and not os.path.islink(os.path.join(libdir, f))
                  and not f.startswith("libcaffe2_nvrtc") and not os.path.exists(os.path.join(libdir, f + ".stub")))
    stubs_made = [f for f in os.listdir(libdir) if f.endswith(".stub")]
    missing, found = missing_and_found(libs)
    if not missing:
        print("torch_stub_libs: every library torch/lib names is found" +
              (f" ({len(stubs_made)} stand-ins from an earlier run)" if stubs_made else ""))
        return
    defined = set()
    for path in found | set(libs):
        for line in run("nm", "-D", "--defined-only", path).splitlines():
            parts = line.split()
            if len(parts) >= 3:
                defined.add(parts[2].split("@")[0])
    # Undefined, strong symbols of torch's libraries that nothing found defines: by soname.
    need = {s: {} for s in missing}  # soname -> {symbol: version or None}
    loose = {}
    for lib in libs:
        vf = version_files(lib)
        for line in run("nm", "-D", "--undefined-only", lib).splitlines():
            parts = line.split()
            if len(parts) != 2 or parts[0] != "U":
                continue
            name, _, ver = parts[1].partition("@")
            ver = ver.lstrip("@") or None
            if name in defined:
                continue
            owner = vf.get(ver) if ver else None
            if owner in need:
                need[owner][name] = ver
            elif ver is None:
                loose[name] = None
    # Unversioned symbols cannot say which library they come from: the first stand-in takes them.
    first = sorted(missing)[0]
    need[first].update(loose)
    with tempfile.TemporaryDirectory() as tmp:
        for soname, syms in sorted(need.items()):
            src, vmap = os.path.join(tmp, "s.c"), os.path.join(tmp, "s.map")
            with open(src, "w") as f:
                f.write("/* stand-in made by scripts/torch_stub_libs.py: never called on the CPU */\n")
                for name in sorted(syms):
                    f.write(f"void {name}(void) {{ __builtin_trap(); }}\n")
            versions = sorted({v for v in syms.values() if v})
            with open(vmap, "w") as f:
                if versions:
                    for v in versions:
                        names = " ".join(f"{n};" for n, vv in syms.items() if vv == v)
                        f.write(f"{v} {{ global: {names} }};\n")
                    unv = [n for n, vv in syms.items() if vv is None]
                    if unv:
                        f.write("{ global: " + " ".join(f"{n};" for n in unv) + " };\n")
                else:
                    f.write("{ global: *; };\n")
            out = os.path.join(libdir, soname)
            run("gcc", "-shared", "-fPIC", "-o", out, f"-Wl,-soname,{soname}",
                f"-Wl,--version-script={vmap}", src)
            open(out + ".stub", "w").close()  # a marker: this file is a stand-in
            print(f"torch_stub_libs: {soname}: stand-in with {len(syms)} trapping symbols")
    missing, _ = missing_and_found(libs)
    if missing:
        sys.exit(f"torch_stub_libs: still not found: {' '.join(sorted(missing))}")


if __name__ == "__main__":
    main()
