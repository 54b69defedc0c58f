"""The node's policy and privacy ledger at its steps (issue 27), for our app and the drop-in.

Both apps run the same handlers (:mod:`fa_hetdp.clients.app`), so this is where a data owner's
guarantee meets a session:

- at the first step (``advertise_keys``) the node reads its policy from its node config only
  (:meth:`~fa_hetdp.flowerkit.node_policy.NodePolicy.from_node_config`), builds its own view of
  the measurement (``n``, ``t`` and the nonce from the setup; ``gamma`` and the roster's size
  from :class:`~fa_hetdp.flowerkit.settings.NodeSecAgg`; the plan it builds itself), and
  refuses it with one line (every reason, joined by ``"; "``: the server sees that line), or
  records the session's nonce in its ledger (a replay is refused, after a restart too);
- at every release-bearing step (the paper protocol's masked inputs, the meta-analysis'
  rounds, the silo summaries) it checks the view again (``n`` now from the key directory) and
  charges the whole plan to its ledger *before* the reply is built: the first charge of a
  session stays, a later step that asks for more is refused (:meth:`NodeLedger.charge_view`).

With a roster the node counts ``c = ceil(gamma |roster|)`` colluders and plans its own noise
share for ``n - c`` honest shares (:func:`node_protocol_config`, :func:`node_meta_settings`):
a session smaller than the roster then gets more noise from each node, never less.

In a Flower simulation (the ClientApp runs in a Ray actor: no SuperNode, no node config of its
own; one person runs every party) our app's simulated nodes take their policy from the
scenario's ``[nodes]`` table (:class:`~fa_hetdp.config.schema.NodesSpec`, e.g.
``measurement_max_epsilon = 20``; a key left out is the node's default; a two-arm scenario's
nodes consent to its public arm sizes, ``allow-public-arm-sizes``) and keep one ledger per
run (``<Flower home>/fa-hetdp/ledgers/simulation/run-<id>/``). ``fa-hetdp run`` checks the
same policy before Flower starts (:func:`simulation_refusals`), so a scenario that asks for more
than its nodes accept is refused with the key to raise, not by every node at its first step.
Everywhere else (a SuperNode, the in-process nodes of the tests, the drop-in, whose settings
are the server's message) only the node config counts.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, NoReturn

from flwr.app import ConfigRecord, Context

from fa_hetdp.clients.session import SENT_SETTINGS, analysis_of
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.dp.budget import PrivacyBudget
from fa_hetdp.errors import BaselineWarning, FaHetdpError, PrivacyParameterError
from fa_hetdp.flowerkit.ledger import LedgerError, NodeLedger
from fa_hetdp.flowerkit.node_policy import (
    ALLOW_PUBLIC_ARM_SIZES,
    EPSILON_RTOL,
    LEDGER_MAX_EPSILON,
    LEDGER_PATH,
    MEASUREMENT_MAX_EPSILON,
    NodePolicy,
    NodePolicyError,
    PlanView,
    assess,
    default_ledger_path,
    meta_view,
    protocol_view,
    silo_view,
)
from fa_hetdp.flowerkit.settings import RunSettings, meta_plan
from fa_hetdp.flowerkit.steps import State
from fa_hetdp.protocol.meta_plan import MetaPlan
from fa_hetdp.protocol.plan import ProtocolPlan, colluding_clients, honest_shares, plan_protocol
from fa_hetdp.protocol.silo_summaries import SiloPlan
from fa_hetdp.secagg.client import SecAggClient

if TYPE_CHECKING:  # imported where a two-arm run needs it (scipy.stats)
    from fa_hetdp.protocol.two_arm import TwoArmPlan

__all__ = [
    "NodeRefusedError",
    "charge",
    "flower_simulation",
    "node_meta_settings",
    "node_policy",
    "node_protocol_config",
    "node_protocol_plan",
    "simulated_node_config",
    "simulation_refusals",
    "start_session",
]

log = logging.getLogger("flwr.fa_hetdp.client")

NO_ROSTER: Final = -1
"""``State.ROSTER_SIZE`` of a node without a roster."""


class NodeRefusedError(FaHetdpError, ValueError):
    """The node's policy or ledger refuses the measurement (one line: every reason)."""


def flower_simulation() -> bool:
    """Whether this ClientApp runs in a Flower simulation (a Ray actor; never a SuperNode).

    Ray is looked up, never imported (the lean install has none); any doubt: not a simulation.
    """
    ray = sys.modules.get("ray")
    if ray is None:
        return False
    try:
        return bool(ray.is_initialized()) and ray.get_runtime_context().get_actor_id() is not None
    except Exception:  # any doubt: not a simulation
        return False


