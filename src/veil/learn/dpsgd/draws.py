"""Per-step random draws of DP-SGD, fetched for several steps at once.

Every step needs a fresh draw of the same size: the Poisson sample's ``N`` Bernoulli trials,
the ``D`` Gaussian noise values. One call of the generator for ``k`` steps costs the same per
value as ``k`` calls, but pays the call's fixed cost (a new AES key, a few dozen numpy passes,
each slowed by caches the training step has just evicted) once instead of ``k`` times.
:class:`Rows` hands out the rows of such a block in order, each exactly once, and draws the
next block when one is used up; it never draws rows for more steps than remain. The values
and their distribution are those of one draw per step: a block is ``k`` independent rows.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["Rows", "BLOCK_VALUES"]

#: values per block: large enough to amortize a call, small enough to stay in cache
BLOCK_VALUES = 1 << 16


class Rows:
    """Successive rows of ``width`` values, drawn ``BLOCK_VALUES // width`` rows at a time.

    ``draw(m)`` returns ``m`` fresh values (a 1-d array); ``count`` is the number of rows
    that will be asked for (the planned steps): a block never reaches beyond it, and rows
    asked for beyond it are drawn one at a time.
    """

    def __init__(self, draw: Callable[[int], np.ndarray], width: int, count: int) -> None:
        self.draw = draw
        self.width = width
        self.left = count
        self.per_block = max(1, BLOCK_VALUES // max(width, 1))
        self._block = np.empty((0, width))
        self._next = 0

    def next(self) -> np.ndarray:
        """The next row (a view into the block; it is handed out once)."""
        if self._next == len(self._block):
            k = max(1, min(self.per_block, self.left))
            self._block = self.draw(k * self.width).reshape(k, self.width)
            self._next = 0
            self.left -= k
        row = self._block[self._next]
        self._next += 1
        return row
