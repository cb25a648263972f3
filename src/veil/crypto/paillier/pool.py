"""A :class:`NoisePool`: Paillier noise r^n computed ahead, in a background thread, and
handed out once each (see :mod:`veil.crypto.paillier`, "Noise")."""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from gmpy2 import mpz

from veil.crypto.paillier.keys import PrivateKey, PublicKey
from veil.errors import ConfigError, CryptoError
from veil.random import RngLike, check_rng

__all__ = ["NoisePool"]

logger = logging.getLogger("veil.crypto.paillier")


class NoisePool:
    """Precomputed noise values for one key, each handed out exactly once.

    Fill it offline (:meth:`fill`) or keep it topped up by a background thread
    (:meth:`start` / :meth:`stop`, or ``with pool:``); ``pk.encrypt(x, pool=pool)`` then
    costs one multiplication per value. Values are popped from a deque, never indexed, so
    no value can be used twice; when the pool runs dry, fresh noise is computed on demand.
    ``private_key``: for a bare-n key the key owner may pass its private key to fill by
    CRT (about 3.5x faster than r^n), for data it encrypts itself only. The background
    thread runs in parallel with the encrypting thread for r^n and CRT noise (GMP's
    batched exponentiation releases the GIL); fixed-base noise is computed in Python and
    shares the interpreter with it. Pickling a pool (e.g. with its owner, to another
    process) gives a new, empty pool for the same key with its own OS-seeded generator
    and without the private key (a CRT pool never carries it): values are never copied,
    so none can be used in two places. After ``fork()`` the child's copy of every pool is
    emptied and given an OS-seeded generator likewise, whatever generator the parent's had.
    """

    def __init__(self, public_key: PublicKey, *, capacity: int = 4096,
                 private_key: PrivateKey | None = None, rng: RngLike = None) -> None:
        if not isinstance(public_key, PublicKey):
            raise ConfigError(f"public_key={public_key!r} is not allowed: expected a "
                              "paillier.PublicKey")
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ConfigError(f"capacity={capacity!r} is not allowed: must be an integer >= 1")
        if private_key is not None and private_key.public_key != public_key:
            raise CryptoError("private_key does not belong to public_key")
        self.public_key = public_key
        self.capacity = capacity
        self._private_key = private_key
        self._source: Callable[..., list[mpz]] = (
            private_key.noise if private_key is not None else public_key.noise)
        self._rng = check_rng(rng)
        self._values: deque[mpz] = deque()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        _POOLS.add(self)

    def _forked(self) -> None:
        """In a child after fork(): no value or generator state shared with the parent."""
        self._values = deque()
        self._rng = check_rng(None)
        self._thread = None
        self._stop, self._wake = threading.Event(), threading.Event()

    def __len__(self) -> int:
        return len(self._values)

    def __reduce__(self) -> tuple[Any, ...]:
        # A pickled pool is a new, empty pool for the same key: the unused values stay in
        # this one, and the copy computes its own with its own OS-seeded generator, so no
        # noise value -- nor a generator state that would repeat one -- is in two places.
        return (_empty_pool, (self.public_key, self.capacity))

    def __repr__(self) -> str:
        state = "running" if self._thread is not None else "idle"
        return f"paillier.NoisePool({len(self)}/{self.capacity}, {state})"

    def fill(self, count: int | None = None) -> None:
        """Compute noise now: ``count`` more values, or up to capacity when None."""
        need = self.capacity - len(self._values) if count is None else count
        if need > 0:
            self._values.extend(self._source(need, rng=self._rng))

    def take(self, count: int) -> list[mpz]:
        """Pop ``count`` values (computing any shortfall fresh)."""
        out = []
        pop = self._values.popleft
        try:
            for _ in range(count):
                out.append(pop())
        except IndexError:
            short = count - len(out)
            logger.debug("noise pool ran dry: computing %d values online", short)
            out.extend(self._source(short, rng=self._rng))
        self._wake.set()
        return out

    def start(self) -> NoisePool:
        """Start a daemon thread that keeps the pool filled to capacity."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="veil-noise-pool",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the background thread (values already computed stay in the pool)."""
        if self._thread is not None:
            self._stop.set()
            self._wake.set()
            self._thread.join()
            self._thread = None

    def __enter__(self) -> NoisePool:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            missing = self.capacity - len(self._values)
            if missing <= 0:
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            self._values.extend(self._source(min(missing, 16), rng=self._rng))


def _empty_pool(public_key: PublicKey, capacity: int) -> NoisePool:
    """What a pickled :class:`NoisePool` becomes: an empty pool with a secure generator."""
    return NoisePool(public_key, capacity=capacity)


#: every live pool, emptied in a child process after fork()
_POOLS: weakref.WeakSet[NoisePool] = weakref.WeakSet()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: [pool._forked() for pool in list(_POOLS)])
