"""The meta-analysis over Flower in the secure-sums design: rounds A, B and C of a session.

Which design a run makes is resolved once the counts are known
(:mod:`fa_hetdp.server.meta_design`); this module runs the secure sums, and holds the result's
``privacy`` part of either design (:func:`meta_privacy_section`).

After the key advertisement (where every client reports its record count ``m_i``, public in
a meta-analysis), :class:`SecureSums` (an :class:`~fa_hetdp.server.analysis.Analysis`) runs
the three secure sums of :mod:`fa_hetdp.protocol.meta_plan` on the session
(:meth:`~fa_hetdp.server.session.AnalysisSession.secure_sum`), each on its own steps
(:data:`fa_hetdp.flowerkit.steps.META_ROUNDS`), with the server functions the in-process
:func:`fa_hetdp.private_meta_analysis` uses (:mod:`fa_hetdp.protocol.meta_server`):

1. ``share_keys``;
2. round A (``meta_round_a``, ``meta_round_a_unmask``): the request lists every client's
   count (the plan's calibration); the noisy ``[T | U | W]`` gives the centre, floor and clip
   (:func:`~fa_hetdp.protocol.meta_server.assemble_round_a`), broadcast with round B;
3. round B (``meta_round_b``, ``meta_round_b_unmask``): ``[A | B | C | D]``; the fixed
   effect, ``Q``, ``I^2`` and ``tau2`` (:func:`~fa_hetdp.protocol.meta_server.
   assemble_round_b`), ``tau2`` broadcast with round C;
4. round C (``meta_round_c``, ``meta_round_c_unmask``, when the random-effects mean is
   asked for): ``[E | F]``; the result (:func:`~fa_hetdp.protocol.meta_server.assemble_result`).

Against a malicious server each round has its ``meta_round_x_consistency`` step before its
unmask step.

A two-arm MD or RD (the scenario's ``[data] arm`` and ``effect`` with ``design =
"secure-sums"``) runs the same rounds on every silo's effect reduced to one summary
(:mod:`fa_hetdp.protocol.two_arm_sums`, reduced by each node itself:
:mod:`fa_hetdp.clients.meta`): the plan is :func:`fa_hetdp.flowerkit.settings.
two_arm_sums_plan` of the arm sizes the nodes stated in their first replies, round A's request
lists those arm sizes, and the result is the in-process :class:`~fa_hetdp.accuracy.columns.
ColumnMetaAnalysis` with its ``reduction``; the document's ``meta_analysis`` holds the effect's
figures (:func:`effect_section`), its ``two_arm`` part the effect, the arm and the
within-arm unit of privacy.

Every client of the key directory must take part in every round: their counts calibrate the
plan and each counts as one study, so a dropout after the key advertisement aborts the run
with the round in the reason (what was released before it stays on record, with its cost
bounded by the whole plan's). A client whose first reply has no usable count is dropped
there, before the key directory is fixed.

The result document holds the meta-analysis (:func:`fa_hetdp.report.meta.meta_section`:
values and intervals), the design and why it ran, what the server saw, the unit of privacy,
the adversary (the plan's, with the secure aggregation's own terms), the spent ``(epsilon,
delta)`` and the partitions in each sum (the in-process replay of a simulation takes them).

Where the run's scenario names its columns (``[data] columns`` and public ``bounds``: a node
with ``data-path`` reads those columns and scales them to ``[0, 1]``), the section also names
every coordinate by its column and carries its figures in the column's own units
(:func:`with_column_units`, either design): ``meta_analysis["columns"]`` and
``meta_analysis["units"]``, the section's ``statistics``, ``prediction_interval`` and ``silos``
in the layout of the ``[0, 1]`` ones, mapped back as :class:`fa_hetdp.accuracy.columns.
ColumnMetaAnalysis` maps the in-process result (:func:`~fa_hetdp.accuracy.columns.
in_column_units`: means ``low + (high - low) x``, ``tau2`` and variances ``(high - low)^2 x``,
standard errors and noise deviations ``(high - low) x``, ``Q`` and ``I^2`` unchanged). The
section's own figures stay on the ``[0, 1]`` scale the protocol ran on; a reader takes the
units view as ``{**section, **section["units"]}``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from fa_hetdp._types import FloatArray
from fa_hetdp.accuracy.columns import ColumnMetaAnalysis, figure_units, in_column_units
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.dp.accounting import PrivacySpent
from fa_hetdp.dp.calibration import weak_privacy_label
from fa_hetdp.flowerkit.settings import RunSettings, meta_plan, two_arm_sums_plan
from fa_hetdp.flowerkit.steps import META_ROUNDS, Event, Key
from fa_hetdp.protocol.guarantee import Guarantee
from fa_hetdp.protocol.meta_client import BroadcastB, BroadcastC, pooled_variance
from fa_hetdp.protocol.meta_plan import (
    ROUNDS,
    MetaPlan,
    client_bound_a,
    client_bound_b,
    client_bound_c,
    client_bound_d,
    client_bound_t,
    client_bound_u2,
    client_bound_w,
    silo_kappa,
)
from fa_hetdp.protocol.meta_server import (
    PrivateMetaAnalysis,
    add_central_noise,
    assemble_result,
    assemble_round_a,
    assemble_round_b,
    round_sigmas,
    split_round,
)
from fa_hetdp.protocol.plan import ENCODING_FAILURE_PROBABILITY
from fa_hetdp.protocol.silo_summaries import SILO_ADVERSARY, SiloPlan
from fa_hetdp.protocol.two_arm import TwoArmMetaAnalysis
from fa_hetdp.protocol.two_arm_sums import REDUCTION, TWO_ARM_SUMS_UNIT, two_arm_sums_labels
from fa_hetdp.report.meta import figure_entry, json_floats, meta_section
from fa_hetdp.secagg.encoding import FixedPointEncoding, choose_encoding
from fa_hetdp.secagg.params import SecAggParameters
from fa_hetdp.server.analysis import Analysis
from fa_hetdp.server.results import secagg_section, simulation_caveats
from fa_hetdp.server.session import AnalysisSession, SecureSum

if TYPE_CHECKING:  # a two-arm run's plan (fa_hetdp.server.silo_summaries)
    from fa_hetdp.protocol.two_arm import TwoArmPlan

__all__ = [
    "COLUMN_UNITS",
    "EFFECT_SCALES",
    "MIN_SCALE",
    "SecureSums",
    "check_count",
    "column_ranges",
    "effect_section",
    "meta_encoding",
    "meta_privacy_section",
    "meta_rounds",
    "session_arm_counts",
    "session_counts",
    "with_column_units",
]


MIN_SCALE = 2.0**-40
"""The smallest encoding scale a meta round accepts (a step of ``2^40`` on ``D``'s largest
words): the encoding of the paper protocol keeps steps below 1."""


COLUMN_UNITS = "column units"
"""``meta_analysis["units"]["scale"]``: the sub-section's figures are in the columns' units."""

_UNITS_HOW = (
    "each figure of the [0, 1] scale the protocol ran on, mapped back by the column's public "
    "range (low, high): means and interval ends low + (high - low) x; standard errors and "
    "noise standard deviations (high - low) x; tau2 and variances (high - low)^2 x; Q, I² and "
    "H² unchanged"
)

#: How each figure of a silo's release is read in units (:func:`in_column_units`).
_SILO_UNITS = {
    "mean": "location",
    "mean_noise_sd": "spread",
    "variance": "variance",
    "variance_noise_sd": "variance",
    "variance_used": "variance",
}


def column_ranges(settings: RunSettings) -> dict[str, tuple[float, float]] | None:
    """Return ``{column: (low, high)}`` of the run's scenario, in column order (None: no columns).

    ``settings`` is the run's :class:`~fa_hetdp.flowerkit.settings.RunSettings`; a column
    without stated bounds already lies in ``[0, 1]`` (the node checks it): its range is
    ``(0, 1)``.
    """
    data = settings.scenario.data
    if data.columns is None:
        return None
    stated = data.column_bounds()
    ranges: dict[str, tuple[float, float]] = {}
    for name in data.columns:
        low, high = stated.get(name, (0.0, 1.0))
        ranges[name] = (float(low), float(high))
    return ranges


def _as_array(raw: Any) -> FloatArray:
    """Return a section's list (``null`` for NaN) or number as floats."""
    if isinstance(raw, list | tuple):
        return np.array([math.nan if v is None else v for v in raw], dtype=np.float64)
    return np.asarray(math.nan if raw is None else raw, dtype=np.float64)


