"""The privacy settings of one run of the protocol: :class:`ProtocolConfig`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from fa_hetdp._types import (
    COMPOSITIONS,
    MECHANISMS,
    PLACEMENTS,
    PROFILES,
    RELEASE_NAMES,
    Composition,
    Mechanism,
    Placement,
    Profile,
)
from fa_hetdp.dp.calibration import _check_delta, _check_positive
from fa_hetdp.errors import PrivacyParameterError
from fa_hetdp.stats.exact import check_variance_floor

__all__ = ["ProtocolConfig"]


def _choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise PrivacyParameterError(f"{name} must be one of {allowed}, got {name}={value!r}.")


@dataclass(frozen=True)
class ProtocolConfig:
    """Privacy settings of one run of the two-stage protocol (validated on construction).

    Attributes
    ----------
    epsilon, delta : float
        Total privacy budget of the run, ``epsilon > 0``, ``0 < delta < 1``.
    mechanism : {"agm", "cgm"}
        Calibration (Thm 2.10 / Alg. 1, or Thm 2.9).
    placement : {"distributed", "central"}
        Clients add noise shares ``N(0, sigma^2/t)``, or the server adds ``N(0, sigma^2)``.
    composition : {"basic", "gdp"}
        How the budget is split over the releases (see :mod:`fa_hetdp.dp.accounting`).
    profile : {"bounded", "paper"}
        Sensitivities; ``"paper"`` drops ``W`` from the weighted stages (not DP; flagged).
    variance_floor : float
        ``v_min`` in ``(0, 1/4]``; weights are ``1/max(s_i^2, v_min) <= W = 1/v_min``.
    extra_i2_noise : bool
        Add the paper's third noise stage ``I2''' = I2'' + N(0, sigma_5^2)`` (Thm 3.13). It
        buys no privacy (``I2''`` is already private post-processing of ``Q''``); it only adds
        error, and is kept as the paper's option.
    min_honest_clients : int or None
        ``t``, the number of clients whose noise shares must suffice (default ``n``).
    split : Mapping[str, float] or None
        Relative budget weight of each release (keys from :data:`RELEASE_NAMES`, values > 0);
        missing keys weigh 1. ``"i2_extra"`` is ignored when ``extra_i2_noise`` is False.
    """

    epsilon: float
    delta: float
    mechanism: Mechanism = "agm"
    placement: Placement = "distributed"
    composition: Composition = "basic"
    profile: Profile = "bounded"
    variance_floor: float = 0.01
    extra_i2_noise: bool = True
    min_honest_clients: int | None = None
    split: Mapping[str, float] | None = field(default=None)

    def __post_init__(self) -> None:
        _check_positive("epsilon", self.epsilon)
        _check_delta(self.delta)
        _choice("mechanism", self.mechanism, MECHANISMS)
        _choice("placement", self.placement, PLACEMENTS)
        _choice("composition", self.composition, COMPOSITIONS)
        _choice("profile", self.profile, PROFILES)
        if self.mechanism == "cgm" and self.composition == "gdp":
            raise PrivacyParameterError(
                "composition='gdp' calibrates with the exact Gaussian (AGM) condition; "
                "use mechanism='agm' with it, or composition='basic' with mechanism='cgm'."
            )
        check_variance_floor(self.variance_floor)
        if not isinstance(self.extra_i2_noise, bool):
            raise PrivacyParameterError(
                f"extra_i2_noise must be True or False, got {self.extra_i2_noise!r}."
            )
        if self.min_honest_clients is not None:
            if isinstance(self.min_honest_clients, bool) or not isinstance(
                self.min_honest_clients, (int, np.integer)
            ):
                raise PrivacyParameterError(
                    "min_honest_clients must be an integer >= 1 or None, got "
                    f"min_honest_clients={self.min_honest_clients!r}."
                )
            if self.min_honest_clients < 1:
                raise PrivacyParameterError(
                    "min_honest_clients must be >= 1 (and <= n), got "
                    f"min_honest_clients={self.min_honest_clients}."
                )
        if self.split is not None:
            clean: dict[str, float] = {}
            for key, value in dict(self.split).items():
                if key not in RELEASE_NAMES:
                    raise PrivacyParameterError(
                        f"split has an unknown release {key!r}; allowed: {RELEASE_NAMES}."
                    )
                clean[key] = _check_positive(f"split[{key!r}]", value)
            object.__setattr__(self, "split", clean)

    def weight(self, name: str) -> float:
        """Relative budget weight of release ``name`` (1 unless given in ``split``)."""
        if self.split is None:
            return 1.0
        return float(self.split.get(name, 1.0))
