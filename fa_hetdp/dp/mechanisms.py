"""The noise-mechanism seam: a noise distribution together with its calibration rule.

A :class:`NoiseMechanism` answers everything the protocol, the accountant, the
secure-aggregation encoding and the error metrics need to know about the noise of a release:

- :meth:`~NoiseMechanism.calibrate` -- the noise scale of a release of L2 sensitivity
  ``Delta`` for an ``(epsilon_k, delta_k)`` share (basic composition), and
  :meth:`~NoiseMechanism.calibrate_gdp` for a Gaussian-DP ``mu_k`` share (exact composition,
  only where :attr:`~NoiseMechanism.compositions` lists ``"gdp"``);
- :meth:`~NoiseMechanism.sample` -- draws with the caller's :class:`numpy.random.Generator`,
  given a per-coordinate scale array and a shape (a leading repeat axis is allowed);
- :meth:`~NoiseMechanism.variance` -- the noise variance per coordinate for a scale;
- :meth:`~NoiseMechanism.tail_bound` -- the per-coordinate bound ``|noise| <= b`` that fails
  with probability at most a stated ``p`` (the secure-aggregation fixed-point encoding);
- :meth:`~NoiseMechanism.event` -- the privacy event the accountant composes (in the spirit
  of dp-accounting's ``dp_event`` records: :class:`GaussianEvent` with noise multiplier
  ``sigma/Delta``).

The registry is keyed by the ``mechanism`` setting of
:class:`~fa_hetdp.config.protocol.ProtocolConfig`. The first entries are Gaussian noise with
the analytic (``"agm"``, paper Thm 2.10) and the classical (``"cgm"``, paper Thm 2.9)
calibration. A further mechanism (a discrete Gaussian, Skellam) is one new module with a
:class:`NoiseMechanism` subclass plus one :func:`register` line in :data:`_REGISTRY` below
(and its name in :data:`fa_hetdp._types.Mechanism`, which the tests check against
:func:`mechanism_names`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt
from scipy.special import ndtri

from fa_hetdp._types import COMPOSITIONS, MECHANISMS, Composition, FloatArray
from fa_hetdp.dp.calibration import _check_positive, calibrate_sigma, cgm_sigma
from fa_hetdp.errors import PrivacyParameterError

__all__ = [
    "GaussianEvent",
    "GaussianMechanism",
    "NoiseMechanism",
    "PrivacyEvent",
    "get_mechanism",
    "mechanism_names",
]


@dataclass(frozen=True)
class GaussianEvent:
    """One Gaussian release as the accountant sees it (dp-accounting's ``GaussianDpEvent``).

    Attributes
    ----------
    sigma : float
        Standard deviation of the noise that the release received (``0`` if none arrived).
    sensitivity : float
        L2 sensitivity ``Delta`` of the release.
    """

    sigma: float
    sensitivity: float

    @property
    def noise_multiplier(self) -> float:
        """``sigma/Delta``."""
        return self.sigma / self.sensitivity

    @property
    def mu(self) -> float:
        """Gaussian-DP parameter ``mu = Delta/sigma`` (``inf`` without noise; Dong-Roth-Su)."""
        if self.sigma <= 0.0:
            return math.inf
        return self.sensitivity / self.sigma


PrivacyEvent = GaussianEvent
"""The events the accountant composes (a union once a mechanism brings a new kind)."""


class NoiseMechanism(ABC):
    """A noise distribution with its calibration rule (see the module docstring).

    Attributes
    ----------
    name : str
        The registry key (the ``mechanism`` setting).
    description : str
        Words for labels and docs.
    compositions : tuple[str, ...]
        The budget compositions the calibration supports (``"basic"``, ``"gdp"``).
    """

    name: str
    description: str
    compositions: tuple[str, ...]

    def supports(self, composition: Composition | str) -> bool:
        """Whether the budget can be split with ``composition`` under this mechanism."""
        return composition in self.compositions

    @abstractmethod
    def calibrate(self, epsilon: float, delta: float, sensitivity: float) -> float:
        """Noise scale making one release of L2 ``sensitivity`` ``(epsilon, delta)``-DP."""

    def calibrate_gdp(self, mu: float, sensitivity: float) -> float:
        """Noise scale making one release of L2 ``sensitivity`` ``mu``-GDP.

        Raises
        ------
        PrivacyParameterError
            If the mechanism does not support ``composition="gdp"``.
        """
        raise PrivacyParameterError(
            f"composition='gdp' is not available with mechanism={self.name!r}; it supports "
            f"{self.compositions}."
        )

    def is_baseline(self, epsilon: float) -> bool:
        """Whether a calibration at per-release ``epsilon`` is only a labelled baseline."""
        del epsilon
        return False

    @abstractmethod
    def sample(
        self,
        scale: float | npt.ArrayLike,
        shape: int | tuple[int, ...],
        *,
        rng: np.random.Generator,
    ) -> FloatArray:
        """Draw noise of the given per-coordinate ``scale`` (broadcast against ``shape``)."""

    @abstractmethod
    def variance(self, scale: float | npt.ArrayLike) -> FloatArray:
        """Variance of one noise coordinate of the given ``scale``."""

    @abstractmethod
    def tail_bound(self, scale: float | npt.ArrayLike, failure_probability: float) -> FloatArray:
        """Per-coordinate ``b`` with ``P(|noise| > b) <= failure_probability``."""

    @abstractmethod
    def event(self, scale: float, sensitivity: float) -> PrivacyEvent:
        """Return the privacy event of a release of L2 ``sensitivity`` with noise ``scale``."""


class GaussianMechanism(NoiseMechanism):
    """Gaussian noise ``N(0, sigma^2)`` per coordinate; the scale is ``sigma``.

    Parameters
    ----------
    calibration : {"agm", "cgm"}
        ``"agm"``: the analytic Gaussian mechanism (paper Thm 2.10 / Alg. 1; exact, also for
        Gaussian-DP). ``"cgm"``: the classical Gaussian mechanism (paper Thm 2.9), a DP
        guarantee only for ``epsilon < 1`` and the paper's basic-composition baseline.
    """

    def __init__(self, calibration: str) -> None:
        if calibration not in ("agm", "cgm"):
            raise PrivacyParameterError(
                f"Gaussian calibration must be 'agm' or 'cgm', got {calibration!r}."
            )
        self.name = calibration
        if calibration == "agm":
            self.description = "Gaussian noise, analytic calibration (Thm 2.10)"
            self.compositions = ("basic", "gdp")
        else:
            self.description = (
                "Gaussian noise, classical calibration (Thm 2.9): the paper's "
                "basic-composition baseline, not an exact Gaussian calibration"
            )
            self.compositions = ("basic",)

    def calibrate(self, epsilon: float, delta: float, sensitivity: float) -> float:
        """``sigma`` of Thm 2.10 (AGM) or Thm 2.9 (CGM, without the baseline warning)."""
        if self.name == "cgm":
            return cgm_sigma(epsilon, delta, sensitivity)  # Thm 2.9
        return calibrate_sigma(epsilon, delta, sensitivity, "agm")  # Thm 2.10

    def calibrate_gdp(self, mu: float, sensitivity: float) -> float:
        """``sigma = Delta/mu`` (a Gaussian with ``Delta/sigma = mu`` is ``mu``-GDP)."""
        if self.name != "agm":
            return super().calibrate_gdp(mu, sensitivity)
        return _check_positive("sensitivity", sensitivity) / _check_positive("mu", mu)

    def is_baseline(self, epsilon: float) -> bool:
        """CGM at ``epsilon >= 1`` is not a DP guarantee (Thm 2.9 needs ``epsilon < 1``)."""
        return self.name == "cgm" and epsilon >= 1.0

    def sample(
        self,
        scale: float | npt.ArrayLike,
        shape: int | tuple[int, ...],
        *,
        rng: np.random.Generator,
    ) -> FloatArray:
        """``rng.standard_normal(shape) * scale`` (one generator call, in this order)."""
        out: FloatArray = rng.standard_normal(shape) * np.asarray(scale, dtype=np.float64)
        return out

    def variance(self, scale: float | npt.ArrayLike) -> FloatArray:
        """``sigma^2``."""
        s = np.asarray(scale, dtype=np.float64)
        return np.asarray(s * s, dtype=np.float64)

    def tail_bound(self, scale: float | npt.ArrayLike, failure_probability: float) -> FloatArray:
        """``sigma z`` with ``z = Phi^{-1}(1 - p/2)``: ``P(|N(0, sigma^2)| > sigma z) = p``."""
        p = float(failure_probability)
        if not 0.0 < p < 1.0:
            raise PrivacyParameterError(
                f"failure_probability must be in (0, 1), got failure_probability={p!r}."
            )
        z = -float(ndtri(0.5 * p))
        return np.asarray(np.asarray(scale, dtype=np.float64) * z, dtype=np.float64)

    def event(self, scale: float, sensitivity: float) -> GaussianEvent:
        """:class:`GaussianEvent` with noise multiplier ``sigma/Delta``."""
        return GaussianEvent(sigma=float(scale), sensitivity=float(sensitivity))


_REGISTRY: Final[Mapping[str, NoiseMechanism]] = {
    "agm": GaussianMechanism("agm"),
    "cgm": GaussianMechanism("cgm"),
}
"""Every registered mechanism by its ``mechanism`` setting (add a line per new module)."""

if tuple(_REGISTRY) != MECHANISMS:  # pragma: no cover - a registration mistake
    raise RuntimeError(
        f"registered mechanisms {tuple(_REGISTRY)} differ from fa_hetdp._types.MECHANISMS "
        f"{MECHANISMS}; add the new name to fa_hetdp._types.Mechanism."
    )
if any(c not in COMPOSITIONS for m in _REGISTRY.values() for c in m.compositions):
    raise RuntimeError("a registered mechanism lists an unknown composition")  # pragma: no cover


def mechanism_names() -> tuple[str, ...]:
    """Names of the registered mechanisms (the allowed ``mechanism`` settings)."""
    return tuple(_REGISTRY)


def get_mechanism(name: str) -> NoiseMechanism:
    """Return the registered mechanism called ``name``.

    Raises
    ------
    PrivacyParameterError
        With the allowed names, if ``name`` is not registered.
    """
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise PrivacyParameterError(
            f"mechanism must be one of {mechanism_names()}, got mechanism={name!r}"
        ) from None
