"""Training and prediction on encrypted data: ridge regression on scikit-learn's diabetes set.

    .venv/bin/python examples/he_diabetes.py          (needs the 'fhe' extra; ~10 s)

1. CKKS (128-bit preset): the owner encrypts (X, y); the server computes the encrypted
   sufficient statistics, solves with one masked question to the owner and holds E(w); it
   predicts E(y_hat) on encrypted test rows; only the owner decrypts.
2. The same model trained by gradient descent entirely under encryption (small insecure
   parameters here to keep the example fast; the 128-bit preset ``depth18`` runs 16 steps;
   6 steps take depth 8 and the encrypted prediction one more).
3. Paillier: three hospitals hold row blocks; the server aggregates their encrypted statistics
   and an exact masked solve gives the key holder the model and nothing else.
"""

from __future__ import annotations

import time

import numpy as np
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Ridge
from sklearn.metrics import r2_score
from sklearn.model_selection import train_test_split

from veil.crypto import paillier
from veil.he import paillier_regression as pr
from veil.he.ckks import CKKSContext
from veil.he.linear import DataOwner, EncryptedLinearRegression, rotations_for


def main() -> None:
    X, y = load_diabetes(return_X_y=True)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.25, random_state=0)
    ref = Ridge(alpha=0.1).fit(X_tr, y_tr)

    # 1. CKKS closed form
    owner = DataOwner(CKKSContext.preset("depth2", rotations=rotations_for(X.shape[1])))
    print(owner.context)
    data = owner.encrypt_training(X_tr, y_tr)                   # owner -> server
    start = time.perf_counter()
    model = EncryptedLinearRegression(alpha=0.1, owner=owner).fit(data)
    print(f"server: encrypted ridge in {time.perf_counter() - start:.2f} s "
          f"({data.nbytes / 1e6:.0f} MB of ciphertext received)")
    encrypted_pred = model.predict(owner.encrypt_rows(X_te, model.x_scale_))
    pred = owner.decrypt_predictions(encrypted_pred)             # only the owner decrypts
    print(f"R^2 on the test split: encrypted {r2_score(y_te, pred):.4f}, "
          f"scikit-learn {ref.score(X_te, y_te):.4f}; "
          f"max |coef difference| {np.abs(model.coef_ - ref.coef_).max():.1e}")

    # 2. gradient descent under CKKS (insecure small parameters: an example, not a deployment)
    small = DataOwner(CKKSContext.keygen(8192, [60] + [40] * 9 + [60], 40,
                                         rotations=rotations_for(X.shape[1]), insecure_ok=True))
    gd = EncryptedLinearRegression(alpha=0.1, solver="gd", max_iter=6, owner=small)
    gd.fit(small.encrypt_training(X_tr, y_tr))
    gd_pred = small.decrypt_predictions(gd.predict(small.encrypt_rows(X_te, gd.x_scale_)))
    print(f"6 encrypted gradient steps: R^2 {r2_score(y_te, gd_pred):.4f} (step sizes the "
          "owner computed and encrypted; the 15 of preset depth18 come within 0.02 of the "
          "closed form)")

    # 3. Paillier: three hospitals, one key holder, exact masked solve
    pk, sk = paillier.keygen(2048)
    stats = [pr.party_statistics(X_tr[b], y_tr[b], pk)
             for b in np.array_split(np.arange(len(y_tr)), 3)]
    A, b = pr.aggregate(stats, alpha=0.1)
    bound = len(y_tr) * 400 * 2 ** 32          # public bound: |y| <= 400, |x| <= 1, 16+16 bits
    solve = pr.MaskedSolve(A, b, entry_bound=bound)
    answer = pr.answer_masked(solve.request(), sk)              # sees only uniform values
    coef, intercept = pr.decrypt_solution(solve.finish(*answer), sk)
    print(f"Paillier, 3 hospitals: max |coef difference| {np.abs(coef - ref.coef_).max():.1e} "
          "(exact on the 16-bit fixed-point inputs)")


if __name__ == "__main__":
    main()
