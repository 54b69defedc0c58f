"""Every configuration rule, declared once, and the one validator that applies them.

The rules are data, in the spirit of scikit-learn's ``_parameter_constraints``:

- :data:`FIELDS` maps each setting (by its canonical name, e.g. ``"epsilon"``) to the
  constraints one value must meet on its own (type, range, allowed names);
- :data:`CROSS_RULES` lists the rules between settings (a composition the mechanism supports,
  so ``cgm => not gdp``; the masking graph's degree, the secure-aggregation threshold's
  meaning, ``min_honest_clients <= n``, dropouts only in simulation, ...).

Every entry point passes through :func:`validate`: scenario files
(:func:`fa_hetdp.config.scenario.scenario_from_dict`), Flower run-config overrides
(:meth:`fa_hetdp.flowerkit.settings.RunSettings.from_run_config`), the ``fa-hetdp run`` flags,
the experiment grid (:class:`fa_hetdp.experiments.grid.GridSpec`) and
:class:`~fa_hetdp.config.protocol.ProtocolConfig`. Each entry point names the settings in its
own dotted scheme (``privacy.epsilon``, ``run-config.epsilon``, ``--epsilon``,
``grid.epsilons[1]``, ``ProtocolConfig.epsilon``); every problem is collected and raised
together as one :class:`ConfigError`, one ``key: what is wrong and what is allowed`` line each.

The secure-aggregation graph and threshold have one meaning everywhere
(:func:`fa_hetdp.config.secagg.resolve_graph`): a fraction in (0, 1] of a client's share
holders (never itself), rounded up and at least 2, an integer count in ``2 .. holders``, or
``"auto"`` (chosen from the stated adversary by :func:`secagg.params.choose_parameters`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

from fa_hetdp._types import RELEASE_NAMES
from fa_hetdp.config.center import CENTER_FIELDS, dispersion_center_supported
from fa_hetdp.config.constraints import (
    Boolean,
    Field,
    Integer,
    Options,
    Real,
    type_name,
)
from fa_hetdp.config.noise import NOISE_SHAPE_FIELDS, noise_shape_supported
from fa_hetdp.config.secagg import (
    AUTO,
    THREAT_MODELS,
    auto_together,
    malicious_complete,
    malicious_gamma_possible,
    malicious_threshold,
    modulus_supported,
    neighbours_even,
    parameters_exist,
    threshold_within_holders,
)
from fa_hetdp.config.settings import SETTINGS
from fa_hetdp.data.catalog import DATASET_NAMES
from fa_hetdp.data.dataset import SPLITS
from fa_hetdp.data.partitioners import ASSIGNMENT_MODES, PARTITIONERS
from fa_hetdp.data.summaries import SUMMARIES, pool_block_problem
from fa_hetdp.dp.mechanisms import get_mechanism
from fa_hetdp.errors import PrivacyParameterError, ScenarioError

__all__ = [
    "CROSS_RULES",
    "DROPOUT_STAGES",
    "FIELDS",
    "MODES",
    "Boolean",
    "ConfigError",
    "CrossRule",
    "DropoutStage",
    "Integer",
    "Options",
    "Problem",
    "Real",
    "check",
    "check_value",
    "raise_problems",
    "type_name",
    "validate",
]

DropoutStage = Literal["stage1", "stage1-unmask", "stage2", "stage2-unmask"]
"""When dropped clients leave: before sending their masked input of summation 1 or 2
(``"stageK"``: their noise share is lost), or after sending it but before unmasking
(``"stageK-unmask"``: their masks must be recovered from the survivors' shares)."""

DROPOUT_STAGES: Final[tuple[str, ...]] = get_args(DropoutStage)
MODES: Final[tuple[str, ...]] = ("simulation", "deployment")

Problem = tuple[str, str]
"""One problem: (dotted key, what is wrong and what is allowed)."""


class ConfigError(ScenarioError, PrivacyParameterError):
    """Invalid settings, found before any work starts; lists every problem with its key.

    Subclasses both :class:`~fa_hetdp.errors.ScenarioError` and
    :class:`~fa_hetdp.errors.PrivacyParameterError` (hence ``FaHetdpError`` and
    ``ValueError``), so callers that catch either keep working whatever the entry point.

    Attributes
    ----------
    problems : tuple of (str, str)
        ``(dotted key, message)`` pairs, in the order found.
    """

    def __init__(self, where: str, problems: Sequence[Problem]) -> None:
        self.where = where
        self.problems = tuple(problems)
        count = len(self.problems)
        lines = "\n  ".join(f"{key}: {message}" for key, message in self.problems)
        super().__init__(
            f"{where} is invalid ({count} problem{'s' if count > 1 else ''}):\n  {lines}"
        )


FIELDS: Final[dict[str, Field]] = {
    # privacy: declared once with the rest of each setting (fa_hetdp.config.settings)
    **{name: setting.rule for name, setting in SETTINGS.items()},
    "split_weight": Field((Real(low=0.0, low_open=True),)),
    # clients and secure aggregation
    "num_clients": Field((Integer(minimum=2),)),
    "threshold": Field(
        (Integer(minimum=2), Real(low=0.0, high=1.0, low_open=True), Options((AUTO,))),
        wrong_type="must be a fraction in (0, 1] of the share holders, a count >= 2 or 'auto'",
    ),
    "neighbours": Field(
        (Options(("complete", AUTO)), Integer(minimum=2)),
        wrong_type="must be 'complete', 'auto' or an even integer k >= 4",
    ),
    "dropout_fraction": Field((Real(low=0.0, high=1.0, high_open=True),)),
    "dropout_stage": Field((Options(DROPOUT_STAGES),)),
    # the run
    "mode": Field((Options(MODES),)),
    "seed": Field((Integer(minimum=0),), optional=True),
    "repeats": Field((Integer(minimum=1),)),
    # public assumptions about the data, for the accuracy plan only ([assumptions] of a scenario)
    "within_variance": Field((Real(low=0.0, high=0.25, low_open=True),)),
    "coordinate_mean": Field((Real(low=0.0, high=1.0),)),
    "spread": Field((Real(low=0.0, high=0.25),)),
    "i2": Field((Real(low=0.0, high=1.0, high_open=True),)),
    "node_wait_timeout": Field((Real(low=0.0, low_open=True),)),
    "stage_timeout": Field((Real(low=0.0, low_open=True),)),
    "run_timeout": Field((Real(low=0.0, low_open=True),)),
    # what to do above max-epsilon (flowerkit.settings)
    "on_degraded": Field((Options(("refuse", "release")),)),
    # secure aggregation's adversary (fa_hetdp.config.secagg)
    "threat_model": Field((Options(THREAT_MODELS),)),
    "corrupt_fraction": Field((Real(low=0.0, high=1.0, high_open=True),)),  # gamma
    "dropout_tolerance": Field((Real(low=0.0, high=1.0, high_open=True),)),  # secagg delta
    "security_bits": Field((Real(low=0.0, high=256.0, low_open=True),)),  # sigma
    "correctness_bits": Field((Real(low=0.0, high=256.0, low_open=True),)),  # eta
    # m of Z_2^m: 64 or 32 (rule modulus-bits); None: the mechanism's (config.secagg)
    "modulus_bits": Field((Integer(),), optional=True),
    # data
    "dataset": Field((Options(DATASET_NAMES),)),
    "data_split": Field((Options(SPLITS),)),
    "records_per_client": Field((Integer(minimum=1),)),
    "sample_fraction": Field((Real(low=0.0, high=1.0, low_open=True),)),
    "dirichlet_alpha": Field((Real(low=0.0, low_open=True),)),
    "label_ratio": Field((Real(low=0.0),)),
    "num_labels": Field((Integer(minimum=1),)),
    "synthetic_size": Field((Integer(minimum=1),)),
    "synthetic_dim": Field((Integer(minimum=1),)),
    "synthetic_heterogeneity": Field((Real(low=0.0, high=1.0),)),
    "synthetic_noise_std": Field((Real(low=0.0),)),
    # flwr-datasets partitioners (fa_hetdp.data.partitioners); which apply: config.sections
    "partitioner": Field((Options(PARTITIONERS),)),
    "partitioner_alpha": Field((Real(low=0.0, low_open=True),)),
    "min_partition_size": Field((Integer(minimum=0),)),
    "self_balancing": Field((Boolean(),)),
    "num_classes_per_partition": Field((Integer(minimum=1),)),
    "class_assignment_mode": Field((Options(ASSIGNMENT_MODES),)),
    "num_shards_per_partition": Field((Integer(minimum=1),)),
    "shard_size": Field((Integer(minimum=1),)),
    "keep_incomplete_shard": Field((Boolean(),)),
    "partition_size": Field((Integer(minimum=1),)),
    # client summaries (fa_hetdp.data.summaries); data_dim is derived (a record's dimension)
    "summary": Field((Options(SUMMARIES),)),
    "pool_block": Field((Integer(minimum=1),)),
    "data_dim": Field((Integer(minimum=1),)),
}
"""The constraints of every setting on its own, by canonical name."""


def check_value(name: str, value: Any) -> str | None:
    """Return what is wrong with ``value`` as setting ``name`` (see :data:`FIELDS`), or None."""
    # a setting declared after this module was imported is read from the table itself
    spec = FIELDS[name] if name in FIELDS else SETTINGS[name].rule
    if value is None and spec.optional:
        return None
    for constraint in spec.constraints:
        if constraint.accepts_type(value):
            message = constraint.check(value)
            if message and isinstance(constraint, Options) and spec.wrong_type is not None:
                return f"{spec.wrong_type}, got {type_name(value)} {value!r}"  # say all kinds
            return message
    if spec.wrong_type is not None:
        return f"{spec.wrong_type}, got {type_name(value)} {value!r}"
    return spec.constraints[0].check(value)


# --------------------------------------------------------------------------------------------
# Rules between settings
# --------------------------------------------------------------------------------------------


def _composition_supported(v: Mapping[str, Any]) -> str | None:
    # The mechanism says which compositions its calibration supports (cgm: basic only, since
    # the classical bound has no exact privacy curve to compose).
    mechanism = get_mechanism(v["mechanism"])
    if mechanism.supports(v["composition"]):
        return None
    return (
        f"{v['composition']!r} is not available with mechanism {mechanism.name!r}, which "
        f"supports {' or '.join(repr(c) for c in mechanism.compositions)}"
    )


def _honest_at_most_n(v: Mapping[str, Any]) -> str | None:
    t, n = v["min_honest_clients"], v["num_clients"]
    if t is not None and t > n:
        return f"must be <= {n} (the number of clients n), got {t}"
    return None


def _i2_extra_weight_needs_stage(v: Mapping[str, Any]) -> str | None:
    split = v["split"]
    if split is not None and "i2_extra" in split and v["extra_i2_noise"] is False:
        return "a weight for 'i2_extra' is given but extra_i2_noise is false"
    return None


def _seed_only_in_simulation(v: Mapping[str, Any]) -> str | None:
    if v["mode"] == "deployment" and v["seed"] is not None:
        return (
            f"seed={v['seed']} in deployment mode: deployments draw noise from a CSPRNG and "
            "refuse a seed (leave it unset)"
        )
    return None


def _dropouts_only_in_simulation(v: Mapping[str, Any]) -> str | None:
    if v["mode"] == "deployment" and v["dropout_fraction"] > 0.0:
        return "simulated dropouts (dropout fraction > 0) are for simulation mode only"
    return None


def _pool_block_only_pooled(v: Mapping[str, Any]) -> str | None:
    if v["summary"] != "pooled":
        return f"pool_block={v['pool_block']} is only used with summary = 'pooled'"
    return None


def _pool_block_fits(v: Mapping[str, Any]) -> str | None:
    if v["summary"] != "pooled":
        return None
    return pool_block_problem(v["dataset"], v["data_dim"], v["pool_block"])


def _silo_summaries_allowed(v: Mapping[str, Any]) -> str | None:
    if v["design"] != "silo-summaries":
        return None
    if v["privacy_unit"] != "record":
        return (
            "silo-summaries needs privacy unit 'record' (each silo's own release at the whole "
            "budget composes in parallel only across disjoint records); use 'secure-sums' or 'auto'"
        )
    if v["placement"] != "distributed":
        return (
            "silo-summaries adds each silo's noise on the silo; placement 'central' would show "
            "the server a silo's exact summaries; use 'secure-sums' or 'auto'"
        )
    return None


def _meta_mechanism(v: Mapping[str, Any]) -> str | None:
    if v["analysis"] != "meta" or v["mechanism"] == "agm":
        return None
    return (
        f"the meta-analysis needs mechanism 'agm' (its releases compose exactly as Gaussians), "
        f"got {v['mechanism']!r}"
    )


@dataclass(frozen=True)
class CrossRule:
    """A rule between settings: checked when all of ``fields`` are given and valid.

    The problem is reported under the key of ``blame`` (the last of ``fields`` by default).
    """

    name: str
    fields: tuple[str, ...]
    check: Callable[[Mapping[str, Any]], str | None]
    blame: str


CROSS_RULES: Final[tuple[CrossRule, ...]] = (
    CrossRule(
        "composition-supported", ("mechanism", "composition"), _composition_supported, "composition"
    ),
    CrossRule(
        "honest-at-most-n",
        ("min_honest_clients", "num_clients"),
        _honest_at_most_n,
        "min_honest_clients",
    ),
    CrossRule("degree-even", ("neighbours", "num_clients"), neighbours_even, "neighbours"),
    CrossRule(
        "threshold-within-holders",
        ("threshold", "num_clients", "neighbours"),
        threshold_within_holders,
        "threshold",
    ),
    CrossRule("auto-together", ("neighbours", "threshold"), auto_together, "threshold"),
    CrossRule("modulus-bits", ("modulus_bits",), modulus_supported, "modulus_bits"),
    CrossRule(
        "secagg-parameters-exist",
        (
            "neighbours",
            "threshold",
            "num_clients",
            "corrupt_fraction",
            "dropout_tolerance",
            "security_bits",
            "correctness_bits",
            "threat_model",
        ),
        parameters_exist,
        "neighbours",
    ),
    CrossRule(
        "malicious-server-gamma",
        ("threat_model", "num_clients", "corrupt_fraction"),
        malicious_gamma_possible,
        "corrupt_fraction",
    ),
    CrossRule(
        "malicious-server-complete",
        ("threat_model", "num_clients", "neighbours"),
        malicious_complete,
        "neighbours",
    ),
    CrossRule(
        "malicious-server-threshold",
        ("threat_model", "num_clients", "corrupt_fraction", "neighbours", "threshold"),
        malicious_threshold,
        "threshold",
    ),
    CrossRule(
        "i2-extra-weight", ("split", "extra_i2_noise"), _i2_extra_weight_needs_stage, "split"
    ),
    CrossRule("seed-simulation-only", ("mode", "seed"), _seed_only_in_simulation, "seed"),
    CrossRule(
        "pool-block-pooled-only", ("summary", "pool_block"), _pool_block_only_pooled, "pool_block"
    ),
    CrossRule(
        "pool-block-fits",
        ("summary", "pool_block", "dataset", "data_dim"),
        _pool_block_fits,
        "pool_block",
    ),
    CrossRule("noise-shape", NOISE_SHAPE_FIELDS, noise_shape_supported, "noise_shape"),
    CrossRule("center", CENTER_FIELDS, dispersion_center_supported, "dispersion_center"),
    CrossRule("meta-mechanism", ("analysis", "mechanism"), _meta_mechanism, "mechanism"),
    CrossRule(
        "silo-summaries-allowed",
        ("design", "privacy_unit", "placement"),
        _silo_summaries_allowed,
        "design",
    ),
    CrossRule(
        "dropouts-simulation-only",
        ("mode", "dropout_fraction"),
        _dropouts_only_in_simulation,
        "dropout_fraction",
    ),
)
"""The rules between settings, each reported under the key of its ``blame`` setting."""


def cross_rule(name: str) -> CrossRule:
    """Return the declared rule called ``name`` (e.g. ``"composition-supported"``)."""
    for rule in CROSS_RULES:
        if rule.name == name:
            return rule
    raise KeyError(name)


# --------------------------------------------------------------------------------------------
# The validator
# --------------------------------------------------------------------------------------------


def _check_split(split: Any, key: str) -> list[Problem]:
    if not isinstance(split, Mapping):
        return [(key, f"must be a table of weights, got {type_name(split)}")]
    problems: list[Problem] = []
    for name in sorted(split, key=str):
        if name not in RELEASE_NAMES:
            problems.append(
                (f"{key}.{name}", f"unknown release; allowed: {', '.join(RELEASE_NAMES)}")
            )
            continue
        message = check_value("split_weight", split[name])
        if message is not None:
            problems.append((f"{key}.{name}", message))
    return problems


def validate(
    values: Mapping[str, Any],
    keys: Mapping[str, str] | Callable[[str], str],
    *,
    lists: Iterable[str] = (),
    skip: Iterable[str] = (),
) -> list[Problem]:
    """Check ``values`` against :data:`FIELDS` and :data:`CROSS_RULES`; return every problem.

    Parameters
    ----------
    values : mapping
        Settings by canonical name (those of :data:`FIELDS`, and ``"split"``: a table of
        release weights). Settings that are absent are not checked; a cross rule runs when
        every setting it involves is present and valid on its own.
    keys : mapping or callable
        The dotted key under which each setting is reported (e.g. ``"epsilon"`` ->
        ``"privacy.epsilon"``); missing names are reported under their canonical name.
    lists : iterable of str
        Settings given as a non-empty list of distinct values (a grid); each item is checked
        (reported as ``key[i]``) and the cross rules run for every combination.
    skip : iterable of str
        Names of cross rules not to apply (the grid skips ``composition-supported`` cells instead of
        refusing them).
    """
    key_of: Callable[[str], str] = (
        keys if callable(keys) else (lambda name, _m=keys: _m.get(name, name))  # type: ignore[misc]
    )
    list_names = set(lists)
    problems: list[Problem] = []
    valid: dict[str, list[Any]] = {}
    for name, value in values.items():
        key = key_of(name)
        if name == "split":
            found = [] if value is None else _check_split(value, key)
            problems += found
            if not found:
                valid[name] = [value]
            continue
        if name in list_names:
            items = list(value) if isinstance(value, list | tuple) else [value]
            if not items:
                problems.append((key, "must not be an empty list"))
                continue
            item_problems = []
            for i, item in enumerate(items):
                message = check_value(name, item)
                if message is not None:
                    item_key = f"{key}[{i}]" if isinstance(value, list | tuple) else key
                    item_problems.append((item_key, message))
            problems += item_problems
            if item_problems:
                continue
            if len(set(items)) != len(items):
                problems.append((key, f"has repeated values {list(items)!r}"))
                continue
            valid[name] = items
            continue
        message = check_value(name, value)
        if message is not None:
            problems.append((key, message))
        else:
            valid[name] = [value]
    skipped = set(skip)
    for rule in CROSS_RULES:
        if rule.name in skipped or not all(name in valid for name in rule.fields):
            continue
        messages: list[str] = []
        for combination in itertools.product(*(valid[name] for name in rule.fields)):
            message = rule.check(dict(zip(rule.fields, combination, strict=True)))
            if message is not None and message not in messages:
                messages.append(message)
        problems += [(key_of(rule.blame), message) for message in messages]
    return problems


def raise_problems(where: str, problems: Sequence[Problem]) -> None:
    """Raise one :class:`ConfigError` listing ``problems`` (do nothing when there are none)."""
    if problems:
        raise ConfigError(where, problems)


def check(
    where: str,
    values: Mapping[str, Any],
    keys: Mapping[str, str] | Callable[[str], str],
    *,
    lists: Iterable[str] = (),
) -> None:
    """Validate ``values`` (see :func:`validate`) and raise one :class:`ConfigError` if bad."""
    raise_problems(where, validate(values, keys, lists=lists))
