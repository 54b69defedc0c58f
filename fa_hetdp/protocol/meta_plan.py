"""The plan of the private meta-analysis: its releases, their sensitivities, their noise.

:func:`fa_hetdp.private_meta_analysis` runs three rounds of secure sums, per coordinate ``j``
(client ``i`` holds ``m_i`` records; ``theta``, ``SS``, ``s2 = SS/(m - 1)`` its own mean, sum of
squared deviations and sample variance; every ``m_i`` is public):

- round A: ``T = sum_i sum_k x_ik`` (and, for an adaptive clip, ``U = sum_i sum_k x_ik^2``),
  ``W = sum_i SS_i``. The server broadcasts the centre ``c = clip(T/M, 0, 1)``, the floor
  ``f = max(phi sigma^2, f_min)`` with ``sigma^2 = clip(W/(M - n), f_min, 1/4)``, ``kappa``
  and (``kappa_per_silo``) the pilot ratio ``rho = tau2_pilot/f``;
- round B: with ``s~2 = max(s2, f)``, ``w = m/s~2``, ``z = (theta - c) sqrt(w)``,
  ``z^ = clip(z, +-kappa_i)``, ``kappa_i = min(kappa sqrt(1 + m_i rho), sqrt(m_i/f))``
  (:func:`silo_kappa`): ``A = sum z^2``, ``B = sum sqrt(w) z^``, ``C = sum w``,
  ``D = sum w^2``; the server computes the fixed effect ``c + B/C``, ``Q = A - B^2/C``, ``I^2``
  and DerSimonian-Laird ``tau2`` (exact for any ``c`` while nothing clips);
- round C: ``w* = 1/(s~2/m + tau2)``, ``u = (theta - c) sqrt(w*)``, ``u^ = clip(u, +-kappa*)``:
  ``E = sum sqrt(w*) u^``, ``F = sum w*``; the random-effects mean is ``c + E/F``.

Each letter is one Gaussian release (a :class:`~fa_hetdp.dp.accounting.ReleaseSpec` of unit
sensitivity whose planned GDP ``mu_k`` is fixed before the run; where round A's floor makes
``C``, ``D`` and ``F`` public, their share goes to rounds B and C's other releases,
:meth:`MetaPlan.released_mu`); its noise is
``sigma_kj = a_j ||b/a|| / mu_k`` where ``b_j`` is the per-coordinate bound of the functions
below (``record_bound_*``, ``client_bound_*``) and ``a`` the noise shape (``a = b``:
per-coordinate, ``a = 1``: isotropic); the norm is over the coordinates, or over the two
largest for one-hot records. Rounds B and C are calibrated from the public outputs of the
rounds before them, and their ``mu_k`` from round A's public output with ``sum mu_k^2`` fixed
in advance: fully adaptive composition of GDP mechanisms (a privacy filter), so the whole run is
``sqrt(sum mu_k^2)``-GDP (docs/privacy.md, "Record-level sensitivity of the meta-analysis",
where each ``record_bound_*`` is proved, and "Budget of releases that turn public").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from fa_hetdp._types import FloatArray
from fa_hetdp.config.constraints import Real
from fa_hetdp.config.rules import Problem, raise_problems, validate
from fa_hetdp.config.settings import SETTINGS, meta_settings
from fa_hetdp.dp.accounting import BudgetPlan, ReleaseSpec, plan_budget, privacy_spent
from fa_hetdp.dp.mechanisms import NoiseMechanism, get_mechanism
from fa_hetdp.errors import InputDataError, PrivacyParameterError
from fa_hetdp.stats.meta_figures import releases_needed

__all__ = [
    "DESIGNS",
    "LATER_RELEASES",
    "META_RELEASES",
    "META_STATISTICS",
    "PUBLIC_WHEN_POOLED",
    "ROUNDS",
    "SILO_RELEASES",
    "SILO_WEIGHTS",
    "TWO_ARM_U_BOUND",
    "UNIT_REQUIRED",
    "MetaPlan",
    "MetaSettings",
    "client_bound_a",
    "client_bound_b",
    "client_bound_c",
    "client_bound_d",
    "client_bound_e",
    "client_bound_f",
    "client_bound_t",
    "client_bound_u2",
    "client_bound_w",
    "plan_meta",
    "planned_mu",
    "record_bound_a",
    "record_bound_b",
    "record_bound_c",
    "record_bound_d",
    "record_bound_e",
    "record_bound_f",
    "record_bound_t",
    "record_bound_u",
    "record_bound_u2",
    "record_bound_w",
    "record_bound_z",
    "silo_kappa",
]

ROUNDS: Final[dict[str, tuple[str, ...]]] = {
    "A": ("T", "U", "W"),
    "B": ("A", "B", "C", "D"),
    "C": ("E", "F"),
}
"""The releases of each round, in the order of a client's round vector (``d`` values each)."""

META_RELEASES: Final = ("T", "U", "W", "A", "B", "C", "D", "E", "F")

META_STATISTICS: Final[Mapping[str, tuple[str, ...]]] = releases_needed()
"""The figures one may ask for (``statistics``) and the releases each needs: read from the one
table, :data:`fa_hetdp.stats.meta_figures.META_FIGURES`."""

DEFAULT_WEIGHTS: Final[dict[str, float]] = {
    "T": 0.5,
    "U": 0.5,
    "W": 0.5,
    "A": 8.0,
    "B": 1.0,
    "C": 1.5,
    "D": 1.0,
    "E": 1.0,
    "F": 1.0,
}
"""Default budget weights (shares of ``mu^2``), chosen by measured error (module README)."""

MAX_WITHIN_VARIANCE: Final = 0.25