def simulated_node_config(node_config: Mapping[str, Any], settings: RunSettings) -> dict[str, Any]:
    """Return a simulated node's config: the scenario's ``[nodes]`` policy, then its own keys.

    A simulated node has no node config of its own (Flower sets its partition only) and one
    person runs every party, so the scenario states what its nodes accept
    (:class:`~fa_hetdp.config.schema.NodesSpec`); a key it leaves out is the node's default.
    A two-arm scenario (``[data] arm``) is that person's own choice of within-arm neighbours
    with the arm sizes public: its simulated nodes say ``allow-public-arm-sizes = true``
    (any other scenario's leave the key out, the node's default: false).
    """
    arms = {ALLOW_PUBLIC_ARM_SIZES: True} if settings.scenario.data.arm is not None else {}
    return {**settings.scenario.nodes.node_config(), **arms, **node_config}


def node_policy(context: Context, settings: RunSettings, *, dropin: bool = False) -> NodePolicy:
    """Read the node's policy from its node config (our app in a simulation: the scenario's too).

    ``dropin``: the settings are the server's message (a drop-in measurement): only the node
    config counts, in a simulation too.

    Raises
    ------
    NodePolicyError
        One line naming every bad key.
    """
    if dropin or not flower_simulation():
        return NodePolicy.from_node_config(context.node_config)
    config = simulated_node_config(context.node_config, settings)
    policy = NodePolicy.from_node_config(config)
    if LEDGER_PATH in config:
        return policy
    path = default_ledger_path(config)  # one ledger per simulated node and per run
    path = path.parent / "simulation" / f"run-{context.run_id}" / path.name
    return dataclasses.replace(policy, ledger_path=path)


def _policy(context: Context, settings: RunSettings, *, dropin: bool) -> NodePolicy:
    """:func:`node_policy`, a node config it cannot read refused as one logged line."""
    try:
        return node_policy(context, settings, dropin=dropin)
    except NodePolicyError as exc:
        _refused([str(exc)], "the session")


def _refused(reasons: list[str], where: str) -> NoReturn:
    """Log each reason as one line of the node's log; raise them as one (the server's reason)."""
    for reason in reasons:
        log.warning("fa-hetdp node policy (%s): %s", where, reason)
    raise NodeRefusedError(f"node policy refuses {where}: " + "; ".join(reasons))


def _refuse(reasons: list[str], where: str) -> None:
    if reasons:
        _refused(reasons, where)


def _ledger(policy: NodePolicy) -> NodeLedger:
    try:
        return policy.ledger()
    except LedgerError as exc:  # a file that is not a ledger: never reset, refused
        _refused([str(exc).replace("\n", " ")], "the session")


# ---------------------------------------------------------------------------- the plans
def node_protocol_config(
    config: ProtocolConfig, n: int, gamma: float, roster_size: int | None
) -> ProtocolConfig:
    """Return ``config`` with ``min_honest_clients = n - c``, ``c`` counted against the roster.

    Without a roster, or under central placement, ``config`` itself. With one, the node's
    noise share is sized for the ``n - ceil(gamma |roster|)`` honest shares it counts (never
    more shares than the server's plan counts: a larger share, more noise); a session that
    leaves no honest share keeps the server's plan (the policy refuses it).
    """
    if roster_size is None or config.placement != "distributed":
        return config
    h = n - colluding_clients(gamma, roster_size)
    try:
        current = honest_shares(config, n)
    except ValueError:
        return config  # plan_protocol raises the same, with its reason
    if 1 <= h < current:
        return dataclasses.replace(config, min_honest_clients=h)
    return config


def node_protocol_plan(
    settings: RunSettings,
    *,
    n: int,
    d: int,
    gamma: float,
    roster_size: int | None,
    floor: float | None = None,
) -> ProtocolPlan:
    """Return the paper protocol's plan as the node builds it (:func:`node_protocol_config`)."""
    config = node_protocol_config(settings.protocol, n, gamma, roster_size)
    return plan_protocol(config, n=n, d=d, floor=floor)


