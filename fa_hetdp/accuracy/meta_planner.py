"""The accuracy planner of the private meta-analysis: expected errors before any data exist.

:func:`plan_meta_accuracy` predicts how far :func:`fa_hetdp.private_meta_analysis` will land
from :func:`fa_hetdp.meta_analysis` on the same records, from public quantities only: the
number of clients ``n``, their record counts ``m_i``, ``d``, the privacy settings and a model
of the data (an ``I^2`` profile, the within-client variance of a record, the coordinate means).

The model federation (:class:`MetaModel`): coordinate ``j`` gives every client the
within-variance ``sigma^2_j``, so ``v_ij = sigma^2_j/m_i``; the between-client variance is
``tau^2_j = I^2_j/(1 - I^2_j) s^2_j`` with ``s^2_j`` Higgins & Thompson's typical within-study
variance, and client means are ``theta_ij ~ N(mu_j, v_ij + tau^2_j)``.

The run is calibrated exactly as the private meta-analysis calibrates it
(:func:`~fa_hetdp.protocol.meta_plan.plan_meta`: every release's sensitivity, the budget
split, the noise shape), and the plan's noise is propagated through the protocol's own
formulas by a small seeded Monte Carlo over client *summaries* (no records): each draw takes
client means from the model, builds every client's summary (mean, ``SS = (m_i - 1)
sigma^2``, sum of squares), runs the three rounds with the plan's noise
(:func:`~fa_hetdp.protocol.meta_simulate.run_rounds`: the clients' round vectors, the
server's broadcasts -- floor, centre, adaptive clip -- its clamps and its estimators) and
compares with the exact analysis of the same means and variances
(:func:`~fa_hetdp.stats.meta.meta_from_effects`). So every noise source, the clipping's bias
and the noisy round-A broadcasts are in the prediction, and it follows the protocol when the
protocol changes. What the model leaves out: the sampling spread of each client's ``s^2``
around ``sigma^2`` and a floor that binds (records far from the model), which the benchmark
measures.

Each figure is the median over draws of the per-draw coordinate average of the absolute
error, as ``benchmarks/meta_bench.py`` reports it: ``I^2`` absolute; ``tau^2`` relative to the
coordinate average of the exact ``tau^2`` (a coordinate with ``tau^2 = 0`` has no relative
error of its own); the pooled and random-effects means relative to ``|mu_j|``.

:func:`min_records` and :func:`min_clients_meta` invert the planner for a target.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray
from fa_hetdp.errors import InputDataError, PrivacyParameterError
from fa_hetdp.protocol.meta_client import ClientSummary
from fa_hetdp.protocol.meta_plan import (
    MAX_WITHIN_VARIANCE,
    MetaPlan,
    MetaSettings,
    settings_from,
)
from fa_hetdp.protocol.meta_server import PrivateMetaAnalysis
from fa_hetdp.protocol.meta_simulate import plan_design, run_design
from fa_hetdp.protocol.silo_summaries import SiloPlan, silo_summaries_problem
from fa_hetdp.stats.meta import meta_from_effects, typical_variance
from fa_hetdp.stats.meta_figures import META_FIGURES, planned_figures

__all__ = [
    "META_STATISTICS",
    "PLAN_UNIT_REQUIRED",
    "MetaAccuracyPlan",
    "MetaModel",
    "MetaPlannedError",
    "choose_plan",
    "expected_meta_errors",
    "min_clients_meta",
    "min_records",
    "plan_meta_accuracy",
]

META_STATISTICS: Final[Mapping[str, str]] = planned_figures()
"""The planned statistics (key -> display name with how their error is scaled), read from the
one table, :data:`fa_hetdp.stats.meta_figures.META_FIGURES`."""
RELATIVE: Final = frozenset(f.key for f in META_FIGURES if f.relative)

DEFAULT_I2_RANGE: Final = (0.9, 0.999)
"""Default I^2 profile: ``1 - I^2`` spaced evenly in log scale over this range (0.9, 0.99,
0.999 for ``d = 3``; 0.99 for ``d = 1``). Real cross-silo data sit there: the columns of
nycflights13 by carrier (0.997, 0.997, 0.9998), lme4 InstEval by department (0.977-0.9999),
mlmRev Chem97 by education authority (0.87, 0.915; its ``age`` 0.13) and mlmRev Exam by
school (0.89, 0.93) (``benchmarks/real_silos.py``; the earlier default 0..0.95 was the
issue's synthetic goal federation, which ``benchmarks/meta_bench.py`` states explicitly)."""
MAX_I2: Final = 0.99999
"""Largest stated ``I^2`` (real silos reach 0.9999)."""
DEFAULT_WITHIN_VARIANCE: Final = 1.0 / 12.0
"""Default within-client variance of a record (a uniform record on [0, 1])."""
DEFAULT_VARIANCE_RATIO: Final = 3.0
"""Default spread of the silos' within-variances (largest over smallest, per coordinate): the
median over the real data sets' columns (nycflights13 2.5-44, InstEval 1.1-4.7, Chem97
2.0-5.1, Exam 11-544; ``benchmarks/real_silos.py``)."""
MAX_VARIANCE_RATIO: Final = 1e6
DEFAULT_COORDINATE_MEAN: Final = 0.5

PLAN_UNIT_REQUIRED: Final = (
    "the meta-analysis plan needs privacy_unit stated (--privacy-unit on the command line): "
    "'record' (one record of one silo; the record counts are public) or 'client' (one silo "
    "with all its records); the two plans differ by orders of magnitude, and neither is assumed"
)
"""The refusal when the meta-analysis is planned without saying what it protects (as
:data:`~fa_hetdp.protocol.meta_plan.UNIT_REQUIRED` for the analysis itself)."""

DRAWS: Final = 200
"""Draws of the model's client means and the plan's noise behind each planned error."""
SEARCH_DRAWS: Final = 100
"""Draws per evaluation in the inverse searches (about 20 evaluations each)."""


@dataclass(frozen=True)
class MetaModel:
    """The model federation the planner evaluates (public assumptions, per coordinate).

    Attributes
    ----------
    records_per_client : FloatArray
        ``m_i``, (n,).
    i2 : FloatArray
        Target ``I^2_j`` (d,), in [0, 1).
    within_variance : FloatArray
        ``sigma^2_j``: the pooled within-client variance of one record's coordinate (d,), the
        ``(m_i - 1)``-weighted mean of the silos' variances (what round A estimates).
    coordinate_mean : FloatArray
        ``mu_j`` (d,).
    one_hot : bool
        Records are one-hot labels: a client's label shares fix its sums of squares, and the
        reference is the protocol without noise (a client lacking a label has no exact
        inverse-variance weight on it).
    variance_ratio : FloatArray
        Spread of the silos' within-variances per coordinate (d,), largest over smallest (1:
        equal): each draw
        gives the silos variances log-uniform over that ratio (evenly spaced quantiles, in an
        order drawn afresh per draw and coordinate -- which silo is the noisy one is not
        known), scaled to the pooled ``sigma^2_j`` (:meth:`silo_variances`).
    silo_variance : FloatArray or None
        Stated per-silo within-variances ``sigma^2_ij`` (n, d), in the silos' order (then
        ``variance_ratio`` is not used).
    """

    records_per_client: FloatArray
    i2: FloatArray
    within_variance: FloatArray
    coordinate_mean: FloatArray
    one_hot: bool = False
    variance_ratio: FloatArray | float = 1.0
    silo_variance: FloatArray | None = None

    @property
    def n(self) -> int:
        """Number of clients."""
        return int(self.records_per_client.size)

    @property
    def d(self) -> int:
        """Number of coordinates."""
        return int(self.i2.size)

    @property
    def spread(self) -> str:
        """How the silos' within-variances differ, in words."""
        if self.silo_variance is not None:
            return "within-variances stated per silo"
        ratio = np.asarray(self.variance_ratio, dtype=np.float64)
        if float(ratio.max()) == 1.0:
            return "equal within-variances across silos"
        return f"silos' within-variances up to {float(ratio.max()):.3g}x apart"

    def silo_variances(self, rng: np.random.Generator | None = None) -> FloatArray:
        """Return the silos' within-variances ``sigma^2_ij`` (n, d) of one draw.

        Stated ones as stated; otherwise ``variance_ratio ** (k/(n - 1) - 1/2)``, ``k = 0..n-1``
        (log-uniform quantiles), permuted over the silos by ``rng`` per coordinate (None: in
        the silos' order), scaled so their ``(m_i - 1)``-weighted mean is ``sigma^2_j``, at most
        1/4 (a record in [0, 1]).
        """
        if self.silo_variance is not None:
            return self.silo_variance
        quantiles = np.arange(self.n) / max(self.n - 1, 1) - 0.5
        ratio = np.broadcast_to(np.asarray(self.variance_ratio, dtype=np.float64), (self.d,))
        base = ratio[None, :] ** quantiles[:, None]
        if rng is not None:
            base = rng.permuted(base, axis=0)
        dof = self.records_per_client[:, None] - 1.0
        scaled = base * (self.within_variance / (np.sum(dof * base, axis=0) / dof.sum()))
        out: FloatArray = np.minimum(scaled, MAX_WITHIN_VARIANCE)
        return out

    def typical_variance_of(self, variances: FloatArray) -> FloatArray:
        """Return Higgins & Thompson's typical within-study variance ``s^2_j`` (d,).

        For silo variances ``sigma^2_ij`` (n, d): :func:`~fa_hetdp.stats.meta.typical_variance`
        of the means' variances ``sigma^2_ij/m_i``.
        """
        return typical_variance(variances / self.records_per_client[:, None])

    @property
    def typical_variance(self) -> FloatArray:
        """:meth:`typical_variance_of` the silo variances in the silos' order (d,)."""
        return self.typical_variance_of(self.silo_variances())

    def tau2_of(self, variances: FloatArray) -> FloatArray:
        """``tau^2_j = I^2_j/(1 - I^2_j) s^2_j`` (d,) for silo variances (n, d)."""
        out: FloatArray = self.i2 / (1.0 - self.i2) * self.typical_variance_of(variances)
        return out

    @property
    def tau2(self) -> FloatArray:
        """:meth:`tau2_of` the silo variances in the silos' order (d,)."""
        return self.tau2_of(self.silo_variances())


@dataclass(frozen=True)
class MetaPlannedError:
    """The expected error of one meta statistic.

    Attributes
    ----------
    key, display : str
        :data:`META_STATISTICS` key and name.
    typical : float
        The statistic's coordinate average in the model federation.
    error : float
        The median over draws of the coordinate average of the absolute error (relative for
        ``tau2`` and the means, see the module docstring): what ``benchmarks/meta_bench.py``
        measures, a median over runs.
    draws : FloatArray
        That coordinate average in each draw (its spread: what one run may see).
    """

    key: str
    display: str
    typical: float
    error: float
    draws: FloatArray

    @property
    def relative(self) -> bool:
        """Whether :attr:`error` is relative."""
        return self.key in RELATIVE


@dataclass(frozen=True)
class MetaAccuracyPlan:
    """What a private meta-analysis run will be able to tell: the expected error of each figure.

    Attributes
    ----------
    model : MetaModel
        The model federation (public assumptions).
    epsilon, delta : float
        The budget.
    privacy_unit : str
        ``"record"`` or ``"client"``.
    errors : tuple[MetaPlannedError, ...]
        One row per :data:`META_STATISTICS` key.
    plan : MetaPlan or SiloPlan
        The calibrated plan of the run (:mod:`fa_hetdp.protocol.meta_plan`,
        :mod:`fa_hetdp.protocol.silo_summaries`).
    alternatives : tuple[MetaAccuracyPlan, ...]
        With ``design = "auto"``: the plan of the design not chosen (its errors beside).
    reason : str
        Why this design runs.
    """

    model: MetaModel
    epsilon: float
    delta: float
    privacy_unit: str
    errors: tuple[MetaPlannedError, ...]
    plan: MetaPlan | SiloPlan
    alternatives: tuple[MetaAccuracyPlan, ...] = ()
    reason: str = ""

    @property
    def design(self) -> str:
        """The design planned (``"secure-sums"`` or ``"silo-summaries"``)."""
        return self.plan.design

    @property
    def n(self) -> int:
        """Number of clients."""
        return self.model.n

    @property
    def d(self) -> int:
        """Number of coordinates."""
        return self.model.d

    def error(self, key: str) -> MetaPlannedError:
        """Return the row of ``key`` (one of :data:`META_STATISTICS`)."""
        for row in self.errors:
            if row.key == key:
                return row
        raise KeyError(f"no planned error for {key!r}; allowed: {tuple(META_STATISTICS)}")

    def lines(self) -> list[str]:
        """Return the plan as ``fa-hetdp plan --records-per-client M`` prints it."""
        m = self.model.records_per_client
        counts = f"{m.min():.0f}" if m.min() == m.max() else f"{m.min():.0f}-{m.max():.0f}"
        i2 = self.model.i2
        out = [
            f"meta-analysis plan: n = {self.n} clients holding {counts} records each, "
            f"d = {self.d}, epsilon = {self.epsilon:g}, delta = {self.delta:g}, "
            f"privacy unit: {self.privacy_unit}",
            f"model: I^2 {i2.min():.3g}-{i2.max():.3g} over the coordinates, within-variance "
            f"of a record {float(np.mean(self.model.within_variance)):.3g}, coordinate mean "
            f"{float(np.mean(self.model.coordinate_mean)):.3g} (averages), {self.model.spread}",
            f"design: {self.design}" + (f" ({self.reason})" if self.reason else ""),
        ]
        plans = (self, *self.alternatives)
        out.append(
            "| statistic | typical | "
            + " | ".join(f"expected error, {p.design}" for p in plans)
            + " |"
        )
        out.append("|---|---|" + "---|" * len(plans))
        for row in self.errors:
            cells = [_error_text(p.error(row.key)) for p in plans]
            out.append(f"| {row.display} | {row.typical:.4g} | " + " | ".join(cells) + " |")
        return out

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (``fa-hetdp plan --records-per-client M --json``)."""
        m = self.model.records_per_client
        return {
            "analysis": "meta",
            "n": self.n,
            "d": self.d,
            "records_per_client": {"min": float(m.min()), "max": float(m.max())},
            "epsilon": self.epsilon,
            "delta": self.delta,
            "privacy_unit": self.privacy_unit,
            "design": self.design,
            "design_reason": self.reason,
            "alternatives": {
                p.design: {r.key: r.error for r in p.errors} for p in self.alternatives
            },
            "assumptions": {
                "i2": self.model.i2.tolist(),
                "within_variance": self.model.within_variance.tolist(),
                "coordinate_mean": self.model.coordinate_mean.tolist(),
                "variance_ratio": np.broadcast_to(
                    np.asarray(self.model.variance_ratio, dtype=np.float64), (self.d,)
                ).tolist(),
                "silo_variance": None
                if self.model.silo_variance is None
                else self.model.silo_variance.tolist(),
            },
            "statistics": {
                r.key: {
                    "typical": r.typical,
                    "error": r.error,
                    "relative": r.relative,
                    "quartiles": np.quantile(r.draws, [0.25, 0.75]).tolist(),
                }
                for r in self.errors
            },
        }


# --------------------------------------------------------------------------- the propagation


def _summaries(model: MetaModel, theta: FloatArray, s2: FloatArray) -> list[ClientSummary]:
    """Every client's summary for client means ``theta`` and sample variances ``s2`` (n, d).

    One-hot records: a client's share ``theta`` of a label fixes its sums (``x^2 = x``):
    ``SS = m theta (1 - theta)``, ``sum x^2 = m theta``.
    """
    m = model.records_per_client
    if model.one_hot:
        ss = m[:, None] * theta * (1.0 - theta)
    else:
        ss = (m[:, None] - 1.0) * s2
    sq = ss + m[:, None] * theta * theta
    return [ClientSummary(theta=theta[i], ss=ss[i], sq=sq[i], m=int(m[i])) for i in range(model.n)]


def draw_silos(model: MetaModel, rng: np.random.Generator) -> tuple[FloatArray, FloatArray]:
    """One draw of the model federation's silos: means ``theta`` and sample variances (n, d).

    The silos' variances ``sigma^2_ij`` (:meth:`MetaModel.silo_variances`), ``tau^2_j`` for the
    target ``I^2`` at those variances, ``theta_ij ~ N(mu_j, sigma^2_ij/m_i + tau^2_j)`` clipped
    to [0, 1] (one-hot: rounded to shares of ``m_i``), and each silo's sample variance with its
    sampling spread, ``s^2_ij = sigma^2_ij chi^2_{m_i - 1}/(m_i - 1)`` (at most 1/4; one-hot:
    fixed by the shares, ``theta (1 - theta) m/(m - 1)``).
    """
    m = model.records_per_client[:, None]
    sigma2 = model.silo_variances(rng)
    scale = np.sqrt(sigma2 / m + model.tau2_of(sigma2)[None, :])
    theta = np.clip(
        model.coordinate_mean + scale * rng.standard_normal((model.n, model.d)), 0.0, 1.0
    )
    if model.one_hot:  # label shares are counts over m
        theta = np.round(theta * m) / m
        return theta, theta * (1.0 - theta) * m / (m - 1.0)
    s2 = sigma2 * rng.chisquare(m - 1.0, (model.n, model.d)) / (m - 1.0)
    return theta, np.clip(s2, 1e-12, MAX_WITHIN_VARIANCE)


def _error_text(row: MetaPlannedError) -> str:
    if row.relative:
        return f"{100 * row.error:.3g} % of the value"
    return f"{row.error:.3g} (absolute)"


def _draw_errors(
    private: PrivateMetaAnalysis, reference: tuple[FloatArray, ...]
) -> dict[str, float]:
    """One draw's coordinate-average errors (the benchmark's figures) and reference values."""
    mu, i2, tau2, re = reference
    out = {
        "i2": float(np.mean(np.abs(private.i2 - i2))),
        "tau2": float(np.mean(np.abs(private.tau2 - tau2))) / max(float(np.mean(tau2)), 1e-300),
        "pooled_mean": float(
            np.mean(np.abs(private.pooled_mean - mu) / np.maximum(np.abs(mu), 1e-12))
        ),
        "random_effects_mean": float(
            np.mean(np.abs(private.random_effects_mean - re) / np.maximum(np.abs(re), 1e-12))
        ),
    }
    for key, value in (("i2", i2), ("tau2", tau2), ("pooled_mean", mu)):
        out[f"value_{key}"] = float(np.mean(value))
    out["value_random_effects_mean"] = float(np.mean(re))
    return out


def expected_meta_errors(
    model: MetaModel, plan: MetaPlan | SiloPlan, *, draws: int = DRAWS, seed: int = 0
) -> tuple[MetaPlannedError, ...]:
    """Return the planned errors of ``model`` under ``plan`` (module docstring).

    Parameters
    ----------
    model : MetaModel
        The model federation.
    plan : MetaPlan
        The calibrated run (its counts must be the model's).
    draws, seed : int
        Draws of the model's client means and of the plan's noise (a fixed seed: the plan is
        deterministic).

    Returns
    -------
    tuple[MetaPlannedError, ...]
        One row per :data:`META_STATISTICS` key.
    """
    rng = np.random.default_rng(seed)
    noise_free = None
    if model.one_hot:
        noise_free = plan_design(
            plan.epsilon,
            plan.delta,
            plan.records_per_client,
            plan.d,
            replace(plan.settings, noise=False),
        )
    runs = []
    for _ in range(draws):
        theta, s2 = draw_silos(model, rng)
        summaries = _summaries(model, theta, s2)
        private = run_design(plan, summaries, rng)
        reference: tuple[FloatArray, ...]
        if noise_free is not None:
            # as the benchmark: a silo lacking a label has no exact weight there; the
            # reference is the same protocol without noise
            ref = run_design(noise_free, summaries, rng)
            reference = (ref.pooled_mean, ref.i2, ref.tau2, ref.random_effects_mean)
        else:
            v = s2 / model.records_per_client[:, None]
            mu, _q, i2, tau2, _raw, re = meta_from_effects(theta, v)
            reference = (mu, i2, tau2, re)
        runs.append(_draw_errors(private, reference))
    rows = []
    for key, display in META_STATISTICS.items():
        errors = np.array([r[key] for r in runs])
        typical = float(np.mean([r[f"value_{key}"] for r in runs]))
        rows.append(MetaPlannedError(key, display, typical, float(np.median(errors)), errors))
    return tuple(rows)


# --------------------------------------------------------------------------- the plan


def per_coordinate(name: str, value: object, d: int, low: float, high: float) -> FloatArray:
    """Return an assumption as ``(d,)`` values in ``[low, high]`` (one value: every coordinate).

    Raises
    ------
    InputDataError
        Not one number or ``d`` finite numbers in range (the line names the assumption).
    """
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(d, float(arr))
    bad = arr.shape != (d,) or not np.all(np.isfinite(arr))
    if bad or bool(np.any(arr < low)) or bool(np.any(arr > high)):
        raise InputDataError(
            f"{name} must be a number or {d} numbers (one per coordinate) in [{low}, {high}], "
            f"got {name}={value!r}."
        )
    return arr


def records_model(records_per_client: int | npt.ArrayLike, n: int) -> FloatArray:
    """``m_i`` (n,) from one count for every client or one per client (each >= 2)."""
    arr = np.asarray(records_per_client, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    if arr.shape != (n,) or not np.all(np.isfinite(arr)) or bool(np.any(arr < 2)):
        raise InputDataError(
            f"records_per_client must be an integer >= 2 or {n} of them (one per client), got "
            f"{records_per_client!r}."
        )
    return np.floor(arr)


def meta_model(
    n: int,
    d: int,
    *,
    records_per_client: int | npt.ArrayLike,
    i2: float | npt.ArrayLike | None = None,
    within_variance: float | npt.ArrayLike | None = None,
    coordinate_mean: float | npt.ArrayLike | None = None,
    one_hot: bool = False,
    variance_ratio: float | npt.ArrayLike | None = None,
    silo_variance: npt.ArrayLike | None = None,
) -> MetaModel:
    """Build the model federation from public assumptions (defaults: the module's constants).

    ``i2`` left out: :data:`DEFAULT_I2_RANGE`; ``variance_ratio`` left out:
    :data:`DEFAULT_VARIANCE_RATIO` (1 for one-hot records, whose variances follow from their
    shares); ``silo_variance``: stated per-silo within-variances (n, d) or (n,) for every
    coordinate, in place of ``within_variance`` and ``variance_ratio``; ``one_hot``: label
    records (:class:`MetaModel`).
    """
    if n < 2 or d < 1:
        raise InputDataError(f"a meta-analysis needs n >= 2 clients and d >= 1, got n={n}, d={d}.")
    if i2 is None:
        low, high = DEFAULT_I2_RANGE
        spaced = (
            np.geomspace(1.0 - low, 1.0 - high, d) if d > 1 else [np.sqrt((1 - low) * (1 - high))]
        )
        profile: object = 1.0 - np.asarray(spaced)
    else:
        profile = i2
    counts = records_model(records_per_client, n)
    silos = None
    if silo_variance is not None:
        if within_variance is not None or variance_ratio is not None:
            raise InputDataError(
                "silo_variance states every silo's within-variance; leave within_variance "
                "and variance_ratio out."
            )
        silos = _per_silo(silo_variance, n, d)
        dof = counts[:, None] - 1.0
        within_variance = np.sum(dof * silos, axis=0) / dof.sum()
    ratio = per_coordinate(
        "variance_ratio",
        (1.0 if one_hot else DEFAULT_VARIANCE_RATIO) if variance_ratio is None else variance_ratio,
        d,
        1.0,
        MAX_VARIANCE_RATIO,
    )
    return MetaModel(
        records_per_client=counts,
        i2=per_coordinate("i2", profile, d, 0.0, MAX_I2),
        within_variance=per_coordinate(
            "within_variance",
            DEFAULT_WITHIN_VARIANCE if within_variance is None else within_variance,
            d,
            1e-8,
            0.25,
        ),
        coordinate_mean=per_coordinate(
            "coordinate_mean",
            DEFAULT_COORDINATE_MEAN if coordinate_mean is None else coordinate_mean,
            d,
            1e-6,
            1.0,
        ),
        one_hot=one_hot,
        variance_ratio=ratio,
        silo_variance=silos,
    )


def _per_silo(value: npt.ArrayLike, n: int, d: int) -> FloatArray:
    """Stated per-silo within-variances: (n, d), or (n,) for every coordinate, in (0, 1/4]."""
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 1 and arr.shape == (n,):
        arr = np.repeat(arr[:, None], d, axis=1)
    bad = arr.shape != (n, d) or not np.all(np.isfinite(arr))
    if bad or bool(np.any(arr <= 0.0)) or bool(np.any(arr > MAX_WITHIN_VARIANCE)):
        raise InputDataError(
            f"silo_variance must be {n} numbers (one per silo) or {n} x {d} (per silo and "
            f"coordinate), each in (0, {MAX_WITHIN_VARIANCE}], got shape {arr.shape}."
        )
    return arr


def plan_meta_accuracy(
    n: int,
    d: int,
    *,
    records_per_client: int | npt.ArrayLike,
    epsilon: float,
    delta: float,
    privacy_unit: Literal["record", "client"] | str | None = None,
    i2: float | npt.ArrayLike | None = None,
    within_variance: float | npt.ArrayLike | None = None,
    coordinate_mean: float | npt.ArrayLike | None = None,
    one_hot: bool = False,
    variance_ratio: float | npt.ArrayLike | None = None,
    silo_variance: npt.ArrayLike | None = None,
    draws: int = DRAWS,
    **settings: Any,
) -> MetaAccuracyPlan:
    """Plan the expected error of a private meta-analysis (no data needed).

    Parameters
    ----------
    n, d : int
        Number of clients (silos) and coordinates.
    records_per_client : int or array_like
        ``m``: every client's record count, or one per client (public, as the run takes them).
    epsilon, delta : float
        The run's budget.
    privacy_unit : {"record", "client"}
        What the privacy protects; required, as for :func:`fa_hetdp.private_meta_analysis`
        (:data:`PLAN_UNIT_REQUIRED`): the two plans differ by orders of magnitude.
    i2, within_variance, coordinate_mean : float or array_like, optional
        The model federation (one value or one per coordinate): the ``I^2`` profile (default
        :data:`DEFAULT_I2_RANGE`, near 1 as real cross-silo data), the pooled within-client
        variance of a record (default 1/12) and the coordinate means (default 1/2).
    variance_ratio : float or array_like, optional
        How far the silos' within-variances differ, largest over smallest, one value or one
        per coordinate (default :data:`DEFAULT_VARIANCE_RATIO`; 1: equal).
    silo_variance : array_like, optional
        Stated within-variances per silo, (n,) or (n, d), in place of ``within_variance`` and
        ``variance_ratio``.
    one_hot : bool
        Whether records are one-hot label vectors (one replacement moves two coordinates).
    draws : int
        Monte Carlo draws (seeded; :data:`DRAWS`).
    **settings
        Any other setting of :func:`fa_hetdp.private_meta_analysis` (``kappa``,
        ``floor_fraction``, ``placement``, ...).

    Returns
    -------
    MetaAccuracyPlan
        The expected coordinate-average error of ``I^2``, ``tau^2``, the pooled and the
        random-effects means.
    """
    model = meta_model(
        n,
        d,
        records_per_client=records_per_client,
        i2=i2,
        within_variance=within_variance,
        coordinate_mean=coordinate_mean,
        one_hot=one_hot,
        variance_ratio=variance_ratio,
        silo_variance=silo_variance,
    )
    if privacy_unit is None:
        raise PrivacyParameterError(PLAN_UNIT_REQUIRED)
    meta_settings = settings_from(privacy_unit=privacy_unit, one_hot=one_hot, **settings)
    counts = model.records_per_client.astype(np.int64)

    def one(design: str) -> MetaAccuracyPlan:
        plan = plan_design(epsilon, delta, counts, model.d, replace(meta_settings, design=design))
        return MetaAccuracyPlan(
            model=model,
            epsilon=epsilon,
            delta=delta,
            privacy_unit=privacy_unit,
            errors=expected_meta_errors(model, plan, draws=draws),
            plan=plan,
        )

    if meta_settings.design != "auto":
        return one(meta_settings.design)
    return choose_plan(meta_settings, one)


def choose_plan(
    settings: MetaSettings, plan_of: Callable[[str], MetaAccuracyPlan]
) -> MetaAccuracyPlan:
    """Plan both designs and return the one ``design = "auto"`` runs, the other beside it.

    The silo summaries run where they are allowed (:func:`silo_summaries_problem`) and where
    their planned error of the random-effects mean is the smaller (ties: of ``I^2``; the
    random-effects mean decides where the two disagree). A silo whose variance release is
    mostly noise no longer rules them out: its variance is shrunk to a typical one and the
    sample intervals' bootstrap draws its true variance from the silos' spread
    (:func:`fa_hetdp.protocol.silo_summaries.plausible_variances`; measured on four real
    federations, 95-99 % of the intervals hold the exact value).
    """
    secure = plan_of("secure-sums")
    problem = silo_summaries_problem(settings)
    if problem is not None:
        return replace(secure, reason=f"secure sums only: {problem}")
    silo = plan_of("silo-summaries")

    def key(p: MetaAccuracyPlan) -> tuple[float, float]:
        return (p.error("random_effects_mean").error, p.error("i2").error)

    winner, other = (silo, secure) if key(silo) <= key(secure) else (secure, silo)
    (re_w, i2_w), (re_o, i2_o) = key(winner), key(other)
    reason = (
        f"auto: planned random-effects mean error {100 * re_w:.3g} % against "
        f"{100 * re_o:.3g} % for the {other.design}"
    )
    if i2_o < i2_w:  # the two disagree: say so, and what the other design would give
        reason += (
            f"; the {other.design} plan the smaller |I^2| error ({i2_o:.3g} against "
            f"{i2_w:.3g}): design={other.design!r} where I^2 matters more"
        )
    return replace(winner, alternatives=(other,), reason=reason)


def _search(error_at: Callable[[int], float], low: int, high: int, target: float) -> int | None:
    """Smallest integer ``x`` in ``[low, high]`` with ``error_at(x) <= target``.

    Doubling from ``low`` until the target is met (so a large ``high`` costs nothing unless
    it is needed: a plan's time grows with ``n``), then bisection.
    """
    if error_at(low) <= target:
        return low
    upper = low
    while True:
        lower, upper = upper, min(2 * upper, high)
        if error_at(upper) <= target:
            break
        if upper == high:
            return None
    while upper - lower > 1:
        mid = (lower + upper) // 2
        if error_at(mid) <= target:
            upper = mid
        else:
            lower = mid
    return upper


def min_records(
    target: float,
    statistic: str,
    n: int,
    d: int,
    *,
    epsilon: float,
    delta: float,
    max_records: int = 10_000_000,
    **kwargs: Any,
) -> int | None:
    """Return the smallest ``m`` (records per client) whose planned error meets ``target``.

    ``kwargs`` go to :func:`plan_meta_accuracy` (``draws`` default :data:`SEARCH_DRAWS`).
    None when not reached by ``max_records``.
    """
    _check_statistic(statistic)
    kwargs.setdefault("draws", SEARCH_DRAWS)
    return _search(
        lambda m: (
            plan_meta_accuracy(n, d, records_per_client=m, epsilon=epsilon, delta=delta, **kwargs)
            .error(statistic)
            .error
        ),
        2,
        max_records,
        target,
    )


def min_clients_meta(
    target: float,
    statistic: str,
    records_per_client: int,
    d: int,
    *,
    epsilon: float,
    delta: float,
    max_clients: int = 2000,
    **kwargs: Any,
) -> int | None:
    """Return the smallest ``n`` (clients with ``records_per_client`` each) meeting ``target``.

    ``kwargs`` go to :func:`plan_meta_accuracy` (``draws`` default :data:`SEARCH_DRAWS`).
    None when not reached by ``max_clients``.
    """
    _check_statistic(statistic)
    kwargs.setdefault("draws", SEARCH_DRAWS)
    return _search(
        lambda n: (
            plan_meta_accuracy(
                n, d, records_per_client=records_per_client, epsilon=epsilon, delta=delta, **kwargs
            )
            .error(statistic)
            .error
        ),
        3,
        max_clients,
        target,
    )


def _check_statistic(statistic: str) -> None:
    if statistic not in META_STATISTICS:
        raise InputDataError(
            f"statistic must be one of {', '.join(META_STATISTICS)}, got {statistic!r}."
        )
