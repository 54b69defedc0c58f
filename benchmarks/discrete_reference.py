"""The distributed discrete sum, end to end in process: scale, round, noise, ``Z_m``, decode.

A :class:`DiscreteSum` runs one release of a distributed discrete mechanism (``"ddg"``: the
distributed discrete Gaussian of Kairouz, Liu & Steinke, ICML 2021; ``"skellam"``: the
distributed Skellam mechanism of Agarwal, Kairouz & Liu, NeurIPS 2021) with the parameters of
:func:`~fa_hetdp.dp.discrete_calibration.calibrate_discrete`:

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

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray, IntArray
from fa_hetdp.dp.discrete import sample_discrete_gaussian, sample_skellam
from fa_hetdp.dp.discrete_calibration import (
    DEFAULT_WRAP_PROBABILITY,
    DiscreteCalibration,
    calibrate_discrete,
)
from fa_hetdp.errors import InputDataError, PrivacyParameterError

__all__ = ["MAX_MODULUS_BITS", "DiscreteSum", "discrete_sum"]

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