def node_meta_settings(
    settings: RunSettings, n: int, gamma: float, roster_size: int | None
) -> RunSettings:
    """Return ``settings`` with the corrupt fraction the node counts (``c/n``, ``c`` the roster's).

    A meta-analysis plans ``n - ceil(gamma n)`` honest shares; with a roster the node counts
    ``c = ceil(gamma |roster|)`` colluders, so it plans at ``gamma' = c / n`` when that is more.
    """
    if roster_size is None or settings.protocol.placement != "distributed" or n < 1:
        return settings
    c = colluding_clients(gamma, roster_size)
    if c >= n or colluding_clients(settings.corrupt_fraction, n) >= c:
        return settings
    return dataclasses.replace(settings, corrupt_fraction=c / n)


def node_meta_plan(
    settings: RunSettings, counts: list[int], d: int, record: ConfigRecord
) -> MetaPlan:
    """Return the meta-analysis plan the node builds for round A's counts (its own ``c``)."""
    gamma, roster = _saved(record)
    return meta_plan(node_meta_settings(settings, len(counts), gamma, roster), counts, d)


# ---------------------------------------------------------------------------- the steps
def _saved(record: ConfigRecord) -> tuple[float, int | None]:
    gamma = record.get(State.NODE_GAMMA)
    roster = record.get(State.ROSTER_SIZE)
    if not isinstance(gamma, float) or not isinstance(roster, int) or isinstance(roster, bool):
        raise RuntimeError("corrupt protocol state: the node's gamma and roster are missing")
    return gamma, None if roster == NO_ROSTER else roster


def session_view(
    settings: RunSettings,
    *,
    n: int,
    t: int,
    session: bytes | None,
    threat_model: str,
    gamma: float,
    roster_size: int | None,
    d: int,
    meta: bool,
) -> PlanView:
    """Return the node's view of a session at its first step (:func:`start_session`).

    The paper protocol: the plan the node builds itself for ``n`` and its own ``d``. A
    meta-analysis' plan needs round A's counts: its view has no releases yet (the stated
    budget and settings are checked; the plan is checked and charged at round A). A scenario
    with ``[data] arm`` (two-arm effects) publishes the node's arm sizes in the reply to this
    step: the view says so (:attr:`~fa_hetdp.flowerkit.node_policy.PlanView.public_arm_sizes`),
    and a node whose config does not allow it refuses here, before its reply is built.

    Raises
    ------
    NodeRefusedError
        The node cannot plan the session (the planner's reason), logged as one line.
    """
    arms = settings.scenario.data.arm is not None
    if meta:
        p = settings.protocol
        return PlanView(
            n=n,
            t=t,
            threat_model=threat_model,
            gamma=gamma,
            roster_size=roster_size,
            placement=p.placement,
            profile="bounded",
            mechanism=p.mechanism,
            epsilon=p.epsilon,
            delta=p.delta,
            noise=True,
            unit=str(p.setting("privacy_unit")),
            releases=(),
            session=session,
            name="meta-analysis",
            public_arm_sizes=arms,
        )
    try:
        with warnings.catch_warnings():  # a plan that is not DP: the policy says so itself
            warnings.simplefilter("ignore", BaselineWarning)
            plan = node_protocol_plan(settings, n=n, d=d, gamma=gamma, roster_size=roster_size)
    except ValueError as exc:  # no plan for this session: refused with the planner's reason
        _refused([f"no plan for this session: {exc}"], "the session")
    view = protocol_view(
        plan,
        t=t,
        threat_model=threat_model,
        gamma=gamma,
        roster_size=roster_size,
        session=session,
    )
    return dataclasses.replace(view, public_arm_sizes=arms)


def start_session(
    context: Context,
    settings: RunSettings,
    setup: Mapping[str, Any],
    *,
    threat_model: str,
    gamma: float,
    roster_size: int | None,
    d: int,
    meta: bool,
    dropin: bool = False,
) -> None:
    """Check the node's view at the first step of the session, then record its nonce.

    ``setup`` is the secure aggregation's setup message (its ``session``, ``num_clients``
    and ``threshold``); ``threat_model``, ``gamma`` and ``roster_size`` the node's
    (:class:`~fa_hetdp.flowerkit.settings.NodeSecAgg`); ``dropin``: the settings are the
    server's message (:func:`node_policy`). The view: :func:`session_view`.

    Raises
    ------
    NodeRefusedError
        One line: every reason of the policy and the ledger (a replayed nonce), or a node
        config the policy cannot read.
    """
    from fa_hetdp.secagg.messages import SetupMessage

    policy = _policy(context, settings, dropin=dropin)
    msg = SetupMessage.from_dict(setup)
    nonce = msg.session
    view = session_view(
        settings,
        n=msg.num_clients,
        t=msg.threshold,
        session=nonce,
        threat_model=threat_model,
        gamma=gamma,
        roster_size=roster_size,
        d=d,
        meta=meta,
    )
    ledger = _ledger(policy)
    _refuse(policy.check(view, ledger=ledger), "the session")
    try:
        ledger.begin(nonce)
    except LedgerError as exc:
        _refuse([str(exc)], "the session")


