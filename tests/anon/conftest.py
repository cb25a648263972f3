"""Shared fixtures of the anonymization tests: small seeded tables with hierarchies."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from veil.anon import Hierarchy
from veil.random import default_rng

ADULT_QIS = ["sex", "age", "race", "marital-status", "education", "native-country",
             "workclass", "salary-class"]


def small_table(n: int = 400, seed: int = 7) -> tuple[pd.DataFrame, dict[str, Hierarchy]]:
    """A skewed synthetic table: age, zip, sex, job (QIs) and disease (sensitive)."""
    rng = default_rng(seed)
    age = np.minimum(20 + rng.geometric(0.05, n), 79)
    zips = np.array(["47677", "47602", "47678", "47905", "47909", "47906", "48201", "48202"])
    zip_ = zips[np.minimum(rng.geometric(0.3, n) - 1, zips.size - 1)]
    sex = np.where(rng.random(n) < 0.6, "M", "F")
    jobs = np.array(["nurse", "doctor", "clerk", "driver", "cook"])
    job = jobs[np.minimum(rng.geometric(0.4, n) - 1, jobs.size - 1)]
    diseases = np.array(["flu", "gastritis", "ulcer", "cancer", "bronchitis", "pneumonia"])
    disease = diseases[np.minimum(rng.geometric(0.35, n) - 1, diseases.size - 1)]
    df = pd.DataFrame({"age": age, "zip": zip_, "sex": sex, "job": job, "disease": disease})
    hierarchies = {
        "age": Hierarchy.intervals(range(20, 80), [5, 10, 20], name="age"),
        "zip": Hierarchy.masking(zips, name="zip"),
        "sex": Hierarchy([["M", "*"], ["F", "*"]], name="sex"),
        "job": Hierarchy([["nurse", "health", "*"], ["doctor", "health", "*"],
                          ["clerk", "office", "*"], ["driver", "manual", "*"],
                          ["cook", "manual", "*"]], name="job"),
    }
    return df, hierarchies


@pytest.fixture
def table():
    return small_table()


@pytest.fixture
def make_table():
    return small_table


@pytest.fixture
def adult(adult_available):
    from veil.datasets import load_adult, load_adult_hierarchies

    frames = load_adult_hierarchies()
    return load_adult("arx"), {c: Hierarchy(frames[c], name=c) for c in ADULT_QIS}
