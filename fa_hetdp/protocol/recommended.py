"""The recommended settings: what the Python API and the planner use when told nothing else.

One place defines them. :func:`fa_hetdp.private_statistics` runs, and
:func:`fa_hetdp.plan_accuracy`, :func:`~fa_hetdp.accuracy.inverses.min_clients` and
:func:`~fa_hetdp.accuracy.inverses.min_epsilon` plan, :func:`recommended_config` of the settings
they were given, so a plan made with nothing but ``n, d`` and the budget is the plan of the run
made with nothing but the data and the budget.

The recommended settings are :class:`~fa_hetdp.config.protocol.ProtocolConfig`'s defaults
(issue 18: one set of defaults): gdp composition, the default optimal split, broadcast-based
stage-2 bounds, the adaptive variance floor, per-coordinate stage-2 noise and the optimal
dispersion centre where the mechanism allows them (``"auto"``). The paper's settings are the
``"paper"`` preset; a scenario that needs other settings states them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.config.settings import PRESETS

__all__ = ["RECOMMENDED_SETTINGS", "recommended_config"]

RECOMMENDED_SETTINGS: Final[Mapping[str, Any]] = PRESETS["recommended"]
"""The fields where the recommended settings differ from ProtocolConfig's defaults: none
since issue 18 (the ``recommended`` of each declared setting,
:data:`fa_hetdp.config.settings.PRESETS`). Why each default is what it is:

``adaptive_floor = true``: on all 1797 digits clients it cuts the error of ``mu_bar'`` and ``Q''``
several-fold (``benchmarks/README.md``, "Goal figures").

``noise_shape = "auto"`` (per coordinate where allowed): the stage-2 sigma of coordinate ``j``
follows its own broadcast bound (the least summed per-coordinate noise variance at the same privacy;
lever c in ``docs/privacy.md``). It needs ``broadcast_bounds`` and a Gaussian mechanism: when the
given settings turn either off and do not name a ``noise_shape``, :class:`ProtocolConfig` makes it
``"uniform"``.

``dispersion_center = "auto"`` (optimal where allowed): clients centre the dispersion summand at a
public point between ``clip(mu', 0, 1)`` and 1/2 (:mod:`fa_hetdp.protocol.center`); on all 1797
digits clients the per-coordinate RMSE of ``D''`` falls from about 29 % to about 23 % of its mean
(``benchmarks/README.md``, "Goal figures"). It needs ``broadcast_bounds`` (any mechanism): when the
given settings turn that off and do not name a ``dispersion_center``, :class:`ProtocolConfig`
resolves it to ``"broadcast"``.

The split stays ProtocolConfig's closed form: the split that minimises the planner's full error
model (``benchmarks/planned_split.py``) was measured on the goal figures and did not improve the
worst one (per-coordinate ``D''``: 31.2 % -> 31.3 %), so it is not part of these settings."""


def recommended_config(*, epsilon: float, delta: float, **settings: Any) -> ProtocolConfig:
    """Return the recommended :class:`ProtocolConfig` with the given settings on top.

    Parameters
    ----------
    epsilon, delta : float
        The run's privacy budget.
    **settings
        Any other ProtocolConfig field; a value of None counts as not given (the recommended
        or default value applies).

    Returns
    -------
    ProtocolConfig
        Validated (a bad field raises :class:`~fa_hetdp.config.rules.ConfigError`).

    Examples
    --------
    >>> recommended_config(epsilon=1.0, delta=1e-5).adaptive_floor
    True
    >>> recommended_config(epsilon=1.0, delta=1e-5, adaptive_floor=False).adaptive_floor
    False
    >>> recommended_config(epsilon=1.0, delta=1e-5).noise_shape
    'per_coordinate'
    >>> recommended_config(epsilon=1.0, delta=1e-5, mechanism="ddg").noise_shape
    'uniform'
    >>> recommended_config(epsilon=1.0, delta=1e-5, mechanism="ddg").dispersion_center
    'optimal'
    >>> recommended_config(epsilon=1.0, delta=1e-5, broadcast_bounds=False).dispersion_center
    'broadcast'
    """
    return ProtocolConfig.preset("recommended", epsilon=epsilon, delta=delta, **settings)
