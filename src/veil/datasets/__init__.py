"""Data sets: real tables (UCI Adult, Nursery), scikit-learn's bundled sets, a synthetic
census, and partitioners that split data between the parties of a federation."""

from __future__ import annotations

from dataclasses import dataclass

from veil.datasets import partition
from veil.datasets.bounds import FeatureBounds, public_bounds
from veil.datasets.census import synthetic_census
from veil.datasets.files import fetch, locate
from veil.datasets.tabular import (
    SKLEARN_SETS,
    Dataset,
    encode_adult,
    encode_nursery,
    load_adult,
    load_adult_hierarchies,
    load_nursery,
    load_sklearn,
    load_xy,
)


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    rows: int
    description: str
    files: tuple[str, ...] = ()

    def available(self) -> bool:
        """True when every file is present locally (bundled sets always are)."""
        return all(locate(f) is not None for f in self.files)


CATALOG: tuple[DatasetInfo, ...] = (
    DatasetInfo("adult", 30162, "UCI Adult, ARX's 9 columns with generalization hierarchies",
                ("adult/adult.csv", "adult/adult_hierarchy_age.csv")),
    DatasetInfo("adult-train", 30162, "UCI Adult training split, 15 columns (complete rows)",
                ("adult/adult.data",)),
    DatasetInfo("adult-test", 15060, "UCI Adult test split, 15 columns (complete rows)",
                ("adult/adult.test",)),
    DatasetInfo("nursery", 12960, "UCI Nursery, 8 categorical attributes + class",
                ("nursery/nursery.data",)),
    DatasetInfo("breast_cancer", 569, "scikit-learn bundled: 30 features, 2 classes"),
    DatasetInfo("digits", 1797, "scikit-learn bundled: 8x8 images, 10 classes"),
    DatasetInfo("diabetes", 442, "scikit-learn bundled: 10 features, regression"),
    DatasetInfo("wine", 178, "scikit-learn bundled: 13 features, 3 classes"),
    DatasetInfo("census", 0, "synthetic census with realistic skew (any size)"),
)


def available(name: str) -> bool:
    """Whether a catalogued data set can be loaded without a download."""
    for info in CATALOG:
        if info.name == name:
            return info.available()
    return False


__all__ = [
    "CATALOG", "Dataset", "DatasetInfo", "FeatureBounds", "SKLEARN_SETS", "available",
    "encode_adult", "encode_nursery", "fetch", "load_adult", "load_adult_hierarchies",
    "load_nursery", "load_sklearn", "load_xy", "partition", "public_bounds",
    "synthetic_census",
]
