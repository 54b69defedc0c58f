"""Public assumptions about client data, for the planner (:mod:`fa_hetdp.accuracy.planner`).

The planner never sees data; what it knows about the data is a :class:`DataAssumptions`:
a typical within-vector variance (hence the weights), coordinate means, the coordinate spread
and, optionally, ``I^2`` -- each stated by the user or a conservative default, recorded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from fa_hetdp._types import FloatArray
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.config.schema import AssumptionsSpec, Scenario
from fa_hetdp.errors import InputDataError
from fa_hetdp.protocol.floor import choose_floor, floor_buckets
from fa_hetdp.protocol.plan import ProtocolPlan, plan_protocol
from fa_hetdp.stats.exact import MAX_WITHIN_VARIANCE

__all__ = [
    "DEFAULT_COORDINATE_MEAN",
    "DEFAULT_WITHIN_VARIANCE",
    "Assumed",
    "DataAssumptions",
    "planned_protocol",
    "scenario_assumptions",
]

DEFAULT_WITHIN_VARIANCE: Final = MAX_WITHIN_VARIANCE
"""Default within-vector variance: the largest possible (the smallest weights)."""
DEFAULT_COORDINATE_MEAN: Final = 0.5
"""Default coordinate mean: mid-range (clipping at 0 or 1 removes the least error)."""

Assumed = float | tuple[float, ...]
"""A public assumption: one typical value, or one value per coordinate."""


def _assumed(name: str, value: object, low: float, high: float, *, open_high: bool) -> Assumed:
    arr = np.asarray(value, dtype=np.float64)
    bad = arr.ndim > 1 or arr.size == 0 or not np.all(np.isfinite(arr))
    bad = bad or bool(np.any(arr < low)) or bool(np.any(arr >= high if open_high else arr > high))
    if bad:
        bracket = ")" if open_high else "]"
        raise InputDataError(
            f"{name} must be a number or a 1-D sequence of numbers in [{low}, {high}{bracket}, "
            f"got {name}={value!r}."
        )
    return float(arr) if arr.ndim == 0 else tuple(float(v) for v in arr)


@dataclass(frozen=True)
class DataAssumptions:
    """Public assumptions about the clients' data (all optional; defaults are conservative).

    Each of ``coordinate_mean``, ``dispersion`` and ``i2`` is one typical value or one value
    per coordinate (a public guess such as a template image).

    Attributes
    ----------
    within_variance : float
        Typical within-vector variance ``s_i^2`` of one client's vector (ddof 0), in
        ``(0, 1/4]``; the planner gives every client the weight ``1/max(v, v_min)`` (state the
        harmonic mean of the ``s_i^2`` if they vary: ``B = sum w_i`` is what matters). Default
        ``1/4``, the largest possible: the smallest weights, the most noise relative to ``B``.
    coordinate_mean : float or tuple of float
        Coordinate means ``mu_j`` (``= mu_bar_j`` in the model), in ``[0, 1]``. Default
        ``1/2``: mid-range, where clipping at 0 or 1 removes the least error.
    dispersion : float or tuple of float or None
        Coordinate spread ``D_j = (1/n) sum_i (x_ij - mu_j)^2`` across clients, in
        ``[0, 1/4]``. Default: ``max(v, v_min) (n - 1)/n``, the homogeneous case.
    i2 : float or tuple of float or None
        Typical ``I^2_j`` in ``[0, 1)``; fixes ``Q_j = (n - 1)/(1 - I^2_j)``. Default: the
        value implied by the spread, ``Q_j = n w D_j`` (0 for the homogeneous default -- no
        heterogeneity to find, the null of Cochran's test).
    assumed : tuple[str, ...]
        The names of the assumptions that were not stated and took their default.
    source : str
        Where the stated numbers come from ("" when not said).
    """

    within_variance: float = DEFAULT_WITHIN_VARIANCE
    coordinate_mean: Assumed = DEFAULT_COORDINATE_MEAN
    dispersion: Assumed | None = None
    i2: Assumed | None = None
    assumed: tuple[str, ...] = ()
    source: str = ""

    def __post_init__(self) -> None:
        v = float(self.within_variance)
        if not (math.isfinite(v) and 0.0 < v <= MAX_WITHIN_VARIANCE):
            raise InputDataError(
                f"within_variance must be in (0, {MAX_WITHIN_VARIANCE}], "
                f"got within_variance={self.within_variance!r}."
            )
        object.__setattr__(self, "within_variance", v)
        checks = (
            ("coordinate_mean", 1.0, False),
            ("dispersion", MAX_WITHIN_VARIANCE, False),
            ("i2", 1.0, True),
        )
        for name, high, open_high in checks:
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(
                    self, name, _assumed(name, value, 0.0, high, open_high=open_high)
                )

    @classmethod
    def stated(
        cls,
        *,
        within_variance: float | None = None,
        coordinate_mean: Assumed | None = None,
        dispersion: Assumed | None = None,
        i2: Assumed | None = None,
        source: str = "",
    ) -> DataAssumptions:
        """Build assumptions from what the user stated (None: the default, recorded)."""
        given = {
            "within_variance": within_variance,
            "coordinate_mean": coordinate_mean,
            "dispersion": dispersion,
            "i2": i2,
        }
        assumed = tuple(k for k, v in given.items() if v is None)
        return cls(
            within_variance=DEFAULT_WITHIN_VARIANCE if within_variance is None else within_variance,
            coordinate_mean=DEFAULT_COORDINATE_MEAN if coordinate_mean is None else coordinate_mean,
            dispersion=dispersion,
            i2=i2,
            assumed=assumed,
            source=source,
        )

    @classmethod
    def from_scenario(cls, spec: AssumptionsSpec, **overrides: Assumed | None) -> DataAssumptions:
        """Build assumptions from a scenario's ``[assumptions]``; a given override wins.

        ``overrides`` are ``within_variance``, ``coordinate_mean``, ``dispersion`` and ``i2``
        (``fa-hetdp plan``'s flags); None leaves the scenario's value.
        """
        stated: dict[str, Assumed | None] = {
            "within_variance": spec.within_variance,
            "coordinate_mean": spec.coordinate_mean,
            "dispersion": spec.spread,
            "i2": spec.i2,
        }
        stated.update({k: v for k, v in overrides.items() if v is not None})
        wv = stated.pop("within_variance")
        return cls.stated(
            within_variance=None if wv is None else float(np.asarray(wv)),
            source=spec.source,
            **stated,
        )

    def judged(self, key: str) -> bool:
        """Whether the typical value of statistic ``key`` follows from stated assumptions.

        ``mean``/``weighted_mean`` need ``coordinate_mean``; ``dispersion`` and
        ``total_dispersion`` the spread; ``q``, ``i2``, ``i2_extra`` and ``i2_total`` ``i2`` or
        the spread (with the weights).
        A plan does not call a statistic noise-dominated from a value nobody stated.
        """
        stated = set(self.stated_names)
        needs = {
            "mean": {"coordinate_mean"},
            "weighted_mean": {"coordinate_mean"},
            "dispersion": {"dispersion"},
            "total_dispersion": {"dispersion"},
        }.get(key, {"i2", "dispersion"})
        return bool(stated & needs)

    @property
    def stated_names(self) -> tuple[str, ...]:
        """The assumptions that were stated (not defaults)."""
        names = ("within_variance", "coordinate_mean", "dispersion", "i2")
        return tuple(k for k in names if k not in self.assumed)

    def weight(self, variance_floor: float) -> float:
        """Return the model's client weight ``1/max(v, v_min)``."""
        return 1.0 / max(self.within_variance, variance_floor)

    def per_coordinate(
        self, n: int, d: int, variance_floor: float
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Return the model's ``(mu_j, D_j, Q_j)``, shape ``(d,)`` each.

        Raises
        ------
        InputDataError
            If a per-coordinate assumption does not have ``d`` values.
        """
        m = self._vector("coordinate_mean", self.coordinate_mean, d)
        floor = max(self.within_variance, variance_floor)
        default_spread = floor * (n - 1) / n
        spread = self._vector("dispersion", self.dispersion, d, default_spread)
        if self.i2 is not None:
            q = (n - 1) / (1.0 - self._vector("i2", self.i2, d))
        elif self.dispersion is None:
            q = np.full(d, n - 1.0)  # n w D for the homogeneous default, without rounding
        else:
            q = n * self.weight(variance_floor) * spread
        return m, spread, q

    @staticmethod
    def _vector(name: str, value: Assumed | None, d: int, default: float = 0.0) -> FloatArray:
        arr = np.asarray(default if value is None else value, dtype=np.float64)
        if arr.ndim == 0:
            return np.full(d, float(arr))
        if arr.shape != (d,):
            raise InputDataError(
                f"{name} has {arr.shape[0]} values but the run has d={d} coordinates; "
                "state one typical value or one per coordinate."
            )
        return arr

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields (None where the default is derived from the others)."""

        def plain(value: Assumed | None) -> float | list[float] | None:
            return list(value) if isinstance(value, tuple) else value

        return {
            "within_variance": self.within_variance,
            "coordinate_mean": plain(self.coordinate_mean),
            "dispersion": plain(self.dispersion),
            "i2": plain(self.i2),
            "assumed": list(self.assumed),
            "source": self.source,
        }


def planned_protocol(
    config: ProtocolConfig, *, n: int, d: int, assumptions: DataAssumptions
) -> ProtocolPlan:
    """Return the plan the run would use, with the adaptive floor predicted from the assumptions.

    Without ``adaptive_floor`` this is :func:`plan_protocol`. With it, the model population
    (every client at ``v = within_variance``) fills one bucket, and the floor is what
    :func:`~fa_hetdp.protocol.floor.choose_floor` picks from that histogram without noise
    but with its margin for the planned noise: the largest edge at or below ``v`` when
    ``n`` is large enough, ``v_min`` when the histogram's noise is too large for ``q n``.
    When ``within_variance`` was not stated the floor is planned at ``v_min`` (the rule's
    fallback; conservative: the weighted releases keep their noise for ``W = 1/v_min``).
    """
    plan = plan_protocol(config, n=n, d=d)
    if not plan.adaptive:
        return plan
    if "within_variance" in assumptions.assumed:
        return plan_protocol(config, n=n, d=d, floor=config.variance_floor)
    edges = plan.floor_edges
    model = np.zeros(edges.size + 1)
    model[int(floor_buckets(assumptions.within_variance, edges))] = float(n)
    choice = choose_floor(
        model, n=n, edges=edges, sigma=plan.floor_noise_std, quantile=config.floor_quantile
    )
    return plan_protocol(config, n=n, d=d, floor=float(choice.floor))


def scenario_assumptions(scenario: Scenario) -> DataAssumptions:
    """Return a scenario's stated ``[assumptions]`` (:meth:`DataAssumptions.from_scenario`)."""
    return DataAssumptions.from_scenario(scenario.assumptions)
