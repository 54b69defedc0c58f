"""The constraints a setting's value must meet, and :class:`Field` (one setting's).

:class:`Real`, :class:`Integer`, :class:`Options` and :class:`Boolean` each check one value.

Split out of :mod:`fa_hetdp.config.rules` so that the table of declared settings
(:mod:`fa_hetdp.config.settings`) and the validator both read them without an import cycle;
:mod:`fa_hetdp.config.rules` re-exports every name.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Boolean", "Constraint", "Field", "Integer", "Options", "Real", "type_name"]


def type_name(value: object) -> str:
    """Return the TOML-ish type name of ``value`` for messages."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, numbers.Integral):
        return "integer"
    if isinstance(value, numbers.Real):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "table"
    return type(value).__name__


def _is_bool(value: object) -> bool:
    return isinstance(value, bool) or type(value).__name__ == "bool_"


# --------------------------------------------------------------------------------------------
# Constraints on one value
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Real:
    """A finite real number (int or float, not bool) in an interval."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def accepts_type(self, value: object) -> bool:
        """Whether ``value`` has this constraint's type (numpy numbers included)."""
        return isinstance(value, numbers.Real) and not _is_bool(value)

    def describe(self) -> str:
        """Return what is allowed, e.g. ``in (0.0, 1.0]``."""
        if self.low is not None and self.high is not None:
            lo, hi = float(self.low), float(self.high)
            return f"in {'(' if self.low_open else '['}{lo}, {hi}{')' if self.high_open else ']'}"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {self.low}"
        if self.high is not None:
            return f"{'<' if self.high_open else '<='} {self.high}"
        return "a number"

    def check(self, value: Any) -> str | None:
        """Return what is wrong with ``value``, or None."""
        if not self.accepts_type(value):
            return f"must be a number, got {type_name(value)} {value!r}"
        if not math.isfinite(value):
            return f"must be finite, got {value}"
        low, high = self.low, self.high
        bad_low = low is not None and (value <= low if self.low_open else value < low)
        bad_high = high is not None and (value >= high if self.high_open else value > high)
        if bad_low or bad_high:
            return f"must be {self.describe()}, got {value}"
        return None


@dataclass(frozen=True)
class Integer:
    """An integer (not bool) in ``minimum .. maximum``."""

    minimum: int | None = None
    maximum: int | None = None

    def accepts_type(self, value: object) -> bool:
        """Whether ``value`` has this constraint's type (numpy integers included)."""
        return isinstance(value, numbers.Integral) and not _is_bool(value)

    def describe(self) -> str:
        """Return what is allowed, e.g. ``an integer >= 1``."""
        lo = "" if self.minimum is None else f">= {self.minimum}"
        hi = "" if self.maximum is None else f"<= {self.maximum}"
        return "an integer " + " and ".join(s for s in (lo, hi) if s)

    def check(self, value: Any) -> str | None:
        """Return what is wrong with ``value``, or None."""
        if not self.accepts_type(value):
            return f"must be an integer, got {type_name(value)} {value!r}"
        lo = "" if self.minimum is None else f">= {self.minimum}"
        hi = "" if self.maximum is None else f"<= {self.maximum}"
        if (self.minimum is not None and value < self.minimum) or (
            self.maximum is not None and value > self.maximum
        ):
            return f"must be {' and '.join(s for s in (lo, hi) if s)}, got {value}"
        return None


@dataclass(frozen=True)
class Options:
    """One of a set of names: a fixed tuple, or a registry's names read at each check."""

    source: tuple[str, ...] | Callable[[], tuple[str, ...]]

    @property
    def values(self) -> tuple[str, ...]:
        """Return the allowed names now (a registry's are read at each call)."""
        return self.source() if callable(self.source) else self.source

    def accepts_type(self, value: object) -> bool:
        """Whether ``value`` has this constraint's type."""
        return isinstance(value, str)

    def describe(self) -> str:
        """Return what is allowed."""
        return "one of " + ", ".join(self.values)

    def check(self, value: Any) -> str | None:
        """Return what is wrong with ``value``, or None."""
        if not isinstance(value, str):
            return f"must be a string, one of {', '.join(self.values)}; got {value!r}"
        if value not in self.values:
            return f"unknown value {value!r}; allowed: {', '.join(self.values)}"
        return None


@dataclass(frozen=True)
class Boolean:
    """``True`` or ``False``."""

    def accepts_type(self, value: object) -> bool:
        """Whether ``value`` has this constraint's type."""
        return isinstance(value, bool)

    def describe(self) -> str:
        """Return what is allowed."""
        return "true or false"

    def check(self, value: Any) -> str | None:
        """Return what is wrong with ``value``, or None."""
        return None if isinstance(value, bool) else f"must be true or false, got {value!r}"


Constraint = Real | Integer | Options | Boolean


@dataclass(frozen=True)
class Field:
    """The constraints of one setting: a value must meet the first one whose type it has.

    Parameters
    ----------
    constraints
        Alternatives, tried in order by type (``threshold``: an integer count or a fraction).
    optional
        ``None`` is allowed (and means "not set": e.g. ``min_honest_clients = n``).
    wrong_type
        Message when the value has none of the types (default: the first constraint's).
    """

    constraints: tuple[Constraint, ...]
    optional: bool = False
    wrong_type: str | None = None
