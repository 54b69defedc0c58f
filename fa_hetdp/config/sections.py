"""The ``[data]`` section of a scenario file, and the checker that collects every problem.

Split out of :mod:`fa_hetdp.config.scenario`, which maps the other sections onto the declared
rules of :mod:`fa_hetdp.config.rules`. The data section has checks that only it needs: label
ratios against the label count, the sample against the data (the images per label of the
standard files, :data:`fa_hetdp.data.catalog.LABEL_COUNTS`), and the client summary
(``summary``, ``pool_block``: see ``docs/summaries.md``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from fa_hetdp.config.rules import Problem, check_value, type_name, validate
from fa_hetdp.config.schema import DataSpec, SyntheticSpec, largest_remainder
from fa_hetdp.config.sites import check_sites
from fa_hetdp.data.catalog import DATASET_NAMES, LABEL_COUNTS, dataset_info
from fa_hetdp.data.partitioners import (
    DEFAULT_MIN_PARTITION_SIZE,
    PartitionerSpec,
    flwr_datasets_missing,
)
from fa_hetdp.data.tables import check_schema

__all__ = ["DATA_KEYS", "MISSING", "Checker", "check_data", "is_ok"]

MISSING: Final[Any] = object()
"""Stands for a value that is absent or failed its check (so nothing is built from it)."""

PARTITIONER_KEYS: Final[dict[str, tuple[str, ...]]] = {
    "alpha": ("dirichlet", "inner_dirichlet"),
    "min_partition_size": ("dirichlet",),
    "self_balancing": ("dirichlet",),
    "num_classes_per_partition": ("pathological",),
    "class_assignment_mode": ("pathological",),
    "num_shards_per_partition": ("shard",),
    "shard_size": ("shard",),
    "keep_incomplete_shard": ("shard",),
    "partition_sizes": ("inner_dirichlet",),
}
"""The parameters of the flwr-datasets partitioners (``[data]`` keys) and which take each."""

DATA_KEYS: Final[frozenset[str]] = frozenset(
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
        "summary",
        "pool_block",
        "partitioner",
        "columns",
        "bounds",
        "sites",
        "arm",
        "effect",
        "units",
        *PARTITIONER_KEYS,
    }
)
"""The keys allowed in ``[data]``."""


_SYNTHETIC_KEYS: Final[frozenset[str]] = frozenset(
    {"size", "dim", "num_labels", "heterogeneity", "noise_std"}
)


class Checker:
    """Collects every problem of a scenario so they are reported together."""

    def __init__(self) -> None:
        self.errors: list[Problem] = []

    def fail(self, key: str, message: str) -> None:
        """Record one problem under ``key``."""
        self.errors.append((key, message))

    def table(self, raw: Mapping[str, Any], key: str, allowed: frozenset[str]) -> dict[str, Any]:
        """Return the table ``key`` of ``raw`` ({} when absent); report unknown keys."""
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
        """Check ``value`` against the declared rule of ``field``; MISSING if it fails."""
        message = check_value(field, value)
        if message is not None:
            self.fail(key, message)
            return MISSING
        return value

    def value_of(self, constraint: Any, value: Any, key: str) -> Any:
        """Check ``value`` against ``constraint`` (not a declared setting); MISSING if it fails."""
        message = constraint.check(value)
        if message is not None:
            self.fail(key, message)
            return MISSING
        return value

    def get(
        self, table: Mapping[str, Any], name: str, field: str, key: str, default: Any = MISSING
    ) -> Any:
        """Check ``table[name]`` (``default`` when absent, unchecked if None/MISSING)."""
        if name not in table:
            return default
        return self.value(field, table[name], key)

    def choice(self, value: Any, key: str, choices: tuple[str, ...]) -> Any:
        """Return ``value`` if it is one of ``choices``, else report it and return MISSING."""
        if not isinstance(value, str) or value not in choices:
            allowed = ", ".join(choices)
            shown = f"unknown value {value!r}" if isinstance(value, str) else f"got {value!r}"
            self.fail(key, f"{shown}; allowed: {allowed}")
            return MISSING
        return value


def is_ok(*values: Any) -> bool:
    """Whether none of ``values`` is :data:`MISSING`."""
    return all(v is not MISSING for v in values)


def _synthetic(c: Checker, data: Mapping[str, Any]) -> SyntheticSpec | Any:
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
    if not is_ok(size, dim, num_labels, het, noise):
        return MISSING
    if num_labels > size:
        c.fail(
            "data.synthetic.num_labels", f"must be <= data.synthetic.size={size}, got {num_labels}"
        )
        return MISSING
    return SyntheticSpec(size, dim, num_labels, float(het), float(noise))


def check_data(c: Checker, t: Mapping[str, Any], *, base: Path | None = None) -> DataSpec | Any:
    """Check the ``[data]`` table ``t``: its :class:`DataSpec`, or MISSING (problems in ``c``).

    ``base``: the scenario file's folder, which relative ``sites`` paths start from.
    """
    if "sites" in t:  # the user's own files, one client each (fa_hetdp.config.sites)
        named, pairs = _columns(c, t)
        names = _units(c, t, named)
        arm, effect = _two_arm(c, t, named, pairs)  # a two-arm trial: the files' arm column
        spec = check_sites(
            c.fail,
            {k: v for k, v in t.items() if k != "units"},  # words only: checked here
            base=base,
            columns=None if named is MISSING or arm is MISSING or effect is MISSING else named,
            bounds=() if pairs is MISSING else pairs,
            known=DATA_KEYS,
            arm=arm if isinstance(arm, str) else None,
            effect=effect if isinstance(effect, str) else "mean",
        )
        if spec is None or names is MISSING:
            return MISSING
        return dataclasses.replace(spec, units=names)
    if "dataset" not in t and "columns" in t:  # every node reads its own file (data-path)
        return _node_files(c, t)
    dataset: Any = MISSING
    if "dataset" in t:
        dataset = c.value("dataset", t["dataset"], "data.dataset")
    else:
        c.fail(
            "data.dataset",
            f"required; one of {', '.join(DATASET_NAMES)} (or leave it out and state "
            "data.columns: a deployment whose nodes read their own files, node config "
            "data-path; or data.sites: a simulation of your own files)",
        )
    root: Any = t.get("root")
    if root is not None and not isinstance(root, str):
        c.fail("data.root", f"must be a string (a directory), got {type_name(root)}")
        root = MISSING
    split = c.value("data_split", t.get("split", "train"), "data.split")
    if dataset == "digits" and split == "test":
        c.fail(
            "data.split", "digits has no test split; allowed: train, all (both = all 1797 images)"
        )
        split = MISSING

    synthetic: Any = None
    if dataset == "synthetic":
        synthetic = _synthetic(c, t)
    elif "synthetic" in t:
        c.fail("data.synthetic", "only allowed when data.dataset = 'synthetic'")

    # Images per label available to the sampler (None when unknown because of earlier errors).
    available: tuple[int, ...] | None = None
    if dataset == "synthetic" and isinstance(synthetic, SyntheticSpec):
        available = synthetic.label_counts()
    elif is_ok(dataset, split) and dataset != "synthetic":
        available = LABEL_COUNTS[(dataset, split)]
    total_labels = None if available is None else len(available)

    records = c.get(
        t, "records_per_client", "records_per_client", "data.records_per_client", default=1
    )

    ratios: Any = t.get("label_ratios")
    if ratios is not None:
        if not isinstance(ratios, list) or not ratios:
            c.fail("data.label_ratios", f"must be a non-empty array of numbers, got {ratios!r}")
            ratios = MISSING
        else:
            checked = [
                c.value("label_ratio", r, f"data.label_ratios[{i}]") for i, r in enumerate(ratios)
            ]
            if not is_ok(*checked):
                ratios = MISSING
            elif sum(checked) <= 0:
                c.fail("data.label_ratios", f"must have a positive sum, got {ratios!r}")
                ratios = MISSING
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
        alpha = MISSING

    num_labels = c.get(t, "num_labels", "num_labels", "data.num_labels", default=None)
    if (
        is_ok(num_labels)
        and num_labels is not None
        and total_labels is not None
        and num_labels > total_labels
    ):
        c.fail(
            "data.num_labels", f"must be <= {total_labels} (labels of {dataset}), got {num_labels}"
        )
        num_labels = MISSING
    if isinstance(ratios, tuple):
        if total_labels is not None and len(ratios) > total_labels:
            c.fail(
                "data.label_ratios",
                f"has {len(ratios)} entries but {dataset} has {total_labels} labels",
            )
            ratios = MISSING
        elif isinstance(num_labels, int) and len(ratios) != num_labels:
            c.fail(
                "data.label_ratios",
                f"has {len(ratios)} entries but data.num_labels = {num_labels}; give one ratio "
                "per label used",
            )
            ratios = MISSING

    # Number of clients.
    has_n, has_f = "num_clients" in t, "sample_fraction" in t
    num_clients: Any = MISSING
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
        if is_ok(fraction) and available is not None:
            num_clients = math.floor(fraction * sum(available) + 1e-9)
            if num_clients < 2:
                c.fail(
                    "data.sample_fraction",
                    f"gives {num_clients} clients ({fraction} x {sum(available)} images); "
                    "at least 2 are needed",
                )
                num_clients = MISSING
        elif is_ok(fraction):
            fraction = MISSING  # the dataset is invalid; already reported

    partitioner = _partitioner(c, t)
    if partitioner is not None:
        if is_ok(partitioner) and (ratios is not None or alpha is not None):
            other = "data.label_ratios" if ratios is not None else "data.dirichlet_alpha"
            c.fail("data.partitioner", f"give either data.partitioner or {other}, not both")
            partitioner = MISSING
        if "records_per_client" in t:
            c.fail(
                "data.records_per_client",
                "not with data.partitioner: the partitioner decides how many records each "
                "client holds",
            )
            records = MISSING
        elif records is not MISSING:
            records = 1
        if is_ok(partitioner, num_clients, num_labels) and available is not None:
            k = len(available) if num_labels is None else num_labels
            _check_partitioner_fits(c, partitioner, num_clients, k, sum(available[:k]))

    # Sample larger than the data.
    key_n = "data.sample_fraction" if has_f and not has_n else "data.num_clients"
    if (
        partitioner is None
        and available is not None
        and is_ok(num_clients, records, ratios, num_labels)
    ):
        _check_sample_size(
            c, key_n, dataset, split, available, num_clients, records, ratios, num_labels
        )

    summary, pool_block = _summary(c, t, dataset, synthetic)
    columns, bounds = _columns(c, t)
    arm, effect = _two_arm(c, t, columns, bounds)
    names = _units(c, t, columns)
    if not is_ok(
        dataset, root, split, records, ratios, alpha, num_labels, num_clients, fraction, synthetic
    ) or not is_ok(summary, pool_block, partitioner, columns, bounds, arm, effect, names):
        return MISSING
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
        summary=summary,
        pool_block=pool_block,
        partitioner=partitioner,
        columns=columns,
        bounds=bounds,
        arm=arm,
        effect=effect,
        units=names,
    )


NODE_FILE_KEYS: Final[frozenset[str]] = frozenset(
    {"columns", "bounds", "units", "arm", "effect", "num_clients", "records_per_client", "summary"}
)
"""The ``[data]`` keys allowed without ``dataset`` (and ``sites``): the nodes' own files."""


