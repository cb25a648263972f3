"""Plain JSON values from numpy-laden results (one helper for the CLI, runs and reports)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np


def canonical(value: Any) -> bytes:
    """``value``'s canonical JSON (keys sorted, no spaces) as UTF-8: equal values, equal
    bytes, so a digest of it names a plan whatever the order it was written in."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def to_jsonable(value: Any) -> Any:
    """Mappings, sequences, numpy arrays and scalars as plain JSON types.

    Non-finite floats (an unbounded epsilon, a NaN loss) become the strings ``"inf"``,
    ``"-inf"`` and ``"nan"``: JSON has no literal for them.
    """
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist())
    if isinstance(value, np.generic):
        return to_jsonable(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
