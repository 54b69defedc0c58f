"""A reference distributed discrete sum, for the benchmarks and their tests (not the library).

``python benchmarks/utility_bench.py --discrete`` measures what discreteness costs against the
continuous Gaussian with this code; ``tests/test_ddg.py`` and
``tests/test_discrete_calibration.py`` check it (a privacy audit included). The protocol's own
discrete path is :class:`fa_hetdp.dp.mechanisms.DiscreteMechanism` on the lattice of
:mod:`fa_hetdp.dp.lattice`; this module is a stand-alone release of one box-bounded sum with
its own choice of ``gamma`` for a ring, accounted by the full RDP of the sum
(:mod:`fa_hetdp.dp.discrete_accounting`, ``tau`` included).

Calibration (:func:`calibrate_discrete`).

Each client maps its contribution ``x in [0, b_1] x ... x [0, b_d]`` (a box: every release of
the protocol is one) to integers by scaling with ``1/gamma`` and randomized rounding
(``floor(v) + Bernoulli(v - floor(v))``, unbiased), adds an integer noise share and sends the
result in ``Z_m``, ``m = 2^modulus_bits``. Rounding keeps every coordinate in
``[0, B_j]``, ``B_j = ceil(b_j/gamma)``, so the replace-one sensitivities of the integer sum
are deterministic: ``Delta_2 = ||B||_2`` and ``Delta_1 = sum B_j``. This replaces the DDG
paper's conditional randomized rounding (KLS 2021, Sec. 4.1), which bounds the norm of
L2-ball inputs only with probability ``1 - beta``; for box inputs the bound needs no retry
and no ``beta``.

Wrap-around: the server decodes each coordinate of the sum in the window
``[S_j/2 - m/2, S_j/2 + m/2)`` around the data's range ``[0, S_j]``, ``S_j = n B_j``, so a
coordinate wraps only if its summed noise exceeds ``h_j = floor((m - 1 - S_j)/2)``. The
probability that some coordinate wraps is bounded by the union bound over the ``d``
coordinates of the noise's tail: the sum of ``n`` shares ``N_Z(0, s^2)`` is
``n s^2``-subgaussian (Canonne, Kamath & Steinke 2020, Cor. 9 for one share; subgaussian
parameters add), and Skellam's tail is its exact Chernoff bound
``exp(mu (sqrt(1 + (h/mu)^2) - 1) - h asinh(h/mu))``.

:func:`calibrate_discrete` searches ``gamma`` on a grid of powers ``2^(k/8)``, takes for each
the smallest noise meeting ``(epsilon, delta)`` under the RDP accounting of
:mod:`fa_hetdp.dp.discrete_accounting`, and keeps the feasible ``gamma`` (wrap probability below
the limit) of least expected squared error per coordinate,
``gamma^2 (n s^2 + n/4)`` (noise plus the rounding's at most ``1/4`` variance per client).

The sum end to end (:class:`DiscreteSum`).

A :class:`DiscreteSum` runs one release of a distributed discrete mechanism (``"ddg"``: the
distributed discrete Gaussian of Kairouz, Liu & Steinke, ICML 2021; ``"skellam"``: the
distributed Skellam mechanism of Agarwal, Kairouz & Liu, NeurIPS 2021) with the parameters of
:func:`calibrate_discrete`:

1. each client scales its vector ``x in [0, b]`` by ``1/gamma`` and rounds it at random
   (``floor(v) + Bernoulli(frac(v))``, unbiased), so every coordinate lies in ``[0, B_j]``,
   ``B_j = ceil(b_j/gamma)`` (:meth:`DiscreteSum.client_share`);
2. adds an integer noise share (exact sampler, :mod:`fa_hetdp.dp.discrete`) and reduces
   modulo ``m = 2^modulus_bits``;
3. the aggregator adds the shares in ``Z_m`` (what secure aggregation reveals,
   :meth:`DiscreteSum.aggregate`);
4. the server reads each coordinate in the window ``[c_j - m/2, c_j + m/2)`` around the
   middle ``c_j = floor(n B_j/2)`` of the data's range and multiplies by ``gamma``
   (:meth:`DiscreteSum.decode`). It is exact unless the summed noise exceeds the window,
   whose probability is the calibration's ``wrap_probability``.

The privacy of what is released -- the modular sum -- is the RDP of the discrete sum
(:mod:`fa_hetdp.dp.discrete_accounting`) with the shares that arrived
(:meth:`DiscreteSum.spent`): reducing modulo ``m`` is post-processing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray, IntArray
from fa_hetdp.dp.calibration import _check_delta, _check_positive
from fa_hetdp.dp.discrete import sample_discrete_gaussian, sample_skellam
from fa_hetdp.dp.discrete_accounting import (
    RDP_ORDERS,
    DiscreteGaussianSumEvent,
    DiscreteSumEvent,
    SkellamSumEvent,
    rdp_epsilon,
)
from fa_hetdp.dp.lattice import DEFAULT_WRAP_PROBABILITY
from fa_hetdp.dp.mechanisms import get_mechanism
from fa_hetdp.errors import InputDataError, PrivacyParameterError

__all__ = [
    "DEFAULT_WRAP_PROBABILITY",
    "MAX_MODULUS_BITS",
    "DiscreteCalibration",
    "DiscreteKind",
    "DiscreteSum",
    "calibrate_discrete",
    "discrete_sum",
    "noise_tail",
]

DiscreteKind = Literal["ddg", "skellam"]
_GRID_STEP: Final = 2.0 ** (1.0 / 8.0)
_ORDERS: Final = np.asarray(RDP_ORDERS, dtype=np.float64)


def noise_tail(kind: DiscreteKind, noise: float, shares: int, h: float) -> float:
    """Bound on ``P(|Z| > h)`` for the summed noise ``Z`` of ``shares`` shares.

    ``kind="ddg"``: ``noise`` is each share's ``sigma``; ``2 exp(-h^2/(2 n s^2))``.
    ``kind="skellam"``: ``noise`` is each share's variance; twice the Chernoff bound of
    ``Sk(n noise)``. Both are the library mechanism's ``tail_probability``.
    """
    variance = noise * noise if kind == "ddg" else noise
    return get_mechanism(kind).tail_probability(variance, shares, h)


@dataclass(frozen=True)
class DiscreteCalibration:
    """Parameters of one discrete release and what they guarantee.

    Attributes
    ----------
    mechanism : {"ddg", "skellam"}
        The noise family.
    gamma : float
        Scale: one integer unit is ``gamma`` data units.
    noise : float
        Per share, in integer units: ``sigma`` (ddg) or the variance (skellam).
    shares : int
        Noise shares the calibration counts on (``t`` honest clients).
    n : int
        Clients whose data are summed.
    dim : int
        Coordinates.
    l2_sensitivity, l1_sensitivity : float
        Of the integer sum (``||B||_2``, ``sum B``).
    epsilon, delta : float
        The guarantee with all ``shares`` arrived (``epsilon <=`` the target).
    modulus_bits : int
        ``m = 2^modulus_bits``.
    wrap_probability : float
        Bound on the probability that some coordinate wraps around.
    expected_mse : float
        Expected squared error per coordinate of the decoded sum, data units (noise +
        rounding).
    accounting : str
        How ``epsilon`` was obtained.
    """

    mechanism: DiscreteKind
    gamma: float
    noise: float
    shares: int
    n: int
    dim: int
    l2_sensitivity: float
    l1_sensitivity: float
    epsilon: float
    delta: float
    modulus_bits: int
    wrap_probability: float
    expected_mse: float
    accounting: str

    def event(self, shares: int | None = None) -> DiscreteSumEvent:
        """Return the privacy event with ``shares`` honest shares (default: as planned)."""
        m = self.shares if shares is None else int(shares)
        if m < 1:
            raise PrivacyParameterError(f"shares must be >= 1, got shares={m}.")
        return _event(
            self.mechanism, self.noise, m, self.l2_sensitivity, self.l1_sensitivity, self.dim
        )

    def epsilon_with(self, shares: int) -> float:
        """``epsilon`` at the calibrated ``delta`` when only ``shares`` noise shares arrived."""
        return rdp_epsilon(_ORDERS, self.event(shares).rdp(_ORDERS), self.delta)[0]


def _event(
    kind: DiscreteKind, noise: float, shares: int, l2: float, l1: float, dim: int
) -> DiscreteSumEvent:
    if kind == "ddg":
        return DiscreteGaussianSumEvent(noise, shares, l2, l1, dim)
    return SkellamSumEvent(shares * noise, l2, l1)


def _accounting_label(kind: DiscreteKind) -> str:
    if kind == "ddg":
        return "RDP of the sum of discrete Gaussians (Kairouz-Liu-Steinke 2021, Prop. 14)"
    return "RDP of the Skellam mechanism (Agarwal-Kairouz-Liu 2021, Thm 3.5)"


def _smallest_noise(
    kind: DiscreteKind, epsilon: float, delta: float, shares: int, l2: float, l1: float, dim: int
) -> tuple[float, float]:
    """Smallest per-share noise meeting ``(epsilon, delta)``: bisection on ``log noise``."""

    def eps_of(noise: float) -> float:
        return rdp_epsilon(_ORDERS, _event(kind, noise, shares, l2, l1, dim).rdp(_ORDERS), delta)[0]

    # Start from the Gaussian-like scale l2/sqrt(shares) (ddg: sigma; skellam: variance).
    hi = max(l2 / math.sqrt(shares), 1.0) if kind == "ddg" else max(l2 * l2 / shares, 1.0)
    while eps_of(hi) > epsilon:
        hi *= 2.0
    lo = hi / 2.0
    while eps_of(lo) <= epsilon and lo > 1e-6:
        hi, lo = lo, lo / 2.0
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        if eps_of(mid) <= epsilon:
            hi = mid
        else:
            lo = mid
        if hi / lo - 1.0 < 1e-9:
            break
    return hi, eps_of(hi)


def calibrate_discrete(
    mechanism: DiscreteKind,
    *,
    epsilon: float,
    delta: float,
    n: int,
    bounds: npt.ArrayLike,
    shares: int | None = None,
    modulus_bits: int = 32,
    wrap_probability: float = DEFAULT_WRAP_PROBABILITY,
) -> DiscreteCalibration:
    """Choose ``gamma`` and the noise of a distributed discrete release (see module docstring).

    Parameters
    ----------
    mechanism : {"ddg", "skellam"}
        Noise family.
    epsilon, delta : float
        Target of this release (``epsilon > 0``, ``delta in (0, 1)``).
    n : int
        Clients summed (``>= 1``).
    bounds : array_like, shape (d,)
        Per-coordinate bound ``b_j > 0`` of a contribution (values in ``[0, b_j]``).
    shares : int, optional
        Honest noise shares the guarantee counts on (default ``n``).
    modulus_bits : int, optional
        ``m = 2^modulus_bits`` (default 32, in ``[8, 64]``).
    wrap_probability : float, optional
        Limit on the probability that some coordinate wraps (default ``1e-9``).

    Returns
    -------
    DiscreteCalibration
        The least-error feasible parameters.

    Raises
    ------
    PrivacyParameterError
        For invalid parameters, or when no ``gamma`` fits: the message names the binding
        constraint (the modulus cannot hold the sum plus the noise the privacy target needs).
    """
    if mechanism not in ("ddg", "skellam"):
        raise PrivacyParameterError(
            f"mechanism must be 'ddg' or 'skellam', got mechanism={mechanism!r}."
        )
    eps = _check_positive("epsilon", epsilon)
    dlt = _check_delta(delta)
    b: FloatArray = np.atleast_1d(np.asarray(bounds, dtype=np.float64))
    if b.ndim != 1 or not np.all(np.isfinite(b)) or np.any(b <= 0):
        raise PrivacyParameterError(f"bounds must be finite and > 0 (shape (d,)), got {b!r}.")
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise PrivacyParameterError(f"n must be an integer >= 1, got n={n!r}.")
    t = int(n) if shares is None else int(shares)
    if not 1 <= t <= n:
        raise PrivacyParameterError(f"shares must be in [1, n] = [1, {n}], got shares={shares}.")
    if not 8 <= int(modulus_bits) <= 64:
        raise PrivacyParameterError(f"modulus_bits must be in [8, 64], got {modulus_bits!r}.")
    p_wrap = float(wrap_probability)
    if not 0.0 < p_wrap < 1.0:
        raise PrivacyParameterError(f"wrap_probability must be in (0, 1), got {p_wrap!r}.")
    modulus = 2.0 ** int(modulus_bits)
    d = int(b.size)
    best: DiscreteCalibration | None = None
    closest = math.inf  # smallest union-bound wrap probability seen (for the error message)
    gamma = float(b.max()) * 2.0
    floor_gamma = float(b.max()) * 2.0**-48
    while gamma >= floor_gamma:
        top = np.ceil(b / gamma)  # B_j: the rounded contribution lies in [0, B_j]
        l2 = float(np.sqrt(np.sum(top * top)))
        l1 = float(np.sum(top))
        span = float(n * top.max())
        if span >= modulus:
            break  # finer gamma only widens the data's range
        noise, achieved = _smallest_noise(mechanism, eps, dlt, t, l2, l1, d)
        h = math.floor((modulus - 1.0 - span) / 2.0)
        wrap = min(1.0, d * noise_tail(mechanism, noise, n, h))  # all n shares may add noise
        closest = min(closest, wrap)
        if wrap <= p_wrap:
            per_share_var = noise * noise if mechanism == "ddg" else noise
            mse = gamma * gamma * (n * per_share_var + 0.25 * n)
            if best is None or mse < best.expected_mse:
                best = DiscreteCalibration(
                    mechanism=mechanism,
                    gamma=gamma,
                    noise=noise,
                    shares=t,
                    n=int(n),
                    dim=d,
                    l2_sensitivity=l2,
                    l1_sensitivity=l1,
                    epsilon=achieved,
                    delta=dlt,
                    modulus_bits=int(modulus_bits),
                    wrap_probability=wrap,
                    expected_mse=mse,
                    accounting=_accounting_label(mechanism),
                )
        gamma /= _GRID_STEP
    if best is None:
        raise PrivacyParameterError(
            f"no scale gamma fits: the wrap-around constraint binds. With n={n}, d={d}, "
            f"bounds up to {float(b.max())!r} and the noise that (epsilon={eps}, delta={dlt}) "
            f"needs, the modulus 2^{modulus_bits} leaves a wrap probability of at least "
            f"{closest:.3g} > the limit {p_wrap:g}. Raise modulus_bits, relax "
            "wrap_probability, or relax the privacy target."
        )
    return best


MAX_MODULUS_BITS: Final = 62
"""The in-process ring arithmetic runs in int64: ``m <= 2^62``."""


@dataclass(frozen=True)
class DiscreteSum:
    """One calibrated distributed discrete release of a sum of box-bounded vectors.

    Attributes
    ----------
    calibration : DiscreteCalibration
        ``gamma``, the per-share noise, the modulus and the guarantee.
    bounds : FloatArray, shape (d,)
        Per-coordinate bound ``b_j`` of a client's vector (values in ``[0, b_j]``).
    """

    calibration: DiscreteCalibration
    bounds: FloatArray

    def __post_init__(self) -> None:
        if self.calibration.modulus_bits > MAX_MODULUS_BITS:
            raise PrivacyParameterError(
                f"the in-process discrete sum needs modulus_bits <= {MAX_MODULUS_BITS}, got "
                f"{self.calibration.modulus_bits}."
            )
        if self.bounds.shape != (self.calibration.dim,):
            raise PrivacyParameterError(
                f"bounds has shape {self.bounds.shape}; the calibration is for "
                f"d={self.calibration.dim}."
            )

    @property
    def modulus(self) -> int:
        """``m = 2^modulus_bits``."""
        return 1 << self.calibration.modulus_bits

    @property
    def top(self) -> IntArray:
        """``B_j = ceil(b_j/gamma)``: a rounded coordinate lies in ``[0, B_j]``."""
        out: IntArray = np.ceil(self.bounds / self.calibration.gamma).astype(np.int64)
        return out

    def noise_shares(self, shape: tuple[int, ...], *, rng: np.random.Generator) -> IntArray:
        """Integer noise shares of the calibrated law, ``shape[-1] = d``."""
        cal = self.calibration
        if cal.mechanism == "ddg":
            return sample_discrete_gaussian(cal.noise**2, shape, rng=rng)
        return sample_skellam(cal.noise, shape, rng=rng)

    def round_values(self, x: npt.ArrayLike, *, rng: np.random.Generator) -> IntArray:
        """Scale by ``1/gamma`` and round at random (unbiased); values must lie in the box.

        Raises
        ------
        InputDataError
            If a value lies outside ``[0, b_j]`` or the last axis is not ``d``.
        """
        v = np.asarray(x, dtype=np.float64)
        if v.shape[-1:] != self.bounds.shape:
            raise InputDataError(f"values must end in d={self.bounds.size}, got {v.shape}.")
        if not np.all(np.isfinite(v)) or np.any(v < 0.0) or np.any(v > self.bounds):
            raise InputDataError(
                "values must lie in [0, b_j] (the calibration's box); got values in "
                f"[{np.nanmin(v)!r}, {np.nanmax(v)!r}]."
            )
        scaled = v / self.calibration.gamma
        low = np.floor(scaled)
        up = rng.random(scaled.shape) < (scaled - low)
        out: IntArray = np.minimum(low.astype(np.int64) + up, self.top)
        return out

    def client_share(self, x: npt.ArrayLike, *, rng: np.random.Generator) -> IntArray:
        """Return what a client (or a stack of clients) sends: values in ``{0, ..., m-1}``."""
        rounded = self.round_values(x, rng=rng)
        noisy = rounded + self.noise_shares(rounded.shape, rng=rng)
        out: IntArray = np.mod(noisy, self.modulus)
        return out

    def aggregate(self, shares: npt.ArrayLike) -> IntArray:
        """Sum of the shares (rows) in ``Z_m``: what secure aggregation reveals."""
        s = np.mod(np.asarray(shares, dtype=np.int64), self.modulus)
        rows = max(1, ((1 << 63) - 1) // self.modulus)  # int64 sums of `rows` shares are exact
        out: IntArray = np.zeros(s.shape[1:], dtype=np.int64)
        for start in range(0, s.shape[0], rows):
            out = np.mod(out + np.sum(s[start : start + rows], axis=0), self.modulus)
        return out

    def decode(self, total: npt.ArrayLike, n: int) -> FloatArray:
        """Read the ``Z_m`` sum of ``n`` clients in the window around their data's range."""
        m = self.modulus
        center = (n * self.top) // 2
        t = np.asarray(total, dtype=np.int64)
        centred = np.mod(t - center + m // 2, m) - m // 2 + center
        out: FloatArray = centred.astype(np.float64) * self.calibration.gamma
        return out

    def release(self, x: npt.ArrayLike, *, rng: np.random.Generator) -> FloatArray:
        """Run steps 1-4 for the client vectors ``x`` (rows) and return the decoded sum."""
        v = np.asarray(x, dtype=np.float64)
        if v.ndim != 2:
            raise InputDataError(f"x must have shape (n, d), got shape {v.shape}.")
        return self.decode(self.aggregate(self.client_share(v, rng=rng)), v.shape[0])

    def spent(self, shares: int | None = None) -> float:
        """``epsilon`` at the calibrated ``delta`` with ``shares`` honest noise shares."""
        return self.calibration.epsilon_with(self.calibration.shares if shares is None else shares)


def discrete_sum(
    mechanism: str,
    *,
    epsilon: float,
    delta: float,
    n: int,
    bounds: npt.ArrayLike,
    shares: int | None = None,
    modulus_bits: int = 32,
    wrap_probability: float = DEFAULT_WRAP_PROBABILITY,
) -> DiscreteSum:
    """Calibrate (:func:`calibrate_discrete`) and return the :class:`DiscreteSum`."""
    if mechanism not in ("ddg", "skellam"):
        raise PrivacyParameterError(
            f"mechanism must be 'ddg' or 'skellam', got mechanism={mechanism!r}."
        )
    b = np.atleast_1d(np.asarray(bounds, dtype=np.float64))
    cal = calibrate_discrete(
        "ddg" if mechanism == "ddg" else "skellam",
        epsilon=epsilon,
        delta=delta,
        n=n,
        bounds=b,
        shares=shares,
        modulus_bits=modulus_bits,
        wrap_probability=wrap_probability,
    )
    return DiscreteSum(calibration=cal, bounds=b)
