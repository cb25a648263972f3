"""Paillier backend and exact regression (both settings) against scikit-learn.

Keys are 1024-bit with insecure_ok=True: these tests are about correctness, not security
(the 128-bit refusal itself is tested below).
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Ridge

from veil.crypto import paillier
from veil.crypto.encoding import FixedPoint
from veil.errors import ConfigError, CryptoError, DataError
from veil.he import paillier_regression as pr
from veil.he.backend import PaillierBackend


@pytest.fixture(scope="module")
def keys():
    return paillier.keygen(1024, insecure_ok=True, rng=11)


@pytest.fixture(scope="module")
def diabetes():
    return load_diabetes(return_X_y=True)


def _rounded(X, y, f=16):
    """The data as the fixed-point encoding sees it (the only approximation)."""
    return np.rint(X * 2 ** f) / 2 ** f, np.rint(y * 2 ** f) / 2 ** f


@pytest.mark.parametrize("alpha", [0.0, 0.5])
def test_server_holds_features(keys, diabetes, alpha):
    pk, sk = keys
    X, y = diabetes
    coder = FixedPoint()
    enc_y = pk.encrypt(coder.encode(y), rng=1)
    sol = pr.fit_server_features(X, enc_y, alpha=alpha, encoding=coder)
    coef, intercept = pr.decrypt_solution(sol, sk)
    ref = Ridge(alpha, solver="cholesky", tol=1e-12).fit(*_rounded(X, y))
    np.testing.assert_allclose(coef, ref.coef_, rtol=1e-9, atol=1e-9)
    assert intercept == pytest.approx(ref.intercept_, rel=1e-12)


def test_parties_with_exact_masked_solve(keys, diabetes):
    pk, sk = keys
    X, y = diabetes
    blocks = np.array_split(np.arange(len(y)), 3)
    stats = [pr.party_statistics(X[i], y[i], pk, rng=2) for i in blocks]
    A, b = pr.aggregate(stats, alpha=1.0)
    coder = FixedPoint()
    bound = len(y) * int(coder.encode(np.abs(y).max())) * int(coder.encode(1.0))
    solve = pr.MaskedSolve(A, b, entry_bound=bound, rng=3)
    M, v = solve.request()
    # what the key holder decrypts is uniform mod n: nowhere near the statistics' sizes
    assert min(abs(int(x)) for x in sk.decrypt(M).ravel()) > 2 ** 900
    sol = solve.finish(*pr.answer_masked((M, v), sk, rng=4))
    coef, intercept = pr.decrypt_solution(sol, sk)
    ref = Ridge(1.0, solver="cholesky").fit(*_rounded(X, y))
    np.testing.assert_allclose(coef, ref.coef_, rtol=1e-9)
    assert intercept == pytest.approx(ref.intercept_, rel=1e-12)


def test_key_too_small_and_bad_messages(keys, diabetes):
    pk, sk = keys
    X, y = diabetes
    with pytest.raises(ConfigError, match="bits=1024 is too small"):
        pr.fit_server_features(np.tile(X, (1, 4)), pk.encrypt(np.zeros(len(y), dtype=int)),
                               encoding=FixedPoint(30, 30))
    with pytest.raises(DataError, match=r"stats\[1\]"):
        pr.aggregate([pr.party_statistics(X[:5], y[:5], pk), (1, 2)])
    other_pk, _ = paillier.keygen(1024, insecure_ok=True, rng=12)
    with pytest.raises(CryptoError, match="different public keys"):
        pr.aggregate([pr.party_statistics(X[:5], y[:5], pk),
                      pr.party_statistics(X[:5], y[:5], other_pk)])
    with pytest.raises(DataError, match="singular"):
        pr.fit_server_features(np.ones((5, 2)), pk.encrypt(np.zeros(5, dtype=int)))


def test_paillier_backend(keys):
    pk, sk = keys
    with pytest.raises(ConfigError, match="bits=1024 is not allowed.*3072"):
        PaillierBackend(pk, sk)
    be = PaillierBackend(pk, sk, insecure_ok=True)
    assert be.security_bits == 0
    a = be.encrypt([1.5, -2.25, 3.0])
    np.testing.assert_array_equal(be.decrypt(be.add(a, [1.0, 1.0, 1.0])), [2.5, -1.25, 4.0])
    prod = be.multiply_plain(a, [2.0, 0.5, -1.0])
    np.testing.assert_array_equal(be.decrypt(prod), [3.0, -1.125, -3.0])
    assert be.decrypt(be.sum(a))[0] == 2.25
    np.testing.assert_array_equal(be.decrypt(be.rotate(a, 1)), [-2.25, 3.0, 1.5])
    np.testing.assert_array_equal(be.decrypt(be.from_bytes(be.to_bytes(a))), [1.5, -2.25, 3.0])
    with pytest.raises(CryptoError, match="additively homomorphic"):
        be.multiply(a, a)
    with pytest.raises(CryptoError, match="outside the fixed-point range"):
        be.encrypt([1e12])
    other = PaillierBackend(*paillier.keygen(1024, insecure_ok=True, rng=13), insecure_ok=True)
    with pytest.raises(CryptoError, match="another key"):
        other.decrypt(a)
    with pytest.raises(CryptoError, match="different key"):
        other.from_bytes(be.to_bytes(a))
