"""Every privacy setting, declared once: :data:`SETTINGS`.

One :class:`Setting` holds what the entry points need to know about a setting: its rule (the
constraints of :mod:`fa_hetdp.config.constraints`), its default, its key in a scenario file
(``privacy.<name>``), its run-config key (kebab-case, with the value that means "take the
scenario's"), its ``fa-hetdp run`` flag, its help line, and whether it changes the privacy
of a run. Everything else is derived from the table:

- the validator's :data:`fa_hetdp.config.rules.FIELDS` (and
  :func:`~fa_hetdp.config.rules.check_value` for a setting added later);
- the keys and defaults of a scenario's ``[privacy]`` and ``[protocol]`` sections
  (:func:`fa_hetdp.config.scenario.scenario_from_dict`);
- the run-config keys, their types and their "unset" values
  (:meth:`fa_hetdp.flowerkit.settings.RunSettings.from_run_config`);
- the flags of ``fa-hetdp run`` (:func:`fa_hetdp.cli.setting_flags.add_setting_flags`);
- :class:`~fa_hetdp.config.protocol.ProtocolConfig`'s defaults (checked by a test) and the
  recommended settings of :mod:`fa_hetdp.protocol.recommended`;
- the ``[privacy]`` table of ``scenarios/README.md`` (:func:`markdown_table`; a test checks
  the file against it; ``python -m fa_hetdp.config.settings`` prints it and
  ``python -m fa_hetdp.config.settings --write`` rewrites it between its markers).

A new setting is one entry here (``protocol=False``), the code that uses it (reading
``ProtocolConfig.setting(name)``: :class:`~fa_hetdp.config.protocol.ProtocolConfig` carries it
in ``extra``, and ``fa_hetdp.private_statistics`` takes it by name) and its line in
``pyproject.toml``'s ``[tool.flwr.app.config]`` when it has a run-config key (Flower reads only
the keys listed there; a test checks it); then ``python -m fa_hetdp.config.settings --write``
regenerates the docs table. ``tests/test_settings_declared_once.py`` adds one in a test and
finds it everywhere. What is
not in the table yet: ``[secagg]``, ``[data]``, ``[experiment]`` and the run-only keys
(``mode``, timeouts, ``on-degraded``) keep their own lists in those modules.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from fa_hetdp._types import ANALYSES, COMPOSITIONS, PLACEMENTS, PRIVACY_UNITS, PROFILES
from fa_hetdp.config.center import DISPERSION_CENTERS, dispersion_center_supported
from fa_hetdp.config.constraints import Boolean, Field, Integer, Options, Real
from fa_hetdp.config.noise import NOISE_SHAPES, noise_shape_supported
from fa_hetdp.config.statistics import STATISTICS_SUBSET
from fa_hetdp.dp.mechanisms import mechanism_names

__all__ = [
    "META_DESIGNS",
    "NOT_RECOMMENDED",
    "PRESETS",
    "SETTINGS",
    "Setting",
    "markdown_table",
    "meta_settings",
    "preset_values",
    "settings_in",
]


class _NotRecommended:
    """The recommended value of a setting with none of its own (its default applies)."""

    def __repr__(self) -> str:
        return "NOT_RECOMMENDED"


NOT_RECOMMENDED: Final[Any] = _NotRecommended()

META_DESIGNS: Final[tuple[str, ...]] = ("auto", "silo-summaries", "secure-sums")
"""The designs of a meta-analysis (``design``): the values of
:data:`fa_hetdp.protocol.meta_plan.DESIGNS`, which sits a layer above (a test checks they agree)."""


@dataclass(frozen=True)
class Setting:
    """One setting, as every entry point names and checks it.

    Parameters
    ----------
    name : str
        The canonical name (``ProtocolConfig`` field, ``[privacy]`` key, key of the rules).
    rule : Field
        The constraints one value must meet (the validator's entry).
    default : Any
        The value when a scenario or ``ProtocolConfig`` leaves it out (``required``: none).
    help : str
        One line: what it does (the CLI help, the docs table).
    section : str
        The scenario section that holds it (``privacy`` or ``protocol``).
    run_config : str or None
        Its ``[tool.flwr.app.config]`` key (kebab-case); None: not overridable per run.
    unset : Any
        The run-config value that means "the scenario's" (``0``, ``-1`` or ``""``).
    flag : str or None
        Its ``fa-hetdp run`` flag; None: none.
    grid : bool
        A scenario may give a list of values (one run per value).
    privacy : bool
        Its value changes the privacy of a run (the budget, the noise, what is released).
    protocol : bool
        A field of :class:`~fa_hetdp.config.protocol.ProtocolConfig`; False: carried in its
        ``extra`` and read with ``ProtocolConfig.setting(name)`` (a new setting needs no
        field).
    recommended : Any
        The value :mod:`fa_hetdp.protocol.recommended` (``private_statistics``) uses instead
        of the default (:data:`NOT_RECOMMENDED`: the default).
    required : str or None
        The message when a scenario leaves it out (None: optional, the default applies).
    doc_type, doc_default : str or None
        Wording of the docs table's type and default columns (None: derived).
    key : str or None
        Its key in the scenario section when that differs from ``name`` (``privacy_unit`` is
        ``[privacy] unit``); None: ``name``.
    meta : bool
        A setting of the meta-analysis (``analysis = "meta"``):
        :class:`~fa_hetdp.protocol.meta_plan.MetaSettings` takes its default and its rule from
        here, and a run's value reaches the node's and the server's plan
        (:func:`fa_hetdp.flowerkit.settings.meta_settings`). A new one needs no field:
        ``MetaSettings`` carries it in ``extra`` (``MetaSettings.setting(name)``).
    """

    name: str
    rule: Field
    default: Any
    help: str
    section: str = "privacy"
    run_config: str | None = None
    unset: Any = None
    flag: str | None = None
    grid: bool = False
    privacy: bool = True
    protocol: bool = True
    recommended: Any = NOT_RECOMMENDED
    required: str | None = None
    doc_type: str | None = None
    doc_default: str | None = None
    key: str | None = None
    meta: bool = False

    @property
    def entry(self) -> str:
        """Its key inside the scenario section (``key``, else ``name``)."""
        return self.name if self.key is None else self.key

    @property
    def scenario_key(self) -> str:
        """The dotted key in a scenario file, e.g. ``privacy.epsilon``."""
        return f"{self.section}.{self.entry}"

    @property
    def run_kind(self) -> type:
        """The Flower run-config type of its key (booleans are ``"true"``/``"false"``/``""``)."""
        first = self.rule.constraints[0]
        if isinstance(first, Real):
            return float
        if isinstance(first, Integer):
            return int
        return str

    def is_boolean(self) -> bool:
        """Whether the value is ``true`` or ``false``."""
        return isinstance(self.rule.constraints[0], Boolean)

    def allowed(self) -> str:
        """Return what the rule allows, in words (e.g. ``one of agm, cgm, ddg, skellam``)."""
        return ", ".join(c.describe() for c in self.rule.constraints)


def _d(name: str, rule: Field, default: Any, help: str, **kw: Any) -> Setting:
    return Setting(name=name, rule=rule, default=default, help=help, **kw)


def _run(name: str, unset: Any) -> dict[str, Any]:
    return {"run_config": name.replace("_", "-"), "unset": unset}


SETTINGS: Final[dict[str, Setting]] = {
    s.name: s
    for s in (
        _d(
            "epsilon",
            Field((Real(low=0.0, low_open=True),)),
            None,
            "total privacy budget ε; an array is a grid, one run per value",
            required="required: a number > 0 or an array of them (the grid)",
            grid=True,
            flag="--epsilon",
            doc_type="float > 0, or array of them, *required*",
            **_run("epsilon", 0.0),
        ),
        _d(
            "delta",
            Field((Real(low=0.0, high=1.0, low_open=True, high_open=True),)),
            None,
            "total δ",
            required="required: a number in (0, 1), e.g. 1e-5",
            flag="--delta",
            doc_type="float in (0, 1), *required*",
            **_run("delta", 0.0),
        ),
        _d(
            "mechanism",
            Field((Options(mechanism_names),)),  # the registry, including added ones
            "agm",
            "calibration: the analytic (Balle & Wang) or classical Gaussian mechanism (cgm is "
            "not DP for ε ≥ 1: a labelled baseline), or distributed discrete Gaussian or "
            "Skellam noise (docs/privacy.md, zCDP accounting)",
            grid=True,
            flag="--mechanism",
            doc_type="`agm` \\| `cgm` \\| `ddg` \\| `skellam`, or array",
            meta=True,
            **_run("mechanism", ""),
        ),
        _d(
            "composition",
            Field((Options(COMPOSITIONS),)),
            "gdp",
            "budget split: compose exactly as Gaussian DP (about 2× smaller σ at the same "
            "budget; not with cgm) or by basic composition (the paper's; its reproduction "
            "scenarios state it)",
            flag="--composition",
            **_run("composition", ""),
        ),
        _d(
            "profile",
            Field((Options(PROFILES),)),
            "bounded",
            "sensitivities of sums with bounded weights, or the paper's (flagged: not DP for "
            "the weighted stages)",
            **_run("profile", ""),
        ),
        _d(
            "variance_floor",
            Field((Real(low=0.0, high=0.25, low_open=True),)),
            0.01,
            "v_min: weights are 1 / max(s_i², v_min), so W = 1 / v_min",
            doc_type="float in (0, 1/4]",
            **_run("variance_floor", 0.0),
        ),
        _d(
            "extra_i2_noise",
            Field((Boolean(),)),
            True,
            "the paper's third noise stage I²''' (Thm 3.13; buys no privacy, adds error)",
            **_run("extra_i2_noise", ""),
        ),
        _d(
            "min_honest_clients",
            Field((Integer(minimum=1),), optional=True),
            None,
            "t: each client adds a noise share of variance σ²/t, so the t honest shares "
            "alone carry σ²",
            doc_type="integer in 1 … n − ⌈γn⌉",
            doc_default="n − ⌈γn⌉ (γ = `[secagg] corrupt_fraction`)",
            **_run("min_honest_clients", 0),
        ),
        _d(
            "statistics",
            Field((STATISTICS_SUBSET,), optional=True),
            None,
            "the statistics you need: releases none of them depends on are not made (no "
            "noise, no budget) and the statistics they would feed are NaN (docs/privacy.md)",
            doc_type="array of `mean`, `dispersion`, `weighted_mean`, `q`, `i2`, `i2_extra`",
            doc_default="all",
        ),
        _d(
            "broadcast_bounds",
            Field((Boolean(),)),
            True,
            "stage-2 noise calibrated to the bounds the public broadcast allows "
            "(‖max(c, 1−c)²‖₂, up to 4× less noise) instead of √d (the paper's; its "
            "scenarios set false)",
        ),
        _d(
            "adaptive_floor",
            Field((Boolean(),)),  # issue 9 lever d (fa_hetdp.protocol.floor)
            True,
            "choose the variance floor from a stage-0 noisy histogram of the clients' "
            "within-vector variances (5 % of the budget; docs/privacy.md (d)), never below "
            "variance_floor (false: W = 1/v_min, the paper's)",
            flag="--adaptive-floor",
            **_run("adaptive_floor", ""),
        ),
        _d(
            "floor_quantile",
            Field((Real(low=0.0, high=0.5, low_open=True),)),
            0.1,
            "the floor rule's quantile: at most about this fraction of the clients are floored",
            doc_type="number in (0, 0.5]",
            **_run("floor_quantile", 0.0),
        ),
        _d(
            "noise_shape",
            Field((Options(NOISE_SHAPES),)),  # issue 9, lever c (config.noise)
            "auto",
            "stage-2 noise: one σ for every coordinate, or σ_j ∝ max(c_j, 1−c_j) from the "
            "public broadcast c (same privacy, least summed noise variance; docs/privacy.md "
            "(c′)); needs broadcast_bounds and agm or cgm; auto: per_coordinate where "
            "allowed, else uniform (the plan and result show the value used)",
            flag="--noise-shape",
            **_run("noise_shape", ""),
        ),
        _d(
            "dispersion_center",
            Field((Options(DISPERSION_CENTERS),)),  # lever c (config.center)
            "auto",
            "centre of the dispersion summand: the broadcast c = clip(μ′, 0, 1), or a public "
            "a between c and 1/2 that minimises the predicted error of D″ (post-processing; "
            "docs/privacy.md (c″)); needs broadcast_bounds, any mechanism; auto: optimal "
            "where allowed, else broadcast (the plan and result show the value used)",
            flag="--dispersion-center",
            **_run("dispersion_center", ""),
        ),
        _d(
            "privacy_unit",
            Field((Options(PRIVACY_UNITS),)),  # issue 19 item 1 (docs/privacy.md, unit)
            "client",
            "what the privacy protects: one client with all its records (replace one client), "
            "or one record of one client (replace one record; needs min_records, each "
            'client\'s count is public; docs/privacy.md, "Unit of privacy")',
            key="unit",
            flag="--privacy-unit",
            protocol=False,
            meta=True,
            **_run("privacy_unit", ""),
        ),
        _d(
            "min_records",
            Field((Integer(minimum=2),), optional=True),
            None,
            "public lower bound on every client's record count (privacy_unit = record: one "
            "record moves a client's mean by at most 1/min_records per coordinate); every "
            "client must hold at least this many",
            doc_type="integer ≥ 2",
            doc_default="none (required with unit = `record`)",
            flag="--min-records",
            protocol=False,
            meta=True,
            **_run("min_records", 0),
        ),
        _d(
            "analysis",
            Field((Options(ANALYSES),)),  # issue 19 item 4 (server.strategy's analyses)
            "heterogeneity",
            "what a run measures: the paper's heterogeneity statistics (one vector per "
            "client: mean, dispersion, Q, I²), or a meta-analysis of the clients' records "
            "(per-client means and sampling variances: fixed- and random-effects means, Q, "
            'I², τ²; the secure sums or the silo summaries, README "Cross-silo")',
            flag="--analysis",
            protocol=False,
            **_run("analysis", ""),
        ),
        _d(
            "design",
            Field((Options(META_DESIGNS),)),  # protocol.meta_plan.DESIGNS (a test checks)
            "auto",
            "a meta-analysis' design: every silo releases its own noisy means and variances "
            "(record unit with public counts; the server sees each silo's noisy summaries), or "
            "three noisy secure sums (the server sees sums over all silos only); auto: the one "
            "the planner predicts more accurate for the public counts (docs/privacy.md)",
            flag="--design",
            protocol=False,
            meta=True,
            **_run("design", ""),
        ),
        # the meta-analysis' clips and floors (fa_hetdp.protocol.meta_plan, docs/privacy.md
        # "Record-level sensitivity of the meta-analysis"); MetaSettings reads them from here
        _d(
            "kappa",
            Field((Real(low=0.0, low_open=True),)),
            4.0,
            "meta-analysis: clip κ of the standardised deviations z = (θ − c)·√w of round B "
            "(a silo's own clip under kappa_per_silo); smaller: less noise, more clipping bias",
            flag="--kappa",
            protocol=False,
            meta=True,
            **_run("kappa", 0.0),
        ),
        _d(
            "kappa_star",
            Field((Real(low=0.0, low_open=True),), optional=True),
            None,
            "meta-analysis: clip κ* of round C's deviations u (the random-effects mean)",
            doc_type="number > 0",
            doc_default="`kappa`",
            protocol=False,
            meta=True,
            **_run("kappa_star", 0.0),
        ),
        _d(
            "adaptive_kappa",
            Field((Boolean(),)),
            False,
            "meta-analysis: round A also releases U = Σx², and the clip becomes "
            "max(κ, kappa_scale·√(Q_pilot/n)) per coordinate",
            protocol=False,
            meta=True,
            **_run("adaptive_kappa", ""),
        ),
        _d(
            "kappa_scale",
            Field((Real(low=0.0, low_open=True),)),
            2.5,
            "meta-analysis: the multiplier of the adaptive clip (adaptive_kappa)",
            protocol=False,
            meta=True,
            **_run("kappa_scale", 0.0),
        ),
        _d(
            "kappa_per_silo",
            Field((Boolean(),)),
            True,
            "meta-analysis: silo i clips at κ·√(1 + m_i ρ) from round A's pilot ratio ρ = "
            "τ²/σ² (record unit with public counts; otherwise every silo clips at κ)",
            protocol=False,
            meta=True,
            **_run("kappa_per_silo", ""),
        ),
        _d(
            "public_small_silo_weights",
            Field((Boolean(),)),
            True,
            "meta-analysis (secure sums): a silo whose variance one record can move by more "
            "than a sixteenth of the floor (1/(m_i − 1) > f/16) weighs by round A's pooled "
            "variance, a public weight, so that its variance adds no noise (record unit with "
            "public counts; otherwise every silo weighs by its own)",
            protocol=False,
            meta=True,
            **_run("public_small_silo_weights", ""),
        ),
        _d(
            "floor_fraction",
            Field((Real(low=0.0, high=1.0),)),
            0.75,
            "meta-analysis: φ of the variance floor f = max(φ·σ², min_floor), σ² the pooled "
            "within-silo variance of round A",
            protocol=False,
            meta=True,
            **_run("floor_fraction", -1.0),
        ),
        _d(
            "min_floor",
            Field((Real(low=0.0, high=0.25, low_open=True),)),
            1e-4,
            "meta-analysis: the smallest variance floor f_min",
            doc_type="number in (0, 1/4]",
            protocol=False,
            meta=True,
            **_run("min_floor", 0.0),
        ),
        _d(
            "clip_correction",
            Field((Boolean(),)),
            True,
            "meta-analysis: add back to A the mass the clip is expected to remove under the "
            "random-effects model (post-processing: no privacy cost)",
            privacy=False,
            protocol=False,
            meta=True,
            **_run("clip_correction", ""),
        ),
        _d(
            "placement",
            Field((Options(PLACEMENTS),)),
            "distributed",
            "where the noise is added: clients add noise shares before masking (the paper's "
            "EMSE), or the server adds it after unmasking (the paper's CMSE)",
            section="protocol",
            grid=True,
            flag="--placement",
            doc_type="`distributed` \\| `central`, or array",
            meta=True,
            **_run("placement", ""),
        ),
    )
}
"""The declared settings, by canonical name, in the order the docs list them."""


PRESETS: Final[Mapping[str, Mapping[str, Any]]] = MappingProxyType(
    {
        # the declared defaults: what ProtocolConfig(), a scenario that leaves a key out,
        # fa_hetdp.private_statistics and the planner use (a setting's ``recommended``, if
        # one is ever set apart from its default again, goes on top)
        "recommended": MappingProxyType(
            {
                s.name: s.recommended
                for s in SETTINGS.values()
                if s.recommended is not NOT_RECOMMENDED
            }
        ),
        # the paper's protocol (REPRODUCTION.md): basic composition, stage-2 bounds sqrt(d)
        # and W sqrt(d), the fixed floor W = 1/v_min, uniform noise, the broadcast centre
        "paper": MappingProxyType(
            {
                "composition": "basic",
                "profile": "bounded",
                "variance_floor": 0.01,
                "extra_i2_noise": True,
                "broadcast_bounds": False,
                "adaptive_floor": False,
                "noise_shape": "uniform",
                "dispersion_center": "broadcast",
            }
        ),
    }
)
"""Sets of settings asked for by name (``ProtocolConfig.preset``, ``[privacy] preset``)."""

_LEVER_RULES: Final[Mapping[str, Callable[[Mapping[str, Any]], str | None]]] = {
    "noise_shape": noise_shape_supported,
    "dispersion_center": dispersion_center_supported,
}
"""The cross rule of each preset value that other settings can rule out."""


def preset_values(name: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """Return preset ``name``'s values with ``given`` on top (a None counts as not given).

    A preset value that the given settings rule out (its cross rule refuses it, e.g.
    ``noise_shape = "per_coordinate"`` with ``mechanism = "ddg"``) is left out, so the
    setting's default applies; a value the caller gives is kept and checked as given.

    Raises
    ------
    ValueError
        ``name`` is not one of :data:`PRESETS`.
    """
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; allowed: {', '.join(PRESETS)}")
    stated = {k: v for k, v in given.items() if v is not None}
    preset = PRESETS[name]
    defaults = {"mechanism": "agm", "broadcast_bounds": True}
    seen = {**defaults, **preset, **stated}
    kept = {
        k: v
        for k, v in preset.items()
        if k in stated or k not in _LEVER_RULES or _LEVER_RULES[k](seen) is None
    }
    return {**kept, **stated}


def meta_settings() -> Iterator[Setting]:
    """Yield the declared settings of the meta-analysis (``meta``; read at each call)."""
    return (s for s in list(SETTINGS.values()) if s.meta)


def settings_in(section: str) -> Iterator[Setting]:
    """Yield the declared settings of scenario section ``section`` (read at each call)."""
    return (s for s in list(SETTINGS.values()) if s.section == section)


def _default_text(setting: Setting) -> str:
    if setting.doc_default is not None:
        return setting.doc_default
    if setting.required is not None:
        return ""
    value = setting.default
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"`{value}`"
    return str(value)


def _type_text(setting: Setting) -> str:
    if setting.doc_type is not None:
        return setting.doc_type
    first = setting.rule.constraints[0]
    if isinstance(first, Options):
        return " \\| ".join(f"`{v}`" for v in first.values)
    if isinstance(first, Boolean):
        return "boolean"
    return setting.allowed()


def markdown_table(section: str = "privacy") -> str:
    """Return the docs table of ``section``'s settings (``scenarios/README.md`` holds it)."""
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    lines += [
        f"| `{s.name}` | {_type_text(s)} | {_default_text(s)} | {s.help} |"
        for s in settings_in(section)
    ]
    return "\n".join(lines)


TABLE_START: Final = "<!-- settings:privacy:start -->"
TABLE_END: Final = "<!-- settings:privacy:end -->"
"""The markers around the generated table in ``scenarios/README.md``."""


def write_table(path: Path) -> bool:
    """Rewrite the table between the markers of ``path`` (atomically); return if it changed.

    Raises
    ------
    ValueError
        ``path`` does not hold both markers, in order.
    """
    text = path.read_text(encoding="utf-8")
    head, sep, rest = text.partition(TABLE_START)
    _, sep2, tail = rest.partition(TABLE_END)
    if not sep or not sep2:
        raise ValueError(f"{path} lacks the markers {TABLE_START} ... {TABLE_END}")
    new = f"{head}{TABLE_START}\n{markdown_table()}\n{TABLE_END}{tail}"
    if new == text:
        return False
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(new, encoding="utf-8")
    os.replace(tmp, path)
    return True


def main(argv: list[str] | None = None) -> int:
    """Print the docs table, or with ``--write`` rewrite it in ``scenarios/README.md``."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["--write"]:
        path = Path(__file__).resolve().parents[2] / "scenarios" / "README.md"
        changed = write_table(path)
        print(f"{path.name}: {'table rewritten' if changed else 'table up to date'}")
        return 0
    if args:
        print("usage: python -m fa_hetdp.config.settings [--write]", file=sys.stderr)
        return 2
    print(markdown_table())
    return 0


if __name__ == "__main__":  # pragma: no cover - the command line
    raise SystemExit(main())
