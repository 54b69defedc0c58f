"""The adaptive variance floor: a private low quantile of the within-vector variances.

Issue 9, lever (d); the privacy argument is in ``docs/privacy.md``. Before stage 1, one
extra secure summation (stage 0) releases a noisy histogram of the clients' within-vector
variances ``s_i^2`` over a public grid of candidate floors (:func:`floor_edges`, geometric
from the user's ``v_min`` up to ``1/4``): each client contributes the one-hot vector of its
bucket plus its noise share (replace-one L2 sensitivity ``sqrt(2)``), and the release
``"floor"`` takes the share :data:`FLOOR_BUDGET_SHARE` of the run's budget, composed with the
other releases under the run's composition. The server picks the floor from the noisy
histogram (:func:`choose_floor`, a conservative quantile rule); the floor is then public and
the plan of stages 1 and 2 uses ``W = 1/floor``. Clients whose ``s_i^2`` is at or above the
floor keep their weight ``1/s_i^2``; the number floored is reported from the noisy histogram
only (never an exact count).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.dp.lattice import Lattice
from fa_hetdp.dp.mechanisms import NoiseMechanism
from fa_hetdp.errors import InputDataError, PrivacyParameterError
from fa_hetdp.stats.exact import MAX_WITHIN_VARIANCE, within_variance

__all__ = [
    "FLOOR_BUDGET_SHARE",
    "FLOOR_EDGES",
    "FLOOR_MARGIN_Z",
    "FLOOR_RELEASE",
    "FLOOR_SENSITIVITY",
    "FloorChoice",
    "check_floor",
    "choose_floor",
    "floor_buckets",
    "floor_contribution",
    "floor_edges",
    "floored_count_estimate",
    "histogram_of",
    "uses_adaptive_floor",
]

FLOOR_RELEASE: Final = "floor"
"""Budget name of the histogram release."""

FLOOR_EDGES: Final = 16
"""Candidate floors: 16 geometric edges from ``v_min`` to ``1/4`` (17 buckets). With
``v_min = 0.01`` neighbouring edges are 24 % apart."""

FLOOR_BUDGET_SHARE: Final = 0.05
"""Share of the run's budget taken by the histogram: of ``mu^2`` under gdp, of
``(epsilon, delta)`` under basic composition. The other releases split the rest."""

FLOOR_SENSITIVITY: Final = math.sqrt(2.0)
"""Replace-one L2 sensitivity of a sum of one-hot vectors (one 1 leaves, one 1 arrives)."""

FLOOR_MARGIN_Z: Final = 1.645
"""One-sided normal quantile of the rule's margin (95 %): the floor is kept where the noisy
count below it plus 1.645 of its standard deviations stays within ``quantile * n``."""


def floor_edges(variance_floor: float) -> FloatArray:
    """Return the public candidate floors: :data:`FLOOR_EDGES` geometric edges in ``[v_min, 1/4]``.

    The first edge is ``v_min`` itself (the floor never goes below the user's ``v_min``);
    with ``v_min = 1/4`` there is one edge.
    """
    if not 0.0 < variance_floor <= MAX_WITHIN_VARIANCE:
        raise InputDataError(
            f"variance_floor must be in (0, 1/4], got variance_floor={variance_floor!r}."
        )
    if variance_floor == MAX_WITHIN_VARIANCE:
        return np.array([MAX_WITHIN_VARIANCE])
    out: FloatArray = np.geomspace(variance_floor, MAX_WITHIN_VARIANCE, FLOOR_EDGES)
    return out


def floor_buckets(within: npt.ArrayLike, edges: FloatArray) -> npt.NDArray[np.intp]:
    """Bucket of each within-vector variance: 0 below ``edges[0]``, ``k`` in ``[e_{k-1}, e_k)``.

    There are ``len(edges) + 1`` buckets; the last holds ``s^2 >= edges[-1]``.
    """
    out: npt.NDArray[np.intp] = np.searchsorted(edges, np.asarray(within), side="right")
    return out


def histogram_of(x: FloatArray, edges: FloatArray) -> FloatArray:
    """Noiseless histogram ``sum_i onehot(bucket(s_i^2))`` of validated data ``(n, d)``."""
    counts = np.bincount(floor_buckets(within_variance(x), edges), minlength=len(edges) + 1)
    return np.asarray(counts, dtype=np.float64)


def floor_contribution(
    x: FloatArray,
    edges: FloatArray,
    share_std: float,
    *,
    mechanism: NoiseMechanism,
    rng: np.random.Generator,
    lattice: Lattice | None = None,
) -> FloatArray:
    """One client's stage-0 vector: the one-hot bucket of its ``s_i^2`` plus its noise share.

    Parameters
    ----------
    x : FloatArray, shape (d,)
        The client's validated vector in ``[0, 1]``.
    edges : FloatArray
        :func:`floor_edges` of the run's ``v_min``.
    share_std : float
        Scale of the client's noise share (``sigma_0/sqrt(t)``; 0 for central placement).
    mechanism : NoiseMechanism
        The plan's mechanism (the noise is drawn through it).
    rng : numpy.random.Generator
        Source of the noise share.
    lattice : Lattice, optional
        A ``ddg``/``skellam`` run's stage-0 lattice
        (:func:`fa_hetdp.protocol.client.stage_lattice` at stage 0): the share goes on it,
        ``gamma (R(onehot/gamma) + Z)`` (integers in the ring, like stages 1 and 2).
    """
    onehot = np.zeros(len(edges) + 1)
    onehot[floor_buckets(within_variance(x[np.newaxis, :]), edges)[0]] = 1.0
    if share_std > 0.0:
        scale = np.full(onehot.shape, share_std)
        onehot = mechanism.add_share(onehot, scale, rng=rng, lattice=lattice)
    return onehot


def floored_count_estimate(
    noisy_hist: FloatArray, *, n: int, sigma: float
) -> tuple[FloatArray, FloatArray]:
    """Estimated clients below each edge, and its standard deviation (shape ``(..., K)``).

    ``C_k = sum_{b <= k} h_b`` is the count of clients with ``s^2 < e_k``. With independent
    noise of scale ``sigma`` per bucket and the public total ``n``, the best linear unbiased
    estimate is ``S_k + (k + 1)/B (n - S_total)`` (``S`` the noisy sums, ``B`` buckets), with
    variance ``sigma^2 (k + 1)(B - k - 1)/B`` -- far below the ``sigma^2 (k + 1)`` of the
    plain cumulative sum when many low buckets are empty.
    """
    h = np.asarray(noisy_hist, dtype=np.float64)
    buckets = h.shape[-1]
    cum = np.cumsum(h, axis=-1)[..., :-1]
    k1 = np.arange(1, buckets, dtype=np.float64)  # k + 1
    est = cum + (k1 / buckets) * (n - h.sum(axis=-1, keepdims=True))
    sd = sigma * np.sqrt(k1 * (buckets - k1) / buckets)
    return est, np.broadcast_to(sd, est.shape)


@dataclass(frozen=True)
class FloorChoice:
    """The floor chosen from the noisy histogram (all public: post-processing of a release).

    Attributes
    ----------
    floor : FloatArray or float
        The chosen ``v_floor`` (an edge of the grid), shape ``(...)``.
    index : numpy.ndarray of int
        Its edge index.
    floored : FloatArray
        Noisy estimate (clipped into ``[0, n]``) of the clients with ``s_i^2`` below it.
    floored_std : FloatArray
        Standard deviation of that estimate (from the planned noise).
    noisy_histogram : FloatArray, shape (..., K + 1)
        The released histogram.
    edges : FloatArray
        The public grid.
    sigma : float
        Planned noise scale per bucket.
    quantile : float
        The rule's ``q``.
    """

    floor: FloatArray
    index: npt.NDArray[np.intp]
    floored: FloatArray
    floored_std: FloatArray
    noisy_histogram: FloatArray
    edges: FloatArray
    sigma: float
    quantile: float

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready description of one choice (no leading axis)."""
        return {
            "floor": float(self.floor),
            "max_weight": 1.0 / float(self.floor),
            "edge_index": int(self.index),
            "clients_floored_noisy": float(self.floored),
            "clients_floored_std": float(self.floored_std),
            "quantile": self.quantile,
            "rule": (
                f"largest grid edge e_k whose noisy count of clients below it plus "
                f"{FLOOR_MARGIN_Z} std is <= quantile * n (else v_min)"
            ),
            "noisy_histogram": [float(v) for v in np.ravel(self.noisy_histogram)],
            "edges": [float(v) for v in self.edges],
            "sigma": self.sigma,
            "label": "private: from the noisy histogram (release 'floor'); no exact count",
        }


def choose_floor(
    noisy_hist: npt.ArrayLike, *, n: int, edges: FloatArray, sigma: float, quantile: float
) -> FloorChoice:
    """Pick the floor from the noisy histogram (server side; post-processing).

    Rule (conservative): the largest edge ``e_k`` whose noisy count of clients below it
    (:func:`floored_count_estimate`) plus ``FLOOR_MARGIN_Z`` of its standard deviations is at
    most ``quantile * n``; ``edges[0] = v_min`` when no edge qualifies. For an edge whose
    true count exceeds ``quantile * n`` the test passes with probability at most 5 %, and
    only for the edges just above the quantile is that bound near: the floor sits below the
    ``quantile`` of the ``s_i^2`` with high probability, so at most about ``quantile * n``
    clients lose weight (on digits, 3 % at ``quantile = 0.1``); those above the floor are
    unaffected. (Requiring every lower edge to pass too was measured to be far more
    conservative than needed: the noisy counts of the empty low buckets stopped the scan.)
    Vectorised over leading axes.
    """
    h = np.asarray(noisy_hist, dtype=np.float64)
    if h.shape[-1] != len(edges) + 1:
        raise InputDataError(
            f"noisy histogram must have {len(edges) + 1} buckets, got shape {h.shape}."
        )
    est, sd = floored_count_estimate(h, n=n, sigma=sigma)
    ok = est + FLOOR_MARGIN_Z * sd <= quantile * n
    last = ok.shape[-1] - 1 - np.argmax(ok[..., ::-1], axis=-1)  # largest passing edge
    index = np.where(ok.any(axis=-1), last, 0).astype(np.intp)
    floored = np.take_along_axis(est, index[..., None], axis=-1)[..., 0]
    floored_std = np.take_along_axis(sd, index[..., None], axis=-1)[..., 0]
    return FloorChoice(
        floor=np.asarray(edges[index], dtype=np.float64),
        index=index,
        floored=np.clip(floored, 0.0, float(n)),
        floored_std=np.asarray(floored_std, dtype=np.float64),
        noisy_histogram=h,
        edges=edges,
        sigma=float(sigma),
        quantile=float(quantile),
    )


def uses_adaptive_floor(config: ProtocolConfig) -> bool:
    """Whether ``config`` releases the stage-0 floor histogram.

    Only the ``"bounded"`` profile has a floor that matters for privacy; with ``v_min = 1/4``
    there is nothing to choose; and only a run that releases a weighted statistic (its
    ``"weighted"`` release) uses the floor, so no budget is spent on it otherwise.
    """
    from fa_hetdp.protocol.plan import needed_releases  # the plan builds on this module

    return (
        config.adaptive_floor
        and config.profile == "bounded"
        and config.variance_floor < MAX_WITHIN_VARIANCE
        and "weighted" in needed_releases(config)
    )


def check_floor(config: ProtocolConfig, floor: float) -> float:
    """Return ``floor`` as a float after checking it fits ``config`` (in ``[v_min, 1/4]``)."""
    if not uses_adaptive_floor(config):
        raise PrivacyParameterError(
            f"floor={floor!r} given, but the config has no adaptive floor "
            f"(adaptive_floor={config.adaptive_floor}, profile={config.profile!r})."
        )
    value = float(floor)
    if not config.variance_floor <= value <= MAX_WITHIN_VARIANCE:
        raise PrivacyParameterError(
            f"floor must be in [v_min, 1/4] = [{config.variance_floor:g}, 0.25], got "
            f"floor={value!r}."
        )
    return value
