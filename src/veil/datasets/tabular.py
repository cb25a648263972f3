"""Loaders for the real tables veil works on, and their encoding for learning.

Encodings for learning use only public schema knowledge: the category lists published
with the data (UCI's ``adult.names``) and declared value ranges. Nothing is fitted to the
data (no data-dependent scaling), so an encoded feature vector has bounds that are known
before the data is seen, which is what differentially private learning needs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from veil.datasets.files import ADULT_HIERARCHY_COLUMNS, fetch
from veil.errors import ConfigError, DataError

PathLike = str | os.PathLike | None

ADULT_COLUMNS = [
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
    "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
    "hours-per-week", "native-country", "income",
]
#: public category lists from UCI's adult.names
ADULT_CATEGORIES: dict[str, list[str]] = {
    "workclass": ["Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov",
                  "State-gov", "Without-pay", "Never-worked"],
    "education": ["Bachelors", "Some-college", "11th", "HS-grad", "Prof-school", "Assoc-acdm",
                  "Assoc-voc", "9th", "7th-8th", "12th", "Masters", "1st-4th", "10th",
                  "Doctorate", "5th-6th", "Preschool"],
    "marital-status": ["Married-civ-spouse", "Divorced", "Never-married", "Separated",
                       "Widowed", "Married-spouse-absent", "Married-AF-spouse"],
    "occupation": ["Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial",
                   "Prof-specialty", "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical",
                   "Farming-fishing", "Transport-moving", "Priv-house-serv", "Protective-serv",
                   "Armed-Forces"],
    "relationship": ["Wife", "Own-child", "Husband", "Not-in-family", "Other-relative",
                     "Unmarried"],
    "race": ["White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"],
    "sex": ["Female", "Male"],
    "native-country": ["United-States", "Cambodia", "England", "Puerto-Rico", "Canada",
                       "Germany", "Outlying-US(Guam-USVI-etc)", "India", "Japan", "Greece",
                       "South", "China", "Cuba", "Iran", "Honduras", "Philippines", "Italy",
                       "Poland", "Jamaica", "Vietnam", "Mexico", "Portugal", "Ireland", "France",
                       "Dominican-Republic", "Laos", "Ecuador", "Taiwan", "Haiti", "Columbia",
                       "Hungary", "Guatemala", "Nicaragua", "Scotland", "Thailand", "Yugoslavia",
                       "El-Salvador", "Trinadad&Tobago", "Peru", "Hong", "Holand-Netherlands"],
}
#: declared public ranges of the numeric Adult columns (clipped into them when encoding);
#: capital gain/loss are encoded as log1p(value) / log1p(upper).
ADULT_RANGES: dict[str, tuple[float, float]] = {
    "age": (17, 90), "education-num": (1, 16), "hours-per-week": (1, 99),
    "capital-gain": (0, 99999), "capital-loss": (0, 4356),
}
_LOG_SCALED = {"capital-gain", "capital-loss"}

NURSERY_COLUMNS = ["parents", "has_nurs", "form", "children", "housing", "finance", "social",
                   "health", "class"]
NURSERY_CATEGORIES: dict[str, list[str]] = {
    "parents": ["usual", "pretentious", "great_pret"],
    "has_nurs": ["proper", "less_proper", "improper", "critical", "very_crit"],
    "form": ["complete", "completed", "incomplete", "foster"],
    "children": ["1", "2", "3", "more"],
    "housing": ["convenient", "less_conv", "critical"],
    "finance": ["convenient", "inconv"],
    "social": ["nonprob", "slightly_prob", "problematic"],
    "health": ["recommended", "priority", "not_recom"],
    "class": ["not_recom", "recommend", "very_recom", "priority", "spec_prior"],
}

SKLEARN_SETS = ("breast_cancer", "digits", "diabetes", "wine")


@dataclass(frozen=True)
class Dataset:
    """A learning task: features ``X`` (float), target ``y`` and their names.

    Unpacks as ``X, y = load_xy(...)``.
    """

    name: str
    X: np.ndarray
    y: np.ndarray
    feature_names: list[str]
    classes: list[str] = field(default_factory=list)
    task: str = "classification"

    def __iter__(self) -> Iterator[np.ndarray]:
        return iter((self.X, self.y))


def _read_csv(file, **kwargs) -> pd.DataFrame:
    try:
        return pd.read_csv(file, **kwargs)
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise DataError(f"{file} is not a readable CSV file: {exc}") from None


def load_adult(split: str = "arx", *, path: PathLike = None,
               dropna: bool = True) -> pd.DataFrame:
    """UCI Adult.

    ``split="arx"``: ARX's 30,162 complete records with 9 columns (``;``-separated), the
    table of the anonymization benchmarks. ``"train"`` / ``"test"``: the 15-column UCI
    originals (32,561 / 16,281 rows; ``dropna`` drops the rows with ``?``), with the
    test labels' trailing ``.`` removed.
    """
    if split == "arx":
        return _read_csv(fetch("adult/adult.csv", path), sep=";", dtype=str)
    if split not in ("train", "test"):
        raise ConfigError(f"split={split!r} is not allowed: choose 'arx', 'train' or 'test'")
    file = fetch(f"adult/adult.{'data' if split == 'train' else 'test'}", path)
    df = _read_csv(file, header=None, names=ADULT_COLUMNS, sep=",", skipinitialspace=True,
                   na_values="?", comment="|", skip_blank_lines=True)
    df["income"] = df["income"].str.rstrip(".")
    if dropna:
        df = df.dropna().reset_index(drop=True)
    for col in ("age", "fnlwgt", "education-num", "capital-gain", "capital-loss",
                "hours-per-week"):
        df[col] = df[col].astype(np.int64)
    return df


def load_adult_hierarchies(path: PathLike = None) -> dict[str, pd.DataFrame]:
    """ARX's generalization hierarchies for the 9 ARX Adult columns.

    Each is a string table without header: column 0 the original value, the last ``*``.
    """
    return {col: _read_csv(fetch(f"adult/adult_hierarchy_{col}.csv", path), sep=";",
                           header=None, dtype=str, keep_default_na=False)
            for col in ADULT_HIERARCHY_COLUMNS}


def load_nursery(path: PathLike = None) -> pd.DataFrame:
    """UCI Nursery: 12,960 rows, 8 categorical attributes and the class."""
    return _read_csv(fetch("nursery/nursery.data", path), header=None, names=NURSERY_COLUMNS,
                     dtype=str)


def _one_hot(column: pd.Series, categories: list[str], name: str) -> np.ndarray:
    codes = pd.Categorical(column, categories=categories).codes
    if np.any(codes < 0):
        unknown = sorted(set(column[codes < 0].astype(str)))[:5]
        raise DataError(f"column {name!r} holds values outside its public category list: "
                        f"{unknown}")
    out = np.zeros((len(column), len(categories)))
    out[np.arange(len(column)), codes] = 1.0
    return out


def encode_adult(df: pd.DataFrame) -> Dataset:
    """Encode the 15-column Adult table: features in [0, 1], y = 1 for income > 50K.

    Numeric columns are clipped into :data:`ADULT_RANGES` and scaled to [0, 1]
    (capital gain/loss on a log scale); categorical columns are one-hot over the public
    category lists; ``fnlwgt`` (a census sampling weight, not a personal attribute) is
    dropped.
    """
    blocks, names = [], []
    for col, (lo, hi) in ADULT_RANGES.items():
        v = np.clip(df[col].to_numpy(dtype=np.float64), lo, hi)
        if col in _LOG_SCALED:
            v = np.log1p(v) / np.log1p(hi)
        else:
            v = (v - lo) / (hi - lo)
        blocks.append(v[:, None])
        names.append(col)
    for col, cats in ADULT_CATEGORIES.items():
        blocks.append(_one_hot(df[col], cats, col))
        names.extend(f"{col}={c}" for c in cats)
    y = (df["income"].to_numpy() == ">50K").astype(np.int64)
    return Dataset("adult", np.hstack(blocks), y, names, ["<=50K", ">50K"])


def encode_nursery(df: pd.DataFrame) -> Dataset:
    """One-hot encode Nursery's 8 attributes; y indexes the 5 classes."""
    blocks, names = [], []
    for col in NURSERY_COLUMNS[:-1]:
        cats = NURSERY_CATEGORIES[col]
        blocks.append(_one_hot(df[col], cats, col))
        names.extend(f"{col}={c}" for c in cats)
    classes = NURSERY_CATEGORIES["class"]
    y = pd.Categorical(df["class"], categories=classes).codes.astype(np.int64)
    return Dataset("nursery", np.hstack(blocks), y, names, classes)