def simulation_refusals(settings: RunSettings, d: int) -> list[str]:
    """Return why our app's simulated nodes would refuse this run (empty: they all join).

    ``fa-hetdp run`` calls it before Flower starts: the policy of :func:`simulated_node_config`
    (the scenario's ``[nodes]``), the view a simulated node has at its first step (``n`` the
    run's clients, ``t`` its threshold; a malicious-server simulation's roster is the
    partitions', :func:`~fa_hetdp.flowerkit.settings.simulation_identities`) and an empty
    ledger (a simulation keeps one per run). Each line is a node's own and starts with the
    node-config key it names. A meta-analysis is checked at its stated budget (its plan needs
    round A's counts; the nodes check the plan again at round A).
    """
    try:
        policy = NodePolicy.from_node_config(simulated_node_config({}, settings))
    except NodePolicyError as exc:
        return [str(exc)]
    n = settings.num_clients
    malicious = settings.threat_model == "malicious-server"
    try:
        view = session_view(
            settings,
            n=n,
            t=settings.threshold,
            session=None,
            threat_model=settings.threat_model,
            gamma=settings.corrupt_fraction if malicious else 0.0,
            roster_size=n if malicious else None,
            d=d,
            meta=analysis_of(settings) == "meta",
        )
    except NodeRefusedError as exc:
        return [str(exc)]
    reasons = policy.check(view)
    if policy.not_dp(view) or view.epsilon is None or view.delta is None:
        return reasons  # nothing to charge
    if view.honest_shares < 1:
        return reasons  # refused above (t >= c + 1)
    if view.releases:  # the noise the node recomputed, as its ledger charges it
        item: Any = assess(view, policy.ledger_max_delta).effective
    else:  # a meta-analysis before round A: its stated budget
        item = (view.epsilon, view.delta)
    said = {reason.split(" ", 1)[0] for reason in reasons}
    return reasons + [r for r in _cap_overruns(policy, item) if r.split(" ", 1)[0] not in said]


def _cap_overruns(policy: NodePolicy, item: Any) -> list[str]:
    """Why one charge of ``item`` overruns an empty ledger's or a measurement's cap.

    ``epsilon`` at the ledger's ``delta``, as the ledger composes it
    (:class:`~fa_hetdp.dp.budget.PrivacyBudget`).
    """
    budget = PrivacyBudget(policy.ledger_max_epsilon, policy.ledger_max_delta)
    try:
        charge = budget.cost(item)
        epsilon = PrivacyBudget.restore(budget.epsilon, budget.delta, [charge]).spent().epsilon
    except (ArithmeticError, PrivacyParameterError, ValueError) as exc:
        return [f"{LEDGER_MAX_EPSILON} = {policy.ledger_max_epsilon:g}: cannot be charged ({exc})"]
    asks = f"the run asks epsilon = {epsilon:.4g} at delta = {policy.ledger_max_delta:g}"
    out: list[str] = []
    if epsilon > policy.measurement_max_epsilon * (1.0 + EPSILON_RTOL):
        out.append(f"{MEASUREMENT_MAX_EPSILON} = {policy.measurement_max_epsilon:g}: {asks}")
    if not budget.can_afford(charge):
        out.append(f"{LEDGER_MAX_EPSILON} = {policy.ledger_max_epsilon:g}: {asks}")
    return out


def save_node_view(record: ConfigRecord, gamma: float, roster_size: int | None) -> None:
    """Keep the node's ``gamma`` and roster size in the session state (its later plans)."""
    record[State.NODE_GAMMA] = float(gamma)
    record[State.ROSTER_SIZE] = NO_ROSTER if roster_size is None else int(roster_size)


def node_gamma_roster(record: ConfigRecord) -> tuple[float, int | None]:
    """Return the node's ``gamma`` and roster size kept by :func:`save_node_view`."""
    return _saved(record)