OWN_VARIANCE_SHARE: Final = 0.0625
"""Under public counts a silo weighs by its own variance only where one record can move that
variance by at most this share of the floor, ``1/(m - 1) <= share f`` (:func:`own_variance`);
elsewhere by round A's pooled within-variance, a public weight. ``1/16 = 1/kappa^2`` at the
default clip ``kappa = 4``: then the variance's term in ``z``'s record bound, ``kappa/(2 f (m -
1))``, is at most half the mean's, ``1/sqrt(f m)`` (docs/privacy.md)."""

LATER_RELEASES: Final = ("A", "B", "C", "D", "E", "F")
"""Rounds B and C's releases: calibrated after round A, whose output can make some public."""

PUBLIC_WHEN_POOLED: Final = ("C", "D", "F")
"""The releases whose every summand is public when every silo weighs by the pooled variance
(their record bounds are 0: :meth:`MetaPlan.public_releases`)."""

_SILO_BOUNDED: Final = LATER_RELEASES
"""Releases whose record bound takes ``max_i min(record_i, client_i)`` under public counts, each
silo at its own ``m_i`` and clip ``kappa_i`` (``T``, ``U``, ``W``'s are 1)."""

DESIGNS: Final = ("auto", "silo-summaries", "secure-sums")
"""The designs of the private meta-analysis (:class:`MetaSettings` ``design``)."""

SILO_RELEASES: Final = ("theta", "s2")
"""The silo-summaries design's releases per silo: its means and its sample variances."""

TWO_ARM_U_BOUND: Final = 2.5
"""The record bound of ``U`` on two-arm reduced summaries (docs/privacy.md, "Two-arm effects
under the secure sums": one record moves ``U' = SS' + m'' theta'^2`` by less than 5/2)."""

SILO_WEIGHTS: Final[dict[str, float]] = {"theta": 0.6, "s2": 0.4}
"""Default budget weights (shares of ``mu^2``) of the silo-summaries design."""


# ------------------------------------------------------------------------------ the bounds
# Each record_bound_* is proved in docs/privacy.md, "Record-level sensitivity of the
# meta-analysis": the largest change of one client's summand on one coordinate when one of its
# records is replaced (m records, public floor f, clip kappa). Arrays broadcast per coordinate.


def record_bound_t() -> float:
    """``T``: one record moves ``sum_k x_k`` by at most 1 (docs/privacy.md, round A)."""
    return 1.0


def record_bound_u2() -> float:
    """``U = sum_k x_k^2``: one record moves it by at most 1 (``x^2`` in ``[0, 1]``)."""
    return 1.0


def record_bound_w() -> float:
    """``W``: ``SS = min_c sum (x - c)^2`` moves by at most 1 (docs/privacy.md, fact 2)."""
    return 1.0