def _in_units(raw: Any, kind: str, low: FloatArray, span: FloatArray) -> Any:
    """One entry of the section (a list per column, or a number) in the columns' units."""
    if raw is None:
        return None
    if kind == "free":
        return raw
    values = _as_array(raw)
    if values.ndim == 0:  # one number for every column (a silo's noise sd): one per column
        values = np.full(low.shape, float(values))
    return json_floats(in_column_units(values, kind, low, span))


def _statistic_in_units(
    name: str, entry: Mapping[str, Any], low: FloatArray, span: FloatArray
) -> dict[str, Any]:
    kind = figure_units(name)
    error_kind = "variance" if kind == "variance" else "spread" if kind == "location" else kind
    out: dict[str, Any] = {}
    for key, value in entry.items():
        if key == "standard_error":
            out[key] = _in_units(value, error_kind, low, span)
        elif isinstance(value, Mapping):  # an interval: {"lower", "upper"}
            out[key] = {k: _in_units(v, kind, low, span) for k, v in value.items()}
        else:
            out[key] = _in_units(value, kind, low, span)
    return out


def with_column_units(section: Mapping[str, Any], settings: RunSettings) -> dict[str, Any]:
    """Return ``section`` with its coordinates named by column and figures in their units.

    ``section`` is a :func:`~fa_hetdp.report.meta.meta_section` (the ``[0, 1]`` scale);
    ``settings`` the run's. Without ``[data] columns`` in the scenario the section comes back
    unchanged; with them it gains ``"columns"`` (the names, in coordinate order) and
    ``"units"`` (module docstring): ``scale`` (:data:`COLUMN_UNITS`), ``columns``, ``bounds``
    ``{column: [low, high]}``, ``how``, ``unit_names`` ``{column: units}`` (the scenario's
    ``[data] units``, where it names some), and ``statistics``, ``prediction_interval`` and (the
    silo summaries) ``silos`` in the layout of the section's own, each in the columns' units
    (a silo's ``mean_noise_sd`` and ``variance_noise_sd``, one number on the ``[0, 1]``
    scale, become one per column).

    Raises
    ------
    ValueError
        The section's ``d`` is not the number of columns (the strategy drops such clients
        first: :meth:`fa_hetdp.server.strategy.HeterogeneityStrategy._run`).
    """
    ranges = column_ranges(settings)
    if ranges is None:
        return dict(section)
    names = list(ranges)
    d = int(section["d"])
    if d != len(names):
        raise ValueError(
            f"the meta-analysis has d={d} coordinates but the scenario's [data] columns name "
            f"{len(names)} ({', '.join(names)})"
        )
    low = np.array([ranges[c][0] for c in names], dtype=np.float64)
    span = np.array([ranges[c][1] for c in names], dtype=np.float64) - low
    units: dict[str, Any] = {
        "scale": COLUMN_UNITS,
        "columns": names,
        "bounds": {c: [ranges[c][0], ranges[c][1]] for c in names},
        "how": _UNITS_HOW,
        **({"unit_names": named} if (named := settings.scenario.data.column_units()) else {}),
        "statistics": {
            name: _statistic_in_units(name, entry, low, span)
            for name, entry in (section.get("statistics") or {}).items()
        },
    }
    predicted = section.get("prediction_interval")
    if isinstance(predicted, Mapping):
        units["prediction_interval"] = {
            k: _in_units(v, "location", low, span) if k in ("lower", "upper") else v
            for k, v in predicted.items()
        }
    silos = section.get("silos")
    if silos:
        units["silos"] = [
            {
                k: _in_units(v, _SILO_UNITS[k], low, span) if k in _SILO_UNITS else v
                for k, v in silo.items()
            }
            for silo in silos
        ]
    return {**section, "columns": names, "units": units}


