"""A budget split chosen by the accuracy planner's full error model (no data, no closed form).

Benchmark code, not part of the library: ``goal_bench.py`` measures it and
``tests/test_planned_split.py`` checks it (through ``tests/support``).

The default Gaussian-DP split (:func:`fa_hetdp.protocol.plan.release_weights`) minimises a
weighted sum of the releases' noise variances, ``u_k`` proportional to ``Delta_k sqrt(a_k)``.
That closed form sees each statistic's error through its own release only; the planner's model
(:func:`~fa_hetdp.accuracy.planner.accuracy_of_plan`) also has the terms one release causes in
another statistic -- the broadcast's error ``B (mu_bar' - mu_bar)^2`` in ``Q''`` (the weighted
release), the bias ``(clip(mu') - mu)^2`` in ``D''`` (the mean release) -- and the stage-2
bounds of the broadcast. :func:`planned_split` minimises that full model numerically.

Objective: the sum, over the needed statistics among ``mu', D'', mu_bar', Q''``, of the planned
*relative* squared error ``(rmse / typical)^2`` (per coordinate by default), the typical values
and the planned floor from public assumptions only (:class:`DataAssumptions`; default: the
planner's defaults with the default split's typical within-vector variance 1/12). ``I^2`` is
post-processing of ``Q''`` (its typical value is 0 under the default assumptions) and counts
through ``Q''``. The minimum is searched over the simplex of budget shares by Nelder-Mead on
log-shares, started at the closed-form split, so the result is deterministic and its planned
error is never above the closed form's. It uses ``n``, ``d`` and the settings, never data, so
the split costs no privacy (``docs/privacy.md`` (b)).

Measured on all 1797 digits clients and not adopted in the recommended settings
(``benchmarks/README.md``, "Goal figures").
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Final, Literal

import numpy as np
from scipy.optimize import minimize

from fa_hetdp._types import FloatArray
from fa_hetdp.accuracy.assumptions import DataAssumptions, planned_protocol
from fa_hetdp.accuracy.planner import AccuracyPlan, accuracy_of_plan
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.errors import PrivacyParameterError
from fa_hetdp.protocol.floor import FLOOR_RELEASE
from fa_hetdp.protocol.plan import TYPICAL_WITHIN_VARIANCE

__all__ = ["RELATIVE_KEYS", "PlannedSplit", "planned_split", "split_objective"]

RELATIVE_KEYS: Final = ("mean", "dispersion", "weighted_mean", "q")
"""The statistics whose relative squared errors the split minimises (when made)."""

Scope = Literal["coordinate", "average"]


def _default_assumptions() -> DataAssumptions:
    return DataAssumptions.stated(within_variance=TYPICAL_WITHIN_VARIANCE)


def split_objective(acc: AccuracyPlan, scope: Scope = "coordinate") -> float:
    """Sum of ``(rmse / typical)^2`` over the statistics of :data:`RELATIVE_KEYS` in ``acc``."""
    rows = [r for r in acc.errors if r.key in RELATIVE_KEYS]
    return math.fsum(r.relative(scope) ** 2 for r in rows)


class PlannedSplit(dict[str, float]):
    """The split (release -> weight, mean 1) with its planned objective and the closed form's.

    Attributes
    ----------
    objective : float
        The planned objective of this split.
    closed_form : dict[str, float]
        The default closed-form split (:func:`~fa_hetdp.protocol.plan.release_weights`) at the
        same planned floor, and ``closed_form_objective`` its objective.
    """

    objective: float
    closed_form: dict[str, float]
    closed_form_objective: float


def _weights(names: tuple[str, ...], z: FloatArray) -> dict[str, float]:
    u = np.exp(z - np.max(z))
    u = u / np.mean(u)
    return {k: float(v) for k, v in zip(names, u, strict=True)}


def planned_split(
    config: ProtocolConfig,
    *,
    n: int,
    d: int,
    assumptions: DataAssumptions | None = None,
    scope: Scope = "coordinate",
) -> PlannedSplit:
    """Return the gdp split that minimises the planner's relative error of the needed statistics.

    Parameters
    ----------
    config : ProtocolConfig
        The run's settings (``composition = "gdp"``, ``profile = "bounded"``); its ``split``
        is ignored (the result replaces it). The adaptive floor, if on, is the one the planner
        predicts from ``assumptions`` (:func:`~fa_hetdp.accuracy.assumptions.planned_protocol`).
    n, d : int
        Number of clients and coordinates (public).
    assumptions : DataAssumptions, optional
        Public assumptions; default: the planner's defaults with ``within_variance = 1/12``
        (:data:`~fa_hetdp.protocol.plan.TYPICAL_WITHIN_VARIANCE`, the closed form's own).
    scope : {"coordinate", "average"}
        Relative error per coordinate, or of the coordinate average.

    Returns
    -------
    PlannedSplit
        Weights of the made releases of stages 1-2 (mean 1), for ``ProtocolConfig(split=...)``.

    Raises
    ------
    PrivacyParameterError
        If the composition is not ``"gdp"`` or the profile not ``"bounded"`` (the optimal
        split applies to those only).
    """
    if config.composition != "gdp" or config.profile != "bounded":
        raise PrivacyParameterError(
            "planned_split needs composition='gdp' and profile='bounded', got "
            f"composition={config.composition!r}, profile={config.profile!r}."
        )
    assume = _default_assumptions() if assumptions is None else assumptions
    base = replace(config, split=None)
    start_plan = planned_protocol(base, n=n, d=d, assumptions=assume)
    names = tuple(
        r.name
        for r in start_plan.budget.releases
        if r.counts_for_privacy and r.name != FLOOR_RELEASE
    )
    # a weight is the release's share of mu^2 under gdp: mu_k^2 (mu_share is mu_k)
    mu_k = {r.name: r.mu_share or 0.0 for r in start_plan.budget.releases if r.name in names}
    z0 = 2.0 * np.log(np.array([mu_k[k] for k in names]))
    closed = _weights(names, z0)
    closed_value = split_objective(accuracy_of_plan(start_plan, assume), scope)

    def objective(z: FloatArray) -> float:
        cfg = replace(base, split=_weights(names, z))
        return split_objective(
            accuracy_of_plan(planned_protocol(cfg, n=n, d=d, assumptions=assume), assume), scope
        )

    best, value = closed, closed_value
    if len(names) > 1:
        res = minimize(
            objective,
            z0,
            method="Nelder-Mead",
            options={"xatol": 1e-3, "fatol": 1e-9 * max(closed_value, 1e-300), "maxiter": 2000},
        )
        if float(res.fun) < closed_value:
            best, value = _weights(names, np.asarray(res.x)), float(res.fun)
    out = PlannedSplit(best)
    out.objective = value
    out.closed_form = closed
    out.closed_form_objective = closed_value
    return out