def load_sklearn(name: str) -> Dataset:
    """A data set bundled with scikit-learn (no download)."""
    from sklearn import datasets as skd

    if name not in SKLEARN_SETS:
        raise ConfigError(f"name={name!r} is not allowed: choose one of {', '.join(SKLEARN_SETS)}")
    bunch = getattr(skd, f"load_{name}")()
    task = "regression" if name == "diabetes" else "classification"
    classes = [str(c) for c in getattr(bunch, "target_names", [])] if task != "regression" else []
    y = bunch.target.astype(np.float64 if task == "regression" else np.int64)
    return Dataset(name, bunch.data.astype(np.float64), y, list(bunch.feature_names), classes,
                   task)


def feature_encoding(name: str) -> list[dict[str, object]]:
    """How :func:`load_xy` turns the raw columns of ``name`` into its features, column by
    column, in the JSON form of :func:`veil.learn.model_format.encode_table` (a saved model keeps
    it, so ``veil predict`` can encode a raw table the same way)."""
    if name == "adult":
        steps: list[dict[str, object]] = [
            {"column": col, "kind": "log", "high": hi} if col in _LOG_SCALED else
            {"column": col, "kind": "range", "low": lo, "high": hi}
            for col, (lo, hi) in ADULT_RANGES.items()]
        return steps + [{"column": col, "kind": "onehot", "categories": cats}
                        for col, cats in ADULT_CATEGORIES.items()]
    if name == "nursery":
        return [{"column": col, "kind": "onehot", "categories": NURSERY_CATEGORIES[col]}
                for col in NURSERY_COLUMNS[:-1]]
    return [{"column": col, "kind": "raw"} for col in load_sklearn(name).feature_names]


def class_names(name: str) -> list[str]:
    """The label of each class index of :func:`load_xy` ``(name).y``."""
    if name == "adult":
        return ["<=50K", ">50K"]
    if name == "nursery":
        return list(NURSERY_CATEGORIES["class"])
    return load_sklearn(name).classes


def load_xy(name: str, *, split: str = "train", path: PathLike = None) -> Dataset:
    """A learning task by name: ``adult`` (``split`` train/test), ``nursery`` or a
    scikit-learn set (:data:`SKLEARN_SETS`)."""
    if name == "adult":
        return encode_adult(load_adult(split, path=path))
    if name == "nursery":
        return encode_nursery(load_nursery(path))
    if name in SKLEARN_SETS:
        return load_sklearn(name)
    raise ConfigError(f"name={name!r} is not allowed: choose adult, nursery or one of "
                      f"{', '.join(SKLEARN_SETS)}")
