"""Shared fixtures of the anonymization tests: small seeded tables with hierarchies."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from veil.anon import Hierarchy
from veil.random import Generator, default_rng

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


class JavaRandom(Generator):
    """``new java.util.Random(seed)``'s ``nextDouble()`` stream (the JDK's 48-bit LCG) as
    a seeded veil generator: ``random(n)`` continues it, so that a mechanism given
    ``rng=JavaRandom(0xDEADBEEF)`` samples the records ARX's deterministic runs sample.
    Nothing else is replayed: any other draw fails."""

    _MULT, _MASK = 0x5DEECE66D, (1 << 48) - 1

    def __init__(self, seed: int) -> None:
        super().__init__(0)
        # a Java int literal such as 0xDEADBEEF is sign-extended to the long seed
        seed = seed - (1 << 32) if 1 << 31 <= seed < 1 << 32 else seed
        self._state = (seed ^ self._MULT) & self._MASK

    def _next(self, bits: int) -> int:
        self._state = (self._state * self._MULT + 0xB) & self._MASK
        return self._state >> (48 - bits)

    def random(self, size=None):
        n = 1 if size is None else int(size)
        out = np.array([((self._next(26) << 27) + self._next(27)) * 2.0 ** -53
                        for _ in range(n)])
        return out[0] if size is None else out

    def _raw(self, n):
        raise AssertionError("JavaRandom replays nextDouble() only")


@pytest.fixture(scope="session")
def java_random():
    """The :class:`JavaRandom` class (conftest modules are not importable by name)."""
    return JavaRandom
