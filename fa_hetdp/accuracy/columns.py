"""Meta-analysis of data as statisticians hold it: a table with a site column and named columns.

:func:`fa_hetdp.meta_analysis` and :func:`fa_hetdp.private_meta_analysis` take the records as
an ``(N, d)`` array in ``[0, 1]`` with silo ids ``0..n-1`` (the protocol's form), or -- this
module -- as a pandas DataFrame:

- ``site=`` names the site column (any labels; the sites are numbered ``0..n-1`` in the sorted
  order of their labels, kept in :attr:`ColumnMetaAnalysis.site_labels`);
- ``columns=`` the outcome columns (default: every numeric column but the site). A binary
  column (bool; in the exact analysis also numbers all 0 or 1) is a proportion with bounds
  ``(0, 1)``; a categorical or text column becomes one proportion per level, named
  ``"column=level"`` (levels sorted; a pandas ``Categorical`` gives its declared categories,
  text columns the values present -- exact analysis only: in the private one every choice is
  made from the schema, never from the values, so 0/1 numbers need stated bounds and a text
  column declared categories);
- ``bounds=`` ``{column: (low, high)}``, public ranges. The private analysis needs them for
  every numeric column that is not binary, and they must not be taken from the data (a range
  read off the records is itself a release about them); the exact analysis takes the data's
  min and max where none is stated, and says so in its labels. Values outside are clipped into
  the range and counted (:attr:`ColumnMetaAnalysis.clipped`: exact counts, not private).

- ``arm=`` and ``effect=`` (two-arm effects: :mod:`fa_hetdp.protocol.two_arm`): the
  treatment-indicator column (two levels; the treated one stated as ``(column, level)`` or the
  sorted second) and ``"MD"``, ``"SMD"``, ``"OR"``, ``"RR"`` or ``"RD"``; every site's effect
  as metafor's ``escalc``, pooled by DerSimonian-Laird. An MD comes back in the column's units
  (``(high - low) x``), the other measures unit-free. The private analysis protects one record
  replaced *within its arm*, every site's arm sizes public.

The library scales each column to ``[0, 1]`` by ``x = (value - low)/(high - low)``, runs the
analysis of the array form, and returns a :class:`ColumnMetaAnalysis`: every figure back in
the column's own units and named by column -- means ``low + (high - low) x``, ``tau2`` and
variances ``(high - low)^2 x``, ``Q``, ``I^2``, ``H^2`` unchanged; intervals, standard errors and
prediction intervals likewise. The neighbouring relation of the private analysis stays "one
record replaced" with the ranges public: a record in column units maps to one in ``[0, 1]^d``.

The array form without ``bounds`` or ``columns`` returns today's results unchanged
(:class:`~fa_hetdp.stats.meta.MetaAnalysis`, :class:`~fa_hetdp.protocol.meta_server.
PrivateMetaAnalysis`); with ``bounds`` (a ``(d, 2)`` array of public ranges) the array is read
in its own units and the result is a :class:`ColumnMetaAnalysis` too.

pandas is an optional extra: nothing here imports it unless a DataFrame was passed (so pandas
is already imported) or a frame is asked for.

Examples
--------
>>> import pandas as pd
>>> import fa_hetdp
>>> table = pd.DataFrame(
...     {"centre": ["b", "b", "b", "a", "a", "a"], "score": [60.0, 70.0, 80.0, 40.0, 50.0, 45.0]}
... )
>>> res = fa_hetdp.meta_analysis(table, site="centre", bounds={"score": (0, 100)})
>>> res.columns, res.site_labels
(('score',), ('a', 'b'))
>>> round(float(res.pooled_mean[0]), 2), round(float(res.q[0]), 2)
(50.0, 15.0)
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from scipy.stats import chi2

from fa_hetdp._types import FloatArray
from fa_hetdp.errors import InputDataError
from fa_hetdp.protocol.meta_server import PrivateMetaAnalysis
from fa_hetdp.protocol.two_arm import (
    TwoArmMetaAnalysis,
    arm_summaries,
    check_effect,
    exact_two_arm,
    min_arm_size,
)
from fa_hetdp.stats.effect_sizes import BINARY_MEASURES
from fa_hetdp.stats.meta import (
    MetaAnalysis,
    MetaIntervals,
    PredictionInterval,
    SiloEstimates,
    figure_frame,
    summary_frame,
)
from fa_hetdp.stats.meta import meta_analysis as meta_analysis_of_arrays
from fa_hetdp.stats.silo_analyses import (
    NO_SILO_ESTIMATES,
    SummariesMetaAnalysis,
    check_methods,
    leave_one_out,
    subgroup_analysis,
)

__all__ = [
    "BOUNDS_FROM_DATA",
    "CLIPPED_NOTE",
    "ColumnMetaAnalysis",
    "PreparedRecords",
    "as_columns",
    "check_two_arm_columns",
    "figure_units",
    "in_column_units",
    "is_data_frame",
    "meta_analysis",
    "prepare_records",
    "two_arm_summaries",
    "with_methods",
]

MEAN_FIGURES: Final = frozenset({"pooled_mean", "random_effects_mean"})
"""Figures in the data's units: ``low + (high - low) x``."""
VARIANCE_FIGURES: Final = frozenset({"tau2", "tau2_raw"})
"""Figures in the data's squared units: ``(high - low)^2 x``."""

UNIT_KINDS: Final = ("location", "spread", "variance", "free")
"""How a figure of the ``[0, 1]`` scale is read in a column's units (:func:`in_column_units`)."""

BOUNDS_FROM_DATA: Final = "data min/max (exact analysis only)"
"""Where a column's range came from when none was stated (``ColumnMetaAnalysis.bounds_from``)."""

CLIPPED_NOTE: Final = (
    "exact counts of values clipped into the stated bounds: NOT differentially private, for "
    "the data holder only"
)
"""What :attr:`ColumnMetaAnalysis.clipped` is worth."""


_GUARANTEED: Final = (PrivateMetaAnalysis, TwoArmMetaAnalysis, SummariesMetaAnalysis)
"""Results that carry a design and (when private) a guarantee."""


