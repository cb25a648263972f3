"""SharedTensor: a secret-shared array that behaves like a numpy array.

A :class:`SharedTensor` is a handle held by the :class:`~veil.mpc.Session`: its shape and
its fixed-point scale are public; its value exists only as additive shares inside the
parties. Arithmetic issues instructions to the parties:

* ``a + b``, ``a - b``, ``-a``, and with public numbers: local, no communication;
* ``a * b`` (elementwise, numpy broadcasting) and ``a @ b``: Beaver triples, 1 round, then a
  truncation of the fixed-point product (1 round; 0 with the dealer-free option);
* ``a * c``, ``a @ C``, ``a / c`` for public c: local, then a truncation for real c;
* ``a < b``, ``a > b``, ``a <= b``, ``a >= b``, :meth:`sign`, :meth:`relu`, :meth:`abs`:
  a secure comparison (8 rounds); comparisons return shared 0/1 integers;
* :meth:`sigmoid`, :meth:`max`, :meth:`argmax` (see :mod:`veil.mpc.protocols`);
* indexing, :meth:`reshape`, :attr:`T`, :meth:`sum`, :meth:`mean`, :func:`concatenate`,
  :func:`stack`: local;
* :meth:`reveal` opens the value to every party or to one.

Values are fixed-point reals with the session's ``frac_bits`` (``frac == frac_bits``) or
integers (``frac == 0``: comparison results, integer inputs); mixing them promotes to
fixed point. Errors of each operation: see :mod:`veil.mpc.fixedpoint` and
:mod:`veil.mpc.party`.
"""

from __future__ import annotations

import numbers
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from veil.errors import ConfigError, DataError, ProtocolError
from veil.mpc.fixedpoint import INPUT_BITS, decode, encode, encode_constant
from veil.mpc.triples import matmul_shape
from veil.mpc.wire import encode_index

__all__ = ["SharedTensor", "concatenate", "stack", "where"]

_DUMMY = np.zeros((), dtype=np.uint8)


def _dummy(shape: tuple) -> np.ndarray:
    """A zero-memory array of ``shape`` to let numpy compute result shapes."""
    return np.broadcast_to(_DUMMY, shape)


def _is_integer(c: Any) -> bool:
    if isinstance(c, (bool, np.bool_)):
        return True
    if isinstance(c, numbers.Integral):
        return True
    arr = np.asarray(c)
    return arr.dtype == np.bool_ or np.issubdtype(arr.dtype, np.integer)


def _public_int(c: Any, name: str) -> np.ndarray:
    arr = np.asarray(c).astype(np.int64)
    if arr.size and np.max(np.abs(arr)) >= 2**INPUT_BITS:
        raise DataError(f"{name} holds an integer of magnitude >= 2^{INPUT_BITS}: fixed-point "
                        "overflow (public integers must be below 2^31 in magnitude)")
    return arr.view(np.uint64)


