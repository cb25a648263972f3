"""CKKS backend and EncryptedLinearRegression against scikit-learn on diabetes.

Small parameter sets (insecure_ok=True) are used where a test is about correctness, not
security; test_secure_preset_closed_form runs the 128-bit preset ``depth2`` (N = 8192).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tenseal", reason="CKKS needs the 'fhe' extra (tenseal)")

from sklearn.datasets import load_diabetes  # noqa: E402
from sklearn.linear_model import LinearRegression, Ridge  # noqa: E402
from sklearn.metrics import r2_score  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

from veil.errors import ConfigError, CryptoError  # noqa: E402
from veil.he.backend import CKKSBackend  # noqa: E402
from veil.he.ckks import SECURE_PRESETS, CKKSContext  # noqa: E402
from veil.he.linear import (  # noqa: E402
    DataOwner,
    EncryptedLinearRegression,
    gd_step,
    predict_private_model,
    rotations_for,
)


@pytest.fixture(scope="module")
def diabetes():
    X, y = load_diabetes(return_X_y=True)
    return train_test_split(X, y, test_size=0.25, random_state=0)


@pytest.fixture(scope="module")
def secure_owner():
    return DataOwner(CKKSContext.preset("depth2", rotations=rotations_for(10), rng=1))


@pytest.fixture(scope="module")
def deep_owner():
    # correctness of the depth plan only: 9 moduli at N = 8192 exceed the 218-bit bound
    ctx = CKKSContext.keygen(8192, [60] + [40] * 7 + [60], 40, rotations=rotations_for(10),
                             insecure_ok=True, rng=2)
    return DataOwner(ctx)


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_secure_preset_closed_form(diabetes, secure_owner, alpha):
    X_tr, X_te, y_tr, y_te = diabetes
    assert secure_owner.context.security_bits == 128
    data = secure_owner.encrypt_training(X_tr, y_tr)
    model = EncryptedLinearRegression(alpha, owner=secure_owner, rng=3).fit(data)
    ref = Ridge(alpha).fit(X_tr, y_tr) if alpha else LinearRegression().fit(X_tr, y_tr)
    # stated bound: 1e-4 relative to the largest coefficient (CKKS at scale 2^40)
    bound = 1e-4 * np.abs(ref.coef_).max()
    np.testing.assert_allclose(model.coef_, ref.coef_, atol=bound)
    assert abs(model.intercept_ - ref.intercept_) < bound
    rows = secure_owner.encrypt_rows(X_te, model.x_scale_)
    pred = secure_owner.decrypt_predictions(model.predict(rows))
    np.testing.assert_allclose(pred, ref.predict(X_te), atol=bound)
    assert round(r2_score(y_te, pred), 3) == round(ref.score(X_te, y_te), 3)


def _jacobi_step(Z):
    """The owner's step sizes, written out: (1 / H_jj) / lambda_max(D^-1/2 H D^-1/2)."""
    H = Z.T @ Z / len(Z)
    root = 1 / np.sqrt(np.diag(H))
    return root ** 2 / np.linalg.eigvalsh(root[:, None] * H * root[None, :]).max()


def _plain_gd(X, y, x_scale, y_scale, steps, eta, alpha):
    """Gradient descent in the clear on the owner's scaled rows; ``eta`` None: the owner's
    preconditioned step sizes."""
    Xs, ys, n = X / x_scale, y / y_scale, len(y)
    Z = np.column_stack([Xs, np.ones(n)])
    eta = _jacobi_step(Z) if eta is None else eta
    lam = np.append(alpha / x_scale ** 2, 0.0)
    w = np.zeros(Z.shape[1])
    for _ in range(steps):
        w = w - eta * (Z.T @ (Z @ w - ys) + lam * w) / n
    return w[:-1] * y_scale / x_scale, w[-1] * y_scale


