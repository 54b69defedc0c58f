"""Fixed-point encoding of real vectors in the ring Z_{2^m} (m = 64 or 32), stochastic rounding.

A client encodes ``v`` (float64) coordinate-wise as ``round_s(v_j * scale_j) mod 2^m``,
where ``round_s`` rounds down or up at random with ``P(up) = frac(v_j * scale_j)``, drawn
from an explicit :class:`numpy.random.Generator` (unbiased: ``E[round_s(y)] = y``). The
server decodes the ring sum by reading its low ``m`` bits as a signed ``m``-bit integer and
dividing by the scale.

Words are held in ``uint64`` arrays either way: with ``m = 32`` an encoded value is below
``2^32`` and sums (with masks, in ``Z_2^64``) are reduced mod ``2^32`` only where it matters,
when a vector is sent (:meth:`FixedPointEncoding.reduce`, half the bytes) and when the sum is
decoded: ``2^32`` divides ``2^64``, so reducing at the end equals summing in ``Z_2^32``.

No wraparound. Each client states an absolute bound ``B_j`` on its values (clip bound plus
a tail of its noise share, exceeded with a stated probability); :meth:`FixedPointEncoding.encode`
refuses a value beyond it. With ``n <= max_clients`` summands, the encoded sum satisfies
``|sum| <= max_clients * (B_j * scale_j + 1) < 2^(m-1)``, which is checked at construction,
so the sum read as a signed integer is exact: a setting that could wrap is refused, and the
only failure left is a refused value, at the probability the bound was stated with.

Sum bounds. A caller that can bound the SUM better than ``n`` times the per-client bound
states ``sum_bounds`` (``|sum of <= max_clients values|_j <= S_j``, the rounding included); the
construction then checks ``S_j * scale_j < 2^(m-1)`` instead. The distributed discrete
mechanisms do (``fa_hetdp.dp.lattice``): their summed noise grows like ``sqrt(n)``, so ``S_j``
holds except with a stated wrap probability, and a sum beyond it may wrap; each client's own
bound ``B_j`` still refuses its outliers.

Decoding error. Each client's rounding error is below ``1 / scale_j`` in coordinate ``j``, so
the decoded sum of ``n`` inputs differs from the real sum by less than ``n / scale_j``
(and has zero mean).

Lattice values. A value on the lattice ``(1/scale_j) Z`` (an integer times ``1/scale_j``, the
scale a power of two) is encoded exactly: the fraction is 0, the rounding draw never rounds
up, and the word is the integer itself mod ``2^m``. An encoding made with ``lattice=True``
(the distributed discrete mechanisms' contributions, ``fa_hetdp.dp.lattice``) refuses any
other value and decodes the sum exactly (decoding error 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from .errors import EncodingError

__all__ = ["MODULUS_BITS", "FixedPointEncoding", "FloatArray", "U32Array", "choose_encoding"]

FloatArray = npt.NDArray[np.float64]
U64Array = npt.NDArray[np.uint64]
U32Array = npt.NDArray[np.uint32]

MODULUS_BITS: Final = (64, 32)
"""The ring sizes ``m`` of ``Z_2^m`` the encoding supports (64, the default, or 32)."""
_FLOAT_EXACT = 2.0**52  # |v * scale| below this keeps floor() and the fraction exact


def _check_modulus_bits(modulus_bits: object) -> int:
    if isinstance(modulus_bits, bool) or modulus_bits not in MODULUS_BITS:
        raise EncodingError(f"modulus_bits must be one of {MODULUS_BITS}, got {modulus_bits!r}.")
    return int(modulus_bits)


@dataclass(frozen=True, eq=False)
class FixedPointEncoding:
    """Per-coordinate fixed-point encoding into Z_{2^m} for a sum of ``max_clients`` inputs.

    Parameters
    ----------
    scales : FloatArray, shape (d,)
        Positive scale per coordinate (powers of two from :func:`choose_encoding`).
    bounds : FloatArray, shape (d,)
        Per-client absolute bound ``B_j`` on the values each client encodes.
    max_clients : int
        Largest number of inputs that may be summed.
    modulus_bits : {64, 32}
        ``m``: the sum lives in ``Z_2^m`` (32 halves the bytes of every masked vector).
    lattice : bool
        Values lie on the lattice ``(1/scale_j) Z``: :meth:`encode` refuses any other value
        and the decoding is exact (module docstring). Not sent to the clients: their
        encoding of a lattice value is exact either way.
    sum_bounds : FloatArray, shape (d,), optional
        ``S_j``, a bound on ``|sum|`` of up to ``max_clients`` encoded values (data units,
        the encoder's rounding included) that replaces ``max_clients (B_j + 1/scale_j)`` in
        the wrap check (module docstring). Sent to the clients with the scales.

    Raises
    ------
    EncodingError
        If the settings could wrap: ``max_clients * (B_j * scale_j + 1) >= 2^(m-1)`` (or,
        with ``sum_bounds``, ``S_j * scale_j >= 2^(m-1)``) for some ``j``, or
        ``B_j * scale_j > 2^52`` (float64 rounding would no longer be exact), or
        ``modulus_bits`` is not 64 or 32.
    """

    scales: FloatArray
    bounds: FloatArray
    max_clients: int
    modulus_bits: int = 64
    lattice: bool = False
    sum_bounds: FloatArray | None = None

    def __post_init__(self) -> None:
        scales, bounds = _frozen(self.scales), _frozen(self.bounds)
        if scales.shape != bounds.shape or scales.size == 0:
            raise EncodingError(
                f"scales and bounds must be non-empty and of equal length, got "
                f"{scales.size} and {bounds.size}."
            )
        # min/max propagate NaN, which then fails every comparison below
        if not (float(scales.min()) > 0 and float(scales.max()) < math.inf):
            raise EncodingError("scales must be finite and positive.")
        if not (float(bounds.min()) >= 0 and float(bounds.max()) < math.inf):
            raise EncodingError("bounds must be finite and non-negative.")
        if isinstance(self.max_clients, bool) or int(self.max_clients) < 1:
            raise EncodingError(f"max_clients must be >= 1, got {self.max_clients}.")
        bits = _check_modulus_bits(self.modulus_bits)
        products = bounds * scales
        peak = float(products.max())
        if peak > _FLOAT_EXACT:
            raise EncodingError(
                f"bound * scale = {peak:.3g} exceeds 2^52; lower the scale for exact rounding."
            )
        if self.sum_bounds is not None:
            sums = _frozen(self.sum_bounds)
            if sums.shape != scales.shape or not float(sums.min()) >= 0.0:
                raise EncodingError(
                    f"sum_bounds must be non-negative of length {scales.size}, got "
                    f"{sums.size} values."
                )
            totals = sums * scales
            j = int(np.argmax(totals))
            if not float(totals[j]) < 2.0 ** (bits - 1):
                raise EncodingError(
                    f"a sum of {self.max_clients} values with stated sum bound {sums[j]:.6g} "
                    f"at scale {scales[j]:.6g} could reach {totals[j]:.4g} >= 2^{bits - 1} "
                    f"and wrap in Z_2^{bits}; lower the scale or the bound."
                )
            object.__setattr__(self, "sum_bounds", sums)
        else:
            worst = float(self.max_clients * (peak + 1.0))
            if worst >= 2.0 ** (bits - 1):
                j = int(np.argmax(products))
                raise EncodingError(
                    f"a sum of {self.max_clients} values bounded by {bounds[j]:.6g} at scale "
                    f"{scales[j]:.6g} could reach {worst:.4g} >= 2^{bits - 1} and wrap in "
                    f"Z_2^{bits}; lower the scale, the bound or the number of clients."
                )
        object.__setattr__(self, "scales", scales)
        object.__setattr__(self, "bounds", bounds)
        object.__setattr__(self, "max_clients", int(self.max_clients))
        object.__setattr__(self, "modulus_bits", bits)

    @property
    def length(self) -> int:
        """The vector length ``d``."""
        return int(self.scales.size)

    @property
    def word_bytes(self) -> int:
        """Bytes per coordinate of a vector on the wire (``m / 8``)."""
        return self.modulus_bits // 8

    def reduce(self, words: U64Array) -> U64Array:
        """Return ``words mod 2^m`` (a new array; ``words`` itself when ``m = 64``)."""
        if self.modulus_bits == 64:
            return words
        out: U64Array = words & np.uint64((1 << self.modulus_bits) - 1)
        return out

    def max_decoding_error(self, count: int) -> FloatArray:
        """Return the bound ``count / scale_j`` on the decoding error (0 with ``lattice``)."""
        if self.lattice:
            return np.zeros(self.length)
        return count / self.scales

    def encode(self, values: FloatArray, *, rng: np.random.Generator) -> U64Array:
        """Encode one client's vector, rounding stochastically with ``rng`` (words ``< 2^m``).

        Raises
        ------
        EncodingError
            If ``values`` is not a finite float64 vector of length ``d``, or some
            ``|values_j| > B_j`` (the value is refused, never clipped), or, with ``lattice``,
            a value is off the lattice. (The rounding draw is made either way, so a
            generator's use does not depend on the values.)
        """
        if not isinstance(values, np.ndarray) or values.dtype != np.float64:
            kind = values.dtype if isinstance(values, np.ndarray) else type(values).__name__
            raise EncodingError(f"values must be a float64 array, got {kind}.")
        if values.shape != (self.length,):
            raise EncodingError(f"values must have shape ({self.length},), got {values.shape}.")
        within = np.abs(values) <= self.bounds  # False for NaN and infinities too
        if not within.all():
            j = int(np.argmin(within))
            if not np.isfinite(values[j]):
                raise EncodingError("values must be finite.")
            raise EncodingError(
                f"value {values[j]:.6g} at coordinate {j} exceeds the stated per-client "
                f"bound {self.bounds[j]:.6g}."
            )
        scaled = values * self.scales
        floor = np.floor(scaled)
        if self.lattice and not np.array_equal(floor, scaled):
            j = int(np.argmax(floor != scaled))
            raise EncodingError(
                f"value {values[j]!r} at coordinate {j} is not on the lattice of step "
                f"{1.0 / self.scales[j]!r} that this encoding carries exactly."
            )
        rounded = floor + (rng.random(self.length) < (scaled - floor))
        return self.reduce(rounded.astype(np.int64).view(np.uint64))

    def sum_limits(self, count: int) -> FloatArray:
        """Return the largest ``|signed sum|`` (in words) of ``count`` honest encoded vectors.

        ``floor(S_j scale_j)`` with ``sum_bounds`` (exceeded with the probability it was
        stated with), else ``count * ceil(B_j scale_j)`` (never exceeded: each encoded value
        is at most ``ceil(B_j scale_j)`` in absolute value, :meth:`encode` refuses larger).
        Integers held as float64 (compared with the float64 of the sum, rounding is monotone:
        an honest sum is never refused).
        """
        if self.sum_bounds is not None:
            return np.floor(self.sum_bounds * self.scales)
        return float(count) * np.ceil(self.bounds * self.scales)

    def decode(self, total: U64Array, count: int) -> FloatArray:
        """Decode the ring sum of ``count`` encoded vectors (low ``m`` bits read as signed).

        ``total`` may be the sum in ``Z_2^64`` or already reduced mod ``2^m``.

        Raises
        ------
        EncodingError
            If ``count`` exceeds ``max_clients``, ``total`` has the wrong type or shape, or the
            sum is outside :meth:`sum_limits` (the range check): ``count`` honest inputs
            cannot reach it, so some input was not encoded or masked as the protocol says --
            e.g. masked with a seed the client did not share, which turns the sum into
            uniform noise. (Without the check such a sum decodes, silently, to garbage.)
        """
        if count > self.max_clients:
            raise EncodingError(
                f"sum of {count} inputs exceeds max_clients={self.max_clients} of the encoding."
            )
        if total.dtype != np.uint64 or total.shape != (self.length,):
            raise EncodingError(
                f"encoded sum must be uint64 of shape ({self.length},), got "
                f"{total.dtype} {total.shape}."
            )
        if self.modulus_bits == 32:
            signed = self.reduce(total).astype(np.uint32).view(np.int32).astype(np.int64)
        else:
            signed = total.view(np.int64)
        limits = self.sum_limits(count)
        outside = np.abs(signed.astype(np.float64)) > limits  # float: |INT64_MIN| is fine
        if outside.any():
            j = int(np.argmax(outside))
            which = "stated sum bound" if self.sum_bounds is not None else "count x client bound"
            raise EncodingError(
                f"the decoded sum of {count} inputs is outside the range honest inputs can "
                f"reach: coordinate {j} reads {int(signed[j])} words, beyond +/-"
                f"{limits[j]:.0f} (the {which}, {limits[j] / self.scales[j]:.6g} at scale "
                f"{self.scales[j]:.6g}); "
                "an input was not encoded or masked as the protocol says (e.g. a mask that "
                "does not cancel), so the sum is refused."
            )
        return signed.astype(np.float64) / self.scales


def _frozen(values: object) -> FloatArray:
    """Return a read-only float64 vector, ``values`` itself if it already is one.

    An array that owns its data and is read-only (a parsed message's, another encoding's)
    is shared; anything else is copied.
    """
    if (
        isinstance(values, np.ndarray)
        and values.dtype == np.float64
        and values.ndim == 1
        and not values.flags.writeable
        and values.base is None
    ):
        return values
    out = np.array(values, dtype=np.float64).reshape(-1)
    out.setflags(write=False)
    return out


def choose_encoding(
    n: int,
    bound: float | FloatArray,
    *,
    noise_std: float | FloatArray = 0.0,
    noise_tail: float = 12.0,
    min_scale: float = 1.0,
    modulus_bits: int = 64,
) -> FixedPointEncoding:
    """Choose the largest power-of-two scales so that a sum of ``n`` inputs cannot wrap.

    Parameters
    ----------
    n : int
        Number of clients whose inputs are summed.
    bound : float or FloatArray
        Per-client (per-coordinate) bound on the absolute value of the noiseless input
        (the clip bound).
    noise_std : float or FloatArray
        Standard deviation of each client's Gaussian noise share, added before encoding.
    noise_tail : float
        Number of noise standard deviations allowed on top of ``bound``: the stated bound
        is ``B_j = bound_j + noise_tail * noise_std_j``. A client whose noisy value exceeds
        it gets :class:`EncodingError` (probability ``<= 2 Phi(-12) < 4e-33`` per
        coordinate at the default).
    min_scale : float
        Smallest acceptable scale; a setting that would need a smaller one is refused.
    modulus_bits : {64, 32}
        ``m`` of the ring ``Z_2^m``.

    Returns
    -------
    FixedPointEncoding
        With ``scale_j = 2^floor(log2(min((2^(m-1) / n - 2) / B_j, 2^52 / B_j)))``; decoding
        error below ``n / scale_j``.

    Raises
    ------
    EncodingError
        If the bounds are invalid or ``min_scale`` cannot be met without risking wrap.
    """
    if isinstance(n, bool) or n < 1:
        raise EncodingError(f"n must be >= 1, got {n}.")
    bits = _check_modulus_bits(modulus_bits)
    clip = np.atleast_1d(np.asarray(bound, dtype=np.float64))
    sigma = np.broadcast_to(np.asarray(noise_std, dtype=np.float64), clip.shape)
    if not (np.all(np.isfinite(clip)) and np.all(clip >= 0)):
        raise EncodingError("bound must be finite and non-negative.")
    if not (np.all(np.isfinite(sigma)) and np.all(sigma >= 0)):
        raise EncodingError("noise_std must be finite and non-negative.")
    if not (math.isfinite(noise_tail) and noise_tail >= 0):
        raise EncodingError(f"noise_tail must be finite and >= 0, got {noise_tail}.")
    stated = clip + noise_tail * sigma
    safe = np.maximum(stated, 2.0**-30)  # an all-zero coordinate still gets a finite scale
    limit = np.minimum((2.0 ** (bits - 1) / n - 2.0) / safe, _FLOAT_EXACT / safe)
    if np.any(limit < min_scale):
        j = int(np.argmin(limit))
        raise EncodingError(
            f"n={n} clients with per-client bound {stated[j]:.6g} admit scale at most "
            f"{limit[j]:.4g} < min_scale={min_scale:.4g}: the sum could wrap in Z_2^{bits}."
        )
    scales = np.exp2(np.floor(np.log2(limit)))
    return FixedPointEncoding(scales=scales, bounds=stated, max_clients=n, modulus_bits=bits)
