"""Scenario files: the dataset, clients, label skew, privacy budget, protocol and experiment.

A scenario is a TOML file (schema: ``scenarios/README.md``) loaded into frozen dataclasses and
validated **before any work starts**: unknown keys, wrong types and impossible values (label
ratios that do not match the label count, a sample larger than the data, ``epsilon <= 0``,
``delta`` outside (0, 1), an unknown mechanism, ...) are all collected and raised together as one
:class:`~fa_hetdp.errors.ScenarioError` whose lines name each key by its dotted path
(``privacy.delta``) and say what is allowed.

Sample sizes are checked against the number of images per label of the standard files
(:data:`fa_hetdp.data.datasets.LABEL_COUNTS`),
so a scenario for CIFAR-10 is validated without reading
CIFAR-10; the sampler checks again against the files actually read.

``load_scenario("quickstart")`` or ``load_scenario("paper/cifar10-skew10")`` resolves a bare
name against the shipped ``scenarios/`` directory; any other argument is a path.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, TypeVar, cast, get_args

from fa_hetdp._types import (
    COMPOSITIONS,
    MECHANISMS,
    PLACEMENTS,
    PROFILES,
    RELEASE_NAMES,
    Composition,
    Mechanism,
    Placement,
    Profile,
)
from fa_hetdp.data.datasets import DATASET_NAMES, LABEL_COUNTS, SPLITS, Split
from fa_hetdp.errors import ScenarioError

__all__ = [
    "RELEASE_NAMES",
    "SKEW_LEVELS",
    "Composition",
    "DataSpec",
    "DropoutStage",
    "ExperimentSpec",
    "GridPoint",
    "Mechanism",
    "Placement",
    "PrivacySpec",
    "Profile",
    "ProtocolSpec",
    "Scenario",
    "SecAggSpec",
    "SyntheticSpec",
    "available_scenarios",
    "default_scenario",
    "load_scenario",
    "scenario_from_dict",
    "scenarios_dir",
    "skew_scenario",
    "skew_scenario_name",
]

DropoutStage = Literal["stage1", "stage1-unmask", "stage2", "stage2-unmask"]
"""When dropped clients leave: before sending their masked input of summation 1 or 2
(``"stageK"``: their noise share is lost), or after sending it but before unmasking
(``"stageK-unmask"``: their masks must be recovered from the survivors' shares)."""

DROPOUT_STAGES: Final[tuple[str, ...]] = get_args(DropoutStage)

DEFAULT_SECAGG_THRESHOLD: Final[float] = 2.0 / 3.0

_T = TypeVar("_T")


# --------------------------------------------------------------------------------------------
# The dataclasses
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SyntheticSpec:
    """``[data.synthetic]``: parameters of :func:`fa_hetdp.data.datasets.synthetic_dataset`.

    Parameters
    ----------
    size : int
        Number of records generated (the pool the clients are sampled from).
    dim : int
        Dimension d.
    num_labels : int
        Number of labels (balanced).
    heterogeneity : float
        In [0, 1]: 0 = every label has the same distribution, 1 = independent label centres.
    noise_std : float
        Spread of records around their label's centre.
    """

    size: int
    dim: int
    num_labels: int = 10
    heterogeneity: float = 0.5
    noise_std: float = 0.1

    def label_counts(self) -> tuple[int, ...]:
        """Return the records per label (balanced, as the generator makes them)."""
        q, rem = divmod(self.size, self.num_labels)
        return tuple(q + (1 if k < rem else 0) for k in range(self.num_labels))


@dataclass(frozen=True)
class DataSpec:
    """``[data]``: where the clients' vectors come from and how they are sampled.

    Parameters
    ----------
    dataset : str
        ``"digits"``, ``"cifar10"``, ``"cifar100"``, ``"fashion-mnist"`` or ``"synthetic"``.
    root : str or None
        Data directory (torchvision's layout); None = ``$FA_HETDP_DATA`` or ``./data``.
    split : {"train", "test", "all"}
        Which files to sample from.
    num_clients : int
        Number of clients n (resolved from ``sample_fraction`` when that was given).
    sample_fraction : float or None
        As given: n = floor(sample_fraction x dataset size) (the paper: 0.02).
    records_per_client : int
        Records behind each client vector (their mean); 1 in the paper.
    label_ratios : tuple of float or None
        Label skew over labels 0 .. k-1 (e.g. 91:1:...:1).
    dirichlet_alpha : float or None
        Dirichlet(alpha) label mixtures instead of fixed ratios.
    num_labels : int or None
        Labels used (0 .. num_labels-1); equals ``len(label_ratios)`` when both are given.
    synthetic : SyntheticSpec or None
        Required when ``dataset = "synthetic"``.
    """

    dataset: str
    num_clients: int
    root: str | None = None
    split: Split = "train"
    sample_fraction: float | None = None
    records_per_client: int = 1
    label_ratios: tuple[float, ...] | None = None
    dirichlet_alpha: float | None = None
    num_labels: int | None = None
    synthetic: SyntheticSpec | None = None

    @property
    def partition(self) -> Literal["label-skew", "dirichlet", "uniform"]:
        """How clients are sampled: fixed label ratios, Dirichlet mixtures, or uniformly."""
        if self.label_ratios is not None:
            return "label-skew"
        if self.dirichlet_alpha is not None:
            return "dirichlet"
        return "uniform"


@dataclass(frozen=True)
class PrivacySpec:
    """``[privacy]``: the total budget of one private measurement and how it is spent.

    Parameters
    ----------
    epsilons : tuple of float
        The epsilon grid (one value or several); each run spends one of them in total.
    delta : float
        Total delta, in (0, 1).
    mechanisms : tuple of {"agm", "cgm"}
        Calibration(s) to run.
    composition : {"basic", "gdp"}
        Budget split by basic composition (the paper) or exact Gaussian-DP composition.
    profile : {"bounded", "paper"}
        Sensitivity profile (``"paper"`` is a labelled, non-DP baseline for the weighted stages).
    split : tuple of (str, float) pairs or None
        Relative budget weights per release (names from :data:`RELEASE_NAMES`); None = the
        protocol's default.
    variance_floor : float
        v_min in (0, 1/4]; weights are 1 / max(s_i^2, v_min).
    extra_i2_noise : bool
        Add the paper's third noise stage I^2''' (Thm 3.13).
    min_honest_clients : int or None
        t: each client adds N(0, sigma^2 / t); None = n.
    """

    epsilons: tuple[float, ...]
    delta: float
    mechanisms: tuple[Mechanism, ...] = ("agm",)
    composition: Composition = "basic"
    profile: Profile = "bounded"
    split: tuple[tuple[str, float], ...] | None = None
    variance_floor: float = 0.01
    extra_i2_noise: bool = True
    min_honest_clients: int | None = None

    def split_mapping(self) -> dict[str, float] | None:
        """Return the split as a dict (for ``ProtocolConfig(split=...)``), or None."""
        return None if self.split is None else dict(self.split)


@dataclass(frozen=True)
class ProtocolSpec:
    """``[protocol]``: where the noise is added.

    Parameters
    ----------
    placements : tuple of {"distributed", "central"}
        Noise added by the clients in shares (the paper) and/or by the server after unmasking.
    """

    placements: tuple[Placement, ...] = ("distributed",)


@dataclass(frozen=True)
class SecAggSpec:
    """``[secagg]``: secure-aggregation settings (used by the Flower apps).

    Parameters
    ----------
    threshold : float or int
        Shamir threshold: a float in (0, 1] is a fraction of n (rounded up), an int >= 2 a
        count.
    neighbours : "complete" or int
        Masking graph: every pair of clients, or a random k-regular graph (SecAgg+).
    dropout_fraction : float
        Fraction of clients that drop out, in [0, 1).
    dropout_stage : {"stage1", "stage1-unmask", "stage2", "stage2-unmask"}
        When they drop out (see :data:`DropoutStage`).
    """

    threshold: float | int = DEFAULT_SECAGG_THRESHOLD
    neighbours: Literal["complete"] | int = "complete"
    dropout_fraction: float = 0.0
    dropout_stage: DropoutStage = "stage1"

    def threshold_count(self, num_clients: int) -> int:
        """Return the threshold as a count for ``num_clients`` clients (at least 2)."""
        if isinstance(self.threshold, int):
            return self.threshold
        return max(2, math.ceil(self.threshold * num_clients - 1e-9))

    def num_dropouts(self, num_clients: int) -> int:
        """Return the number of clients that drop out: floor(dropout_fraction x n)."""
        return math.floor(self.dropout_fraction * num_clients + 1e-9)


@dataclass(frozen=True)
class ExperimentSpec:
    """``[experiment]``: Monte-Carlo repeats and the seed of everything random.

    Parameters
    ----------
    repeats : int
        Private measurements per grid point (>= 1).
    seed : int
        Seed (>= 0) of the partition, a synthetic dataset and the noise.
    """

    repeats: int = 100
    seed: int = 0


@dataclass(frozen=True)
class GridPoint:
    """One point of a scenario's grid: epsilon x mechanism x placement."""

    epsilon: float
    mechanism: Mechanism
    placement: Placement


@dataclass(frozen=True)
class Scenario:
    """A validated scenario (hashable; every field immutable).

    Parameters
    ----------
    name : str
        ``[scenario] name``; default: the file's stem.
    description : str
        Free text.
    data, privacy, protocol, secagg, experiment
        The sections.
    path : str or None
        The file it was loaded from.
    """

    name: str
    description: str
    data: DataSpec
    privacy: PrivacySpec
    protocol: ProtocolSpec
    secagg: SecAggSpec
    experiment: ExperimentSpec
    path: str | None = None

    @property
    def num_clients(self) -> int:
        """Number of clients n."""
        return self.data.num_clients

    def grid(self) -> tuple[GridPoint, ...]:
        """Return every (epsilon, mechanism, placement) combination, epsilon varying slowest."""
        return tuple(
            GridPoint(epsilon=e, mechanism=m, placement=p)
            for e in self.privacy.epsilons
            for m in self.privacy.mechanisms
            for p in self.protocol.placements
        )

    def clients_per_label(self) -> tuple[int, ...] | None:
        """Clients per label under label skew (largest remainder), else None."""
        if self.data.label_ratios is None:
            return None
        return _largest_remainder(self.num_clients, self.data.label_ratios)

    def to_dict(self) -> dict[str, Any]:
        """Return the scenario as plain data (JSON/TOML-able), for results files.

        The sections are in the file's schema, so ``scenario_from_dict(s.to_dict())`` gives
        back an equal scenario; the ``derived`` table (resolved client count, clients per
        label, source path) is informative and ignored on load.
        """
        d = self.data
        data: dict[str, Any] = {"dataset": d.dataset, "split": d.split}
        if d.root is not None:
            data["root"] = d.root
        if d.sample_fraction is not None:
            data["sample_fraction"] = d.sample_fraction
        else:
            data["num_clients"] = d.num_clients
        data["records_per_client"] = d.records_per_client
        if d.label_ratios is not None:
            data["label_ratios"] = list(d.label_ratios)
        if d.dirichlet_alpha is not None:
            data["dirichlet_alpha"] = d.dirichlet_alpha
        if d.num_labels is not None:
            data["num_labels"] = d.num_labels
        if d.synthetic is not None:
            s = d.synthetic
            data["synthetic"] = {
                "size": s.size,
                "dim": s.dim,
                "num_labels": s.num_labels,
                "heterogeneity": s.heterogeneity,
                "noise_std": s.noise_std,
            }
        per_label = self.clients_per_label()
        p = self.privacy
        privacy: dict[str, Any] = {
            "epsilon": list(p.epsilons),
            "delta": p.delta,
            "mechanism": list(p.mechanisms),
            "composition": p.composition,
            "profile": p.profile,
            "variance_floor": p.variance_floor,
            "extra_i2_noise": p.extra_i2_noise,
        }
        if p.min_honest_clients is not None:
            privacy["min_honest_clients"] = p.min_honest_clients
        if p.split is not None:
            privacy["split"] = dict(p.split)
        return {
            "scenario": {"name": self.name, "description": self.description},
            "data": data,
            "privacy": privacy,
            "protocol": {"placement": list(self.protocol.placements)},
            "secagg": {
                "threshold": self.secagg.threshold,
                "neighbours": self.secagg.neighbours,
                "dropout_fraction": self.secagg.dropout_fraction,
                "dropout_stage": self.secagg.dropout_stage,
            },
            "experiment": {"repeats": self.experiment.repeats, "seed": self.experiment.seed},
            "derived": {
                "num_clients": self.num_clients,
                "clients_per_label": None if per_label is None else list(per_label),
                "secagg_threshold_count": self.secagg.threshold_count(self.num_clients),
                "path": self.path,
            },
        }


def _largest_remainder(n: int, ratios: Sequence[float]) -> tuple[int, ...]:
    """Largest-remainder apportionment (as ``fa_hetdp.data.partition.clients_per_label``)."""
    total = float(sum(ratios))
    quotas = [n * r / total for r in ratios]
    counts = [math.floor(q) for q in quotas]
    left = n - sum(counts)
    order = sorted(range(len(ratios)), key=lambda j: (-(quotas[j] - counts[j]), j))
    for j in order[:left]:
        counts[j] += 1
    return tuple(counts)


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------

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
        }
    ),
    "protocol": frozenset({"placement"}),
    "secagg": frozenset({"threshold", "neighbours", "dropout_fraction", "dropout_stage"}),
    "experiment": frozenset({"repeats", "seed"}),
}
_IGNORED_SECTIONS: Final[frozenset[str]] = frozenset({"derived"})  # written by to_dict()
_SYNTHETIC_KEYS: Final[frozenset[str]] = frozenset(
    {"size", "dim", "num_labels", "heterogeneity", "noise_std"}
)


