"""The settings a drop-in measurement sends with its first message, and their check.

In a user's own Flower app the run config holds the user's keys, not fa-hetdp's. So
:func:`fa_hetdp.flower.measure` sends the measurement's settings inside its first message
(``advertise_keys``, under :data:`SETTINGS_KEY`): a *settings document* of run-config keys
(the same kebab-case keys as ``[tool.flwr.app.config]``) plus the client summary. The client
reads it with :func:`read_settings`, which resolves it with the same validator as a run
config (:meth:`fa_hetdp.flowerkit.settings.RunSettings.from_run_config`: every problem in one
:class:`~fa_hetdp.config.rules.ConfigError`), so a bad document makes that client fail the
step with one line (Flower sends an error reply and the server drops it), and the server
builds its own settings from the very same document (:func:`settings_document`).

The document is the server's word. What protects a client comes from its own node config
(:func:`check_node_safety`): its privacy unit (``privacy-unit``, default ``"client"``) and
the corrupt fraction it guards against (``secagg-min-gamma``); a document that states another
unit, or a lower ``secagg-corrupt-fraction`` than the node's floor (which would calibrate the
noise to more honest shares than the node believes there are), is refused.

A two-arm effect (``measure(..., effect="MD", arm="treated")``, :class:`TwoArmSpec`) travels in
the document's ``data`` part, which a one-arm measurement's document does not have; both sides
set it as the run's ``[data] effect`` and ``arm`` (what our own app reads from its scenario),
after the checks of :meth:`TwoArmSpec.problems` and :func:`two_arm_run_problems`.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from fa_hetdp.config.rules import ConfigError, Problem, raise_problems, validate
from fa_hetdp.config.sections import TWO_ARM_EFFECTS
from fa_hetdp.config.settings import SETTINGS
from fa_hetdp.data.summaries import SUMMARIES, ClientSummary
from fa_hetdp.flowerkit.settings import (
    RUN_CONFIG_KEYS,
    RunSettings,
    run_config_key,
    two_arm_problem,
)
from fa_hetdp.flowerkit.steps import NodeConfig

__all__ = [
    "NODE_PRIVACY_UNIT",
    "SETTINGS_KEY",
    "SentSettings",
    "SummarySpec",
    "TwoArmSpec",
    "check_node_safety",
    "read_settings",
    "record_bound_problem",
    "settings_document",
    "two_arm_run_problems",
]

SETTINGS_KEY: Final = "fa-hetdp-settings"
"""``advertise_keys`` request key of the settings document (drop-in measurements only)."""
NODE_PRIVACY_UNIT: Final = "privacy-unit"
"""Node-config key of the unit of privacy this node accepts (``"client"`` when absent)."""
NODE_ALLOW_SEED: Final = "allow-seeded-noise"
"""Node-config key (``true``) that lets a node outside a Flower simulation accept seeded noise
(tests that call the ``ClientApp`` in process); never set it on a deployed node."""

#: Run-config keys a drop-in measurement fills itself (the rest come from ``**settings``).
_FIXED: Final[Mapping[str, object]] = {
    "scenario": "",  # the defaults only: a drop-in's data comes from the user's records
    "node-wait-timeout": 60.0,
    "stage-timeout": 60.0,
    "result-path": "",  # nothing written unless measure(result_path=...) asks
    "progress-path": "",
}
#: Declared settings without a run-config key, accepted in the document by canonical name.
_SCENARIO_ONLY: Final = tuple(s.name for s in SETTINGS.values() if s.run_config is None)


@dataclass(frozen=True)
class SummarySpec:
    """What each client reports for its records (the drop-in's ``data.summary``).

    Attributes
    ----------
    kind : {"mean", "pooled", "label-histogram"}
        :mod:`fa_hetdp.data.summaries`.
    num_labels : int or None
        ``L``, the histogram's length (``"label-histogram"`` only; required there).
    image_shape : (int, int, int) or None
        ``(channels, height, width)`` of one record (``"pooled"`` only; required there).
    pool_block : int
        Block side of ``"pooled"``.
    """

    kind: str = "mean"
    num_labels: int | None = None
    image_shape: tuple[int, int, int] | None = None
    pool_block: int = 2

    def problems(self) -> list[Problem]:
        """Return what is wrong with the spec, as ``(key, message)`` pairs."""
        out: list[Problem] = []
        if self.kind not in SUMMARIES:
            out.append(("summary", f"must be one of {', '.join(SUMMARIES)}, got {self.kind!r}"))
        if self.kind == "label-histogram" and not _positive_int(self.num_labels):
            out.append(
                ("num_labels", f"label-histogram needs num_labels >= 1, got {self.num_labels!r}")
            )
        if self.kind == "pooled" and (
            self.image_shape is None
            or len(self.image_shape) != 3
            or not all(_positive_int(v) for v in self.image_shape)
        ):
            out.append(
                (
                    "image_shape",
                    f"pooled needs image_shape=(channels, height, width), got {self.image_shape!r}",
                )
            )
        if not _positive_int(self.pool_block):
            out.append(("pool_block", f"must be an integer >= 1, got {self.pool_block!r}"))
        return out

    def resolve(self, record_dim: int) -> ClientSummary:
        """Return the :class:`ClientSummary` for records of dimension ``record_dim``."""
        shape = self.image_shape if self.image_shape is not None else (1, 1, record_dim)
        return ClientSummary(
            kind=self.kind,  # type: ignore[arg-type]  # checked by problems()
            image_shape=(int(shape[0]), int(shape[1]), int(shape[2])),
            num_labels=int(self.num_labels or 1),
            pool_block=int(self.pool_block),
        )

    def to_document(self) -> dict[str, Any]:
        """Return the spec as plain values (for the wire)."""
        return {
            "kind": self.kind,
            "num-labels": self.num_labels,
            "image-shape": None if self.image_shape is None else list(self.image_shape),
            "pool-block": self.pool_block,
        }


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


_EFFECTS_ALLOWED: Final = ", ".join(repr(e) for e in TWO_ARM_EFFECTS)


@dataclass(frozen=True)
class TwoArmSpec:
    """A drop-in's two-arm effect (the document's ``data`` part; the run's ``[data]``).

    Attributes
    ----------
    effect : str
        ``"mean"`` (no arms: each column's mean, the default) or a two-arm effect, ``"MD"``,
        ``"SMD"``, ``"OR"``, ``"RR"``, ``"RD"`` (any case: :attr:`name` is upper case).
    arm : object
        The arm indicator's name (given iff the effect compares two arms): the result's
        ``arm``. Every node's ``records(context)`` returns ``(features, arms)``, ``arms``
        one 0/1 integer or boolean per record (1 or ``True`` = treated).
    """

    effect: object = "mean"
    arm: object = None

    @property
    def name(self) -> str:
        """The effect normalised: ``"mean"`` or a two-arm effect in upper case (else as given)."""
        raw = self.effect.strip() if isinstance(self.effect, str) else str(self.effect)
        if raw.lower() == "mean":
            return "mean"
        return raw.upper() if raw.upper() in TWO_ARM_EFFECTS else raw

    @property
    def two_arm(self) -> bool:
        """Whether the measurement compares two arms (a two-arm effect, or an arm given)."""
        return self.name != "mean" or self.arm is not None

    def problems(self) -> list[Problem]:
        """Return what is wrong with ``effect`` and ``arm``, as ``(key, message)`` pairs."""
        out: list[Problem] = []
        name = self.name
        if name != "mean" and name not in TWO_ARM_EFFECTS:
            out.append(
                (
                    "effect",
                    f"must be 'mean' (no arms) or a two-arm effect, one of {_EFFECTS_ALLOWED}; "
                    f"got {self.effect!r}",
                )
            )
        elif name != "mean" and self.arm is None:
            out.append(
                (
                    "arm",
                    f"effect={name!r} compares two arms: name the arm indicator with arm= (e.g. "
                    "arm='treated'); every node's records(context) returns (features, arms), "
                    "arms one 0/1 per record (1 = treated)",
                )
            )
        if self.arm is not None and (not isinstance(self.arm, str) or not self.arm.strip()):
            out.append(
                ("arm", f"must name the arm indicator (a non-empty string), got {self.arm!r}")
            )
        elif self.arm is not None and name == "mean":
            out.append(
                (
                    "arm",
                    f"arm={self.arm!r} names the two arms to compare: give effect= one of "
                    f"{_EFFECTS_ALLOWED} with it (effect='mean' pools one mean per column, with "
                    "no arms)",
                )
            )
        return out

    def to_document(self) -> dict[str, Any]:
        """Return the spec as plain values (the document's ``data`` part)."""
        return {"effect": self.name, "arm": self.arm}

    @classmethod
    def from_document(cls, data: object) -> tuple[TwoArmSpec, list[Problem]]:
        """Read a document's ``data`` part; return the spec and what is malformed about it."""
        if not isinstance(data, Mapping):
            return cls(), [("data", f"must be a mapping, got {type(data).__name__}")]
        unknown = sorted(set(data) - {"effect", "arm"})
        problems: list[Problem] = []
        if unknown:
            problems.append(("data", f"unknown {unknown}; allowed: ['arm', 'effect']"))
        spec = cls(effect=data.get("effect", "mean"), arm=data.get("arm"))
        return spec, problems


def two_arm_run_problems(effect: str, run: RunSettings) -> list[Problem]:
    """Return every setting of ``run`` a two-arm ``effect`` cannot run with (none: ``[]``).

    A two-arm effect is a meta-analysis (``analysis = "meta"``), as in process
    (:func:`fa_hetdp.private_meta_analysis`): in the silo-summaries design (``"auto"``,
    ``"silo-summaries"``), or for an MD or RD in the secure sums when ``design =
    "secure-sums"`` is named. Each problem is the run config's own line
    (:func:`fa_hetdp.flowerkit.settings.two_arm_problem`: the secure sums refuse SMD, OR and RR
    with :func:`fa_hetdp.protocol.two_arm.secure_sums_refusal` and need the record unit without
    ``min_records``; the client unit and central placement rule the silo summaries out),
    checked one setting at a time so that every one is listed, keyed as the run config's key.
    """
    from fa_hetdp.protocol.two_arm_sums import REDUCED_EFFECTS

    p = run.protocol
    design = p.setting("design")
    # the design the other settings are checked against: the secure sums where they build the
    # effect, else the silo summaries (the secure sums' refusal is listed under design)
    runs = design if design != "secure-sums" or effect in REDUCED_EFFECTS else "silo-summaries"
    ok: dict[str, Any] = {
        "analysis": "meta",
        "design": runs,
        "privacy_unit": "record",
        "placement": "distributed",
        "min_records": None,
    }
    out: list[Problem] = []
    analysis = p.setting("analysis")
    if analysis != "meta":
        out.append(
            (
                run_config_key("analysis"),
                f"effect={effect!r} compares two arms across silos: a meta-analysis "
                f"(analysis='meta'), got analysis={analysis!r}",
            )
        )
    for name in ("design", "privacy_unit", "placement", "min_records"):
        problem = two_arm_problem({**ok, name: p.setting(name)}, effect)
        if problem is not None and problem[0] == name:
            out.append((run_config_key(problem[0]), problem[1]))
    return out


@dataclass(frozen=True)
class SentSettings:
    """A settings document, resolved: the run settings and the client summary."""

    run: RunSettings
    summary: SummarySpec
    document: Mapping[str, Any]

    def to_json(self) -> str:
        """Return the document as canonical JSON (kept in the client's state between steps)."""
        return json.dumps(self.document, sort_keys=True)


def settings_document(
    *,
    epsilon: float,
    delta: float,
    num_clients: int,
    seed: int | None = None,
    statistics: tuple[str, ...] | None = None,
    summary: SummarySpec | None = None,
    settings: Mapping[str, Any] | None = None,
    effect: str = "mean",
    arm: str | None = None,
) -> dict[str, Any]:
    """Return the settings document of one measurement (checked: :func:`read_settings`).

    ``settings`` holds further settings by their canonical names (``mechanism``,
    ``adaptive_floor``, ``threshold``, ``stage_timeout``, ... : the keys of
    :data:`fa_hetdp.flowerkit.settings.RUN_CONFIG_KEYS` and the declared settings without a
    run-config key, e.g. ``broadcast_bounds``). ``seed`` given: ``mode = "simulation"``
    (reproducible, no privacy against whoever knows the seed); else ``"deployment"`` (every
    client draws its noise from a CSPRNG). ``effect`` and ``arm`` (:class:`TwoArmSpec`): a
    two-arm effect, in the document's ``data`` part (absent for ``effect="mean"`` without
    ``arm``).

    Raises
    ------
    ConfigError
        An unknown setting name (with the allowed ones), or any value the validator refuses
        (every problem of the settings, the summary and the two-arm effect together).
    """
    extra = dict(settings or {})
    run_config: dict[str, Any] = dict(_FIXED)
    run_config.update(
        {
            "mode": "deployment" if seed is None else "simulation",
            "seed": -1 if seed is None else seed,
            "num-clients": num_clients,
            "epsilon": epsilon,
            "delta": delta,
        }
    )
    problems: list[Problem] = []
    scenario_only: dict[str, Any] = {}
    for name, value in extra.items():
        if name in _SCENARIO_ONLY:
            scenario_only[name] = value
            continue
        key = RUN_CONFIG_KEYS.get(name)
        if key is None or name in {"mode", "seed", "num_clients"}:
            allowed = sorted(set(RUN_CONFIG_KEYS) - {"mode", "seed", "num_clients"})
            problems.append(
                (
                    f"measure.{name}",
                    f"unknown setting; allowed: {', '.join([*allowed, *_SCENARIO_ONLY])}",
                )
            )
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif value is None:
            continue
        run_config[key] = value
    raise_problems("measurement settings", problems)
    if statistics is not None:
        scenario_only["statistics"] = list(statistics)
    document: dict[str, Any] = {
        "run-config": run_config,
        "settings": scenario_only,
        "summary": (summary or SummarySpec()).to_document(),
    }
    two_arm = TwoArmSpec(effect=effect, arm=arm)
    if two_arm.two_arm:
        document["data"] = two_arm.to_document()
    read_settings(document)  # the client's check, run here first: refuse before anything is sent
    return document


MIN_RECORDS_REQUIRED: Final = (
    "min_records is required with privacy_unit='record' for the paper's statistics "
    "(analysis='heterogeneity'): a public lower bound (an integer >= 2) on every client's "
    "record count, which their record-level noise is calibrated to (one record moves a "
    "client's mean by at most 1/min_records per coordinate) and which every node checks its "
    "own count against; a meta-analysis (analysis='meta') publishes each client's count "
    "and needs none"
)
"""The refusal of the paper's statistics at the record unit without ``min_records``."""


def record_bound_problem(run: RunSettings) -> Problem | None:
    """Why ``run`` cannot release under the record unit for want of ``min_records``, or None.

    The paper's statistics under ``privacy_unit = "record"`` calibrate their noise to the
    public lower bound ``min_records`` (:func:`fa_hetdp.protocol.plan.plan_protocol` refuses
    without it, and every node refuses to release without it): refused before any message,
    keyed as the run config's ``min-records``. A meta-analysis needs none: each client's count
    is public (its first reply) and its plan is calibrated on the counts themselves (two-arm
    effects: on the public arm sizes); a stated one is still a bound every node checks.
    """
    p = run.protocol
    if p.setting("privacy_unit") != "record" or p.setting("analysis") == "meta":
        return None
    if p.setting("min_records") is not None:
        return None
    return run_config_key("min_records"), MIN_RECORDS_REQUIRED


def read_settings(document: object) -> SentSettings:
    """Resolve a settings document with the run config's validator.

    A ``data`` part (a two-arm effect, :class:`TwoArmSpec`) sets the run's ``[data] effect``
    and ``arm``, once the effect, the arm and the run's settings are checked together
    (:func:`two_arm_run_problems`).

    Raises
    ------
    ConfigError
        One error listing every problem (a malformed document, a bad value, a two-arm effect
        the settings cannot run).
    """
    parts: dict[str, Mapping[str, Any]] = {}
    problems: list[Problem] = []
    two_arm = TwoArmSpec()
    if not isinstance(document, Mapping):
        problems.append(("settings", f"must be a mapping, got {type(document).__name__}"))
    else:
        for key in ("run-config", "settings", "summary"):
            part = document.get(key, {})
            if isinstance(part, Mapping):
                parts[key] = part
            else:
                problems.append((key, "must be a mapping"))
        if "data" in document:
            two_arm, malformed = TwoArmSpec.from_document(document["data"])
            problems += malformed
            if not malformed:
                parts["data"] = two_arm.to_document()
    raise_problems("measurement settings", problems)
    run_config, extra, summary = parts["run-config"], parts["settings"], parts["summary"]
    unknown = sorted(set(extra) - set(_SCENARIO_ONLY))
    if unknown:
        problems.append(("settings", f"unknown {unknown}; allowed: {list(_SCENARIO_ONLY)}"))
    shape = summary.get("image-shape")
    spec = SummarySpec(
        kind=summary.get("kind", "mean"),
        num_labels=summary.get("num-labels"),
        image_shape=tuple(shape) if isinstance(shape, list) else shape,
        pool_block=summary.get("pool-block", 2),
    )
    problems += spec.problems()
    problems += two_arm.problems()
    values: dict[str, Any] = {
        k: (tuple(v) if k == "statistics" and isinstance(v, list) else v) for k, v in extra.items()
    }
    problems += validate(
        {k: values[k] for k in values if k in _SCENARIO_ONLY}, lambda k: f"settings.{k}"
    )
    try:
        run = RunSettings.from_run_config(run_config, scenario_records=False)
    except ConfigError as exc:  # listed with the rest
        raise_problems("measurement settings", [*problems, *exc.problems])
        raise
    if two_arm.name != "mean":
        problems += two_arm_run_problems(two_arm.name, run)
    if (problem := record_bound_problem(run)) is not None:
        problems.append(problem)
    raise_problems("measurement settings", problems)
    if two_arm.two_arm:
        data = replace(run.scenario.data, effect=two_arm.name, arm=str(two_arm.arm))
        run = replace(run, scenario=replace(run.scenario, data=data))
    if values:
        protocol_fields = {k: v for k, v in values.items() if SETTINGS[k].protocol}
        others = {k: v for k, v in values.items() if not SETTINGS[k].protocol}
        protocol = replace(
            run.protocol,
            **protocol_fields,
            extra={**dict(run.protocol.extra), **others},
        )
        run = replace(run, protocol=protocol, settings={**dict(run.settings), **others})
    return SentSettings(run=run, summary=spec, document=dict(parts))


def check_node_safety(
    node_config: Mapping[str, Any], settings: RunSettings, *, default_unit: str | None = "client"
) -> None:
    """Refuse settings that undercut what this node's own config asks for.

    Both apps call it before a session starts: the drop-in on the settings document of the
    first message, our own app on the run config (which the server side writes too).
    ``default_unit`` is the unit a node accepts when its config names none: the drop-in's
    ``"client"``; our own app passes ``None`` (a scenario states its unit, and a node that
    pins ``privacy-unit`` refuses any other).

    Raises
    ------
    ValueError
        One line: the settings ask for seeded noise (``mode = "simulation"``: anyone with
        the seed can remove it) outside a Flower simulation, on a node whose config does not
        say ``allow-seeded-noise = true``; their privacy unit is not the node's
        ``privacy-unit``; or their ``secagg-corrupt-fraction`` is below the node's
        ``secagg-min-gamma``.
    """
    if settings.mode == "simulation" and not _seeded_noise_allowed(node_config):
        raise ValueError(
            f"the server asks for seeded noise (mode 'simulation', seed {settings.seed}), "
            "which whoever knows the seed can remove; refused outside a Flower simulation "
            f"(node-config {NODE_ALLOW_SEED}=true only on test nodes)"
        )
    unit = node_config.get(NODE_PRIVACY_UNIT, default_unit)
    stated_unit = settings.protocol.setting("privacy_unit")
    if unit is not None and stated_unit != unit:
        raise ValueError(
            f"the server asks for privacy unit {stated_unit!r}, this node accepts {unit!r} "
            f"(node-config {NODE_PRIVACY_UNIT}); refused"
        )
    floor = node_config.get(NodeConfig.MIN_GAMMA)
    if floor is None:
        return
    if isinstance(floor, bool) or not isinstance(floor, int | float) or not 0.0 <= floor < 1.0:
        raise ValueError(
            f"node-config {NodeConfig.MIN_GAMMA} must be a number in [0, 1), got {floor!r}"
        )
    stated = settings.corrupt_fraction
    if stated + 1e-12 < float(floor) or math.isnan(stated):
        raise ValueError(
            f"the server states secagg-corrupt-fraction={stated:g}, below this node's "
            f"{NodeConfig.MIN_GAMMA}={float(floor):g} (the noise would count colluders' shares "
            "as honest); refused"
        )


def _seeded_noise_allowed(node_config: Mapping[str, Any]) -> bool:
    """Whether this node may draw seeded noise: a Flower simulation, or a test node.

    Flower's simulation runs each ``ClientApp`` in a Ray actor; a SuperNode never does, and
    no message can make it. Ray is looked up, never imported (the lean install has none).
    """
    if node_config.get(NODE_ALLOW_SEED) is True:
        return True
    ray = sys.modules.get("ray")
    if ray is None:
        return False
    try:
        return bool(ray.is_initialized()) and ray.get_runtime_context().get_actor_id() is not None
    except Exception:  # any doubt: not a simulation
        return False