def test_the_owners_step_reaches_the_closed_form_within_depth18s_iterations():
    """Issue #32: with the step 1/(d + 1) encrypted GD on diabetes had R^2 -0.49 after 10
    iterations and -0.05 after 16 (all that preset depth18 allows without refreshes),
    where the closed form reaches 0.518. The owner's preconditioned step (Jacobi scaling,
    then 1 / lambda_max, computed in the clear) comes within 0.02 in those 16 (the math in
    the clear; the encrypted run matches it, test_gradient_descent_matches_plaintext)."""
    X, y = load_diabetes(return_X_y=True)
    x_scale = 2.0 ** np.ceil(np.log2(np.abs(X).max(axis=0)))
    y_scale = 2.0 ** np.ceil(np.log2(np.abs(y).max()))
    closed = LinearRegression().fit(X, y).score(X, y)
    depth = len(SECURE_PRESETS["depth18"][1]) - 2  # the moduli between the special ones
    steps = depth - 2                              # G, M, then one level per iteration

    def r2(eta):
        coef, intercept = _plain_gd(X, y, x_scale, y_scale, steps, eta, 0.0)
        return r2_score(y, X @ coef + intercept)

    owner = gd_step(np.column_stack([X / x_scale, np.ones(len(y)), y / y_scale]))
    assert owner[-1] == 0.0                        # y's coordinate never moves
    assert steps == 16 and round(closed, 3) == 0.518
    for k in (steps - 1, steps):                   # `veil he train` leaves predict a level
        coef, intercept = _plain_gd(X, y, x_scale, y_scale, k, owner[:-1], 0.0)
        assert r2_score(y, X @ coef + intercept) >= closed - 0.02
    np.testing.assert_allclose(owner[:-1], _jacobi_step(np.column_stack(
        [X / x_scale, np.ones(len(y))])), rtol=1e-12)
    assert r2(1 / 11) < closed - 0.5              # the former default


@pytest.mark.parametrize("steps,refresh,eta", [(5, 0, None), (4, 0, None), (10, 3, None),
                                               (5, 0, 1 / 11)])
def test_gradient_descent_matches_plaintext(diabetes, deep_owner, steps, refresh, eta):
    X_tr, _, y_tr, _ = diabetes
    data = deep_owner.encrypt_training(X_tr, y_tr)
    model = EncryptedLinearRegression(0.5, solver="gd", max_iter=steps, refresh_every=refresh,
                                      learning_rate=eta, owner=deep_owner, rng=4).fit(data)
    coef, intercept = _plain_gd(X_tr, y_tr, data.x_scale, data.y_scale, steps, eta, 0.5)
    # stated bound: 1e-4 relative to the largest coefficient (median read-out of the copies)
    bound = 1e-4 * np.abs(coef).max()
    np.testing.assert_allclose(model.coef_, coef, atol=bound)
    assert abs(model.intercept_ - intercept) < bound


def test_depth_is_planned_and_exhaustion_is_an_error(diabetes, deep_owner):
    X_tr, _, y_tr, _ = diabetes
    data = deep_owner.encrypt_training(X_tr[:40], y_tr[:40])
    with pytest.raises(ConfigError, match="depth 7"):
        EncryptedLinearRegression(solver="gd", max_iter=6, owner=deep_owner).fit(data)
    model = EncryptedLinearRegression(solver="gd", max_iter=5, owner=deep_owner).fit(data)
    assert model.model_.level == 0
    rows = deep_owner.encrypt_rows(X_tr[:3], model.x_scale_)
    with pytest.raises(CryptoError, match="depth exhausted.*level 0 of 7"):
        model.predict(rows)


