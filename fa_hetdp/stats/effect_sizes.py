"""Two-arm effect sizes and their sampling variances, as metafor's ``escalc()`` computes them.

:func:`effect_sizes` turns each study's (or silo's) two-arm summaries -- event counts, or means
and standard deviations -- into an effect ``y_i`` and its large-sample sampling variance
``v_i`` (metafor's default ``vtype="LS"``), the input of
:func:`fa_hetdp.stats.rma.meta_analysis_from_summaries`. "Treated" is metafor's group 1
(``ai``/``n1i``, ``m1i``/``sd1i``), "control" its group 2: every effect is treated minus
control (or treated over control, on the log scale).

Binary outcomes (``a`` events of ``n1`` treated, ``c`` of ``n2`` controls; ``b = n1 - a``,
``d = n2 - c``; ``p1 = a/n1``, ``p2 = c/n2``):

- ``"OR"``: ``log(a d/(b c))``, ``v = 1/a + 1/b + 1/c + 1/d``;
- ``"RR"``: ``log(p1/p2)``, ``v = 1/a - 1/n1 + 1/c - 1/n2``;
- ``"RD"``: ``p1 - p2``, ``v = p1 (1 - p1)/n1 + p2 (1 - p2)/n2``.

A study with a zero cell (``a``, ``b``, ``c`` or ``d`` zero) has 1/2 added to each of its four
cells (so ``n1`` and ``n2`` grow by 1) before its effect and variance are computed, for all
three measures: metafor's defaults ``add=1/2, to="only0"``. A study with no events in either
arm (or only events in both) is kept and computed with that correction (metafor's default
``drop00=FALSE``): its log OR and log RR are near 0 with a large variance, its RD
``1/2/(n1 + 1) - 1/2/(n2 + 1)`` (0 for arms of equal size).

Continuous outcomes (means ``m``, standard deviations ``s``, sizes ``n``):

- ``"MD"``: ``m1 - m2``, ``v = s1^2/n1 + s2^2/n2``;
- ``"SMD"``: Hedges' ``g = J(m) (m1 - m2)/s_p``, ``s_p^2 = ((n1 - 1) s1^2 + (n2 - 1) s2^2)/m``,
  ``m = n1 + n2 - 2``, with the exact bias correction
  ``J(m) = Gamma(m/2)/(sqrt(m/2) Gamma((m - 1)/2))`` (computed on the log scale), and
  ``v = 1/n1 + 1/n2 + g^2/(2 (n1 + n2))`` (metafor's ``vtype="LS"``; Hedges 1982, Hedges and
  Olkin 1985 eq. 15).

Where statsmodels differs (its ``effectsize_smd`` and ``effectsize_2proportions``):

- ``effectsize_smd`` uses the approximation ``J = 1 - 3/(4 (n1 + n2) - 9)`` and the variance
  ``(n1 + n2)/(n1 n2) + g^2/(2 (n1 + n2 - 3.94))`` (R meta's ``metacont``): on the example of
  its tests its ``g`` is up to ``5e-6`` relative from metafor's, its variance up to ``1e-3``;
- ``effectsize_2proportions`` adds no correction by default (``zero_correction=None``: a zero
  cell gives an infinite or undefined log OR and log RR). With ``zero_correction=0.5`` it adds
  1/2 to every cell of a study with a zero cell, as metafor and this module, but (statsmodels
  0.15.0) also 1/2 to the *events* of every other study, whose sizes it leaves: those studies'
  effects differ from metafor's, which leaves them alone. Its ``statistic`` names are
  ``"diff"``, ``"risk-ratio"``, ``"odds-ratio"``; without zero cells and without a correction
  the formulas are the same.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt
from scipy.special import gammaln

from fa_hetdp._types import FloatArray
from fa_hetdp.errors import InputDataError

__all__ = [
    "BINARY_MEASURES",
    "CONTINUITY_CORRECTION",
    "CONTINUOUS_MEASURES",
    "MEASURES",
    "binary_cells",
    "binary_effects",
    "continuous_effects",
    "effect_sizes",
    "hedges_correction",
]

BINARY_MEASURES: Final[tuple[str, ...]] = ("OR", "RR", "RD")
"""Log odds ratio, log risk ratio, risk difference: from event counts."""

CONTINUOUS_MEASURES: Final[tuple[str, ...]] = ("MD", "SMD")
"""Mean difference, standardised mean difference (Hedges' g): from means and SDs."""

MEASURES: Final[tuple[str, ...]] = BINARY_MEASURES + CONTINUOUS_MEASURES
"""Every measure :func:`effect_sizes` computes."""

CONTINUITY_CORRECTION: Final = 0.5
"""Added to every cell of a study with a zero cell (metafor's ``add=1/2, to="only0"``)."""

_BINARY_ARGS: Final = ("events_treated", "n_treated", "events_control", "n_control")
_CONTINUOUS_ARGS: Final = (
    "mean_treated",
    "sd_treated",
    "n_treated",
    "mean_control",
    "sd_control",
    "n_control",
)


def hedges_correction(m: npt.ArrayLike) -> FloatArray:
    """Hedges' exact bias correction ``J(m) = Gamma(m/2)/(sqrt(m/2) Gamma((m - 1)/2))``.

    On the log scale (no overflow for large ``m``); ``m = n1 + n2 - 2 >= 2``.
    """
    mm = np.asarray(m, dtype=np.float64)
    return np.asarray(
        np.exp(gammaln(mm / 2.0) - 0.5 * np.log(mm / 2.0) - gammaln((mm - 1.0) / 2.0))
    )


def _as_vector(name: str, value: npt.ArrayLike | None) -> FloatArray:
    if value is None:
        raise InputDataError(f"{name} is needed (one value per study).")
    try:
        arr = np.array(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputDataError(f"{name} must be numbers, one per study: {exc}") from exc
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1 or arr.shape[0] == 0:
        raise InputDataError(
            f"{name} must be a non-empty 1-D array (one value per study), got shape {arr.shape}."
        )
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise InputDataError(
            f"{name} must be finite; studies {bad[:10].tolist()}"
            f"{' ...' if bad.size > 10 else ''} are NaN or infinite."
        )
    return arr


def _check_counts(name: str, arr: FloatArray, minimum: int) -> None:
    bad = np.flatnonzero((arr != np.round(arr)) | (arr < minimum))
    if bad.size:
        raise InputDataError(
            f"{name} must be whole numbers >= {minimum}; studies {bad[:10].tolist()} have "
            f"{arr[bad[:10]].tolist()}."
        )


def binary_cells(
    a: FloatArray, n1: FloatArray, c: FloatArray, n2: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Return the cells ``a, b = n1 - a, c, d = n2 - c`` after metafor's zero-cell correction.

    1/2 is added to every cell of a study with a cell at 0 (:data:`CONTINUITY_CORRECTION`),
    other studies are left alone. No checks: the counts may be real numbers (noisy counts
    ``m p~`` of a private release, clipped into ``[0, m]``: a cell is "at 0" where the clip
    put it there).
    """
    b, d = n1 - a, n2 - c
    zero = (a == 0.0) | (b == 0.0) | (c == 0.0) | (d == 0.0)
    add = np.where(zero, CONTINUITY_CORRECTION, 0.0)
    return a + add, b + add, c + add, d + add


def binary_effects(
    measure: str, a: FloatArray, n1: FloatArray, c: FloatArray, n2: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """``escalc``'s OR, RR or RD and their variances from counts, unchecked (module docstring).

    :func:`effect_sizes` checks its input and calls this; the private two-arm analysis
    (:mod:`fa_hetdp.protocol.two_arm`) calls it on noisy, real-valued counts.
    """
    a, b, c, d = binary_cells(a, n1, c, n2)
    n1, n2 = a + b, c + d
    p1, p2 = a / n1, c / n2
    if measure == "OR":
        return np.log(a / b) - np.log(c / d), 1.0 / a + 1.0 / b + 1.0 / c + 1.0 / d
    if measure == "RR":
        return np.log(p1) - np.log(p2), 1.0 / a - 1.0 / n1 + 1.0 / c - 1.0 / n2
    return p1 - p2, p1 * (1.0 - p1) / n1 + p2 * (1.0 - p2) / n2


def continuous_effects(
    measure: str,
    m1: FloatArray,
    s1: FloatArray,
    n1: FloatArray,
    m2: FloatArray,
    s2: FloatArray,
    n2: FloatArray,
) -> tuple[FloatArray, FloatArray]:
    """``escalc``'s MD or SMD (Hedges' g) and their variances, unchecked (module docstring).

    :func:`effect_sizes` checks its input and calls this; the private two-arm analysis
    (:mod:`fa_hetdp.protocol.two_arm`) calls it on noisy means and variance estimates.
    """
    if measure == "MD":
        return m1 - m2, s1 * s1 / n1 + s2 * s2 / n2
    m = n1 + n2 - 2.0
    sd_pooled = np.sqrt(((n1 - 1.0) * s1 * s1 + (n2 - 1.0) * s2 * s2) / m)
    g = hedges_correction(m) * (m1 - m2) / sd_pooled
    return g, 1.0 / n1 + 1.0 / n2 + g * g / (2.0 * (n1 + n2))


def effect_sizes(
    measure: str,
    *,
    events_treated: npt.ArrayLike | None = None,
    n_treated: npt.ArrayLike | None = None,
    events_control: npt.ArrayLike | None = None,
    n_control: npt.ArrayLike | None = None,
    mean_treated: npt.ArrayLike | None = None,
    sd_treated: npt.ArrayLike | None = None,
    mean_control: npt.ArrayLike | None = None,
    sd_control: npt.ArrayLike | None = None,
) -> tuple[FloatArray, FloatArray]:
    """Each study's effect and its sampling variance, as metafor's ``escalc(measure)``.

    Parameters
    ----------
    measure : {"OR", "RR", "RD", "MD", "SMD"}
        Log odds ratio, log risk ratio, risk difference (from ``events_*`` and ``n_*``); mean
        difference, Hedges' g (from ``mean_*``, ``sd_*`` and ``n_*``). Case-insensitive.
    events_treated, n_treated, events_control, n_control : array_like, optional
        Per study: events (whole numbers, ``0 <= events <= n``) and arm sizes (``>= 1`` for
        the binary measures, ``>= 2`` for the continuous ones).
    mean_treated, sd_treated, mean_control, sd_control : array_like, optional
        Per study: arm means (finite) and standard deviations (``> 0``).

    Returns
    -------
    effects, variances : FloatArray
        ``(k,)`` each (the module docstring has the formulas, the zero-cell correction and
        where statsmodels differs).

    Raises
    ------
    InputDataError
        An unknown measure; an argument the measure needs missing, or one it does not use
        given (both named); arrays of different lengths; a value out of range.

    Examples
    --------
    >>> y, v = effect_sizes("OR", events_treated=[4, 0], n_treated=[123, 50],
    ...                     events_control=[11, 3], n_control=[139, 50])
    >>> [round(float(x), 4) for x in y], [round(float(x), 4) for x in v]
    ([-0.9387, -2.0072], [0.3571, 2.3266])
    """
    name = measure.upper() if isinstance(measure, str) else measure
    if name not in MEASURES:
        raise InputDataError(
            f"measure must be one of {', '.join(repr(m) for m in MEASURES)} (log odds ratio, "
            f"log risk ratio, risk difference from event counts; mean difference, Hedges' g "
            f"from means and SDs), got measure={measure!r}."
        )
    given = {
        "events_treated": events_treated,
        "n_treated": n_treated,
        "events_control": events_control,
        "n_control": n_control,
        "mean_treated": mean_treated,
        "sd_treated": sd_treated,
        "mean_control": mean_control,
        "sd_control": sd_control,
    }
    needed = _BINARY_ARGS if name in BINARY_MEASURES else _CONTINUOUS_ARGS
    missing = [arg for arg in needed if given[arg] is None]
    extra = [arg for arg, value in given.items() if value is not None and arg not in needed]
    if missing or extra:
        problems = []
        if missing:
            problems.append(f"missing {', '.join(missing)}")
        if extra:
            problems.append(f"not used by {name}: {', '.join(extra)}")
        raise InputDataError(
            f"measure={name!r} needs exactly {', '.join(needed)}; {'; '.join(problems)}."
        )
    arrays = {arg: _as_vector(arg, given[arg]) for arg in needed}
    lengths = {arg: arr.shape[0] for arg, arr in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise InputDataError(
            f"every argument needs one value per study; got lengths "
            f"{', '.join(f'{arg}={n}' for arg, n in lengths.items())}."
        )
    if name in BINARY_MEASURES:
        a, n1 = arrays["events_treated"], arrays["n_treated"]
        c, n2 = arrays["events_control"], arrays["n_control"]
        _check_counts("n_treated", n1, 1)
        _check_counts("n_control", n2, 1)
        _check_counts("events_treated", a, 0)
        _check_counts("events_control", c, 0)
        for label, ev, n in (("treated", a, n1), ("control", c, n2)):
            bad = np.flatnonzero(ev > n)
            if bad.size:
                raise InputDataError(
                    f"events_{label} must be <= n_{label} (0 <= events <= n); studies "
                    f"{bad[:10].tolist()} have {ev[bad[:10]].tolist()} events of "
                    f"{n[bad[:10]].tolist()}."
                )
        return binary_effects(name, a, n1, c, n2)
    n1, n2 = arrays["n_treated"], arrays["n_control"]
    _check_counts("n_treated", n1, 2)
    _check_counts("n_control", n2, 2)
    for arg in ("sd_treated", "sd_control"):
        bad = np.flatnonzero(arrays[arg] <= 0.0)
        if bad.size:
            raise InputDataError(
                f"{arg} must be > 0 (a standard deviation); studies {bad[:10].tolist()} have "
                f"{arrays[arg][bad[:10]].tolist()}."
            )
    return continuous_effects(
        name,
        arrays["mean_treated"],
        arrays["sd_treated"],
        n1,
        arrays["mean_control"],
        arrays["sd_control"],
        n2,
    )