def check_count(reply: Mapping[str, Any]) -> str | None:
    """Return why an ``advertise_keys`` reply has no usable record count, or None."""
    m = reply.get(Key.RECORDS)
    if isinstance(m, int) and not isinstance(m, bool) and m >= 2:
        return None
    return f"record count {m!r}: a meta-analysis needs an integer m_i >= 2 from every client"


def _value_bounds(
    plan: MetaPlan, rnd: str, broadcast: BroadcastB | BroadcastC | None
) -> FloatArray:
    """Per-word bound on ``|one client's value|`` of round ``rnd`` (its whole range, public)."""
    big, d = plan.m_max, plan.d
    parts: list[Any]
    if rnd == "A":
        parts = [client_bound_t(big), client_bound_u2(big), client_bound_w(big)]
    elif isinstance(broadcast, BroadcastB):
        f = broadcast.floor
        k = silo_kappa(broadcast.kappa, broadcast.rho, big, f)  # the largest silo's clip
        parts = [
            client_bound_a(k),
            client_bound_b(big, f, k),
            client_bound_c(big, f),
            client_bound_d(big, f),
        ]
    elif isinstance(broadcast, BroadcastC):  # w* = 1/(s~2/m + tau2) <= m/f
        f, ks = broadcast.floor, broadcast.kappa_star
        parts = [client_bound_b(big, f, ks), client_bound_c(big, f)]
    else:
        raise ValueError(f"round {rnd!r} needs its broadcast")
    return np.concatenate([np.broadcast_to(np.asarray(p, np.float64), (d,)) for p in parts])


