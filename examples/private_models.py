"""Differentially private scikit-learn-style models on breast_cancer, from one budget.

The features are scaled to [-1, 1] from the ranges documented with the data set
(veil.datasets.public_bounds), never from the records: a scale fitted to the data would make
the model depend on private values outside the DP mechanism. Every model then declares the
scaled bounds (bounds=, data_norm=) instead of reading them from the data, and each fit is
charged to a child ledger of one overall budget.

    python examples/private_models.py [--epsilon 1]
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from sklearn import cluster, linear_model, naive_bayes, svm
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split

from veil.datasets import public_bounds
from veil.dp import Ledger
from veil.learn.private import GaussianNB, KMeans, LinearRegression, LinearSVC, LogisticRegression


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilon", type=float, default=1.0, help="per model")
    args = parser.parse_args()
    eps = args.epsilon

    X, y = load_breast_cancer(return_X_y=True)
    X = public_bounds("breast_cancer").scale(X)  # documented ranges -> [-1, 1]
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=0)
    d = X.shape[1]

    budget = Ledger(epsilon=6 * eps, delta=1e-5)
    models = {
        "LogisticRegression (objective perturbation)":
            LogisticRegression(epsilon=eps, data_norm=math.sqrt(d), classes=[0, 1]),
        "LogisticRegression (DP-SGD)":
            LogisticRegression(epsilon=eps, delta=1e-6, method="dpsgd", epochs=10,
                               classes=[0, 1], n="public"),
        "LinearSVC (Huber hinge)": LinearSVC(epsilon=eps, data_norm=math.sqrt(d),
                                             classes=[0, 1]),
        "GaussianNB": GaussianNB(epsilon=eps, bounds=(-1, 1), classes=[0, 1]),
        "LinearRegression (0-1 target)":
            LinearRegression(epsilon=eps, bounds_X=(-1, 1), bounds_y=(0, 1)),
    }
    # the same models without privacy (scikit-learn), as the yardstick for the private ones
    baselines = [linear_model.LogisticRegression(max_iter=1000),
                 linear_model.LogisticRegression(max_iter=1000), svm.LinearSVC(),
                 naive_bayes.GaussianNB(), linear_model.LinearRegression()]
    print(f"breast_cancer, epsilon {eps:g} per model (accuracy: private / non-private)")
    for (name, model), baseline in zip(models.items(), baselines, strict=True):
        model.set_params(ledger=budget.child(name, model.epsilon, model.delta or None))
        accuracies = []
        for fitted in (model.fit(X_train, y_train), baseline.fit(X_train, y_train)):
            predicted = fitted.predict(X_test)
            if "LinearRegression" in type(fitted).__name__:
                predicted = (predicted > 0.5).astype(int)
            accuracies.append(np.mean(predicted == y_test))
        print(f"  {name:<45} accuracy {accuracies[0]:.3f} / {accuracies[1]:.3f}")
    kmeans = KMeans(2, epsilon=eps, bounds=(-1, 1),
                    ledger=budget.child("KMeans", eps, None)).fit(X_train)
    plain = cluster.KMeans(2, n_init=10, random_state=0).fit(X_train)
    matched = [max(np.mean(c == y_test), np.mean(c != y_test))
               for c in (kmeans.predict(X_test), plain.predict(X_test))]
    print(f"  {'KMeans (k=2, clusters matched to classes)':<45} accuracy {matched[0]:.3f} / "
          f"{matched[1]:.3f}")
    print("At epsilon 1 the private accuracies vary from run to run (fresh noise each time, "
          "on 398 training records): rerun, or raise --epsilon, to see the spread close.")
    spent, delta = budget.spent()
    print(f"overall ledger: epsilon {spent:.3f} of {budget.epsilon:g} at delta {delta:g}, "
          f"{len(budget.history())} charges")


if __name__ == "__main__":
    main()
