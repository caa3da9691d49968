"""Time coordinates as CF and zarr store them, as integer ticks.

A time coordinate is searched as int64 *ticks* of a fixed length in nanoseconds: the
stored numbers of a CF ``"<unit> since <date>"`` coordinate scaled exactly (in integers, so
no date is off by a rounding), or a stored datetime64 array's own counts. A range end — an
ISO string, a numpy datetime64, a Python datetime or date — becomes a tick by exact integer
arithmetic too, rounded inwards so that an end between two ticks keeps the inclusive
meaning. A string end means its whole period, as xarray (through pandas) reads it:
``"2020-12-31"`` as an upper end includes every time of that day, ``"2020-12"`` every time
of that month.

Calendars: ``standard`` / ``gregorian`` (from the Gregorian reform on) and
``proleptic_gregorian``; any other (``noleap``, ``360_day``, ``julian``, ...) is refused by
name, as are ``months since`` / ``years since`` (no fixed length).
"""

from __future__ import annotations

import datetime
import math
import re
from decimal import Decimal
from typing import Any, Mapping

import numpy as np

from .errors import InvalidArgumentError, InvalidTypeError, UnsupportedError

#: Nanoseconds per numpy datetime unit ("Y" and "M" have no fixed length: counted in days).
UNIT_NS: dict[str, int] = {
    "W": 7 * 86_400 * 10**9, "D": 86_400 * 10**9, "h": 3_600 * 10**9, "m": 60 * 10**9,
    "s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1,
}

# CF (udunits) spellings of the time units xarray decodes.
_CF_UNITS: dict[str, str] = {
    **dict.fromkeys(("days", "day", "d"), "D"),
    **dict.fromkeys(("hours", "hour", "hrs", "hr", "h"), "h"),
    **dict.fromkeys(("minutes", "minute", "mins", "min"), "m"),
    **dict.fromkeys(("seconds", "second", "secs", "sec", "s"), "s"),
    **dict.fromkeys(("milliseconds", "millisecond", "msecs", "msec", "ms"), "ms"),
    **dict.fromkeys(("microseconds", "microsecond", "usecs", "usec", "us"), "us"),
    **dict.fromkeys(("nanoseconds", "nanosecond", "nsecs", "nsec", "ns"), "ns"),
}
_CALENDARS = ("standard", "gregorian", "proleptic_gregorian")
_SINCE = re.compile(r"^\s*(\w+)\s+since\s+(.+?)\s*$", re.IGNORECASE)
_DATE = re.compile(
    r"^(\d{1,4})-(\d{1,2})-(\d{1,2})"
    r"(?:[ T](\d{1,2})(?::(\d{1,2})(?::(\d{1,2}(?:\.\d*)?))?)?)?"
    r"\s*(Z|UTC|GMT|[+-]\d{1,2}(?::?\d{2})?)?$", re.IGNORECASE)
_INT64 = (-(2**63) + 1, 2**63 - 1)  # int64's least value is NaT
_GREGORIAN_REFORM_NS = int(np.datetime64("1582-10-15", "D").astype(np.int64)) * UNIT_NS["D"]


def is_cf_time(attrs: Mapping[str, Any]) -> bool:
    """Whether ``attrs`` hold CF time units (``"<unit> since <date>"``)."""
    units = attrs.get("units")
    return isinstance(units, str) and _SINCE.match(units) is not None


def decode(values: np.ndarray, attrs: Mapping[str, Any], where: str) -> tuple[np.ndarray, int]:
    """``(ticks, tick_ns)``: a datetime64 array or a CF time coordinate (``attrs`` its CF
    attributes) as int64 ticks of ``tick_ns`` nanoseconds each. ``where`` names it in errors."""
    if values.dtype.kind == "M":
        return _datetime64_ticks(values, where)
    units = str(attrs["units"])
    calendar = str(attrs.get("calendar", "standard")).lower()
    if calendar not in _CALENDARS:
        raise UnsupportedError(
            f"{where} uses the {calendar!r} calendar: select reads the standard, gregorian and"
            f" proleptic_gregorian calendars only")
    step_name, epoch_text = _SINCE.match(units).groups()  # type: ignore[union-attr]
    step_unit = _CF_UNITS.get(step_name.lower())
    if step_unit is None:
        raise UnsupportedError(
            f"{where} has units {units!r}: {step_name!r} has no fixed length (or is not a CF time"
            f" unit); select reads {', '.join(sorted(set(_CF_UNITS) - {'d', 'h', 's'}))} since a date")
    epoch_ns = _cf_epoch_ns(epoch_text, units, where)
    step_ns = UNIT_NS[step_unit]
    if values.dtype.kind not in "iuf" or values.size == 0:
        raise UnsupportedError(f"{where} has time units {units!r} but holds {values.dtype} values")
    if values.dtype.kind == "f" and not np.isfinite(values).all():
        raise InvalidArgumentError(f"{where} holds missing (NaN) times: a coordinate must hold a value everywhere")
    if values.dtype.kind == "f" and not (np.mod(values, 1) == 0).all():
        # Fractional steps: nanoseconds through float64 (xarray also scales in floats).
        ticks_f = np.round(values.astype(np.float64) * step_ns) + epoch_ns
        if not (_INT64[0] <= ticks_f.min() and ticks_f.max() <= _INT64[1]):
            raise UnsupportedError(f"{where}: its times ({units!r}) lie beyond what int64 nanoseconds hold")
        ticks, tick_ns = ticks_f.astype(np.int64), 1
    else:
        tick_ns = math.gcd(step_ns, epoch_ns)
        lo, hi = int(values.min()), int(values.max())
        scale, base = step_ns // tick_ns, epoch_ns // tick_ns
        if not (_INT64[0] <= lo * scale + base and hi * scale + base <= _INT64[1]):
            raise UnsupportedError(f"{where}: its times ({units!r}) lie beyond what int64 ticks hold")
        ticks = values.astype(np.int64) * np.int64(scale) + np.int64(base)
    if calendar != "proleptic_gregorian" and min(epoch_ns, int(ticks.min()) * tick_ns) < _GREGORIAN_REFORM_NS:
        raise UnsupportedError(
            f"{where} uses the {calendar!r} calendar with dates before 1582-10-15, where it is the Julian"
            f" calendar: select reads such dates only in the proleptic_gregorian calendar")
    return ticks, tick_ns


