"""Small compiled kernels for hot loops, built on first use with the system's C compiler.

The one kernel today is the fast path of the ziggurat normal sampler of :mod:`veil.random`:
one pass over the candidate words that numpy needs about ten passes for (gather, multiply,
gather, compare, find). It computes bit for bit what the numpy code computes (one IEEE
double multiplication of two exact operands, one comparison), so the sampler's values for a
given stream are the same with or without it; the tests check that.

Build: the C source below is compiled with ``cc`` (``$CC``) into
``$XDG_CACHE_HOME/veil/native`` (``~/.cache/veil/native``, created private to the user),
under a name carrying the hash of the source and of the machine, and loaded with
:mod:`ctypes` (no Python headers needed). If that folder cannot be written, the library is
built in a fresh private temporary folder for this process. If there is no compiler, the
build fails, or ``VEIL_NATIVE=0`` is set, :func:`ziggurat` returns None and the callers use
their numpy code: slower, same values. Why compiled at all: the draw of a DP-SGD step's
noise is dominated by numpy's per-pass overhead on a few thousand values.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["ziggurat"]

_SOURCE = r"""
#include <stdint.h>
#include <stddef.h>

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
"""

# -O2 without -ffast-math: IEEE semantics, no contraction to a fused multiply-add
_FLAGS = ["-O2", "-shared", "-fPIC", "-ffp-contract=off", "-fno-fast-math"]

_lock = threading.Lock()
_loaded: dict[str, Any] = {}


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "veil" / "native"


def _build(folder: Path, name: str) -> Path:
    """Compile the source into ``folder/name`` (atomically: other processes may race)."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise OSError("no C compiler (cc or gcc) on PATH")
    target = folder / name
    with tempfile.TemporaryDirectory(dir=folder) as work:
        src = Path(work) / "kernel.c"
        src.write_text(_SOURCE)
        out = Path(work) / name
        done = subprocess.run([compiler, *_FLAGS, "-o", str(out), str(src)],
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise OSError(f"{compiler} failed: {done.stderr.strip()[:500]}")
        os.replace(out, target)
    return target


def _library() -> ctypes.CDLL | None:
    if os.environ.get("VEIL_NATIVE", "1") == "0":
        return None
    tag = hashlib.sha256((_SOURCE + " ".join(_FLAGS) + platform.machine()
                          + platform.system()).encode()).hexdigest()[:16]
    name = f"veil_native_{tag}.so"
    folder = _cache_dir()
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = folder / name
        if not path.exists():
            path = _build(folder, name)
        return ctypes.CDLL(str(path))
    except OSError as exc:  # unwritable cache, or a stale/foreign file: build privately
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


def ziggurat() -> Any:
    """The compiled ``veil_ziggurat`` function (ctypes), or None when it cannot be built."""
    with _lock:
        if "lib" not in _loaded:
            lib = _library()
            fn = None
            if lib is not None:
                fn = lib.veil_ziggurat
                fn.restype = ctypes.c_size_t
                fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                               ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
            _loaded["lib"] = fn
        return _loaded["lib"]
