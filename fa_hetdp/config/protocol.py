"""The privacy settings of one run of the protocol: :class:`ProtocolConfig`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from fa_hetdp._types import Composition, Mechanism, Placement, Profile
from fa_hetdp.config.center import DispersionCenter, resolve_dispersion_center
from fa_hetdp.config.noise import NoiseShape, resolve_noise_shape
from fa_hetdp.config.rules import ConfigError, check
from fa_hetdp.config.settings import SETTINGS, preset_values

__all__ = ["ProtocolConfig"]


@dataclass(frozen=True)
class ProtocolConfig:
    """Privacy settings of one run of the two-stage protocol (validated on construction).

    Construction runs the declared rules of :mod:`fa_hetdp.config.rules` and raises one
    :class:`~fa_hetdp.config.rules.ConfigError` (a ``PrivacyParameterError``) that lists every
    bad field.

    Attributes
    ----------
    epsilon, delta : float
        Total privacy budget of the run, ``epsilon > 0``, ``0 < delta < 1``.
    mechanism : {"agm", "cgm", "ddg", "skellam"}
        Gaussian noise with the analytic (Thm 2.10 / Alg. 1) or classical (Thm 2.9)
        calibration, or the distributed discrete Gaussian / Skellam on a lattice
        (:class:`~fa_hetdp.dp.mechanisms.DiscreteMechanism`, zCDP accounting).
    placement : {"distributed", "central"}
        Clients add noise shares of variance ``sigma^2/t`` (``N(0, sigma^2/t)`` for the
        Gaussian mechanisms), or the server adds noise of variance ``sigma^2``.
    composition : {"basic", "gdp"}
        How the budget is split over the releases (see :mod:`fa_hetdp.dp.accounting`).
        Default ``"gdp"`` (exact composition: about 2x smaller sigma than ``"basic"``, the
        paper's, at the same total; ``"cgm"`` needs ``"basic"``).
    profile : {"bounded", "paper"}
        Sensitivities; ``"paper"`` drops ``W`` from the weighted stages (not DP; flagged).
    variance_floor : float
        ``v_min`` in ``(0, 1/4]``; weights are ``1/max(s_i^2, v_min) <= W = 1/v_min``.
    extra_i2_noise : bool
        Add the paper's third noise stage ``I2''' = I2'' + N(0, sigma_5^2)`` (Thm 3.13). It
        buys no privacy (``I2''`` is already private post-processing of ``Q''``); it only adds
        error, and is kept as the paper's option.
    min_honest_clients : int or None
        ``t``, the number of clients whose noise shares must suffice. Left out: ``n -
        ceil(gamma n)`` when ``corrupt_fraction`` states ``gamma``, else ``n``. Each client's
        share has variance ``sigma^2/t``, so the ``t`` honest shares alone carry ``sigma^2``
        (``docs/privacy.md``, "Honest shares"). A ``t`` above ``n - ceil(gamma n)`` would count
        a colluder's share as honest and is refused when the plan is made.
    corrupt_fraction : float or None
        ``gamma`` in ``[0, 1)``: the fraction of clients that may collude with the server (the
        ``[secagg]`` setting of a scenario or run). Their noise shares are not counted: the
        noise is calibrated to ``n - ceil(gamma n)`` honest shares. None (default) or 0: no
        colluding clients assumed (every share counted as honest; the result says so).
    split : Mapping[str, float] or None
        Relative budget weight of each release (keys from :data:`RELEASE_NAMES`, values > 0);
        missing keys weigh 1. ``"i2_extra"`` is ignored when ``extra_i2_noise`` is False.
        None (default): the optimal split of :func:`fa_hetdp.protocol.plan.release_weights`
        under ``"gdp"``, equal weights under ``"basic"``.
    statistics : tuple of str or None
        The statistics the user needs (keys of :data:`fa_hetdp.registry.STATISTIC_KEYS`);
        None (default) = all. Releases no needed statistic depends on are not made (no noise,
        no budget) and the statistics they would feed come back as NaN, labelled
        (:data:`fa_hetdp.protocol.plan.RELEASE_DEPENDENCIES`).
    broadcast_bounds : bool
        Calibrate the stage-2 releases to the sensitivities that the public broadcast values
        allow (``||max(c, 1 - c)^2||_2``, times ``W`` for ``Q''``) instead of ``sqrt(d)`` and
        ``W sqrt(d)`` (default True; see ``docs/privacy.md``).
    adaptive_floor : bool
        Choose the variance floor from the data: a stage-0 noisy histogram of the clients'
        within-vector variances (its own share of the budget) picks a low quantile of them,
        never below ``variance_floor``, and ``W = 1/floor`` follows the data
        (:mod:`fa_hetdp.protocol.floor`; ``docs/privacy.md``). Default True (the recommended
        settings are the defaults, issue 18); the paper's preset sets it False
        (``W = 1/v_min``).
    floor_quantile : float
        ``q`` in ``(0, 1/2]`` of the floor rule: at most about ``q n`` clients are floored
        (default 0.1; the rule's margin keeps the count well below, 3 % on digits).
    noise_shape : {"auto", "uniform", "per_coordinate"}
        ``"auto"`` (default) becomes ``"per_coordinate"`` where allowed, else ``"uniform"``,
        when the config is made (the field then holds the value used). With
        ``broadcast_bounds``: ``"uniform"`` gives every coordinate of a stage-2
        release the same sigma, ``sigma_wc ||b||_2/sqrt(d)``; ``"per_coordinate"`` gives
        coordinate ``j`` the sigma ``sigma_wc sqrt(b_j sum_i b_i / d)``,
        ``b = max(c, 1 - c)^2``: the same privacy, the least summed per-coordinate noise
        variance (:meth:`fa_hetdp.protocol.plan.ProtocolPlan.stage2_factors`;
        ``docs/privacy.md``, lever c). Needs ``broadcast_bounds`` and a Gaussian mechanism
        (``"agm"``/``"cgm"``).
    dispersion_center : {"auto", "broadcast", "optimal"}
        ``"auto"`` (default) becomes ``"optimal"`` where allowed (with ``broadcast_bounds``),
        else ``"broadcast"``, when the config is made. ``"broadcast"`` centres the dispersion
        summand at
        ``c = clip(mu', 0, 1)``; ``"optimal"`` at a public ``a`` between ``c`` and 1/2 chosen
        from ``c`` and the plan's sigmas (:func:`fa_hetdp.protocol.center.dispersion_center`):
        smaller bounds ``max(a, 1 - a)^2``, so less noise, and the server subtracts
        ``(c - a)^2``. Any mechanism.
    extra : Mapping[str, Any]
        The declared settings (:data:`fa_hetdp.config.settings.SETTINGS`) that have no field
        here, by name: each given value, else its default, checked by its declared rule. Read
        them with :meth:`setting`; a new setting needs no field (issue 18).
    """

    epsilon: float
    delta: float
    mechanism: Mechanism = "agm"
    placement: Placement = "distributed"
    composition: Composition = "gdp"
    profile: Profile = "bounded"
    variance_floor: float = 0.01
    extra_i2_noise: bool = True
    min_honest_clients: int | None = None
    corrupt_fraction: float | None = None
    split: Mapping[str, float] | None = field(default=None)
    statistics: tuple[str, ...] | None = None
    broadcast_bounds: bool = True
    adaptive_floor: bool = True
    floor_quantile: float = 0.1
    noise_shape: NoiseShape = "auto"
    dispersion_center: DispersionCenter = "auto"
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Every rule is declared in fa_hetdp.config.rules; problems are reported together
        # under the field names (``epsilon``, ``split.q``, ...).
        # (``corrupt_fraction`` None is "not stated": only a stated gamma is checked.)
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        extra = _extra_settings(self.extra)
        object.__setattr__(self, "extra", extra)
        # "auto" levers resolve once, here, to the value the other settings allow (the plan
        # and the result show the resolved value); a bad other setting is reported below.
        values["noise_shape"] = resolve_noise_shape(values)
        values["dispersion_center"] = resolve_dispersion_center(values)
        object.__setattr__(self, "noise_shape", values["noise_shape"])
        object.__setattr__(self, "dispersion_center", values["dispersion_center"])
        if values["corrupt_fraction"] is None:
            del values["corrupt_fraction"]
        check("ProtocolConfig", {**values, **extra}, {})
        if self.split is not None:
            object.__setattr__(self, "split", {k: float(v) for k, v in dict(self.split).items()})
        if self.statistics is not None:
            object.__setattr__(self, "statistics", tuple(self.statistics))

    @classmethod
    def preset(cls, name: str, *, epsilon: float, delta: float, **settings: Any) -> ProtocolConfig:
        """Return the settings of preset ``name`` with ``settings`` on top.

        ``"recommended"`` is the defaults, what ``ProtocolConfig(epsilon, delta)`` and
        :func:`fa_hetdp.private_statistics` run; ``"paper"`` is
        the paper's protocol (:data:`fa_hetdp.config.settings.PRESETS`). A setting of None
        counts as not given; a preset lever the given settings rule out keeps its default
        (:func:`~fa_hetdp.config.settings.preset_values`).

        Examples
        --------
        >>> ProtocolConfig.preset("paper", epsilon=1.0, delta=1e-5).composition
        'basic'
        >>> ProtocolConfig.preset("recommended", epsilon=1.0, delta=1e-5).adaptive_floor
        True
        """
        values = preset_values(name, settings)
        extra = {k: values.pop(k) for k in list(values) if k not in _FIELDS}
        return cls(epsilon=epsilon, delta=delta, **values, extra=extra)

    def setting(self, name: str) -> Any:
        """Return declared setting ``name``: its field, or its value in :attr:`extra`.

        A setting declared in :data:`fa_hetdp.config.settings.SETTINGS` without a field here
        is read this way (its default when not given), so a new setting needs no field.

        Raises
        ------
        KeyError
            ``name`` is neither a field nor a declared setting.

        Examples
        --------
        >>> ProtocolConfig(epsilon=1.0, delta=1e-5).setting("mechanism")
        'agm'
        """
        if name in _FIELDS and name != "extra":
            return getattr(self, name)
        if name in self.extra:
            return self.extra[name]
        raise KeyError(f"unknown setting {name!r}; declared: {', '.join(SETTINGS)}")

    def weight(self, name: str) -> float:
        """Relative budget weight of release ``name`` (1 unless given in ``split``)."""
        if self.split is None:
            return 1.0
        return float(self.split.get(name, 1.0))


_FIELDS = frozenset(f.name for f in fields(ProtocolConfig))


def _extra_settings(given: Mapping[str, Any]) -> dict[str, Any]:
    """Return the declared settings without a field: each given value, else its default.

    Raises
    ------
    ConfigError
        A key of ``given`` is a field or not a declared setting (checked values: by the
        caller, with the rest).
    """
    unknown = sorted(k for k in given if k in _FIELDS or k not in SETTINGS)
    if unknown:
        allowed = ", ".join(n for n in SETTINGS if n not in _FIELDS) or "none declared"
        names = ", ".join(map(repr, unknown))
        raise ConfigError("ProtocolConfig", [("extra", f"unknown {names}; allowed: {allowed}")])
    return {
        s.name: given.get(s.name, s.default)
        for s in SETTINGS.values()
        if s.name not in _FIELDS and s.required is None
    }