def in_column_units(x: Any, kind: str, low: Any, span: Any) -> FloatArray:
    """Return ``x``, a figure on the ``[0, 1]`` scale, in a column's units (plain arrays).

    The one scaling every reader of the column units uses (:class:`ColumnMetaAnalysis`, the
    Flower run's result file): ``kind`` ``"location"`` (a mean, an interval's end)
    ``low + span x``; ``"spread"`` (a difference, a standard error or deviation) ``span x``;
    ``"variance"`` (``tau2``, a variance) ``span^2 x``; ``"free"`` (``Q``, ``I^2``, ``H^2``)
    ``x`` unchanged. ``low`` and ``span = high - low`` broadcast against ``x`` (``(d,)`` for a
    figure per column). NaN stays NaN.

    Raises
    ------
    ValueError
        ``kind`` is not one of :data:`UNIT_KINDS`.
    """
    values = np.asarray(x, dtype=np.float64)
    if kind == "location":
        return np.asarray(np.asarray(low, dtype=np.float64) + np.asarray(span) * values)
    if kind == "spread":
        return np.asarray(np.asarray(span, dtype=np.float64) * values)
    if kind == "variance":
        return np.asarray(np.asarray(span, dtype=np.float64) ** 2 * values)
    if kind == "free":
        return values
    raise ValueError(f"unknown kind {kind!r}; one of {list(UNIT_KINDS)}")


def figure_units(key: str) -> str:
    """Return how the figure ``key`` of a result is read in units (:func:`in_column_units`).

    :data:`MEAN_FIGURES` ``"location"``, :data:`VARIANCE_FIGURES` ``"variance"``, every other
    figure (``Q``, ``I^2``, ``H^2``...) ``"free"``. A figure's standard error is a
    ``"spread"``, ``tau2``'s a ``"variance"``.
    """
    if key in MEAN_FIGURES:
        return "location"
    if key in VARIANCE_FIGURES:
        return "variance"
    return "free"


def is_data_frame(records: Any) -> bool:
    """Return whether ``records`` is a pandas DataFrame, without importing pandas.

    If pandas is not imported yet, nothing can be a DataFrame.
    """
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(records, pd.DataFrame)


@dataclass(frozen=True)
class PreparedRecords:
    """Records scaled to ``[0, 1]`` with what it takes to read the results in column units.

    Attributes
    ----------
    records : FloatArray
        ``(N, d)`` the scaled records.
    client_ids : numpy.ndarray
        ``(N,)`` silo ids ``0..n-1`` (sites in the sorted order of their labels).
    columns : tuple of str
        The ``d`` columns' names (a categorical column's levels as ``"column=level"``).
    low, high : FloatArray
        ``(d,)`` each column's range.
    site_labels : tuple
        Silo ``i``'s label at position ``i``.
    clipped : dict
        Column -> how many values were clipped into its range (exact, not private).
    bounds_from : dict
        Column -> where its range came from (``"stated"``, ``"binary"``, ``"level"``,
        :data:`BOUNDS_FROM_DATA`).
    site : str or None
        The DataFrame's site column (None for the array form).
    notes : tuple of str
        Labels to add to the result's (ranges taken from the data).
    arms : numpy.ndarray or None
        ``(N,)`` 1 for a treated record, 0 for a control (None without ``arm=``).
    arm : str or None
        The DataFrame's treatment-indicator column (None for the array form or without arms).
    arm_levels : tuple
        ``(treated, control)``: the arm column's two levels (``(1, 0)`` for the array form).
    """

    records: FloatArray
    client_ids: npt.NDArray[np.int64]
    columns: tuple[str, ...]
    low: FloatArray
    high: FloatArray
    site_labels: tuple[Any, ...]
    clipped: dict[str, int]
    bounds_from: dict[str, str]
    site: str | None = None
    notes: tuple[str, ...] = ()
    arms: npt.NDArray[np.int64] | None = None
    arm: str | None = None
    arm_levels: tuple[Any, ...] = ()


def _caller(private: bool) -> str:
    return "private_meta_analysis" if private else "meta_analysis"


def _range(name: str, value: Any) -> tuple[float, float]:
    """``(low, high)`` as floats, finite, ``low < high``; raise naming the column otherwise."""
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError) as exc:
        raise InputDataError(
            f"bounds of {name!r} must be a pair (low, high) of numbers, got {value!r}."
        ) from exc
    if not (math.isfinite(low) and math.isfinite(high)) or low >= high:
        raise InputDataError(
            f"bounds of {name!r} must be finite with low < high, got ({low:g}, {high:g})."
        )
    return low, high


def _sorted_labels(values: Sequence[Any]) -> list[Any]:
    try:
        return sorted(values)
    except TypeError:  # mixed types: by type name, then text
        return sorted(values, key=lambda v: (type(v).__name__, str(v)))


def _clip_and_scale(
    raw: FloatArray, low: FloatArray, high: FloatArray, names: Sequence[str]
) -> tuple[FloatArray, dict[str, int]]:
    below = np.sum(raw < low[None, :], axis=0)
    above = np.sum(raw > high[None, :], axis=0)
    clipped = {name: int(below[j] + above[j]) for j, name in enumerate(names)}
    x = (np.clip(raw, low[None, :], high[None, :]) - low[None, :]) / (high - low)[None, :]
    return np.asarray(np.clip(x, 0.0, 1.0)), clipped


def prepare_records(
    records: Any,
    client_ids: Any = None,
    *,
    site: str | None = None,
    columns: Sequence[str] | None = None,
    bounds: Any = None,
    private: bool = False,
    arm: Any = None,
) -> PreparedRecords | None:
    """Check the records and scale them to ``[0, 1]`` (module docstring).

    Returns None for the array form without ``bounds``, ``columns`` and ``arm`` (today's input,
    passed on as it is). ``arm`` (:func:`_prepare_arms`): a DataFrame's treatment-indicator
    column (its name, or ``(name, treated level)``), or the array form's 0/1 array (1 treated).

    Raises
    ------
    InputDataError
        What was wrong and what is allowed: a DataFrame without ``site`` (or with
        ``client_ids``), an unknown site or column, a column neither numeric nor categorical,
        NaN in a used column (how many rows), fewer than 2 sites or a site with fewer than 2
        records, bounds that are not ``low < high``, bounds for a column not analysed, or (the
        private analysis) a numeric non-binary column without bounds.
    """
    if arm is not None:
        return _prepare_arms(records, client_ids, site, columns, bounds, private, arm)
    if is_data_frame(records):
        return _prepare_frame(records, client_ids, site, columns, bounds, private)
    if site is not None:
        raise InputDataError(
            f"site= names a DataFrame's site column; records is not a DataFrame "
            f"({type(records).__name__}): give client_ids (silo ids 0..n-1) with an array."
        )
    if client_ids is None:
        raise InputDataError(
            f"{_caller(private)} needs client_ids with an (N, d) array (one silo id 0..n-1 per "
            "record), or a pandas DataFrame with site= naming its site column."
        )
    if bounds is None and columns is None:
        return None
    return _prepare_array(records, client_ids, columns, bounds, private)


