"""``fa_hetdp.private_meta_analysis``: the private meta-analysis in the design chosen for it.

Two designs compute the same figures (:mod:`fa_hetdp.protocol.meta_simulate`): the secure sums
(only aggregates over all silos are seen) and the silo summaries (each silo releases its own
noisy summaries at the whole budget; record unit, public counts). ``design = "auto"`` (the
default) plans both from public inputs only -- the record counts, ``d``, the budget and the
stated assumptions about the data (the planner's model, :func:`plan_meta_accuracy`) -- and runs
the one with the smaller planned error of the random-effects mean (:func:`choose_plan`); a
two-arm MD or RD is planned at the public arm sizes
(:func:`~fa_hetdp.accuracy.two_arm_planner.choose_two_arm_design`). The choice costs no
privacy: nothing of the records enters it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from fa_hetdp.accuracy.columns import (
    ColumnMetaAnalysis,
    prepare_records,
    two_arm_summaries,
    with_methods,
)
from fa_hetdp.accuracy.meta_planner import MetaAccuracyPlan, plan_meta_accuracy
from fa_hetdp.accuracy.two_arm_planner import auto_two_arm_design
from fa_hetdp.errors import InputDataError, PrivacyParameterError
from fa_hetdp.protocol.meta_plan import UNIT_REQUIRED, MetaSettings, settings_from
from fa_hetdp.protocol.meta_server import PrivateMetaAnalysis
from fa_hetdp.protocol.meta_simulate import clients_of, plan_design, run_design
from fa_hetdp.protocol.silo_summaries import silo_summaries_problem
from fa_hetdp.protocol.simulate import as_generator
from fa_hetdp.protocol.two_arm import (
    check_effect,
    plan_two_arm,
    run_two_arm,
    secure_sums_refusal,
)
from fa_hetdp.protocol.two_arm_sums import (
    REDUCED_EFFECTS,
    REDUCTION,
    run_two_arm_sums,
    silo_summaries_only,
)
from fa_hetdp.stats.silo_analyses import SummariesMetaAnalysis, check_methods

__all__ = [
    "ASSUMPTIONS",
    "AUTO_DRAWS",
    "SECURE_SUMS_METHODS_REFUSAL",
    "UNIT_REQUIRED",
    "choose_design",
    "private_meta_analysis",
]

SECURE_SUMS_METHODS_REFUSAL: Final = (
    "tau2_method={tau2_method!r}, ci_method={ci_method!r}: the secure sums release only the "
    "sums that DerSimonian-Laird and its z-interval need, and each other estimator would need "
    "more releases (not built); use tau2_method='dl', ci_method='z', or "
    "design='silo-summaries', where they are post-processing of the released summaries"
)
"""The one-line refusal of another estimator than DerSimonian-Laird with z under the secure sums
(said before any release)."""


AUTO_DRAWS: Final = 60
"""Planner draws per design behind an ``"auto"`` choice (seeded: the choice is deterministic)."""
ASSUMPTIONS: Final = ("i2", "within_variance", "coordinate_mean", "variance_ratio", "silo_variance")
"""The public assumptions the planner's model takes (:func:`plan_meta_accuracy`)."""


def choose_design(
    records_per_client: npt.ArrayLike,
    d: int,
    *,
    epsilon: float,
    delta: float,
    settings: MetaSettings,
    assumptions: Mapping[str, Any] | None = None,
    draws: int = AUTO_DRAWS,
) -> MetaAccuracyPlan:
    """Return the plan of the design ``settings`` run (``"auto"``: the planner's choice).

    Raises
    ------
    InputDataError
        An assumption the planner does not take (the allowed ones: :data:`ASSUMPTIONS`).
    """
    stated = dict(assumptions or {})
    bad = [k for k in stated if k not in ASSUMPTIONS]
    if bad:
        raise InputDataError(f"unknown assumptions {bad}; allowed: {ASSUMPTIONS}.")
    counts = np.asarray(records_per_client, dtype=np.int64)
    fields = {
        k: getattr(settings, k)
        for k in settings.__dataclass_fields__
        if k not in ("privacy_unit", "one_hot", "extra")
    }
    fields.update(settings.extra)  # declared settings without a field, by name
    fields["noise"] = True  # a reference run without noise runs what the private run would
    return plan_meta_accuracy(
        int(counts.size),
        int(d),
        records_per_client=counts,
        epsilon=epsilon,
        delta=delta,
        privacy_unit=settings.privacy_unit,
        one_hot=settings.one_hot,
        draws=draws,
        **stated,
        **fields,
    )