def test_private_model_prediction(diabetes, secure_owner):
    X_tr, X_te, y_tr, _ = diabetes
    ref = LinearRegression().fit(X_tr, y_tr)
    ctx = secure_owner.context
    scale = np.ones(10)
    w = np.tile(np.pad(np.append(ref.coef_, ref.intercept_) / 1024, (0, 5)), ctx.slots // 16)
    cts, mask = predict_private_model(ctx.encrypt(w), X_te, scale, rng=5)
    masked = secure_owner.decrypt_predictions(cts)
    assert np.abs(masked * 1024 - ref.predict(X_te)).min() > 1.0    # the owner sees masked values
    np.testing.assert_allclose((masked - mask) * 1024, ref.predict(X_te), atol=0.05)
    # data-private direction: the server's plaintext model on the owner's encrypted rows
    rows = secure_owner.encrypt_rows(X_te, scale)
    server = EncryptedLinearRegression()
    out = server.predict(rows, model=(ref.coef_ / 1024, ref.intercept_ / 1024))
    pred = secure_owner.decrypt_predictions(out)
    np.testing.assert_allclose(pred * 1024, ref.predict(X_te), atol=0.05)


def test_security_and_range_errors(secure_owner):
    with pytest.raises(ConfigError, match="coeff_mod_bit_sizes.*218 bits"):
        CKKSContext.keygen(8192, [60, 40, 40, 40, 60], 40)
    with pytest.raises(ConfigError, match="poly_modulus_degree=1000"):
        CKKSContext.keygen(1000)
    ctx = secure_owner.context
    with pytest.raises(CryptoError, match="outside the encodable range"):
        ctx.encrypt([1.0, 1e7])
    with pytest.raises(CryptoError, match="slots"):
        ctx.encrypt(np.zeros(ctx.slots + 1))


def test_other_key_and_serialization(secure_owner):
    ctx = secure_owner.context
    other = CKKSContext.keygen(8192, rng=9)
    a, b = ctx.encrypt([1.0, 2.0]), other.encrypt([1.0, 2.0])
    with pytest.raises(CryptoError, match="another key"):
        a + b
    with pytest.raises(CryptoError, match="another key"):
        other.decrypt(a)
    with pytest.raises(CryptoError, match="another key"):
        other.ciphertext_from_bytes(a.to_bytes())
    public = CKKSContext.from_bytes(ctx.public().to_bytes())
    assert not public.has_secret_key and public.fingerprint == ctx.fingerprint
    c = public.ciphertext_from_bytes((a * [3.0, 4.0]).to_bytes())
    np.testing.assert_allclose(ctx.decrypt(c, 2), [3.0, 8.0], atol=1e-6)
    with pytest.raises(CryptoError, match="secret key"):
        public.decrypt(c)
    blob = bytearray(a.to_bytes())
    blob[40] ^= 1
    with pytest.raises(CryptoError):
        ctx.ciphertext_from_bytes(bytes(blob))


def test_bundles_load_only_under_their_key(secure_owner):
    from veil.he.linear import EncryptedTrainingSet
    X, y = load_diabetes(return_X_y=True)
    data = secure_owner.encrypt_training(X[:12], y[:12])
    blob = data.to_bytes()
    back = EncryptedTrainingSet.from_bytes(blob, secure_owner.context.public())
    assert (back.n, back.d, back.y_scale) == (12, 10, data.y_scale)
    other = CKKSContext.keygen(8192, rng=10)
    with pytest.raises(CryptoError, match="another key"):
        EncryptedTrainingSet.from_bytes(blob, other)
    with pytest.raises(CryptoError):
        EncryptedTrainingSet.from_bytes(blob[:-5], secure_owner.context)


def test_backend_interface(secure_owner):
    be = CKKSBackend(secure_owner.context)
    a, b = be.encrypt([1.0, 2.0, 3.0, 4.0]), be.encrypt([0.5, 0.5, 0.5, 0.5])
    np.testing.assert_allclose(be.decrypt(be.multiply(a, b))[:4], [0.5, 1, 1.5, 2], atol=1e-6)
    np.testing.assert_allclose(be.decrypt(be.rotate(a, 1))[:3], [2, 3, 4], atol=1e-6)
    assert abs(be.decrypt(be.sum(a))[0] - 10.0) < 1e-5
    np.testing.assert_allclose(be.decrypt(be.from_bytes(be.to_bytes(be.add(a, b))))[:2],
                               [1.5, 2.5], atol=1e-6)
    assert be.security_bits == 128


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_rows_packing_closed_form_is_light_and_as_accurate(diabetes, secure_owner, alpha):
    """Issue 35: the cell packing uploads 2 x 2p^2 slots per row (~10x straightforward
    column packing: 37 MB for diabetes). The rows packing uploads each row in 2p slots, so
    331 rows x 10 features take 3 ciphertexts, fewer than column packing's d + 2 = 12, and
    the server gets X^T X from its diagonals: the coefficients must stay within the
    stated 1e-4 relative bound, through a round trip of the upload's bytes."""
    from veil.he.linear import EncryptedTrainingSet

    X_tr, X_te, y_tr, y_te = diabetes
    ctx = secure_owner.context
    data = secure_owner.encrypt_training(X_tr, y_tr, packing="rows")
    p = 16
    assert len(data.u) == -(-len(y_tr) * 2 * p // ctx.slots) == 3 and not data.v + data.step
    cells = 2 * -(-len(y_tr) // (ctx.slots // (2 * p * p))) + 2   # the cell packing's count
    assert cells == 86 and data.nbytes == sum(c.nbytes for c in data.u)
    back = EncryptedTrainingSet.from_bytes(data.to_bytes(), ctx.public())
    assert back.packing == "rows" and len(back.u) == 3
    model = EncryptedLinearRegression(alpha, owner=secure_owner, rng=3).fit(back)
    ref = Ridge(alpha).fit(X_tr, y_tr) if alpha else LinearRegression().fit(X_tr, y_tr)
    bound = 1e-4 * np.abs(ref.coef_).max()
    np.testing.assert_allclose(model.coef_, ref.coef_, atol=bound)
    assert abs(model.intercept_ - ref.intercept_) < bound
    with pytest.raises(ConfigError, match="solver='gd' is not allowed with packing='rows'"):
        EncryptedLinearRegression(solver="gd", owner=secure_owner).fit(back)
    with pytest.raises(ConfigError, match="packing='columns' is not allowed"):
        secure_owner.encrypt_training(X_tr, y_tr, packing="columns")
