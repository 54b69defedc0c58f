"""The ``statistics`` setting: which private statistics the user needs (a subset of keys).

Declared as a constraint of :data:`fa_hetdp.config.rules.FIELDS` so that every entry point
checks it the same way; what the subset does to the releases is
:data:`fa_hetdp.protocol.plan.RELEASE_DEPENDENCIES`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from fa_hetdp.registry import STATISTIC_KEYS

__all__ = ["STATISTICS_SUBSET", "Subset"]


@dataclass(frozen=True)
class Subset:
    """A non-empty list of distinct names, each one of ``values``."""

    values: Sequence[str]  # live: a registered statistic is allowed too

    def accepts_type(self, value: object) -> bool:
        """Whether ``value`` is a list or tuple (its items are checked by :meth:`check`)."""
        return isinstance(value, list | tuple)

    def describe(self) -> str:
        """Return what is allowed."""
        return "a non-empty list of distinct names from " + ", ".join(self.values)

    def check(self, value: Any) -> str | None:
        """Return what is wrong with ``value``, or None."""
        if not isinstance(value, list | tuple) or not value:
            return f"must be {self.describe()}; got {value!r}"
        unknown = [v for v in value if not isinstance(v, str) or v not in self.values]
        if unknown:
            return f"unknown name(s) {unknown!r}; allowed: {', '.join(self.values)}"
        if len(set(value)) != len(value):
            return f"has repeated names {list(value)!r}"
        return None


STATISTICS_SUBSET: Final[Any] = Subset(STATISTIC_KEYS)
"""The constraint of the ``statistics`` setting (keys of the statistics registry).

Typed ``Any`` so that :data:`fa_hetdp.config.rules.FIELDS` takes it without widening that
module's ``Constraint`` union (it has the same three methods as the other constraints)."""