def private_meta_analysis(
    records: Any,
    client_ids: npt.ArrayLike | None = None,
    *,
    site: str | None = None,
    columns: Sequence[str] | None = None,
    bounds: Any = None,
    arm: Any = None,
    effect: str = "mean",
    epsilon: float,
    delta: float,
    rng: np.random.Generator | int | None = None,
    assumptions: Mapping[str, Any] | None = None,
    tau2_method: str = "dl",
    ci_method: str = "z",
    **settings: Any,
) -> PrivateMetaAnalysis | ColumnMetaAnalysis | SummariesMetaAnalysis:
    """Differentially private inverse-variance meta-analysis of the clients' coordinate means.

    The figures of :func:`fa_hetdp.meta_analysis` (fixed-effect mean, Q, I^2, DerSimonian-Laird
    tau2, random-effects mean, the scalar I^2), ``(epsilon, delta)``-DP under exact Gaussian
    composition, in one of two designs (``design``): ``"secure-sums"`` -- three rounds of
    noisy secure sums, the server sees only sums over all silos -- or ``"silo-summaries"`` --
    every silo releases its own noisy means and variances at the whole budget (record unit with
    public counts: silos' records are disjoint, so their releases compose in parallel), the
    server sees every silo's noisy summaries. ``"auto"`` (the default) runs the one the planner
    predicts more accurate (module docstring); the result's ``design`` and ``labels`` say which
    ran and why.

    Parameters
    ----------
    records : array_like or pandas.DataFrame
        An ``(N, d)`` array in ``[0, 1]`` with ``client_ids`` (as
        :func:`fa_hetdp.stats.meta.meta_analysis`), or a DataFrame with ``site``
        (:mod:`fa_hetdp.accuracy.columns`). The record counts ``m_i`` are public.
    client_ids : array_like, optional
        The array form's silo ids ``0..n-1`` (required there; not with a DataFrame).
    site : str, optional
        The DataFrame's site column (any labels; public, as the record counts).
    columns : sequence of str, optional
        The outcome columns (default: every numeric column but the site); for the array form,
        the names of its ``d`` columns.
    bounds : mapping or array_like, optional
        Public ranges ``{column: (low, high)}`` (a DataFrame; required for every numeric
        column that is not binary, and never to be taken from the data) or a ``(d, 2)`` array
        (the array form, then read in its own units). Values outside are clipped and counted.
    arm : str, tuple or array_like, optional
        Two-arm effects: the DataFrame's treatment-indicator column, or ``(column, treated
        level)`` (default treated: the second of its two sorted levels); for the array form an
        ``(N,)`` array of 0/1, 1 = treated. Every site's arm sizes are public.
    effect : {"mean", "MD", "SMD", "OR", "RR", "RD"}
        ``"mean"`` (default): each column's mean, in either design. The others, with ``arm``:
        the two-arm effect in the silo-summaries design (:mod:`fa_hetdp.protocol.two_arm`):
        every silo releases, per arm, its noisy means and variances (OR, RR, RD: its noisy
        proportions) calibrated to that arm's public size, each at the whole budget -- the
        neighbours replace one record *within its arm*, so the arms' releases, like the silos',
        are on disjoint records and compose in parallel; the server forms each silo's effect
        with the noise in its variance and pools them (DerSimonian-Laird). An MD or RD also
        runs in the secure sums (each silo's effect as one summary,
        :mod:`fa_hetdp.protocol.two_arm_sums`); SMD, OR and RR there are refused (one record
        moves them by more than ``1/m``: :data:`fa_hetdp.protocol.two_arm.
        NOT_IN_THE_SECURE_SUMS`). ``design="auto"`` plans both for an MD or RD at
        the public arm sizes (:mod:`fa_hetdp.accuracy.two_arm_planner`) and runs the more
        accurate, runs the others in the silo summaries, and refuses where the silo summaries
        cannot run (the client unit, ``min_records``).
    epsilon, delta : float
        The budget of the whole analysis.
    rng : numpy.random.Generator, int or None
        The noise generator (None: a CSPRNG; an int: a seeded generator, for tests).
    assumptions : mapping, optional
        What may be said publicly about the data, for the ``"auto"`` choice: ``i2``,
        ``within_variance``, ``coordinate_mean`` (one value or one per coordinate; the
        planner's defaults otherwise), ``variance_ratio``, ``silo_variance`` (one arm); for a
        two-arm MD or RD ``i2``, ``within_variance``, ``coordinate_mean`` (the control arm's)
        and ``effect_size`` (:data:`~fa_hetdp.accuracy.two_arm_planner.TWO_ARM_ASSUMPTIONS`).
    tau2_method : {"dl", "pm", "reml"}
        The estimator of ``tau2``. ``"dl"`` (default) with ``ci_method="z"``: the result as
        before. Any other choice is post-processing of the silo summaries (no extra privacy
        budget): :func:`fa_hetdp.meta_analysis_from_summaries` per column of every site's noisy
        released mean with the variance it carries -- its sampling variance ``s^2^/m`` (from
        the shrunk noisy variance) plus the known noise variance -- which estimates the
        population random-effects model with the noise as extra within-site variance; a
        :class:`~fa_hetdp.stats.silo_analyses.SummariesMetaAnalysis` (or a
        :class:`ColumnMetaAnalysis` around one) comes back. The secure sums refuse it before
        any release (:data:`SECURE_SUMS_METHODS_REFUSAL`: each estimator would need more
        releases); ``design="auto"`` then runs the silo summaries, or refuses where they
        cannot run.
    ci_method : {"z", "hksj"}
        The random-effects interval: normal (default) or Knapp-Hartung (as ``tau2_method``).
    **settings
        :class:`~fa_hetdp.protocol.meta_plan.MetaSettings` (declared once with their defaults:
        ``scenarios/README.md``): ``privacy_unit`` (required: :data:`UNIT_REQUIRED`), ``design``,
        ``min_records``, ``kappa``,
        ``kappa_star``, ``adaptive_kappa``, ``floor_fraction``, ``min_floor``, ``placement``,
        ``corrupt_fraction``, ``mechanism``, ``statistics``, ``noise_shape``, ``one_hot``,
        ``weights``, ``noise`` (False: no noise, a reference run that states no epsilon).

    Returns
    -------
    PrivateMetaAnalysis or ColumnMetaAnalysis
        The array form without ``bounds``, ``columns`` and ``arm``: :class:`PrivateMetaAnalysis`
        as before; otherwise a :class:`~fa_hetdp.accuracy.columns.ColumnMetaAnalysis`, every
        figure in the columns' units (its ``result`` the analysis of the scaled records; for a
        two-arm effect a :class:`~fa_hetdp.protocol.two_arm.TwoArmMetaAnalysis`).

    Raises
    ------
    InputDataError
        Malformed records, ids, columns or bounds (one line, what is wrong and what is
        allowed), or a numeric column without public bounds.
    PrivacyParameterError
        No ``privacy_unit`` stated, a bad budget or setting (every problem listed), or a
        design the settings do not allow.
    """
    if "privacy_unit" not in settings:
        raise PrivacyParameterError(UNIT_REQUIRED)
    name = check_effect(effect, arm is not None)
    methods = check_methods(tau2_method, ci_method)
    if methods != ("dl", "z"):
        settings = _silo_summaries_for(methods, settings)
    if name != "mean":
        two = _private_two_arm(
            records,
            client_ids,
            site,
            columns,
            bounds,
            arm,
            name,
            epsilon,
            delta,
            rng,
            assumptions,
            settings,
        )
        if methods == ("dl", "z"):
            return two
        return replace(two, result=with_methods(two.result, *methods))
    prepared = prepare_records(
        records, client_ids, site=site, columns=columns, bounds=bounds, private=True
    )
    if prepared is None:
        plain = _private_meta_analysis(
            records, client_ids, epsilon, delta, rng, assumptions, settings
        )
        return with_methods(plain, *methods)  # type: ignore[no-any-return]
    result = _private_meta_analysis(
        prepared.records, prepared.client_ids, epsilon, delta, rng, assumptions, settings
    )
    return ColumnMetaAnalysis.of(with_methods(result, *methods), prepared)


