"""Differentially private models with the scikit-learn API (numpy).

* :class:`LogisticRegression` and :class:`LinearSVC`: objective perturbation (pure
  epsilon-DP; Chaudhuri, Monteleoni & Sarwate 2011) or DP-SGD;
* :class:`LinearRegression`: sufficient-statistics perturbation, noise on every entry of
  ``X^T X`` and ``X^T y``;
* :class:`GaussianNB`: noisy counts, sums and sums of squares per class;
* :class:`KMeans`: DP-Lloyd iterations on noisy counts and sums;
* :class:`GradientQueries`: gradient descent as aggregate queries of clipped gradient sums,
  made private by the noise of the hybrid approach (:mod:`veil.fl.hybrid`).

Each model takes ``epsilon`` (and ``delta``), charges its releases to ``ledger`` (a
:class:`~veil.dp.Ledger`; None: a one-off ledger holding exactly the model's budget, kept
as ``ledger_``) before drawing any noise, and takes its data bounds as declared
(``bounds=``, ``data_norm=``) or estimates them privately with part of the budget
(``"estimate"``) — never reads them from the data.
"""

from veil.learn.private.kmeans import KMeans
from veil.learn.private.linear import LinearSVC, LogisticRegression
from veil.learn.private.linear_regression import LinearRegression
from veil.learn.private.naive_bayes import GaussianNB
from veil.learn.private.queries import GradientQueries

__all__ = ["LogisticRegression", "LinearSVC", "LinearRegression", "GaussianNB", "KMeans",
           "GradientQueries"]
