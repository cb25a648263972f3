"""The one-machine backend: a pandas table to exact per-group totals (numpy group codes).

Columns become integer codes (``pandas.factorize``; an integer privacy-unit column in a
compact range is used as is), then :func:`veil.dp.query.bounding.totals` bounds each
unit's contribution and totals every measurement with ``bincount``. The Spark backend runs
the same function on each of its partitions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from veil.dp.query.bounding import Totals, totals
from veil.dp.query.spec import Measurement
from veil.errors import DataError
from veil.random import Generator

__all__ = ["table_totals", "group_codes", "check_columns", "needed_columns"]


def needed_columns(privacy_unit: str, group_by: Sequence[str],
                   measurements: Sequence[Measurement]) -> list[str]:
    """Every column a query reads, each once."""
    cols = [privacy_unit, *group_by, *(m.column for m in measurements if m.column)]
    return list(dict.fromkeys(cols))


def check_columns(available: Sequence[str], privacy_unit: str, group_by: Sequence[str],
                  measurements: Sequence[Measurement]) -> None:
    """DataError naming each column the query needs and the table lacks."""
    roles = {privacy_unit: "privacy unit", **{g: "group key" for g in group_by}}
    missing = [c for c in needed_columns(privacy_unit, group_by, measurements)
               if c not in set(available)]
    if missing:
        names = ", ".join(f"{c!r} ({roles.get(c, 'value')})" for c in missing)
        raise DataError(f"the table has no column {names}; its columns are: "
                        f"{', '.join(map(str, available))}")


def _unit_codes(column: pd.Series) -> np.ndarray:
    values = column.to_numpy()
    if values.dtype.kind in "iu" and values.size:
        lo, hi = int(values.min()), int(values.max())
        if hi - lo < 2 ** 40:
            return values.astype(np.int64) - lo
    return pd.factorize(column, use_na_sentinel=True)[0].astype(np.int64)


def group_codes(frame: pd.DataFrame, group_by: Sequence[str],
                 keys: pd.DataFrame | None) -> tuple[np.ndarray, pd.DataFrame]:
    """Group codes (-1: outside the declared keys) and the key values per code."""
    if not group_by:
        return np.zeros(len(frame), dtype=np.int64), pd.DataFrame({"all": ["all"]})
    if keys is not None:
        index = pd.MultiIndex.from_frame(keys) if len(group_by) > 1 else pd.Index(keys.iloc[:, 0])
        target = pd.MultiIndex.from_frame(frame[list(group_by)]) if len(group_by) > 1 \
            else pd.Index(frame[group_by[0]])
        return index.get_indexer(target).astype(np.int64), keys.reset_index(drop=True)
    if len(group_by) == 1:
        codes, uniques = pd.factorize(frame[group_by[0]], sort=True)
        return codes.astype(np.int64), pd.DataFrame({group_by[0]: uniques})
    codes, uniques = pd.factorize(pd.MultiIndex.from_frame(frame[list(group_by)]), sort=True)
    return codes.astype(np.int64), uniques.to_frame(index=False)


def table_totals(frame: pd.DataFrame, privacy_unit: str, group_by: Sequence[str],
                 keys: pd.DataFrame | None, measurements: Sequence[Measurement], *,
                 max_groups: int, max_rows: int, rng: Generator) -> Totals:
    """Exact per-group totals of a pandas table after contribution bounding.

    Without declared ``keys``, the groups are the keys with a row kept after bounding
    (:mod:`~veil.dp.query.bounding`), as on Spark. Missing values (None/NaN) in the
    privacy unit, a group key or a value column are counted
    (``diagnostics["missing:<column>"]``) and no totals are taken: the release refuses
    them before anything is charged.
    """
    check_columns(list(frame.columns), privacy_unit, group_by, measurements)
    numeric = {m.column for m in measurements if m.column and not (
        m.kind == "histogram" and m.categories is not None)}
    missing = {f"missing:{c}": int(frame[c].isna().sum())
               for c in needed_columns(privacy_unit, group_by, measurements)}
    if any(missing.values()):
        return Totals(0, keys=pd.DataFrame(), diagnostics=missing)
    columns = {}
    for c in {m.column for m in measurements if m.column}:
        if c in numeric:
            try:
                columns[c] = frame[c].to_numpy(dtype=np.float64)
            except (TypeError, ValueError):
                raise DataError(f"column {c!r} is not numeric (dtype {frame[c].dtype}); "
                                "declare categories for a categorical histogram") from None
        else:
            columns[c] = frame[c].to_numpy()
    groups, key_values = group_codes(frame, group_by, keys)
    out = totals(_unit_codes(frame[privacy_unit]), groups, key_values, columns, measurements,
                 public_keys=keys is not None or not group_by, max_groups=max_groups,
                 max_rows=max_rows, rng=rng)
    out.diagnostics.update(missing)
    return out
