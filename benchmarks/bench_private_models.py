"""Private scikit-learn-style models: veil against diffprivlib on breast_cancer.

Test accuracy (mean over seeds) at epsilon 0.1, 1, 10 of LogisticRegression, GaussianNB,
LinearRegression (fitted to the 0/1 label, thresholded at 0.5) and KMeans (k = 2, clusters
matched to classes), with the same declared bounds for both libraries: features scaled to
[0, 1] by ranges treated as public, ``data_norm = sqrt(30)``. veil's LinearSVC has no
diffprivlib counterpart; its row shows scikit-learn's non-private LinearSVC instead.
Non-private scikit-learn accuracies are printed for reference. Neighbouring relation:
veil accounts add/remove-one; diffprivlib's LogisticRegression follows Chaudhuri et al.'s
replace-one analysis.

    python benchmarks/bench_private_models.py            # 20 seeds, ~1 minute
    python benchmarks/bench_private_models.py --seeds 5
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

import diffprivlib.models as dpl
import numpy as np
from sklearn import cluster, linear_model, naive_bayes, svm
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split

from veil.learn import private

warnings.filterwarnings("ignore")


def data():
    X, y = load_breast_cancer(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=0)
    lo, hi = X_train.min(0), X_train.max(0)
    return (X_train - lo) / (hi - lo), (X_test - lo) / (hi - lo), y_train, y_test


def score(model, X_test, y_test, kind: str) -> float:
    predicted = model.predict(X_test)
    if kind == "regression":
        predicted = (predicted > 0.5).astype(int)
    accuracy = float(np.mean(predicted == y_test))
    return max(accuracy, 1.0 - accuracy) if kind == "clusters" else accuracy


def contenders(epsilon: float, d: int):
    """(name, kind, veil factory, peer factory, non-private model)."""
    norm = math.sqrt(d)
    box = (np.zeros(d), np.ones(d))
    return [
        ("LogisticRegression", "classifier",
         lambda s: private.LogisticRegression(epsilon=epsilon, data_norm=norm,
                                              classes=[0, 1]),
         lambda s: dpl.LogisticRegression(epsilon=epsilon, data_norm=norm, random_state=s),
         linear_model.LogisticRegression()),
        ("GaussianNB", "classifier",
         lambda s: private.GaussianNB(epsilon=epsilon, bounds=(0, 1), classes=[0, 1]),
         lambda s: dpl.GaussianNB(epsilon=epsilon, bounds=box, random_state=s),
         naive_bayes.GaussianNB()),
        ("LinearRegression", "regression",
         lambda s: private.LinearRegression(epsilon=epsilon, bounds_X=(0, 1),
                                            bounds_y=(0, 1)),
         lambda s: dpl.LinearRegression(epsilon=epsilon, bounds_X=box, bounds_y=(0, 1),
                                        random_state=s),
         linear_model.LinearRegression()),
        ("KMeans", "clusters",
         lambda s: private.KMeans(2, epsilon=epsilon, bounds=(0, 1)),
         lambda s: dpl.KMeans(n_clusters=2, epsilon=epsilon, bounds=box, random_state=s),
         cluster.KMeans(2, n_init=10, random_state=0)),
        ("LinearSVC", "classifier",
         lambda s: private.LinearSVC(epsilon=epsilon, data_norm=norm, classes=[0, 1]),
         None, svm.LinearSVC()),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    X_train, X_test, y_train, y_test = data()
    d = X_train.shape[1]
    print(f"breast_cancer: {len(X_train)} train / {len(X_test)} test rows, {d} features; "
          f"mean test accuracy over {args.seeds} seeds (veil: secure RNG)\n")
    print(f"{'model':<20}{'epsilon':>8}{'veil':>8}{'diffprivlib':>13}{'ratio':>7}"
          f"{'diff +- 2 SE':>17}{'non-private':>13}  goal")
    start = time.perf_counter()
    met, total = 0, 0
    for name_index in range(5):
        for epsilon in (0.1, 1.0, 10.0):
            name, kind, ours, peer, plain = contenders(epsilon, d)[name_index]
            ys = y_train if kind != "clusters" else None
            ys_ours = [score(ours(s).fit(X_train, ys), X_test, y_test, kind)
                       for s in range(args.seeds)]
            a = float(np.mean(ys_ours))
            reference = score(plain.fit(X_train, ys), X_test, y_test, kind)
            if peer is None:
                print(f"{name:<20}{epsilon:>8g}{a:>8.3f}{'-':>13}{'-':>7}{'-':>17}"
                      f"{reference:>13.3f}")
                continue
            ys_peer = [score(peer(s).fit(X_train, ys), X_test, y_test, kind)
                       for s in range(args.seeds)]
            b = float(np.mean(ys_peer))
            se = math.sqrt((np.var(ys_ours, ddof=1) + np.var(ys_peer, ddof=1)) / args.seeds)
            ok = a >= b
            met, total = met + ok, total + 1
            print(f"{name:<20}{epsilon:>8g}{a:>8.3f}{b:>13.3f}{a / b:>7.2f}"
                  f"{f'{a - b:+.3f} +- {2 * se:.3f}':>17}{reference:>13.3f}"
                  f"  {'met' if ok else 'NOT met'}")
    print(f"\naccuracy >= diffprivlib's in {met} of {total} cases "
          f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
