"""A synthetic census table with realistic skew, for quasi-identifier demos.

Nothing here is real: the generator draws people from a small generative model so that
demos and tests can show re-identification risk without touching real records. The skew
is what makes quasi-identifiers dangerous in real tables and is reproduced on purpose:

* zip codes: 5-digit codes in regions (first three digits) whose population follows a
  Zipf law (exponent 1.1), codes inside a region Zipf as well — a few dense areas and a
  long tail of sparse ones;
* age: a mixture shaped like an adult population pyramid (17-90);
* race: a majority group and small minorities; sex about balanced;
* education ordered, depending on age; occupation depending on education;
* income: log-normal, increasing with education and age, with a gender gap.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from veil._validation import check_int
from veil.random import check_rng

EDUCATION = ["Less than HS", "HS-grad", "Some-college", "Bachelors", "Masters", "Doctorate"]
_EDU_P = np.array([0.10, 0.30, 0.25, 0.22, 0.10, 0.03])
OCCUPATION = ["Service", "Manual", "Clerical", "Sales", "Technical", "Professional",
              "Managerial"]
# P(occupation | education level): rows follow EDUCATION
_OCC_P = np.array([
    [0.40, 0.40, 0.08, 0.08, 0.02, 0.01, 0.01],
    [0.25, 0.35, 0.15, 0.15, 0.05, 0.02, 0.03],
    [0.15, 0.20, 0.20, 0.20, 0.12, 0.06, 0.07],
    [0.05, 0.05, 0.12, 0.18, 0.20, 0.25, 0.15],
    [0.02, 0.02, 0.06, 0.10, 0.20, 0.40, 0.20],
    [0.01, 0.01, 0.02, 0.03, 0.13, 0.65, 0.15],
])
RACE = ["White", "Black", "Asian", "Hispanic", "Other"]
_RACE_P = np.array([0.62, 0.13, 0.06, 0.16, 0.03])
MARITAL = ["Never-married", "Married", "Divorced", "Widowed"]


def _zipf(rng, n: int, size: int, exponent: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1) ** exponent
    return rng.choice(n, size=size, p=weights / weights.sum())


def synthetic_census(n: int = 10_000, *, regions: int = 60, rng=None) -> pd.DataFrame:
    """``n`` synthetic people: age, zip, sex, race, marital-status, education, occupation,
    hours-per-week and income (USD per year)."""
    n = check_int(n, "n", low=1)
    regions = check_int(regions, "regions", low=1, high=900)
    rng = check_rng(rng)
    region = _zipf(rng, regions, n, 1.1)
    local = _zipf(rng, 100, n, 1.1)
    zip_prefix = 100 + (region * 7919) % 900  # spread region numbers over 100..999
    zipcode = np.char.zfill((zip_prefix * 100 + local).astype(str), 5)

    young = rng.uniform(17, 45, n)
    older = 17 + 73 * rng.random(n) ** 1.6
    age = np.where(rng.random(n) < 0.55, young, older).astype(np.int64)
    sex = np.where(rng.random(n) < 0.49, "Female", "Male")
    race = np.asarray(RACE)[rng.choice(len(RACE), size=n, p=_RACE_P)]

    edu = rng.choice(len(EDUCATION), size=n, p=_EDU_P)
    edu = np.where(age < 22, np.minimum(edu, 2), edu)  # too young for graduate degrees
    cdf = np.cumsum(_OCC_P[edu], axis=1)
    occ = (rng.random(n)[:, None] > cdf).sum(axis=1).clip(0, len(OCCUPATION) - 1)

    married_p = np.clip((age - 18) / 40, 0.05, 0.65)
    u = rng.random(n)
    marital = np.where(u < married_p, 1,
                       np.where(u < married_p + 0.12 * (age > 30), 2,
                                np.where((age > 65) & (u > 0.9), 3, 0)))
    hours = np.clip(np.round(rng.normal(40, 9, n)), 1, 99).astype(np.int64)

    log_income = (9.6 + 0.28 * edu + 0.035 * np.minimum(age - 17, 35)
                  - 0.0004 * np.maximum(age - 55, 0) ** 2
                  - 0.18 * (sex == "Female") + rng.normal(0, 0.55, n))
    income = np.round(np.exp(log_income), -2).astype(np.int64)
    return pd.DataFrame({
        "age": age, "zip": zipcode, "sex": sex, "race": race,
        "marital-status": np.asarray(MARITAL)[marital],
        "education": np.asarray(EDUCATION)[edu], "occupation": np.asarray(OCCUPATION)[occ],
        "hours-per-week": hours, "income": income,
    })