def _datetime64_ticks(values: np.ndarray, where: str) -> tuple[np.ndarray, int]:
    unit, count = np.datetime_data(values.dtype)
    if unit in ("Y", "M"):  # no fixed length: as days, exactly
        values, unit, count = values.astype("M8[D]"), "D", 1
    if unit not in UNIT_NS:
        raise UnsupportedError(f"{where} holds datetime64[{unit}] values: select reads units from weeks to ns")
    ticks = values.view(np.int64)
    if (ticks == np.iinfo(np.int64).min).any():
        raise InvalidArgumentError(f"{where} holds missing (NaT) times: a coordinate must hold a value everywhere")
    return ticks, UNIT_NS[unit] * int(count)


def _cf_epoch_ns(text: str, units: str, where: str) -> int:
    """The reference date of CF time ``units`` in nanoseconds since 1970 (UTC)."""
    m = _DATE.match(text.strip())
    if m is None:
        raise InvalidArgumentError(f"{where} has units {units!r}, whose reference date {text!r} is not a date")
    year, month, day, hour, minute, second, zone = m.groups()
    try:
        days = int(np.datetime64(f"{int(year):04d}-{int(month):02d}-{int(day):02d}", "D").astype(np.int64))
    except ValueError:
        raise InvalidArgumentError(f"{where} has units {units!r}, whose reference date {text!r} is not a date") from None
    ns = days * UNIT_NS["D"] + int(hour or 0) * UNIT_NS["h"] + int(minute or 0) * UNIT_NS["m"]
    ns += int(Decimal(second or "0") * 10**9)
    if zone and zone.upper() not in ("Z", "UTC", "GMT"):  # local = UTC + offset
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        hours, minutes = (int(digits[:-2]), int(digits[-2:])) if len(digits) > 2 else (int(digits), 0)
        ns -= sign * (hours * UNIT_NS["h"] + minutes * UNIT_NS["m"])
    return ns


def datetime_ns(value: np.datetime64) -> int:
    """A numpy datetime64 in nanoseconds since 1970, exactly (a Python int)."""
    unit, count = np.datetime_data(value.dtype)
    if unit in ("Y", "M"):
        value, unit, count = value.astype("M8[D]"), "D", 1
    if unit not in UNIT_NS:
        raise UnsupportedError(f"a datetime64[{unit}] value: select reads units from weeks to ns")
    return int(value.astype(np.int64)) * UNIT_NS[unit] * int(count)


def bound_ticks(value: Any, tick_ns: int, upper: bool, where: str) -> int:
    """A range end as a tick, rounded inwards: the first tick at or after a lower end, the
    last at or before an upper end. A string end spans its period (see the module doc)."""
    if isinstance(value, str):
        text = value.strip()
        text = text[:-1] if text[-1:] in ("Z", "z") else text
        try:
            parsed = np.datetime64(text)
        except ValueError:
            raise InvalidArgumentError(
                f"{where}: {value!r} is not an ISO 8601 date (e.g. '2020-01-31' or '2020-01-31T06:00')") from None
        if upper:  # the period's end: the last tick before the next period starts
            unit: Any = np.datetime_data(parsed.dtype)[0]
            return -((-datetime_ns(parsed + np.timedelta64(1, unit))) // tick_ns) - 1
        return -((-datetime_ns(parsed)) // tick_ns)
    if hasattr(value, "to_datetime64"):  # a pandas Timestamp: its nanoseconds too
        value = value.to_datetime64()
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        value = np.datetime64(value, "us")
    elif isinstance(value, datetime.date):
        value = np.datetime64(value, "D")
    if not isinstance(value, np.datetime64):
        raise InvalidTypeError(
            f"{where}: the coordinate holds dates, so a range end is a date (an ISO string, a numpy"
            f" datetime64 or a datetime), not {type(value).__name__} {value!r}")
    if np.isnat(value):
        raise InvalidArgumentError(f"{where}: a range end is NaT (not a time)")
    ns = datetime_ns(value)
    return ns // tick_ns if upper else -((-ns) // tick_ns)


def format_tick(tick: int, tick_ns: int) -> str:
    """A tick as an ISO date, in the coarsest unit that divides the tick (so every value of
    one coordinate is written alike)."""
    unit: Any = next(u for u in ("D", "h", "m", "s", "ms", "us", "ns") if tick_ns % UNIT_NS[u] == 0)
    return str(np.datetime64(int(tick) * (tick_ns // UNIT_NS[unit]), unit))


__all__ = ["bound_ticks", "decode", "format_tick", "is_cf_time"]