def meta_encoding(
    plan: MetaPlan,
    rnd: str,
    broadcast: BroadcastB | BroadcastC | None,
    n: int,
    *,
    modulus_bits: int = 64,
) -> FixedPointEncoding:
    """Return the fixed-point encoding of round ``rnd``'s vectors for a sum of ``n``.

    Each word's stated bound is the range of one client's value
    (:func:`~fa_hetdp.protocol.meta_plan.client_bound_t` ...) plus the tail bound of its
    noise share (failure probability ``2 Phi(-12)`` per word), at the largest power-of-two
    scales that cannot wrap (:func:`~fa_hetdp.secagg.encoding.choose_encoding`).
    """
    share = plan.share_std(round_sigmas(plan, rnd, broadcast))
    tail = plan.mechanism.tail_bound(share, ENCODING_FAILURE_PROBABILITY)
    bounds = _value_bounds(plan, rnd, broadcast)
    if bounds.shape != (len(ROUNDS[rnd]) * plan.d,):
        raise ValueError(f"round {rnd}: {bounds.shape} bounds for {len(ROUNDS[rnd])} blocks")
    # D = sum w^2 reaches (m/f)^2 (1e17 at m = 4 000, f = 1e-4): a step above 1 is allowed
    # there (float64 is exact to 2^52 only); the decoding error n/scale stays far below the
    # noise of such a word and is stated in the result (encoding_error_bound)
    return choose_encoding(
        n,
        bounds,
        noise_std=tail,
        noise_tail=1.0,
        min_scale=MIN_SCALE,
        modulus_bits=modulus_bits,
    )


def _adversary(plan: MetaPlan | SiloPlan | TwoArmPlan, secagg: SecAggParameters | None) -> str:
    """Whom the guarantee holds against: the plan's own sentence, with the secagg clause."""
    if not isinstance(plan, MetaPlan):  # a silo's own release (two-arm: each arm's)
        return SILO_ADVERSARY  # no noise share is shared, no secure aggregation
    base = plan.adversary
    if plan.settings.placement == "central" or secagg is None:
        return base
    kind = "malicious" if secagg.threat_model == "malicious-server" else "honest-but-curious"
    clients = base.removeprefix("server honest-but-curious; ")
    return f"server {kind}; {clients}; secure aggregation: {secagg.guarantee()}"


def meta_privacy_section(
    plan: MetaPlan | SiloPlan | TwoArmPlan,
    spent: PrivacySpent | None,
    *,
    released: Sequence[str],
    secagg: SecAggParameters | None = None,
    caveats: Sequence[str] = (),
    unit: str | None = None,
) -> dict[str, Any]:
    """Return the document's ``privacy`` part for a meta-analysis run.

    ``spent`` None: the run stopped before its last round; what went out is part of the plan,
    so it spent at most the plan's ``(epsilon, delta)`` (stated as ``epsilon_at_most``).
    Either design: ``design``, ``adversary`` and, once released, ``epsilon`` and ``delta``
    (a silo-summaries plan: every silo's release at the whole budget, parallel composition
    over disjoint records, so one silo's spend is the run's). ``unit``: the unit of privacy
    where it is not the plan's sentence (a two-arm MD or RD in the secure sums:
    :data:`~fa_hetdp.protocol.two_arm_sums.TWO_ARM_SUMS_UNIT`, within-arm neighbours).
    """
    full = plan.spent
    dp = plan.budget is not None and full is not None and full.epsilon is not None
    notes = list(caveats)
    weak = weak_privacy_label(plan.epsilon)
    if dp and weak is not None:
        notes.append(weak)
    reasons = () if dp else ("noise off: a reference run",)
    unit = plan.unit_of_privacy if unit is None else unit
    guarantee = Guarantee(
        dp=dp,
        epsilon=None if spent is None or spent.epsilon is None else float(spent.epsilon),
        delta=None if spent is None or spent.delta is None else float(spent.delta),
        unit_of_privacy=unit,
        adversary=_adversary(plan, secagg),
        honest_shares=None
        if not isinstance(plan, MetaPlan) or plan.settings.placement == "central"
        else plan.t,
        n=plan.n,
        not_dp_because=reasons,
        caveats=tuple(notes),
    ).as_dict()
    section: dict[str, Any] = {
        "differentially_private": dp,
        "design": plan.design,
        "released": list(released),
        "guarantee": guarantee,
        "unit_of_privacy": unit,
        "adversary": guarantee["adversary"],
    }
    if not dp or full is None:
        section["not_private_because"] = list(reasons)
        return section
    section["target_epsilon"] = plan.epsilon
    section["target_delta"] = plan.delta
    if spent is None:
        section["guarantees"] = []
        if released:
            section["epsilon_at_most"] = float(full.epsilon) if full.epsilon else None
        return section
    epsilon, delta_at = spent.epsilon, spent.delta_at_target_epsilon
    section.update(
        {
            "guarantees": [
                {"epsilon": _number(epsilon), "delta": plan.delta},
                {"epsilon": plan.epsilon, "delta": _number(delta_at)},
            ],
            "epsilon": _number(epsilon),
            "epsilon_spent": _number(epsilon),
            "delta": spent.delta,
            "mu": _number(spent.mu),
            "delta_at_target_epsilon": delta_at,
            "degraded": spent.degraded,
            "composition": spent.accounting,
            "per_release": [
                {k: _plain(v) for k, v in dataclasses.asdict(r).items()} for r in spent.per_release
            ],
        }
    )
    return section


