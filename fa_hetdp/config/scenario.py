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

from fa_hetdp.config.rules import ConfigError, type_name, validate
from fa_hetdp.config.schema import (
    AssumptionsSpec,
    DataSpec,
    ExperimentSpec,
    PrivacySpec,
    ProtocolSpec,
    Scenario,
    SecAggSpec,
)
from fa_hetdp.config.sections import DATA_KEYS, MISSING, Checker, check_data
from fa_hetdp.errors import ScenarioError

__all__ = [
    "available_scenarios",
    "default_scenario",
    "load_scenario",
    "scenario_from_dict",
    "scenarios_dir",
]

_SECTIONS: Final[dict[str, frozenset[str]]] = {
    "scenario": frozenset({"name", "description"}),
    "data": DATA_KEYS,
    "privacy": frozenset(
        {
            "epsilon",
            "delta",
            "mechanism",
            "composition",
            "profile",
            "split",
            "variance_floor",
            "extra_i2_noise",
            "min_honest_clients",
            "statistics",
            "broadcast_bounds",
            "adaptive_floor",
            "floor_quantile",
            "noise_shape",
            "dispersion_center",
        }
    ),
    "protocol": frozenset({"placement"}),
    "secagg": frozenset(f.name for f in dataclasses.fields(SecAggSpec)),
    "experiment": frozenset({"repeats", "seed"}),
    "assumptions": frozenset({"within_variance", "coordinate_mean", "spread", "i2", "source"}),
}
_IGNORED_SECTIONS: Final[frozenset[str]] = frozenset({"derived"})  # written by to_dict()


def scenario_from_dict(
    raw: Mapping[str, Any], *, name: str | None = None, path: str | None = None
) -> Scenario:
    """Validate a scenario given as nested dicts (a parsed TOML file) and build it.

    Parameters
    ----------
    raw : mapping
        Tables ``scenario``, ``data``, ``privacy``, ``protocol``, ``secagg``, ``experiment``
        (schema: ``scenarios/README.md``).
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
    for unknown in sorted(set(raw) - set(_SECTIONS) - _IGNORED_SECTIONS):
        c.fail(unknown, "unknown section; allowed: " + ", ".join(_SECTIONS))
    tables = {section: c.table(raw, section, keys) for section, keys in _SECTIONS.items()}

    # [scenario]
    sc = tables["scenario"]
    scen_name = sc.get("name", name if name is not None else "scenario")
    if not isinstance(scen_name, str) or not scen_name:
        c.fail("scenario.name", f"must be a non-empty string, got {scen_name!r}")
    description = sc.get("description", "")
    if not isinstance(description, str):
        c.fail("scenario.description", f"must be a string, got {type_name(description)}")

    data = check_data(c, tables["data"])
    experiment, privacy, protocol, secagg = _settings(c, tables, data)
    assumptions = _assumptions(c, tables["assumptions"])

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
    )


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


# Where each setting of the declared rules lives in a scenario file, and its default.
_SA: Final = SecAggSpec()  # the [secagg] defaults
_SETTINGS: Final[dict[str, tuple[str, Any]]] = {
    "epsilon": ("privacy.epsilon", MISSING),
    "delta": ("privacy.delta", MISSING),
    "mechanism": ("privacy.mechanism", "agm"),
    "composition": ("privacy.composition", "gdp"),
    "profile": ("privacy.profile", "bounded"),
    "variance_floor": ("privacy.variance_floor", 0.01),
    "extra_i2_noise": ("privacy.extra_i2_noise", True),
    "min_honest_clients": ("privacy.min_honest_clients", None),
    "split": ("privacy.split", None),
    "statistics": ("privacy.statistics", None),
    "broadcast_bounds": ("privacy.broadcast_bounds", True),
    "adaptive_floor": ("privacy.adaptive_floor", False),
    "floor_quantile": ("privacy.floor_quantile", 0.1),
    "noise_shape": ("privacy.noise_shape", "uniform"),
    "dispersion_center": ("privacy.dispersion_center", "broadcast"),
    "placement": ("protocol.placement", "distributed"),
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
_GRID_SETTINGS: Final[tuple[str, ...]] = ("epsilon", "mechanism", "placement")
_SECAGG_SETTINGS: Final = tuple(n for n, (k, _) in _SETTINGS.items() if k.startswith("secagg."))
_REQUIRED: Final[dict[str, str]] = {
    "epsilon": "required: a number > 0 or an array of them (the grid)",
    "delta": "required: a number in (0, 1), e.g. 1e-5",
}


def _settings(
    c: Checker, tables: Mapping[str, Mapping[str, Any]], data: Any
) -> tuple[Any, Any, Any, Any]:
    """Check [privacy], [protocol], [secagg] and [experiment] with the declared rules."""
    values: dict[str, Any] = {}
    keys: dict[str, str] = {"num_clients": "data.num_clients"}
    for name, (key, default) in _SETTINGS.items():
        section, entry = key.split(".")
        keys[name] = key
        if entry in tables[section]:
            values[name] = tables[section][entry]
        elif default is MISSING:
            c.fail(key, _REQUIRED[name])
        else:
            values[name] = default
    if isinstance(data, DataSpec):
        values["num_clients"] = data.num_clients
    problems = validate(values, keys, lists=_GRID_SETTINGS)
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
    names = ("epsilon", "delta", "mechanism", "composition", "profile", "variance_floor")
    levers: tuple[str, ...] = ("statistics", "broadcast_bounds", "adaptive_floor")
    levers = (*levers, "floor_quantile", "noise_shape", "dispersion_center")
    if all(ok(n) for n in (*names, "extra_i2_noise", "min_honest_clients", "split", *levers)):
        split = values["split"]
        privacy = PrivacySpec(
            epsilons=tuple(float(e) for e in grid("epsilon")),
            delta=float(values["delta"]),
            mechanisms=grid("mechanism"),
            composition=values["composition"],
            profile=values["profile"],
            split=None if split is None else tuple((k, float(split[k])) for k in sorted(split)),
            variance_floor=float(values["variance_floor"]),
            extra_i2_noise=values["extra_i2_noise"],
            min_honest_clients=values["min_honest_clients"],
            statistics=None if values["statistics"] is None else tuple(values["statistics"]),
            broadcast_bounds=values["broadcast_bounds"],
            adaptive_floor=values["adaptive_floor"],
            floor_quantile=float(values["floor_quantile"]),
            noise_shape=values["noise_shape"],
            dispersion_center=values["dispersion_center"],
        )
    protocol = ProtocolSpec(placements=grid("placement")) if ok("placement") else MISSING
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
    "privacy": {"epsilon": 1.0, "delta": 1e-5, "mechanism": "agm"},
    "protocol": {"placement": "distributed"},
    "experiment": {"repeats": 100, "seed": 0},
}
