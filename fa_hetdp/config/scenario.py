"""Scenario files: loading a TOML file and validating it into a :class:`Scenario`.

A scenario is a TOML file (schema: ``scenarios/README.md``) loaded into the frozen dataclasses
of :mod:`fa_hetdp.config.schema` and validated **before any work starts**: unknown keys, wrong
types and impossible values (label ratios that do not match the label count, a sample larger
than the data, ``epsilon <= 0``, ``delta`` outside (0, 1), an unknown mechanism, an odd masking
degree, ...) are all collected and raised together as one
:class:`~fa_hetdp.config.rules.ConfigError` (a :class:`~fa_hetdp.errors.ScenarioError`) whose
lines name each key by its dotted path (``privacy.delta``) and say what is allowed. The rules
themselves are declared in :mod:`fa_hetdp.config.rules`; this module maps the file's sections
onto them, and :mod:`fa_hetdp.config.sections` adds the checks that only a data section has
(label ratios against the label count, the sample against the data, the client summary).

Sample sizes are checked against the number of images per label of the standard files
(:data:`fa_hetdp.data.catalog.LABEL_COUNTS`), so a scenario for CIFAR-10 is validated without
reading CIFAR-10; the sampler checks again against the files actually read.

``load_scenario("quickstart")`` or ``load_scenario("paper/cifar10-skew10")`` resolves a bare
name against the shipped ``scenarios/`` directory; any other argument is a path.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, cast

from fa_hetdp.config.constraints import Boolean, Options, Real
from fa_hetdp.config.rules import ConfigError, type_name, validate
from fa_hetdp.config.schema import (
    NODE_KEYS_OF_SCENARIO,
    AssumptionsSpec,
    DataSpec,
    ExperimentSpec,
    NodesSpec,
    PrivacySpec,
    ProtocolSpec,
    Scenario,
    SecAggSpec,
)
from fa_hetdp.config.sections import DATA_KEYS, MISSING, Checker, check_data
from fa_hetdp.config.settings import PRESETS, SETTINGS, Setting, preset_values, settings_in
from fa_hetdp.errors import ScenarioError

__all__ = [
    "available_scenarios",
    "default_scenario",
    "load_scenario",
    "min_records_problem",
    "scenario_from_dict",
    "scenarios_dir",
]


def _sections() -> dict[str, frozenset[str]]:
    """Return the keys allowed in each section (the declared settings' read at each call)."""
    return {
        "scenario": frozenset({"name", "description"}),
        "data": DATA_KEYS,
        "privacy": frozenset({"split", "preset", *(s.entry for s in settings_in("privacy"))}),
        "protocol": frozenset(s.entry for s in settings_in("protocol")),
        "secagg": frozenset(f.name for f in dataclasses.fields(SecAggSpec)),
        "experiment": frozenset({"repeats", "seed"}),
        "assumptions": frozenset({"within_variance", "coordinate_mean", "spread", "i2", "source"}),
        "nodes": frozenset(NODE_KEYS_OF_SCENARIO),
    }


_IGNORED_SECTIONS: Final[frozenset[str]] = frozenset({"derived"})  # written by to_dict()


def scenario_from_dict(
    raw: Mapping[str, Any], *, name: str | None = None, path: str | None = None
) -> Scenario:
    """Validate a scenario given as nested dicts (a parsed TOML file) and build it.

    Parameters
    ----------
    raw : mapping
        Tables ``scenario``, ``data``, ``privacy``, ``protocol``, ``secagg``, ``experiment``,
        ``assumptions`` and ``nodes`` (the simulated nodes' policy; schema:
        ``scenarios/README.md``).
    name : str, optional
        Name used when ``[scenario] name`` is absent (``load_scenario`` passes the file stem).
    path : str, optional
        Recorded in :attr:`Scenario.path` and in error messages.

    Returns
    -------
    Scenario

    Raises
    ------
    ScenarioError
        One error listing every problem found, each as ``dotted.key: what is wrong and what is
        allowed``.
    """
    c = Checker()
    if not isinstance(raw, Mapping):
        raise ConfigError(
            "scenario", [("(top level)", f"must be a table of tables, got {type_name(raw)}")]
        )
    sections = _sections()
    for unknown in sorted(set(raw) - set(sections) - _IGNORED_SECTIONS):
        c.fail(unknown, "unknown section; allowed: " + ", ".join(sections))
    tables = {section: c.table(raw, section, keys) for section, keys in sections.items()}

    # [scenario]
    sc = tables["scenario"]
    scen_name = sc.get("name", name if name is not None else "scenario")
    if not isinstance(scen_name, str) or not scen_name:
        c.fail("scenario.name", f"must be a non-empty string, got {scen_name!r}")
    description = sc.get("description", "")
    if not isinstance(description, str):
        c.fail("scenario.description", f"must be a string, got {type_name(description)}")

    base = None if path is None else Path(path).resolve().parent  # relative data.sites
    data = check_data(c, tables["data"], base=base)
    experiment, privacy, protocol, secagg = _settings(c, tables, data)
    assumptions = _assumptions(c, tables["assumptions"])
    nodes = _nodes(c, tables["nodes"])

    if c.errors:
        where = f"scenario {path}" if path else f"scenario {scen_name!r}"
        raise ConfigError(where, c.errors)
    return Scenario(
        name=cast(str, scen_name),
        description=cast(str, description),
        data=cast(DataSpec, data),
        privacy=cast(PrivacySpec, privacy),
        protocol=cast(ProtocolSpec, protocol),
        secagg=cast(SecAggSpec, secagg),
        experiment=cast(ExperimentSpec, experiment),
        path=path,
        assumptions=assumptions,
        nodes=nodes,
    )


#: ``[nodes]``: each key's rule (the node policy checks them again, with the ledger's bounds).
_NODE_RULES: Final[dict[str, Any]] = {
    "allow_central_placement": Boolean(),
    "allow_non_dp": Boolean(),
    "measurement_max_epsilon": Real(low=0.0, low_open=True),
    "ledger_max_epsilon": Real(low=0.0, high=1e6, low_open=True),
    "ledger_max_delta": Real(low=0.0, high=1.0, low_open=True, high_open=True),
}


def _nodes(c: Checker, table: Mapping[str, Any]) -> NodesSpec:
    """Check ``[nodes]``: the simulated nodes' policy (booleans, epsilons, a delta)."""
    values: dict[str, Any] = {}
    for name, rule in _NODE_RULES.items():
        if name in table:
            value = c.value_of(rule, table[name], f"nodes.{name}")
            if value is not MISSING:
                values[name] = value if isinstance(rule, Boolean) else float(value)
    return NodesSpec(**values)


def _assumptions(c: Checker, table: Mapping[str, Any]) -> AssumptionsSpec:
    """Check ``[assumptions]`` (each key by its declared rule; ``source`` a string)."""
    values: dict[str, Any] = {}
    for name in ("within_variance", "coordinate_mean", "spread", "i2"):
        value = c.get(table, name, name, f"assumptions.{name}", None)
        values[name] = None if value is None or value is MISSING else float(value)
    source = table.get("source", "")
    if not isinstance(source, str):
        c.fail("assumptions.source", f"must be a string, got {type_name(source)}")
        source = ""
    return AssumptionsSpec(**values, source=source)


# Where each setting of the declared rules lives in a scenario file, and its default: the
# declared settings (fa_hetdp.config.settings) first, then the sections not declared there yet.
_SA: Final = SecAggSpec()  # the [secagg] defaults
_OTHER_SETTINGS: Final[dict[str, tuple[str, Any]]] = {
    "split": ("privacy.split", None),
    "threshold": ("secagg.threshold", _SA.threshold),
    "neighbours": ("secagg.neighbours", "complete"),
    "dropout_fraction": ("secagg.dropout_fraction", 0.0),
    "dropout_stage": ("secagg.dropout_stage", "stage1"),
    "threat_model": ("secagg.threat_model", "honest-but-curious"),
    "corrupt_fraction": ("secagg.corrupt_fraction", 0.0),
    "dropout_tolerance": ("secagg.dropout_tolerance", 0.0),
    "security_bits": ("secagg.security_bits", _SA.security_bits),
    "correctness_bits": ("secagg.correctness_bits", _SA.correctness_bits),
    "modulus_bits": ("secagg.modulus_bits", _SA.modulus_bits),
    "repeats": ("experiment.repeats", 100),
    "seed": ("experiment.seed", 0),
}
_SECAGG_SETTINGS: Final = tuple(
    n for n, (k, _) in _OTHER_SETTINGS.items() if k.startswith("secagg.")
)


def _declared(preset: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
    """Return every setting's ``(dotted key, default)``; MISSING: required.

    ``preset``: the values of the ``[privacy] preset`` asked for, which replace the defaults.
    """
    declared: dict[str, tuple[str, Any]] = {}
    for s in SETTINGS.values():
        default = MISSING if s.required is not None else preset.get(s.name, s.default)
        declared[s.name] = (s.scenario_key, default)
        if s.name == "min_honest_clients":  # the order problems are reported in
            declared["split"] = _OTHER_SETTINGS["split"]
    return {**declared, **_OTHER_SETTINGS}


def _preset(c: Checker, privacy: Mapping[str, Any]) -> str | None:
    """Return the ``[privacy] preset`` asked for (None: none, or a bad one, reported in ``c``)."""
    if "preset" not in privacy:
        return None
    value = c.value_of(Options(tuple(PRESETS)), privacy["preset"], "privacy.preset")
    return None if value is MISSING else str(value)


def _spec_value(setting: Setting, value: Any) -> Any:
    """Return a checked value as the spec holds it (a grid and an array as tuples, floats)."""
    real = isinstance(setting.rule.constraints[0], Real)
    if setting.grid:
        items = value if isinstance(value, list | tuple) else [value]
        return tuple(float(v) if real else v for v in items)
    if isinstance(value, list):
        return tuple(value)
    return float(value) if real and value is not None else value


def min_records_problem(values: dict[str, Any], records: int) -> str | None:
    """Hold ``min_records`` to the public ``records_per_client`` under the record unit.

    Every client of a scenario holds ``records_per_client`` records, so that count is public:
    a left-out ``min_records`` takes it (when >= 2, written into ``values``); one above it is a
    bound the clients do not meet (they would refuse the session at its first step), and one
    record per client makes the record and the client the same unit. Returns why the value
    does not fit, or None (also when ``privacy_unit`` is not ``"record"``). Used for a
    scenario's own settings and for the run config's and the flags' overrides.
    """
    if values.get("privacy_unit") != "record":
        return None
    stated = values.get("min_records")
    if stated is None and records >= 2:
        values["min_records"] = records
        return None
    if stated is None:
        return (
            'required with unit = "record": an integer >= 2, at most data.records_per_client '
            f"(got records_per_client = {records}: one record per client is the client unit)"
        )
    if isinstance(stated, int) and not isinstance(stated, bool) and stated > records:
        return (
            f"must be at most data.records_per_client = {records} (every client holds that "
            f"many records), got {stated}"
        )
    return None


def meta_records_problem(values: Mapping[str, Any], records: int | None) -> str | None:
    """Refuse a meta-analysis whose clients hold fewer than 2 records each.

    ``records``: the scenario's public ``records_per_client`` (None: not known, e.g. a
    partitioner decides). Each client's sampling variance needs two records. Returns why, or
    None. Used for the run config's and the flags' overrides, beside the declared rules, so
    that every problem is reported together.
    """
    if values.get("analysis") != "meta" or records is None or records >= 2:
        return None
    return f"meta needs >= 2 records per client; data.records_per_client = {records}"


def _settings(
    c: Checker, tables: Mapping[str, Mapping[str, Any]], data: Any
) -> tuple[Any, Any, Any, Any]:
    """Check [privacy], [protocol], [secagg] and [experiment] with the declared rules."""
    values: dict[str, Any] = {}
    keys: dict[str, str] = {"num_clients": "data.num_clients"}
    preset = _preset(c, tables["privacy"])
    stated = {k: v for k, v in tables["privacy"].items() if not isinstance(v, list | dict)}
    declared = _declared({} if preset is None else preset_values(preset, stated))
    for name, (key, default) in declared.items():
        section, entry = key.split(".")
        keys[name] = key
        if entry in tables[section]:
            values[name] = tables[section][entry]
        elif default is MISSING:
            c.fail(key, str(SETTINGS[name].required))
        else:
            values[name] = default
    if isinstance(data, DataSpec):
        values["num_clients"] = data.num_clients
        problem = min_records_problem(values, data.records_per_client)
        if problem is not None:
            c.fail("privacy.min_records", problem)
    grids = [s.name for s in SETTINGS.values() if s.grid]
    problems = validate(values, keys, lists=grids)
    c.errors.extend(problems)
    bad = {key for key, _ in problems}

    def ok(name: str) -> bool:
        key = keys[name]
        return name in values and not any(
            b == key or b.startswith((f"{key}[", f"{key}.")) for b in bad
        )

    def grid(name: str) -> tuple[Any, ...]:
        v = values[name]
        return tuple(v) if isinstance(v, list) else (v,)

    privacy: Any = MISSING
    in_privacy = list(settings_in("privacy"))
    if ok("split") and all(ok(s.name) for s in in_privacy):
        split = values["split"]
        spec_fields = {f.name for f in dataclasses.fields(PrivacySpec)}
        given: dict[str, Any] = {}
        extra: list[tuple[str, Any]] = []
        for setting in in_privacy:
            value = _spec_value(setting, values[setting.name])
            attr = setting.name + "s" if setting.grid else setting.name
            if attr in spec_fields:
                given[attr] = value
            else:  # a declared setting the spec has no field of: kept by name
                extra.append((setting.name, value))
        privacy = PrivacySpec(
            **given,
            split=None if split is None else tuple((k, float(split[k])) for k in sorted(split)),
            extra=tuple(extra),
            preset=preset,
        )
    protocol: Any = MISSING
    if all(ok(s.name) for s in settings_in("protocol")):
        protocol = ProtocolSpec(
            **{
                s.name + "s" if s.grid else s.name: _spec_value(s, values[s.name])
                for s in settings_in("protocol")
            }
        )
    secagg: Any = MISSING
    if all(ok(n) for n in _SECAGG_SETTINGS):
        secagg = SecAggSpec(
            threshold=values["threshold"],
            neighbours=values["neighbours"],
            dropout_fraction=float(values["dropout_fraction"]),
            dropout_stage=values["dropout_stage"],
            threat_model=values["threat_model"],
            corrupt_fraction=float(values["corrupt_fraction"]),
            dropout_tolerance=float(values["dropout_tolerance"]),
            security_bits=float(values["security_bits"]),
            correctness_bits=float(values["correctness_bits"]),
            modulus_bits=values["modulus_bits"],  # None: the mechanism's (SecAggSpec.ring_bits)
        )
    experiment: Any = MISSING
    if ok("repeats") and ok("seed"):
        experiment = ExperimentSpec(repeats=values["repeats"], seed=values["seed"])
    return experiment, privacy, protocol, secagg


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def scenarios_dir() -> Path:
    """Return the directory of the shipped scenarios.

    ``scenarios/`` at the repository root (a clone or an editable install); otherwise
    ``fa_hetdp/_scenarios`` (where a wheel can carry a copy, e.g. with hatch's
    ``force-include``).
    """
    package = Path(__file__).resolve().parents[1]
    repo = package.parent / "scenarios"
    if (repo / "quickstart.toml").is_file():
        return repo
    return package / "_scenarios"


def available_scenarios() -> tuple[str, ...]:
    """Return the names of the shipped scenarios (``quickstart``, ``paper/cifar10-iid10``, ...)."""
    root = scenarios_dir()
    if not root.is_dir():
        return ()
    return tuple(
        sorted(p.relative_to(root).with_suffix("").as_posix() for p in root.rglob("*.toml"))
    )


def load_scenario(path_or_name: str | Path) -> Scenario:
    """Load and validate a scenario file.

    Parameters
    ----------
    path_or_name : str or Path
        A path to a TOML file, or the name of a shipped scenario (``"quickstart"``,
        ``"paper/cifar10-skew10"``; see :func:`available_scenarios`).

    Returns
    -------
    Scenario

    Raises
    ------
    ScenarioError
        File not found (the message lists the shipped names), not UTF-8, not valid TOML, or
        invalid.
    """
    candidate = Path(path_or_name)
    if not candidate.is_file():
        name = str(path_or_name).removesuffix(".toml")
        shipped = scenarios_dir() / f"{name}.toml"
        if not shipped.is_file():
            raise ScenarioError(
                f"no scenario file {str(path_or_name)!r} and no shipped scenario of that name; "
                f"shipped: {', '.join(available_scenarios()) or '(none found)'}"
            )
        candidate = shipped
    try:
        with candidate.open("rb") as fh:
            raw = tomllib.load(fh)
    except UnicodeDecodeError as exc:  # TOML files are UTF-8 (TOML 1.0, "Spec")
        bad = exc.object[exc.start]
        raise ScenarioError(
            f"scenario {candidate} is not UTF-8 (byte {exc.start} is 0x{bad:02x}); "
            "TOML files must be UTF-8: save it as UTF-8 (plain ASCII is UTF-8 too)"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"scenario {candidate} is not valid TOML: {exc}") from exc
    except OSError as exc:
        raise ScenarioError(f"cannot read scenario {candidate}: {exc}") from exc
    return scenario_from_dict(raw, name=candidate.stem, path=str(candidate))


def default_scenario() -> Scenario:
    """Return the digits quickstart (``scenarios/quickstart.toml``).

    Falls back to the same settings built in code when the ``scenarios/`` directory is not
    available (an installed wheel).
    """
    shipped = scenarios_dir() / "quickstart.toml"
    if shipped.is_file():
        return load_scenario(shipped)
    return scenario_from_dict(_QUICKSTART, name="quickstart")


_QUICKSTART: Final[dict[str, Any]] = {
    "scenario": {
        "name": "quickstart",
        "description": "Embedded digits, 100 clients, 1:...:1 over 10 labels, epsilon = 1.",
    },
    "data": {"dataset": "digits", "num_clients": 100, "label_ratios": [1] * 10},
    "privacy": {
        "epsilon": 1.0,
        "delta": 1e-5,
        "mechanism": "agm",
        "adaptive_floor": False,  # quickstart.toml states the old defaults (its numbers)
        "noise_shape": "uniform",
        "dispersion_center": "broadcast",
    },
    "protocol": {"placement": "distributed"},
    "experiment": {"repeats": 100, "seed": 0},
}
