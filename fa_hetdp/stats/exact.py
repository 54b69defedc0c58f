"""The heterogeneity statistics of Section 2.1, computed exactly (no noise).

Every statistic is per coordinate (a ``d``-vector); :meth:`TrueStatistics.summary` gives the
coordinate averages that reports print.

Input policy (docs/design.md, data model): client data are an ``(n, d)`` array of floats,
``n >= 2``, ``d >= 1``. Non-finite values (NaN, +-inf) are rejected with
:class:`~fa_hetdp.errors.InputDataError`. Finite values outside ``[0, 1]`` are clipped into
``[0, 1]`` -- the clipping a client does before it contributes -- and the number of clipped
values is returned and reported, never silently dropped.

Departures from the paper (each listed in docs/design.md):

- weights are ``w_i = 1 / max(s_i^2, v_min)``: the paper's ``1/s_i^2`` is unbounded, so no
  finite noise can make the weighted stages private;
- the weighted mean (Def. 2.5) has no stray ``1/n`` in the numerator, so ``s_i^2 = const``
  gives ``mu_bar = mu`` as the paper's own remark requires;
- ``Q`` is a sum (Cochran's Q), not the average of Def. 2.8, because Def. 3.12 needs the sum.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray
from fa_hetdp.errors import InputDataError
from fa_hetdp.registry import STATISTICS, value_of

__all__ = [
    "MAX_WITHIN_VARIANCE",
    "TrueStatistics",
    "check_variance_floor",
    "client_weights",
    "i_squared",
    "statistics_of_validated",
    "true_statistics",
    "validate_client_vector",
    "validate_clients",
    "within_variance",
]

MAX_WITHIN_VARIANCE = 0.25
"""Largest possible within-vector variance of a vector in ``[0, 1]^d`` (ddof 0)."""


def check_variance_floor(variance_floor: float) -> float:
    """Validate the variance floor ``v_min`` and return it as a float.

    Parameters
    ----------
    variance_floor : float
        ``v_min`` in ``(0, 1/4]``. Larger values would give every client the same weight
        (``s_i^2 <= 1/4`` always), which is allowed by nothing in the design.

    Returns
    -------
    float
        The validated floor.

    Raises
    ------
    PrivacyParameterError
        If the floor is not a finite number in ``(0, 0.25]`` (it fixes the sensitivity
        ``W = 1/v_min`` of the weighted releases, hence a privacy parameter).
    """
    from fa_hetdp.config.rules import check  # the declared rule (one copy)

    check("variance_floor", {"variance_floor": variance_floor}, {})
    value = float(variance_floor)
    return value


def validate_clients(x: npt.ArrayLike) -> tuple[FloatArray, int]:
    """Check client data and clip it into ``[0, 1]``.

    Parameters
    ----------
    x : array_like, shape (n, d)
        One row per client (``x_i`` in the paper), real numbers.

    Returns
    -------
    x_clipped : FloatArray, shape (n, d)
        A float64 array with every value in ``[0, 1]``: a clipped copy when something was
        clipped, otherwise possibly ``x`` itself (treat it as read-only).
    n_clipped : int
        How many values were outside ``[0, 1]`` and were clipped (the client clips
        and reports the count).

    Raises
    ------
    InputDataError
        If ``x`` is not numeric, is not two-dimensional, has ``n < 2`` rows or ``d < 1``
        columns, or holds NaN or infinite values.
    """
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as exc:
        raise InputDataError(f"client data must be a numeric (n, d) array: {exc}") from exc
    if arr.dtype.kind not in "biuf":
        raise InputDataError(
            f"client data must be real numbers, got dtype {arr.dtype}; "
            "convert to float (n, d) with values in [0, 1]."
        )
    if arr.ndim != 2:
        raise InputDataError(
            f"client data must have shape (n, d) with n >= 2 clients and d >= 1 coordinates, "
            f"got an array with shape {arr.shape} (ndim={arr.ndim})."
        )
    n, d = arr.shape
    if n < 2:
        raise InputDataError(f"need n >= 2 clients (one row each), got shape {arr.shape} (n={n}).")
    if d < 1:
        raise InputDataError(f"need d >= 1 coordinates, got shape {arr.shape} (d={d}).")
    values = np.ascontiguousarray(arr, dtype=np.float64)
    low, high = float(values.min()), float(values.max())  # NaN propagates; +-inf shows
    if 0.0 <= low and high <= 1.0:
        return values, 0  # fast path: nothing to clip, no copy (callers never write to it)
    finite = np.isfinite(values)
    if not finite.all():
        bad = int(values.size - np.count_nonzero(finite))
        row, col = (int(i[0]) for i in np.nonzero(~finite))
        raise InputDataError(
            f"client data must be finite; found {bad} NaN/inf value(s), first at "
            f"[{row}, {col}] = {values[row, col]!r}. Allowed: finite values (clipped into [0, 1])."
        )
    outside = (values < 0.0) | (values > 1.0)
    n_clipped = int(np.count_nonzero(outside))
    return np.clip(values, 0.0, 1.0), n_clipped


def validate_client_vector(x_i: npt.ArrayLike) -> tuple[FloatArray, int]:
    """Check one client's vector and clip it into ``[0, 1]`` (the client-side check).

    Parameters
    ----------
    x_i : array_like, shape (d,)
        One client's vector, real numbers, ``d >= 1``.

    Returns
    -------
    x_clipped : FloatArray, shape (d,)
        A new float64 vector with every value in ``[0, 1]``.
    n_clipped : int
        How many values were outside ``[0, 1]``.

    Raises
    ------
    InputDataError
        If ``x_i`` is not a non-empty one-dimensional real vector or holds NaN/inf.
    """
    arr = np.asarray(x_i)
    if arr.ndim != 1:
        raise InputDataError(
            f"a client vector must have shape (d,) with d >= 1, got shape {arr.shape} "
            f"(ndim={arr.ndim})."
        )
    values, n_clipped = validate_clients(np.stack([arr, arr]))
    return values[0].copy(), n_clipped // 2


def within_variance(x: FloatArray) -> FloatArray:
    """Within-vector variance ``s_i^2`` of every client (Def. 2.5; ddof 0 over coordinates).

    Parameters
    ----------
    x : FloatArray, shape (n, d)
        Validated client data in ``[0, 1]`` (see :func:`validate_clients`).

    Returns
    -------
    FloatArray, shape (n,)
        ``s_i^2 = (1/d) sum_j (x_ij - xbar_i)^2``, in ``[0, 1/4]``.
    """
    n, d = x.shape
    out = np.empty(n)
    chunks, buffer = _row_chunks(n, d)
    for sl in chunks:
        block, work = x[sl], buffer[: sl.stop - sl.start]
        np.subtract(block, block.mean(axis=1, keepdims=True), out=work)
        np.square(work, out=work)
        # Def. 2.5: s_i^2 = (1/d) sum_j (x_ij - xbar_i)^2 (ddof 0); two-pass for accuracy.
        out[sl] = work.sum(axis=1) / d
    return out


WORK_CHUNK_VALUES: Final = 1 << 20
"""Values per row chunk of the work buffer of :func:`within_variance` and
:func:`statistics_of_validated` (8 MiB of float64): the peak memory beyond the data is
``O(chunk)``, not a second ``(n, d)`` copy."""


def _row_chunks(n: int, d: int) -> tuple[list[slice], FloatArray]:
    """Row slices of at most :data:`WORK_CHUNK_VALUES` values and one work buffer for them."""
    rows = max(1, WORK_CHUNK_VALUES // max(d, 1))
    chunks = [slice(start, min(start + rows, n)) for start in range(0, n, rows)]
    return chunks, np.empty((min(rows, n), d))


def client_weights(x: FloatArray, *, variance_floor: float) -> tuple[FloatArray, int]:
    """Inverse-variance weights with a floor (Def. 2.5, bounded: the weighted stages need it).

    Parameters
    ----------
    x : FloatArray, shape (n, d)
        Validated client data in ``[0, 1]``.
    variance_floor : float
        ``v_min`` in ``(0, 1/4]``; weights are at most ``W = 1/v_min``.

    Returns
    -------
    weights : FloatArray, shape (n,)
        ``w_i = 1 / max(s_i^2, v_min)``, in ``[4, W]``.
    n_at_floor : int
        Number of clients with ``s_i^2 <= v_min`` (whose weight is ``W``).

    Notes
    -----
    The paper's ``w_i = 1/s_i^2`` is unbounded (a constant vector has infinite weight), so its
    weighted stages cannot be made private; the floor bounds the sensitivity by ``W``.
    """
    floor = check_variance_floor(variance_floor)
    s2 = within_variance(x)
    at_floor = s2 <= floor
    weights = 1.0 / np.maximum(s2, floor)  # Def. 2.5: w_i = 1/s_i^2, floored (v_min)
    return weights, int(np.count_nonzero(at_floor))


def i_squared(q: npt.ArrayLike, n: int, d: int = 1) -> FloatArray:
    """``I^2 = max(0, 1 - (n-1) d/Q)`` elementwise (Def. 3.12): the one I^2 of the project.

    Every I^2 (exact, private, batch, intervals, expected errors, planner, reports) is this
    function; ``d > 1`` gives the I^2 of a Q summed over ``d`` coordinates (``i2_total``).

    Parameters
    ----------
    q : array_like
        Cochran's Q (a sum), any shape; may be noisy and non-positive.
    n : int
        Number of clients.
    d : int, default 1
        Coordinates summed in ``q`` (1: one coordinate's Q).

    Returns
    -------
    FloatArray
        ``I^2`` in ``[0, 1)``; 0 wherever ``Q <= (n - 1) d`` (including ``Q <= 0``, where the
        formula is undefined -- the paper's convention "if Q < n-1 assume Q = n-1").
    """
    values = np.asarray(q, dtype=np.float64)
    null = (n - 1) * d
    above = values > null
    safe = np.where(above, values, 1.0)
    out: FloatArray = np.where(above, 1.0 - null / safe, 0.0)  # Def. 3.12
    return out


@dataclass(frozen=True)
class TrueStatistics:
    """The exact statistics of one round (no privacy).

    Attributes
    ----------
    mean : FloatArray, shape (d,)
        ``mu = (1/n) sum x_i`` (Def. 2.4).
    dispersion : FloatArray, shape (d,)
        ``D = (1/n) sum (x_i - mu)^2`` (Def. 2.6-2.7, p = 2).
    weighted_mean : FloatArray, shape (d,)
        ``mu_bar = sum w_i x_i / sum w_i`` (Def. 2.5 without the stray 1/n).
    q : FloatArray, shape (d,)
        Cochran's ``Q = sum w_i (x_i - mu_bar)^2`` (a sum; Def. 3.12).
    i2 : FloatArray, shape (d,)
        ``I^2 = max(0, 1 - (n-1)/Q)`` (Def. 3.12).
    weights : FloatArray, shape (n,)
        ``w_i = 1/max(s_i^2, v_min)``.
    n_at_floor : int
        Clients whose weight is the maximum ``W`` (variance at or below the floor).
    n_clipped : int
        Values clipped into ``[0, 1]`` on input.
    n, d : int
        Number of clients and coordinates.
    variance_floor : float
        ``v_min`` used for the weights.
    """

    mean: FloatArray
    dispersion: FloatArray
    weighted_mean: FloatArray
    q: FloatArray
    i2: FloatArray
    weights: FloatArray
    n_at_floor: int
    n_clipped: int
    n: int
    d: int
    variance_floor: float

    @property
    def weight_sum(self) -> float:
        """``B = sum w_i`` (the denominator of the weighted mean)."""
        return float(np.sum(self.weights))

    def summary(self) -> dict[str, float]:
        """Coordinate averages of every statistic, plus the counts.

        Returns
        -------
        dict[str, float]
            Keys ``mean, dispersion, weighted_mean, q, i2`` (coordinate means) and
            ``n, d, n_at_floor, n_clipped``.
        """
        return {
            **coordinate_averages(self),
            "n": float(self.n),
            "d": float(self.d),
            "n_at_floor": float(self.n_at_floor),
            "n_clipped": float(self.n_clipped),
        }


def true_statistics(x: npt.ArrayLike, *, variance_floor: float = 0.01) -> TrueStatistics:
    """Compute the exact heterogeneity statistics of Section 2.1 and Def. 3.12.

    Parameters
    ----------
    x : array_like, shape (n, d)
        Client data; validated and clipped into ``[0, 1]`` by :func:`validate_clients`.
    variance_floor : float, default 0.01
        ``v_min`` in ``(0, 1/4]`` for the weights ``w_i = 1/max(s_i^2, v_min)``.

    Returns
    -------
    TrueStatistics
        Mean, dispersion, weighted mean, Q and I^2 per coordinate, with the weights and
        the counts of floored weights and clipped values.

    Raises
    ------
    InputDataError
        For bad client data (see :func:`validate_clients`).
    PrivacyParameterError
        For a variance floor outside ``(0, 1/4]``.
    """
    values, n_clipped = validate_clients(x)
    return statistics_of_validated(values, n_clipped=n_clipped, variance_floor=variance_floor)


def statistics_of_validated(
    values: FloatArray, *, n_clipped: int = 0, variance_floor: float = 0.01
) -> TrueStatistics:
    """:func:`true_statistics` of data already checked by :func:`validate_clients`.

    Parameters
    ----------
    values : FloatArray, shape (n, d)
        Output of :func:`validate_clients` (not checked again, to save a pass over the data).
    n_clipped : int, default 0
        The clipped-value count that :func:`validate_clients` returned.
    variance_floor : float, default 0.01
        ``v_min`` in ``(0, 1/4]``.

    Returns
    -------
    TrueStatistics
        As :func:`true_statistics`.
    """
    n, d = values.shape
    floor = check_variance_floor(variance_floor)
    # Row chunks (WORK_CHUNK_VALUES values) share one work buffer: no (n, d) copy of the data.
    s2 = within_variance(values)  # Def. 2.5: s_i^2 (ddof 0)
    weights = 1.0 / np.maximum(s2, floor)  # Def. 2.5, floored (v_min)
    n_at_floor = int(np.count_nonzero(s2 <= floor))
    mean = values.sum(axis=0) / n  # Def. 2.4: mu = (1/n) sum x_i
    b = float(weights.sum())
    # einsum, not BLAS gemv: the threaded gemv is ~20x slower on 2 busy cores (benchmarked).
    weighted_mean = np.einsum("i,ij->j", weights, values) / b  # Def. 2.5 without the 1/n
    spread = np.zeros(d)
    q = np.zeros(d)
    chunks, buffer = _row_chunks(n, d)
    for sl in chunks:
        block, work = values[sl], buffer[: sl.stop - sl.start]
        np.subtract(block, mean, out=work)
        np.square(work, out=work)
        spread += work.sum(axis=0)
        np.subtract(block, weighted_mean, out=work)
        np.square(work, out=work)
        q += np.einsum("i,ij->j", weights[sl], work)  # Def. 3.12: Q = sum w_i (x_i - mu_bar)^2
    del buffer
    dispersion = spread / n  # Def. 2.6-2.7 (p = 2): (1/n) sum (x_i - mu)^2
    return TrueStatistics(
        mean=mean,
        dispersion=dispersion,
        weighted_mean=np.clip(weighted_mean, 0.0, 1.0),
        q=q,
        i2=i_squared(q, n),  # Def. 3.12
        weights=weights,
        n_at_floor=n_at_floor,
        n_clipped=n_clipped,
        n=n,
        d=d,
        variance_floor=float(variance_floor),
    )


def coordinate_averages(stats: object) -> dict[str, float]:
    """Means over all axes of every statistic of :data:`~fa_hetdp.registry.STATISTICS`.

    ``stats`` is anything with the statistics as attributes (true, private, batched, or their
    errors); an optional statistic (``i2_extra``) that is missing or None is left out. Keys in
    the table's order; shared by the ``summary`` methods and the TMSE.
    """
    out: dict[str, float] = {}
    for spec in STATISTICS:
        values = value_of(stats, spec.key)
        if values is None:
            if spec.optional:
                continue
            raise InputDataError(f"{type(stats).__name__} has no statistic {spec.key!r}.")
        out[spec.key] = float(np.mean(values))
    return out
