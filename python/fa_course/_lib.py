"""The course's C libraries, loaded with ctypes: libfa04.so (CPU forward, 04_tiled_cpu/fa04.h),
libfa05.so (GPU forward, 05_cuda_tiled/fa05.h) and libfa06.so (CPU and GPU backward,
06_backward_recompute/fa06.h).

Where they are looked for, first found wins: the build folder named by $FA_COURSE_BUILD, then
build/ of the repository this package sits in (scripts/build.sh makes it), then its build-*/.
$FA_COURSE_LIB_DIR may instead name one folder holding the .so files themselves.
"""
import ctypes
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_SUBDIR = {"fa04": "04_tiled_cpu", "fa05": "05_cuda_tiled", "fa06": "06_backward_recompute"}
_loaded = {}

i64, vp, c_int, c_float = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int, ctypes.c_float
_SIGS = {
    "fa04": {
        "fa04_forward": ([vp] * 5 + [i64] * 6 + [c_int, c_float, i64, i64, c_int], c_int),
        "fa04_forward_variant": ([vp] * 5 + [i64] * 6 + [c_int, c_float, i64, i64, c_int, i64, i64, c_float], c_int),
        "fa04_forward_varlen": ([vp] * 7 + [i64] * 6 + [c_int, c_float, i64, i64, c_int, i64, i64, c_float], c_int),
        "fa04_last_error": ([], ctypes.c_char_p),
    },
    "fa05": {
        "fa05_forward": ([ctypes.c_char_p] + [vp] * 5 + [i64] * 6 + [c_int, c_int, c_float, vp], c_int),
        "fa05_forward_variant": ([ctypes.c_char_p] + [vp] * 5 + [i64] * 6 + [c_int, c_int, c_float, i64, i64, c_float, vp],
                                 c_int),
        "fa05_forward_kvcache": ([ctypes.c_char_p] + [vp] * 5 + [i64] * 6 + [c_int, c_int, c_float, vp, vp]
                                 + [i64] * 3 + [vp], c_int),
        "fa05_forward_varlen": ([ctypes.c_char_p] + [vp] * 7 + [i64] * 8 + [c_int, c_int, c_float, i64, i64, c_float, vp],
                                c_int),
        "fa05_forward_fp8": ([vp] * 5 + [i64] * 6 + [c_int, c_float, vp], c_int),
        "fa05_forward_fp8_e4m3": ([vp] * 8 + [i64] * 6 + [c_int, c_float, vp], c_int),
        "fa05_runs": ([ctypes.c_char_p, i64, c_int], ctypes.c_char_p),
        "fa05_kernel_count": ([], c_int),
        "fa05_kernel_name": ([c_int], ctypes.c_char_p),
        "fa05_last_error": ([], ctypes.c_char_p),
    },
    "fa06": {
        "fa06_backward_cpu": ([vp] * 9 + [i64] * 6 + [c_int, c_float, i64, i64, c_int], c_int),
        "fa06_backward_cpu_variant": ([vp] * 9 + [i64] * 6 + [c_int, c_float, i64, i64, c_int, i64, i64, c_float], c_int),
        "fa06_backward_cpu_varlen": ([vp] * 11 + [i64] * 6 + [c_int, c_float, i64, i64, c_int, i64, i64, c_float],
                                     c_int),
        "fa06_backward": ([ctypes.c_char_p] + [vp] * 9 + [i64] * 6 + [c_int, c_int, c_float, vp], c_int),
        "fa06_backward_varlen": ([ctypes.c_char_p] + [vp] * 11 + [i64] * 8 + [c_int, c_int, c_float, i64, i64, c_float, vp],
                                 c_int),
        "fa06_backward_variant": ([ctypes.c_char_p] + [vp] * 9 + [i64] * 6
                                  + [c_int, c_int, c_float, i64, i64, c_float, vp], c_int),
        "fa06_runs": ([ctypes.c_char_p, i64, c_int], ctypes.c_char_p),
        "fa06_has_gpu": ([], c_int),
        "fa06_last_error": ([], ctypes.c_char_p),
    },
}

# Functions a library built before them lacks: lib() leaves them out instead of failing, so the
# rest of the library still loads; the op that needs one says so when it is called
# (fa05_forward_varlen, fa06_backward_varlen: the GPU forward and backward of attention_varlen();
# fa05_forward_fp8 and fa05_forward_fp8_e4m3: attention_fp8()).
_OPTIONAL = {"fa05_forward_varlen", "fa06_backward_varlen", "fa05_forward_fp8", "fa05_forward_fp8_e4m3"}


def candidates(name):
    """The paths libNAME.so is looked for at, in order."""
    fname = f"lib{name}.so"
    out = []
    if os.environ.get("FA_COURSE_LIB_DIR"):
        out.append(Path(os.environ["FA_COURSE_LIB_DIR"]) / fname)
    builds = [Path(os.environ["FA_COURSE_BUILD"])] if os.environ.get("FA_COURSE_BUILD") else []
    builds += [REPO / "build"] + sorted(REPO.glob("build-*"))
    out += [b / _SUBDIR[name] / fname for b in builds]
    return out


def lib(name):
    """The loaded library `name` ("fa04", "fa05", "fa06"), its functions typed; RuntimeError if absent."""
    if name not in _loaded:
        for path in candidates(name):
            if path.is_file():
                handle = ctypes.CDLL(str(path))
                for fn, (args, res) in _SIGS[name].items():
                    try:
                        f = getattr(handle, fn)
                    except AttributeError:
                        if fn in _OPTIONAL:
                            continue
                        raise
                    f.argtypes, f.restype = args, res
                handle.path = str(path)
                _loaded[name] = handle
                break
        else:
            where = ", ".join(str(p) for p in candidates(name)[:3])
            raise RuntimeError(f"lib{name}.so: expected a build of the course (scripts/build.sh; "
                               f"or set FA_COURSE_BUILD), found none at {where}")
    return _loaded[name]


def function(name, fn):
    """lib(name)'s function fn; RuntimeError naming the library if this build lacks it (_OPTIONAL)."""
    handle = lib(name)
    try:
        return getattr(handle, fn)
    except AttributeError:
        raise RuntimeError(f"{fn}: expected it in lib{name}.so (a build of the course that has it), found a library "
                           f"without it at {handle.path}") from None


def check(name, status):
    """Raises the library's one-line message for a non-zero status: ValueError for
    FA0x_INVALID_ARGUMENT (1), NotImplementedError (a RuntimeError) for FA05_UNSUPPORTED and
    FA06_UNSUPPORTED (2: a valid call the kernel does not take, e.g. a window on a kernel without
    one), RuntimeError for the rest."""
    if status != 0:
        msg = getattr(lib(name), f"{name}_last_error")().decode(errors="replace")
        kind = ValueError if status == 1 else NotImplementedError if status == 2 and name != "fa04" else RuntimeError
        raise kind(f"{msg} (lib{name}.so status {status})")
