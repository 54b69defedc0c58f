"""Inverse-variance meta-analysis of the clients' coordinate means, computed exactly (no noise).

Every client ``i`` holds ``m_i >= 2`` records ``x_ik`` in ``[0, 1]^d``. Per coordinate ``j``
the client's effect is its mean ``theta_ij``, its sampling variance
``v_ij = s2_ij / m_i`` (``s2`` the sample variance, ``ddof = 1``) and its inverse-variance
weight ``w_ij = 1/v_ij``. Across the ``n`` clients, per coordinate:

- fixed effect ``mu_FE = sum w theta / sum w``;
- Cochran's ``Q = sum w (theta - mu_FE)^2`` and ``I^2 = max(0, (Q - (n - 1))/Q)``;
- DerSimonian-Laird ``tau2_raw = (Q - (n - 1))/(sum w - sum w^2/sum w)``,
  ``tau2 = max(0, tau2_raw)``;
- random effects ``mu_RE = sum w* theta / sum w*`` with ``w* = 1/(v + tau2)``.

The scalars: ``i2_total`` is the ``I^2`` of the summed ``Q`` (``Q_tot = sum_j Q_j`` on
``d (n - 1)`` degrees of freedom) and ``i2_average`` the coordinate average of ``I^2``.

These equal statsmodels' ``combine_effects(theta_j, v_j, method_re="dl")`` per coordinate
(``q``, ``tau2`` before truncation, the fixed-effect mean, ``i2`` after truncation at 0), with
one deliberate difference: the random-effects weights use the *truncated* ``tau2`` (the
DerSimonian-Laird estimator as published), where statsmodels puts a negative ``tau2`` into the
weights; where ``tau2_raw >= 0`` the two agree.

A coordinate on which some client's records are constant (``v_ij = 0``; an ``SS`` at or
below the rounding of equal values, ``m (m eps theta)^2``, counts as 0) has no
inverse-variance weight (statsmodels divides by zero there too): every figure of that
coordinate is NaN, and :attr:`MetaAnalysis.labels` names it. The scalars average and sum over
the defined coordinates only.

The private path (:func:`fa_hetdp.private_meta_analysis`) computes the same figures from noisy
sums; :func:`fixed_effect_from_sums` and :func:`dl_from_sums` are the formulas both share.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray
from fa_hetdp.errors import InputDataError
from fa_hetdp.stats.exact import i_squared

__all__ = [
    "ClientSummaries",
    "MetaAnalysis",
    "check_meta_input",
    "client_summaries",
    "dl_from_sums",
    "fixed_effect_from_sums",
    "i2_from_q",
    "meta_analysis",
    "meta_from_effects",
]

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class ClientSummaries:
    """Per-client summaries of the records (what each client computes on its own data).

    Attributes
    ----------
    theta : FloatArray
        ``(n, d)`` coordinate means.
    ss : FloatArray
        ``(n, d)`` sums of squared deviations from the client's own mean.
    m : IntArray
        ``(n,)`` record counts (``>= 2``).
    """

    theta: FloatArray
    ss: FloatArray
    m: IntArray

    @property
    def s2(self) -> FloatArray:
        """``(n, d)`` sample variances (``ddof = 1``)."""
        return self.ss / (self.m[:, None] - 1.0)

    @property
    def v(self) -> FloatArray:
        """``(n, d)`` sampling variances of the means, ``s2/m``."""
        return self.s2 / self.m[:, None]


@dataclass(frozen=True)
class MetaAnalysis:
    """The exact meta-analysis of ``n`` clients on ``d`` coordinates (module docstring).

    Attributes
    ----------
    pooled_mean, q, i2, tau2, random_effects_mean, tau2_raw : FloatArray
        ``(d,)`` per coordinate: fixed-effect mean, Cochran's Q, ``I^2`` (truncated at 0),
        DerSimonian-Laird ``tau2`` (truncated at 0), random-effects mean, ``tau2`` before
        truncation. NaN on an undefined coordinate (a client with ``v = 0``).
    i2_total : float
        ``I^2`` of ``sum_j Q_j`` on ``d (n - 1)`` degrees of freedom (defined coordinates).
    i2_average : float
        Coordinate average of ``i2`` (defined coordinates).
    n, d : int
        Clients and coordinates.
    records_per_client : IntArray
        ``(n,)`` the ``m_i``.
    labels : tuple[str, ...]
        Caveats, e.g. the undefined coordinates.
    """

    pooled_mean: FloatArray
    q: FloatArray
    i2: FloatArray
    tau2: FloatArray
    random_effects_mean: FloatArray
    i2_total: float
    i2_average: float
    n: int
    d: int
    records_per_client: IntArray
    tau2_raw: FloatArray
    labels: tuple[str, ...] = ()


def check_meta_input(
    records: npt.ArrayLike, client_ids: npt.ArrayLike, *, one_hot: bool = False
) -> tuple[FloatArray, IntArray, int]:
    """Validate records and client ids; return them as arrays and ``n``.

    Raises
    ------
    InputDataError
        Records not a finite 2-D float array in ``[0, 1]``; ids not integers of the same
        length, not covering ``0..n-1``; fewer than 2 clients; a client with fewer than 2
        records; with ``one_hot``, a record that is not one-hot.
    """
    try:
        x = np.asarray(records, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputDataError(
            f"records must be an (N, d) array of numbers in [0, 1]: {exc}"
        ) from exc
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise InputDataError(f"records must be a non-empty (N, d) array, got shape {x.shape}.")
    if not np.all(np.isfinite(x)):
        raise InputDataError(
            f"records must be finite; {int(np.sum(~np.isfinite(x)))} values are NaN or inf."
        )
    if np.any(x < 0.0) or np.any(x > 1.0):
        raise InputDataError(
            f"records must lie in [0, 1]; found values in [{x.min():g}, {x.max():g}] "
            "(scale or clip them first)."
        )
    ids_raw = np.asarray(client_ids)
    if ids_raw.ndim != 1 or ids_raw.shape[0] != x.shape[0]:
        raise InputDataError(
            f"client_ids must be a 1-D array with one id per record ({x.shape[0]}), got shape "
            f"{ids_raw.shape}."
        )
    if ids_raw.dtype.kind not in "iu":
        if (
            ids_raw.dtype.kind == "b"
            or not np.all(np.isfinite(ids_raw.astype(float)))
            or np.any(ids_raw.astype(float) != np.round(ids_raw.astype(float)))
        ):
            raise InputDataError(
                f"client_ids must be integers 0..n-1, got dtype {ids_raw.dtype} with "
                "non-integer values."
            )
    ids = ids_raw.astype(np.int64)
    if ids.min() < 0:
        raise InputDataError(f"client_ids must be integers 0..n-1, got {int(ids.min())}.")
    n = int(ids.max()) + 1
    counts = np.bincount(ids, minlength=n)
    missing = np.flatnonzero(counts == 0)
    if missing.size:
        raise InputDataError(
            f"client_ids must cover every id 0..n-1 (n = {n}); missing: "
            f"{missing[:10].tolist()}{' ...' if missing.size > 10 else ''}."
        )
    if n < 2:
        raise InputDataError("a meta-analysis needs at least 2 clients, got n = 1.")
    few = np.flatnonzero(counts < 2)
    if few.size:
        raise InputDataError(
            f"every client needs at least 2 records (a sample variance); clients "
            f"{few[:10].tolist()} have {counts[few[:10]].tolist()}."
        )
    if one_hot and not (np.all((x == 0.0) | (x == 1.0)) and np.all(x.sum(axis=1) == 1.0)):
        raise InputDataError(
            "one_hot=True needs every record to be one-hot (a single 1, zeros elsewhere)."
        )
    return x, ids, n


def client_summaries(records: FloatArray, client_ids: IntArray, n: int) -> ClientSummaries:
    """Per-client means, sums of squared deviations and counts (validated input)."""
    d = records.shape[1]
    m = np.bincount(client_ids, minlength=n).astype(np.int64)
    sums = np.zeros((n, d))
    np.add.at(sums, client_ids, records)
    theta = sums / m[:, None]
    dev = records - theta[client_ids]
    ss = np.zeros((n, d))
    np.add.at(ss, client_ids, dev * dev)
    # a client whose records are all equal (a) leaves SS of rounding only: its summed mean is
    # off by at most (m - 1) u |a| (u = eps/2, sequential summation), so SS <= m (m u a)^2;
    # at or below m (m eps theta)^2 (four times that) SS is rounding, not spread: set to 0
    eps = np.finfo(np.float64).eps
    rounding = m[:, None] * (m[:, None] * eps * theta) ** 2
    ss = np.where(ss <= rounding, 0.0, ss)
    return ClientSummaries(theta=theta, ss=ss, m=m)


def i2_from_q(q: npt.ArrayLike, n: int, d: int = 1) -> FloatArray:
    """:func:`~fa_hetdp.stats.exact.i_squared` (``df = (n - 1) d``), where NaN stays NaN.

    A meta-analysis coordinate without inverse-variance weights has no Q; its I^2 is
    undefined, not 0.
    """
    qa = np.asarray(q, dtype=np.float64)
    out: FloatArray = np.where(np.isnan(qa), np.nan, i_squared(qa, n, d))
    return out


def fixed_effect_from_sums(
    a: npt.ArrayLike, b: npt.ArrayLike, c: npt.ArrayLike, centre: npt.ArrayLike
) -> tuple[FloatArray, FloatArray]:
    """Fixed-effect mean and Q from centred sums: ``mu = centre + B/C``, ``Q = A - B^2/C``.

    ``A = sum w (theta - centre)^2``, ``B = sum w (theta - centre)``, ``C = sum w``; exact for
    any ``centre``.
    """
    aa, bb, cc = (np.asarray(v, dtype=np.float64) for v in (a, b, c))
    return np.asarray(centre, dtype=np.float64) + bb / cc, aa - bb * bb / cc


def dl_from_sums(q: npt.ArrayLike, c: npt.ArrayLike, d2: npt.ArrayLike, n: int) -> FloatArray:
    """DerSimonian-Laird ``tau2`` before truncation: ``(Q - (n - 1))/(C - D/C)``.

    ``C = sum w``, ``D = sum w^2``.
    """
    qa, cc, dd = (np.asarray(v, dtype=np.float64) for v in (q, c, d2))
    return (qa - (n - 1)) / (cc - dd / cc)


def meta_from_effects(
    theta: FloatArray, v: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """Per coordinate from ``(n, d)`` effects and variances: FE mean, Q, I^2, tau2, tau2_raw, RE.

    Coordinates where some ``v <= 0`` (or is not finite) come out NaN.
    """
    n = theta.shape[0]
    ok = np.all(np.isfinite(v) & (v > 0.0), axis=0)
    vs = np.where(ok[None, :], v, 1.0)
    w = 1.0 / vs
    sw = w.sum(axis=0)
    mu = (w * theta).sum(axis=0) / sw
    q = (w * (theta - mu) ** 2).sum(axis=0)
    tau2_raw = dl_from_sums(q, sw, (w * w).sum(axis=0), n)
    tau2 = np.maximum(tau2_raw, 0.0)
    ws = 1.0 / (vs + tau2)
    re = (ws * theta).sum(axis=0) / ws.sum(axis=0)
    i2 = i2_from_q(q, n)
    nan = np.where(ok, 0.0, np.nan)
    return mu + nan, q + nan, i2 + nan, tau2 + nan, tau2_raw + nan, re + nan


def _scalars(q: FloatArray, i2: FloatArray, n: int) -> tuple[float, float]:
    """``i2_total`` (summed Q) and ``i2_average`` over the defined coordinates."""
    ok = np.isfinite(q)
    if not ok.any():
        return float("nan"), float("nan")
    total = float(i2_from_q(np.sum(q[ok]), n, int(ok.sum())))
    return total, float(np.mean(i2[ok]))


def undefined_label(undefined: npt.NDArray[np.bool_]) -> tuple[str, ...]:
    """Return the label naming the coordinates without weights (empty if none)."""
    idx = np.flatnonzero(undefined)
    if not idx.size:
        return ()
    return (
        f"coordinates {idx[:20].tolist()}{' ...' if idx.size > 20 else ''} undefined (NaN): "
        "some client's records are constant there (zero variance, no inverse-variance weight)",
    )


def meta_analysis(records: npt.ArrayLike, client_ids: npt.ArrayLike) -> MetaAnalysis:
    """Exact inverse-variance meta-analysis of the clients' coordinate means (no privacy).

    Parameters
    ----------
    records : array_like
        ``(N, d)`` records, finite, in ``[0, 1]``.
    client_ids : array_like
        ``(N,)`` integer ids ``0..n-1``; every id present, each with at least 2 records.

    Returns
    -------
    MetaAnalysis
        The figures of the module docstring (NaN on a coordinate where some client's records
        are constant; its label says which).

    Raises
    ------
    InputDataError
        For malformed input (:func:`check_meta_input`).

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[0.0], [1.0], [0.0], [0.5]])
    >>> res = meta_analysis(x, [0, 0, 1, 1])
    >>> round(float(res.pooled_mean[0]), 4), round(float(res.q[0]), 4)
    (0.3, 0.2)
    """
    x, ids, n = check_meta_input(records, client_ids)
    summ = client_summaries(x, ids, n)
    fe, q, i2, tau2, tau2_raw, re = meta_from_effects(summ.theta, summ.v)
    total, average = _scalars(q, i2, n)
    return MetaAnalysis(
        pooled_mean=fe,
        q=q,
        i2=i2,
        tau2=tau2,
        random_effects_mean=re,
        i2_total=total,
        i2_average=average,
        n=n,
        d=x.shape[1],
        records_per_client=summ.m,
        tau2_raw=tau2_raw,
        labels=undefined_label(~np.isfinite(q)),
    )
