"""The accuracy planner: expected error of every private statistic, before any data exist.

:func:`plan_accuracy` needs ``n``, ``d``, the privacy settings and a few *public assumptions*
about the data (:class:`DataAssumptions`); it never sees client data. It calibrates the run
exactly as the protocol would (:func:`~fa_hetdp.protocol.plan.plan_protocol`, so every utility
lever of the plan flows in) and evaluates the error model of :mod:`fa_hetdp.accuracy.metrics` on a
*model population* described by the assumptions: every coordinate has mean ``m``, dispersion
``D`` and every client the within-vector variance ``v`` (weight ``w = 1/max(v, v_min)``), so
``B = n w``, ``Q = n w D`` and ``I^2 = max(0, 1 - (n - 1)/Q)``.

Two errors are given per statistic (``docs/design.md``, error metrics):

- **per coordinate**: ``sqrt(mean_j E[(private_j - true_j)^2])``;
- **of the coordinate average**: ``sqrt(E[(mean_j private_j - mean_j true_j)^2])``. Noise
  that is independent across coordinates averages out (``1/d``); the noise of ``B'`` is shared
  by every coordinate of ``mu_bar'`` (and so of ``Q''``, ``I2''``), and biases (``D''`` and
  ``Q''`` are biased upwards by the broadcast's error) do not average out. Both are computed
  exactly given the model, by Gauss-Hermite quadrature over the shared noise of ``B'``.

With ``adaptive_floor``, stages 1-2 are planned at the floor predicted for the model
(:func:`~fa_hetdp.accuracy.assumptions.planned_protocol`); the histogram's budget share counts.

The scalars ``total_dispersion = sum_j D''_j`` and ``i2_total = max(0, 1 - (n-1) d/sum_j Q''_j)``
are planned too (``i2_total`` with a normal approximation of ``sum_j Q''_j`` given ``B'``).
:func:`~fa_hetdp.accuracy.inverses.min_clients` and :func:`~fa_hetdp.accuracy.inverses.min_epsilon`
invert the planner for a target error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, overload

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray
from fa_hetdp.accuracy.assumptions import Assumed, DataAssumptions, planned_protocol
from fa_hetdp.accuracy.meta_planner import MetaAccuracyPlan, plan_meta_accuracy
from fa_hetdp.accuracy.metrics import centred_dispersion_moments, clipped_gaussian_moment
from fa_hetdp.accuracy.releases import MAX_UNIT_SD, NOISE_DOMINATED_COVER, SCALAR_DISPLAY
from fa_hetdp.errors import InputDataError
from fa_hetdp.protocol.bounds import coordinate_bounds, expected_square_factor
from fa_hetdp.protocol.intervals import i2_slope
from fa_hetdp.protocol.plan import ProtocolPlan
from fa_hetdp.protocol.recommended import recommended_config
from fa_hetdp.registry import STATISTICS, derive
from fa_hetdp.stats.exact import i_squared

__all__ = [
    "SCALARS",
    "AccuracyPlan",
    "PlannedError",
    "Scope",
    "accuracy_of_plan",
    "plan_accuracy",
]

SCALARS: Final[Mapping[str, str]] = SCALAR_DISPLAY
"""The scalar summaries (key -> display name), planned and released after the statistics."""

_GH_B: Final = 24
_GH_Y: Final = 24
_GH_Z: Final = 24
_GH_S: Final = 48

Scope = Literal["coordinate", "average"]
_Z95: Final = 1.959963984540054
"""The two-sided 95 % normal quantile (the level of a released value's interval)."""


@dataclass(frozen=True)
class PlannedError:
    """The expected error of one statistic (or scalar summary).

    Attributes
    ----------
    key, display : str
        Identifier (:data:`~fa_hetdp.registry.STATISTICS` or :data:`SCALARS`) and name.
    typical : float
        The statistic's value in the model population (per coordinate; the scalar itself).
    rmse_coordinate : float
        Expected RMSE per coordinate (equals ``rmse_average`` for a scalar).
    rmse_average : float
        Expected RMSE of the coordinate average (of the scalar).
    noise_std : float
        The planned standard deviation of the noise on the statistic's own scale (root mean
        square over the coordinates): what a run reports as its noise sd, under the same name.
    judged : bool
        Whether ``typical`` follows from stated assumptions
        (:meth:`~fa_hetdp.accuracy.assumptions.DataAssumptions.judged`); if not, it is a default
        that no one stated and the plan does not judge the statistic against it.
    range_width : float
        Width of the statistic's range (``inf`` if unbounded): an error above it is too large
        whatever the data.
    """

    key: str
    display: str
    typical: float
    rmse_coordinate: float
    rmse_average: float
    noise_std: float = math.nan
    judged: bool = True
    range_width: float = math.inf

    @property
    def noise_dominated(self) -> bool:
        """Whether the expected per-coordinate error exceeds the typical value.

        Judged against a stated, non-zero typical value. Without one (not stated, or 0: no
        signal to compare with) the rule of a released value applies to the expected
        interval: ``+- z RMSE`` (95 %) covers at least
        :data:`~fa_hetdp.accuracy.releases.NOISE_DOMINATED_COVER` of the statistic's range
        (noise-dominated whatever the data).
        """
        if self.judged and self.typical != 0.0:
            return self.rmse_coordinate > abs(self.typical)
        return 2.0 * _Z95 * self.rmse_coordinate >= NOISE_DOMINATED_COVER * self.range_width

    @property
    def by_range(self) -> bool:
        """Whether :attr:`noise_dominated` is judged by the range (no typical value to use)."""
        return not self.judged or self.typical == 0.0

    def relative(self, scope: Scope = "average") -> float:
        """RMSE over ``|typical|`` (inf when the typical value is 0)."""
        rmse = self.rmse_average if scope == "average" else self.rmse_coordinate
        return rmse / abs(self.typical) if self.typical != 0.0 else math.inf


@dataclass(frozen=True)
class AccuracyPlan:
    """What a run will be able to tell: the expected error of every release.

    Attributes
    ----------
    plan : ProtocolPlan
        The calibrated protocol the errors are for.
    assumptions : DataAssumptions
        The public assumptions used (``assumptions.assumed`` lists the defaults taken).
    errors : tuple[PlannedError, ...]
        One row per statistic the run releases, in the registry's order.
    scalars : tuple[PlannedError, ...]
        ``total_dispersion`` and ``i2_total``.
    """

    plan: ProtocolPlan
    assumptions: DataAssumptions
    errors: tuple[PlannedError, ...]
    scalars: tuple[PlannedError, ...] = field(default=())

    @property
    def n(self) -> int:
        """Number of clients."""
        return self.plan.n

    @property
    def d(self) -> int:
        """Number of coordinates."""
        return self.plan.d

    def error(self, key: str) -> PlannedError:
        """Return the row of statistic or scalar ``key``."""
        for row in (*self.errors, *self.scalars):
            if row.key == key:
                return row
        allowed = tuple(r.key for r in (*self.errors, *self.scalars))
        raise KeyError(f"no planned error for {key!r}; allowed: {allowed}")

    @property
    def noise_dominated(self) -> tuple[PlannedError, ...]:
        """Rows whose expected per-coordinate error exceeds their typical value."""
        return tuple(r for r in (*self.errors, *self.scalars) if r.noise_dominated)

    @property
    def not_judged(self) -> tuple[PlannedError, ...]:
        """Rows without a stated typical value that are not noise-dominated whatever the data."""
        rows = (*self.errors, *self.scalars)
        return tuple(r for r in rows if not r.judged and not r.noise_dominated)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (for the result document and ``fa-hetdp plan --json``)."""
        cfg = self.plan.config
        return {
            "n": self.n,
            "d": self.d,
            "epsilon": cfg.epsilon,
            "delta": cfg.delta,
            "composition": cfg.composition,
            "mechanism": cfg.mechanism,
            "placement": cfg.placement,
            "variance_floor": cfg.variance_floor,
            "planned_floor": self.plan.variance_floor if self.plan.adaptive else None,
            "assumptions": self.assumptions.as_dict(),
            "statistics": {
                r.key: {
                    "typical": r.typical,
                    "rmse_coordinate": r.rmse_coordinate,
                    "rmse_average": r.rmse_average,
                    "noise_std": r.noise_std,
                    "typical_stated": r.judged,
                    "noise_dominated": r.noise_dominated,
                }
                for r in (*self.errors, *self.scalars)
            },
        }


# --------------------------------------------------------------------------- the model


def _hermite(k: int) -> tuple[FloatArray, FloatArray]:
    nodes, weights = np.polynomial.hermite_e.hermegauss(k)
    return nodes, weights / weights.sum()


@dataclass(frozen=True)
class _Model:
    """The model population (per coordinate ``m, D, Q``) and the plan's noise scales."""

    n: int
    d: int
    m: FloatArray
    dispersion: FloatArray
    q: FloatArray
    b: float
    s1: float
    s2: float
    s3: float
    s4: float
    s5: float
    w_min: float


def _model(plan: ProtocolPlan, assumptions: DataAssumptions) -> _Model:
    n, d, floor = plan.n, plan.d, plan.variance_floor
    m, spread, q = assumptions.per_coordinate(n, d, floor)

    def s(name: str) -> float:
        if name not in plan.releases or (name == "i2_extra" and not plan.config.extra_i2_noise):
            return 0.0
        # the mechanism's noise variance at the release's total scale
        return math.sqrt(float(plan.mechanism.variance(plan.noise_std(name))))

    return _Model(
        n=n,
        d=d,
        m=m,
        dispersion=spread,
        q=q,
        b=n * assumptions.weight(floor),
        s1=s("mean"),
        s2=s("weighted"),
        s3=s("dispersion"),
        s4=s("q"),
        s5=s("i2_extra"),
        w_min=plan.min_weight,
    )


def _stage2_factor_sq(
    plan: ProtocolPlan, mod: _Model, loc: FloatArray, scale: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """``E[f_j^2]`` of the stage-2 factors: ``"dispersion"`` (d,), ``"q"`` (K, d) per ``B'`` node.

    The plan scales the stage-2 sigmas by :meth:`ProtocolPlan.stage2_factors` of the public
    broadcast ``c``, which is noisy: ``clip(m + tau Y)`` resp. ``clip(A'/B~)``, independent
    across coordinates (given ``B'``). ``f_j^2`` is ``mean_i b_i^2`` (uniform) or
    ``b_j sum_i b_i / d`` (per coordinate), ``b_i = max(c_i, 1 - c_i)^2``: its expectation
    follows from each coordinate's ``E[b_i]``, ``E[b_i^2]`` by Gauss-Hermite quadrature
    (:func:`~fa_hetdp.protocol.bounds.expected_square_factor`; 1 without broadcast bounds).
    """
    if not plan.config.broadcast_bounds:
        return np.ones(mod.d), np.ones(loc.shape)
    y, py = _hermite(_GH_Y)
    c1 = np.clip(mod.m[None, :] + mod.s1 / mod.n * y[:, None], 0.0, 1.0)  # (Y, d)
    c2 = np.clip(loc[:, None, :] + scale[:, None, None] * y[None, :, None], 0.0, 1.0)  # (K, Y, d)
    out = []
    for c in (c1, c2):
        b = np.moveaxis(coordinate_bounds(c), -2, -1)  # (..., d, Y)
        out.append(expected_square_factor(b @ py, (b * b) @ py, shape=plan.config.noise_shape))
    return out[0], out[1]


def _ratio_moments(mod: _Model) -> tuple[FloatArray, list[FloatArray], FloatArray, FloatArray]:
    """Per node of the noise of ``B'``: ``E[delta^k | b]``, ``delta = mu_bar' - mu_bar``.

    Given ``b``, ``A'/B~`` is ``N(B m/B~, (s_2/B~)^2)`` exactly, clipped to ``[0, 1]``
    (``B~ = max(B + b, n w_min)``; as in :func:`fa_hetdp.accuracy.metrics.expected_mse`).
    Returns (node weights (K,), [moments 1..4, each (K, d)], locations (K, d), scales (K,)).
    """
    z, p = _hermite(_GH_B)
    b_used = np.maximum(mod.b + mod.s2 * z, mod.n * mod.w_min)
    loc = mod.b * mod.m[None, :] / b_used[:, None]
    scale = mod.s2 / b_used
    moments = [
        clipped_gaussian_moment(mod.m[None, :], scale[:, None], k, location=loc)
        for k in (1, 2, 3, 4)
    ]
    return p, moments, loc, scale


def _i2_moments(
    mod: _Model, loc: FloatArray, scale: FloatArray, s4: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """``E[e | b]`` and ``E[e^2 | b]``, shape (K, d), of ``e = I2'' - I^2`` per coordinate.

    ``Q'' = Q + B delta^2 + s_4 Z`` (Thm 3.8; ``s_4`` per node of ``B'`` and coordinate), by
    Gauss-Hermite quadrature over the noise of ``A'`` (``Y``) and of ``Q''`` (``Z``), in chunks
    of coordinates.
    """
    y, py = _hermite(_GH_Y)
    zq, pz = _hermite(_GH_Z)
    w = py[:, None] * pz[None, :]
    e1 = np.empty(loc.shape)
    e2 = np.empty(loc.shape)
    truth = i_squared(mod.q, mod.n)
    for start in range(0, mod.d, 16):
        sl = slice(start, start + 16)
        est = np.clip(loc[:, sl, None] + scale[:, None, None] * y, 0.0, 1.0)  # (K, c, Y)
        q_y = mod.q[sl, None] + mod.b * (est - mod.m[sl, None]) ** 2
        q_all = q_y[..., None] + s4[:, sl, None, None] * zq  # (K, c, Y, Z)
        err = i_squared(q_all, mod.n) - truth[sl, None, None]
        e1[:, sl] = np.einsum("kcyz,yz->kc", err, w)
        e2[:, sl] = np.einsum("kcyz,yz->kc", err**2, w)
    return e1, e2


def _i2_total_mse(
    mod: _Model, p: FloatArray, m2: FloatArray, m4: FloatArray, s4: FloatArray
) -> float:
    """``E[(i2_total'' - i2_total)^2]``; ``sum_j Q''_j`` given ``B'`` taken as normal.

    Given ``b``, ``sum_j Q''_j - sum_j Q_j = B sum_j delta_j^2 + sum_j e_j`` is a sum of ``d``
    independent terms: mean ``B sum_j E[delta_j^2]``, variance
    ``sum_j B^2 Var(delta_j^2) + sum_j s_4j^2`` (a normal approximation: the CLT over coordinates).
    """
    d, n = mod.d, mod.n
    z, pz = _hermite(_GH_S)
    total = float(np.sum(mod.q))
    mean = total + mod.b * m2.sum(axis=1)
    var = mod.b**2 * np.maximum(m4 - m2**2, 0.0).sum(axis=1) + np.sum(s4**2, axis=1)
    err = i_squared(mean[:, None] + np.sqrt(var)[:, None] * z, n, d) - float(i_squared(total, n, d))
    return float(p @ ((err**2) @ pz))


def _average_mse(p: FloatArray, first: FloatArray, second: FloatArray, d: int) -> float:
    """``E_b[(mean_j E[e_j|b])^2 + mean_j Var(e_j|b)/d]``: the MSE of the coordinate average.

    Given ``b`` the coordinates' errors are independent (only ``B'`` is shared).
    """
    bias = first.mean(axis=-1)
    var = (second - first**2).mean(axis=-1)
    return float(p @ (bias**2 + var / d))


def accuracy_of_plan(plan: ProtocolPlan, assumptions: DataAssumptions) -> AccuracyPlan:
    """Compute the expected error of every release of ``plan`` under ``assumptions``.

    Per coordinate (``tau = s_1/n``, ``s_k`` the total noise std of release ``k``,
    ``delta = mu_bar' - mu_bar``, moments given the noise ``b`` of ``B'`` then integrated):

    - ``mu'``: ``tau^2``; average ``tau^2/d``.
    - ``D''``: ``E[(clip(m + Y) - m)^4] + (s_3/n)^2``; the average keeps the bias
      ``E[(clip(m + Y) - m)^2]`` whole and divides the variance by ``d``. At the optimal
      centre ``a`` (``dispersion_center``) the error ``(m - a)^2 - (c - a)^2`` replaces
      ``(m - c)^2`` and the factors are those of ``a``
      (:func:`~fa_hetdp.accuracy.metrics.centred_dispersion_moments`).
    - ``mu_bar'``: ``E[delta^2]``; average ``E_b[E[delta|b]^2 + Var(delta|b)/d]`` (the shared
      noise of ``B'`` does not average out).
    - ``Q''``: ``B^2 E[delta^4] + s_4^2``; average
      ``E_b[B^2 (E[delta^2|b]^2 + Var(delta^2|b)/d)] + s_4^2/d``.
    - ``I2''``: quadrature over ``(b, A', Z)`` as :func:`fa_hetdp.accuracy.metrics.expected_mse`;
      average as for ``mu_bar'``; ``I2'''`` adds ``s_5^2`` (``s_5^2/d``).

    Parameters
    ----------
    plan : ProtocolPlan
        The calibrated protocol.
    assumptions : DataAssumptions
        Public assumptions about the data.

    Returns
    -------
    AccuracyPlan
    """
    mod = _model(plan, assumptions)
    n, d = mod.n, mod.d
    tau = mod.s1 / n
    one = np.ones(1)
    per: dict[str, float] = {}
    avg: dict[str, float] = {}
    per["mean"], avg["mean"] = tau**2, tau**2 / d
    d2 = clipped_gaussian_moment(mod.m, tau, 2)[None, :]
    d4 = clipped_gaussian_moment(mod.m, tau, 4)[None, :]
    p, (m1, m2, _m3, m4), loc, scale = _ratio_moments(mod)
    f_disp, f_q = _stage2_factor_sq(plan, mod, loc, scale)
    if plan.config.dispersion_center == "optimal" and mod.s3 > 0.0:
        e1, e2, f_disp = centred_dispersion_moments(plan, mod.m, tau=mod.s1 / n, nodes=_GH_Y)
        d2, d4 = e1[None, :], e2[None, :]
    # the noise is independent of the broadcast's error
    noise3 = float(np.mean(f_disp)) * (mod.s3 / n) ** 2
    per["dispersion"] = float(np.mean(d4)) + noise3
    avg["dispersion"] = _average_mse(one, d2, d4 + noise3, d)
    per["weighted_mean"] = float(np.mean(p @ m2))
    avg["weighted_mean"] = _average_mse(p, m1, m2, d)
    noise4 = float(p @ np.mean(f_q, axis=1)) * mod.s4**2
    per["q"] = mod.b**2 * float(np.mean(p @ m4)) + noise4
    avg["q"] = mod.b**2 * _average_mse(p, m2, m4, d) + noise4 / d
    s4 = mod.s4 * np.sqrt(f_q)  # (K, d): per node of B' and coordinate
    e1, e2 = _i2_moments(mod, loc, scale, s4)
    per["i2"] = float(np.mean(p @ e2))
    avg["i2"] = _average_mse(p, e1, e2, d)
    per["i2_extra"] = per["i2"] + mod.s5**2
    avg["i2_extra"] = avg["i2"] + mod.s5**2 / d
    i2_true = float(np.mean(i_squared(mod.q, n)))
    # delta method through the kink at the lower end of Q's interval, as a run reports it
    h = i2_slope(np.maximum(mod.q - _Z95 * s4, 0.0), n)
    noise = {
        "mean": tau,
        "dispersion": math.sqrt(noise3),
        "weighted_mean": mod.s2 * math.sqrt(1.0 + float(np.mean(mod.m**2))) / mod.b,
        "q": math.sqrt(noise4),
        "i2": math.sqrt(float(p @ np.mean((h * s4) ** 2, axis=1))),
    }
    for key in ("weighted_mean", "i2"):  # values in [0, 1]
        noise[key] = min(noise[key], MAX_UNIT_SD)
    noise["i2_extra"] = math.sqrt(noise["i2"] ** 2 + mod.s5**2)
    widths = {"mean": 1.0, "weighted_mean": 1.0, "dispersion": 0.25, "q": mod.b / 4.0}
    typical = {
        "mean": float(np.mean(mod.m)),
        "dispersion": float(np.mean(mod.dispersion)),
        "weighted_mean": float(np.mean(mod.m)),
        "q": float(np.mean(mod.q)),
        "i2": i2_true,
        "i2_extra": i2_true,
    }
    widths_full: dict[str, Any] = {k: widths.get(k, 1.0) for k in per}
    derive(per, n, "mse")  # a derived statistic: from its source's (Derivation)
    derive(avg, n, "mse")
    derive(noise, n, "noise")
    derive(typical, n, "value")
    derive(widths_full, n, "noise")  # the image of [0, width] has width slope * width
    rows = []
    for spec in STATISTICS:
        if spec.optional and not plan.config.extra_i2_noise:
            continue
        if spec.release not in plan.releases:  # a release the plan does not make
            continue
        rows.append(
            PlannedError(
                key=spec.key,
                display=spec.display,
                typical=float(typical[spec.key]),
                rmse_coordinate=math.sqrt(per[spec.key]),
                rmse_average=math.sqrt(avg[spec.key]),
                noise_std=noise[spec.key],
                judged=assumptions.judged(spec.derivation.source if spec.derivation else spec.key),
                range_width=float(widths_full[spec.key]),
            )
        )
    scalars = []
    if "dispersion" in plan.releases:
        total = d * math.sqrt(avg["dispersion"])
        typical_total = float(np.sum(mod.dispersion))
        scalars.append(
            PlannedError(
                "total_dispersion",
                SCALARS["total_dispersion"],
                typical_total,
                total,
                total,
                noise_std=math.sqrt(d * noise3),
                judged=assumptions.judged("total_dispersion"),
                range_width=d / 4.0,
            )
        )
    if "q" in plan.releases and "weighted" in plan.releases:
        rmse = math.sqrt(_i2_total_mse(mod, p, m2, m4, s4))
        typical_i2 = float(i_squared(float(np.sum(mod.q)), n, d))
        sd_sum = np.sqrt(np.sum(s4**2, axis=1))  # per node of B'
        slope = i2_slope(np.maximum(float(np.sum(mod.q)) - _Z95 * sd_sum, 0.0), n, d)
        sd = min(math.sqrt(float(p @ (slope * sd_sum) ** 2)), MAX_UNIT_SD)
        scalars.append(
            PlannedError(
                "i2_total",
                SCALARS["i2_total"],
                typical_i2,
                rmse,
                rmse,
                noise_std=sd,
                judged=assumptions.judged("i2_total"),
                range_width=1.0,
            )
        )
    return AccuracyPlan(
        plan=plan, assumptions=assumptions, errors=tuple(rows), scalars=tuple(scalars)
    )


@overload
def plan_accuracy(
    n: int,
    d: int,
    *,
    epsilon: float,
    delta: float,
    within_variance: float | None = None,
    coordinate_mean: Assumed | None = None,
    dispersion: Assumed | None = None,
    i2: Assumed | None = None,
    privacy_unit: str | None = None,
    records_per_client: None = None,
    **settings: Any,
) -> AccuracyPlan: ...


@overload
def plan_accuracy(
    n: int,
    d: int,
    *,
    epsilon: float,
    delta: float,
    within_variance: float | None = None,
    coordinate_mean: Assumed | None = None,
    dispersion: Assumed | None = None,
    i2: Assumed | None = None,
    privacy_unit: str | None = None,
    records_per_client: int | Sequence[int] | npt.NDArray[Any],
    **settings: Any,
) -> MetaAccuracyPlan: ...


def plan_accuracy(
    n: int,
    d: int,
    *,
    epsilon: float,
    delta: float,
    within_variance: float | None = None,
    coordinate_mean: Assumed | None = None,
    dispersion: Assumed | None = None,
    i2: Assumed | None = None,
    privacy_unit: str | None = None,
    records_per_client: int | Sequence[int] | npt.NDArray[Any] | None = None,
    **settings: Any,
) -> AccuracyPlan | MetaAccuracyPlan:
    """Plan the expected RMSE of every statistic a run would release (no data needed).

    With ``records_per_client`` (clients that hold many records: the cross-silo
    meta-analysis), the plan is that of :func:`fa_hetdp.private_meta_analysis`:
    :func:`fa_hetdp.accuracy.meta_planner.plan_meta_accuracy` (``privacy_unit`` required;
    ``i2``, ``within_variance`` -- of one record -- and ``coordinate_mean``
    describe its model federation, ``dispersion`` does not apply).

    Parameters
    ----------
    n, d : int
        Number of clients and coordinates.
    epsilon, delta : float
        The run's privacy budget.
    within_variance, coordinate_mean, dispersion, i2 : optional
        Public assumptions about the data (:class:`DataAssumptions`); those left out take
        conservative defaults and are listed in ``result.assumptions.assumed``.
    privacy_unit : {"client", "record"}, optional
        What the privacy protects (the setting ``privacy_unit``; the record unit of the
        paper's protocol needs ``min_records``). Default: the setting's default, ``"client"``
        (``"record"`` for the meta-analysis).
    records_per_client : int or sequence of int, optional
        Given, plan the meta-analysis of clients holding this many records each (one count,
        or one per client) and return a :class:`~fa_hetdp.accuracy.meta_planner.MetaAccuracyPlan`.
    **settings
        Any other :class:`~fa_hetdp.config.protocol.ProtocolConfig` field (``composition``,
        ``variance_floor``, ...); left out (or None), the recommended settings apply
        (:func:`~fa_hetdp.protocol.recommended.recommended_config`, the adaptive floor
        included): what :func:`fa_hetdp.private_statistics` runs when given nothing else.

    Returns
    -------
    AccuracyPlan
        Per statistic: typical value, RMSE per coordinate and of the coordinate average.

    Examples
    --------
    >>> from fa_hetdp import plan_accuracy
    >>> acc = plan_accuracy(1797, 64, epsilon=1.0, delta=1e-5, within_variance=0.14)
    >>> acc.error("mean").rmse_coordinate < 0.05
    True
    """
    if records_per_client is not None:
        if dispersion is not None:
            raise InputDataError(
                "dispersion is not an assumption of the meta-analysis plan "
                "(records_per_client given); state i2 and within_variance instead."
            )
        return plan_meta_accuracy(
            n,
            d,
            records_per_client=records_per_client,
            epsilon=epsilon,
            delta=delta,
            privacy_unit=privacy_unit,
            i2=i2,
            within_variance=within_variance,
            coordinate_mean=coordinate_mean,
            **settings,
        )
    if privacy_unit is not None:
        settings["privacy_unit"] = privacy_unit
    config = recommended_config(epsilon=epsilon, delta=delta, **settings)
    assumptions = DataAssumptions.stated(
        within_variance=within_variance,
        coordinate_mean=coordinate_mean,
        dispersion=dispersion,
        i2=i2,
    )
    return accuracy_of_plan(
        planned_protocol(config, n=n, d=d, assumptions=assumptions), assumptions
    )