def _broadcasts(result: PrivateMetaAnalysis) -> dict[str, dict[str, list[float]]]:
    """Return what the server sent the clients after rounds A and B (public)."""
    out: dict[str, dict[str, list[float]]] = {}
    if result.broadcast_b is not None:
        b = result.broadcast_b
        out["B"] = {
            "centre": _floats(b.centre),
            "floor": _floats(b.floor),
            "kappa": _floats(b.kappa),
            "rho": _floats(np.zeros(len(b.kappa)) if b.rho is None else b.rho),
        }
    if result.broadcast_c is not None:
        c = result.broadcast_c
        out["C"] = {"tau2": _floats(c.tau2), "kappa_star": _floats(c.kappa_star)}
    return out


def _number(value: float | None) -> float | str | None:
    if value is None:
        return None
    return float(value) if math.isfinite(value) else str(value)


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _floats(values: Any) -> list[float]:
    return [float(v) for v in np.asarray(values, dtype=np.float64).ravel()]


def session_counts(session: AnalysisSession) -> list[list[int]]:
    """Return ``[[client id, m_i], ...]`` of every client in the key directory (public).

    Raises
    ------
    ProtocolAbortError
        Not one count per client of the session (the run aborts).
    """
    counts = sorted(
        [client, int(reply[Key.RECORDS])] for client, reply in session.first_replies.items()
    )
    if len(counts) != session.n:
        raise session.abort(
            f"{len(counts)} record counts for the {session.n} clients of the session"
        )
    return counts


def session_arm_counts(session: AnalysisSession) -> list[list[int]]:
    """Return ``[[client id, treated, control], ...]`` of every client of the key directory.

    A two-arm run's nodes state their arm sizes in their first reply (public, on their own
    consent). The two-arm secure sums need every silo in every round with at least 2 records
    in each arm (:func:`fa_hetdp.protocol.two_arm_sums.reduced_summaries`); a node checks its
    own arms at its first step (:mod:`fa_hetdp.clients.app`), so a silo below that here ends the
    run before anything is released.

    Raises
    ------
    ProtocolAbortError
        A client without usable arm sizes, or with an arm below 2 records (nothing released).
    """
    effect = session.settings.scenario.data.effect
    rows: list[list[int]] = []
    for client, reply in sorted(session.first_replies.items()):
        arms = reply.get(Key.ARM_COUNTS)
        if not (
            isinstance(arms, list)
            and len(arms) == 2
            and all(isinstance(a, int) and not isinstance(a, bool) for a in arms)
        ):
            raise session.abort(
                f"effect={effect!r}: silo {client} stated no usable arm sizes in its first reply; "
                "nothing was released"
            )
        if min(arms) < 2:
            raise session.abort(
                f"effect={effect!r} under the secure sums: silo {client} holds {arms[0]} treated "
                f"and {arms[1]} control; every silo takes part in every round and needs at least "
                "2 records in each arm; nothing was released"
            )
        rows.append([client, int(arms[0]), int(arms[1])])
    if len(rows) != session.n:
        raise session.abort(f"{len(rows)} arm sizes for the {session.n} clients of the session")
    return rows


EFFECT_SCALES: Final[Mapping[str, str]] = {
    "MD": "mean difference treated - control, in the column's units (no offset: a difference)",
    "SMD": "standardised mean difference (Hedges' g), unit-free",
    "OR": "log odds ratio treated vs control, unit-free (exp() for the odds ratio)",
    "RR": "log risk ratio treated vs control, unit-free (exp() for the risk ratio)",
    "RD": "risk difference treated - control (proportions), unit-free",
}
"""What a two-arm section's ``units`` figures are, per effect."""

#: The figures of a two-arm section, each with its standard error and intervals where it has.
_TWO_ARM_FIGURES = ("pooled_mean", "random_effects_mean", "tau2", "q", "i2", "h2")


