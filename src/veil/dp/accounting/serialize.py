"""Exact, validated JSON form of privacy events (what a persisted Ledger stores).

dp_accounting's events are ``attrs`` classes. An event is written as
``{"type": <class name>, <field>: <value>, ...}``; nested events are objects of the same
form, lists stay lists, numbers stay numbers (Python writes floats with ``repr``, which
reads back to the identical double). Loading accepts only known event classes, exactly
their fields, and parameters that pass :func:`~veil.dp.accounting.events.check_event`;
anything else is a :class:`~veil.errors.DataError` naming the offending part.
"""

from __future__ import annotations

import json
import math
import numbers
from typing import Any

import attr
from dp_accounting import dp_event as de

from veil.dp.accounting.events import ParallelDpEvent, check_event
from veil.dp.accounting.skellam import SkellamDpEvent
from veil.errors import ConfigError, DataError

__all__ = ["event_to_json", "event_from_json", "event_to_dict", "event_from_dict"]

_TYPES: dict[str, type[de.DpEvent]] = {cls.__name__: cls for cls in (
    de.NoOpDpEvent, de.NonPrivateDpEvent, de.GaussianDpEvent, de.LaplaceDpEvent,
    de.DiscreteLaplaceDpEvent, de.RandomizedResponseDpEvent, de.SelfComposedDpEvent,
    de.ComposedDpEvent, de.PoissonSampledDpEvent, de.SampledWithReplacementDpEvent,
    de.SampledWithoutReplacementDpEvent, de.SingleEpochTreeAggregationDpEvent,
    de.RepeatAndSelectDpEvent, de.MixtureOfGaussiansDpEvent, de.ZCDpEvent,
    de.TruncatedSubsampledGaussianDpEvent, ParallelDpEvent, SkellamDpEvent)}


def _encode(value: Any, where: str) -> Any:
    if isinstance(value, de.DpEvent):
        return event_to_dict(value, where)
    if isinstance(value, (list, tuple)):
        return [_encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ConfigError(f"{where}={value!r} is not allowed: must be finite")
        return float(value)
    raise ConfigError(f"{where}={value!r} is not allowed: events hold numbers and events only")


def event_to_dict(event: de.DpEvent, where: str = "event") -> dict[str, Any]:
    """The JSON-ready dict of a (validated) event."""
    name = type(event).__name__
    if _TYPES.get(name) is not type(event):
        raise ConfigError(f"{where}={event!r} is not allowed: {name} is not an event type veil "
                          f"can store (known: {', '.join(sorted(_TYPES))})")
    out: dict[str, Any] = {"type": name}
    for field in attr.fields(type(event)):
        out[field.name] = _encode(getattr(event, field.name), f"{where}.{field.name}")
    return out


def _decode(value: Any, where: str) -> Any:
    if isinstance(value, dict):
        return event_from_dict(value, where)
    if isinstance(value, list):
        return [_decode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    raise DataError(f"{where}={value!r} is not a valid event field: expected a number, a list "
                    "or an event")


def event_from_dict(data: Any, where: str = "event") -> de.DpEvent:
    """Rebuild an event from :func:`event_to_dict`'s output, validating every part."""
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise DataError(f"{where} is not a stored event: expected an object with a 'type'")
    cls = _TYPES.get(data["type"])
    if cls is None:
        raise DataError(f"{where}.type={data['type']!r} is not a known event type "
                        f"(known: {', '.join(sorted(_TYPES))})")
    fields = {f.name: f for f in attr.fields(cls)}
    given = set(data) - {"type"}
    unknown = given - set(fields)
    missing = {n for n, f in fields.items() if f.default is attr.NOTHING} - given
    if unknown or missing:
        raise DataError(f"{where} ({cls.__name__}) has unknown fields {sorted(unknown)} or "
                        f"lacks {sorted(missing)}")
    try:
        event = cls(**{n: _decode(data[n], f"{where}.{n}") for n in given})
        return check_event(event, where)
    except ConfigError as exc:
        raise DataError(f"stored event is invalid: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise DataError(f"{where} ({cls.__name__}) cannot be rebuilt: {exc}") from None


def event_to_json(event: de.DpEvent) -> str:
    """Compact JSON text of an event (validated first)."""
    check_event(event)
    return json.dumps(event_to_dict(event), separators=(",", ":"), allow_nan=False)


def event_from_json(text: str) -> de.DpEvent:
    """The event stored as ``text`` by :func:`event_to_json`."""
    try:
        data = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise DataError(f"stored event is not valid JSON: {exc}") from None
    return event_from_dict(data)
