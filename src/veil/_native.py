"""Small compiled kernels for hot loops, built on first use with the system's C compiler.

Each kernel replaces a run of small numpy or torch calls whose fixed costs dominate at the
sizes of a DP-SGD step, and has a numpy fallback computing the same values:

* ``veil_ziggurat``: the fast path of the ziggurat normal sampler of :mod:`veil.random`, one
  pass over the candidate words where numpy needs about ten (gather, multiply, gather,
  compare, find). It computes bit for bit what the numpy code computes (one IEEE double
  multiplication of two exact operands, one comparison), so the sampler's values for a given
  stream are the same with or without it; the tests check that.
* ``veil_linear_sq_norms_f32`` / ``_f64``: the ghost norms of a Linear layer with one
  position per example, ``acc_i += ||g_i||^2 (||a_i||^2 + bias)`` (Goodfellow 2015), summed in
  double precision.
* ``veil_clip_factors``: the clip factors of Abadi et al. (2016),
  ``c_i = min(1, C / (n_i + 1e-6)) * factor`` with ``n_i = sqrt(sq_i) * reduction``, 0 where
  ``n_i`` is not finite, and the counts of clipped and non-finite examples.

Build: the C source below is compiled with ``cc`` (``$CC``) into
``$XDG_CACHE_HOME/veil/native`` (``~/.cache/veil/native``), under a name carrying the hash
of the source and of the machine, and loaded with :mod:`ctypes` (no Python headers needed).

Loading runs the library's code in this process, so nothing is loaded that this user did
not build. The cache folder is created 0700 and, before anything in it is loaded, must be
a directory (not a symlink) owned by this user that no one else can open (mode 0700). The
build writes the library's SHA-256 beside it (``NAME.sha256``, created 0600); a library is
loaded only if it and its record are regular files of this user that others cannot write
and the library's bytes hash to the record, else it is rebuilt (a planted or stale library
is replaced, never loaded). What this rests on: only this user (and root) can write a
folder of this user with mode 0700. If the folder fails its checks or cannot be written,
the library is built in a fresh private temporary folder for this process. If there is no
compiler, the build fails, or ``VEIL_NATIVE=0`` is set, :func:`kernel` returns None and the
callers use their numpy code: slower, same values. Why compiled at all: the draw of a DP-SGD step's
noise is dominated by numpy's per-pass overhead on a few thousand values.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shlex
import shutil
import stat
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["kernel"]

_SOURCE = r"""
#include <stdint.h>
#include <stddef.h>
#include <math.h>

/* The ziggurat fast path (Marsaglia & Tsang 2000, 256 strips): candidate k takes word
   raw[k]; its 8 low bits pick strip s, its bits 10..63 read as a signed integer give the
   odd j = (raw >> 10) | 1 in (-2^53, 2^53), and x = scale[s] * j. x is accepted when
   |x| < inner[s]; the positions of the others are written to slow[], ascending.
   Returns how many there are. */
size_t veil_ziggurat(const uint64_t *raw, size_t n, const double *scale,
                     const double *inner, double *z, int64_t *slow)
{
    size_t m = 0;
    for (size_t k = 0; k < n; k++) {
        uint64_t r = raw[k];
        unsigned s = (unsigned)(r & 255u);
        int64_t j = (int64_t)r;
        j = (j >> 10) | 1;       /* arithmetic shift: the sign is kept */
        double x = scale[s] * (double)j;
        z[k] = x;
        double a = x < 0 ? -x : x;
        if (a >= inner[s])
            slow[m++] = (int64_t)k;
    }
    return m;
}

/* acc[i] += ||g_i||^2 (||a_i||^2 + bias) for rows a_i (din values, row stride lda) and
   g_i (dout values, row stride ldg); sums of squares in double, four partial sums. */
#define SQ_NORMS(NAME, T)                                                              \
void NAME(const T *a, const T *g, size_t rows, size_t din, size_t dout, size_t lda,    \
          size_t ldg, double bias, double *acc)                                        \
{                                                                                      \
    for (size_t i = 0; i < rows; i++) {                                                \
        const T *x = a + i * lda, *y = g + i * ldg;                                    \
        double s[4] = {0, 0, 0, 0}, t[4] = {0, 0, 0, 0};                               \
        size_t k = 0;                                                                  \
        for (; k + 4 <= din; k += 4)                                                   \
            for (int u = 0; u < 4; u++) s[u] += (double)x[k + u] * (double)x[k + u];  \
        for (; k < din; k++) s[0] += (double)x[k] * (double)x[k];                      \
        for (k = 0; k + 4 <= dout; k += 4)                                             \
            for (int u = 0; u < 4; u++) t[u] += (double)y[k + u] * (double)y[k + u];  \
        for (; k < dout; k++) t[0] += (double)y[k] * (double)y[k];                     \
        acc[i] += ((t[0] + t[1]) + (t[2] + t[3])) * (((s[0] + s[1]) + (s[2] + s[3])) + bias); \
    }                                                                                  \
}
SQ_NORMS(veil_linear_sq_norms_f32, float)
SQ_NORMS(veil_linear_sq_norms_f64, double)