def _node_files(c: Checker, t: Mapping[str, Any]) -> DataSpec | Any:
    """Check a ``[data]`` table with ``columns`` and no ``dataset``: each node's own file.

    A deployment whose every SuperNode reads its own file (node config ``data-path``) by the
    run's ``columns`` (``bounds``, ``units``; ``arm`` and ``effect`` for two arms): n is
    ``num_clients`` (required), d = ``len(columns)``; the keys that describe a dataset's
    sample are refused. :attr:`DataSpec.dataset` is None.
    """
    ok = True
    for key in sorted((set(t) & DATA_KEYS) - NODE_FILE_KEYS):
        why = (
            "a fraction of a dataset's records; state data.num_clients instead"
            if key == "sample_fraction"
            else "it describes the dataset the clients are sampled from"
        )
        c.fail(
            f"data.{key}",
            f"needs data.dataset ({why}); without one each node reads its own file (allowed "
            f"without data.dataset: {', '.join(sorted(NODE_FILE_KEYS))})",
        )
        ok = False
    num_clients: Any = MISSING
    if "num_clients" in t:
        num_clients = c.get(t, "num_clients", "num_clients", "data.num_clients")
    elif "sample_fraction" not in t:  # reported above
        c.fail(
            "data.num_clients",
            "required without data.dataset: the number of nodes, each reading its own file "
            "(node config data-path)",
        )
    records = c.get(
        t, "records_per_client", "records_per_client", "data.records_per_client", default=1
    )
    if t.get("summary", "mean") != "mean":
        c.fail(
            "data.summary",
            f"without data.dataset only 'mean' (the nodes' files have no labels or images), "
            f"got {t['summary']!r}",
        )
        ok = False
    columns, bounds = _columns(c, t)
    arm, effect = _two_arm(c, t, columns, bounds)
    names = _units(c, t, columns)
    if not ok or not is_ok(num_clients, records, columns, bounds, arm, effect, names):
        return MISSING
    return DataSpec(
        dataset=None,
        num_clients=num_clients,
        records_per_client=records,
        columns=columns,
        bounds=bounds,
        arm=arm,
        effect=effect,
        units=names,
    )