def own_variance(m: npt.ArrayLike, floor: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    """Whether a silo of ``m`` records weighs by its own variance (per coordinate of ``floor``).

    Under public counts a silo whose variance one record can move by more than
    :data:`OWN_VARIANCE_SHARE` of the floor (``1/(m - 1) > share f``) weighs by the pooled
    within-variance of round A instead (:func:`fa_hetdp.protocol.meta_client.variance_used`):
    its weight is then public, and the terms its own variance adds to the record bounds vanish
    (docs/privacy.md, "Silos weighed by the pooled variance"). A public function of ``m`` and
    the broadcast floor.
    """
    m_ = np.asarray(m, dtype=np.float64)
    f = np.asarray(floor, dtype=np.float64)
    return np.asarray(1.0 <= OWN_VARIANCE_SHARE * f * (m_ - 1.0))


def _own(own: npt.ArrayLike | None) -> FloatArray:
    """1.0 where a silo weighs by its own variance (None: every silo), 0.0 where not."""
    return np.asarray(1.0 if own is None else np.asarray(own, dtype=np.float64))


def record_bound_z(
    m: int, floor: npt.ArrayLike, kappa: npt.ArrayLike, own: npt.ArrayLike | None = None
) -> FloatArray:
    """``|dz^| <= 1/sqrt(f m) + kappa/(2 f (m - 1))`` (docs/privacy.md, round B).

    ``own``: whether the silo weighs by its own variance (:func:`own_variance`; None: yes);
    where not, its weight is public and the second term (the variance's) is 0.
    """
    f = np.asarray(floor, dtype=np.float64)
    return np.asarray(1.0 / np.sqrt(f * m) + _own(own) * np.asarray(kappa) / (2.0 * f * (m - 1)))


def record_bound_a(
    m: int, floor: npt.ArrayLike, kappa: npt.ArrayLike, own: npt.ArrayLike | None = None
) -> FloatArray:
    """Bound ``A = sum z^2``: ``min(2 kappa b_z, kappa^2)`` (docs/privacy.md, round B)."""
    k = np.asarray(kappa, dtype=np.float64)
    return np.asarray(np.minimum(2.0 * k * record_bound_z(m, floor, kappa, own), k * k))


def silo_kappa(
    kappa: npt.ArrayLike, rho: npt.ArrayLike | None, m: npt.ArrayLike, floor: npt.ArrayLike
) -> FloatArray:
    """Silo ``i``'s round-B clip ``kappa_i = min(kappa sqrt(1 + m_i rho), sqrt(m_i/f))``.

    ``rho`` (broadcast after round A; None: 0) is the pilot ratio ``tau2/sigma2``, under which
    ``z_i ~ N(0, 1 + m_i rho)``: the clip scales with the silo's own spread, so a large silo is
    not clipped and a small one keeps a small clip (and small bounds). ``|z| <= sqrt(m/f)``
    always. A public function of the broadcast and the public ``m_i`` (docs/privacy.md,
    "Record-level sensitivity of the meta-analysis"); increasing in ``m``.
    """
    k = np.asarray(kappa, dtype=np.float64)
    r = np.zeros_like(k) if rho is None else np.asarray(rho, dtype=np.float64)
    m_ = np.asarray(m, dtype=np.float64)
    f = np.asarray(floor, dtype=np.float64)
    return np.asarray(np.minimum(k * np.sqrt(1.0 + m_ * r), np.sqrt(m_ / f)))


def record_bound_b(
    m: int, floor: npt.ArrayLike, kappa: npt.ArrayLike, own: npt.ArrayLike | None = None
) -> FloatArray:
    """``B = sum sqrt(w) z^``: ``1/f + kappa sqrt(m)/((m - 1) f^1.5)`` (docs/privacy.md).

    ``own`` as :func:`record_bound_z` (where not: ``1/f``).
    """
    f = np.asarray(floor, dtype=np.float64)
    return np.asarray(1.0 / f + _own(own) * np.asarray(kappa) * math.sqrt(m) / ((m - 1) * f**1.5))


def record_bound_c(m: int, floor: npt.ArrayLike, own: npt.ArrayLike | None = None) -> FloatArray:
    """``C = sum w``: ``m/((m - 1) f^2)`` (docs/privacy.md, round B; at the smallest ``m``).

    ``own`` as :func:`record_bound_z` (where not: 0, the weight is public).
    """
    f = np.asarray(floor, dtype=np.float64)
    return np.asarray(_own(own) * m / ((m - 1) * f * f))


def record_bound_d(
    m_max: int, floor: npt.ArrayLike, own: npt.ArrayLike | None = None
) -> FloatArray:
    """``D = sum w^2``: ``2 (m/f) m/((m - 1) f^2)`` at the LARGEST ``m`` (docs/privacy.md).

    ``own`` as :func:`record_bound_z` (where not: 0, the weight is public).
    """
    f = np.asarray(floor, dtype=np.float64)
    return np.asarray(_own(own) * 2.0 * (m_max / f) * m_max / ((m_max - 1) * f * f))


def _w_star_max(m: int, floor: npt.ArrayLike, tau2: npt.ArrayLike) -> FloatArray:
    """Largest round-C weight ``w* = 1/(s~2/m + tau2) <= 1/(f/m + tau2)`` (``m/f`` at 0)."""
    f = np.asarray(floor, dtype=np.float64)
    return np.asarray(1.0 / (f / m + np.asarray(tau2, dtype=np.float64)))


def record_bound_u(
    m: int,
    floor: npt.ArrayLike,
    kappa_star: npt.ArrayLike,
    tau2: npt.ArrayLike = 0.0,
    own: npt.ArrayLike | None = None,
) -> FloatArray:
    """``|du^| <= sqrt(W)/m + kappa* W/(2 m (m - 1))``, ``W = 1/(f/m + tau2)`` (round C).

    ``du/dtheta = sqrt(w*)``, ``|du/ds~2| = |u| w*/(2m)``; at ``tau2 = 0``
    ``1/sqrt(f m) + kappa*/(2 f (m - 1))`` (docs/privacy.md).
    """
    w = _w_star_max(m, floor, tau2)
    return np.asarray(np.sqrt(w) / m + _own(own) * np.asarray(kappa_star) * w / (2.0 * m * (m - 1)))


def record_bound_e(
    m: int,
    floor: npt.ArrayLike,
    kappa_star: npt.ArrayLike,
    tau2: npt.ArrayLike = 0.0,
    own: npt.ArrayLike | None = None,
) -> FloatArray:
    """``E = sum sqrt(w*) u^``: ``W/m + kappa* W^1.5/(m (m - 1))``, ``W = 1/(f/m + tau2)``.

    ``sqrt(W) b_u + kappa* |d sqrt(w*)/ds~2|/(m - 1)`` with ``|d sqrt(w*)/ds~2| =
    w*^1.5/(2m)``; decreasing in ``m``; at ``tau2 = 0`` ``1/f + kappa* sqrt(m)/((m - 1) f^1.5)``
    (docs/privacy.md, round C).
    """
    w = _w_star_max(m, floor, tau2)
    return np.asarray(w / m + _own(own) * np.asarray(kappa_star) * w**1.5 / (m * (m - 1)))


def record_bound_f(
    m: int, floor: npt.ArrayLike, tau2: npt.ArrayLike = 0.0, own: npt.ArrayLike | None = None
) -> FloatArray:
    """``F = sum w*``: ``W^2/(m (m - 1))``, ``W = 1/(f/m + tau2)``; ``m/((m - 1) f^2)`` at 0.

    ``|dw*/ds~2| = w*^2/m`` (docs/privacy.md, round C); decreasing in ``m``.
    """
    w = _w_star_max(m, floor, tau2)
    return np.asarray(_own(own) * w * w / (m * (m - 1)))


# Client unit: the range of one client's whole summand (replace every record of one client;
# its m_i stays public), per coordinate.


def client_bound_t(m_max: int) -> float:
    """``T``: a client's ``sum_k x_k`` lies in ``[0, m]``."""
    return float(m_max)


def client_bound_u2(m_max: int) -> float:
    """``U``: a client's ``sum_k x_k^2`` lies in ``[0, m]``."""
    return float(m_max)


def client_bound_w(m_max: int) -> float:
    """``W``: ``SS`` lies in ``[0, m/4]`` (a variance of values in ``[0, 1]`` is at most 1/4)."""
    return m_max / 4.0


def client_bound_a(kappa: npt.ArrayLike) -> FloatArray:
    """Bound ``A``: ``z^2`` lies in ``[0, kappa^2]``."""
    k = np.asarray(kappa, dtype=np.float64)
    return np.asarray(k * k)


def client_bound_b(m_max: int, floor: npt.ArrayLike, kappa: npt.ArrayLike) -> FloatArray:
    """``B``: ``sqrt(w) z^`` lies in ``[-kappa sqrt(m/f), kappa sqrt(m/f)]``."""
    f = np.asarray(floor, dtype=np.float64)
    return np.asarray(2.0 * np.asarray(kappa) * np.sqrt(m_max / f))


def client_bound_c(m_max: int, floor: npt.ArrayLike) -> FloatArray:
    """``C``: ``w = m/s~2`` lies in ``(0, m/f]``."""
    return np.asarray(m_max / np.asarray(floor, dtype=np.float64))


def client_bound_d(m_max: int, floor: npt.ArrayLike) -> FloatArray:
    """``D``: ``w^2`` lies in ``(0, (m/f)^2]``."""
    return np.asarray((m_max / np.asarray(floor, dtype=np.float64)) ** 2)


def client_bound_e(
    m_max: int, floor: npt.ArrayLike, kappa_star: npt.ArrayLike, tau2: npt.ArrayLike = 0.0
) -> FloatArray:
    """``E``: ``sqrt(w*) u^`` in ``[-kappa* sqrt(W), kappa* sqrt(W)]``, ``W = 1/(f/m + tau2)``."""
    return np.asarray(2.0 * np.asarray(kappa_star) * np.sqrt(_w_star_max(m_max, floor, tau2)))


def client_bound_f(m_max: int, floor: npt.ArrayLike, tau2: npt.ArrayLike = 0.0) -> FloatArray:
    """``F``: ``w* <= 1/(f/m + tau2)``."""
    return _w_star_max(m_max, floor, tau2)


# ------------------------------------------------------------------------------ settings

UNIT_REQUIRED: Final = (
    "private_meta_analysis needs privacy_unit stated: 'record' (one record of one silo; the "
    "record counts are public) or 'client' (one silo with all its records)"
)
"""The one-line refusal when :func:`fa_hetdp.private_meta_analysis` is not told what it protects.

The declared default of ``privacy_unit`` is ``"client"`` (a scenario, a run config, ``fa-hetdp
run``, :class:`~fa_hetdp.protocol.meta_plan.MetaSettings`); a cross-silo analyst usually means
one record (a patient), which is the weaker guarantee: neither is assumed for them."""

NOISE_SHAPES: Final = ("per_coordinate", "isotropic")
"""The meta-analysis' noise shapes (:class:`MetaSettings` ``noise_shape``)."""


def _declared(name: str) -> Any:
    """Return the declared default of meta setting ``name`` (``config.settings.SETTINGS``)."""
    return SETTINGS[name].default


@dataclass(frozen=True)
class MetaSettings:
    """The settings of a private meta-analysis.

    Every setting declared with ``meta=True`` in :data:`fa_hetdp.config.settings.SETTINGS`
    takes its default and its rule from there (one default set: a scenario, a run config,
    ``fa-hetdp run`` and this class agree); a declared one without a field here is carried in
    ``extra`` (:meth:`setting`). A bad value raises one
    :class:`~fa_hetdp.config.rules.ConfigError` (a ``PrivacyParameterError``) listing every
    problem. ``corrupt_fraction``, ``statistics``, ``noise_shape``, ``one_hot``, ``weights`` and
    ``noise`` are Python-only (the run takes gamma from ``[secagg]``; a run always adds noise).

    Attributes
    ----------
    privacy_unit : {"record", "client"}
        What neighbours differ in. The declared default, ``"client"`` (a whole silo);
        :func:`fa_hetdp.private_meta_analysis` asks the caller to state it.
    min_records : int or None
        Public lower bound on every ``m_i`` (record unit). None: the actual ``m_i`` are public
        (sent in the clear) and their minimum is used.
    kappa, kappa_star : float
        Clip of the standardised deviations ``z`` (round B) and ``u`` (round C);
        ``kappa_star`` None: ``kappa``.
    adaptive_kappa : bool
        Round A also releases ``U = sum x^2``; the server sets ``kappa_j =
        max(kappa, kappa_scale sqrt(Q_pilot_j/n))`` from the pilot ``Q`` (between-client
        sum of squares over the pooled within-variance).
    kappa_scale : float
        The multiplier of the adaptive clip.
    kappa_per_silo : bool
        Round A also releases ``U``; the server broadcasts the pilot ratio ``rho_j =
        tau2_j/sigma2_j`` (``(Q_pilot_j - (n - 1))_+ / (M - sum m_i^2/M)``) and silo ``i`` clips
        at ``kappa_ij = kappa_j sqrt(1 + m_i rho_j)`` (:func:`silo_kappa`), the spread of its
        ``z`` under the random-effects model: small silos keep small clips (and bounds), large
        ones are not clipped at ``I^2`` near 1. Needs the record unit and public counts
        (``min_records`` None); otherwise every silo clips at ``kappa_j``.
    public_small_silo_weights : bool
        Under public counts silo ``i`` weighs by round A's pooled within-variance where one
        record can move its own variance by more than :data:`OWN_VARIANCE_SHARE` of the floor
        (:func:`own_variance`): its weight is public, and its variance adds nothing to the
        bounds. Otherwise (or False) every silo weighs by its own floored variance.
    floor_fraction, min_floor : float
        ``phi`` and ``f_min`` of the floor ``f_j = max(phi sigma^2_j, f_min)``.
    placement : {"distributed", "central"}
        Noise shares added by the clients (``t`` of them counted honest) or by the server.
    corrupt_fraction : float or None
        ``gamma``: ``ceil(gamma n)`` clients may collude; ``t = n - ceil(gamma n)``.
    mechanism : str
        ``"agm"`` (Gaussian, exact GDP composition).
    statistics : tuple of str or None
        Subset of :data:`META_STATISTICS`; None: all. Releases no figure needs are not made.
    extra : mapping
        Declared meta settings without a field (read with :meth:`setting`).
    noise_shape : {"per_coordinate", "isotropic"}
        Per coordinate: each coordinate's noise proportional to its own bound.
    one_hot : bool
        Records are one-hot (label histograms): at most 2 coordinates of a record move, the
        L2 norm runs over the two largest bounds (``sqrt(2)``). Checked on the data.
    weights : mapping or None
        Budget weights per release; None: :data:`DEFAULT_WEIGHTS`.
    noise : bool
        False: no noise, no clipping statement (a reference run; the result states no epsilon).
    design : {"auto", "silo-summaries", "secure-sums"}
        Which design runs (:mod:`fa_hetdp.protocol.silo_summaries` for the silo summaries):
        ``"auto"`` the one the planner predicts more accurate for the public counts
        (:func:`fa_hetdp.accuracy.meta_design.choose_design`); the silo summaries need the
        record unit and public counts (``min_records`` None).
    clip_correction : bool
        Add back to ``A`` the mass the clip is expected to remove under the normal
        random-effects model (``z_i ~ N(0, 1 + m_i rho)``, ``rho`` fitted to ``A`` per
        coordinate; :func:`fa_hetdp.protocol.meta_server.clip_correction`): post-processing,
        a model-based repair of the bias a binding clip puts on ``Q`` at high ``I^2``.
    """

    privacy_unit: str = _declared("privacy_unit")
    min_records: int | None = _declared("min_records")
    kappa: float = _declared("kappa")
    kappa_star: float | None = _declared("kappa_star")
    adaptive_kappa: bool = _declared("adaptive_kappa")
    kappa_scale: float = _declared("kappa_scale")
    kappa_per_silo: bool = _declared("kappa_per_silo")
    public_small_silo_weights: bool = _declared("public_small_silo_weights")
    floor_fraction: float = _declared("floor_fraction")
    min_floor: float = _declared("min_floor")
    placement: str = _declared("placement")
    corrupt_fraction: float | None = None
    mechanism: str = _declared("mechanism")
    statistics: tuple[str, ...] | None = None
    noise_shape: str = "per_coordinate"
    one_hot: bool = False
    weights: Mapping[str, float] | None = None
    noise: bool = True
    clip_correction: bool = _declared("clip_correction")
    design: str = _declared("design")
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if self.statistics is not None and not isinstance(self.statistics, str):
            object.__setattr__(self, "statistics", tuple(self.statistics))
        object.__setattr__(self, "extra", dict(self.extra))
        raise_problems("meta-analysis settings", self.problems())

    def problems(self) -> list[Problem]:
        """Every problem of these settings, as ``(name, what is wrong)`` (none: ``[]``).

        The declared settings (:func:`fa_hetdp.config.settings.meta_settings`) are checked by
        their declared rules (:func:`fa_hetdp.config.rules.validate`, with the rule that the
        meta-analysis takes ``agm`` only); the Python-only ones (``corrupt_fraction``,
        ``statistics``, ``noise_shape``, ``one_hot``, ``weights``, ``noise``) here.
        """
        declared = [s.name for s in meta_settings()]  # in the table's order
        problems: list[Problem] = [
            (f"extra.{name}", f"unknown meta-analysis setting; allowed: {', '.join(declared)}")
            for name in self.extra
            if name not in declared or name in _FIELDS
        ]
        values: dict[str, Any] = {"analysis": "meta"}  # the meta-analysis' cross rules
        for name in declared:
            if name in _FIELDS:
                values[name] = getattr(self, name)
            elif name in self.extra:
                values[name] = self.extra[name]
        if self.corrupt_fraction is not None:
            values["corrupt_fraction"] = self.corrupt_fraction
        # the designs' own rule is the planner's to apply (silo_summaries_problem)
        problems += validate(values, lambda name: name, skip=("silo-summaries-allowed",))
        for name in ("one_hot", "noise"):
            if not isinstance(getattr(self, name), bool | np.bool_):
                problems.append((name, f"must be true or false, got {getattr(self, name)!r}"))
        if self.noise_shape not in NOISE_SHAPES:
            problems.append(
                (
                    "noise_shape",
                    f"unknown value {self.noise_shape!r}; allowed: {', '.join(NOISE_SHAPES)}",
                )
            )
        if self.statistics is not None:
            stats = self.statistics
            if isinstance(stats, str) or not stats or any(x not in META_STATISTICS for x in stats):
                problems.append(
                    (
                        "statistics",
                        f"must be a non-empty subset of {', '.join(META_STATISTICS)}, got "
                        f"{stats!r}",
                    )
                )
        if self.weights is not None:
            allowed = META_RELEASES + SILO_RELEASES
            for k, v in self.weights.items():
                if k not in allowed:
                    problems.append(
                        (f"weights[{k!r}]", f"unknown release; allowed: {', '.join(allowed)}")
                    )
                elif (message := Real(low=0.0, low_open=True).check(v)) is not None:
                    problems.append((f"weights[{k!r}]", message))
        return problems

    def setting(self, name: str) -> Any:
        """Return setting ``name``: a field, else ``extra``'s value, else its declared default.

        Raises
        ------
        KeyError
            ``name`` is neither a field nor a declared meta-analysis setting.
        """
        if name in _FIELDS:
            return getattr(self, name)
        if name in self.extra:
            return self.extra[name]
        for s in meta_settings():
            if s.name == name:
                return s.default
        raise KeyError(f"unknown meta-analysis setting {name!r}")

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> MetaSettings:
        """Build the settings from values by name: fields as such, other declared ones in extra.

        What a run's declared meta settings become; an unknown name is refused in the error.
        """
        fields = {k: v for k, v in values.items() if k in _FIELDS and k != "extra"}
        extra = {k: v for k, v in values.items() if k not in _FIELDS}
        return cls(**fields, extra=extra)

    @property
    def kappa_c(self) -> float:
        """The round-C clip ``kappa*``."""
        return self.kappa if self.kappa_star is None else float(self.kappa_star)

    @property
    def per_silo_clip(self) -> bool:
        """Whether silos clip at their own ``kappa_i``.

        ``kappa_per_silo``, the record unit and public counts (under the client unit ``A``'s
        bound is the widest clip squared, so wider clips for large silos only add noise).
        """
        return self.kappa_per_silo and self.min_records is None and self.privacy_unit == "record"

    @property
    def pooled_small_silos(self) -> bool:
        """Whether small silos weigh by the pooled variance (:func:`own_variance`).

        ``public_small_silo_weights``, the record unit and public counts.
        """
        return (
            self.public_small_silo_weights
            and self.privacy_unit == "record"
            and self.min_records is None
        )

    @property
    def wanted(self) -> tuple[str, ...]:
        """The figures asked for."""
        return tuple(META_STATISTICS) if self.statistics is None else tuple(self.statistics)

    @property
    def releases(self) -> tuple[str, ...]:
        """The releases made (those the wanted figures need, ``U`` for an adaptive clip)."""
        need = {r for s in self.wanted for r in META_STATISTICS[s]}
        if (self.adaptive_kappa or self.per_silo_clip) and "A" in need:
            need.add("U")
        return tuple(r for r in META_RELEASES if r in need)


_FIELDS: Final = frozenset(MetaSettings.__dataclass_fields__)
SETTING_NAMES: Final = tuple(n for n in MetaSettings.__dataclass_fields__ if n != "extra")


def settings_from(**kwargs: Any) -> MetaSettings:
    """Build :class:`MetaSettings` from settings by name, refusing unknown names.

    Declared meta settings without a field go to ``extra``.
    """
    allowed = (*SETTING_NAMES, *(s.name for s in meta_settings() if s.name not in _FIELDS))
    bad = [k for k in kwargs if k not in allowed]
    if bad:
        raise PrivacyParameterError(f"unknown settings {bad}; allowed: {allowed}.")
    return MetaSettings.from_values(kwargs)


# ------------------------------------------------------------------------------ the plan


def planned_mu(budget: BudgetPlan | None, name: str) -> float:
    """Planned GDP ``mu_k`` of a unit-sensitivity release ``name`` (inf without a budget).

    Both designs' plans read their releases' ``mu`` here.
    """
    if budget is None:
        return math.inf
    mu = budget.release(name).mu_share
    return float(mu) if mu is not None else 1.0 / budget.sigma(name)


@dataclass(frozen=True)
class MetaPlan:
    """A calibrated meta-analysis for ``n`` clients with public counts and ``d`` coordinates.

    Attributes
    ----------
    settings : MetaSettings
    n, d : int
    records_per_client : ndarray
        The public ``m_i``.
    t : int
        Honest noise shares (distributed placement).
    budget : BudgetPlan or None
        Unit-sensitivity releases (``sigma = 1/mu_k``); None without noise.
    labels : tuple[str, ...]
    two_arm : bool
        The clients' summaries are two-arm effects reduced to one summary each
        (:mod:`fa_hetdp.protocol.two_arm_sums`): the counts are ``4 m' - 3`` of each silo's
        smaller arm, every arm size is public, and one record moves ``U`` by less than
        :data:`TWO_ARM_U_BOUND` (:attr:`u_bound`).
    """

    settings: MetaSettings
    n: int
    d: int
    records_per_client: npt.NDArray[np.int64]
    t: int
    budget: BudgetPlan | None
    epsilon: float
    delta: float
    labels: tuple[str, ...] = field(default=())
    two_arm: bool = False

    @property
    def u_bound(self) -> float:
        """The record bound of round A's ``U`` in units of the one-arm bound 1."""
        return TWO_ARM_U_BOUND if self.two_arm else 1.0

    @property
    def privacy_unit(self) -> str:
        """What the plan protects (a budget keeps one unit per ledger)."""
        return self.settings.privacy_unit

    @property
    def m_min(self) -> int:
        """The ``m`` of the record bounds: ``min_records``, else the smallest ``m_i``."""
        s = self.settings.min_records
        return int(self.records_per_client.min()) if s is None else int(s)

    @property
    def m_max(self) -> int:
        """The largest ``m_i`` (public)."""
        return int(self.records_per_client.max())

    @property
    def total_records(self) -> int:
        """``M = sum m_i``."""
        return int(self.records_per_client.sum())

    @property
    def releases(self) -> tuple[str, ...]:
        """Names of the releases made."""
        return self.settings.releases

    @property
    def mechanism(self) -> NoiseMechanism:
        """The noise mechanism."""
        return get_mechanism(self.settings.mechanism)

    def mu(self, name: str) -> float:
        """Planned GDP ``mu_k`` of release ``name`` (inf without noise)."""
        return planned_mu(self.budget, name)

    def bounds(
        self,
        name: str,
        floor: npt.ArrayLike | None = None,
        kappa: npt.ArrayLike | None = None,
        kappa_star: npt.ArrayLike | None = None,
        tau2: npt.ArrayLike | None = None,
        rho: npt.ArrayLike | None = None,
    ) -> FloatArray:
        """Per-coordinate bound ``b_j`` of release ``name`` under the plan's unit.

        ``floor``, ``kappa``, ``kappa_star``, ``tau2``, ``rho``: the public broadcasts (round
        A's floor, clip and pilot ratio, round B's ``tau2`` for round C; ``tau2`` None: 0, the
        worst case; ``rho`` None: 0). Silo ``i`` clips at ``silo_kappa(kappa, rho, m_i, f)``.
        """
        d = self.d
        f = np.broadcast_to(np.asarray(1.0 if floor is None else floor, float), (d,))
        k = np.broadcast_to(
            np.asarray(self.settings.kappa if kappa is None else kappa, float), (d,)
        )
        ks = np.broadcast_to(
            np.asarray(self.settings.kappa_c if kappa_star is None else kappa_star, float), (d,)
        )
        t2 = np.broadcast_to(np.asarray(0.0 if tau2 is None else tau2, float), (d,))
        r = np.broadcast_to(np.asarray(0.0 if rho is None else rho, float), (d,))
        m, big = self.m_min, self.m_max
        if np.any(r > 0) and not (
            self.settings.privacy_unit == "client" or self.settings.min_records is None
        ):
            raise PrivacyParameterError(
                "per-silo clips (rho > 0) need public counts: min_records must be None"
            )
        if self.settings.privacy_unit == "record":
            table: dict[str, Any] = {
                "T": record_bound_t(),
                "U": record_bound_u2() * self.u_bound,
                "W": record_bound_w(),
                "A": lambda: record_bound_a(m, f, k),
                "B": lambda: record_bound_b(m, f, k),
                "C": lambda: record_bound_c(m, f),
                "D": lambda: record_bound_d(big, f),
                "E": lambda: record_bound_e(m, f, ks, t2),
                "F": lambda: record_bound_f(m, f, t2),
            }
        else:
            table = {
                "T": client_bound_t(big),
                "U": client_bound_u2(big),
                "W": client_bound_w(big),
                # the largest silo has the largest clip and the largest range
                "A": lambda: client_bound_a(silo_kappa(k, r, big, f)),
                "B": lambda: client_bound_b(big, f, silo_kappa(k, r, big, f)),
                "C": lambda: client_bound_c(big, f),
                "D": lambda: client_bound_d(big, f),
                "E": lambda: client_bound_e(big, f, ks, t2),
                "F": lambda: client_bound_f(big, f, t2),
            }
        if (
            self.settings.privacy_unit == "record"
            and self.settings.min_records is None
            and name in _SILO_BOUNDED
        ):
            return self._silo_bound(name, f, k, ks, t2, r)
        value = table[name]
        out = value() if callable(value) else value
        return np.broadcast_to(np.asarray(out, dtype=np.float64), (d,)).copy()

    def _silo_bound(
        self,
        name: str,
        f: FloatArray,
        k: FloatArray,
        ks: FloatArray,
        t2: FloatArray,
        r: FloatArray,
    ) -> FloatArray:
        """Record bound under public counts: ``max_i min(record_i, client_i)`` per coordinate.

        A replaced record moves only its own silo's summand, by at most that silo's record
        bound (at its own ``m_i`` and clip ``kappa_i``) and at most the range of the summand at
        ``m_i`` (the client bound: a record neighbour is also a client neighbour); the largest
        over the silos of the smaller of the two holds whichever silo it is (docs/privacy.md,
        "Record-level sensitivity of the meta-analysis").
        """
        out = np.zeros(self.d)
        for mi in np.unique(self.records_per_client):
            m = int(mi)
            ki = silo_kappa(k, r, m, f)
            own = own_variance(m, f) if self.settings.pooled_small_silos else None
            if name == "A":
                rec, cli = record_bound_a(m, f, ki, own), client_bound_a(ki)
            elif name == "B":
                rec, cli = record_bound_b(m, f, ki, own), client_bound_b(m, f, ki)
            elif name == "C":
                rec, cli = record_bound_c(m, f, own), client_bound_c(m, f)
            elif name == "D":
                rec, cli = record_bound_d(m, f, own), client_bound_d(m, f)
            elif name == "E":
                rec, cli = record_bound_e(m, f, ks, t2, own), client_bound_e(m, f, ks, t2)
            else:
                rec, cli = record_bound_f(m, f, t2, own), client_bound_f(m, f, t2)
            out = np.maximum(out, np.minimum(rec, cli))
        return np.asarray(out, dtype=np.float64)

    def own_variances(self, floor: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """``(n, d)``: whether each silo weighs by its own variance on each coordinate.

        :func:`own_variance` of every silo's public count at the broadcast floor where
        ``public_small_silo_weights`` holds (:attr:`MetaSettings.pooled_small_silos`);
        otherwise every silo weighs by its own.
        """
        f = np.broadcast_to(np.asarray(floor, dtype=np.float64), (self.d,))
        if not self.settings.pooled_small_silos:
            return np.ones((self.n, self.d), dtype=bool)
        return own_variance(self.records_per_client[:, None], f[None, :])

    def sensitivity(self, bounds: FloatArray, shape: FloatArray) -> float:
        """L2 sensitivity of the block scaled by ``1/shape``: ``||b/a||`` (one-hot: top two).

        A coordinate whose bound is 0 (a public summand: every silo weighs by the pooled
        variance) adds nothing and takes no noise, whatever its shape.
        """
        moves = bounds > 0.0
        r = np.sort(bounds[moves] / shape[moves])[::-1]
        if self.settings.one_hot and self.settings.privacy_unit == "record":
            r = r[:2]
        return float(np.sqrt(np.sum(r * r)))

    def public_releases(self, floor: npt.ArrayLike | None) -> tuple[str, ...]:
        """Round B and C's releases that round A's floor makes public: their bound is 0.

        ``C``, ``D`` and ``F`` where every silo weighs by the pooled variance on every
        coordinate (:meth:`own_variances`): each summand is then a function of public values
        only. None before round A (``floor`` None): none.
        """
        if floor is None or not self.settings.pooled_small_silos:
            return ()
        if np.any(self.own_variances(floor)):
            return ()
        return tuple(r for r in PUBLIC_WHEN_POOLED if r in self.releases)

    def released_mu(self, name: str, floor: npt.ArrayLike | None = None) -> float:
        """GDP ``mu_k`` of release ``name`` once round A's ``floor`` is public.

        The budget of rounds B and C's releases that turn out public
        (:meth:`public_releases`) goes to the others of those rounds, each ``mu_k`` scaled by
        ``sqrt(S/S')`` (``S`` the planned ``sum mu_k^2`` of rounds B and C, ``S'`` that of
        the releases left), so the run's ``sum mu_k^2`` is the planned one. The choice
        depends on round A's output only: a Gaussian DP privacy filter (fully adaptive
        composition, docs/privacy.md, "Budget of releases that turn public"). A public
        release keeps its planned ``mu_k`` (its bound is 0: it takes no noise).
        """
        mu = self.mu(name)
        public = self.public_releases(floor)
        if self.budget is None or not public or name in public or name not in LATER_RELEASES:
            return mu
        later = [r for r in self.releases if r in LATER_RELEASES]
        total = math.fsum(self.mu(r) ** 2 for r in later)
        kept = math.fsum(self.mu(r) ** 2 for r in later if r not in public)
        return mu * math.sqrt(total / kept) if kept > 0.0 else mu

    def sigma_vector(
        self,
        name: str,
        floor: npt.ArrayLike | None = None,
        kappa: npt.ArrayLike | None = None,
        kappa_star: npt.ArrayLike | None = None,
        tau2: npt.ArrayLike | None = None,
        rho: npt.ArrayLike | None = None,
    ) -> FloatArray:
        """Per-coordinate ``sigma_kj = a_j ||b/a|| / mu_k`` (0 for a release not made)."""
        if name not in self.releases or self.budget is None:
            return np.zeros(self.d)
        b = self.bounds(name, floor, kappa, kappa_star, tau2, rho)
        a = b if self.settings.noise_shape == "per_coordinate" else np.ones(self.d)
        return np.asarray(a * self.sensitivity(b, a) / self.released_mu(name, floor))

    def noise_std(self, sigma: FloatArray) -> FloatArray:
        """Std of the total noise on a sum when every share arrives (distributed: ``sqrt(n/t)``)."""
        if self.settings.placement == "central":
            return sigma
        return np.asarray(sigma * math.sqrt(self.n / self.t))

    def share_std(self, sigma: FloatArray) -> FloatArray:
        """Std of one client's noise share (0 for the central placement)."""
        if self.settings.placement == "central":
            return np.zeros_like(sigma)
        return np.asarray(sigma / math.sqrt(self.t))

    @property
    def spent(self) -> Any:
        """The privacy spent when every share arrives (None without noise)."""
        return None if self.budget is None else privacy_spent(self.budget)

    @property
    def design(self) -> str:
        """The design this plan runs."""
        return "secure-sums"

    @property
    def adversary(self) -> str:
        """Whom the guarantee holds against (the secure aggregation's own terms aside)."""
        if self.settings.placement == "central":
            return (
                "trusted server (central placement: it sees the exact sums and adds the noise); "
                "the guarantee holds against everyone who sees the released values"
            )
        colluders = self.n - self.t
        if colluders == 0:
            return (
                f"server honest-but-curious; no colluding clients assumed: all n = {self.n} "
                "noise shares counted as honest"
            )
        return (
            f"server honest-but-curious; at most {colluders} colluding clients, whose noise "
            f"shares are not counted: noise calibrated to t = {self.t} honest shares of "
            f"n = {self.n}"
        )

    @property
    def unit_of_privacy(self) -> str:
        """The sentence of what the guarantee protects.

        Record unit: every count is public; a stated ``min_records`` (the bound the record
        bounds are taken at) is named, else the smallest count.
        """
        from fa_hetdp.protocol.guarantee import unit_of_privacy

        if self.settings.privacy_unit == "record":
            smallest = int(self.records_per_client.min())
            return unit_of_privacy("record", smallest, min_records=self.settings.min_records)
        return unit_of_privacy("client")


def plan_meta(
    epsilon: float,
    delta: float,
    records_per_client: Sequence[int] | npt.NDArray[np.integer[Any]],
    d: int,
    settings: MetaSettings | None = None,
) -> MetaPlan:
    """Calibrate the meta-analysis' releases for the public counts ``m_i`` and ``d``.

    Raises
    ------
    PrivacyParameterError
        Bad budget or settings; ``min_records`` above some ``m_i``.
    InputDataError
        Fewer than 2 clients, a count below 2, or ``d < 1``.
    """
    s = settings or MetaSettings()
    m = np.asarray(records_per_client, dtype=np.int64)
    if m.ndim != 1 or m.size < 2 or np.any(m < 2):
        raise InputDataError(
            f"records_per_client must list n >= 2 counts, each >= 2, got {m.tolist()[:10]}."
        )
    if int(d) < 1:
        raise InputDataError(f"d must be >= 1, got d={d}.")
    if s.min_records is not None and s.min_records > int(m.min()):
        raise PrivacyParameterError(
            f"min_records={s.min_records} is above the smallest client's record count "
            f"{int(m.min())}: the bound would not hold."
        )
    n = int(m.size)
    from fa_hetdp.protocol.plan import colluding_clients

    t = n - colluding_clients(s.corrupt_fraction, n)
    if t < 1:
        raise PrivacyParameterError(
            f"corrupt_fraction={s.corrupt_fraction} leaves no honest client of n={n}."
        )
    labels: list[str] = []
    budget: BudgetPlan | None = None
    if s.noise:
        weights = dict(DEFAULT_WEIGHTS)
        if s.weights is not None:
            weights.update(s.weights)
        specs = [ReleaseSpec(r, 1.0, weights[r]) for r in s.releases]
        budget = plan_budget(epsilon, delta, specs, mechanism="agm", composition="gdp")
        labels.extend(budget.labels)
    else:
        labels.append("not private: noise off (a reference run; no epsilon is stated)")
    if s.placement == "distributed" and t < n:
        labels.append(f"noise calibrated to t = {t} honest shares of n = {n}")
    return MetaPlan(
        settings=s,
        n=n,
        d=int(d),
        records_per_client=m,
        t=t,
        budget=budget,
        epsilon=float(epsilon),
        delta=float(delta),
        labels=tuple(labels),
    )


def with_settings(plan: MetaPlan, **changes: Any) -> MetaPlan:
    """Return a copy of ``plan`` re-planned with some settings changed."""
    s = replace(plan.settings, **changes)
    return plan_meta(plan.epsilon, plan.delta, plan.records_per_client, plan.d, s)