def _prepare_arms(
    records: Any,
    client_ids: Any,
    site: str | None,
    columns: Sequence[str] | None,
    bounds: Any,
    private: bool,
    arm: Any,
) -> PreparedRecords:
    """Prepare the records and their arms (``arm=``: two-arm effects).

    A DataFrame's ``arm`` names its treatment-indicator column, or is ``(column, treated)``: the
    column must hold exactly two levels (missing values refused); the treated one is ``treated``
    where stated, else the second of the two sorted (``True`` of a bool column, ``1`` of a 0/1
    one, ``"T"`` of ``"C"``/``"T"``). The column is not an outcome (left out of the default
    columns). The levels present are public as the arm sizes are (the private analysis'
    neighbours keep every site's arm sizes). The array form's ``arm`` is an ``(N,)`` array of
    0/1 (or bool), 1 = treated; its records are read as today (in ``[0, 1]``, or in their units
    with ``bounds``).

    Raises
    ------
    InputDataError
        An unknown or misused arm column, not two levels, a treated level that is not one of
        them, an arm array of the wrong length or not 0/1; what :func:`prepare_records` refuses.
    """
    if not is_data_frame(records):
        if isinstance(arm, str) or (
            isinstance(arm, tuple) and len(arm) == 2 and isinstance(arm[0], str)
        ):
            raise InputDataError(
                f"arm={arm!r} names a DataFrame's column; records is not a DataFrame: give the "
                "array form's arms as an array of 0/1 (1 = treated), one per record."
            )
        flags = np.asarray(arm)
        n_records = int(np.shape(records)[0]) if np.ndim(records) >= 1 else -1
        if flags.ndim != 1 or flags.shape[0] != n_records:
            raise InputDataError(
                f"arm must hold one 0/1 value per record ({n_records}), got shape {flags.shape}."
            )
        if flags.dtype.kind == "b":
            flags = flags.astype(np.int64)
        if flags.dtype.kind not in "iuf" or not np.all((flags == 0) | (flags == 1)):
            raise InputDataError("arm must be 0 (control) or 1 (treated) for every record.")
        if bounds is None and columns is None:
            try:
                raw = np.asarray(records, dtype=np.float64)
            except (TypeError, ValueError) as exc:
                raise InputDataError(f"records must be an (N, d) array of numbers: {exc}") from exc
            if raw.ndim == 2 and raw.size and np.all(np.isfinite(raw)):
                if np.any(raw < 0.0) or np.any(raw > 1.0):
                    raise InputDataError(
                        f"records must lie in [0, 1] (found [{raw.min():g}, {raw.max():g}]), or "
                        "give bounds: a (d, 2) array of public ranges to read them in."
                    )
                bounds = np.tile([0.0, 1.0], (raw.shape[1], 1))
        if client_ids is None:
            raise InputDataError(
                f"{_caller(private)} needs client_ids with an (N, d) array (one silo id 0..n-1 "
                "per record)."
            )
        prepared = _prepare_array(records, client_ids, columns, bounds, private)
        arms = np.asarray(flags, dtype=np.int64)
        if arms.min() == arms.max():
            raise InputDataError("arm holds one level only: two arms are needed (0 and 1).")
        return replace(prepared, arms=arms, arm=None, arm_levels=(1, 0))
    pd = sys.modules["pandas"]
    treated: Any = None
    stated = False
    if isinstance(arm, tuple | list) and len(arm) == 2:
        arm, treated = arm
        stated = True
    available = [str(c) for c in records.columns]
    if not isinstance(arm, str) or arm not in records.columns:
        raise InputDataError(
            f"arm must name the DataFrame's treatment-indicator column (or be (column, treated "
            f"level)), got {arm!r}; its columns: {available}."
        )
    if arm == site:
        raise InputDataError(f"the site column {arm!r} cannot also be the arm column.")
    if columns is not None:
        named = [columns] if isinstance(columns, str) else list(columns)
        if arm in named:
            raise InputDataError(f"the arm column {arm!r} cannot also be an outcome column.")
    else:
        named = [
            c
            for c in records.columns
            if c not in (site, arm) and pd.api.types.is_numeric_dtype(records[c].dtype)
        ]
        if not named:
            raise InputDataError(
                f"the DataFrame has no numeric column besides the site {site!r} and the arm "
                f"{arm!r}; name the outcome columns with columns= (its columns: {available})."
            )
    missing = int(records[arm].isna().sum())
    if missing:
        raise InputDataError(
            f"missing values (NaN) in the arm column {arm!r}: {missing} rows; drop them first."
        )
    prepared = _prepare_frame(records, client_ids, site, named, bounds, private)
    values = records[arm].to_numpy(dtype=object)
    levels = _sorted_labels(list(pd.unique(values)))
    if len(levels) != 2:
        raise InputDataError(
            f"the arm column {arm!r} must hold exactly two levels (treated and control), it holds "
            f"{len(levels)}: {levels[:10]}; keep the two arms to compare, e.g. "
            f"frame[frame[{arm!r}].isin([...])]."
        )
    if stated:
        if treated not in levels:
            raise InputDataError(
                f"the treated level {treated!r} is not in the arm column {arm!r}: {levels}."
            )
    else:
        treated = levels[1]
    control = levels[0] if treated == levels[1] else levels[1]
    return replace(
        prepared,
        arms=np.asarray(values == treated, dtype=np.int64),
        arm=str(arm),
        arm_levels=(treated, control),
    )