def _columns(c: Checker, t: Mapping[str, Any]) -> tuple[Any, Any]:
    """Check ``columns`` and ``bounds`` (a data owner's named columns and their public ranges)."""
    if "columns" not in t:
        if "bounds" in t:
            c.fail("data.bounds", "needs data.columns (the columns the bounds are for)")
            return MISSING, MISSING
        return None, ()
    bounds = t.get("bounds")
    problems = check_schema(t["columns"], bounds)
    for key, message in problems:
        c.fail(f"data.{key}", message)
    if problems:
        return MISSING, MISSING
    columns = tuple(t["columns"])
    given = bounds or {}
    pairs = tuple(
        (name, (float(given[name][0]), float(given[name][1]))) for name in columns if name in given
    )
    return columns, pairs


def _units(c: Checker, t: Mapping[str, Any], columns: Any) -> Any:
    """Check ``units`` (the names of some columns' units: words shown beside them)."""
    if "units" not in t:
        return ()
    raw = t["units"]
    if "columns" not in t:
        c.fail("data.units", "needs data.columns (the columns the units are named for)")
        return MISSING
    if not isinstance(raw, Mapping):
        c.fail(
            "data.units",
            f'must be a table {{column = "units"}} (e.g. {{dep_delay = "minutes"}}), got '
            f"{type_name(raw)}",
        )
        return MISSING
    ok = True
    for key, value in raw.items():
        if isinstance(columns, tuple) and key not in columns:
            c.fail(f"data.units.{key}", f"not one of data.columns ({', '.join(columns)})")
            ok = False
        elif not isinstance(value, str) or not value.strip():
            shown = type_name(value) if not isinstance(value, str) else repr(value)
            c.fail(
                f"data.units.{key}",
                f'must be a non-empty string (the column\'s units, e.g. "minutes"), got {shown}',
            )
            ok = False
    if not ok or not isinstance(columns, tuple):
        return MISSING
    return tuple((name, str(raw[name]).strip()) for name in columns if name in raw)


