"""The table of statistics: one record per private statistic, used everywhere.

Every list of statistics in the project (the engine's columns, the reports, the run's printed
table, the metrics, the result files, the ``summary`` of the results, the releases a plan
makes) is read from :data:`STATISTICS`, a live table: a record added with :func:`register`
appears in all of them. A statistic that post-processes another one by an affine,
non-decreasing map (say Higgins & Thompson's ``H^2 = Q/(n - 1)``) is one record with a
:class:`Derivation`: its exact value, its private estimate, its intervals, its expected error
and its planned error all follow from the source statistic's (:func:`value_of`,
:meth:`Derivation.noise`, :meth:`Derivation.mse`), so it touches this table only. A statistic
with a formula of its own (a new release) adds its exact value in
:mod:`fa_hetdp.stats.exact`, its private formula in :mod:`fa_hetdp.protocol.server` and its
errors in :mod:`fa_hetdp.accuracy`; every derived list raises on a key it does not know,
never skips it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Final, Literal, overload

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]  # as fa_hetdp._types: the registry imports no project module

__all__ = [
    "PAPER_STATISTICS",
    "RELEASES_NEEDED",
    "STATISTICS",
    "STATISTIC_KEYS",
    "Derivation",
    "StatisticSpec",
    "StatisticTable",
    "derive",
    "keys_where",
    "paper_label",
    "register",
    "registered",
    "statistic",
    "value_of",
]

Scale = Literal["mean", "sum", "fraction"]
"""How a statistic is scaled: a per-client mean, a sum over clients, or a fraction in [0, 1]."""


@dataclass(frozen=True)
class Derivation:
    """A statistic that is a post-processing of another one: ``value = transform(source, n)``.

    The map must be affine and non-decreasing in the source, with slope ``slope(n) >= 0``
    (``H^2 = Q/(n - 1)``: ``transform = lambda q, n: q / (n - 1)``, ``slope = 1/(n - 1)``).
    Then everything else follows from the source statistic: the exact value and the private
    estimate (:func:`value_of`), the interval (the image of the source's interval), the noise
    sd and the RMSE (``slope`` times the source's), the expected MSE (``slope^2`` times).

    Attributes
    ----------
    source : str
        Key of the statistic it post-processes (registered before it).
    transform : Callable[[FloatArray, int], FloatArray]
        ``(source values, n) -> values``, elementwise (any shape).
    slope : Callable[[int], float]
        ``d transform / d source`` for ``n`` clients, ``>= 0``.
    """

    source: str
    transform: Callable[[FloatArray, int], FloatArray]
    slope: Callable[[int], float]

    def value(self, source: Any, n: int) -> FloatArray:
        """Return the statistic from the source's values (any shape)."""
        return np.asarray(self.transform(np.asarray(source, dtype=np.float64), n), np.float64)

    def noise(self, source_sd: Any, n: int) -> Any:
        """Return the noise sd (or RMSE) of the statistic from the source's."""
        return self._slope(n) * source_sd

    def mse(self, source_mse: Any, n: int) -> Any:
        """Return the (expected) MSE of the statistic from the source's."""
        return self._slope(n) ** 2 * source_mse

    def _slope(self, n: int) -> float:
        slope = float(self.slope(n))
        if not slope >= 0.0:
            raise ValueError(f"a derived statistic needs a slope >= 0, got {slope!r} at n={n}.")
        return slope


@dataclass(frozen=True)
class StatisticSpec:
    """One private statistic.

    Attributes
    ----------
    key : str
        Identifier used in results, tables and result files (``"dispersion"``).
    label : str
        The paper's notation for the private estimate (``"D''"``).
    name : str
        Words for people (``"dispersion"``).
    release : str
        The noisy release it is computed from (see :data:`fa_hetdp._types.RELEASE_NAMES`).
    post_processing : str
        How the server turns the release into the statistic (the formula, for docs and labels).
    truth : str
        Key of the exact statistic it estimates (``"i2"`` for both I2 estimates).
    scale : {"mean", "sum", "fraction"}
        A per-client mean, a sum over clients, or a fraction in ``[0, 1]``.
    optional : bool
        Released only when its setting is on (``I2'''``: ``extra_i2_noise``).
    paper_name : str or None
        The name the paper's tables give it, when they report it.
    display : str
        Words and notation for printed tables (default ``"<name> <label>"``).
    needs : tuple[str, ...]
        Every release it needs (default: the source's for a derived statistic, else
        ``(release,)``); the plan makes the releases of the statistics asked for.
    derivation : Derivation or None
        For a post-processing of another statistic: how (see :class:`Derivation`).
    """

    key: str
    label: str
    name: str
    release: str
    post_processing: str
    truth: str
    scale: Scale
    optional: bool = False
    paper_name: str | None = None
    display: str = ""
    needs: tuple[str, ...] = ()
    derivation: Derivation | None = None

    def __post_init__(self) -> None:
        if not self.display:
            object.__setattr__(self, "display", f"{self.name} {self.label}")
        if not self.needs and self.derivation is None:
            object.__setattr__(self, "needs", (self.release,))


_BUILT_IN: Final[tuple[StatisticSpec, ...]] = (
    StatisticSpec(
        key="mean",
        label="μ'",
        name="mean",
        release="mean",
        post_processing="mu' = (sum x_i + noise) / n  (Thm 3.3)",
        truth="mean",
        scale="mean",
    ),
    StatisticSpec(
        key="dispersion",
        label="D''",
        name="dispersion",
        release="dispersion",
        post_processing="D'' = (sum (x_i - mu')^2 + noise) / n  (Thm 3.3)",
        truth="dispersion",
        scale="mean",
        paper_name="Dispersion",
        needs=("mean", "dispersion"),  # D'' is centred at the broadcast mu'
    ),
    StatisticSpec(
        key="weighted_mean",
        label="μ̄'",
        name="weighted mean",
        release="weighted",
        post_processing="mu_bar' = clip(A' / max(B', n w_min), 0, 1)  (Lemma 3.7)",
        truth="weighted_mean",
        scale="fraction",
    ),
    StatisticSpec(
        key="q",
        label="Q''",
        name="Cochran's Q",
        display="Cochran's Q''",
        release="q",
        post_processing="Q'' = sum w_i (x_i - mu_bar')^2 + noise  (Thm 3.8)",
        truth="q",
        scale="sum",
        paper_name="Q",
        needs=("weighted", "q"),  # Q'' is centred at the broadcast mu_bar'
    ),
    StatisticSpec(
        key="i2",
        label="I²''",
        name="I²",
        display="I²''",
        release="q",
        post_processing="I2'' = max(0, 1 - (n - 1) / Q'')  (Thm 3.13, post-processing)",
        truth="i2",
        scale="fraction",
        needs=("weighted", "q"),  # post-processing of Q''
    ),
    StatisticSpec(
        key="i2_extra",
        label="I²'''",
        name="I² (extra noise)",
        display="I²''' (extra noise)",
        release="i2_extra",
        post_processing="I2''' = I2'' + N(0, sigma_5^2)  (Thm 3.13 option; no privacy gained)",
        truth="i2",
        scale="fraction",
        optional=True,
        paper_name="I²",
        needs=("weighted", "q", "i2_extra"),  # and extra_i2_noise
    ),
)
"""The project's own statistics, in protocol order: μ', D'', μ̄', Q'', I²'', I²'''."""


class StatisticTable(Sequence[StatisticSpec]):
    """The live table of statistics: records in order, extended by :func:`register`.

    Every module that imported the table sees a record added later.
    """

    def __init__(self, specs: Sequence[StatisticSpec]) -> None:
        self._specs: list[StatisticSpec] = []
        for spec in specs:
            self.add(spec)

    @overload
    def __getitem__(self, index: int) -> StatisticSpec: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[StatisticSpec]: ...
    def __getitem__(self, index: int | slice) -> StatisticSpec | Sequence[StatisticSpec]:
        return self._specs[index]

    def __len__(self) -> int:
        return len(self._specs)

    def __repr__(self) -> str:
        return f"StatisticTable({list(self.keys())!r})"

    def keys(self) -> tuple[str, ...]:
        """Return the keys, in order."""
        return tuple(s.key for s in self._specs)

    def get(self, key: str) -> StatisticSpec:
        """Return the record of ``key`` (KeyError, with the allowed keys, if none)."""
        for spec in self._specs:
            if spec.key == key:
                return spec
        raise KeyError(f"unknown statistic {key!r}; allowed: {self.keys()}")

    def add(self, spec: StatisticSpec) -> StatisticSpec:
        """Append a record: a new key; a derived one's source registered before it."""
        if spec.key in self.keys():
            raise ValueError(f"statistic {spec.key!r} is registered already.")
        if spec.derivation is not None:
            source = self.get(spec.derivation.source)
            if source.derivation is not None or source.optional:
                raise ValueError(
                    f"statistic {spec.key!r}: the source of a derived statistic must be a "
                    f"released, non-optional one, got {source.key!r}."
                )
            if not spec.needs:
                spec = replace(spec, needs=source.needs)
        self._specs.append(spec)
        return spec

    def remove(self, key: str) -> None:
        """Remove the record of ``key`` (and nothing else)."""
        self._specs.remove(self.get(key))


class _Keys(Sequence[str]):
    """The live keys of a table's records that pass ``keep`` (:func:`keys_where`)."""

    def __init__(
        self, table: StatisticTable, keep: Callable[[StatisticSpec], bool] | None = None
    ) -> None:
        self._table = table
        self._keep = keep

    def _keys(self) -> tuple[str, ...]:
        if self._keep is None:
            return self._table.keys()
        return tuple(s.key for s in self._table if self._keep(s))

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return self._keys()[index]

    def __len__(self) -> int:
        return len(self._keys())

    def __repr__(self) -> str:
        return repr(self._keys())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._keys())


class _Needs(Mapping[str, tuple[str, ...]]):
    """The releases each statistic needs, read from the live table."""

    def __init__(self, table: StatisticTable) -> None:
        self._table = table

    def __getitem__(self, key: str) -> tuple[str, ...]:
        return self._table.get(key).needs

    def __iter__(self) -> Iterator[str]:
        return iter(self._table.keys())

    def __len__(self) -> int:
        return len(self._table)


class _Paper(Sequence[StatisticSpec]):
    """The records with a ``paper_name``, read from the live table."""

    def __init__(self, table: StatisticTable) -> None:
        self._table = table

    def _items(self) -> tuple[StatisticSpec, ...]:
        return tuple(s for s in self._table if s.paper_name is not None)

    @overload
    def __getitem__(self, index: int) -> StatisticSpec: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[StatisticSpec]: ...
    def __getitem__(self, index: int | slice) -> StatisticSpec | Sequence[StatisticSpec]:
        return self._items()[index]

    def __len__(self) -> int:
        return len(self._items())


STATISTICS: Final[StatisticTable] = StatisticTable(_BUILT_IN)
"""Every private statistic, in protocol order: μ', D'', μ̄', Q'', I²'', I²''', then the
registered ones (:func:`register`)."""

STATISTIC_KEYS: Final[Sequence[str]] = _Keys(STATISTICS)
"""The keys of :data:`STATISTICS`, in order (live)."""

RELEASES_NEEDED: Final[Mapping[str, tuple[str, ...]]] = _Needs(STATISTICS)
"""The releases each statistic needs (live; :attr:`StatisticSpec.needs`)."""

PAPER_STATISTICS: Final[Sequence[StatisticSpec]] = _Paper(STATISTICS)
"""The paper's three statistics, as the private estimates its tables report (D'', Q'', I²''')."""


def keys_where(keep: Callable[[StatisticSpec], bool]) -> Sequence[str]:
    """Return a live list of the keys whose record passes ``keep``.

    A list derived from the table: a statistic registered later is in it too.
    """
    return _Keys(STATISTICS, keep)


def statistic(key: str) -> StatisticSpec:
    """Return the record of statistic ``key``.

    Raises
    ------
    KeyError
        With the allowed keys, if ``key`` is not a statistic.
    """
    return STATISTICS.get(key)


def paper_label(key: str) -> str:
    """Return the paper's notation of statistic ``key`` (``"Q''"``)."""
    return statistic(key).label


def register(spec: StatisticSpec) -> StatisticSpec:
    """Add a statistic to :data:`STATISTICS` (after the others); return its stored record.

    A derived statistic (:class:`Derivation`) needs nothing else: every layer computes it
    from its source. Raises ValueError for a key already there or a bad source.
    """
    return STATISTICS.add(spec)


@contextmanager
def registered(spec: StatisticSpec) -> Iterator[StatisticSpec]:
    """Register ``spec`` for the duration of a ``with`` block (tests, experiments)."""
    stored = register(spec)
    try:
        yield stored
    finally:
        STATISTICS.remove(stored.key)


def derive(table: dict[str, Any], n: int, how: Literal["value", "noise", "mse"]) -> None:
    """Add every derived statistic whose source is in ``table`` (values, noise sds or MSEs).

    ``how`` says what the table holds: values and interval bounds map through the
    transform (non-decreasing, so bounds stay bounds), noise sds and RMSEs scale by the
    slope, MSEs by its square.
    """
    for spec in STATISTICS:
        d = spec.derivation
        if d is None or d.source not in table:
            continue
        source = table[d.source]
        if how == "value":
            table[spec.key] = d.value(source, n)
        elif how == "noise":
            table[spec.key] = d.noise(source, n)
        else:
            table[spec.key] = d.mse(source, n)


def value_of(obj: object, key: str) -> Any:
    """Return statistic ``key`` of ``obj`` (exact, private, batch), or None if absent.

    A statistic of the project's own is the attribute ``key``; a derived one is computed from
    its source's values and ``obj.n`` (the number of clients).
    """
    spec = statistic(key)
    if spec.derivation is None:
        return getattr(obj, key, None)
    source = value_of(obj, spec.derivation.source)
    if source is None:
        return None
    n: int = obj.n  # type: ignore[attr-defined]  # every result holds its n
    return spec.derivation.value(source, int(n))