def _silo_summaries_for(methods: tuple[str, str], settings: Mapping[str, Any]) -> dict[str, Any]:
    """Return the settings running another estimator than DL/z (silo summaries), or refuse.

    Checked before any release: the secure sums refuse (:data:`SECURE_SUMS_METHODS_REFUSAL`),
    ``"auto"`` becomes ``"silo-summaries"`` where they can run.
    """
    refusal = SECURE_SUMS_METHODS_REFUSAL.format(tau2_method=methods[0], ci_method=methods[1])
    _silo_summaries_only(
        settings_from(**settings),
        refusal + ".",
        lambda problem: f"{refusal}; and the silo summaries cannot run: {problem}.",
    )
    return {**settings, "design": "silo-summaries"}


def _silo_summaries_only(
    s: MetaSettings, secure_sums: str, cannot_run: Callable[[str], str]
) -> None:
    """Refuse, before any release, what only the silo summaries build where they do not run.

    ``secure_sums``: the refusal when the secure sums are asked for; ``cannot_run(problem)``:
    when the settings rule the silo summaries out (:func:`silo_summaries_problem`).
    """
    if s.design == "secure-sums":
        raise PrivacyParameterError(secure_sums)
    problem = silo_summaries_problem(s)
    if problem is not None:
        raise PrivacyParameterError(cannot_run(problem))