TWO_ARM_EFFECTS: Final[tuple[str, ...]] = ("MD", "SMD", "OR", "RR", "RD")
"""``[data] effect`` with ``arm``: :data:`fa_hetdp.protocol.two_arm.EFFECTS` but ``"mean"``."""
_BINARY_EFFECTS: Final = frozenset({"OR", "RR", "RD"})


def _two_arm(c: Checker, t: Mapping[str, Any], columns: Any, bounds: Any) -> tuple[Any, Any]:
    """Check ``arm`` and ``effect`` (two-arm effects of the named columns, by treatment arm)."""
    arm, raw = t.get("arm"), t.get("effect", "mean")
    effect: Any = raw.upper() if isinstance(raw, str) and raw.lower() != "mean" else raw
    if isinstance(raw, str) and raw.lower() == "mean":
        effect = "mean"
    allowed = ", ".join(repr(e) for e in ("mean", *TWO_ARM_EFFECTS))
    if effect != "mean" and effect not in TWO_ARM_EFFECTS:
        c.fail("data.effect", f"unknown effect {raw!r}; allowed: {allowed}")
        effect = MISSING
    if arm is None:
        if effect not in ("mean", MISSING):
            c.fail(
                "data.effect",
                f"effect = {effect!r} compares two arms: name the 0/1 treatment-indicator column "
                "with data.arm",
            )
            return None, MISSING
        return None, effect
    if not isinstance(arm, str) or not arm:
        c.fail("data.arm", f"must be a column's name (a non-empty string), got {arm!r}")
        return MISSING, effect
    if "columns" not in t:
        c.fail("data.arm", "needs data.columns (the outcome columns the arms are compared on)")
        return MISSING, effect
    if isinstance(columns, tuple) and arm in columns:
        c.fail("data.arm", f"the arm column {arm!r} cannot also be an outcome column")
        return MISSING, effect
    if effect == "mean":
        c.fail("data.effect", f"data.arm = {arm!r} needs an effect; allowed: {allowed[8:]}")
        return arm, MISSING
    if effect in _BINARY_EFFECTS and isinstance(bounds, tuple):
        numeric = [name for name, pair in bounds if pair != (0.0, 1.0)]
        if numeric:
            c.fail(
                "data.effect",
                f"effect = {effect!r} compares proportions of binary (0/1) columns; {numeric} "
                "have bounds other than [0, 1]: use effect = 'MD' or 'SMD' for numeric columns",
            )
            return arm, MISSING
    return arm, effect