def _view(
    record: ConfigRecord,
    secagg: SecAggClient | None,
    plan: ProtocolPlan | MetaPlan | SiloPlan | TwoArmPlan,
) -> PlanView:
    """Return the node's view of ``plan`` (its gamma, roster, nonce, realised shares)."""
    gamma, roster = _saved(record)
    nonce = record.get(State.SESSION_NONCE)
    if not isinstance(nonce, bytes) or not nonce:
        raise RuntimeError("corrupt protocol state: no session nonce")
    if not isinstance(plan, ProtocolPlan | MetaPlan):  # a silo's own release (or two-arm)
        return silo_view(plan, session=nonce)
    if secagg is None:
        raise RuntimeError("a secure sum needs the session's secure-aggregation client")
    kwargs: dict[str, Any] = {
        "t": secagg.threshold,
        "threat_model": secagg.threat_model,
        "gamma": gamma,
        "roster_size": roster,
        "session": nonce,
    }
    if isinstance(plan, MetaPlan):
        view = meta_view(plan, **kwargs)
    else:
        view = protocol_view(plan, **kwargs)
    return dataclasses.replace(view, realised=_realised(record))


def _realised(record: ConfigRecord) -> tuple[tuple[str, int], ...]:
    text = record.get(State.REALISED, "")
    if not isinstance(text, str) or not text:
        return ()
    return tuple(sorted((str(k), int(v)) for k, v in json.loads(text).items()))


def realise(
    context: Context,
    settings: RunSettings,
    record: ConfigRecord,
    secagg: SecAggClient,
    plan: ProtocolPlan | MetaPlan,
    releases: Sequence[str],
    survivors: int,
) -> None:
    """Charge the noise a summation actually holds, before the node answers its unmask request.

    ``survivors``: the masked inputs in the sum (the unmask request's count; in the
    malicious-server mode the list every survivor signed). Of their noise shares the node
    counts ``survivors - c`` as honest (``c`` the colluders it guards against, against its
    roster), so the ``releases`` of this summation hold that much noise, not the plan's
    ``n - c``; the session's charge is raised to it (never lowered) and the request refused if
    the node's caps or ledger do not afford it -- a degraded sum is then never unmasked by
    this node.

    Raises
    ------
    NodeRefusedError
        One line: the measurement cap or the ledger's overrun, at the realised noise.
    """
    policy = _policy(context, settings, dropin=bool(record.get(SENT_SETTINGS, "")))
    view = _view(record, secagg, plan)
    if policy.not_dp(view):  # recorded as such at its first release (allow-non-dp): no epsilon
        return
    honest = max(int(survivors) - view.colluders, 0)
    realised = dict(view.realised)
    realised.update(dict.fromkeys(releases, honest))
    view = dataclasses.replace(view, realised=tuple(sorted(realised.items())))
    record[State.REALISED] = json.dumps(dict(view.realised))
    where = f"the unmasking ({survivors} masked inputs in the sum)"
    # the node's caps, not the plan's stated epsilon: the server's on-degraded policy may
    # release a degraded sum, the node's own caps bound what it answers for
    epsilon = assess(view, policy.ledger_max_delta).epsilon_at_node_delta
    if epsilon > policy.measurement_max_epsilon * (1.0 + EPSILON_RTOL):
        _refused(
            [
                f"{MEASUREMENT_MAX_EPSILON} = {policy.measurement_max_epsilon:g}: the noise "
                f"left in the sum ({honest} honest shares of {survivors}) is worth epsilon = "
                f"{epsilon:.4g} at delta = {policy.ledger_max_delta:g}"
            ],
            where,
        )
    try:
        _ledger(policy).realise(view)
    except LedgerError as exc:
        _refuse([str(exc)], where)


def charge(
    context: Context,
    settings: RunSettings,
    record: ConfigRecord,
    secagg: SecAggClient | None,
    plan: ProtocolPlan | MetaPlan | SiloPlan | TwoArmPlan,
) -> None:
    """Check the view again at a release-bearing step and charge it, before the reply.

    ``secagg`` is the session's client (``None``: the silo summaries, a release of the node's
    own; its nonce is then the one the session started with). The first charge of a session
    is the whole plan, never refunded; a later step that asks for more is refused.

    Raises
    ------
    NodeRefusedError
        One line: the policy's reasons, or the ledger's (an overrun, more than was charged).
    """
    policy = _policy(context, settings, dropin=bool(record.get(SENT_SETTINGS, "")))
    # the plan as asked (the realised shares of earlier sums are charged at their unmasking)
    view = dataclasses.replace(_view(record, secagg, plan), realised=())
    _refuse(policy.check(view), "this release")
    ledger = _ledger(policy)
    try:
        ledger.charge_view(view, policy)
    except LedgerError as exc:
        _refuse([str(exc)], "this release")
