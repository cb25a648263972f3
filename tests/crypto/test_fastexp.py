"""The fast exponentiations of veil.crypto.fastexp equal gmpy2.powmod, whatever window."""

from __future__ import annotations

import gmpy2
import numpy as np
import pytest
from gmpy2 import mpz

from veil.crypto.fastexp import FixedBase, _window, multi_pow

MODULUS = mpz(2 ** 127 - 1) * mpz(2 ** 89 - 1)


def _reference(bases, exps):
    acc = mpz(1)
    for b, e in zip(bases, exps):
        acc = acc * gmpy2.powmod(b, int(e), MODULUS) % MODULUS
    return acc


def _le_bytes(exps, nbytes):
    return np.ascontiguousarray(exps.astype("<u8")).view(np.uint8).reshape(-1, 8)[:, :nbytes]


@pytest.mark.parametrize(("count", "bits"), [(1, 3), (7, 1), (200, 16), (3000, 12),
                                             (100_000, 15)])
def test_multi_pow_equals_the_product_of_powers(count, bits):
    rng = np.random.default_rng(count)
    bases = [mpz(int(x)) % MODULUS for x in rng.integers(2, 2 ** 62, size=count)]
    exps = rng.integers(0, 2 ** bits, size=count, dtype=np.uint64)
    exps[0] = 2 ** bits - 1                       # the top digit at its largest
    assert multi_pow(bases, _le_bytes(exps, 8), MODULUS) == _reference(bases, exps)


def test_multi_pow_with_zero_exponents_and_no_bases_is_one():
    assert multi_pow([mpz(5)], np.zeros((1, 2), np.uint8), MODULUS) == 1
    assert multi_pow([], np.zeros((0, 2), np.uint8), MODULUS) == 1


def test_the_window_widens_with_the_number_of_bases():
    assert _window(100_000, 15) == 15      # one digit: N + 2 * 2^15 multiplications
    assert _window(1000, 16) == 8          # two digits of 8 bits
    assert _window(1, 40) < 8


@pytest.mark.parametrize("window", [2, 8, 11, 12])
def test_fixed_base_equals_powmod(window):
    table = FixedBase(3, MODULUS, 100, window=window)
    for e in (0, 1, 2 ** 100 - 1, 123456789 * 2 ** 60 + 5):
        assert table.pow(e) == gmpy2.powmod(3, e, MODULUS)
    with pytest.raises(ValueError):
        FixedBase(3, MODULUS, 100, window=13)