def _partitioner(c: Checker, t: Mapping[str, Any]) -> PartitionerSpec | Any | None:
    """Check ``partitioner`` and its parameters: a :class:`PartitionerSpec`, None or MISSING."""
    given = [key for key in PARTITIONER_KEYS if key in t]
    if "partitioner" not in t:
        for key in given:
            takers = " or ".join(repr(p) for p in PARTITIONER_KEYS[key])
            c.fail(f"data.{key}", f"only with data.partitioner = {takers}")
        return None if not given else MISSING
    name = c.value("partitioner", t["partitioner"], "data.partitioner")
    if name is MISSING:
        return MISSING
    ok = True
    values: dict[str, Any] = {}
    for key in given:
        if name not in PARTITIONER_KEYS[key]:
            takers = " or ".join(repr(p) for p in PARTITIONER_KEYS[key])
            c.fail(f"data.{key}", f"only with data.partitioner = {takers}, not {name!r}")
            ok = False
        elif key == "partition_sizes":
            values[key] = _sizes(c, t[key])
        else:
            field = "partitioner_alpha" if key == "alpha" else key
            values[key] = c.value(field, t[key], f"data.{key}")
    required = {
        "dirichlet": ("alpha",),
        "inner_dirichlet": ("alpha",),
        "pathological": ("num_classes_per_partition",),
    }.get(name, ())
    for key in required:
        if key not in t:
            c.fail(f"data.{key}", f"required with data.partitioner = {name!r}")
            ok = False
    if name == "shard" and "shard_size" not in t and "num_shards_per_partition" not in t:
        c.fail(
            "data.shard_size",
            "required with data.partitioner = 'shard' (or data.num_shards_per_partition)",
        )
        ok = False
    missing = flwr_datasets_missing()
    if missing is not None:
        c.fail("data.partitioner", missing)
        ok = False
    if not ok or not is_ok(*values.values()):
        return MISSING
    if "alpha" in values:
        values["alpha"] = float(values["alpha"])
    return PartitionerSpec(name, **values)