/* coef[i] = min(1, max_norm / (n_i + 1e-6)) * factor with n_i = sqrt(sq[i]) * reduction,
   or 0 where n_i is not finite; counts[0] = examples with n_i > max_norm (finite),
   counts[1] = examples with a non-finite n_i. */
void veil_clip_factors(const double *sq, size_t n, double reduction, double max_norm,
                       double factor, double *coef, int64_t *counts)
{
    int64_t clipped = 0, bad = 0;
    for (size_t i = 0; i < n; i++) {
        double norm = sqrt(sq[i]) * reduction;
        if (!isfinite(norm)) {
            coef[i] = 0.0;
            bad++;
            continue;
        }
        double c = max_norm / (norm + 1e-6);
        coef[i] = (c < 1.0 ? c : 1.0) * factor;
        clipped += norm > max_norm;
    }
    counts[0] = clipped;
    counts[1] = bad;
}
"""

# -O2 without -ffast-math: IEEE semantics, no contraction to a fused multiply-add
_FLAGS = ["-O2", "-shared", "-fPIC", "-ffp-contract=off", "-fno-fast-math"]

_lock = threading.Lock()
_loaded: dict[str, Any] = {}


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "veil" / "native"


def _library_name() -> str:
    tag = hashlib.sha256((_SOURCE + " ".join(_FLAGS) + platform.machine()
                          + platform.system()).encode()).hexdigest()[:16]
    return f"veil_native_{tag}.so"


def _private_folder(folder: Path) -> Path:
    """``folder``, created 0700 if missing; OSError unless it is a directory of this user,
    not a symlink, that no one else can open."""
    folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise OSError(f"{folder} is not a private folder of this user (a symlink, another "
                      f"owner, or mode {oct(info.st_mode & 0o777)}, not 0700)")
    return folder


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _record(path: Path) -> Path:
    return path.with_name(f"{path.name}.sha256")


def _verified(path: Path) -> bool:
    """Whether ``path`` is the library this user built: it and its record are regular files
    of this user that others cannot write, and its bytes hash to the record."""
    try:
        for p in (path, _record(path)):
            info = os.lstat(p)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or \
                    info.st_mode & 0o022:
                return False
        return _record(path).read_text().strip() == _digest(path)
    except OSError:
        return False


def _build(folder: Path, name: str) -> Path:
    """Compile the source into ``folder/name`` and record its hash beside it (atomically:
    other processes may race; a reader that sees a library with another's record rebuilds)."""
    compiler = shlex.split(os.environ.get("CC", "")) or [shutil.which("cc") or shutil.which("gcc")]
    if not compiler[0]:
        raise OSError("no C compiler (cc or gcc) on PATH")
    target = folder / name
    with tempfile.TemporaryDirectory(dir=folder) as work:
        src = Path(work) / "kernel.c"
        src.write_text(_SOURCE)
        out = Path(work) / name
        done = subprocess.run([*compiler, *_FLAGS, "-o", str(out), str(src), "-lm"],
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise OSError(f"{' '.join(compiler)} failed: {done.stderr.strip()[:500]}")
        record = Path(work) / "record"
        fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(_digest(out))
        os.replace(out, target)
        os.replace(record, _record(target))
    return target


def _library() -> ctypes.CDLL | None:
    if os.environ.get("VEIL_NATIVE", "1") == "0":
        return None
    name = _library_name()
    folder = _cache_dir()
    try:
        path = _private_folder(folder) / name
        if not _verified(path):
            path = _build(folder, name)
        return ctypes.CDLL(str(path))
    except (OSError, subprocess.SubprocessError) as exc:  # unwritable, stale: build privately
        log.debug("veil native kernels: cache %s unusable (%s)", folder, exc)
    try:
        private = Path(tempfile.mkdtemp(prefix="veil-native-"))
        try:
            return ctypes.CDLL(str(_build(private, name)))
        finally:  # the loaded library stays mapped
            shutil.rmtree(private, ignore_errors=True)
    except (OSError, subprocess.SubprocessError) as exc:
        log.info("veil native kernels unavailable, using numpy (%s)", exc)
        return None


_P, _N, _D = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_double
_SIGNATURES = {
    "veil_ziggurat": (_N, [_P, _N, _P, _P, _P, _P]),
    "veil_linear_sq_norms_f32": (None, [_P, _P, _N, _N, _N, _N, _N, _D, _P]),
    "veil_linear_sq_norms_f64": (None, [_P, _P, _N, _N, _N, _N, _N, _D, _P]),
    "veil_clip_factors": (None, [_P, _N, _D, _D, _D, _P, _P]),
}


def kernel(name: str) -> Any:
    """The compiled function ``name`` (a ctypes function), or None when the kernels cannot
    be built (the caller then uses its numpy code)."""
    with _lock:
        if "lib" not in _loaded:
            _loaded["lib"] = _library()
            if _loaded["lib"] is not None:
                for fn, (restype, argtypes) in _SIGNATURES.items():
                    f = getattr(_loaded["lib"], fn)
                    f.restype, f.argtypes = restype, argtypes
        lib = _loaded["lib"]
    return None if lib is None else getattr(lib, name)