def _private_two_arm(
    records: Any,
    client_ids: Any,
    site: str | None,
    columns: Sequence[str] | None,
    bounds: Any,
    arm: Any,
    effect: str,
    epsilon: float,
    delta: float,
    rng: np.random.Generator | int | None,
    assumptions: Mapping[str, Any] | None,
    settings: Mapping[str, Any],
) -> ColumnMetaAnalysis:
    """Run a two-arm effect: the silo summaries, or the secure sums for an MD or RD.

    ``"auto"`` weighs both designs for an MD or RD from the public arm sizes and the stated
    ``assumptions`` where both can run, else runs the silo summaries and says why
    (:func:`~fa_hetdp.accuracy.two_arm_planner.auto_two_arm_design`).
    """
    s = settings_from(**settings)
    if not (s.design == "secure-sums" and effect in REDUCED_EFFECTS):
        _silo_summaries_only(
            s,
            secure_sums_refusal(effect) + ".",
            lambda problem: silo_summaries_only(effect, problem) + ".",
        )
    if assumptions is not None and not (s.design == "auto" and effect in REDUCED_EFFECTS):
        ran = "it runs the silo summaries only" if s.design == "auto" else f"{s.design!r} is named"
        raise InputDataError(
            f"assumptions are for the planner's choice between the designs; for "
            f"effect={effect!r} {ran} (no choice is made)."
        )
    prepared = prepare_records(
        records, client_ids, site=site, columns=columns, bounds=bounds, private=True, arm=arm
    )
    if prepared is None:  # pragma: no cover - arm= always prepares
        raise InputDataError("arm= needs the records prepared")
    summaries = two_arm_summaries(prepared, effect)
    design, why = s.design, ""
    if s.design == "auto":
        choice = auto_two_arm_design(
            summaries.m, summaries.d, effect, epsilon=epsilon, delta=delta, settings=s,
            assumptions=assumptions,
        )  # fmt: skip
        design, why = choice.design, f"design {choice.design}: {choice.reason}"
    if design == "secure-sums":  # each silo's effect as one summary (two_arm_sums)
        reduced = run_two_arm_sums(
            epsilon, delta, summaries, effect, replace(s, design=design), as_generator(rng)
        )
        if why:
            reduced = replace(reduced, labels=(*reduced.labels, why))
        wrapped = ColumnMetaAnalysis.of(reduced, prepared)
        return replace(
            wrapped,
            effect=effect,
            arm=prepared.arm,
            arm_levels=prepared.arm_levels,
            reduction=REDUCTION,
        )
    plan = plan_two_arm(
        epsilon, delta, summaries.m, summaries.d, effect, replace(s, design="silo-summaries")
    )
    result = run_two_arm(plan, summaries, as_generator(rng))
    if why:
        result = replace(result, labels=(*result.labels, why))
    return ColumnMetaAnalysis.of(result, prepared)


def _private_meta_analysis(
    records: Any,
    client_ids: Any,
    epsilon: float,
    delta: float,
    rng: np.random.Generator | int | None,
    assumptions: Mapping[str, Any] | None,
    settings: Mapping[str, Any],
) -> PrivateMetaAnalysis:
    """Run the array form of :func:`private_meta_analysis` (records in [0, 1], ids 0..n-1)."""
    s = settings_from(**settings)
    clients = clients_of(records, client_ids, one_hot=s.one_hot)
    counts = [c.m for c in clients]
    d = int(clients[0].theta.shape[0])
    if s.design != "auto":
        if assumptions is not None:
            raise InputDataError(
                f"assumptions are for design='auto' (the planner's choice); design="
                f"{s.design!r} is named."
            )
        return run_design(plan_design(epsilon, delta, counts, d, s), clients, as_generator(rng))
    chosen = choose_design(
        counts, d, epsilon=epsilon, delta=delta, settings=s, assumptions=assumptions
    )
    plan = plan_design(epsilon, delta, counts, d, replace(s, design=chosen.design))
    result = run_design(plan, clients, as_generator(rng))
    return replace(result, labels=(*result.labels, f"design {chosen.design}: {chosen.reason}"))
