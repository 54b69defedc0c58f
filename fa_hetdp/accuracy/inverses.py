"""Inverses of the accuracy planner: the fewest clients or the least epsilon for a target error.

:func:`min_clients` and :func:`min_epsilon` search
:func:`~fa_hetdp.accuracy.planner.accuracy_of_plan` (the expected error falls with ``n`` and
with ``epsilon``), planning each candidate with the recommended settings
(:func:`~fa_hetdp.protocol.recommended.recommended_config`) unless told otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from fa_hetdp.accuracy.assumptions import DataAssumptions, planned_protocol
from fa_hetdp.accuracy.planner import SCALARS, AccuracyPlan, Scope, accuracy_of_plan
from fa_hetdp.errors import InputDataError
from fa_hetdp.protocol.recommended import recommended_config
from fa_hetdp.registry import statistic

__all__ = ["min_clients", "min_epsilon"]


def _target_met(acc: AccuracyPlan, key: str, target: float, relative: bool, scope: Scope) -> bool:
    row = acc.error(key)
    if relative:
        return row.relative(scope) <= target
    return (row.rmse_average if scope == "average" else row.rmse_coordinate) <= target


def _check_target(key: str, target: float, relative: bool) -> None:
    if key not in SCALARS:
        statistic(key)  # raises KeyError with the allowed keys
    if not (math.isfinite(target) and target > 0.0):
        raise InputDataError(f"target must be a positive number, got target={target!r}.")
    del relative


def min_clients(
    d: int,
    *,
    statistic_key: str,
    target: float,
    epsilon: float,
    delta: float,
    relative: bool = True,
    scope: Scope = "average",
    max_clients: int = 10**8,
    assumptions: DataAssumptions | None = None,
    **settings: Any,
) -> int | None:
    """Smallest number of clients whose expected error of ``statistic_key`` is ``<= target``.

    Parameters
    ----------
    d : int
        Number of coordinates.
    statistic_key : str
        A statistic key (``"dispersion"``) or a scalar (``"i2_total"``).
    target : float
        Target RMSE: a fraction of the typical value (``relative=True``) or absolute.
    epsilon, delta : float
        Privacy budget.
    relative : bool, default True
        Whether ``target`` is relative to the statistic's typical value.
    scope : {"average", "coordinate"}
        Error of the coordinate average, or per coordinate.
    max_clients : int
        Largest ``n`` searched.
    assumptions : DataAssumptions, optional
        Public assumptions (default: :meth:`DataAssumptions.stated` with nothing stated).
    **settings
        Other :class:`~fa_hetdp.config.protocol.ProtocolConfig` fields; left out, the
        recommended settings (as :func:`plan_accuracy`).

    Returns
    -------
    int or None
        The smallest ``n`` (the error falls with ``n``; bisection), or None when even
        ``max_clients`` does not reach the target.
    """
    _check_target(statistic_key, target, relative)
    config = recommended_config(epsilon=epsilon, delta=delta, **settings)
    assume = assumptions if assumptions is not None else DataAssumptions.stated()

    def ok(n: int) -> bool:
        acc = accuracy_of_plan(planned_protocol(config, n=n, d=d, assumptions=assume), assume)
        return _target_met(acc, statistic_key, target, relative, scope)

    return _bisect_int(ok, 2, max_clients)


def min_epsilon(
    n: int,
    d: int,
    *,
    statistic_key: str,
    target: float,
    delta: float,
    relative: bool = True,
    scope: Scope = "average",
    max_epsilon: float = 100.0,
    assumptions: DataAssumptions | None = None,
    **settings: Any,
) -> float | None:
    """Smallest ``epsilon`` (to 0.5 % relative) whose expected error is ``<= target``.

    Parameters are those of :func:`min_clients`, with ``n`` fixed and ``epsilon`` searched in
    ``[1e-3, max_epsilon]``. Returns None when ``max_epsilon`` does not reach the target.
    """
    _check_target(statistic_key, target, relative)
    assume = assumptions if assumptions is not None else DataAssumptions.stated()

    def ok(epsilon: float) -> bool:
        config = recommended_config(epsilon=epsilon, delta=delta, **settings)
        acc = accuracy_of_plan(planned_protocol(config, n=n, d=d, assumptions=assume), assume)
        return _target_met(acc, statistic_key, target, relative, scope)

    low, high = 1e-3, float(max_epsilon)
    if not ok(high):
        return None
    if ok(low):
        return low
    while high / low > 1.005:
        mid = math.sqrt(low * high)
        if ok(mid):
            high = mid
        else:
            low = mid
    return high


def _bisect_int(ok: Callable[[int], bool], low: int, high: int) -> int | None:
    """Smallest integer in ``[low, high]`` with ``ok`` (assumed monotone), or None."""
    if ok(low):
        return low
    probe = low
    while True:  # exponential search first: most targets need far fewer than ``high``
        nxt = min(high, probe * 2)
        if ok(nxt):
            break
        if nxt == high:
            return None
        probe = nxt
    lo, hi = probe, nxt  # ok(hi), not ok(lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi
