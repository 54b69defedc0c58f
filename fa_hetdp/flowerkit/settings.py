"""Run settings of the Flower apps, read from ``context.run_config`` (shared with ``server/``).

``[tool.flwr.app.config]`` in ``pyproject.toml`` holds the keys (kebab-case). Scenario-backed
keys take their value from the scenario file when left at their "unset" value (``0``, ``-1``
or ``""``, as listed in :data:`UNSET`), so ``flwr run .`` runs the scenario as written and
``--run-config 'epsilon=0.5'`` overrides one setting. Every other value is checked by the
declared rules of :mod:`fa_hetdp.config.rules` before anything starts; problems are reported
together, each under ``run-config.<key>``.

``mode`` decides where the noise comes from: ``"deployment"`` (the default: safe) draws it
from a CSPRNG on every client and the server, and refuses a seed; ``"simulation"`` seeds every
client's generator with ``SeedSequence(seed, spawn_key=(partition_id,))`` and the server's with
``spawn_key=(SERVER_STREAM,)``, so runs are reproducible.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.config.rules import Problem, raise_problems, validate
from fa_hetdp.config.scenario import (
    default_scenario,
    load_scenario,
    meta_records_problem,
    min_records_problem,
)
from fa_hetdp.config.schema import Scenario
from fa_hetdp.config.secagg import resolve_graph, resolve_modulus_bits, secagg_parameters
from fa_hetdp.config.settings import SETTINGS, Setting
from fa_hetdp.config.settings import meta_settings as declared_meta_settings
from fa_hetdp.config.sites import sites_clients_problem
from fa_hetdp.flowerkit.steps import INPUT_STEP, UNMASK_STEP, NodeConfig
from fa_hetdp.protocol.meta_plan import MetaPlan, MetaSettings, plan_meta
from fa_hetdp.protocol.silo_summaries import SiloPlan, plan_silo_summaries
from fa_hetdp.secagg.identity import Roster, load_identity_key, public_identity
from fa_hetdp.secagg.params import THREAT_MODELS, SecAggParameters, ThreatModel

if TYPE_CHECKING:
    from fa_hetdp.protocol.two_arm import TwoArmPlan

__all__ = [
    "SERVER_STREAM",
    "UNSET",
    "NodeSecAgg",
    "RunSettings",
    "dropout_partitions",
    "meta_plan",
    "meta_settings",
    "node_secagg",
    "public_count_settings",
    "reduced_meta_plan",
    "releases_silo_summaries",
    "silo_plan",
    "simulation_identities",
    "two_arm_plan",
    "two_arm_problem",
    "two_arm_sums",
    "two_arm_sums_plan",
]

#: spawn key of the server's generator in simulation (client streams use their partition id).
SERVER_STREAM: Final = 2**32
#: spawn key of the simulated-dropout choice.
DROPOUT_STREAM: Final = 2**32 + 1


class _Derived(Mapping[str, Any]):
    """A read-only mapping computed at each access (from the declared settings' table)."""

    def __init__(self, build: Callable[[], dict[str, Any]]) -> None:
        self._build = build

    def __getitem__(self, key: str) -> Any:
        return self._build()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._build())

    def __len__(self) -> int:
        return len(self._build())


def _declared_run_settings() -> list[Setting]:
    return [s for s in SETTINGS.values() if s.run_config is not None]


#: The "unset" values of the keys that are not declared settings (yet).
_OTHER_UNSET: Final[Mapping[str, object]] = {
    "seed": -1,
    "num-clients": 0,
    "secagg-threshold": 0.0,
    "secagg-neighbours": -1,
    "dropout-fraction": -1.0,
    "dropout-stage": "",
    "max-epsilon": 0.0,
    "on-degraded": "",
    "secagg-threat-model": "",
    "secagg-corrupt-fraction": -1.0,
    "secagg-dropout-tolerance": -1.0,
    "secagg-security-bits": 0.0,
    "secagg-correctness-bits": 0.0,
    "secagg-modulus-bits": 0,
}

#: Values that mean "take it from the scenario" (the declared settings' ``unset``, then the rest).
UNSET: Final[Mapping[str, object]] = _Derived(
    lambda: {
        **{str(s.run_config): s.unset for s in _declared_run_settings()},
        **_OTHER_UNSET,
    }
)

Mode = Literal["simulation", "deployment"]

# Which step a simulated dropout fails at, per scenario dropout stage: "stageK" drops before
# sending the masked input (its noise share is lost), "stageK-unmask" after it.
_DROP_STEP: Final = {
    "stage1": INPUT_STEP[1],
    "stage1-unmask": UNMASK_STEP[1],
    "stage2": INPUT_STEP[2],
    "stage2-unmask": UNMASK_STEP[2],
}


_OTHER_KEYS: Final[Mapping[str, str]] = {
    "mode": "mode",
    "seed": "seed",
    "num_clients": "num-clients",
    "threshold": "secagg-threshold",
    "neighbours": "secagg-neighbours",
    "dropout_fraction": "dropout-fraction",
    "dropout_stage": "dropout-stage",
    "node_wait_timeout": "node-wait-timeout",
    "stage_timeout": "stage-timeout",
    "on_degraded": "on-degraded",
    "threat_model": "secagg-threat-model",
    "corrupt_fraction": "secagg-corrupt-fraction",
    "dropout_tolerance": "secagg-dropout-tolerance",
    "security_bits": "secagg-security-bits",
    "correctness_bits": "secagg-correctness-bits",
    "modulus_bits": "secagg-modulus-bits",
}

#: Run-config key of each setting of :data:`fa_hetdp.config.rules.FIELDS` it can override.
RUN_CONFIG_KEYS: Final[Mapping[str, str]] = _Derived(
    lambda: {
        **{k: _OTHER_KEYS[k] for k in ("mode", "seed", "num_clients")},  # the order reported
        **{s.name: str(s.run_config) for s in _declared_run_settings()},
        **_OTHER_KEYS,
    }
)

_OTHER_KINDS: Final[Mapping[str, type]] = {
    "scenario": str,
    "mode": str,
    "seed": int,
    "num-clients": int,
    "secagg-threshold": float,
    "secagg-neighbours": int,
    "dropout-fraction": float,
    "dropout-stage": str,
    "node-wait-timeout": float,
    "stage-timeout": float,
    "max-epsilon": float,
    "on-degraded": str,
    "secagg-threat-model": str,
    "secagg-corrupt-fraction": float,
    "secagg-dropout-tolerance": float,
    "secagg-security-bits": float,
    "secagg-correctness-bits": float,
    "secagg-modulus-bits": int,
    "result-path": str,
    "progress-path": str,
}


def _kinds() -> dict[str, type]:
    """Return the Flower type of every run-config key (the declared settings' first)."""
    head = {k: _OTHER_KINDS[k] for k in ("scenario", "mode", "seed", "num-clients")}
    declared = {str(s.run_config): s.run_kind for s in _declared_run_settings()}
    return {**head, **declared, **_OTHER_KINDS}


_OPTIONAL: Final = frozenset({"progress-path"})
_KIND_NAMES: Final = {str: "a string", int: "an integer", float: "a number"}
#: What a key allows, where its type alone does not say it (added to a type problem).
_ALLOWED: Final[Mapping[str, str]] = {
    "secagg-modulus-bits": "0 (the scenario's, else 32 for ddg/skellam and 64 otherwise), 32 or 64",
}


def run_config_key(name: str) -> str:
    """Return the dotted key of setting ``name`` in error messages: ``run-config.<key>``."""
    return f"run-config.{RUN_CONFIG_KEYS.get(name, name)}"


def _read(config: Mapping[str, Any], problems: list[Problem]) -> dict[str, Any]:
    """Read every key with its Flower type; type problems go to ``problems``."""
    raw: dict[str, Any] = {}
    for key, kind in _kinds().items():
        value = config.get(key, UNSET.get(key, "" if key in _OPTIONAL else None))
        if value is None:
            problems.append((f"run-config.{key}", "missing (see [tool.flwr.app.config])"))
            continue
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            allowed = f": {_ALLOWED[key]}" if key in _ALLOWED else ""
            message = f"must be {_KIND_NAMES[kind]}{allowed}, got {value!r}"
            problems.append((f"run-config.{key}", message))
            continue
        raw[key] = value
    return raw


def resolve_overrides(
    scenario: Scenario, raw: Mapping[str, Any], problems: list[Problem]
) -> dict[str, Any]:
    """Return the settings by canonical name: each override, or the scenario's value if unset.

    A key at its :data:`UNSET` value takes the scenario's value; any other value overrides it
    and is checked by the declared rules. ``secagg-neighbours = 0`` is the complete graph; a
    ``secagg-threshold`` >= 2 with no fractional part is a count of shares; ``seed = -1`` in
    deployment mode means "no seed".
    """
    secagg = scenario.secagg
    from_scenario: dict[str, Any] = {
        **{s.name: scenario.setting(s.name) for s in _declared_run_settings()},
        "seed": scenario.experiment.seed,
        "num_clients": scenario.num_clients,
        "threshold": secagg.threshold,
        "neighbours": secagg.neighbours,
        "dropout_fraction": secagg.dropout_fraction,
        "dropout_stage": secagg.dropout_stage,
        "on_degraded": "refuse",  # not in a scenario: the safe default
        "threat_model": secagg.threat_model,
        "corrupt_fraction": secagg.corrupt_fraction,
        "dropout_tolerance": secagg.dropout_tolerance,
        "security_bits": secagg.security_bits,
        "correctness_bits": secagg.correctness_bits,
        "modulus_bits": secagg.modulus_bits,  # None: the mechanism's (resolve_modulus_bits)
    }
    values: dict[str, Any] = {}
    for name, key in RUN_CONFIG_KEYS.items():
        if key not in raw:
            continue  # a type problem, already reported
        value = raw[key]
        if name in from_scenario and key in UNSET and value == UNSET[key]:
            if name == "seed" and raw.get("mode") == "deployment":
                values[name] = None
            else:
                values[name] = from_scenario[name]
            continue
        if name in SETTINGS and SETTINGS[name].is_boolean():
            if value not in ("true", "false"):
                problems.append(
                    (run_config_key(name), f"must be '', 'true' or 'false', got {value!r}")
                )
                continue
            value = value == "true"
        elif name == "neighbours" and value == 0:
            value = "complete"
        elif name == "threshold" and value >= 2 and float(value).is_integer():
            value = int(value)
        values[name] = value
    # Declared settings without a run-config key (broadcast_bounds, statistics): the scenario's
    # (the rules of noise_shape and dispersion_center read broadcast_bounds).
    for setting in SETTINGS.values():
        if setting.run_config is None:
            values[setting.name] = scenario.setting(setting.name)
    return values


@dataclass(frozen=True)
class RunSettings:
    """Everything a run needs, resolved from the run config and the scenario.

    Attributes
    ----------
    scenario : Scenario
        The loaded scenario (the clients read their data from it).
    mode : {"simulation", "deployment"}
        Noise source (see the module docstring).
    seed : int or None
        Simulation seed (None in deployment).
    num_clients : int
        ``n``, clients to sample (the scenario's count unless overridden).
    protocol : ProtocolConfig
        Privacy settings.
    threshold : int
        Secure-aggregation threshold ``t_s``: shares needed to unmask a client (among its
        share holders: its neighbours, never itself); a summation needs at least this many
        survivors. Resolved by :func:`fa_hetdp.config.secagg.resolve_graph`, so it equals
        the scenario's ``derived.secagg_threshold_count`` for the same ``n`` and graph.
    neighbours : int or None
        Masking-graph degree (None: complete graph).
    dropout_fraction : float
        Simulated dropouts (tests; simulation only).
    dropout_step : str
        The step at which simulated dropouts fail.
    node_wait_timeout, stage_timeout : float
        Seconds to wait for the nodes to register and for one step's replies.
    result_path : Path
        Where the ServerApp writes the result JSON.
    progress_path : Path or None
        Where it appends progress events (JSON lines), if set.
    max_epsilon : float or None
        Largest epsilon a release may spend (after missing noise shares); None: the target.
    on_degraded : {"refuse", "release"}
        What a release whose epsilon exceeds the target does: ``"refuse"`` aborts the run
        with the numbers once it would exceed ``max_epsilon`` (default: the target);
        ``"release"`` releases it labelled degraded (up to ``max_epsilon`` when set).
    threat_model : {"honest-but-curious", "malicious-server"}
        The server secure aggregation defends against.
    corrupt_fraction, dropout_tolerance, security_bits, correctness_bits : float
        The stated adversary: gamma, secure aggregation's delta, sigma and eta (see
        :mod:`fa_hetdp.config.secagg`); they choose ``(k, t)`` when the scenario says
        ``"auto"`` and state the guarantee of :meth:`secagg_parameters`.
    modulus_bits : {64, 32}
        The ring ``Z_2^m`` of the masked sums, resolved by
        :func:`fa_hetdp.config.secagg.resolve_modulus_bits`: run config
        ``secagg-modulus-bits``, else the scenario's ``[secagg] modulus_bits``, else the
        mechanism's default (32 for ddg and skellam, 64 for the Gaussian mechanisms).
    settings : Mapping[str, Any]
        The resolved value of each declared setting that ``protocol`` has no field of
        (:data:`fa_hetdp.config.settings.SETTINGS`), by name.
    """

    scenario: Scenario
    mode: Mode
    seed: int | None
    num_clients: int
    protocol: ProtocolConfig
    threshold: int
    neighbours: int | None
    dropout_fraction: float
    dropout_step: str
    node_wait_timeout: float
    stage_timeout: float
    result_path: Path
    progress_path: Path | None
    max_epsilon: float | None = None
    on_degraded: str = "refuse"
    threat_model: str = "honest-but-curious"
    corrupt_fraction: float = 0.0
    dropout_tolerance: float = 0.0
    security_bits: float = 40.0
    correctness_bits: float = 20.0
    modulus_bits: int = 64
    settings: Mapping[str, Any] = field(default_factory=dict)

    def secagg_parameters(self) -> SecAggParameters:
        """Return this run's ``(k, t)`` with its guarantee (``.guarantee()``: in words).

        The degree and threshold are :attr:`neighbours` / :attr:`threshold` (the same
        resolution as the scenario's), with the failure probabilities under the stated
        ``corrupt_fraction`` (gamma) and ``dropout_tolerance`` (delta).
        """
        return secagg_parameters(
            self.num_clients,
            "complete" if self.neighbours is None else self.neighbours,
            self.threshold,
            gamma=self.corrupt_fraction,
            delta=self.dropout_tolerance,
            sigma=self.security_bits,
            eta=self.correctness_bits,
            threat_model=self.threat_model,  # type: ignore[arg-type]  # checked by the rules
        )

    @classmethod
    def from_run_config(
        cls, config: Mapping[str, Any], *, scenario_records: bool = True
    ) -> RunSettings:
        """Resolve the settings; every problem is raised together as one ``ConfigError``.

        The overrides pass through the declared rules of :mod:`fa_hetdp.config.rules`
        (reported as ``run-config.<key>``); the threshold is resolved by
        :func:`~fa_hetdp.config.secagg.resolve_graph`, as the scenario's derived value is.
        ``scenario_records``: the clients hold the scenario's ``records_per_client`` records,
        so an overriding ``min_records`` is held to it
        (:func:`~fa_hetdp.config.scenario.min_records_problem`); False
        for a drop-in measurement, whose records come from the user's loader (each client
        checks its own count).
        """
        problems: list[Problem] = []
        raw = _read(config, problems)
        name = raw.get("scenario", "")
        scenario = default_scenario() if name in ("", "quickstart") else load_scenario(name)
        values = resolve_overrides(scenario, raw, problems)
        problems += validate(values, run_config_key)
        records = scenario.data.records_per_client
        record_problem = min_records_problem(values, records) if scenario_records else None
        if record_problem is not None:
            problems.append((run_config_key("min_records"), record_problem))
        known = records if scenario_records and scenario.data.partitioner is None else None
        if (meta_problem := meta_records_problem(values, known)) is not None:
            problems.append((run_config_key("analysis"), meta_problem))
        if not problems and (
            two_arm := two_arm_problem(_stated_bound(values, raw), scenario.data.effect)
        ):
            problems.append((run_config_key(two_arm[0]), two_arm[1]))
        n_key = run_config_key("num_clients")
        simulated_sites = scenario_records and values.get("mode") == "simulation"
        if simulated_sites and not any(key == n_key for key, _ in problems):
            if sites_problem := sites_clients_problem(scenario.data, values["num_clients"]):
                problems.append((n_key, sites_problem))  # one client per file, said now
        max_epsilon = raw.get("max-epsilon", UNSET["max-epsilon"])  # checked as an epsilon
        if max_epsilon != UNSET["max-epsilon"]:
            problems += validate({"epsilon": max_epsilon}, lambda _: "run-config.max-epsilon")
        for name, axis in (
            ("epsilon", scenario.privacy.epsilons),
            ("mechanism", scenario.privacy.mechanisms),
            ("placement", scenario.protocol.placements),
        ):
            if len(axis) > 1 and raw.get(RUN_CONFIG_KEYS[name]) == UNSET[RUN_CONFIG_KEYS[name]]:
                reason = f"the scenario is a grid ({list(axis)}): a run measures one; set it"
                problems.append((run_config_key(name), reason))
        raise_problems("run config", problems)

        n = int(values["num_clients"])
        degree, threshold = resolve_graph(
            n,
            values["neighbours"],
            values["threshold"],
            gamma=float(values["corrupt_fraction"]),
            delta=float(values["dropout_tolerance"]),
            sigma=float(values["security_bits"]),
            eta=float(values["correctness_bits"]),
            threat_model=values["threat_model"],
        )
        declared: dict[str, Any] = {
            s.name: float(v) if s.run_kind is float and v is not None else v
            for s in SETTINGS.values()
            for v in (values[s.name],)
        }
        protocol = ProtocolConfig(
            **{name: v for name, v in declared.items() if SETTINGS[name].protocol},
            extra={name: v for name, v in declared.items() if not SETTINGS[name].protocol},
            corrupt_fraction=float(values["corrupt_fraction"]),  # its shares are not counted
            split=scenario.privacy.split_mapping(),
        )
        progress = raw.get("progress-path", "")
        return cls(
            scenario=scenario,
            mode=values["mode"],
            seed=values["seed"],
            num_clients=n,
            protocol=protocol,
            threshold=threshold,
            neighbours=degree,
            dropout_fraction=float(values["dropout_fraction"]),
            dropout_step=_DROP_STEP[values["dropout_stage"]],
            node_wait_timeout=float(values["node_wait_timeout"]),
            stage_timeout=float(values["stage_timeout"]),
            result_path=Path(raw["result-path"]).expanduser(),
            progress_path=Path(progress).expanduser() if progress else None,
            max_epsilon=None if max_epsilon == UNSET["max-epsilon"] else float(max_epsilon),
            on_degraded=values["on_degraded"],
            threat_model=values["threat_model"],
            corrupt_fraction=float(values["corrupt_fraction"]),
            dropout_tolerance=float(values["dropout_tolerance"]),
            security_bits=float(values["security_bits"]),
            correctness_bits=float(values["correctness_bits"]),
            modulus_bits=resolve_modulus_bits(values["modulus_bits"], values["mechanism"]),
            settings={name: v for name, v in declared.items() if not SETTINGS[name].protocol},
        )


def _stated_bound(values: Mapping[str, Any], raw: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``values`` with ``min_records`` where the run config states it, else None.

    A scenario's ``min_records`` under the record unit is filled from its public
    ``records_per_client`` (:func:`~fa_hetdp.config.scenario.min_records_problem`), a bound
    every node checks at its first step; a meta-analysis' plan of public counts does not take
    it (:func:`public_count_settings`). Only an override the run config (or a drop-in's
    settings document) states is the server asking for it (:func:`two_arm_problem`).
    """
    key = RUN_CONFIG_KEYS["min_records"]
    if raw.get(key, UNSET[key]) != UNSET[key]:
        return dict(values)
    return {**values, "min_records": None}


def dropout_partitions(settings: RunSettings) -> frozenset[int]:
    """Partition ids that simulate a dropout (a seeded choice of ``floor(fraction * n)``)."""
    count = math.floor(settings.dropout_fraction * settings.num_clients + 1e-9)
    if count == 0 or settings.seed is None:
        return frozenset()
    import numpy as np

    rng = np.random.Generator(
        np.random.PCG64(np.random.SeedSequence(settings.seed, spawn_key=(DROPOUT_STREAM,)))
    )
    chosen = rng.choice(settings.num_clients, size=count, replace=False)
    return frozenset(int(i) for i in chosen)


@dataclass(frozen=True)
class NodeSecAgg:
    """What a node's own ``--node-config`` says about secure aggregation (never the server).

    Attributes
    ----------
    threat_model : {"honest-but-curious", "malicious-server"}
        The node's ``secagg-threat-model``, else the run config's.
    gamma : float
        The corrupt fraction the node's client guards against: with ``"malicious-server"``
        the larger of the node's ``secagg-min-gamma`` and the run config's (never lower
        than the node's); with ``"honest-but-curious"`` the node's floor (0: none).
    identity : bytes or None
        The raw identity private key from ``secagg-identity-key``.
    roster : Roster or None
        The roster read from ``secagg-roster`` (its SHA-256: ``roster.sha256``).
    """

    threat_model: ThreatModel
    gamma: float
    identity: bytes | None
    roster: Roster | None


def simulation_identities(seed: int, count: int) -> tuple[dict[int, bytes], Roster]:
    """Return identity keys of partitions ``0 .. count-1`` derived from ``seed``, and their roster.

    ``mode = "simulation"`` only, for nodes that neither hold a roster nor pin the threat
    model: the keys are public (anyone with the seed derives them), so a malicious-server
    simulation runs every signature and check of the mode and protects nothing.
    """
    keys = {
        i: hashlib.sha256(f"fa-hetdp simulation identity/{seed}/{i}".encode()).digest()
        for i in range(count)
    }
    roster = Roster.build({f"partition-{i}": public_identity(k) for i, k in keys.items()})
    return keys, roster


def node_secagg(
    node_config: Mapping[str, Any], settings: RunSettings, partition: tuple[int, int] = (-1, 0)
) -> NodeSecAgg:
    """Read a node's secure-aggregation keys (:class:`~fa_hetdp.flowerkit.steps.NodeConfig`).

    ``partition`` is the node's ``(partition-id, num-partitions)``: in ``mode =
    "simulation"`` a node that neither holds a roster nor pins the threat model in its own
    node config joins a malicious-server run with :func:`simulation_identities` (no
    protection: the keys follow from the seed).

    Raises
    ------
    ValueError
        One line naming the key: an unknown threat model, a ``secagg-min-gamma`` outside
        ``[0, 1)``, a roster without an identity key (or the reverse), a malformed roster or
        key file (:class:`~fa_hetdp.secagg.identity.RosterError`), or ``"malicious-server"``
        without a roster, an identity key and a ``secagg-min-gamma``.
    """
    own = node_config.get(NodeConfig.THREAT_MODEL)
    model = own if isinstance(own, str) and own else settings.threat_model
    if model not in THREAT_MODELS:
        raise ValueError(
            f"node-config {NodeConfig.THREAT_MODEL} must be one of {THREAT_MODELS}, got {model!r}."
        )
    floor_value = node_config.get(NodeConfig.MIN_GAMMA)
    floor = 0.0
    if floor_value is not None:
        if isinstance(floor_value, bool) or not isinstance(floor_value, int | float):
            floor_value = math.nan
        floor = float(floor_value)
        if not 0.0 <= floor < 1.0:
            raise ValueError(
                f"node-config {NodeConfig.MIN_GAMMA} must be a number in [0, 1) (the corrupt "
                f"fraction this node guards against), got {node_config[NodeConfig.MIN_GAMMA]!r}."
            )
    roster_path = node_config.get(NodeConfig.ROSTER) or None
    key_path = node_config.get(NodeConfig.IDENTITY_KEY) or None
    if (roster_path is None) != (key_path is None):
        raise ValueError(
            f"node-config needs both {NodeConfig.ROSTER} and {NodeConfig.IDENTITY_KEY} (the "
            "federation's roster and this owner's identity key on it), or neither."
        )
    pid, count = partition
    seed = settings.seed
    simulated = (
        model == "malicious-server"
        and settings.mode == "simulation"
        and seed is not None
        and roster_path is None
        and key_path is None
        and not own
        and 0 <= pid < count
    )
    if simulated and seed is not None:
        keys, simulated_roster = simulation_identities(seed, count)
        gamma = max(floor, settings.corrupt_fraction)
        return NodeSecAgg(model, gamma, keys[pid], simulated_roster)
    if model == "malicious-server":
        missing = [
            key
            for key, value in (
                (NodeConfig.ROSTER, roster_path),
                (NodeConfig.IDENTITY_KEY, key_path),
                (NodeConfig.MIN_GAMMA, floor_value),
            )
            if value is None
        ]
        if missing:
            raise ValueError(
                f"secagg threat model malicious-server needs node-config {', '.join(missing)}: "
                "the roster file every node holds (compare its SHA-256), this owner's identity "
                "key (python -m fa_hetdp.secagg.identity keygen) and the corrupt fraction it "
                "guards against (e.g. secagg-min-gamma=0.1)."
            )
    roster = None if roster_path is None else Roster.load(str(roster_path))
    identity = None if key_path is None else load_identity_key(str(key_path))
    gamma = max(floor, settings.corrupt_fraction) if model == "malicious-server" else floor
    return NodeSecAgg(threat_model=model, gamma=gamma, identity=identity, roster=roster)


def meta_settings(settings: RunSettings, *, design: str | None = None) -> MetaSettings:
    """Return the run's :class:`MetaSettings` (``design``: the run's ``design`` setting if None).

    Every declared meta-analysis setting (:func:`fa_hetdp.config.settings.meta_settings`: the
    unit of privacy, ``min_records``, the placement, the mechanism, the design, the clips and
    floors, ...) at the run's value, and the secagg ``gamma`` (colluding clients' noise shares
    are not counted): the node and the server build the same plan from the same values.
    """
    p = settings.protocol
    values: dict[str, Any] = {s.name: p.setting(s.name) for s in declared_meta_settings()}
    if design is not None:
        values["design"] = design
    return MetaSettings.from_values({**values, "corrupt_fraction": settings.corrupt_fraction})


def meta_plan(settings: RunSettings, records_per_client: Sequence[int], d: int) -> MetaPlan:
    """Return the plan of a meta-analysis run (``analysis = "meta"``) for the public counts.

    The client and the server both build it from the run's settings (the unit of privacy,
    ``min_records``, the placement, the mechanism, the budget and the secagg ``gamma``, whose
    colluding clients' noise shares are not counted) and the session's record counts, so
    each client's noise share and the server's calibration agree.

    Raises
    ------
    PrivacyParameterError
        A setting the meta-analysis does not take (e.g. a mechanism other than ``agm``), or
        ``min_records`` above a client's count.
    """
    p = settings.protocol
    meta = meta_settings(settings, design="secure-sums")
    return plan_meta(p.epsilon, p.delta, records_per_client, d, meta)


def public_count_settings(settings: RunSettings, design: str) -> MetaSettings:
    """Return the run's :class:`MetaSettings` with the counts public: ``min_records`` None.

    A meta-analysis session publishes every silo's count ``m_i`` (each node's first reply;
    the round-A and ``silo_summaries`` requests list them all), so the silo summaries are
    calibrated to each silo's own ``m_i`` (:func:`silo_plan`) and the ``"auto"`` choice
    compares the designs at those counts; ``min_records`` stays a bound every node checks at
    its first step.
    """
    return dataclasses.replace(meta_settings(settings, design=design), min_records=None)


def silo_plan(settings: RunSettings, records_per_client: Sequence[int], d: int) -> SiloPlan:
    """Return the silo-summaries plan of a meta-analysis run for the public counts.

    The sibling of :func:`meta_plan`: the server and every node build it from the run's
    settings and the session's counts. Silo ``i``'s noise depends only on its own ``m_i``,
    ``d`` and the budget, so the plan over any subset of the silos gives each of them the
    same noise (the server analyses the silos that replied with the plan over them).

    Raises
    ------
    PrivacyParameterError
        The run's settings do not allow the design (privacy unit ``"client"``, central
        placement; :func:`~fa_hetdp.protocol.silo_summaries.silo_summaries_problem`).
    InputDataError
        Fewer than 2 counts, or a count below 2.
    """
    p = settings.protocol
    meta = public_count_settings(settings, "silo-summaries")
    return plan_silo_summaries(p.epsilon, p.delta, records_per_client, d, meta)


def two_arm_problem(values: Mapping[str, Any], effect: str) -> tuple[str, str] | None:
    """Why a run cannot make the scenario's two-arm ``effect`` (``[data] effect``), or None.

    Checked with the run config, before Flower starts, as in process
    (:func:`fa_hetdp.private_meta_analysis`): a two-arm effect is a meta-analysis (``analysis =
    "meta"``); ``design = "secure-sums"`` builds an MD or RD as one summary per silo
    (:mod:`fa_hetdp.protocol.two_arm_sums`: the record unit, no ``min_records``) and refuses
    SMD, OR and RR with the in-process line (:data:`fa_hetdp.protocol.two_arm.
    secure_sums_refusal`); ``"silo-summaries"`` runs the silo summaries and ``"auto"`` may (it
    weighs both for an MD or RD once the arm sizes are known,
    :func:`fa_hetdp.server.meta_design.two_arm_design`), so the settings that rule the silo
    summaries out (the client unit, central placement) are refused with the in-process line.
    Returns ``(setting, why)``.
    """
    if effect == "mean":
        return None
    from fa_hetdp.protocol.silo_summaries import silo_summaries_problem
    from fa_hetdp.protocol.two_arm import secure_sums_refusal
    from fa_hetdp.protocol.two_arm_sums import (
        REDUCED_EFFECTS,
        silo_summaries_only,
        two_arm_sums_problem,
    )

    if values.get("analysis") != "meta":
        return (
            "analysis",
            f"[data] effect = {effect!r} compares two arms across silos: a meta-analysis "
            f"(analysis = 'meta'), got analysis = {values.get('analysis')!r}",
        )
    unit, placement = values.get("privacy_unit"), values.get("placement")
    if values.get("design") == "secure-sums":
        if effect not in REDUCED_EFFECTS:
            return "design", secure_sums_refusal(effect)
        floor = values.get("min_records")
        sums_problem = two_arm_sums_problem(effect, unit, floor)
        if sums_problem is not None:
            return "privacy_unit" if unit != "record" else "min_records", sums_problem
        return None
    problem = silo_summaries_problem(
        MetaSettings(privacy_unit=str(unit), design="silo-summaries", placement=str(placement))
    )
    if problem is not None:
        return (
            "privacy_unit" if unit != "record" else "placement",
            silo_summaries_only(effect, problem),
        )
    return None


def two_arm_sums(settings: RunSettings) -> bool:
    """Whether the run makes a two-arm MD or RD in the secure sums (``design = "secure-sums"``).

    The run config is checked before Flower starts (:func:`two_arm_problem`), so a two-arm run
    that names the secure sums makes an MD or RD at the record unit, without a ``min_records``
    the run states (a scenario's own is a bound every node checks, not part of the plan).
    """
    effect = settings.scenario.data.effect
    return effect != "mean" and settings.protocol.setting("design") == "secure-sums"


def two_arm_sums_plan(
    settings: RunSettings, arm_counts: Sequence[Sequence[int]], d: int
) -> MetaPlan:
    """Return the secure sums' plan of a two-arm MD or RD for the silos' public arm sizes.

    Every silo enters as one summary (:func:`fa_hetdp.protocol.two_arm_sums.
    reduced_summaries`) at the count ``4 m' - 3`` of its smaller arm ``m'``
    (:func:`~fa_hetdp.protocol.two_arm_sums.reduced_counts`): :func:`reduced_meta_plan` of
    those counts, the plan the in-process :func:`~fa_hetdp.protocol.two_arm_sums.
    run_two_arm_sums` makes. The server builds it; every node builds the same for round A's
    arm sizes, with its own colluders (:mod:`fa_hetdp.clients.meta`).
    """
    from fa_hetdp.protocol.two_arm_sums import reduced_counts

    counts = reduced_counts([min(int(a) for a in arms) for arms in arm_counts])
    return reduced_meta_plan(settings, counts.tolist(), d)


def reduced_meta_plan(settings: RunSettings, counts: Sequence[int], d: int) -> MetaPlan:
    """Return the secure sums' plan on reduced two-arm summaries at their public ``counts``.

    :func:`meta_plan`'s sibling, as :func:`~fa_hetdp.protocol.two_arm_sums.run_two_arm_sums`
    plans: the run's settings with every count public (:func:`public_count_settings`: no
    ``min_records``, whose bound on a node's records says nothing of its smaller arm; a stated
    one stays a bound every node checks at its first step) and the reduced summaries' record
    bound of ``U`` (``MetaPlan.two_arm``).
    """
    from fa_hetdp.protocol.two_arm_sums import two_arm_sums_plan as plan_of

    p = settings.protocol
    return plan_of(p.epsilon, p.delta, counts, d, public_count_settings(settings, "secure-sums"))


def two_arm_plan(settings: RunSettings, arm_counts: Sequence[Sequence[int]], d: int) -> TwoArmPlan:
    """Return the two-arm plan of a meta-analysis run for the silos' public arm sizes.

    The sibling of :func:`silo_plan` for the scenario's ``[data] effect`` (a
    :class:`~fa_hetdp.protocol.two_arm.TwoArmPlan`): the server and every node build it from
    the run's settings and the session's ``(treated, control)`` sizes. A silo's noise depends
    only on its own arm sizes, ``d`` and the budget, so the plan over any subset of the silos
    gives each of them the noise it drew.
    """
    from fa_hetdp.protocol.two_arm import plan_two_arm

    p = settings.protocol
    meta = public_count_settings(settings, "silo-summaries")
    effect = settings.scenario.data.effect
    return plan_two_arm(p.epsilon, p.delta, [list(c) for c in arm_counts], d, effect, meta)


def releases_silo_summaries(node_config: Mapping[str, Any]) -> bool:
    """Read the node config's ``release-silo-summaries`` (default ``True``).

    Raises
    ------
    ValueError
        A value other than ``true`` or ``false`` (one line).
    """
    value = node_config.get(NodeConfig.RELEASE_SILO_SUMMARIES, True)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise ValueError(
            f"node-config {NodeConfig.RELEASE_SILO_SUMMARIES} must be true or false, got {value!r}"
        )
    return value
