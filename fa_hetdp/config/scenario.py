"""Scenario files: loading a TOML file and validating it into a :class:`Scenario`.

A scenario is a TOML file (schema: ``scenarios/README.md``) loaded into the frozen dataclasses
of :mod:`fa_hetdp.config.schema` and validated **before any work starts**: unknown keys, wrong
types and impossible values (label ratios that do not match the label count, a sample larger
than the data, ``epsilon <= 0``, ``delta`` outside (0, 1), an unknown mechanism, an odd masking
degree, ...) are all collected and raised together as one
:class:`~fa_hetdp.config.rules.ConfigError` (a :class:`~fa_hetdp.errors.ScenarioError`) whose
lines name each key by its dotted path (``privacy.delta``) and say what is allowed. The rules
themselves are declared in :mod:`fa_hetdp.config.rules`; this module maps the file's sections
onto them and adds the checks that only a data section has (label ratios against the label
count, the sample against the data).

Sample sizes are checked against the number of images per label of the standard files
(:data:`fa_hetdp.data.catalog.LABEL_COUNTS`), so a scenario for CIFAR-10 is validated without
reading CIFAR-10; the sampler checks again against the files actually read.

``load_scenario("quickstart")`` or ``load_scenario("paper/cifar10-skew10")`` resolves a bare
name against the shipped ``scenarios/`` directory; any other argument is a path.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, cast

from fa_hetdp.config.rules import (
    ConfigError,
    Problem,
    check_value,
    type_name,
    validate,
)
from fa_hetdp.config.schema import (
    DataSpec,
    ExperimentSpec,
    PrivacySpec,
    ProtocolSpec,
    Scenario,
    SecAggSpec,
    SyntheticSpec,
    largest_remainder,
)
from fa_hetdp.data.catalog import DATASET_NAMES, LABEL_COUNTS
from fa_hetdp.errors import ScenarioError

__all__ = [
    "available_scenarios",
    "default_scenario",
    "load_scenario",
    "scenario_from_dict",
    "scenarios_dir",
]

_MISSING: Final[Any] = object()

_SECTIONS: Final[dict[str, frozenset[str]]] = {
    "scenario": frozenset({"name", "description"}),
    "data": frozenset(
        {
            "dataset",
            "root",
            "split",
            "num_clients",
            "sample_fraction",
            "records_per_client",
            "label_ratios",
            "dirichlet_alpha",
            "num_labels",
            "synthetic",
        }
    ),
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
        }
    ),
    "protocol": frozenset({"placement"}),
    "secagg": frozenset(f.name for f in dataclasses.fields(SecAggSpec)),
    "experiment": frozenset({"repeats", "seed"}),
}
_IGNORED_SECTIONS: Final[frozenset[str]] = frozenset({"derived"})  # written by to_dict()
_SYNTHETIC_KEYS: Final[frozenset[str]] = frozenset(
    {"size", "dim", "num_labels", "heterogeneity", "noise_std"}
)


class _Checker:
    """Collects every problem of a scenario so they are reported together."""

    def __init__(self) -> None:
        self.errors: list[Problem] = []

    def fail(self, key: str, message: str) -> None:
        self.errors.append((key, message))

    def table(self, raw: Mapping[str, Any], key: str, allowed: frozenset[str]) -> dict[str, Any]:
        value = raw.get(key.rsplit(".", 1)[-1], {})
        if not isinstance(value, dict):
            self.fail(key, f"must be a table, got {type_name(value)}")
            return {}
        for unknown in sorted(set(value) - allowed):
            self.fail(
                f"{key}.{unknown}",
                f"unknown key; allowed in [{key}]: {', '.join(sorted(allowed)) or '(none)'}",
            )
        return value

    def value(self, field: str, value: Any, key: str) -> Any:
        """Check ``value`` against the declared rule of ``field``; _MISSING if it fails."""
        message = check_value(field, value)
        if message is not None:
            self.fail(key, message)
            return _MISSING
        return value

    def get(
        self, table: Mapping[str, Any], name: str, field: str, key: str, default: Any = _MISSING
    ) -> Any:
        """Check ``table[name]`` (``default`` when absent, unchecked if None/_MISSING)."""
        if name not in table:
            return default
        return self.value(field, table[name], key)

    def choice(self, value: Any, key: str, choices: tuple[str, ...]) -> Any:
        if not isinstance(value, str) or value not in choices:
            allowed = ", ".join(choices)
            shown = f"unknown value {value!r}" if isinstance(value, str) else f"got {value!r}"
            self.fail(key, f"{shown}; allowed: {allowed}")
            return _MISSING
        return value


def _ok(*values: Any) -> bool:
    return all(v is not _MISSING for v in values)


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
    c = _Checker()
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

    data = _data(c, tables["data"])
    experiment, privacy, protocol, secagg = _settings(c, tables, data)

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
    )


def _synthetic(c: _Checker, data: Mapping[str, Any]) -> SyntheticSpec | Any:
    t = c.table(data, "data.synthetic", _SYNTHETIC_KEYS)
    for key in ("size", "dim"):
        if key not in t:
            c.fail(f"data.synthetic.{key}", "required when data.dataset = 'synthetic'")
    size = c.get(t, "size", "synthetic_size", "data.synthetic.size")
    dim = c.get(t, "dim", "synthetic_dim", "data.synthetic.dim")
    num_labels = c.get(t, "num_labels", "num_labels", "data.synthetic.num_labels", default=10)
    het = t.get("heterogeneity", 0.5)
    het = c.value("synthetic_heterogeneity", het, "data.synthetic.heterogeneity")
    noise = c.value("synthetic_noise_std", t.get("noise_std", 0.1), "data.synthetic.noise_std")
    if not _ok(size, dim, num_labels, het, noise):
        return _MISSING
    if num_labels > size:
        c.fail(
            "data.synthetic.num_labels", f"must be <= data.synthetic.size={size}, got {num_labels}"
        )
        return _MISSING
    return SyntheticSpec(size, dim, num_labels, float(het), float(noise))


def _data(c: _Checker, t: Mapping[str, Any]) -> DataSpec | Any:
    dataset: Any = _MISSING
    if "dataset" in t:
        dataset = c.value("dataset", t["dataset"], "data.dataset")
    else:
        c.fail("data.dataset", f"required; one of {', '.join(DATASET_NAMES)}")
    root: Any = t.get("root")
    if root is not None and not isinstance(root, str):
        c.fail("data.root", f"must be a string (a directory), got {type_name(root)}")
        root = _MISSING
    split = c.value("data_split", t.get("split", "train"), "data.split")
    if dataset == "digits" and split == "test":
        c.fail(
            "data.split", "digits has no test split; allowed: train, all (both = all 1797 images)"
        )
        split = _MISSING

    synthetic: Any = None
    if dataset == "synthetic":
        synthetic = _synthetic(c, t)
    elif "synthetic" in t:
        c.fail("data.synthetic", "only allowed when data.dataset = 'synthetic'")

    # Images per label available to the sampler (None when unknown because of earlier errors).
    available: tuple[int, ...] | None = None
    if dataset == "synthetic" and isinstance(synthetic, SyntheticSpec):
        available = synthetic.label_counts()
    elif _ok(dataset, split) and dataset != "synthetic":
        available = LABEL_COUNTS[(dataset, split)]
    total_labels = None if available is None else len(available)

    records = c.get(
        t, "records_per_client", "records_per_client", "data.records_per_client", default=1
    )

    ratios: Any = t.get("label_ratios")
    if ratios is not None:
        if not isinstance(ratios, list) or not ratios:
            c.fail("data.label_ratios", f"must be a non-empty array of numbers, got {ratios!r}")
            ratios = _MISSING
        else:
            checked = [
                c.value("label_ratio", r, f"data.label_ratios[{i}]") for i, r in enumerate(ratios)
            ]
            if not _ok(*checked):
                ratios = _MISSING
            elif sum(checked) <= 0:
                c.fail("data.label_ratios", f"must have a positive sum, got {ratios!r}")
                ratios = _MISSING
            else:
                ratios = tuple(checked)
    alpha: Any = t.get("dirichlet_alpha")
    if alpha is not None:
        alpha = c.value("dirichlet_alpha", alpha, "data.dirichlet_alpha")
    if ratios is not None and alpha is not None:
        c.fail(
            "data.dirichlet_alpha",
            "give either data.label_ratios or data.dirichlet_alpha, not both",
        )
        alpha = _MISSING

    num_labels = c.get(t, "num_labels", "num_labels", "data.num_labels", default=None)
    if (
        _ok(num_labels)
        and num_labels is not None
        and total_labels is not None
        and num_labels > total_labels
    ):
        c.fail(
            "data.num_labels", f"must be <= {total_labels} (labels of {dataset}), got {num_labels}"
        )
        num_labels = _MISSING
    if isinstance(ratios, tuple):
        if total_labels is not None and len(ratios) > total_labels:
            c.fail(
                "data.label_ratios",
                f"has {len(ratios)} entries but {dataset} has {total_labels} labels",
            )
            ratios = _MISSING
        elif isinstance(num_labels, int) and len(ratios) != num_labels:
            c.fail(
                "data.label_ratios",
                f"has {len(ratios)} entries but data.num_labels = {num_labels}; give one ratio "
                "per label used",
            )
            ratios = _MISSING

    # Number of clients.
    has_n, has_f = "num_clients" in t, "sample_fraction" in t
    num_clients: Any = _MISSING
    fraction: Any = None
    if has_n and has_f:
        c.fail(
            "data.sample_fraction", "give either data.num_clients or data.sample_fraction, not both"
        )
    elif not has_n and not has_f:
        c.fail("data.num_clients", "required (or data.sample_fraction, e.g. 0.02 as in the paper)")
    elif has_n:
        num_clients = c.get(t, "num_clients", "num_clients", "data.num_clients")
    else:
        fraction = c.value("sample_fraction", t["sample_fraction"], "data.sample_fraction")
        if _ok(fraction) and available is not None:
            num_clients = math.floor(fraction * sum(available) + 1e-9)
            if num_clients < 2:
                c.fail(
                    "data.sample_fraction",
                    f"gives {num_clients} clients ({fraction} x {sum(available)} images); "
                    "at least 2 are needed",
                )
                num_clients = _MISSING
        elif _ok(fraction):
            fraction = _MISSING  # the dataset is invalid; already reported

    # Sample larger than the data.
    key_n = "data.sample_fraction" if has_f and not has_n else "data.num_clients"
    if available is not None and _ok(num_clients, records, ratios, num_labels):
        _check_sample_size(
            c, key_n, dataset, split, available, num_clients, records, ratios, num_labels
        )

    if not _ok(
        dataset, root, split, records, ratios, alpha, num_labels, num_clients, fraction, synthetic
    ):
        return _MISSING
    return DataSpec(
        dataset=dataset,
        num_clients=num_clients,
        root=root,
        split=split,
        sample_fraction=None if fraction is None else float(fraction),
        records_per_client=records,
        label_ratios=ratios,
        dirichlet_alpha=None if alpha is None else float(alpha),
        num_labels=num_labels,
        synthetic=synthetic,
    )


def _check_sample_size(
    c: _Checker,
    key: str,
    dataset: str,
    split: str,
    available: tuple[int, ...],
    num_clients: int,
    records: int,
    ratios: tuple[float, ...] | None,
    num_labels: int | None,
) -> None:
    where = f"{dataset} ({split})" if dataset != "synthetic" else "the synthetic dataset"
    if ratios is not None:
        counts = largest_remainder(num_clients, ratios)
        for label, count in enumerate(counts):
            if count * records > available[label]:
                c.fail(
                    key,
                    f"sample larger than the data: label {label} needs {count * records} images "
                    f"({count} clients x {records} records, ratios {list(ratios)}) but {where} "
                    f"has {available[label]}",
                )
        return
    k = len(available) if num_labels is None else num_labels
    pool = sum(available[:k])
    if num_clients * records > pool:
        c.fail(
            key,
            f"sample larger than the data: {num_clients} clients x {records} records need "
            f"{num_clients * records} images but {where} has {pool} with labels 0..{k - 1}",
        )


# Where each setting of the declared rules lives in a scenario file, and its default.
_SA: Final = SecAggSpec()  # the [secagg] defaults
_SETTINGS: Final[dict[str, tuple[str, Any]]] = {
    "epsilon": ("privacy.epsilon", _MISSING),
    "delta": ("privacy.delta", _MISSING),
    "mechanism": ("privacy.mechanism", "agm"),
    "composition": ("privacy.composition", "gdp"),
    "profile": ("privacy.profile", "bounded"),
    "variance_floor": ("privacy.variance_floor", 0.01),
    "extra_i2_noise": ("privacy.extra_i2_noise", True),
    "min_honest_clients": ("privacy.min_honest_clients", None),
    "split": ("privacy.split", None),
    "statistics": ("privacy.statistics", None),
    "broadcast_bounds": ("privacy.broadcast_bounds", True),
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
    c: _Checker, tables: Mapping[str, Mapping[str, Any]], data: Any
) -> tuple[Any, Any, Any, Any]:
    """Check [privacy], [protocol], [secagg] and [experiment] with the declared rules."""
    values: dict[str, Any] = {}
    keys: dict[str, str] = {"num_clients": "data.num_clients"}
    for name, (key, default) in _SETTINGS.items():
        section, entry = key.split(".")
        keys[name] = key
        if entry in tables[section]:
            values[name] = tables[section][entry]
        elif default is _MISSING:
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

    privacy: Any = _MISSING
    names = ("epsilon", "delta", "mechanism", "composition", "profile", "variance_floor")
    levers = ("statistics", "broadcast_bounds")
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
        )
    protocol = ProtocolSpec(placements=grid("placement")) if ok("placement") else _MISSING
    secagg: Any = _MISSING
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
        )
    experiment: Any = _MISSING
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
        File not found (the message lists the shipped names), not valid TOML, or invalid.
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
