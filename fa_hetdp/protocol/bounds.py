"""Stage-2 noise scales from the public broadcast (lever c; ``docs/privacy.md``).

With ``x in [0, 1]^d`` and a public ``c in [0, 1]^d``, coordinate ``j`` of a client's stage-2
summand ``(x_j - c_j)^2`` lies in ``[0, b_j]``, ``b_j = max(c_j, 1 - c_j)^2``
(:func:`coordinate_bounds`), ``W b_j`` for ``Q''``. The replace-one sensitivity set is the box
``[-b, b]``; its L2 radius is ``||b||_2`` (:func:`broadcast_bound_norm`).

The plan calibrates sigma for the worst case ``b = 1`` (``Delta_wc = sqrt(d)``, ``W sqrt(d)``)
and multiplies it by a factor per coordinate (:func:`stage2_factor`):

- ``"uniform"``: ``||b||_2 / sqrt(d)`` on every coordinate (the same ``Delta/sigma``);
- ``"per_coordinate"``: ``f_j = sqrt(b_j sum_i b_i / d)``. Gaussian noise with per-coordinate
  ``sigma_j`` on the box is ``mu``-GDP with ``mu^2 = sum_j b_j^2 / sigma_j^2`` (the largest
  Mahalanobis norm of a box is at a corner), and ``sigma_j^2`` proportional to ``b_j``
  minimises ``sum_j sigma_j^2`` at a given ``mu`` (Lagrange). With ``sigma_j = sigma_wc f_j``,
  ``sum_j b_j^2 / sigma_j^2 = d / sigma_wc^2``: the planned ``mu`` exactly, and
  ``f_j <= 1`` (so the worst-case encoding bounds still hold).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray

__all__ = [
    "broadcast_bound_norm",
    "coordinate_bounds",
    "expected_square_factor",
    "shape_factor",
    "stage2_factor",
]


def coordinate_bounds(center: npt.ArrayLike) -> FloatArray:
    """Return ``b = max(c, 1 - c)^2``: per coordinate, ``(x - c)^2 <= b`` for ``x in [0, 1]``."""
    c = np.asarray(center, dtype=np.float64)
    out: FloatArray = np.maximum(c, 1.0 - c) ** 2
    return out


def broadcast_bound_norm(center: npt.ArrayLike) -> FloatArray:
    """Return ``||max(c, 1 - c)^2||_2`` over the last axis (a stage-2 L2 sensitivity).

    It is the replace-one L2 sensitivity of ``sum_i (x_i - c)^2`` for ``x_i in [0, 1]^d`` and
    a public ``c in [0, 1]^d``. Each summand lies in ``[0, b_j]``,
    ``b_j = max(c_j, 1 - c_j)^2``, so replacing one client moves coordinate ``j`` of the sum
    by at most ``b_j`` (``docs/privacy.md``).
    """
    bound = coordinate_bounds(center)
    out: FloatArray = np.sqrt(np.sum(bound * bound, axis=-1))
    return out


def stage2_factor(center: npt.ArrayLike, *, shape: str) -> FloatArray:
    """Per-coordinate ratio of a stage-2 sigma to the planned worst case (shape of ``center``).

    Parameters
    ----------
    center : array_like, shape (..., d)
        The public broadcast ``c`` (``clip(mu', 0, 1)`` or ``mu_bar'``).
    shape : {"uniform", "per_coordinate"}
        ``||b||_2/sqrt(d)`` on every coordinate, or ``sqrt(b_j sum_i b_i / d)``.

    Returns
    -------
    FloatArray, shape (..., d)
        Factors in ``[1/4, 1]``; either shape keeps the release's ``mu`` as planned.
    """
    return shape_factor(coordinate_bounds(center), shape=shape)


def shape_factor(bounds: npt.ArrayLike, *, shape: str) -> FloatArray:
    """Per-coordinate noise factor from per-coordinate bounds ``b`` over their worst case.

    ``b`` in ``(0, 1]`` (shape ``(..., d)``): ``sqrt(mean_i b_i^2)`` on every coordinate
    (``"uniform"``) or ``sqrt(b_j sum_i b_i / d)`` (``"per_coordinate"``); either keeps
    ``mu = Delta_wc / sigma_wc`` for the box ``[-b, b]`` scaled by the worst case (the module
    docstring's argument holds for any box). :func:`stage2_factor` is the client unit's
    ``b = max(c, 1 - c)^2``; the record unit's ``b`` is
    :func:`fa_hetdp.protocol.record_bounds.record_stage2_bounds`.
    """
    b = np.asarray(bounds, dtype=np.float64)
    d = b.shape[-1]
    if shape == "per_coordinate":
        out: FloatArray = np.sqrt(b * np.sum(b, axis=-1, keepdims=True) / d)
        return out
    norm = np.sqrt(np.mean(b * b, axis=-1, keepdims=True))
    uniform: FloatArray = np.broadcast_to(norm, b.shape).copy()
    return uniform


def expected_square_factor(
    first: npt.ArrayLike, second: npt.ArrayLike, *, shape: str
) -> FloatArray:
    """``E[f_j^2]`` per coordinate from the moments of independent per-coordinate bounds.

    Parameters
    ----------
    first, second : array_like, shape (..., d)
        ``E[b_j]`` and ``E[b_j^2]`` of each coordinate's bound (over the broadcast's noise,
        independent across coordinates).
    shape : {"uniform", "per_coordinate"}
        As in :func:`stage2_factor`: ``f_j^2 = mean_i b_i^2`` on every coordinate (uniform),
        or ``f_j^2 = b_j sum_i b_i / d``, whose mean is ``(E[b_j] sum_i E[b_i] + Var b_j)/d``
        (``b_j`` is one of the summands; the others are independent of it).

    Returns
    -------
    FloatArray, shape (..., d)
    """
    m1 = np.asarray(first, dtype=np.float64)
    m2 = np.asarray(second, dtype=np.float64)
    d = m1.shape[-1]
    if shape == "per_coordinate":
        total = np.sum(m1, axis=-1, keepdims=True)
        out: FloatArray = (m1 * total + np.maximum(m2 - m1 * m1, 0.0)) / d
        return out
    uniform: FloatArray = np.broadcast_to(np.mean(m2, axis=-1, keepdims=True), m2.shape).copy()
    return uniform
