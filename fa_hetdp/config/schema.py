"""The scenario schema: frozen dataclasses for the sections of a scenario file.

A :class:`Scenario` is built only by :func:`fa_hetdp.config.scenario.scenario_from_dict`
(after every rule of :mod:`fa_hetdp.config.rules` has passed); the schema of the file is in
``scenarios/README.md``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from fa_hetdp._types import Composition, Mechanism, Placement, Profile
from fa_hetdp.config.center import DispersionCenter
from fa_hetdp.config.noise import NoiseShape
from fa_hetdp.config.rules import DropoutStage
from fa_hetdp.config.secagg import (
    DEFAULT_CORRECTNESS_BITS,
    DEFAULT_SECAGG_THRESHOLD,
    DEFAULT_SECURITY_BITS,
    resolve_graph,
    resolve_modulus_bits,
    secagg_parameters,
)
from fa_hetdp.config.settings import SETTINGS
from fa_hetdp.data.dataset import Split
from fa_hetdp.data.partitioners import PartitionerSpec
from fa_hetdp.data.summaries import SummaryKind
from fa_hetdp.secagg.params import SecAggParameters, ThreatModel

__all__ = [
    "AssumptionsSpec",
    "DataSpec",
    "ExperimentSpec",
    "GridPoint",
    "NodesSpec",
    "PrivacySpec",
    "ProtocolSpec",
    "Scenario",
    "SecAggSpec",
    "SyntheticSpec",
    "largest_remainder",
]


@dataclass(frozen=True)
class SyntheticSpec:
    """``[data.synthetic]``: parameters of :func:`fa_hetdp.data.synthetic.synthetic_dataset`.

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
    dataset : str or None
        ``"digits"``, ``"cifar10"``, ``"cifar100"``, ``"fashion-mnist"`` or ``"synthetic"``;
        ``"sites"`` with ``sites``; None: the scenario names no dataset and states ``columns``
        (a deployment whose every node reads its own file, node config ``data-path``; n is
        ``num_clients``, d = ``len(columns)``): nothing that needs the scenario's partitions
        (a simulation, a node without ``data-path``) runs
        (:data:`fa_hetdp.config.partition.NO_DATASET`).
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
    summary : {"mean", "pooled", "label-histogram"}
        What each client reports (:mod:`fa_hetdp.data.summaries`, ``docs/summaries.md``).
    pool_block : int or None
        Block side of ``summary = "pooled"`` (None otherwise).
    partitioner : PartitionerSpec or None
        A flwr-datasets partitioner and its parameters (``[data] partitioner = ...``;
        :mod:`fa_hetdp.data.partitioners`) instead of the skews above; clients then hold the
        records it gives them (``records_per_client`` stays 1, unused).
    columns : tuple of str or None
        The run's named columns (public): a data owner's file (node config ``data-path``) is
        a CSV with a header row (or Parquet) read by these names (:mod:`fa_hetdp.data.tables`);
        None: ``.npy`` or a headerless numeric CSV, as before. A simulation of ``sites`` reads
        every site's file by them too; a simulation of the scenario's own partitions (a
        ``dataset``) does not use them.
    bounds : tuple of (str, (float, float))
        Public ``(low, high)`` of some of ``columns``: the node clips each value into them and
        scales it to ``[0, 1]``; a column without bounds must already lie in ``[0, 1]``.
    arm : str or None
        Two-arm effects: the name of the 0/1 treatment-indicator column of every node's file
        (1 = treated), read beside ``columns``; every silo's arm sizes are public (a record is
        replaced within its arm: :mod:`fa_hetdp.protocol.two_arm`).
    effect : str
        ``"mean"`` (default: each column's mean) or, with ``arm``, the two-arm effect
        ``"MD"``, ``"SMD"``, ``"OR"``, ``"RR"`` or ``"RD"`` (OR, RR, RD: binary columns).
    units : tuple of (str, str)
        The names of some of ``columns``' units (``[data] units = {dep_delay = "minutes"}``):
        public words only, shown beside the column in the printed table and the forest plot
        (the result's ``meta_analysis["units"]["unit_names"]``); nothing is computed from them.
    sites : tuple of str or None
        A simulation of the user's own files (:mod:`fa_hetdp.config.sites`): absolute paths
        of one CSV per client, in order (``n = len(sites)``), read by ``columns``; then
        ``dataset`` is ``"sites"`` and ``records_per_client`` the fewest records of a file.
    """

    dataset: str | None
    num_clients: int
    root: str | None = None
    split: Split = "train"
    sample_fraction: float | None = None
    records_per_client: int = 1
    label_ratios: tuple[float, ...] | None = None
    dirichlet_alpha: float | None = None
    num_labels: int | None = None
    synthetic: SyntheticSpec | None = None
    summary: SummaryKind = "mean"
    pool_block: int | None = None
    partitioner: PartitionerSpec | None = None
    columns: tuple[str, ...] | None = None
    bounds: tuple[tuple[str, tuple[float, float]], ...] = ()
    arm: str | None = None
    effect: str = "mean"
    sites: tuple[str, ...] | None = None
    units: tuple[tuple[str, str], ...] = ()

    def column_bounds(self) -> dict[str, tuple[float, float]]:
        """Return ``bounds`` as ``{column: (low, high)}``."""
        return dict(self.bounds)

    def column_units(self) -> dict[str, str]:
        """Return ``units`` as ``{column: units}`` (the columns whose units are named)."""
        return dict(self.units)

    @property
    def partition(self) -> Literal["label-skew", "dirichlet", "uniform", "partitioner"]:
        """How clients are sampled: label ratios, Dirichlet mixtures, uniformly, or flwr's."""
        if self.partitioner is not None:
            return "partitioner"
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
    mechanisms : tuple of {"agm", "cgm", "ddg", "skellam"}
        Mechanism(s) to run (:data:`fa_hetdp._types.MECHANISMS`).
    composition : {"basic", "gdp"}
        Budget split by basic composition (the paper) or exact Gaussian-DP composition
        (the default: about 2x smaller sigma at the same total).
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
        t: each client adds a noise share of variance sigma^2 / t; None = n.
    statistics : tuple of str or None
        The statistics the user needs (registry keys); None = all. Releases nobody needs are
        not made (``docs/privacy.md``).
    broadcast_bounds : bool
        Stage-2 sensitivities from the public broadcast values (default) or ``sqrt(d)``.
    adaptive_floor : bool
        Choose the variance floor from a noisy histogram of the clients' within-vector
        variances (issue 9, lever d; default false in scenarios).
    floor_quantile : float
        The floor rule's quantile ``q`` in (0, 1/2] (default 0.1).
    noise_shape : {"uniform", "per_coordinate"}
        Stage-2 noise: one sigma for every coordinate (default in scenarios), or ``sigma_j``
        following coordinate ``j``'s broadcast bound (issue 9, lever c; needs
        ``broadcast_bounds`` and a Gaussian mechanism: :mod:`fa_hetdp.config.noise`).
    dispersion_center : {"broadcast", "optimal"}
        Centre of the dispersion summand: the broadcast ``clip(mu')`` (default in scenarios)
        or the public optimal centre (lever c; :mod:`fa_hetdp.config.center`).
    extra : tuple of (str, value) pairs
        The declared settings (:data:`fa_hetdp.config.settings.SETTINGS`) this class has no
        field of, by name (:meth:`Scenario.setting` reads every setting).
    preset : str or None
        The preset the file asked for (``"paper"``, ``"recommended"``;
        :data:`fa_hetdp.config.settings.PRESETS`): its values replaced the defaults of the
        keys the file leaves out.
    """

    epsilons: tuple[float, ...]
    delta: float
    mechanisms: tuple[Mechanism, ...] = ("agm",)
    composition: Composition = "gdp"
    profile: Profile = "bounded"
    split: tuple[tuple[str, float], ...] | None = None
    variance_floor: float = 0.01
    extra_i2_noise: bool = True
    min_honest_clients: int | None = None
    statistics: tuple[str, ...] | None = None
    broadcast_bounds: bool = True
    adaptive_floor: bool = False
    floor_quantile: float = 0.1
    noise_shape: NoiseShape = "uniform"
    dispersion_center: DispersionCenter = "broadcast"
    extra: tuple[tuple[str, Any], ...] = ()
    preset: str | None = None

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
    threshold : float, int or "auto"
        Shamir threshold: a float in (0, 1] is a fraction of a client's share holders (its
        ``k`` neighbours, or the other ``n - 1`` clients for the complete graph), rounded up
        and at least 2; an int is a count in ``2 .. holders``; ``"auto"`` (with ``neighbours
        = "auto"``) is chosen from the adversary below.
    neighbours : "complete", int or "auto"
        Masking graph: every pair of clients, or a random k-regular graph (SecAgg+) of even
        degree ``k >= 4``; ``k >= n - 1`` is the complete graph; ``"auto"``: the smallest
        ``(k, t)`` of :func:`secagg.params.choose_parameters` for gamma, delta, sigma, eta.
    dropout_fraction : float
        Fraction of clients that drop out *in the simulation*, in [0, 1).
    dropout_stage : {"stage1", "stage1-unmask", "stage2", "stage2-unmask"}
        When they drop out (see :data:`DropoutStage`).
    threat_model : {"honest-but-curious", "malicious-server"}
        The server the protocol defends against (``"malicious-server"`` adds the consistency
        round and needs the complete graph).
    corrupt_fraction : float
        gamma in [0, 1): the fraction of clients that may collude with the server.
    dropout_tolerance : float
        delta in [0, 1): the fraction of clients that may drop out while every sum still
        completes (secure aggregation's correctness parameter; not the DP delta of
        ``[privacy]`` and not the simulated ``dropout_fraction``).
    security_bits, correctness_bits : float
        sigma and eta: failure bounds ``2^-sigma`` (an input exposed) and ``2^-eta`` (a sum
        that cannot complete), over all ``n`` clients.
    modulus_bits : {64, 32} or None
        The ring ``Z_2^m`` of the masked sums: 32 halves the bytes of every masked vector
        and is refused (before anything is sent) where a sum could wrap
        (:mod:`fa_hetdp.secagg.encoding`). None (left out): the mechanism's default,
        32 for ``"ddg"`` and ``"skellam"``, 64 for the Gaussian mechanisms
        (:meth:`ring_bits`).
    """

    threshold: float | int | Literal["auto"] = DEFAULT_SECAGG_THRESHOLD
    neighbours: Literal["complete", "auto"] | int = "complete"
    dropout_fraction: float = 0.0
    dropout_stage: DropoutStage = "stage1"
    threat_model: ThreatModel = "honest-but-curious"
    corrupt_fraction: float = 0.0
    dropout_tolerance: float = 0.0
    security_bits: float = DEFAULT_SECURITY_BITS
    correctness_bits: float = DEFAULT_CORRECTNESS_BITS
    modulus_bits: int | None = None

    def ring_bits(self, mechanism: str) -> int:
        """Return the ring's bits ``m`` for a run with ``mechanism``.

        :func:`fa_hetdp.config.secagg.resolve_modulus_bits`, the function the Flower run
        settings call too: the stated value, else 32 for ddg/skellam and 64 otherwise.
        """
        return resolve_modulus_bits(self.modulus_bits, mechanism)

    def parameters(self, num_clients: int) -> SecAggParameters:
        """Return the degree ``k``, threshold ``t`` and guarantee for ``num_clients`` clients.

        :func:`fa_hetdp.config.secagg.secagg_parameters`: ``"auto"`` is
        :func:`secagg.params.choose_parameters`; explicit values get their exact failure
        probabilities under ``corrupt_fraction`` and ``dropout_tolerance``.
        ``.guarantee()`` says it in words.
        """
        return secagg_parameters(num_clients, self.neighbours, self.threshold, **self._adversary())

    def guarantee(self, num_clients: int) -> str:
        """Return the secure-aggregation guarantee in words for ``num_clients`` clients."""
        return self.parameters(num_clients).guarantee()

    def _adversary(self) -> dict[str, Any]:
        return {
            "gamma": self.corrupt_fraction,
            "delta": self.dropout_tolerance,
            "sigma": self.security_bits,
            "eta": self.correctness_bits,
            "threat_model": self.threat_model,
        }

    def degree(self, num_clients: int) -> int | None:
        """Return the masking graph's degree ``k`` for ``num_clients``; None = complete graph."""
        return resolve_graph(num_clients, self.neighbours, self.threshold, **self._adversary())[0]

    def threshold_count(self, num_clients: int) -> int:
        """Return the threshold as a count of shares for ``num_clients`` clients.

        Resolved by :func:`fa_hetdp.config.secagg.resolve_graph`, the function the Flower
        run settings call too, so the value reported here is the value a run uses.
        """
        return resolve_graph(num_clients, self.neighbours, self.threshold, **self._adversary())[1]

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
class AssumptionsSpec:
    """``[assumptions]``: what is publicly known about the data, for the accuracy plan only.

    None of it reaches the protocol or its privacy; the plan printed before a run
    (:mod:`fa_hetdp.accuracy.assumptions`) uses what is stated and says what it had to assume.

    Parameters
    ----------
    within_variance : float or None
        Typical within-vector variance ``s_i^2`` of one client's vector, in ``(0, 1/4]``.
    coordinate_mean : float or None
        Typical coordinate mean, in ``[0, 1]``.
    spread : float or None
        Typical dispersion ``D_j`` of a coordinate across clients, in ``[0, 1/4]``.
    i2 : float or None
        Typical ``I^2`` of a coordinate, in ``[0, 1)``.
    source : str
        Where the numbers come from (printed with the plan).
    """

    within_variance: float | None = None
    coordinate_mean: float | None = None
    spread: float | None = None
    i2: float | None = None
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Return the stated keys (the table as a scenario file writes it)."""
        out: dict[str, Any] = {
            k: v
            for k, v in (
                ("within_variance", self.within_variance),
                ("coordinate_mean", self.coordinate_mean),
                ("spread", self.spread),
                ("i2", self.i2),
            )
            if v is not None
        }
        if self.source:
            out["source"] = self.source
        return out


#: ``[nodes]`` keys and the node-config key each stands for (``fa_hetdp.flowerkit.node_policy``).
NODE_KEYS_OF_SCENARIO: dict[str, str] = {
    "allow_central_placement": "allow-central-placement",
    "allow_non_dp": "allow-non-dp",
    "measurement_max_epsilon": "measurement-max-epsilon",
    "ledger_max_epsilon": "ledger-max-epsilon",
    "ledger_max_delta": "ledger-max-delta",
}


@dataclass(frozen=True)
class NodesSpec:
    """``[nodes]``: the node policy of a Flower simulation's simulated nodes (issue 27).

    A simulated node has no ``--node-config`` of its own (Flower gives it its partition only),
    and one person runs every party: the scenario states what its nodes accept. Only a
    ClientApp that runs in a Flower simulation reads it; a deployed node reads its own node
    config and never this table (the scenario is the server's word there). A key left out is
    the node's default (``docs/deployment.md``, "Node policy and privacy ledger").

    Parameters
    ----------
    allow_central_placement, allow_non_dp : bool or None
        ``allow-central-placement`` and ``allow-non-dp`` (default false).
    measurement_max_epsilon, ledger_max_epsilon : float or None
        ``measurement-max-epsilon`` and ``ledger-max-epsilon`` (default 10).
    ledger_max_delta : float or None
        ``ledger-max-delta`` (default ``1e-5``).
    """

    allow_central_placement: bool | None = None
    allow_non_dp: bool | None = None
    measurement_max_epsilon: float | None = None
    ledger_max_epsilon: float | None = None
    ledger_max_delta: float | None = None

    def node_config(self) -> dict[str, Any]:
        """Return the stated keys as node-config keys (``measurement-max-epsilon``, ...)."""
        return {NODE_KEYS_OF_SCENARIO[k]: v for k, v in self.to_dict().items()}

    def to_dict(self) -> dict[str, Any]:
        """Return the stated keys (the table as a scenario file writes it)."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None
        }


def _entry(name: str) -> str:
    """Return a declared setting's key in its scenario section (``privacy_unit``: ``unit``)."""
    return SETTINGS[name].entry if name in SETTINGS else name


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
    assumptions : AssumptionsSpec
        ``[assumptions]``: public knowledge about the data, for the accuracy plan.
    nodes : NodesSpec
        ``[nodes]``: the policy of the simulated nodes of a Flower simulation.
    """

    name: str
    description: str
    data: DataSpec
    privacy: PrivacySpec
    protocol: ProtocolSpec
    secagg: SecAggSpec
    experiment: ExperimentSpec
    path: str | None = None
    assumptions: AssumptionsSpec = AssumptionsSpec()
    nodes: NodesSpec = NodesSpec()

    @property
    def num_clients(self) -> int:
        """Number of clients n."""
        return self.data.num_clients

    def setting(self, name: str) -> Any:
        """Return this scenario's value of declared setting ``name`` (a grid's first value).

        Raises
        ------
        KeyError
            ``name`` is not a setting of ``[privacy]`` or ``[protocol]``.
        """
        for spec in (self.privacy, self.protocol):
            names = {f.name for f in dataclasses.fields(spec)}
            if name in names:
                return getattr(spec, name)
            if f"{name}s" in names:  # a grid: epsilons, mechanisms, placements
                return getattr(spec, f"{name}s")[0]
        return dict(self.privacy.extra)[name]

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
        return largest_remainder(self.num_clients, self.data.label_ratios)

    def to_dict(self) -> dict[str, Any]:
        """Return the scenario as plain data (JSON/TOML-able), for results files.

        The sections are in the file's schema, so ``scenario_from_dict(s.to_dict())`` gives
        back an equal scenario; the ``derived`` table (resolved client count, clients per
        label, source path) is informative and ignored on load.
        """
        d = self.data
        data: dict[str, Any] = {"dataset": d.dataset, "split": d.split}
        if d.dataset is None:  # the nodes' own files: no dataset, nothing to split
            data = {}
        if d.root is not None:
            data["root"] = d.root
        if d.sample_fraction is not None:
            data["sample_fraction"] = d.sample_fraction
        else:
            data["num_clients"] = d.num_clients
        if d.partitioner is not None:
            data["partitioner"] = d.partitioner.name
            data.update(d.partitioner.parameters())
        else:
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
        if d.summary != "mean":
            data["summary"] = d.summary
        if d.pool_block is not None:
            data["pool_block"] = d.pool_block
        if d.columns is not None:
            data["columns"] = list(d.columns)
        if d.bounds:
            data["bounds"] = {name: list(pair) for name, pair in d.bounds}
        if d.arm is not None:
            data["arm"] = d.arm
        if d.effect != "mean":
            data["effect"] = d.effect
        if d.units:
            data["units"] = dict(d.units)
        if d.sites is not None:  # the files decide the dataset and the records per client
            derived = ("dataset", "split", "records_per_client")
            data = {k: v for k, v in data.items() if k not in derived}
            data["sites"] = list(d.sites)
        per_label = self.clients_per_label()
        p = self.privacy
        privacy: dict[str, Any] = {
            **({"preset": p.preset} if p.preset is not None else {}),
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
        if p.statistics is not None:
            privacy["statistics"] = list(p.statistics)
        privacy["broadcast_bounds"] = p.broadcast_bounds
        privacy["adaptive_floor"] = p.adaptive_floor
        privacy["floor_quantile"] = p.floor_quantile
        privacy["noise_shape"] = p.noise_shape
        privacy["dispersion_center"] = p.dispersion_center
        privacy.update({_entry(name): value for name, value in p.extra})
        secagg: dict[str, Any] = {
            "threshold": self.secagg.threshold,
            "neighbours": self.secagg.neighbours,
            "dropout_fraction": self.secagg.dropout_fraction,
            "dropout_stage": self.secagg.dropout_stage,
            "threat_model": self.secagg.threat_model,
            "corrupt_fraction": self.secagg.corrupt_fraction,
            "dropout_tolerance": self.secagg.dropout_tolerance,
            "security_bits": self.secagg.security_bits,
            "correctness_bits": self.secagg.correctness_bits,
        }
        if self.secagg.modulus_bits is not None:  # left out: the mechanism's default
            secagg["modulus_bits"] = self.secagg.modulus_bits
        return {
            "scenario": {"name": self.name, "description": self.description},
            "data": data,
            "privacy": privacy,
            "protocol": {"placement": list(self.protocol.placements)},
            "secagg": secagg,
            "experiment": {"repeats": self.experiment.repeats, "seed": self.experiment.seed},
            **({"assumptions": a} if (a := self.assumptions.to_dict()) else {}),
            **({"nodes": n} if (n := self.nodes.to_dict()) else {}),
            "derived": {
                "num_clients": self.num_clients,
                "clients_per_label": None if per_label is None else list(per_label),
                "secagg_threshold_count": self.secagg.threshold_count(self.num_clients),
                "secagg_degree": self.secagg.parameters(self.num_clients).degree,
                "secagg_guarantee": self.secagg.guarantee(self.num_clients),
                "secagg_modulus_bits": {m: self.secagg.ring_bits(m) for m in p.mechanisms},
                "path": self.path,
            },
        }


def largest_remainder(n: int, ratios: Sequence[float]) -> tuple[int, ...]:
    """Largest-remainder apportionment (as ``fa_hetdp.data.sampling.clients_per_label``)."""
    total = float(sum(ratios))
    quotas = [n * r / total for r in ratios]
    counts = [math.floor(q) for q in quotas]
    left = n - sum(counts)
    order = sorted(range(len(ratios)), key=lambda j: (-(quotas[j] - counts[j]), j))
    for j in order[:left]:
        counts[j] += 1
    return tuple(counts)