class SharedTensor:
    """A secret-shared array (see the module docstring). Made by ``Session.share``."""

    __slots__ = ("session", "key", "shape", "frac", "__weakref__")
    __array_ufunc__ = None  # numpy defers to our reflected operators (array + tensor)

    def __init__(self, session: Any, key: int, shape: tuple, frac: int) -> None:
        self.session = session
        self.key = key
        self.shape = tuple(shape)
        self.frac = frac
        weakref.finalize(self, session._release, key)

    # -- description ---------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def __len__(self) -> int:
        if not self.shape:
            raise DataError("len() of a 0-d SharedTensor")
        return self.shape[0]

    def __repr__(self) -> str:
        kind = f"fixed-point, {self.frac} fractional bits" if self.frac else "integer"
        return f"SharedTensor(shape={self.shape}, {kind}, session={self.session.id.hex()[:8]})"

    def __bool__(self) -> bool:
        raise DataError("the truth value of a SharedTensor is secret: reveal() it, or use "
                        "veil.mpc.where(condition, a, b) to select without revealing")

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    # -- helpers -------------------------------------------------------------------------
    def _peer(self, other: SharedTensor) -> None:
        if other.session is not self.session:
            raise ProtocolError(f"{other!r} belongs to another session than {self!r}: shares "
                                "of different sessions cannot be combined")

    def _apply(self, op: str, inputs: Sequence[SharedTensor], out_shape: tuple, frac: int,
               **params: Any) -> SharedTensor:
        return self.session._apply(op, inputs, out_shape, frac, **params)

    def _as_frac(self, frac: int) -> SharedTensor:
        """The same value with ``frac`` fractional bits (frac >= self.frac; local)."""
        if frac == self.frac:
            return self
        return self._apply("linear", [self], self.shape, frac, coefs=[2 ** (frac - self.frac)])

    def _rescale(self) -> SharedTensor:
        """Truncate back to the session's fractional bits after a product."""
        extra = self.frac - self.session.frac_bits
        return self.session._truncate(self, extra) if extra > 0 else self

    def _broadcast(self, shape: tuple, what: str) -> tuple:
        try:
            return np.broadcast_shapes(self.shape, shape)
        except ValueError:
            raise DataError(f"shapes {self.shape} and {shape} do not broadcast for {what}") \
                from None

    # -- linear operations ---------------------------------------------------------------
    def _linear(self, other: Any, sign: int, reflected: bool = False) -> SharedTensor:
        """``self + sign * other`` (``sign * self + other`` when reflected)."""
        f = self.session.frac_bits
        if isinstance(other, SharedTensor):
            self._peer(other)
            frac = max(self.frac, other.frac)
            shape = self._broadcast(other.shape, "+/-")
            coefs = [2 ** (frac - self.frac), sign * 2 ** (frac - other.frac)]
            return self._apply("linear", [self, other], shape, frac, coefs=coefs)
        c = np.asarray(other)
        frac = self.frac if _is_integer(c) else max(self.frac, f)
        shape = self._broadcast(c.shape, "+/-")
        const = encode(c if reflected else sign * c, frac, "the public operand")
        coef = sign * 2 ** (frac - self.frac) if reflected else 2 ** (frac - self.frac)
        return self._apply("linear", [self], shape, frac, coefs=[coef], public=const)

    def __add__(self, other: Any) -> SharedTensor:
        return self._linear(other, 1)

    def __radd__(self, other: Any) -> SharedTensor:
        return self._linear(other, 1)

    def __sub__(self, other: Any) -> SharedTensor:
        return self._linear(other, -1)

    def __rsub__(self, other: Any) -> SharedTensor:
        return self._linear(other, -1, reflected=True)

    def __neg__(self) -> SharedTensor:
        return self._apply("linear", [self], self.shape, self.frac, coefs=[-1])

    # -- products ------------------------------------------------------------------------
    def _product(self, other: Any, kind: str, left: bool = False) -> SharedTensor:
        if isinstance(other, SharedTensor):
            self._peer(other)
            a, b = (other, self) if left else (self, other)
            shape = a._shape_of(kind, b.shape)
            out = self._apply(kind, [a, b], shape, a.frac + b.frac,
                              corr=[[kind, list(a.shape), list(b.shape)]])
            return out._rescale()
        c = np.asarray(other)
        if _is_integer(c):
            const, frac = _public_int(c, "the public operand"), self.frac
        else:
            const, bits = encode_constant(c, self.session.frac_bits, "the public operand")
            frac = self.frac + bits
        if kind == "mul":
            shape = self._broadcast(c.shape, "*")
            out = self._apply("mul_public", [self], shape, frac, public=const)
        else:
            shape = (_shape_matmul(c.shape, self.shape) if left
                     else _shape_matmul(self.shape, c.shape))
            out = self._apply("matmul_public", [self], shape, frac, public=const, left=left)
        return out._rescale()

    def _shape_of(self, kind: str, other: tuple) -> tuple:
        return self._broadcast(other, "*") if kind == "mul" else _shape_matmul(self.shape, other)

    def __mul__(self, other: Any) -> SharedTensor:
        return self._product(other, "mul")

    __rmul__ = __mul__

    def __matmul__(self, other: Any) -> SharedTensor:
        return self._product(other, "matmul")

    def __rmatmul__(self, other: Any) -> SharedTensor:
        return self._product(other, "matmul", left=True)

    def dot(self, other: Any) -> SharedTensor:
        return self @ other

    def __truediv__(self, other: Any) -> SharedTensor:
        """Division by a public value: multiplication by its reciprocal (encoded with
        :func:`~veil.mpc.fixedpoint.constant_bits`, relative error 2^-f)."""
        if isinstance(other, SharedTensor):
            raise DataError("division by a SharedTensor is not supported; divide by a public "
                            "value")
        c = np.asarray(other, dtype=np.float64)
        if np.any(c == 0) or not np.all(np.isfinite(c)):
            raise DataError("division by zero or by a non-finite public value")
        return self * (1.0 / c)

    # -- comparisons -----------------------------------------------------------------------
    def _ltz(self) -> SharedTensor:
        return self.session._ltz(self)

    def __lt__(self, other: Any) -> SharedTensor:
        return (self - other)._ltz()

    def __gt__(self, other: Any) -> SharedTensor:
        return (other - self)._ltz()

    def __le__(self, other: Any) -> SharedTensor:
        return 1 - (self > other)

    def __ge__(self, other: Any) -> SharedTensor:
        return 1 - (self < other)

    def sign(self) -> SharedTensor:
        """+1 where x >= 0, -1 where x < 0 (integers)."""
        return 1 - 2 * self._ltz()

    def relu(self) -> SharedTensor:
        """max(x, 0): one comparison and one product."""
        return self * (1 - self._ltz())

    def abs(self) -> SharedTensor:
        return self * self.sign()

    def sigmoid(self) -> SharedTensor:
        """Piecewise-linear approximation of 1 / (1 + e^-x), see
        :func:`veil.mpc.protocols.sigmoid`."""
        from veil.mpc.protocols import sigmoid

        return sigmoid(self)

    def max(self, axis: int = 0) -> SharedTensor:
        """Maximum along ``axis`` by a tournament of comparisons (log2(n) comparison rounds)."""
        from veil.mpc.protocols import maximum

        return maximum(self, axis=axis)[0]

    def min(self, axis: int = 0) -> SharedTensor:
        return -((-self).max(axis=axis))

    def argmax(self, axis: int = 0) -> SharedTensor:
        """Index of the maximum along ``axis`` (the first one on ties), as a shared integer."""
        from veil.mpc.protocols import maximum

        return maximum(self, axis=axis, index=True)[1]

    # -- shape manipulation (local) ------------------------------------------------------
    def _struct(self, fn: str, out_shape: tuple, inputs: Sequence[SharedTensor] | None = None,
                **params: Any) -> SharedTensor:
        return self._apply("struct", inputs or [self], out_shape, self.frac, fn=fn, **params)

    def reshape(self, *shape: Any) -> SharedTensor:
        target = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        try:
            new = _dummy(self.shape).reshape(target).shape
        except (ValueError, TypeError) as exc:
            raise DataError(f"cannot reshape {self.shape} to {target}: {exc}") from None
        return self._struct("reshape", new, shape=list(new))

    def flatten(self) -> SharedTensor:
        return self.reshape(-1)

    def transpose(self, *axes: Any) -> SharedTensor:
        order = list(axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes)
        try:
            new = _dummy(self.shape).transpose(order or None).shape
        except (ValueError, TypeError) as exc:
            raise DataError(f"cannot transpose {self.shape} with axes {order}: {exc}") from None
        return self._struct("transpose", new, axes=order or None)

    @property
    def T(self) -> SharedTensor:  # noqa: N802 - numpy's name
        return self.transpose()

    def __getitem__(self, index: Any) -> SharedTensor:
        spec = encode_index(index)
        try:
            new = _dummy(self.shape)[index].shape
        except (IndexError, ValueError, TypeError) as exc:
            raise DataError(f"index {index!r} is out of range for shape {self.shape}: {exc}") \
                from None
        return self._struct("getitem", new, index=spec)

    def broadcast_to(self, shape: Sequence[int]) -> SharedTensor:
        try:
            new = np.broadcast_to(_dummy(self.shape), tuple(shape)).shape
        except ValueError as exc:
            raise DataError(f"cannot broadcast {self.shape} to {tuple(shape)}: {exc}") from None
        return self._struct("broadcast_to", new, shape=list(new))

    def sum(self, axis: int | Sequence[int] | None = None, keepdims: bool = False
            ) -> SharedTensor:
        axes = None if axis is None else _axes(axis, self.ndim)
        new = _dummy(self.shape).sum(axis=axes, keepdims=keepdims).shape
        return self._struct("sum", new, axis=None if axes is None else list(axes),
                            keepdims=bool(keepdims))

    def mean(self, axis: int | Sequence[int] | None = None, keepdims: bool = False
             ) -> SharedTensor:
        axes = range(self.ndim) if axis is None else _axes(axis, self.ndim)
        count = int(np.prod([self.shape[a] for a in axes], dtype=np.int64))
        return self.sum(axis=axis, keepdims=keepdims) / float(max(count, 1))

    # -- output ----------------------------------------------------------------------------
    def reveal(self, to: int | None = None) -> np.ndarray:
        """Open the value: to every party (``to=None``) or only to party ``to``.

        Returns the value as the receiving party sees it (float64 for fixed point, int64 for
        integers); with ``to=i`` no other party learns anything. Raises CryptoError for a
        value outside the representable range (an overflow).
        """
        value = self.session._reveal(self, to)
        return decode(value, self.frac)


