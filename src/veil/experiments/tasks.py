"""The learning tasks of the Truex et al. comparison: data sets, encodings and learners.

A task is a data set (``nursery``, ``adult``, ``digits``) and a model (``tree``: ID3 from
count queries; ``logreg``, ``svm``: numpy linear models; ``nn``: a one-hidden-layer torch
network, the last three from noisy sums of clipped per-example gradients). Encodings use
public schema knowledge only:

* trees need categorical codes: Nursery's eight attributes as published; Adult's eight
  categorical columns (UCI's category lists) plus age, hours per week and capital gain /
  loss cut at fixed, public thresholds; digits' pixels (0..16) cut into three levels;
* gradient models need numbers in known ranges: Nursery one-hot; Adult as
  :func:`veil.datasets.encode_adult`; digits' pixels / 16.

Adult uses UCI's own train/test split; Nursery and digits a random 70/30 split drawn from
the repetition's seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from veil._validation import check_choice
from veil.datasets import load_adult, load_nursery, load_sklearn, load_xy
from veil.datasets.tabular import ADULT_CATEGORIES, NURSERY_CATEGORIES, NURSERY_COLUMNS
from veil.learn.private.queries import GradientQueries
from veil.learn.queries import QueryLearner
from veil.learn.tree import ID3Queries
from veil.random import RngLike, check_rng

__all__ = ["DATASETS", "MODELS", "Task", "load_task", "make_learner", "DEFAULTS"]

DATASETS = ("nursery", "adult", "digits")
MODELS = ("tree", "svm", "logreg", "nn")

#: default training parameters per model (rounds, learning rate, clip norm; tree depth)
DEFAULTS: dict[str, dict[str, Any]] = {
    "tree": {"max_depth": {"nursery": 4, "adult": 3, "digits": 4}},
    "logreg": {"rounds": 50, "learning_rate": 6.0, "clip_norm": 1.0},
    "svm": {"rounds": 50, "learning_rate": 2.0, "clip_norm": 1.0},
    "nn": {"rounds": 40, "learning_rate": 6.0, "clip_norm": 1.0, "hidden": 32},
}

#: public cut points of Adult's numeric columns for the tree (value < cut -> next bin)
_ADULT_CUTS = {"age": [25, 35, 45, 55, 65], "hours-per-week": [35, 41, 50],
               "capital-gain": [1], "capital-loss": [1]}


@dataclass(frozen=True)
class Task:
    """Training and test data of one task, with what its learner needs to know."""

    dataset: str
    model: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    classes: np.ndarray
    cardinalities: tuple[int, ...] = ()


def _split(X: np.ndarray, y: np.ndarray, rng: RngLike, test: float = 0.3):
    order = check_rng(rng).permutation(len(y))
    cut = int(round(len(y) * (1 - test)))
    tr, te = np.sort(order[:cut]), np.sort(order[cut:])
    return X[tr], y[tr], X[te], y[te]


def _adult_codes(df: Any) -> tuple[np.ndarray, list[int]]:
    cols, cards = [], []
    for col, cats in ADULT_CATEGORIES.items():
        cols.append(df[col].map({c: i for i, c in enumerate(cats)}).to_numpy())
        cards.append(len(cats))
    for col, cuts in _ADULT_CUTS.items():
        cols.append(np.searchsorted(cuts, df[col].to_numpy(), side="right"))
        cards.append(len(cuts) + 1)
    return np.stack(cols, axis=1).astype(np.int64), cards


def load_task(dataset: str, model: str, *, rng: RngLike = None) -> Task:
    """The data of a task (``rng`` draws the train/test split where there is none)."""
    check_choice(dataset, "dataset", DATASETS)
    check_choice(model, "model", MODELS)
    if dataset == "adult":
        if model == "tree":
            (Xa, cards), (Xb, _) = _adult_codes(load_adult("train")), _adult_codes(
                load_adult("test"))
            ya = (load_adult("train")["income"] == ">50K").to_numpy().astype(np.int64)
            yb = (load_adult("test")["income"] == ">50K").to_numpy().astype(np.int64)
            return Task(dataset, model, Xa, ya, Xb, yb, np.array([0, 1]), tuple(cards))
        train, test = load_xy("adult", split="train"), load_xy("adult", split="test")
        return Task(dataset, model, train.X, train.y, test.X, test.y, np.array([0, 1]))
    if dataset == "nursery":
        if model == "tree":
            df = load_nursery()
            cols = NURSERY_COLUMNS[:-1]
            X = np.stack([df[c].map({v: i for i, v in enumerate(NURSERY_CATEGORIES[c])})
                          .to_numpy() for c in cols], axis=1).astype(np.int64)
            y = df["class"].map({v: i for i, v in enumerate(NURSERY_CATEGORIES["class"])}
                                ).to_numpy().astype(np.int64)
            cards = tuple(len(NURSERY_CATEGORIES[c]) for c in cols)
        else:
            data = load_xy("nursery")
            X, y, cards = data.X, data.y, ()
    else:
        data = load_sklearn("digits")
        X, y = data.X, data.y
        if model == "tree":
            X = np.digitize(X, [5, 11]).astype(np.int64)     # pixel levels 0-4, 5-10, 11-16
            cards = (3,) * X.shape[1]
        else:
            X, cards = X / 16.0, ()
    classes = np.unique(y)
    return Task(dataset, model, *_split(X, y, rng), classes, cards)


def make_learner(task: Task, *, init_rng: Any = 0, **options: Any) -> QueryLearner:
    """A fresh learner for ``task`` (``options`` override :data:`DEFAULTS`); ``init_rng``
    draws a network's initial weights (public, the same for every method)."""
    if task.model == "tree":
        depth = options.get("max_depth", DEFAULTS["tree"]["max_depth"][task.dataset])
        return ID3Queries(task.cardinalities, task.classes, max_depth=depth)
    params = {**DEFAULTS[task.model], **options}
    hidden = params.pop("hidden", None)
    params.pop("max_depth", None)
    binary = task.classes.size == 2
    if task.model == "logreg":
        from veil.learn import LogisticRegression, SoftmaxRegression

        model = LogisticRegression(alpha=0.0) if binary else SoftmaxRegression(alpha=0.0)
    elif task.model == "svm":
        from veil.learn import LinearSVC

        model = LinearSVC(alpha=0.0)
    else:
        import torch

        from veil.learn import TorchModel

        d, k = task.X_train.shape[1], task.classes.size
        module = torch.nn.Sequential(torch.nn.Linear(d, hidden), torch.nn.Tanh(),
                                     torch.nn.Linear(hidden, k)).to(torch.float64)
        model = TorchModel(module)
    model.initialize(task.X_train.shape[1], task.classes)
    if task.model == "nn":   # public initial weights, U(-1/sqrt(fan_in), 1/sqrt(fan_in))
        model.set_params_vector(_initial_weights(model.module_, init_rng))
    return GradientQueries(model, **params)


def _initial_weights(module: Any, rng: RngLike) -> np.ndarray:
    g = check_rng(rng)
    parts, fan_in = [], 1
    for p in module.parameters():
        if p.ndim == 2:
            fan_in = p.shape[1]
        bound = 1.0 / np.sqrt(fan_in)
        parts.append(g.uniform(-bound, bound, p.numel()))
    return np.concatenate(parts)
