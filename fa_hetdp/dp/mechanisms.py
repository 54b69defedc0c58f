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
:class:`~fa_hetdp.config.protocol.ProtocolConfig`: Gaussian noise with the analytic
(``"agm"``, paper Thm 2.10) and the classical (``"cgm"``, paper Thm 2.9) calibration, and the
distributed discrete mechanisms ``"ddg"`` (discrete Gaussian shares, Kairouz, Liu & Steinke,
ICML 2021, :class:`DiscreteGaussianMechanism`) and ``"skellam"`` (Skellam shares, Agarwal,
Kairouz & Liu, NeurIPS 2021, :class:`SkellamMechanism`): sibling subclasses of
:class:`DiscreteMechanism`, which holds what they share (the lattice, the dither, the zCDP
calibration and conversion) while each holds its own sampler, tail bound and accounting
factor. A new mechanism is a subclass (of :class:`DiscreteMechanism` for a distributed
discrete one) plus its registration, :func:`register_mechanism`; config validation, the plan,
the accountant and the report read the registry. A built-in one is also listed in
:data:`fa_hetdp._types.Mechanism` (the static type), checked at import.

Discrete mechanisms in the protocol (:class:`DiscreteMechanism`). A client's contribution is
carried on a public lattice ``gamma Z`` per coordinate (:mod:`fa_hetdp.dp.lattice`):
:meth:`~NoiseMechanism.choose_lattice` picks the power-of-two steps for the stage's share
scales and the ring, and :meth:`~NoiseMechanism.add_share` returns
``gamma (R(v/gamma) + Z)`` -- randomized rounding plus the exact integer share ``Z``
(``N_Z(0, (s/gamma)^2)`` or Skellam of that variance) -- so the encoding at scale
``1/gamma`` puts the integers ``R + Z`` themselves in the ring. Randomized rounding of
box-bounded values moves a changed coordinate by at most ``ceil(|v - v'|/gamma)``, so the
integer sensitivity exceeds ``Delta/gamma`` by at most the factor
:data:`~fa_hetdp.dp.lattice.SENSITIVITY_INFLATION` (``1 + 2^-10``, for the steps
:func:`~fa_hetdp.dp.lattice.choose_lattice` allows). With ``s/gamma >= 16`` per share, the
DDG sum's ``tau`` (KLS 2021 Thm 1) is below ``10 m exp(-pi^2 256) < 1e-1090`` for any
``m < 2^63`` shares: the sum's RDP is ``alpha rho`` with
``rho = (1 + 2^-10)^2 (Delta/sigma)^2/2`` (Prop. 14, Eq. (17)), ``sigma`` the summed noise in
data units. Skellam's RDP (AKL 2021 Thm 3.5, with ``Delta_1 <= Delta_2^2`` for integer vectors
and ``gamma <= sigma/16``) is at most ``(1 + 7/512)`` times that. Releases compose in zCDP
(add the ``rho``) and convert to ``(epsilon, delta)`` with Canonne-Kamath-Steinke 2020 Prop. 12
(:mod:`fa_hetdp.dp.discrete_accounting`).