def _axes(axis: int | Sequence[int], ndim: int) -> tuple[int, ...]:
    axes = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
    out = []
    for a in axes:
        if not isinstance(a, numbers.Integral) or not -ndim <= a < ndim:
            raise DataError(f"axis={axis!r} is out of range for {ndim} dimensions")
        out.append(int(a) % ndim)
    return tuple(out)


def _shape_matmul(sa: tuple, sb: tuple) -> tuple:
    try:
        return matmul_shape(tuple(sa), tuple(sb))
    except ValueError as exc:
        raise DataError(f"shapes {tuple(sa)} and {tuple(sb)} do not match for @: {exc}") \
            from None


def _join(tensors: Sequence[SharedTensor], axis: int, fn: str) -> SharedTensor:
    tensors = list(tensors)
    if not tensors or not all(isinstance(t, SharedTensor) for t in tensors):
        raise DataError(f"{fn} needs a non-empty sequence of SharedTensors")
    first = tensors[0]
    for t in tensors[1:]:
        first._peer(t)
    frac = max(t.frac for t in tensors)
    tensors = [t._as_frac(frac) for t in tensors]
    join = np.concatenate if fn == "concatenate" else np.stack
    try:
        new = join([_dummy(t.shape) for t in tensors], axis=axis).shape
    except (ValueError, IndexError) as exc:
        raise DataError(f"cannot {fn} shapes {[t.shape for t in tensors]}: {exc}") from None
    return first._struct(fn, new, inputs=tensors, axis=int(axis))


def concatenate(tensors: Sequence[SharedTensor], axis: int = 0) -> SharedTensor:
    """Join shared tensors along an existing axis (e.g. the rows of several parties)."""
    return _join(tensors, axis, "concatenate")


def stack(tensors: Sequence[SharedTensor], axis: int = 0) -> SharedTensor:
    """Join shared tensors along a new axis."""
    return _join(tensors, axis, "stack")


def where(condition: SharedTensor, a: Any, b: Any) -> SharedTensor:
    """``a`` where the shared 0/1 ``condition`` is 1, ``b`` elsewhere: ``b + c (a - b)``."""
    if not isinstance(condition, SharedTensor) or condition.frac:
        raise ConfigError("condition must be a shared 0/1 integer tensor (a comparison result)")
    return condition * (a - b) + b