def _effect_figures(
    view: ColumnMetaAnalysis, level: float, targets: Sequence[str]
) -> dict[str, Any]:
    """Every figure of ``view`` with its standard error and its ``targets``' intervals."""
    kinds = {target: view.confidence_intervals(level, target) for target in targets}
    errors = view.standard_errors
    statistics = {
        name: figure_entry(name, getattr(view, name), errors, kinds) for name in _TWO_ARM_FIGURES
    }
    statistics["q_pvalue"] = {"value": json_floats(view.q_pvalue)}
    pi = view.prediction_interval(level)
    return {
        "statistics": statistics,
        "prediction_interval": {
            "lower": json_floats(pi.lower),
            "upper": json_floats(pi.upper),
            "method": pi.method,
        },
    }


def effect_section(
    cma: ColumnMetaAnalysis,
    arm_counts: Sequence[Sequence[int]],
    *,
    level: float = 0.95,
    unit_names: Mapping[str, str] | None = None,
    targets: Sequence[str] = ("population",),
    silos: Callable[[ColumnMetaAnalysis], list[dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """Return the ``meta_analysis`` section of a two-arm run, either design.

    Every figure is the effect's, on the records' ``[0, 1]`` scale at the section's top level and
    in the columns' units in ``units`` (an MD times the column's range, the other effects
    unit-free: the in-process :class:`~fa_hetdp.accuracy.columns.ColumnMetaAnalysis`), with its
    standard error and the intervals of ``targets``; ``silos(view)``: every silo's row (the silo
    summaries; the secure sums release none). A reduced analysis (the secure sums,
    ``cma.reduction``) also states the reduction and the counts ``4 m' - 3`` it ran at.
    ``arm_counts``: every silo's ``(treated, control)``.
    """
    result = cma.result
    if not isinstance(result, (PrivateMetaAnalysis, TwoArmMetaAnalysis)):  # pragma: no cover
        raise TypeError("a two-arm section needs a private two-arm result")
    raw = dataclasses.replace(cma, low=np.zeros(cma.d), high=np.ones(cma.d))

    def figures(view: ColumnMetaAnalysis) -> dict[str, Any]:
        out = _effect_figures(view, level, targets)
        return out if silos is None else {**out, "silos": silos(view)}

    a, b = (1.0, 0.0) if cma.reduction is None else cma.reduction
    reduced = (
        {}
        if cma.reduction is None
        else {
            "reduced_counts": [int(m) for m in result.records_per_client],
            "reduction": {"a": float(a), "b": float(b)},
        }
    )
    spent = result.spent
    return {
        "n": int(result.n),
        "d": int(result.d),
        "effect": cma.effect,
        "arm": cma.arm,
        "columns": list(cma.columns),
        "records_per_client": [int(sum(arms)) for arms in arm_counts],
        "arm_counts": [[int(v) for v in arms] for arms in arm_counts],
        **reduced,
        "level": float(level),
        **figures(raw),
        "units": {
            "scale": EFFECT_SCALES[cma.effect],
            "columns": list(cma.columns),
            "bounds": {
                c: [float(lo), float(hi)]
                for c, lo, hi in zip(cma.columns, cma.low, cma.high, strict=True)
            },
            "factor": json_floats(cma.scale / a),
            **({"unit_names": dict(unit_names)} if unit_names else {}),
            **figures(cma),
        },
        "unit_of_privacy": result.unit_of_privacy,
        "design": result.design,
        "server_saw": result.server_saw,
        "adversary": result.adversary,
        "epsilon": None if spent is None or spent.epsilon is None else _number(spent.epsilon),
        "delta": None if spent is None or spent.delta is None else _number(spent.delta),
        "labels": [str(label) for label in result.labels],
    }


class SecureSums(Analysis):
    """The meta-analysis' secure sums: rounds A, B and C (``design = "secure-sums"``).

    ``reason``: why this design runs (the design's choice,
    :func:`fa_hetdp.server.meta_design.resolve_design`), stated in the result.
    """

    def __init__(self, reason: str = "") -> None:
        self.reason = reason

    def summations(self, protocol: ProtocolConfig) -> int:
        """Return 3: rounds A, B and C."""
        del protocol
        return 3

    def check_reply(self, reply: Mapping[str, Any]) -> str | None:
        """Refuse a reply without a usable record count (:func:`check_count`)."""
        return check_count(reply)

    def run(self, session: AnalysisSession) -> dict[str, Any]:
        """Run rounds A, B and C (:func:`meta_rounds`)."""
        return meta_rounds(session, reason=self.reason)


def meta_rounds(session: AnalysisSession, *, reason: str = "") -> dict[str, Any]:
    """Run rounds A, B and C after the key advertisement; write and return the result.

    ``reason``: why the secure sums run (the design's choice,
    :func:`fa_hetdp.server.meta_design.resolve_design`), stated in the result.

    A two-arm run (the scenario's ``[data] effect``: an MD or RD, checked before the run) runs
    the same rounds on the silos' reduced summaries (:mod:`fa_hetdp.protocol.two_arm_sums`):
    the plan is :func:`fa_hetdp.flowerkit.settings.two_arm_sums_plan` of the arm sizes every
    node stated in its first reply (:func:`session_arm_counts`), round A's request lists them
    (each node derives every silo's count ``4 m' - 3`` itself) and the result is the in-process
    :class:`~fa_hetdp.accuracy.columns.ColumnMetaAnalysis` with its ``reduction``
    (:func:`~fa_hetdp.protocol.two_arm_sums.two_arm_sums_labels`, :func:`effect_section`).
    """
    s = session.settings
    n, d = session.n, session.d
    effect = s.scenario.data.effect
    two_arm = effect != "mean"
    rows: list[list[int]] = []
    unit: str | None = None
    if two_arm:
        rows = session_arm_counts(session)
        plan = two_arm_sums_plan(s, [row[1:] for row in rows], d)
        unit = TWO_ARM_SUMS_UNIT.format(m=min(min(row[1:]) for row in rows))
        request_a: dict[str, Any] = {Key.ARM_COUNTS: rows, Key.D: d}
    else:
        counts = session_counts(session)
        plan = meta_plan(s, [m for _, m in counts], d)
        request_a = {Key.META_COUNTS: counts}
    caveats = simulation_caveats(s)
    secagg = s.secagg_parameters()
    session.record(  # on record from here on: nothing released yet
        lambda released: meta_privacy_section(
            plan, None, released=released, secagg=secagg, caveats=caveats, unit=unit
        )
    )
    bits = s.modulus_bits

    def secure_sum(
        rnd: str, broadcast: BroadcastB | BroadcastC | None, extra: dict[str, Any]
    ) -> tuple[FloatArray, SecureSum]:
        encoding = meta_encoding(plan, rnd, broadcast, n, modulus_bits=bits)

        def admit(survivors: int) -> str | None:  # decided before any unmasking
            if survivors == n:
                return None
            return (
                f"round {rnd}: {n - survivors} of the {n} clients dropped out; a meta-analysis "
                "needs every client of the key directory in every round (their record counts "
                "calibrate the plan); the round's sum was not unmasked"
            )

        result = session.secure_sum(META_ROUNDS[rnd], encoding, extra, admit=admit)
        sigmas = round_sigmas(plan, rnd, broadcast)
        noise.update(split_round(plan, rnd, plan.noise_std(sigmas)))  # each release's noise
        return add_central_noise(plan, sigmas, result.sum, session.rng), result

    partitions: dict[str, list[int]] = {}
    errors: dict[str, list[float]] = {}
    noise: dict[str, FloatArray] = {}

    def note(rnd: str, result: SecureSum) -> None:
        partitions[rnd] = list(result.partitions)
        errors[rnd] = _floats(result.max_error)

    # round A: the public counts out, centre / floor / clip back ---------------------------
    total_a, sum_a = secure_sum("A", None, request_a)
    note("A", sum_a)
    sums_a = split_round(plan, "A", total_a)
    broadcast_b = assemble_round_a(plan, total_a)
    session.release(
        f"round A: centre, floor and clip broadcast to the {len(session.active)} clients"
    )
    session.progress(Event.STAGE1, clients=len(sum_a.survivors), round="A")

    # round B: fixed effect, Q, I^2, tau2 ---------------------------------------------------
    extra_b = {
        Key.META_CENTRE: broadcast_b.centre,
        Key.META_FLOOR: broadcast_b.floor,
        Key.META_SPREAD: pooled_variance(broadcast_b),
        Key.META_KAPPA: broadcast_b.kappa,
        Key.META_RHO: np.zeros(plan.d) if broadcast_b.rho is None else broadcast_b.rho,
    }
    total_b, sum_b = secure_sum("B", broadcast_b, extra_b)
    note("B", sum_b)
    sums_b, broadcast_c = assemble_round_b(plan, broadcast_b, total_b)
    session.release(f"round B: tau2 broadcast to the {len(session.active)} clients")

    # round C: the random-effects mean (when asked for) -------------------------------------
    sums_c: dict[str, FloatArray] | None = None
    if "E" in plan.releases:
        extra_c = {
            Key.META_CENTRE: broadcast_c.centre,
            Key.META_FLOOR: broadcast_c.floor,
            Key.META_SPREAD: pooled_variance(broadcast_c),
            Key.META_TAU2: broadcast_c.tau2,
            Key.META_KAPPA_STAR: broadcast_c.kappa_star,
        }
        total_c, sum_c = secure_sum("C", broadcast_c, extra_c)
        note("C", sum_c)
        sums_c = split_round(plan, "C", total_c)
    result = assemble_result(
        plan, broadcast_b, sums_a, sums_b, broadcast_c if sums_c is not None else None, sums_c
    )
    if two_arm:
        result = two_arm_sums_labels(result, effect, min(min(row[1:]) for row in rows))
    if reason:
        labels = (*result.labels, f"design secure-sums: {reason}")
        result = dataclasses.replace(result, labels=labels)
    released = [*session.released, "the meta-analysis (every figure of the result)"]
    if not two_arm:
        document = _document(session, plan, result, released, partitions, errors, noise)
        document["design_reason"] = reason
        return session.finish(document, result)
    cma = _two_arm_result(session, result, rows)
    arm_counts = [row[1:] for row in rows]
    section = effect_section(
        cma,
        arm_counts,
        unit_names=s.scenario.data.column_units(),
        targets=("population", "sample"),
    )
    document = _document(
        session, plan, result, released, partitions, errors, noise, unit=unit, section=section
    )
    document.update(
        {
            "two_arm": {
                "effect": effect,
                "arm": cma.arm,
                "arm_levels": {"treated": 1, "control": 0},
                "scale": section["units"]["scale"],
                "neighbours": result.unit_of_privacy,
                "entered_as": (
                    f"one summary per silo: theta' = 1/2 + {effect}/4 at the count 4 m' - 3 of "
                    "its smaller arm m' (fa_hetdp.protocol.two_arm_sums); no per-silo estimates"
                ),
            },
            "records_per_client": section["records_per_client"],
            "arm_counts": section["arm_counts"],
            "reduced_counts": section["reduced_counts"],
            "design_reason": reason,
        }
    )
    return session.finish(document, cma)


def _two_arm_result(
    session: AnalysisSession, result: PrivateMetaAnalysis, rows: Sequence[Sequence[int]]
) -> ColumnMetaAnalysis:
    """Return the two-arm secure sums' result as in process: the reduced analysis, in units.

    Silo ``i`` is labelled by its partition (as the silo summaries' two-arm result is).

    Raises
    ------
    ProtocolAbortError
        The scenario's ``[data] columns`` do not name ``d`` columns.
    """
    s = session.settings
    d = session.d
    columns = column_ranges(s) or {f"x{j}": (0.0, 1.0) for j in range(d)}
    if len(columns) != d:
        raise session.abort(
            f"the meta-analysis has d={d} coordinates but the scenario's [data] columns name "
            f"{len(columns)}"
        )
    return ColumnMetaAnalysis(
        result=result,
        columns=tuple(columns),
        low=np.array([low for low, _ in columns.values()], dtype=np.float64),
        high=np.array([high for _, high in columns.values()], dtype=np.float64),
        site_labels=tuple(session.partitions.get(row[0], -1) for row in rows),
        effect=s.scenario.data.effect,
        arm=s.scenario.data.arm,
        arm_levels=(1, 0),
        reduction=REDUCTION,
    )


def _document(
    session: AnalysisSession,
    plan: MetaPlan,
    result: PrivateMetaAnalysis,
    released: Sequence[str],
    partitions: Mapping[str, list[int]],
    errors: Mapping[str, list[float]],
    noise: Mapping[str, FloatArray],
    *,
    unit: str | None = None,
    section: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Return the secure sums' result document.

    ``section``: its ``meta_analysis`` part, if not the one-arm
    :func:`~fa_hetdp.report.meta.meta_section` in the columns' units.
    """
    s = session.settings
    privacy = meta_privacy_section(
        plan,
        result.spent,
        released=released,
        secagg=s.secagg_parameters(),
        caveats=simulation_caveats(s),
        unit=unit,
    )
    if section is None:
        section = with_column_units(meta_section(result), s)
    return {
        "status": "success",
        "differentially_private": privacy["differentially_private"],
        **session.base_document(),
        "analysis": "meta",
        "design": result.design,
        "server_saw": result.server_saw,
        "secagg": secagg_section(s),
        "n": plan.n,
        "d": plan.d,
        "min_honest_clients": plan.t,
        "records_per_client": [int(m) for m in plan.records_per_client],
        "clients_in_sum": {rnd: len(p) for rnd, p in partitions.items()},
        "partitions_in_sum": dict(partitions),
        "meta_analysis": section,
        "broadcasts": _broadcasts(result),
        "noise_std": {  # of each release made, per coordinate, all shares arrived
            name: _floats(std) for name, std in noise.items() if name in plan.releases
        },
        "privacy": privacy,
        "labels": list(result.labels),
        "encoding_error_bound": dict(errors),
    }