def _prepare_array(
    records: Any, client_ids: Any, columns: Sequence[str] | None, bounds: Any, private: bool
) -> PreparedRecords:
    try:
        raw = np.asarray(records, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputDataError(f"records must be an (N, d) array of numbers: {exc}") from exc
    if raw.ndim != 2 or raw.shape[0] == 0 or raw.shape[1] == 0:
        raise InputDataError(f"records must be a non-empty (N, d) array, got shape {raw.shape}.")
    d = raw.shape[1]
    names = tuple(f"x{j}" for j in range(d)) if columns is None else tuple(map(str, columns))
    if len(names) != d or len(set(names)) != d:
        raise InputDataError(
            f"columns must name the records' {d} columns once each, got {list(names)}."
        )
    bad = np.flatnonzero(~np.all(np.isfinite(raw), axis=1))
    if bad.size:
        raise InputDataError(
            f"records hold NaN or inf in {bad.size} rows (first: {bad[:5].tolist()}); drop or "
            "fill them first."
        )
    if bounds is None:
        if private:
            raise InputDataError(
                "private_meta_analysis with named columns needs bounds: a (d, 2) array of public "
                "ranges (low, high) per column, not taken from the data."
            )
        low, high = raw.min(axis=0), raw.max(axis=0)
        high = np.where(high > low, high, low + 1.0)
        origin = dict.fromkeys(names, BOUNDS_FROM_DATA)
        notes: tuple[str, ...] = (
            f"bounds of {list(names)} taken from the data's min and max (the exact analysis; "
            "private_meta_analysis needs them stated)",
        )
    else:
        try:
            b = np.asarray(bounds, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InputDataError(f"bounds must be a (d, 2) array of numbers: {exc}") from exc
        if b.shape != (d, 2):
            raise InputDataError(
                f"bounds must be a (d, 2) array, one (low, high) per column (d = {d}), got "
                f"shape {b.shape}."
            )
        for j, name in enumerate(names):
            _range(name, b[j])
        low, high = b[:, 0].copy(), b[:, 1].copy()
        origin = dict.fromkeys(names, "stated")
        notes = ()
    x, clipped = _clip_and_scale(raw, low, high, names)
    ids = np.asarray(client_ids)
    labels: tuple[Any, ...] = ()
    if ids.ndim == 1 and ids.dtype.kind in "iu" and ids.size:
        labels = tuple(range(int(ids.max()) + 1))
    return PreparedRecords(
        records=x,
        client_ids=np.asarray(client_ids),
        columns=names,
        low=np.asarray(low, dtype=np.float64),
        high=np.asarray(high, dtype=np.float64),
        site_labels=labels,
        clipped=clipped,
        bounds_from=origin,
        notes=notes,
    )


def _levels(
    pd: Any, col: Any, name: str, stated: Mapping[str, Any], private: bool = False
) -> list[tuple[str, FloatArray]] | None:
    """Return a categorical or text column as one 0/1 column per level (None: numeric).

    ``private``: only a pandas ``Categorical`` (its declared categories: the schema) is
    accepted; the levels present in a text column are a release about the records (a level one
    record holds appears or not), so such a column is refused with how to declare it.

    Raises
    ------
    InputDataError
        A column that is neither numeric, binary nor categorical, or bounds for a categorical.
    """
    types = pd.api.types
    dtype = col.dtype
    categorical = isinstance(dtype, pd.CategoricalDtype)
    if not categorical and (types.is_numeric_dtype(dtype) or types.is_bool_dtype(dtype)):
        return None
    if not (categorical or types.is_object_dtype(dtype) or types.is_string_dtype(dtype)):
        raise InputDataError(
            f"column {name!r} has dtype {dtype}: not numeric, binary (0/1, bool) or categorical "
            "(text levels); convert it or leave it out of columns."
        )
    if name in stated:
        raise InputDataError(
            f"bounds of {name!r}: a categorical column becomes one proportion per level, each in "
            "(0, 1); it takes no bounds."
        )
    if private and not categorical:
        raise InputDataError(
            f"column {name!r} is text: for private_meta_analysis declare its levels, e.g. "
            f"frame[{name!r}] = pd.Categorical(frame[{name!r}], categories=[...]) (the levels "
            "present in the records are themselves a release about them)."
        )
    values = col.to_numpy(dtype=object)
    # a Categorical's declared categories (the schema), else the values present
    levels = _sorted_labels(list(dtype.categories) if categorical else list(pd.unique(values)))
    return [(f"{name}={level}", np.asarray(values == level, dtype=np.float64)) for level in levels]


def _prepare_frame(
    frame: Any,
    client_ids: Any,
    site: str | None,
    columns: Sequence[str] | None,
    bounds: Any,
    private: bool,
) -> PreparedRecords:
    pd = sys.modules["pandas"]
    types = pd.api.types
    available = [str(c) for c in frame.columns]
    if client_ids is not None:
        raise InputDataError(
            "with a DataFrame, name its site column with site= (client_ids are for the array form)."
        )
    if site is None:
        raise InputDataError(
            f"a DataFrame needs site= naming its site column; its columns: {available}."
        )
    if site not in frame.columns:
        raise InputDataError(f"unknown site column {site!r}; the DataFrame's columns: {available}.")
    stated: dict[str, Any] = {}
    if bounds is not None:
        if not isinstance(bounds, Mapping):
            raise InputDataError(
                f"with a DataFrame, bounds must be a mapping {{column: (low, high)}}, got "
                f"{type(bounds).__name__}."
            )
        stated = {str(k): v for k, v in bounds.items()}
    if columns is None:
        used = [c for c in frame.columns if c != site and types.is_numeric_dtype(frame[c].dtype)]
        if not used:
            raise InputDataError(
                f"the DataFrame has no numeric column besides the site {site!r}; name the "
                f"outcome columns with columns= (its columns: {available})."
            )
    else:
        if isinstance(columns, str):
            columns = [columns]
        used = list(columns)
        unknown = [c for c in used if c not in frame.columns]
        if unknown:
            raise InputDataError(
                f"unknown columns {unknown}; the DataFrame's columns: {available}."
            )
        if site in used:
            raise InputDataError(f"the site column {site!r} cannot also be an outcome column.")
        if len(set(used)) != len(used):
            raise InputDataError(f"columns names a column twice: {used}.")
    # missing values: one error for every used column that has them
    missing = {str(c): int(frame[c].isna().sum()) for c in [site, *used]}
    holes = {c: k for c, k in missing.items() if k}
    if holes:
        rows = int(frame[[site, *used]].isna().any(axis=1).sum())
        said = ", ".join(f"{c!r}: {k}" for c, k in holes.items())
        raise InputDataError(
            f"missing values (NaN) in {rows} rows ({said}); drop or fill them first, e.g. "
            f"frame.dropna(subset={[str(c) for c in [site, *used]]})."
        )
    # every column as one or more (name, values, low, high, origin)
    names: list[str] = []
    blocks: list[FloatArray] = []
    lows: list[float] = []
    highs: list[float] = []
    origin: dict[str, str] = {}
    need: list[str] = []
    from_data: list[str] = []
    for c in used:
        name = str(c)
        levels = _levels(pd, frame[c], name, stated, private)
        if levels is not None:
            for level_name, values in levels:
                names.append(level_name)
                blocks.append(values)
                lows.append(0.0)
                highs.append(1.0)
                origin[level_name] = "level"
            continue
        values = frame[c].to_numpy(dtype=np.float64)
        if name in stated:
            low, high = _range(name, stated[name])
            origin[name] = "stated"
        elif types.is_bool_dtype(frame[c].dtype) or (
            not private and bool(np.all((values == 0.0) | (values == 1.0)))
        ):  # private: a 0/1 column read off the values would make the choice a release
            low, high = 0.0, 1.0
            origin[name] = "binary"
        elif private:
            need.append(name)
            continue
        else:
            low, high = float(values.min()), float(values.max())
            if not high > low:
                high = low + 1.0  # a constant column: its figures are undefined, and labelled
            origin[name] = BOUNDS_FROM_DATA
            from_data.append(name)
        names.append(name)
        blocks.append(values)
        lows.append(low)
        highs.append(high)
    if need:
        raise InputDataError(
            f"private_meta_analysis needs public bounds for every numeric column that is not "
            f"bool: bounds={{column: (low, high)}} is missing {need}. State ranges known "
            "without looking at the records (an instrument's or a protocol's range): bounds "
            "taken from the data are a release about it. A 0/1 column: state (0, 1) or make it "
            "bool; bool and categorical columns need none."
        )
    extra = sorted(set(stated) - {str(c) for c in used})
    if extra:
        raise InputDataError(
            f"bounds name columns that are not analysed: {extra}; the analysed columns: "
            f"{[str(c) for c in used]}."
        )
    raw = np.column_stack(blocks)
    low_a, high_a = np.asarray(lows), np.asarray(highs)
    x, clipped = _clip_and_scale(raw, low_a, high_a, names)
    # sites: labels sorted, numbered 0..n-1
    site_values = frame[site].to_numpy(dtype=object)
    labels = _sorted_labels(list(pd.unique(site_values)))
    ids = np.asarray(pd.Index(labels).get_indexer(site_values), dtype=np.int64)
    if len(labels) < 2:
        raise InputDataError(
            f"a meta-analysis needs at least 2 sites; column {site!r} holds only {labels}."
        )
    counts = np.bincount(ids, minlength=len(labels))
    few = [(labels[i], int(counts[i])) for i in np.flatnonzero(counts < 2)]
    if few:
        said = ", ".join(f"{label!r} has {k}" for label, k in few[:10])
        raise InputDataError(
            f"every site needs at least 2 records (a sample variance): {said}; drop those sites "
            "or merge them."
        )
    notes: tuple[str, ...] = ()
    if from_data:
        notes = (
            f"bounds of {from_data} taken from the data's min and max (the exact analysis; "
            "private_meta_analysis needs them stated)",
        )
    return PreparedRecords(
        records=x,
        client_ids=ids,
        columns=tuple(names),
        low=low_a,
        high=high_a,
        site_labels=tuple(labels),
        clipped=clipped,
        bounds_from=origin,
        site=str(site),
        notes=notes,
    )


@dataclass(frozen=True)
class ColumnMetaAnalysis:
    """A meta-analysis read in the columns' own units, named by column (module docstring).

    ``result`` is the analysis on the ``[0, 1]`` scale the protocol runs on
    (:class:`~fa_hetdp.stats.meta.MetaAnalysis` or
    :class:`~fa_hetdp.protocol.meta_server.PrivateMetaAnalysis`); every figure here is its
    figure mapped back: means ``low + (high - low) x``, ``tau2`` ``(high - low)^2 x``, ``Q`` and
    ``I^2`` as they are. Figures are ``(d,)`` arrays in the order of :attr:`columns`;
    :meth:`column` gives one column's as a dict, :meth:`to_frame` all of them by name.

    Attributes
    ----------
    result : MetaAnalysis or PrivateMetaAnalysis
        The analysis of the scaled records.
    columns : tuple of str
        The columns' names.
    low, high : FloatArray
        ``(d,)`` each column's range (public for the private analysis).
    site_labels : tuple
        Silo ``i``'s label at position ``i`` (sorted labels of the site column).
    clipped : dict
        Column -> values clipped into its range (:data:`CLIPPED_NOTE`: exact, not private).
    bounds_from : dict
        Column -> where its range came from.
    site : str or None
        The site column (None: the array form).
    notes : tuple of str
        Labels of the scaling (ranges taken from the data), after the result's.
    effect : str
        ``"mean"`` (each column's mean) or the two-arm effect (``"MD"``, ``"SMD"``, ``"OR"``,
        ``"RR"``, ``"RD"``; ``result`` a :class:`~fa_hetdp.protocol.two_arm.
        TwoArmMetaAnalysis`): an MD is read in the column's units (``(high - low) x``, no
        offset: a difference), the other measures are unit-free and left as they are.
    arm : str or None
        The treatment-indicator column (two-arm effects of a DataFrame).
    arm_levels : tuple
        ``(treated, control)`` levels of the arm column.
    reduction : tuple of two floats or None
        ``(a, b)`` when ``result`` is the one-summary-per-silo analysis of a two-arm effect (the
        secure sums, :data:`fa_hetdp.protocol.two_arm_sums.REDUCTION`): its location figure
        ``x`` is the effect ``a x + b`` on the ``[0, 1]`` scale, its variance ``a^2 x``, its
        standard error ``a x``; then read in units as above.
    """

    result: MetaAnalysis | PrivateMetaAnalysis | TwoArmMetaAnalysis | SummariesMetaAnalysis
    columns: tuple[str, ...]
    low: FloatArray
    high: FloatArray
    site_labels: tuple[Any, ...]
    clipped: dict[str, int] = field(default_factory=dict)
    bounds_from: dict[str, str] = field(default_factory=dict)
    site: str | None = None
    notes: tuple[str, ...] = ()
    effect: str = "mean"
    arm: str | None = None
    arm_levels: tuple[Any, ...] = ()
    reduction: tuple[float, float] | None = None

    @classmethod
    def of(
        cls,
        result: MetaAnalysis | PrivateMetaAnalysis | TwoArmMetaAnalysis | SummariesMetaAnalysis,
        prepared: PreparedRecords,
    ) -> ColumnMetaAnalysis:
        """Wrap ``result``, the analysis of ``prepared.records``."""
        labels = prepared.site_labels or tuple(range(result.n))
        effect = str(getattr(result, "effect", "mean"))
        two_arm = effect != "mean"
        return cls(
            result=result,
            columns=prepared.columns,
            low=prepared.low,
            high=prepared.high,
            site_labels=labels,
            clipped=dict(prepared.clipped),
            bounds_from=dict(prepared.bounds_from),
            site=prepared.site,
            notes=prepared.notes,
            effect=effect,
            arm=prepared.arm if two_arm else None,
            arm_levels=prepared.arm_levels if two_arm else (),
        )

    # ---------------------------------------------------------------- the scaling
    @property
    def span(self) -> FloatArray:
        """``(d,)`` ``high - low``."""
        return np.asarray(self.high - self.low)

    @property
    def scale(self) -> FloatArray:
        """``(d,)`` the factor of a figure's unit: ``high - low`` (means, MDs) or 1 (unit-free).

        The unit-free effects: SMD, log OR, log RR, RD.
        """
        base = self.span if self.effect in ("mean", "MD") else np.ones(self.span.shape)
        if self.reduction is not None:  # the reduced analysis' unit is 1/a of the effect's
            return np.asarray(self.reduction[0] * base)
        return np.asarray(base)

    def _mean(self, x: Any) -> FloatArray:
        if self.effect != "mean":  # a difference or a unit-free effect: no offset
            out = in_column_units(x, "spread", self.low, self.scale)
            if self.reduction is not None:  # a x + b: the offset b in the effect's units
                a, b = self.reduction
                out = np.asarray(out + b * self.scale / a)
            return out
        return in_column_units(x, "location", self.low, self.span)

    def _variance(self, x: Any) -> FloatArray:
        return in_column_units(x, "variance", self.low, self.scale)

    def _scaled(self, key: str, x: Any) -> Any:
        kind = figure_units(key)
        if kind == "location":
            return self._mean(x)
        if kind == "variance":
            return self._variance(x)
        return x

    # ---------------------------------------------------------------- what ran
    @property
    def private(self) -> bool:
        """Whether the analysis is the private one."""
        if isinstance(self.result, TwoArmMetaAnalysis | SummariesMetaAnalysis):
            return self.result.private
        return isinstance(self.result, PrivateMetaAnalysis)

    @property
    def design(self) -> str:
        """The design that ran (``"exact"`` for the exact analysis)."""
        if isinstance(self.result, _GUARANTEED):
            return self.result.design
        return "exact"

    @property
    def n(self) -> int:
        """The number of sites."""
        return int(self.result.n)

    @property
    def d(self) -> int:
        """The number of columns."""
        return int(self.result.d)

    @property
    def records_per_client(self) -> Any:
        """``(n,)`` every site's record count (public for the private analysis)."""
        return self.result.records_per_client

    @property
    def labels(self) -> tuple[str, ...]:
        """The result's labels, then the scaling's."""
        return (*self.result.labels, *self.notes)

    @property
    def spent(self) -> Any:
        """The privacy spent (None for the exact analysis or a run without noise)."""
        if isinstance(self.result, _GUARANTEED):
            return self.result.spent
        return None

    @property
    def unit_of_privacy(self) -> str:
        """What the guarantee protects (empty for the exact analysis).

        Two-arm effects: one record replaced within its arm, every site's arm sizes public.
        """
        if isinstance(self.result, _GUARANTEED):
            return self.result.unit_of_privacy
        return ""

    @property
    def server_saw(self) -> str:
        """What the server saw (empty for the exact analysis)."""
        if isinstance(self.result, _GUARANTEED):
            return self.result.server_saw
        return ""

    # ---------------------------------------------------------------- the figures
    @property
    def pooled_mean(self) -> FloatArray:
        """``(d,)`` the fixed-effect mean, in the columns' units."""
        return self._mean(self.result.pooled_mean)

    @property
    def random_effects_mean(self) -> FloatArray:
        """``(d,)`` the random-effects mean, in the columns' units."""
        return self._mean(self.result.random_effects_mean)

    @property
    def tau2(self) -> FloatArray:
        """``(d,)`` DerSimonian-Laird ``tau2``, in the columns' squared units."""
        return self._variance(self.result.tau2)

    @property
    def tau2_raw(self) -> FloatArray:
        """``(d,)`` ``tau2`` before truncation at 0, in the columns' squared units."""
        return self._variance(self.result.tau2_raw)

    @property
    def tau(self) -> FloatArray:
        """``(d,)`` ``sqrt(tau2)``, in the columns' units."""
        return np.asarray(np.sqrt(self.tau2))

    @property
    def q(self) -> FloatArray:
        """``(d,)`` Cochran's ``Q`` (unit-free)."""
        return np.asarray(self.result.q)

    @property
    def i2(self) -> FloatArray:
        """``(d,)`` ``I^2`` (unit-free)."""
        return np.asarray(self.result.i2)

    @property
    def i2_total(self) -> float:
        """``I^2`` of the summed ``Q`` (unit-free)."""
        return float(self.result.i2_total)

    @property
    def i2_average(self) -> float:
        """The columns' average ``I^2``."""
        return float(self.result.i2_average)

    @property
    def h2(self) -> FloatArray:
        """``(d,)`` ``H^2 = 1/(1 - I^2)`` (unit-free; the result's)."""
        return np.asarray(self.result.h2)

    @property
    def q_pvalue(self) -> FloatArray:
        """``(d,)`` Cochran's test of ``tau2 = 0``, ``P(chi2_{n-1} >= Q)`` (the result's).

        NaN for the private DerSimonian-Laird result of either design: its noise-corrected
        ``Q`` is not chi-square (:attr:`fa_hetdp.protocol.meta_server.PrivateMetaAnalysis.
        q_pvalue`); a valid p-value where the noise is in the sites' variances (a two-arm
        effect, or a silo-summaries run with ``tau2_method``/``ci_method`` given).
        """
        return np.asarray(self.result.q_pvalue)

    def column(self, name: str) -> dict[str, float]:
        """Return one column's figures by name, in its units (and its range).

        Raises
        ------
        InputDataError
            ``name`` is not one of :attr:`columns`.
        """
        j = self._index(name)
        return {
            "pooled_mean": float(self.pooled_mean[j]),
            "random_effects_mean": float(self.random_effects_mean[j]),
            "tau2": float(self.tau2[j]),
            "tau": float(self.tau[j]),
            "q": float(self.q[j]),
            "i2": float(self.i2[j]),
            "low": float(self.low[j]),
            "high": float(self.high[j]),
        }

    def _index(self, name: str) -> int:
        if name not in self.columns:
            raise InputDataError(f"unknown column {name!r}; the result's columns: {self.columns}.")
        return self.columns.index(name)

    # ---------------------------------------------------------------- inference
    @cached_property
    def standard_errors(self) -> dict[str, FloatArray]:
        """The result's population standard errors in the columns' units.

        Means: ``(high - low) SE``; ``tau2``: ``(high - low)^2 SE``.
        """
        se = self.result.standard_errors
        out = {
            key: in_column_units(value, "spread", self.low, self.scale) for key, value in se.items()
        }
        if "tau2" in se:
            out["tau2"] = self._variance(se["tau2"])
        return out

    def confidence_intervals(
        self, level: float = 0.95, target: str = "population", **options: Any
    ) -> MetaIntervals:
        """Return the result's :meth:`confidence_intervals` in the columns' units.

        ``options``: the private result's ``draws`` and ``seed``.
        """
        ci = self.result.confidence_intervals(level, target, **options)
        return MetaIntervals(
            level=ci.level,
            lower={k: self._scaled(k, v) for k, v in ci.lower.items()},
            upper={k: self._scaled(k, v) for k, v in ci.upper.items()},
            target=ci.target,
            methods=dict(ci.methods),
        )

    def prediction_interval(self, level: float = 0.95) -> PredictionInterval:
        """Where a new site's true mean is expected to lie, in the columns' units."""
        pi = self.result.prediction_interval(level)
        return PredictionInterval(
            level=pi.level, lower=self._mean(pi.lower), upper=self._mean(pi.upper), method=pi.method
        )

    def silo_estimates(self) -> SiloEstimates | None:
        """Return every site's own estimate, in the columns' units.

        None where the server saw only sums (the secure-sums design).
        The exact analysis: each site's mean and ``s^2/m``; the silo-summaries design: the noisy
        means and ``s^2/m`` plus their noise's variance (``result.silo_estimates()``).
        """
        silos = self.result.silo_estimates()
        if silos is None:
            return None
        sq = self.scale**2
        return SiloEstimates(
            effects=self._mean(silos.effects),
            variances=self._variance(silos.variances),
            weights_fixed=np.asarray(silos.weights_fixed / sq),
            weights_random=np.asarray(silos.weights_random / sq),
            method=silos.method,
        )

    # ---------------------------------------------------------------- frames out
    def to_frame(self, level: float = 0.95, target: str = "population", **options: Any) -> Any:
        """Return a DataFrame: one row per figure per column, in the columns' units.

        Index ``(column, figure)``; the layout of
        :meth:`fa_hetdp.stats.meta.MetaAnalysis.to_frame` (:func:`~fa_hetdp.stats.meta.
        figure_frame`), with a ``design`` column for the private analysis. ``attrs`` adds the
        site column, the site labels, the ranges and where they came from, and the clipped
        counts (:data:`CLIPPED_NOTE`).

        Raises
        ------
        ImportError
            pandas is not installed (it is optional: ``pip install pandas``).
        """
        private = self.private
        attrs: dict[str, Any] = {
            "design": self.design,
            "site": self.site,
            "site_labels": list(self.site_labels),
            "bounds": {
                c: (float(lo), float(hi))
                for c, lo, hi in zip(self.columns, self.low, self.high, strict=True)
            },
            "bounds_from": dict(self.bounds_from),
            "clipped": dict(self.clipped),
            "clipped_note": CLIPPED_NOTE,
        }
        if self.effect != "mean":
            attrs.update(
                {"effect": self.effect, "arm": self.arm, "arm_levels": list(self.arm_levels)}
            )
        if isinstance(self.result, PrivateMetaAnalysis) or private:
            spent = self.spent
            attrs.update(
                {
                    "epsilon": None if spent is None else spent.epsilon,
                    "delta": None if spent is None else spent.delta,
                    "unit_of_privacy": self.unit_of_privacy,
                    "adversary": getattr(self.result, "adversary", ""),
                    "server_saw": self.server_saw,
                }
            )
        if isinstance(self.result, TwoArmMetaAnalysis | SummariesMetaAnalysis):
            q_pvalue: Any = self.result.q_pvalue  # the noise is in the variances: a valid test
        else:
            q_pvalue = None if private else chi2.sf(self.q, self.n - 1)
        return figure_frame(
            self,
            self.confidence_intervals(level, target, **options),
            names=self.columns,
            q_pvalue=q_pvalue,
            extra={"design": self.design} if private else None,
            attrs=attrs,
            what="ColumnMetaAnalysis.to_frame",
        )

    def summary(self, column: str | None = None, level: float = 0.95) -> Any:
        """Return statsmodels' ``summary_frame()`` layout, rows named by site, columns' units.

        One row per site where the sites' own estimates exist (:meth:`silo_estimates`), then
        ``"fixed effect"`` and ``"random effect"``; ``column`` one column (index the rows), None
        every column (index ``(column, row)`` when there are several).

        Raises
        ------
        InputDataError
            ``column`` is not one of :attr:`columns`.
        ImportError
            pandas is not installed.
        """
        if column is not None:
            self._index(column)
        return summary_frame(
            self,
            self.silo_estimates(),
            level,
            column=column,
            names=self.columns,
            silo_names=self.site_labels,
            what="ColumnMetaAnalysis.summary",
        )

    # ---------------------------------------------------------------- post-processing
    def _methods(self) -> dict[str, str]:
        return {
            "tau2_method": str(getattr(self.result, "tau2_method", "dl")),
            "ci_method": str(getattr(self.result, "ci_method", "z")),
        }

    def _silos_for(self, what: str) -> SiloEstimates:
        silos = self.silo_estimates()
        if silos is None:
            raise InputDataError(NO_SILO_ESTIMATES.format(what=what) + ".")
        return silos

    def leave_one_out(self, level: float = 0.95) -> Any:
        """Return the analysis without each site in turn, in the columns' units (a DataFrame).

        Index ``(column, left_out)`` (site labels); :func:`~fa_hetdp.stats.silo_analyses.
        leave_one_out` of :meth:`silo_estimates` with the result's ``tau2_method`` and
        ``ci_method`` (DerSimonian-Laird and z by default). Post-processing of what was
        released: no extra privacy budget. On a private silo-summaries result the sites'
        estimates are the noisy released means with the noise in their variances, so the
        full-data analysis behind it is the model with the noise as within-site variance.

        Raises
        ------
        InputDataError
            The secure sums ran (the server holds no per-site estimate); fewer than 3 sites.
        """
        silos = self._silos_for("leave-one-out")
        return leave_one_out(
            silos.effects,
            silos.variances,
            sites=self.site_labels,
            columns=self.columns,
            level=level,
            **self._methods(),
        )

    def subgroups(self, moderator: Any, level: float = 0.95) -> Any:
        """Return per-group pooled effects of a site-level ``moderator`` and their test.

        ``moderator`` maps every site label to its group (a dict or a pandas Series; a public
        site-level attribute). :func:`~fa_hetdp.stats.silo_analyses.subgroup_analysis` of
        :meth:`silo_estimates` in the columns' units: post-processing, no extra privacy budget.

        Raises
        ------
        InputDataError
            The secure sums ran; a site without a group; a group of fewer than 2 sites.
        """
        silos = self._silos_for("a subgroup analysis")
        return subgroup_analysis(
            silos.effects,
            silos.variances,
            moderator,
            sites=self.site_labels,
            columns=self.columns,
            level=level,
            **self._methods(),
        )


def with_methods(result: Any, tau2_method: str, ci_method: str) -> Any:
    """Return ``result`` re-analysed by ``tau2_method``/``ci_method`` from its sites' estimates.

    The defaults (``"dl"``, ``"z"``) return ``result`` itself, unchanged. Otherwise a
    :class:`~fa_hetdp.stats.silo_analyses.SummariesMetaAnalysis` of its
    :meth:`silo_estimates` (the exact means and ``s^2/m``; the silo-summaries design's noisy
    means with ``s^2^/m`` plus the noise's variance; a two-arm result's effects): post-processing
    of what was released, no extra privacy budget.

    Raises
    ------
    InputDataError
        Bad methods; a result without sites' estimates (the secure sums).
    """
    method, interval = check_methods(tau2_method, ci_method)
    if (method, interval) == ("dl", "z"):
        return result
    silos = result.silo_estimates()
    if silos is None:
        raise InputDataError(NO_SILO_ESTIMATES.format(what=f"tau2_method={method!r}") + ".")
    design = str(getattr(result, "design", "exact"))
    return SummariesMetaAnalysis.of(
        silos.effects,
        silos.variances,
        tau2_method=method,
        ci_method=interval,
        design=design,
        base=result,
        labels=tuple(result.labels),
        effect=str(getattr(result, "effect", "mean")),
        records_per_client=result.records_per_client,
    )


def as_columns(
    result: MetaAnalysis | PrivateMetaAnalysis | ColumnMetaAnalysis | SummariesMetaAnalysis,
) -> ColumnMetaAnalysis:
    """Return ``result`` as a :class:`ColumnMetaAnalysis`.

    An array result gets the columns ``x0, x1, ...``, ranges ``(0, 1)`` and sites ``0..n-1``.
    """
    if isinstance(result, ColumnMetaAnalysis):
        return result
    d = int(result.d)
    return ColumnMetaAnalysis(
        result=result,
        columns=tuple(f"x{j}" for j in range(d)),
        low=np.zeros(d),
        high=np.ones(d),
        site_labels=tuple(range(int(result.n))),
        bounds_from=dict.fromkeys((f"x{j}" for j in range(d)), "stated"),
    )


def check_two_arm_columns(prepared: PreparedRecords, effect: str) -> None:
    """Refuse an OR, RR or RD of a column that is not binary (values 0/1, range (0, 1)).

    Raises
    ------
    InputDataError
        The columns that are not binary, and what to use instead.
    """
    if effect not in BINARY_MEASURES:
        return
    x = prepared.records
    bad = [
        name
        for j, name in enumerate(prepared.columns)
        if prepared.low[j] != 0.0
        or prepared.high[j] != 1.0
        or not bool(np.all((x[:, j] == 0.0) | (x[:, j] == 1.0)))
    ]
    if bad:
        raise InputDataError(
            f"effect={effect!r} compares proportions: columns {bad} are not binary (values 0/1 "
            "with the range (0, 1): bool, a categorical's levels, or 0/1 numbers with bounds "
            "(0, 1)); use effect='MD' or 'SMD' for a numeric column."
        )


def two_arm_summaries(prepared: PreparedRecords, effect: str) -> Any:
    """Every site's per-arm summaries of ``prepared`` (sites named by label in a refusal)."""
    if prepared.arms is None:
        raise InputDataError(f"effect={effect!r} compares two arms: arm= is needed.")
    check_two_arm_columns(prepared, effect)
    return arm_summaries(
        prepared.records,
        prepared.client_ids,
        prepared.arms,
        minimum=min_arm_size(effect),
        site_labels=prepared.site_labels or None,
    )


def meta_analysis(
    records: Any,
    client_ids: npt.ArrayLike | None = None,
    *,
    site: str | None = None,
    columns: Sequence[str] | None = None,
    bounds: Any = None,
    arm: Any = None,
    effect: str = "mean",
    tau2_method: str = "dl",
    ci_method: str = "z",
) -> MetaAnalysis | ColumnMetaAnalysis | SummariesMetaAnalysis:
    """Exact inverse-variance meta-analysis (no privacy) of an array or a DataFrame.

    Parameters
    ----------
    records : array_like or pandas.DataFrame
        An ``(N, d)`` array in ``[0, 1]`` with ``client_ids`` (as
        :func:`fa_hetdp.stats.meta.meta_analysis`), or a DataFrame with ``site`` (module
        docstring).
    client_ids : array_like, optional
        The array form's silo ids ``0..n-1`` (required there; not with a DataFrame).
    site : str, optional
        The DataFrame's site column.
    columns : sequence of str, optional
        The outcome columns (default: every numeric column but the site); for the array form,
        the names of its ``d`` columns.
    bounds : mapping or array_like, optional
        ``{column: (low, high)}`` (a DataFrame) or a ``(d, 2)`` array; default here: each
        column's min and max in the data (labelled).
    arm : str, tuple or array_like, optional
        Two-arm effects: the DataFrame's treatment-indicator column, or ``(column, treated
        level)`` (default treated: the second of its two sorted levels); for the array form an
        ``(N,)`` array of 0/1, 1 = treated (:func:`_prepare_arms`).
    effect : {"mean", "MD", "SMD", "OR", "RR", "RD"}
        ``"mean"`` (default): each column's mean per site, pooled. The others, with ``arm``:
        every site's effect and its variance as metafor's ``escalc`` (mean difference, Hedges'
        g; log odds ratio, log risk ratio, risk difference of a binary column), pooled by the
        DerSimonian-Laird analysis of :func:`fa_hetdp.meta_analysis_from_summaries`
        (:mod:`fa_hetdp.protocol.two_arm`).
    tau2_method : {"dl", "pm", "reml"}
        The estimator of ``tau2``: DerSimonian-Laird (default: the result as before),
        Paule-Mandel, REML.
    ci_method : {"z", "hksj"}
        The random-effects interval: normal (default) or Knapp-Hartung. Any other choice than
        ``("dl", "z")`` runs :func:`fa_hetdp.meta_analysis_from_summaries` per column on every
        site's estimate and its sampling variance (``s^2/m``, or the two-arm effect's) and
        returns a :class:`~fa_hetdp.stats.silo_analyses.SummariesMetaAnalysis` (the array form)
        or a :class:`ColumnMetaAnalysis` around one.

    Returns
    -------
    MetaAnalysis or ColumnMetaAnalysis
        The array form without ``bounds``, ``columns`` and ``arm``: :class:`MetaAnalysis` as
        before; otherwise the figures in the columns' units (an MD in the column's units, the
        other effects unit-free).

    Raises
    ------
    InputDataError
        Malformed records, ids, columns, bounds or arms (:func:`prepare_records`); an unknown
        effect, a two-arm effect without ``arm`` (or ``arm`` without one), an OR, RR or RD of a
        column that is not binary, a site with an arm too small (2 records for MD and SMD, 1
        otherwise).
    """
    name = check_effect(effect, arm is not None)
    check_methods(tau2_method, ci_method)
    if name != "mean":
        two = prepare_records(
            records, client_ids, site=site, columns=columns, bounds=bounds, arm=arm
        )
        if two is None:  # pragma: no cover - arm= always prepares
            raise InputDataError("arm= needs the records prepared")
        pooled = exact_two_arm(two_arm_summaries(two, name), name)
        return ColumnMetaAnalysis.of(with_methods(pooled, tau2_method, ci_method), two)
    prepared = prepare_records(records, client_ids, site=site, columns=columns, bounds=bounds)
    if prepared is None:
        exact = meta_analysis_of_arrays(records, client_ids)  # type: ignore[arg-type]
        return with_methods(exact, tau2_method, ci_method)  # type: ignore[no-any-return]
    return ColumnMetaAnalysis.of(
        with_methods(
            meta_analysis_of_arrays(prepared.records, prepared.client_ids),
            tau2_method,
            ci_method,
        ),
        prepared,
    )
