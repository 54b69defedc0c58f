"""Record-level sensitivities of the paper's protocol (``privacy_unit = "record"``).

Neighbouring federations differ in one record of one client (replace-one); every client holds
at least ``m = min_records`` records in ``[0, 1]^d`` and sends the mean ``x_i`` of its records
(or another average of per-record values in ``[0, 1]``: ``docs/summaries.md``). Replacing one
record moves ``x_i`` by at most ``1/m`` per coordinate and no other client's vector. Each
function below bounds one release's change per coordinate (a box); a release's L2 sensitivity
is the norm of its box. The proofs are in ``docs/privacy.md``, section "Unit of privacy"
(one paragraph per function, named after it); ``tests/test_privacy_unit.py`` checks each bound
against random record replacements by brute force.

The stage-0 floor histogram keeps its client-level sensitivity ``sqrt(2)``: one record can move
``s_i^2`` across a bucket edge, which moves one count from one bucket to another.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray

__all__ = [
    "dispersion_record_bound",
    "mean_record_bound",
    "q_record_bound",
    "record_sensitivities",
    "record_stage2_bounds",
    "weight_change_bound",
    "weighted_record_bound",
]

_MAX_WITHIN_STD = 0.5
"""Largest within-vector standard deviation of a vector in ``[0, 1]^d`` (``s^2 <= 1/4``)."""


def mean_record_bound(min_records: int) -> float:
    """Per-coordinate change of ``x_i`` when one record is replaced: ``1/m``.

    ``docs/privacy.md``, "Unit of privacy", *mean*.
    """
    return 1.0 / min_records


def weight_change_bound(variance_floor: float, min_records: int) -> float:
    """Largest change of ``w_i = 1/max(s_i^2, v)`` when one record is replaced.

    ``W - 1/s_hi^2`` with ``s_hi = min(sqrt(v) + 1/m, 1/2)`` (at least ``sqrt(v)``): the
    within-vector standard deviation moves by at most ``1/m``, and ``w`` as a function of it is
    flat below ``sqrt(v)`` and convex decreasing above, so its largest drop over an interval of
    length ``1/m`` starts at ``sqrt(v)``. ``docs/privacy.md``, "Unit of privacy", *weights*.
    """
    root = math.sqrt(variance_floor)
    high = max(root, min(root + 1.0 / min_records, _MAX_WITHIN_STD))
    return 1.0 / variance_floor - 1.0 / high**2


def weighted_record_bound(variance_floor: float, min_records: int) -> tuple[float, float]:
    """Per-coordinate change of ``(w_i x_i, w_i)``: ``(min(W/m + dw, W), dw)``.

    ``w' x' - w x = w' (x' - x) + (w' - w) x`` with ``w' <= W``, ``|x' - x| <= 1/m``,
    ``x <= 1``; both values lie in ``[0, W]``. ``dw``: :func:`weight_change_bound`.
    ``docs/privacy.md``, "Unit of privacy", *weighted*.
    """
    big = 1.0 / variance_floor
    dw = weight_change_bound(variance_floor, min_records)
    return min(big / min_records + dw, big), dw


def dispersion_record_bound(center: npt.ArrayLike, min_records: int) -> FloatArray:
    """Per-coordinate change of ``(x_i - c)^2``: ``(2a - 1/m)/m``, ``a = max(c, 1 - c)``.

    ``(x' - c)^2 - (x - c)^2 = (x' - x)(x' + x - 2c)``; with ``|x' - x| = t <= 1/m`` and both
    in ``[0, 1]`` the largest value is ``t (2a - t)``, increasing in ``t`` for ``t <= a``
    (``a >= 1/2 >= 1/m``). It never exceeds the client-level ``a^2`` (``(a - 1/m)^2 >= 0``).
    ``docs/privacy.md``, "Unit of privacy", *dispersion*.
    """
    c = np.asarray(center, dtype=np.float64)
    a = np.maximum(c, 1.0 - c)
    inv = 1.0 / min_records
    out: FloatArray = (2.0 * a - inv) * inv
    return out


def q_record_bound(center: npt.ArrayLike, variance_floor: float, min_records: int) -> FloatArray:
    """Per-coordinate change of ``w_i (x_i - c)^2``: ``min(W e + dw a^2, W a^2)``.

    ``w' (x' - c)^2 - w (x - c)^2 = w' [(x' - c)^2 - (x - c)^2] + (w' - w)(x - c)^2``;
    ``e`` is :func:`dispersion_record_bound`, ``dw`` :func:`weight_change_bound`, and both
    summands lie in ``[0, W a^2]``. ``docs/privacy.md``, "Unit of privacy", *q*.
    """
    c = np.asarray(center, dtype=np.float64)
    a2 = np.maximum(c, 1.0 - c) ** 2
    big = 1.0 / variance_floor
    dw = weight_change_bound(variance_floor, min_records)
    e = dispersion_record_bound(c, min_records)
    out: FloatArray = np.minimum(big * e + dw * a2, big * a2)
    return out


def record_stage2_bounds(
    center: npt.ArrayLike, release: str, *, variance_floor: float, min_records: int
) -> FloatArray:
    """Return a stage-2 release's per-coordinate bound at ``center`` over its worst case.

    In ``(0, 1]``; :func:`fa_hetdp.protocol.bounds.shape_factor` turns it into the noise
    factor of each coordinate exactly as for the client unit (lever c).
    """
    if release == "dispersion":
        bound, worst = dispersion_record_bound(center, min_records), 2.0 - 1.0 / min_records
        return bound / (worst / min_records)
    if release == "q":
        bound = q_record_bound(center, variance_floor, min_records)
        out: FloatArray = bound / float(q_record_bound(0.0, variance_floor, min_records))
        return out
    raise ValueError(f"unknown stage-2 release {release!r}; allowed: dispersion, q")


def record_sensitivities(d: int, *, variance_floor: float, min_records: int) -> dict[str, float]:
    """Record-level L2 sensitivities of the four counted releases (stage 2: worst-case ``c``).

    ``mean`` ``sqrt(d)/m``; ``weighted`` ``sqrt(d b^2 + dw^2)`` (:func:`weighted_record_bound`);
    ``dispersion`` ``sqrt(d) (2 - 1/m)/m``; ``q`` ``sqrt(d) min(W (2 - 1/m)/m + dw, W)``.
    """
    per, dw = weighted_record_bound(variance_floor, min_records)
    root = math.sqrt(d)
    return {
        "mean": root * mean_record_bound(min_records),
        "weighted": math.sqrt(d * per * per + dw * dw),
        "dispersion": root * float(dispersion_record_bound(0.0, min_records)),
        "q": root * float(q_record_bound(0.0, variance_floor, min_records)),
    }
