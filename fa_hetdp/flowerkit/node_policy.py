"""A data owner's policy, read from its node config and checked before anything leaves the node.

The run config and every message are the server's word; what protects a data owner is set
in its SuperNode's ``--node-config`` (issue 27). :meth:`NodePolicy.from_node_config` reads
and validates every key this module knows (one line listing every bad key), and
:meth:`NodePolicy.check` refuses a measurement from what the node itself knows about it (a
:class:`PlanView`), one line per refusal naming the key and what the server asked:

- ``allow-central-placement`` (default false): only distributed noise, unless allowed;
- a roster (``secagg-roster``) implies the malicious-server mode: no downgrade to
  honest-but-curious;
- the colluders are counted against the roster, not the session: ``c = ceil(gamma |roster|)``,
  and the session needs ``t >= floor((n + c)/2) + 1`` (malicious server), ``t >= c + 1`` and
  ``n >= min-session-size`` (default: the roster's size minus the dropouts the node's
  ``secagg-dropout-tolerance`` allows);
- ``allow-non-dp`` (default false): the ``paper`` profile, CGM at ``epsilon >= 1``, noise
  off, or any plan that states why it is not DP, refused;
- the node recomputes the noise its contribution gets from its own view (the ``n - c``
  honest shares of the size it is asked to add, for its own sensitivity) and the epsilon
  that noise buys (:func:`~fa_hetdp.dp.accounting.privacy_spent`, the project's exact
  composition); a plan whose noise is below what the stated epsilon needs is refused;
- ``measurement-max-epsilon`` (default 10, at the ledger's ``delta``, default ``1e-5``): a cap
  per measurement, on the epsilon the node recomputed;
- ``allow-public-arm-sizes`` (default false): a two-arm release (the scenario's ``[data] arm``:
  the silo summaries' per-arm release, or an MD or RD entered in the secure sums as one
  summary per silo) publishes the node's arm sizes and protects one record replaced within
  its arm; refused unless the node's own config consents (the scenario is the server's word);
- a session nonce seen before (kept in the node's ledger, :mod:`fa_hetdp.flowerkit.ledger`,
  so a restart does not forget it), and a measurement the ledger cannot afford.

Both apps check it at a session's first step and again at each release-bearing step
(:mod:`fa_hetdp.clients.policy`); our app's nodes in a Flower simulation, which have no node
config of their own, take theirs from the scenario's ``[nodes]`` table (and consent to a
two-arm scenario's public arm sizes: :func:`fa_hetdp.clients.policy.simulated_node_config`).

Node-config keys this module does not know are left alone (a drop-in's user has its own);
an unknown key under one of this module's prefixes (``allow-``, ``ledger-``,
``measurement-``, ``secagg-``, ``min-session-``; ``_`` read as ``-``) is refused, so a typo
does not silently fall back to a default (a consent to false).
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from fa_hetdp._types import MECHANISMS, PLACEMENTS, PRIVACY_UNITS, PROFILES
from fa_hetdp.dp.accounting import (
    CGM_BASELINE_LABEL,
    BudgetPlan,
    CalibratedRelease,
    PrivacySpent,
    privacy_spent,
)
from fa_hetdp.dp.budget import PrivacyBudget
from fa_hetdp.errors import FaHetdpError
from fa_hetdp.flowerkit.ledger import MAX_LEDGER_EPSILON
from fa_hetdp.protocol.plan import LABEL_PAPER_PROFILE, colluding_clients
from fa_hetdp.secagg.params import THREAT_MODELS

if TYPE_CHECKING:
    from fa_hetdp.flowerkit.ledger import NodeLedger
    from fa_hetdp.protocol.meta_plan import MetaPlan
    from fa_hetdp.protocol.plan import ProtocolPlan
    from fa_hetdp.protocol.silo_summaries import SiloPlan
    from fa_hetdp.protocol.two_arm import TwoArmPlan

__all__ = [
    "NODE_KEYS",
    "Assessment",
    "NodePolicy",
    "NodePolicyError",
    "PlanView",
    "ReleaseView",
    "assess",
    "default_ledger_path",
    "meta_view",
    "protocol_view",
    "releases_of",
    "silo_view",
]

# ---------------------------------------------------------------------------- keys
ALLOW_CENTRAL: Final = "allow-central-placement"
ALLOW_NON_DP: Final = "allow-non-dp"
MEASUREMENT_MAX_EPSILON: Final = "measurement-max-epsilon"
MIN_SESSION_SIZE: Final = "min-session-size"
DROPOUT_TOLERANCE: Final = "secagg-dropout-tolerance"
LEDGER_PATH: Final = "ledger-path"
LEDGER_MAX_EPSILON: Final = "ledger-max-epsilon"
LEDGER_MAX_DELTA: Final = "ledger-max-delta"
PRIVACY_UNIT: Final = "privacy-unit"
RELEASE_SILO_SUMMARIES: Final = "release-silo-summaries"
ALLOW_SEEDED_NOISE: Final = "allow-seeded-noise"
ALLOW_PUBLIC_ARM_SIZES: Final = "allow-public-arm-sizes"
THREAT_MODEL: Final = "secagg-threat-model"
ROSTER: Final = "secagg-roster"
IDENTITY_KEY: Final = "secagg-identity-key"
MIN_GAMMA: Final = "secagg-min-gamma"
DATA_PATH: Final = "data-path"
PARTITION_ID: Final = "partition-id"
NUM_PARTITIONS: Final = "num-partitions"

#: Every node-config key of fa-hetdp, with its default (words) and what it protects against.
NODE_KEYS: Final[Mapping[str, tuple[str, str]]] = {
    PARTITION_ID: ("none", "this node's partition of a scenario's data (trials)"),
    NUM_PARTITIONS: ("none", "the number of partitions of a scenario's data"),
    DATA_PATH: ("none", "the data owner's own file instead of a partition"),
    THREAT_MODEL: ("the run config's", "a server that deviates from the protocol"),
    ROSTER: ("none", "substituted or added clients (implies malicious-server)"),
    IDENTITY_KEY: ("none", "round-0 keys the server substitutes"),
    MIN_GAMMA: ("0", "colluders counted as honest"),
    DROPOUT_TOLERANCE: ("0", "sets min-session-size's default"),
    MIN_SESSION_SIZE: ("roster size minus allowed dropouts", "a session of colluders"),
    ALLOW_CENTRAL: ("false", "a server that asks for central noise"),
    ALLOW_NON_DP: ("false", "plans without a DP guarantee"),
    MEASUREMENT_MAX_EPSILON: ("10 (at ledger-max-delta)", "one costly measurement"),
    LEDGER_PATH: ("under the Flower home", "a restart that forgets what was spent"),
    LEDGER_MAX_EPSILON: ("10", "many measurements adding up"),
    LEDGER_MAX_DELTA: ("1e-5", "many measurements adding up"),
    PRIVACY_UNIT: ("none (drop-in: client)", "a weaker unit than the owner's"),
    RELEASE_SILO_SUMMARIES: ("true", "releasing the silo's own summaries"),
    ALLOW_SEEDED_NOISE: ("false", "noise whoever knows the seed removes"),
    ALLOW_PUBLIC_ARM_SIZES: ("false", "publishing its arm sizes (within-arm neighbours)"),
}
_PREFIXES: Final = ("allow-", "ledger-", "measurement-", "secagg-", "min-session-")
_FLWR_HOME: Final = "FLWR_HOME"
_DEFAULT_MAX_EPSILON: Final = 10.0
_DEFAULT_MAX_DELTA: Final = 1e-5
EPSILON_RTOL: Final = 1e-6
"""Relative slack on a recomputed epsilon against the stated one (the calibration's own)."""


class NodePolicyError(FaHetdpError, ValueError):
    """A node config the policy cannot use (one line naming every bad key)."""


# ---------------------------------------------------------------------------- the view
@dataclass(frozen=True)
class ReleaseView:
    """One counted release of a measurement, as the node sees it.

    Attributes
    ----------
    name : str
        The release's name in its plan.
    sensitivity : float
        Its L2 sensitivity for one unit, from the node's own values (its ``d``, its record
        count, the bounds).
    sigma : float
        The plan's total noise standard deviation of the release.
    share_std : float
        The noise standard deviation this node is asked to add to its contribution (``0.0``
        under central placement; ``sigma`` for a release of its own, the silo summaries).
    counts_for_privacy : bool
        False for post-processing noise (takes no budget).
    """

    name: str
    sensitivity: float
    sigma: float
    share_std: float
    counts_for_privacy: bool = True


@dataclass(frozen=True)
class PlanView:
    """What the node itself knows about a measurement before anything leaves it.

    Attributes
    ----------
    n : int
        The session size (the setup's id list; 1 for a release of the node's own).
    t : int
        The secure-aggregation threshold of the setup (0 without secure aggregation).
    threat_model : str
        The mode the session runs (``"honest-but-curious"`` or ``"malicious-server"``).
    gamma : float
        The corrupt fraction the node guards against (``NodeSecAgg.gamma``).
    roster_size : int or None
        The members of the node's roster (None: no roster).
    placement, profile, mechanism : str
        The plan's settings.
    epsilon, delta : float or None
        The stated budget (None for a plan that states none).
    noise : bool
        Whether the plan adds noise at all.
    unit : str
        The plan's privacy unit.
    releases : tuple of ReleaseView
        The releases of the whole measurement (every stage).
    not_dp : tuple of str
        Why the plan says it is not a DP guarantee (empty if it says it is one).
    session : bytes or None
        The session nonce.
    secure_sum : bool
        False for a release of the node's own (the silo summaries): no secure aggregation, the
        node's own noise is all the noise.
    name : str
        A label for the ledger.
    records : int or None
        The node's own record count, when the node states it: a client-level ledger then
        charges a record-level release by group privacy (``k`` records cost ``k mu``); None:
        such a release is refused.
    realised : tuple of (str, int)
        The noise shares a summation actually holds, per release, once the node has seen its
        unmask request (``survivors - c``: the survivors' shares less the colluders it guards
        against); a release not listed keeps :attr:`honest_shares` (the plan's ``n - c``).
    public_arm_sizes : bool
        A two-arm measurement (the scenario's ``[data] arm``; a plan of per-arm releases, or
        of the secure sums on reduced two-arm summaries): the node's arm sizes are published
        and the unit is one record replaced within its arm (refused unless the node says
        ``allow-public-arm-sizes = true``).
    """

    n: int
    t: int
    threat_model: str
    gamma: float
    roster_size: int | None
    placement: str
    profile: str
    mechanism: str
    epsilon: float | None
    delta: float | None
    noise: bool
    unit: str
    releases: tuple[ReleaseView, ...]
    not_dp: tuple[str, ...] = ()
    session: bytes | None = None
    secure_sum: bool = True
    name: str = "measurement"
    records: int | None = None
    realised: tuple[tuple[str, int], ...] = ()
    public_arm_sizes: bool = False

    @property
    def colluders(self) -> int:
        """``c = ceil(gamma |roster|)`` with a roster, else ``ceil(gamma n)`` (the session)."""
        base = self.roster_size if self.roster_size is not None else self.n
        return colluding_clients(self.gamma, base)

    @property
    def honest_shares(self) -> int:
        """Noise shares the node counts as honest: ``n - c`` (1: a release of its own)."""
        return self.n - self.colluders if self.secure_sum else 1


def releases_of(
    budget: BudgetPlan, *, honest_shares: int | None, placement: str = "distributed"
) -> tuple[ReleaseView, ...]:
    """Return the releases of a plan's budget as a node's view of them.

    ``honest_shares`` is the plan's ``t`` (each share is ``sigma/sqrt(t)``, as the plans of
    :mod:`fa_hetdp.protocol` make it); None: a release of the node's own (the share is the
    whole ``sigma``). Central placement: no share. The sensitivities are the plan's, which the
    node recomputed itself from its own ``d`` and counts when it built the plan.
    """
    out: list[ReleaseView] = []
    for r in budget.releases:
        if placement == "central":
            share = 0.0
        elif honest_shares is None:
            share = r.sigma
        else:
            share = r.sigma / math.sqrt(honest_shares)
        out.append(ReleaseView(r.name, r.sensitivity, r.sigma, share, r.counts_for_privacy))
    return tuple(out)


def protocol_view(
    plan: ProtocolPlan,
    *,
    t: int,
    threat_model: str,
    gamma: float,
    roster_size: int | None,
    session: bytes | None,
    name: str = "measurement",
    records: int | None = None,
) -> PlanView:
    """Return the node's view of the paper protocol's plan (our app and the drop-in).

    ``plan`` is the plan the node built itself (``plan_protocol`` on the session's settings,
    ``n`` from the key directory, its own ``d``); ``t`` the setup's secure-aggregation
    threshold; ``threat_model``, ``gamma`` and ``roster_size`` the node's
    (:class:`~fa_hetdp.flowerkit.settings.NodeSecAgg`) but the mode the session runs.
    """
    config = plan.config
    return PlanView(
        n=plan.n,
        t=t,
        threat_model=threat_model,
        gamma=gamma,
        roster_size=roster_size,
        placement=config.placement,
        profile=config.profile,
        mechanism=config.mechanism,
        epsilon=config.epsilon,
        delta=config.delta,
        noise=True,
        unit=plan.privacy_unit,
        releases=releases_of(plan.budget, honest_shares=plan.t, placement=config.placement),
        not_dp=plan.not_dp_because,
        session=session,
        name=name,
        records=records,
    )


def meta_view(
    plan: MetaPlan,
    *,
    t: int,
    threat_model: str,
    gamma: float,
    roster_size: int | None,
    session: bytes | None,
    name: str = "meta-analysis",
    records: int | None = None,
) -> PlanView:
    """Return the node's view of a meta-analysis' secure sums (:func:`protocol_view`'s sibling).

    A plan of reduced summaries (a two-arm MD or RD entered as one summary per silo,
    :mod:`fa_hetdp.protocol.two_arm_sums`: its record bound of ``U`` is not the records' 1)
    publishes the node's arm sizes (:attr:`PlanView.public_arm_sizes`). The node builds that
    plan itself, from its own data: it reduces its records when the session keeps their arms
    (:mod:`fa_hetdp.clients.meta`), whatever the server's request says, so a server cannot
    avoid the check by not saying that the run compares two arms.
    """
    s = plan.settings
    budget = plan.budget
    return PlanView(
        n=plan.n,
        t=t,
        threat_model=threat_model,
        gamma=gamma,
        roster_size=roster_size,
        placement=s.placement,
        profile="bounded",
        mechanism=s.mechanism,
        epsilon=plan.epsilon if budget is not None else None,
        delta=plan.delta if budget is not None else None,
        noise=budget is not None,
        unit=s.privacy_unit,
        releases=()
        if budget is None
        else releases_of(budget, honest_shares=plan.t, placement=s.placement),
        not_dp=() if budget is None else budget.not_dp,
        session=session,
        name=name,
        records=records,
        public_arm_sizes=plan.two_arm,
    )


def silo_view(
    plan: SiloPlan | TwoArmPlan, *, session: bytes | None, name: str = "silo summaries"
) -> PlanView:
    """Return the node's view of its own silo-summaries release (no secure aggregation).

    The node's noise is all the noise (``share = sigma``); the budget's releases have unit
    sensitivity and ``sigma = 1/mu_k``, the ratio every silo's own bounds keep. A two-arm plan
    publishes the node's arm sizes (:attr:`PlanView.public_arm_sizes`).
    """
    from fa_hetdp.protocol.two_arm import TwoArmPlan

    budget = plan.budget
    return PlanView(
        n=1,
        t=0,
        threat_model="honest-but-curious",
        gamma=0.0,
        roster_size=None,
        placement=plan.settings.placement,
        profile="bounded",
        mechanism=plan.settings.mechanism,
        epsilon=plan.epsilon if budget is not None else None,
        delta=plan.delta if budget is not None else None,
        noise=budget is not None,
        unit=plan.privacy_unit,
        releases=() if budget is None else releases_of(budget, honest_shares=None),
        not_dp=() if budget is None else budget.not_dp,
        session=session,
        secure_sum=False,
        name=name,
        public_arm_sizes=isinstance(plan, TwoArmPlan),
    )


@dataclass(frozen=True)
class Assessment:
    """The node's own reading of a measurement's noise.

    Attributes
    ----------
    colluders, honest_shares : int
        ``c`` and the shares counted as honest.
    effective : BudgetPlan
        The releases with the noise the node counts (``share sqrt(n - c)``, or the plan's
        ``sigma`` under an allowed central placement), for the ledger.
    epsilon : float
        The epsilon that noise buys at the stated ``delta`` (``inf``: no noise or no
        stated budget).
    epsilon_at_node_delta : float
        The same at the node's ``delta`` (``ledger-max-delta``).
    """

    colluders: int
    honest_shares: int
    effective: BudgetPlan
    epsilon: float
    epsilon_at_node_delta: float


def _spent(plan: BudgetPlan) -> PrivacySpent | None:
    try:
        return privacy_spent(plan)
    except (ArithmeticError, ValueError):  # a noise so small that nothing converts
        return None


def assess(view: PlanView, node_delta: float) -> Assessment:
    """Recompute the noise of ``view`` and the epsilon it buys, from the node's view only.

    Each counted release gets ``share_std sqrt(n - c)`` (``c`` against the roster: the
    colluders know and subtract their shares) -- ``share_std sqrt(survivors - c)`` once its
    summation's survivors are known (:attr:`PlanView.realised`), and never more than the
    ``(sigma/share_std)^2`` honest shares the plan sizes its shares for (a node whose own
    ``gamma`` counts fewer colluders than the run's charges the epsilon the run states, not
    less) -- or the plan's ``sigma``
    under central placement (trusted; the policy refuses it unless the node allows it). The
    releases then compose as every plan of the project does
    (:func:`~fa_hetdp.dp.accounting.privacy_spent`: Gaussian DP, zCDP for the discrete
    mechanisms).
    """
    h = max(view.honest_shares, 0)
    realised = dict(view.realised)
    releases = []
    for r in view.releases:
        if view.placement == "central" and view.secure_sum:
            sigma = r.sigma
        else:
            # never more honest shares than the plan sizes its shares for (sigma^2/share^2):
            # a node counting fewer colluders than the run charges what the run states
            planned = (r.sigma / r.share_std) ** 2 if r.share_std > 0 else math.inf
            sigma = r.share_std * math.sqrt(max(min(realised.get(r.name, h), h, planned), 0))
        releases.append(
            CalibratedRelease(r.name, r.sensitivity, sigma, None, None, r.counts_for_privacy)
        )
    mechanism = view.mechanism if view.mechanism in MECHANISMS else "agm"
    stated_delta = view.delta if view.delta is not None and 0 < view.delta < 1 else node_delta
    stated_eps = view.epsilon if view.epsilon is not None and view.epsilon > 0 else 1.0
    effective = BudgetPlan(
        epsilon=stated_eps,
        delta=stated_delta,
        mechanism=mechanism,  # type: ignore[arg-type]  # one of the four, checked above
        composition="gdp",
        releases=tuple(releases),
    )
    if not view.noise or not any(r.counts_for_privacy for r in releases):
        eps = node_eps = math.inf if view.noise is False else 0.0
    else:
        at_stated = _spent(effective)
        at_node = _spent(replace(effective, delta=node_delta))
        eps = math.inf if at_stated is None or at_stated.epsilon is None else at_stated.epsilon
        node_eps = math.inf if at_node is None or at_node.epsilon is None else at_node.epsilon
    return Assessment(view.colluders, h, effective, eps, node_eps)


# ---------------------------------------------------------------------------- the policy
def _flower_home() -> Path:
    home = os.environ.get(_FLWR_HOME)
    return Path(home) if home else Path.home() / ".flwr"


def default_ledger_path(node_config: Mapping[str, Any], home: Path | None = None) -> Path:
    """Return the ledger file of a node without ``ledger-path``: one per data owner.

    ``<Flower home>/fa-hetdp/ledgers/<id>.json``, ``<id>`` the first 16 hex digits of the
    SHA-256 of what names the owner: its identity key's path, else its data file's, else its
    partition of the scenario (several SuperNodes on one host keep separate ledgers).
    """
    base = (home if home is not None else _flower_home()) / "fa-hetdp" / "ledgers"
    for key in (IDENTITY_KEY, DATA_PATH):
        value = node_config.get(key)
        if isinstance(value, str) and value:
            owner = f"{key}={Path(value).expanduser().resolve()}"
            break
    else:
        owner = f"partition={node_config.get(PARTITION_ID)!r}/{node_config.get(NUM_PARTITIONS)!r}"
    return base / f"{hashlib.sha256(owner.encode()).hexdigest()[:16]}.json"


def _bool(node_config: Mapping[str, Any], key: str, default: bool, bad: list[str]) -> bool:
    value = node_config.get(key, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    bad.append(f"{key} must be true or false, got {value!r}")
    return default


def _number(
    node_config: Mapping[str, Any],
    key: str,
    default: float,
    bad: list[str],
    *,
    low: float,
    high: float = math.inf,
    low_open: bool = False,
    high_open: bool = False,
    what: str,
) -> float:
    value = node_config.get(key, default)
    number = math.nan
    if not isinstance(value, bool) and isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:
            number = math.nan
    inside = (
        math.isfinite(number)
        and (number > low if low_open else number >= low)
        and (number < high if high_open else number <= high)
    )
    if not inside:
        bad.append(f"{key} must be {what}, got {value!r}")
        return default
    return number


def _text(node_config: Mapping[str, Any], key: str, bad: list[str]) -> str | None:
    value = node_config.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        bad.append(f"{key} must be a string, got {value!r}")
        return None
    return value


@dataclass(frozen=True)
class NodePolicy:
    """A data owner's policy (its node config's keys; the module docstring).

    Attributes
    ----------
    allow_central_placement, allow_non_dp : bool
        What the node accepts beyond its safe defaults (both false).
    measurement_max_epsilon : float
        The largest epsilon one measurement may cost, at :attr:`ledger_max_delta`.
    min_session_size : int or None
        The smallest session the node joins (None: the default of :meth:`session_floor`).
    dropout_tolerance : float
        The fraction of the roster that may be absent from a session (the default floor).
    ledger_path : Path
        The node's privacy ledger.
    ledger_max_epsilon, ledger_max_delta : float
        The ledger's cap.
    privacy_unit : str or None
        The node's unit of privacy (None: not pinned; its ledger then holds record units).
    release_silo_summaries, allow_seeded_noise : bool
        Today's keys (their readers: :mod:`fa_hetdp.flowerkit.settings`,
        :mod:`fa_hetdp.flowerkit.measurement`).
    allow_public_arm_sizes : bool
        Whether the node accepts a two-arm release (its arm sizes public, within-arm
        neighbours; default false): :meth:`check`.
    threat_model : str or None
        The node's pinned threat model.
    min_gamma : float or None
        The node's ``secagg-min-gamma``.
    roster : bool
        Whether the node holds a roster (``secagg-roster``).
    """

    ledger_path: Path
    allow_central_placement: bool = False
    allow_non_dp: bool = False
    measurement_max_epsilon: float = _DEFAULT_MAX_EPSILON
    min_session_size: int | None = None
    dropout_tolerance: float = 0.0
    ledger_max_epsilon: float = _DEFAULT_MAX_EPSILON
    ledger_max_delta: float = _DEFAULT_MAX_DELTA
    privacy_unit: str | None = None
    release_silo_summaries: bool = True
    allow_seeded_noise: bool = False
    allow_public_arm_sizes: bool = False
    threat_model: str | None = None
    min_gamma: float | None = None
    roster: bool = False

    @classmethod
    def from_node_config(
        cls, node_config: Mapping[str, Any], *, home: Path | None = None
    ) -> NodePolicy:
        """Read and validate the node config's keys (every problem in one line).

        ``home``: the Flower home of the default ledger path (default ``$FLWR_HOME``, else
        ``~/.flwr``).

        Raises
        ------
        NodePolicyError
            One line listing every bad key and what is wrong with it.
        """
        bad: list[str] = []
        for key in node_config:
            dashed = key.replace("_", "-")
            if key in NODE_KEYS or not dashed.startswith(_PREFIXES):
                continue
            if dashed in NODE_KEYS:
                bad.append(f"{key} is not a key of fa-hetdp (its keys use '-': {dashed})")
            else:
                known = ", ".join(k for k in NODE_KEYS if k.startswith(_PREFIXES))
                bad.append(f"{key} is not a key of fa-hetdp (known: {known})")
        central = _bool(node_config, ALLOW_CENTRAL, False, bad)
        non_dp = _bool(node_config, ALLOW_NON_DP, False, bad)
        silo = _bool(node_config, RELEASE_SILO_SUMMARIES, True, bad)
        seeded = node_config.get(ALLOW_SEEDED_NOISE, False)
        if not isinstance(seeded, bool):
            bad.append(f"{ALLOW_SEEDED_NOISE} must be true or false, got {seeded!r}")
            seeded = False
        arm_sizes = _bool(node_config, ALLOW_PUBLIC_ARM_SIZES, False, bad)
        measure_eps = _number(
            node_config,
            MEASUREMENT_MAX_EPSILON,
            _DEFAULT_MAX_EPSILON,
            bad,
            low=0.0,
            low_open=True,
            what="a number > 0",
        )
        cap_problems = len(bad)
        ledger_eps = _number(
            node_config,
            LEDGER_MAX_EPSILON,
            _DEFAULT_MAX_EPSILON,
            bad,
            low=0.0,
            high=MAX_LEDGER_EPSILON,
            low_open=True,
            what=f"a number in (0, {MAX_LEDGER_EPSILON:g}]",
        )
        ledger_delta = _number(
            node_config,
            LEDGER_MAX_DELTA,
            _DEFAULT_MAX_DELTA,
            bad,
            low=0.0,
            high=1.0,
            low_open=True,
            high_open=True,
            what="a number in (0, 1)",
        )
        if len(bad) == cap_problems:  # both parts of the cap read: can it be a budget?
            try:
                PrivacyBudget(ledger_eps, ledger_delta)
            except ValueError as exc:
                bad.append(f"{LEDGER_MAX_EPSILON} = {ledger_eps:g} cannot be a budget ({exc})")
        dropout = _number(
            node_config,
            DROPOUT_TOLERANCE,
            0.0,
            bad,
            low=0.0,
            high=1.0,
            high_open=True,
            what="a fraction in [0, 1) of the roster that may be absent",
        )
        min_session: int | None = None
        raw_min = node_config.get(MIN_SESSION_SIZE)
        if raw_min is not None:
            if isinstance(raw_min, bool) or not isinstance(raw_min, int) or raw_min < 2:
                bad.append(f"{MIN_SESSION_SIZE} must be an integer >= 2, got {raw_min!r}")
            else:
                min_session = raw_min
        unit = _text(node_config, PRIVACY_UNIT, bad)
        if unit is not None and unit not in PRIVACY_UNITS:
            bad.append(f"{PRIVACY_UNIT} must be one of {', '.join(PRIVACY_UNITS)}, got {unit!r}")
            unit = None
        model = _text(node_config, THREAT_MODEL, bad)
        if model is not None and model not in THREAT_MODELS:
            bad.append(f"{THREAT_MODEL} must be one of {', '.join(THREAT_MODELS)}, got {model!r}")
            model = None
        gamma: float | None = None
        if MIN_GAMMA in node_config:
            gamma = _number(
                node_config,
                MIN_GAMMA,
                0.0,
                bad,
                low=0.0,
                high=1.0,
                high_open=True,
                what="a number in [0, 1)",
            )
        roster = _text(node_config, ROSTER, bad)
        _text(node_config, IDENTITY_KEY, bad)
        ledger = _text(node_config, LEDGER_PATH, bad)
        if ledger is not None and Path(ledger).expanduser().is_dir():
            bad.append(f"{LEDGER_PATH} must name a file, got the directory {ledger!r}")
        if bad:
            raise NodePolicyError("node-config is invalid: " + "; ".join(bad))
        path = (
            Path(ledger).expanduser()
            if ledger is not None
            else default_ledger_path(node_config, home)
        )
        return cls(
            ledger_path=path,
            allow_central_placement=central,
            allow_non_dp=non_dp,
            measurement_max_epsilon=measure_eps,
            min_session_size=min_session,
            dropout_tolerance=dropout,
            ledger_max_epsilon=ledger_eps,
            ledger_max_delta=ledger_delta,
            privacy_unit=unit,
            release_silo_summaries=silo,
            allow_seeded_noise=seeded,
            allow_public_arm_sizes=arm_sizes,
            threat_model=model,
            min_gamma=gamma,
            roster=roster is not None,
        )

    @property
    def ledger_unit(self) -> str:
        """The unit the node's ledger holds: its ``privacy-unit``, else ``"record"``.

        A client-level guarantee is also a record-level one at the same epsilon, so a
        record ledger accounts for every release; a node that pins ``"client"`` keeps a
        client ledger (a record-level release then needs the node's record count).
        """
        return self.privacy_unit or "record"

    def session_floor(self, roster_size: int | None) -> int:
        """Return the smallest session the node joins.

        ``min-session-size``, else the roster's size minus ``floor(secagg-dropout-tolerance
        |roster|)`` (2 without a roster).
        """
        if self.min_session_size is not None:
            return self.min_session_size
        if roster_size is None:
            return 2
        return roster_size - math.floor(self.dropout_tolerance * roster_size + 1e-9)

    def ledger(self) -> NodeLedger:
        """Return the node's ledger (:class:`~fa_hetdp.flowerkit.ledger.NodeLedger`)."""
        from fa_hetdp.flowerkit.ledger import NodeLedger

        return NodeLedger(
            self.ledger_path, self.ledger_unit, self.ledger_max_epsilon, self.ledger_max_delta
        )

    def not_dp(self, view: PlanView) -> list[str]:
        """Why ``view`` is not a DP guarantee, as the node reads it (empty: it is one)."""
        out: list[str] = []
        said: list[str] = []  # the plan's own labels of what the node already said
        if view.profile == "paper":
            out.append("the 'paper' profile (its weighted sensitivities ignore the weights)")
            said.append(LABEL_PAPER_PROFILE)
        if view.mechanism == "cgm" and view.epsilon is not None and view.epsilon >= 1.0:
            out.append(f"CGM at epsilon = {view.epsilon:g} >= 1 (Thm 2.9 holds below 1)")
            said.append(CGM_BASELINE_LABEL)
        if not view.noise:
            out.append("noise = false (no noise at all)")
        if view.epsilon is None or view.delta is None:
            out.append("no (epsilon, delta) stated")
        out.extend(why for why in view.not_dp if not why.startswith(tuple(said)))
        return out

    def check(self, view: PlanView, *, ledger: NodeLedger | None = None) -> list[str]:
        """Return why the node refuses ``view`` (one line each; empty: it joins).

        ``ledger``: the node's ledger, for the nonce and what is left (both refused here,
        before anything leaves the node; :meth:`NodeLedger.charge` refuses again at the
        first release-bearing step, under its lock).
        """
        out: list[str] = []
        n, t, c = view.n, view.t, view.colluders
        if view.placement not in PLACEMENTS:
            out.append(f"placement: the server asks for {view.placement!r}, not a placement")
        if view.profile not in PROFILES:
            out.append(f"profile: the server asks for {view.profile!r}, not a profile")
        if view.secure_sum:
            if view.placement == "central" and not self.allow_central_placement:
                out.append(
                    f"{ALLOW_CENTRAL} = false: the server asks for central noise (it would "
                    "see the exact sum); only distributed noise"
                )
            if view.roster_size is not None and view.threat_model != "malicious-server":
                out.append(
                    f"{ROSTER}: a node with a roster runs only the malicious-server mode; "
                    f"the server asks for {view.threat_model!r}"
                )
            where = (
                f"ceil(gamma |roster|) = ceil({view.gamma:g} x {view.roster_size})"
                if view.roster_size is not None
                else f"ceil(gamma n) = ceil({view.gamma:g} x {n})"
            )
            if view.threat_model == "malicious-server" and t < (n + c) // 2 + 1:
                out.append(
                    f"{MIN_GAMMA}: the server asks for t = {t} with n = {n}; c = {where} = {c} "
                    f"colluders need t >= floor((n + c)/2) + 1 = {(n + c) // 2 + 1}"
                )
            if t < c + 1:
                out.append(
                    f"{MIN_GAMMA}: the server asks for t = {t}; c = {where} = {c} colluders "
                    f"need t >= c + 1 = {c + 1}"
                )
            floor = self.session_floor(view.roster_size)
            if n < floor:
                key = MIN_SESSION_SIZE if self.min_session_size is not None else DROPOUT_TOLERANCE
                roster = "" if view.roster_size is None else f"; roster of {view.roster_size}"
                out.append(
                    f"{MIN_SESSION_SIZE}: the server asks for a session of n = {n}, below "
                    f"{floor} ({key}{roster})"
                )
        elif view.placement == "central":
            out.append("placement: a release of the node's own cannot have central noise")
        if view.public_arm_sizes and not self.allow_public_arm_sizes:
            out.append(
                f"{ALLOW_PUBLIC_ARM_SIZES} = false: the server asks for a two-arm release "
                "(this node's arm sizes public, one record replaced within its arm)"
            )
        not_dp = self.not_dp(view)
        if not_dp and not self.allow_non_dp:
            out.extend(f"{ALLOW_NON_DP} = false: the server asks for {why}" for why in not_dp)
        if not not_dp:
            out.extend(self._noise(view))
        if ledger is not None:
            out.extend(ledger.refusals(view, self))
        return out

    def _noise(self, view: PlanView) -> list[str]:
        """Check the recomputed noise against the stated epsilon and the per-measurement cap."""
        out: list[str] = []
        if view.epsilon is None or view.delta is None:  # not DP: refused by not_dp()
            return out
        a = assess(view, self.ledger_max_delta)
        if view.secure_sum and a.honest_shares < 1:
            return out  # refused above (t >= c + 1 needs n >= c + 1)
        if view.epsilon > self.measurement_max_epsilon:
            out.append(
                f"{MEASUREMENT_MAX_EPSILON} = {self.measurement_max_epsilon:g}: the server asks "
                f"for epsilon = {view.epsilon:g} (delta = {view.delta:g})"
            )
        elif a.epsilon_at_node_delta > self.measurement_max_epsilon * (1.0 + EPSILON_RTOL):
            out.append(
                f"{MEASUREMENT_MAX_EPSILON} = {self.measurement_max_epsilon:g}: the plan's noise "
                f"gives epsilon = {a.epsilon_at_node_delta:.4g} at delta = "
                f"{self.ledger_max_delta:g}"
            )
        if a.epsilon > view.epsilon * (1.0 + EPSILON_RTOL):
            if not view.secure_sum:
                shares = "its own noise"
            elif view.placement == "central":
                shares = "the server's central noise"
            else:
                shares = f"{a.honest_shares} honest shares (n - c = {view.n} - {a.colluders})"
            out.append(
                f"noise: the plan states epsilon = {view.epsilon:g} at delta = "
                f"{view.delta:g}, but the noise the node is asked for ({shares}) gives "
                f"epsilon = {a.epsilon:.4g}; refused"
            )
        return out