:meth:`~NoiseMechanism.sample` (the in-process summed paths, no per-client values) draws the
same mechanism with *subtractive dither*: ``gamma (U - 1/2 + Z)``, ``gamma`` from
:func:`~fa_hetdp.dp.lattice.lattice_step` and ``U`` uniform on ``[0, 1)``. Added to ``v`` it
has the law of ``gamma (round(v/gamma + u) - u + Z)`` with a public uniform ``u`` (rounding
error uniform on ``[-1/2, 1/2)`` and independent of ``v``, Schuchman's condition): the
discrete mechanism on integers given ``u``, post-processed by ``- u``, with the same
sensitivity bound, so the same accounting covers it.

In process the summed noise of ``n`` shares is drawn in one call at the total scale (the
protocol's summed path): one dither instead of ``n`` (the rounding noise's variance
``n gamma^2/12 <= sigma^2/3072`` is under-simulated) and, for ``"ddg"``, one discrete
Gaussian of the total variance for the sum of ``n`` (indistinguishable at ``tau <
1e-1090``). ``noise_draw="per_client"`` and the clients' own path draw every share.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt
from scipy.special import ndtri

from fa_hetdp._types import COMPOSITIONS, MECHANISMS, Composition, FloatArray, IntArray
from fa_hetdp.dp.calibration import (
    _check_positive,
    achieved_delta,
    achieved_epsilon,
    calibrate_sigma,
    cgm_sigma,
)
from fa_hetdp.dp.discrete import (
    as_rational_variance,
    sample_discrete_gaussian,
    sample_skellam,
)
from fa_hetdp.dp.discrete_accounting import RDP_ORDERS, rdp_delta, zcdp_epsilon, zcdp_rho_for
from fa_hetdp.dp.lattice import (
    ROUNDING_VARIANCE_BOUND,
    SENSITIVITY_INFLATION,
    Lattice,
    choose_lattice,
    discretise,
    lattice_step,
)
from fa_hetdp.errors import PrivacyParameterError

__all__ = [
    "DiscreteEvent",
    "DiscreteGaussianMechanism",
    "DiscreteMechanism",
    "GaussianEvent",
    "GaussianMechanism",
    "NoiseMechanism",
    "PrivacyEvent",
    "SkellamMechanism",
    "get_mechanism",
    "mechanism_names",
    "register_mechanism",
    "unregister_mechanism",
]

SKELLAM_EXTRA: Final = 1.0 + 7.0 / 512.0
"""Skellam's RDP over the Gaussian's at most (``(2 alpha + 5)/(4 * 256) <= alpha 7/1024``)."""


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


@dataclass(frozen=True)
class DiscreteEvent:
    """One release of a distributed discrete mechanism as the accountant sees it.

    Attributes
    ----------
    sigma : float
        Standard deviation (data units) of the summed noise that arrived (``0`` if none).
    sensitivity : float
        L2 sensitivity ``Delta`` of the real-valued release.
    factor : float
        ``rho = factor (Delta/sigma)^2/2``: the rounding's sensitivity inflation squared,
        times Skellam's extra term (module docstring).
    """

    sigma: float
    sensitivity: float
    factor: float

    @property
    def rho(self) -> float:
        """Return the zCDP ``rho`` (``inf`` without noise): RDP <= ``alpha rho`` at every order."""
        if self.sigma <= 0.0:
            return math.inf
        return 0.5 * self.factor * (self.sensitivity / self.sigma) ** 2

    @property
    def mu(self) -> float:
        """``sqrt(2 rho)``: the Gaussian with the same zCDP (``inf`` without noise)."""
        return math.sqrt(2.0 * self.rho)


PrivacyEvent = GaussianEvent | DiscreteEvent
"""The events the accountant composes."""


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
    accounting: str = "Gaussian DP (Dong-Roth-Su Cor. 3.3), exact for Gaussian noise"
    """How :func:`~fa_hetdp.dp.accounting.privacy_spent` composes and converts the releases."""

    @abstractmethod
    def noise_label(self, variance: str, *, share: bool = False) -> str:
        """Words for the noise of the given ``variance`` expression, e.g. ``"sigma^2/t"``.

        ``share``: the words for a client's share (distributed placement), where a discrete
        mechanism rounds the contribution onto its lattice (:meth:`add_share`).
        """

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

    def total_mu(self, epsilon: float, delta: float) -> float:
        """Total ``mu`` that ``composition="gdp"`` splits: ``1/sigma`` of the AGM (Thm 2.10)."""
        return 1.0 / calibrate_sigma(epsilon, delta, 1.0, "agm")

    def guarantee(self, mu: float, *, delta: float, epsilon: float) -> tuple[float, float]:
        """``(epsilon at delta, delta at epsilon)`` of composed releases with total ``mu``.

        Gaussian DP (Thm 2.10 with ``sigma/Delta = 1/mu``); the discrete mechanisms override
        it with the zCDP conversion of ``rho = mu^2/2``.
        """
        return achieved_epsilon(1.0, delta, mu), achieved_delta(1.0, epsilon, mu)

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

    def choose_lattice(
        self,
        scale: npt.ArrayLike,
        bound: npt.ArrayLike,
        *,
        n: int,
        modulus_bits: int,
        failure_probability: float,
        move_bound: npt.ArrayLike | None = None,
    ) -> Lattice | None:
        """Return the lattice a client's contribution is carried on; ``None``: real values.

        Only the discrete mechanisms have one (:class:`DiscreteMechanism`); the others'
        noisy contributions are rounded by the fixed-point encoding.
        """
        del scale, bound, n, modulus_bits, failure_probability, move_bound
        return None

    def add_share(
        self,
        values: npt.ArrayLike,
        scale: float | npt.ArrayLike,
        *,
        rng: np.random.Generator,
        lattice: Lattice | None = None,
    ) -> FloatArray:
        """One client's contribution plus its noise share of ``scale``: ``values + sample``."""
        del lattice
        v = np.asarray(values, dtype=np.float64)
        out: FloatArray = v + self.sample(scale, v.shape, rng=rng)
        return out

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

    def noise_label(self, variance: str, *, share: bool = False) -> str:
        """``N(0, <variance>)``."""
        return f"N(0, {variance})"

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


class DiscreteMechanism(NoiseMechanism):
    """The base of the distributed discrete mechanisms: what they share, and their hooks.

    The scale is the noise standard deviation in data units, as for the Gaussian. A client's
    share goes onto its contribution's lattice (:meth:`add_share`, the integer pipeline);
    :meth:`sample` draws ``gamma (U - 1/2 + Z)`` on the lattice of
    :func:`~fa_hetdp.dp.lattice.lattice_step` (the dithered law; module docstring).
    ``composition="gdp"`` composes the releases' zCDP (not Gaussian DP) and ``"basic"`` gives
    each release its own ``(epsilon_k, delta_k)`` through the same zCDP conversion.

    A subclass is one mechanism (the pattern of diffprivlib: the base holds the lattice, the
    dither, the zCDP calibration and conversion; the subclass its law). It sets the class
    attributes :attr:`name`, :attr:`description`, :attr:`accounting`, :attr:`factor`,
    :attr:`law` and :attr:`integers`, and implements

    - :meth:`sample_integers` -- its exact integer sampler;
    - :meth:`tail_probability` -- a bound on the tail of a sum of its shares (sizes the ring
      and each client's stated bound through :meth:`integer_tail` and :meth:`sum_tail`,
      which search on it unless the subclass has a closed form);

    and is registered with :func:`register_mechanism`. Its :attr:`factor` is its accounting:
    the release of a sum with noise ``sigma`` (data units) is ``rho``-zCDP with
    ``rho = factor (Delta/sigma)^2/2`` whenever each share has at least
    :data:`~fa_hetdp.dp.lattice.MIN_SHARE_UNITS` lattice steps of noise (its subclass states
    why).
    """

    factor: float
    """``rho = factor (Delta/sigma)^2/2`` of a release (the accounting and calibration hook)."""
    law: str
    """The integer law of variance ``v`` in words for labels, e.g. ``"N_Z(0, v)"``."""
    integers: str
    """The integers' name for labels, e.g. ``"discrete Gaussian"``."""
    compositions: tuple[str, ...] = ("basic", "gdp")

    @abstractmethod
    def sample_integers(
        self, variance: float, count: int | tuple[int, ...], *, rng: np.random.Generator
    ) -> IntArray:
        """Draw ``count`` integer shares of ``variance`` (lattice units, a short rational).

        ``variance`` comes from :func:`~fa_hetdp.dp.discrete.as_rational_variance`; an exact
        sampler draws that law exactly from the generator's words.
        """

    @abstractmethod
    def tail_probability(self, variance: float, shares: int, h: float) -> float:
        """Bound on ``P(|Z_1 + ... + Z_shares| > h)`` for shares of ``variance`` (lattice units)."""

    def integer_tail(self, units: float, failure_probability: float) -> float:
        """``h`` with ``P(|Z| > h) <= p`` for one share of scale ``units`` (lattice steps).

        Starts at the subgaussian ``units sqrt(2 ln(2/p))`` and grows by 10 % until
        :meth:`tail_probability` holds (a closed form may override it).
        """
        if units <= 0.0:
            return 0.0
        p = float(failure_probability)
        h = units * math.sqrt(2.0 * math.log(2.0 / p))
        while self.tail_probability(units * units, 1, h) > p:
            h *= 1.1
        return h

    def sum_tail(self, units: float, shares: int, wrap_probability: float) -> float:
        """``H`` with ``P(|Z_1 + ... + Z_n| > H) <= q`` for ``n = shares`` integer shares.

        Each share is drawn at the variance ``v = units^2`` rounded up
        (:func:`~fa_hetdp.dp.discrete.as_rational_variance`). Starts at the subgaussian
        ``sqrt(2 n v ln(2/q))``, grows until :meth:`tail_probability` holds, and bisects to
        the smallest such value within a relative ``2^-20`` (a closed form may override it).
        """
        if units <= 0.0 or shares < 1:
            return 0.0
        q = float(wrap_probability)
        v = float(as_rational_variance(units * units))
        h = math.sqrt(2.0 * shares * v * math.log(2.0 / q))
        low = h
        while self.tail_probability(v, shares, h) > q:
            low, h = h, h * 1.5
        if low == h:
            return h
        for _ in range(40):  # bisect [low, h]: the bound holds at h
            mid = 0.5 * (low + h)
            if self.tail_probability(v, shares, mid) > q:
                low = mid
            else:
                h = mid
            if h - low <= h * 2.0**-20:
                break
        return h

    def noise_label(self, variance: str, *, share: bool = False) -> str:
        """``Z``, the exact integer noise of ``<variance>/gamma^2``, on the lattice ``gamma Z``.

        A share (``share=True``): ``Z`` added to the contribution rounded at random onto the
        lattice (what the clients send, :mod:`fa_hetdp.dp.lattice`); otherwise the dithered
        ``gamma (U - 1/2 + Z)`` of the summed paths and the server's central noise.
        """
        law, kind = self.law, self.integers
        if share:
            return (
                f"{law} {kind} integers, v = ({variance})/gamma^2, to its contribution rounded "
                "at random onto the lattice gamma Z (in process, the summed path draws the "
                "same law dithered: gamma (U - 1/2 + Z))"
            )
        return (
            f"gamma (U - 1/2 + {law}), v = ({variance})/gamma^2 ({kind} integers on the "
            "lattice gamma Z, dithered)"
        )

    def total_mu(self, epsilon: float, delta: float) -> float:
        """``sqrt(2 rho)`` of the largest ``rho`` whose zCDP is ``(epsilon, delta)``-DP."""
        return math.sqrt(2.0 * zcdp_rho_for(epsilon, delta))

    def guarantee(self, mu: float, *, delta: float, epsilon: float) -> tuple[float, float]:
        """Convert zCDP ``rho = mu^2/2`` by CKS 2020 Prop. 12 (both readings)."""
        rho = 0.5 * mu * mu
        orders = np.asarray(RDP_ORDERS, dtype=np.float64)
        return zcdp_epsilon(rho, delta), rdp_delta(orders, orders * rho, epsilon)

    def calibrate(self, epsilon: float, delta: float, sensitivity: float) -> float:
        """``sigma`` whose release alone is ``(epsilon, delta)``-DP through its zCDP ``rho``."""
        return self.calibrate_gdp(self.total_mu(epsilon, delta), sensitivity)

    def calibrate_gdp(self, mu: float, sensitivity: float) -> float:
        """``sigma`` with ``rho = factor (Delta/sigma)^2/2 = mu^2/2``."""
        delta_f = _check_positive("sensitivity", sensitivity)
        return delta_f * math.sqrt(self.factor) / _check_positive("mu", mu)

    def sample(
        self,
        scale: float | npt.ArrayLike,
        shape: int | tuple[int, ...],
        *,
        rng: np.random.Generator,
    ) -> FloatArray:
        """Draw ``gamma (U - 1/2 + Z)`` per coordinate (exact integer ``Z``, ``gamma`` public)."""
        s = np.broadcast_to(np.asarray(scale, dtype=np.float64), shape)
        gamma = lattice_step(s)
        out = np.zeros(s.shape, dtype=np.float64)
        dither = rng.random(s.shape) - 0.5
        for value in np.unique(s[s > 0.0]):
            where = s == value
            step = float(gamma[where][0])
            # >= 256 lattice steps squared, rounded up to a short rational (every kind): a
            # scale computed from a broadcast that differs in its last bits draws the same
            # integers (Skellam's Poisson sampler is continuous in its mean).
            variance_units = float(as_rational_variance((float(value) / step) ** 2))
            count = int(np.count_nonzero(where))
            z = self.sample_integers(variance_units, count, rng=rng)
            out[where] = step * (dither[where] + z)
        return out

    def variance(self, scale: float | npt.ArrayLike) -> FloatArray:
        """Return ``s^2 (1 + 2^-16 + 2^-10)``: an upper bound on the error's variance, any path.

        ``s`` is the summed noise's scale of the shares that arrived (``s^2 = sum s_i^2``).
        Noise: the integer share's variance is at most ``v`` (``Var N_Z(0, v) <= v``,
        Skellam's is ``v``; a subclass whose is larger overrides this), drawn at ``v`` rounded
        up within a relative ``2^-16`` (:func:`~fa_hetdp.dp.discrete.as_rational_variance`).
        Rounding: on the integer pipeline each client's randomized rounding has variance at
        most ``gamma_i^2/4`` with ``gamma_i <= s_i/16``
        (:func:`~fa_hetdp.dp.lattice.choose_lattice` never coarsens beyond it), so the sum's
        is at most ``s^2/1024``; the dithered draw (:meth:`sample`) adds
        ``gamma^2/12 <= s^2/3072``. (The dithered ``s^2 + gamma^2/12`` alone could
        under-state the integer pipeline's error by up to a relative ``2^-10``.)
        """
        s = np.asarray(scale, dtype=np.float64)
        out: FloatArray = s * s * (1.0 + 2.0**-16 + ROUNDING_VARIANCE_BOUND)
        return out

    def tail_bound(self, scale: float | npt.ArrayLike, failure_probability: float) -> FloatArray:
        """``gamma (1/2 + h)``, ``h`` the integer noise's tail at ``p`` (:meth:`integer_tail`)."""
        p = float(failure_probability)
        if not 0.0 < p < 1.0:
            raise PrivacyParameterError(
                f"failure_probability must be in (0, 1), got failure_probability={p!r}."
            )
        s = np.asarray(scale, dtype=np.float64)
        lattice_step(s)  # refuses a negative or non-finite scale
        out = np.zeros(s.shape, dtype=np.float64)
        for value in np.unique(s[s > 0.0]):  # one tail per distinct scale (a stage has few)
            step = float(lattice_step(value))
            out[s == value] = step * (0.5 + self.integer_tail(float(value) / step, p))
        return out

    def choose_lattice(
        self,
        scale: npt.ArrayLike,
        bound: npt.ArrayLike,
        *,
        n: int,
        modulus_bits: int,
        failure_probability: float,
        move_bound: npt.ArrayLike | None = None,
    ) -> Lattice:
        """Return the clients' lattice for shares of ``scale`` (:func:`.lattice.choose_lattice`)."""
        return choose_lattice(
            self,
            scale,
            bound,
            n=n,
            modulus_bits=modulus_bits,
            failure_probability=failure_probability,
            move_bound=move_bound,
        )

    def add_share(
        self,
        values: npt.ArrayLike,
        scale: float | npt.ArrayLike,
        *,
        rng: np.random.Generator,
        lattice: Lattice | None = None,
    ) -> FloatArray:
        """On ``lattice``: ``gamma (R(v/gamma) + Z)`` (the integer pipeline); else the dithered law.

        Raises
        ------
        PrivacyParameterError
            If ``scale`` is not the lattice's share scale.
        """
        if lattice is None:
            return super().add_share(values, scale, rng=rng)
        v = np.asarray(values, dtype=np.float64)
        if not np.array_equal(np.broadcast_to(scale, v.shape), lattice.units * lattice.gamma):
            raise PrivacyParameterError(
                "the noise share's scale differs from the lattice's: choose the lattice for "
                "this stage's share scale (protocol.client.stage_lattice)."
            )
        return discretise(self, v, lattice, rng=rng)

    def event(self, scale: float, sensitivity: float) -> DiscreteEvent:
        """:class:`DiscreteEvent`: ``rho = factor (Delta/sigma)^2/2`` for the summed ``sigma``."""
        return DiscreteEvent(sigma=float(scale), sensitivity=float(sensitivity), factor=self.factor)


class DiscreteGaussianMechanism(DiscreteMechanism):
    """``"ddg"``: discrete Gaussian shares ``N_Z(0, v)`` (Kairouz, Liu & Steinke, ICML 2021).

    Accounting: with ``s/gamma >= 16`` per share the sum's ``tau`` (KLS 2021 Thm 1) is below
    ``1e-1090``, so its RDP is ``alpha rho`` with ``rho`` of the rounding-inflated Gaussian
    (Prop. 14, Eq. (17)): :attr:`factor` is the inflation squared. Tails: a discrete Gaussian
    is ``v``-subgaussian (Canonne, Kamath & Steinke 2020) and subgaussian parameters add.
    """

    name = "ddg"
    description = "distributed discrete Gaussian (Kairouz-Liu-Steinke 2021)"
    accounting = (
        "zCDP of the sum of discrete Gaussians (KLS 2021 Prop. 14), composed and "
        "converted by CKS 2020 Prop. 12"
    )
    factor = SENSITIVITY_INFLATION**2
    law = "N_Z(0, v)"
    integers = "discrete Gaussian"

    def sample_integers(
        self, variance: float, count: int | tuple[int, ...], *, rng: np.random.Generator
    ) -> IntArray:
        """Draw with CKS 2020's exact sampler (:func:`.discrete.sample_discrete_gaussian`)."""
        return sample_discrete_gaussian(variance, count, rng=rng)

    def tail_probability(self, variance: float, shares: int, h: float) -> float:
        """``2 exp(-h^2/(2 n v))``: the sum of ``n`` shares is ``n v``-subgaussian."""
        if h <= 0:
            return 1.0
        return min(1.0, 2.0 * math.exp(-(h * h) / (2.0 * shares * variance)))

    def integer_tail(self, units: float, failure_probability: float) -> float:
        """``units sqrt(2 ln(2/p))``: where the subgaussian bound equals ``p``."""
        if units <= 0.0:
            return 0.0
        return units * math.sqrt(2.0 * math.log(2.0 / float(failure_probability)))

    def sum_tail(self, units: float, shares: int, wrap_probability: float) -> float:
        """``sqrt(2 n v ln(2/q))``, ``v = units^2`` rounded up as drawn."""
        if units <= 0.0 or shares < 1:
            return 0.0
        v = float(as_rational_variance(units * units))
        return math.sqrt(2.0 * shares * v * math.log(2.0 / float(wrap_probability)))


class SkellamMechanism(DiscreteMechanism):
    """``"skellam"``: Skellam shares ``Sk(v)`` (Agarwal, Kairouz & Liu, NeurIPS 2021).

    Accounting: its RDP (AKL 2021 Thm 3.5, with ``Delta_1 <= Delta_2^2`` for integer vectors
    and ``gamma <= sigma/16``) is at most :data:`SKELLAM_EXTRA` times the Gaussian's, so
    :attr:`factor` is the inflation squared times that. Tails: a sum of Skellam shares is
    Skellam, bounded by its two-sided Chernoff bound (heavier than the subgaussian one, so
    :meth:`integer_tail` and :meth:`sum_tail` search on it).
    """

    name = "skellam"
    description = "distributed Skellam (Agarwal-Kairouz-Liu 2021)"
    accounting = (
        "zCDP of the Skellam mechanism (AKL 2021 Thm 3.5), composed and converted "
        "by CKS 2020 Prop. 12"
    )
    factor = SENSITIVITY_INFLATION**2 * SKELLAM_EXTRA
    law = "Sk(v)"
    integers = "Skellam"

    def sample_integers(
        self, variance: float, count: int | tuple[int, ...], *, rng: np.random.Generator
    ) -> IntArray:
        """Draw differences of two Poissons (:func:`~fa_hetdp.dp.discrete.sample_skellam`)."""
        return sample_skellam(variance, count, rng=rng)

    def tail_probability(self, variance: float, shares: int, h: float) -> float:
        """Twice the Chernoff bound of ``Sk(n v)``: ``exp(mu (sqrt(1 + r^2) - 1) - h asinh r)``."""
        if h <= 0:
            return 1.0
        mu = shares * variance
        r = h / mu
        return min(1.0, 2.0 * math.exp(mu * (math.sqrt(1.0 + r * r) - 1.0) - h * math.asinh(r)))


_BUILTIN: Final[tuple[NoiseMechanism, ...]] = (
    GaussianMechanism("agm"),
    GaussianMechanism("cgm"),
    DiscreteGaussianMechanism(),
    SkellamMechanism(),
)
_REGISTRY: dict[str, NoiseMechanism] = {m.name: m for m in _BUILTIN}
"""Every registered mechanism by its ``mechanism`` setting: the built-ins, then any added by
:func:`register_mechanism`. Config validation, the plan, the accountant and the report all
read it (:func:`get_mechanism`, :func:`mechanism_names`)."""

if tuple(_REGISTRY) != MECHANISMS:  # pragma: no cover - a registration mistake
    raise RuntimeError(
        f"built-in mechanisms {tuple(_REGISTRY)} differ from fa_hetdp._types.MECHANISMS "
        f"{MECHANISMS}; add the new name to fa_hetdp._types.Mechanism."
    )


def register_mechanism(mechanism: NoiseMechanism) -> NoiseMechanism:
    """Add ``mechanism`` to the registry under its :attr:`~NoiseMechanism.name`; return it.

    From then on the name is an allowed ``mechanism`` setting everywhere (config validation,
    :func:`fa_hetdp.private_statistics`, the plan and the report read the registry). A
    built-in one is also a name of :data:`fa_hetdp._types.Mechanism` (the static type).

    Raises
    ------
    PrivacyParameterError
        If the name is taken or empty, or the mechanism lists an unknown composition.
    """
    name = getattr(mechanism, "name", None)
    if not isinstance(mechanism, NoiseMechanism) or not isinstance(name, str) or not name:
        raise PrivacyParameterError(
            f"register_mechanism needs a NoiseMechanism with a non-empty name, got {mechanism!r}."
        )
    if name in _REGISTRY:
        raise PrivacyParameterError(
            f"mechanism {name!r} is already registered; the registered ones are "
            f"{mechanism_names()}."
        )
    unknown = [c for c in mechanism.compositions if c not in COMPOSITIONS]
    if unknown:
        raise PrivacyParameterError(
            f"mechanism {name!r} lists unknown compositions {unknown}; allowed: {COMPOSITIONS}."
        )
    _REGISTRY[name] = mechanism
    return mechanism


def unregister_mechanism(name: str) -> None:
    """Remove a mechanism added by :func:`register_mechanism` (the built-ins stay).

    Raises
    ------
    PrivacyParameterError
        If ``name`` is a built-in or not registered.
    """
    if name in MECHANISMS:
        raise PrivacyParameterError(f"mechanism {name!r} is built-in and cannot be removed.")
    if _REGISTRY.pop(name, None) is None:
        raise PrivacyParameterError(
            f"mechanism {name!r} is not registered; the registered ones are {mechanism_names()}."
        )


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