def _sizes(c: Checker, value: Any) -> tuple[int, ...] | Any:
    if not isinstance(value, list) or not value:
        c.fail("data.partition_sizes", f"must be a non-empty array of integers, got {value!r}")
        return MISSING
    checked = [
        c.value("partition_size", v, f"data.partition_sizes[{i}]") for i, v in enumerate(value)
    ]
    return tuple(checked) if is_ok(*checked) else MISSING


def _check_partitioner_fits(
    c: Checker, spec: PartitionerSpec, n: int, labels: int, pool: int
) -> None:
    """Refuse at load what the partitioner could not do with ``pool`` records for ``n`` clients."""
    where = f"{pool} records with labels 0..{labels - 1}"
    if n > pool:
        c.fail("data.num_clients", f"{n} clients but {where}; every client needs a record")
        return
    if spec.name == "dirichlet":
        least = (
            DEFAULT_MIN_PARTITION_SIZE
            if spec.min_partition_size is None
            else spec.min_partition_size
        )
        if n * least > pool:
            c.fail(
                "data.min_partition_size",
                f"{n} clients x {least} records (min_partition_size, default "
                f"{DEFAULT_MIN_PARTITION_SIZE}) need {n * least} records but there are {where}",
            )
    elif spec.name == "pathological":
        per = spec.num_classes_per_partition or 1
        if per > labels:
            c.fail(
                "data.num_classes_per_partition",
                f"must be <= {labels} (the labels used), got {per}",
            )
    elif spec.name == "shard":
        shards, size = spec.num_shards_per_partition, spec.shard_size
        if shards is not None and size is not None and n * shards * size > pool:
            c.fail(
                "data.num_clients",
                f"{n} clients x {shards} shards x {size} records need {n * shards * size} "
                f"records but there are {where}",
            )
        elif shards is None and size is not None:
            usable = -(-pool // size) if spec.keep_incomplete_shard else pool // size
            if usable < n:
                c.fail(
                    "data.shard_size",
                    f"{where} make {usable} shards of {size}, fewer than the {n} clients",
                )
        elif shards is not None and n * shards > pool:
            c.fail(
                "data.num_shards_per_partition",
                f"{n} clients x {shards} shards need {n * shards} records but there are {where}",
            )
    elif spec.name == "inner_dirichlet" and spec.partition_sizes is not None:
        sizes = spec.partition_sizes
        if len(sizes) != n:
            c.fail(
                "data.partition_sizes",
                f"has {len(sizes)} entries for {n} clients; give one size per client",
            )
        elif sum(sizes) > pool:
            c.fail("data.partition_sizes", f"sum to {sum(sizes)} records but there are {where}")


def _summary(c: Checker, t: Mapping[str, Any], dataset: Any, synthetic: Any) -> tuple[Any, Any]:
    """Check ``summary`` and ``pool_block`` with the declared rules (``pool-block-fits``)."""
    values: dict[str, Any] = {"summary": t.get("summary", "mean")}
    if "pool_block" in t:
        values["pool_block"] = t["pool_block"]
    if isinstance(synthetic, SyntheticSpec):
        values["dataset"], values["data_dim"] = dataset, synthetic.dim
    elif is_ok(dataset) and dataset != "synthetic" and dataset_info(dataset).dim is not None:
        values["dataset"], values["data_dim"] = dataset, dataset_info(dataset).dim
    keys = {"summary": "data.summary", "pool_block": "data.pool_block"}
    problems = validate(values, keys)
    c.errors.extend(problems)
    if problems:
        return MISSING, MISSING
    pooled = values["summary"] == "pooled"
    return values["summary"], values.get("pool_block", 2) if pooled else None


def _check_sample_size(
    c: Checker,
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