def _type_name(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "table"
    return type(value).__name__


class _Checker:
    """Collects every problem of a scenario so they are reported together."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def fail(self, key: str, message: str) -> None:
        self.errors.append(f"{key}: {message}")

    def table(self, raw: Mapping[str, Any], key: str, allowed: frozenset[str]) -> dict[str, Any]:
        value = raw.get(key.rsplit(".", 1)[-1], {})
        if not isinstance(value, dict):
            self.fail(key, f"must be a table, got {_type_name(value)}")
            return {}
        for unknown in sorted(set(value) - allowed):
            self.fail(
                f"{key}.{unknown}",
                f"unknown key; allowed in [{key}]: {', '.join(sorted(allowed)) or '(none)'}",
            )
        return value

    def integer(
        self,
        table: Mapping[str, Any],
        name: str,
        key: str,
        *,
        minimum: int | None = None,
        maximum: int | None = None,
        default: Any = _MISSING,
    ) -> Any:
        value = table.get(name, default)
        if value is _MISSING or value is None or value is default:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(key, f"must be an integer, got {_type_name(value)} {value!r}")
            return _MISSING
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            lo = "" if minimum is None else f">= {minimum}"
            hi = "" if maximum is None else f"<= {maximum}"
            self.fail(key, f"must be {' and '.join(s for s in (lo, hi) if s)}, got {value}")
            return _MISSING
        return value

    def number(
        self,
        value: Any,
        key: str,
        *,
        low: float | None = None,
        high: float | None = None,
        low_open: bool = False,
        high_open: bool = False,
    ) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(key, f"must be a number, got {_type_name(value)} {value!r}")
            return _MISSING
        if not math.isfinite(value):
            self.fail(key, f"must be finite, got {value}")
            return _MISSING
        bad_low = low is not None and (value <= low if low_open else value < low)
        bad_high = high is not None and (value >= high if high_open else value > high)
        if bad_low or bad_high:
            if low is not None and high is not None:
                allowed = f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
            elif low is not None:
                allowed = f"{'>' if low_open else '>='} {low}"
            else:
                allowed = f"{'<' if high_open else '<='} {high}"
            self.fail(key, f"must be {allowed}, got {value}")
            return _MISSING
        return value

    def choice(self, value: Any, key: str, choices: Sequence[str]) -> Any:
        if not isinstance(value, str):
            self.fail(key, f"must be a string, one of {', '.join(choices)}; got {value!r}")
            return _MISSING
        if value not in choices:
            self.fail(key, f"unknown value {value!r}; allowed: {', '.join(choices)}")
            return _MISSING
        return value

    def one_or_list(
        self, value: Any, key: str, check: Callable[[Any, str], Any]
    ) -> tuple[Any, ...] | Any:
        items = value if isinstance(value, list) else [value]
        if not items:
            self.fail(key, "must not be an empty list")
            return _MISSING
        checked = [
            check(item, f"{key}[{i}]" if isinstance(value, list) else key)
            for i, item in enumerate(items)
        ]
        if any(c is _MISSING for c in checked):
            return _MISSING
        if len(set(checked)) != len(checked):
            self.fail(key, f"has repeated values {value!r}")
            return _MISSING
        return tuple(checked)


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
        raise ScenarioError(f"a scenario must be a table of tables, got {_type_name(raw)}")
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
        c.fail("scenario.description", f"must be a string, got {_type_name(description)}")

    experiment = _experiment(c, tables["experiment"])
    data = _data(c, tables["data"])
    privacy = _privacy(c, tables["privacy"], data)
    protocol = _protocol(c, tables["protocol"])
    secagg = _secagg(c, tables["secagg"], data)

    if c.errors:
        where = f"scenario {path}" if path else f"scenario {scen_name!r}"
        raise ScenarioError(
            f"{where} is invalid ({len(c.errors)} problem{'s' if len(c.errors) > 1 else ''}):\n  "
            + "\n  ".join(c.errors)
        )
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


def _experiment(c: _Checker, t: Mapping[str, Any]) -> ExperimentSpec | Any:
    repeats = c.integer(t, "repeats", "experiment.repeats", minimum=1, default=100)
    seed = c.integer(t, "seed", "experiment.seed", minimum=0, default=0)
    if not _ok(repeats, seed):
        return _MISSING
    return ExperimentSpec(repeats=repeats, seed=seed)


def _synthetic(c: _Checker, data: Mapping[str, Any]) -> SyntheticSpec | Any:
    t = c.table(data, "data.synthetic", _SYNTHETIC_KEYS)
    for key in ("size", "dim"):
        if key not in t:
            c.fail(f"data.synthetic.{key}", "required when data.dataset = 'synthetic'")
    size = c.integer(t, "size", "data.synthetic.size", minimum=1)
    dim = c.integer(t, "dim", "data.synthetic.dim", minimum=1)
    num_labels = c.integer(t, "num_labels", "data.synthetic.num_labels", minimum=1, default=10)
    het = t.get("heterogeneity", 0.5)
    het = c.number(het, "data.synthetic.heterogeneity", low=0.0, high=1.0)
    noise = c.number(t.get("noise_std", 0.1), "data.synthetic.noise_std", low=0.0)
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
        dataset = c.choice(t["dataset"], "data.dataset", DATASET_NAMES)
    else:
        c.fail("data.dataset", f"required; one of {', '.join(DATASET_NAMES)}")
    root: Any = t.get("root")
    if root is not None and not isinstance(root, str):
        c.fail("data.root", f"must be a string (a directory), got {_type_name(root)}")
        root = _MISSING
    split = c.choice(t.get("split", "train"), "data.split", SPLITS)
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

    records = c.integer(t, "records_per_client", "data.records_per_client", minimum=1, default=1)

    ratios: Any = t.get("label_ratios")
    if ratios is not None:
        if not isinstance(ratios, list) or not ratios:
            c.fail("data.label_ratios", f"must be a non-empty array of numbers, got {ratios!r}")
            ratios = _MISSING
        else:
            checked = [
                c.number(r, f"data.label_ratios[{i}]", low=0.0) for i, r in enumerate(ratios)
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
        alpha = c.number(alpha, "data.dirichlet_alpha", low=0.0, low_open=True)
    if ratios is not None and alpha is not None:
        c.fail(
            "data.dirichlet_alpha",
            "give either data.label_ratios or data.dirichlet_alpha, not both",
        )
        alpha = _MISSING

    num_labels = c.integer(t, "num_labels", "data.num_labels", minimum=1, default=None)
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
        num_clients = c.integer(t, "num_clients", "data.num_clients", minimum=2)
    else:
        fraction = c.number(
            t["sample_fraction"], "data.sample_fraction", low=0.0, high=1.0, low_open=True
        )
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
        counts = _largest_remainder(num_clients, ratios)
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


def _privacy(c: _Checker, t: Mapping[str, Any], data: Any) -> PrivacySpec | Any:
    def eps_check(v: Any, key: str) -> Any:
        value = c.number(v, key, low=0.0, low_open=True)
        return value if value is _MISSING else float(value)

    if "epsilon" not in t:
        c.fail("privacy.epsilon", "required: a number > 0 or an array of them (the grid)")
        epsilons: Any = _MISSING
    else:
        epsilons = c.one_or_list(t["epsilon"], "privacy.epsilon", eps_check)
    if "delta" not in t:
        c.fail("privacy.delta", "required: a number in (0, 1), e.g. 1e-5")
        delta: Any = _MISSING
    else:
        delta = c.number(
            t["delta"], "privacy.delta", low=0.0, high=1.0, low_open=True, high_open=True
        )
    mechanisms = c.one_or_list(
        t.get("mechanism", "agm"), "privacy.mechanism", lambda v, k: c.choice(v, k, MECHANISMS)
    )
    composition = c.choice(t.get("composition", "basic"), "privacy.composition", COMPOSITIONS)
    profile = c.choice(t.get("profile", "bounded"), "privacy.profile", PROFILES)
    floor = c.number(
        t.get("variance_floor", 0.01), "privacy.variance_floor", low=0.0, high=0.25, low_open=True
    )
    extra = t.get("extra_i2_noise", True)
    if not isinstance(extra, bool):
        c.fail("privacy.extra_i2_noise", f"must be true or false, got {extra!r}")
        extra = _MISSING
    n = data.num_clients if isinstance(data, DataSpec) else None
    honest = c.integer(
        t, "min_honest_clients", "privacy.min_honest_clients", minimum=1, maximum=n, default=None
    )
    if isinstance(mechanisms, tuple) and "cgm" in mechanisms and composition == "gdp":
        c.fail(
            "privacy.composition",
            "'gdp' composes Gaussian mechanisms exactly and needs mechanism 'agm' only; "
            "use 'basic' with 'cgm'",
        )
    split: Any = t.get("split")
    if split is not None:
        if not isinstance(split, dict):
            c.fail("privacy.split", f"must be a table of weights, got {_type_name(split)}")
            split = _MISSING
        else:
            pairs = []
            for key in sorted(split):
                if key not in RELEASE_NAMES:
                    c.fail(
                        f"privacy.split.{key}",
                        f"unknown release; allowed: {', '.join(RELEASE_NAMES)}",
                    )
                    continue
                w = c.number(split[key], f"privacy.split.{key}", low=0.0, low_open=True)
                if w is not _MISSING:
                    pairs.append((key, float(w)))
            if "i2_extra" in split and extra is False:
                c.fail("privacy.split.i2_extra", "given but privacy.extra_i2_noise = false")
            split = tuple(pairs) if len(pairs) == len(split) else _MISSING
    if not _ok(epsilons, delta, mechanisms, composition, profile, floor, extra, honest, split):
        return _MISSING
    return PrivacySpec(
        epsilons=epsilons,
        delta=float(delta),
        mechanisms=mechanisms,
        composition=composition,
        profile=profile,
        split=split,
        variance_floor=float(floor),
        extra_i2_noise=extra,
        min_honest_clients=honest,
    )


def _protocol(c: _Checker, t: Mapping[str, Any]) -> ProtocolSpec | Any:
    placements = c.one_or_list(
        t.get("placement", "distributed"),
        "protocol.placement",
        lambda v, k: c.choice(v, k, PLACEMENTS),
    )
    if not _ok(placements):
        return _MISSING
    return ProtocolSpec(placements=placements)


def _secagg(c: _Checker, t: Mapping[str, Any], data: Any) -> SecAggSpec | Any:
    n = data.num_clients if isinstance(data, DataSpec) else None
    threshold: Any = t.get("threshold", DEFAULT_SECAGG_THRESHOLD)
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        c.fail(
            "secagg.threshold", f"must be a fraction in (0, 1] or a count >= 2, got {threshold!r}"
        )
        threshold = _MISSING
    elif isinstance(threshold, int):
        if threshold < 2 or (n is not None and threshold > n):
            c.fail(
                "secagg.threshold",
                f"an integer is a count of clients and must be in 2..{n if n else 'n'}, got "
                f"{threshold} (write a float such as 1.0 or 0.5 for a fraction of n)",
            )
            threshold = _MISSING
    else:
        threshold = c.number(threshold, "secagg.threshold", low=0.0, high=1.0, low_open=True)
    neighbours: Any = t.get("neighbours", "complete")
    if isinstance(neighbours, str):
        if neighbours != "complete":
            c.fail(
                "secagg.neighbours", f"must be 'complete' or an integer k >= 2, got {neighbours!r}"
            )
            neighbours = _MISSING
    else:
        neighbours = c.integer(
            t, "neighbours", "secagg.neighbours", minimum=2, maximum=None if n is None else n - 1
        )
    dropout = c.number(
        t.get("dropout_fraction", 0.0), "secagg.dropout_fraction", low=0.0, high=1.0, high_open=True
    )
    stage = c.choice(t.get("dropout_stage", "stage1"), "secagg.dropout_stage", DROPOUT_STAGES)
    if not _ok(threshold, neighbours, dropout, stage):
        return _MISSING
    return SecAggSpec(
        threshold=threshold,
        neighbours=neighbours,
        dropout_fraction=float(dropout),
        dropout_stage=stage,
    )


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


SKEW_LEVELS: Final[dict[str, tuple[int, ...]]] = {
    "iid10": (1,) * 10,
    "skew10": (91,) + (1,) * 9,
    "iid5": (1,) * 5,
    "skew5": (96, 1, 1, 1, 1),
    "iid2": (1, 1),
    "skew2": (99, 1),
}
"""The paper's six label-skew levels (section 4.2), by the names the shipped files use."""


def skew_scenario_name(dataset: str, level: str) -> str:
    """Return the shipped scenario name of one of the six skew levels on ``dataset``.

    ``paper/<dataset>-<level>`` for cifar10, cifar100 and fashion-mnist, ``digits/digits-<level>``
    for digits; ``level`` is a key of :data:`SKEW_LEVELS`.

    Raises
    ------
    ScenarioError
        Unknown dataset or level.
    """
    if level not in SKEW_LEVELS:
        raise ScenarioError(f"unknown skew level {level!r}; allowed: {', '.join(SKEW_LEVELS)}")
    if dataset == "digits":
        return f"digits/digits-{level}"
    if dataset in ("cifar10", "cifar100", "fashion-mnist"):
        return f"paper/{dataset}-{level}"
    raise ScenarioError(
        f"no shipped skew scenarios for dataset {dataset!r}; allowed: digits, cifar10, cifar100, "
        "fashion-mnist"
    )


def skew_scenario(dataset: str, level: str) -> Scenario:
    """Load the shipped scenario of skew ``level`` (e.g. ``"skew10"``) on ``dataset``."""
    return load_scenario(skew_scenario_name(dataset, level))


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
