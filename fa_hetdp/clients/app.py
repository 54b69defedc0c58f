"""The fa-hetdp ``ClientApp``: one ``@app.query`` handler per protocol step.

:func:`register_steps` registers the handlers on a ``ClientApp``: this module's own ``app``
with :func:`scenario_records` (the node's data file or its partition of the scenario) and
the run config's settings; a user's app, through :func:`fa_hetdp.flower.register`, with the
user's records loader and the settings sent in the first message
(:mod:`fa_hetdp.flowerkit.measurement`; the node's safety settings from its node config only).

Each handler reads the server's request (:mod:`fa_hetdp.flowerkit.wire`), restores the
client's state from ``context.state`` (the ``secagg`` client, the noise generator, the
session size), does its step with the :mod:`fa_hetdp.protocol` client functions and
:class:`secagg.SecAggClient`, saves the state and replies:

==================  =========================================================================
``advertise_keys``  read the session setup; load the records (the loader registered:
                    ``node_config["data-path"]``, a data owner's own file, or else the
                    scenario's ``["partition-id"]`` of ``["num-partitions"]``; in a user's
                    app its own loader) and summarise them as asked (the scenario's
                    ``data.summary``, or the drop-in's; ``docs/summaries.md``); reply
                    with ``d`` and the two public keys (secagg round 0)
``share_keys``      encrypted Shamir shares for the neighbours (secagg round 1)
``stage0_input``    ``adaptive_floor`` only: the one-hot bucket of ``s_i^2`` + noise share
                    (the floor histogram, :mod:`fa_hetdp.protocol.floor`), masked (summation 0;
                    stages 1 and 2 are then summations 1 and 2); ``stage0_unmask`` likewise
``stage1_input``    ``[x, w x, w]`` + noise share ``N(0, sigma^2/t)`` (Thm 3.3, Lemma 3.7),
                    encoded and masked (secagg round 2, summation 0)
``stage1_unmask``   shares that remove the stage-1 masks (secagg round 3, summation 0)
``stage2_input``    ``[(x - mu')^2, w (x - mu_bar')^2]`` + noise share (Thm 3.3, 3.8) for the
                    broadcast ``mu'``, ``mu_bar'``, encoded and masked (summation 1)
``stage2_unmask``   shares that remove the stage-2 masks (summation 1)
``stageK_consistency``  ``secagg-threat-model = "malicious-server"`` only, before each unmask:
                    sign the survivor list shown (Bonawitz et al.'s consistency round)
``meta_round_*``    a meta-analysis' secure sums, rounds A, B, C on their own steps
                    (:mod:`fa_hetdp.clients.meta`); a ``stageK_input`` in a meta-analysis
                    session is refused (an older server's)
``silo_summaries``  a meta-analysis in the silo-summaries design: the silo's own noisy means
                    and variances, unmasked (:mod:`fa_hetdp.clients.silo_summaries`); refused
                    when ``node_config["release-silo-summaries"]`` is false (the first reply
                    says so)
==================  =========================================================================

A two-arm meta-analysis (the scenario's ``[data] arm`` and ``effect``) keeps every record's
arm beside the records and states the two arm sizes in the first reply; the silo summaries
release each arm's summaries, the secure sums (an MD or RD with ``design = "secure-sums"``)
enter the silo's effect as one summary in rounds A, B, C (:mod:`fa_hetdp.clients.meta`; a
node with an arm below 2 records refuses at its first step: :func:`check_two_arm_sums_arms`).

What every step's handler shares (the settings, the session state, the noise generator, the
secure aggregation's rounds) is :mod:`fa_hetdp.clients.session`.

The data owner's node policy and privacy ledger (issue 27, :mod:`fa_hetdp.clients.policy`):
``advertise_keys`` checks the session against the policy of the node config (in a Flower
simulation, the scenario's ``[nodes]``) before its keys leave the node, and records the
session's nonce in the node's ledger (a replay is refused); every release-bearing step
(``stageK_input``, ``meta_round_*``, ``silo_summaries``) checks its plan again and charges the
whole plan to the ledger before its reply is built. A two-arm scenario (``[data] arm``), whose
first reply states the node's arm sizes, is refused there unless the node config says
``allow-public-arm-sizes = true`` (a Flower simulation's nodes say it for a two-arm scenario),
in either design: the secure sums' rounds check and charge the node's own plan of its reduced
summary, which publishes its arm sizes too.
A refusal is one line in the node's log and the error reply's reason.

The session size n that sets the noise share is the length of the setup's id list, which is
bound into the session id of every share channel (a server that shows two clients different
lists breaks their channel), never a number the server merely states. The
node's ``node_config["secagg-threat-model"]``, if set, overrides the run config's: a node that
says ``"malicious-server"`` joins only sessions with the consistency round and safe parameters,
and needs ``secagg-roster``, ``secagg-identity-key`` and ``secagg-min-gamma`` in its node
config (:func:`fa_hetdp.flowerkit.settings.node_secagg`): it signs its round-0 keys with its
identity key, refuses a key directory with any key not signed by its owner's roster member,
logs the roster's SHA-256 at the start of the session, and never accepts a threshold below
what its own gamma needs (the run config's gamma is the server's word).

Noise: in ``mode = "simulation"`` the generator is ``SeedSequence(seed,
spawn_key=(partition_id,))`` and its state is kept in ``context.state`` between steps (one
stream per client: stage-1 noise, stage-1 rounding, stage-2 noise, stage-2 rounding); in
``mode = "deployment"`` every step draws from a fresh CSPRNG-backed generator
(:mod:`fa_hetdp.dp.rng`) and a seed is refused.

Any failure raises, so Flower sends an error reply and the server counts this client as a
dropout. ``dropout-fraction``/``dropout-stage`` (simulation only) make a seeded set of
clients fail at one step, to test dropout handling.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message
from flwr.clientapp import ClientApp

import fa_hetdp
from fa_hetdp.clients import meta, policy, silo_summaries
from fa_hetdp.clients.session import (
    NEIGHBOURS,
    SENT_SETTINGS,
    Handler,
    SimulatedDropoutError,
    UnmaskCheck,
    analysis_of,
    consistency,
    masked_input,
    maybe_drop,
    node_partition,
    noise_generator,
    read_sent,
    reply_to,
    run_settings,
    secagg_client,
    start_step,
    state_int,
    step_limits_of,
    unmask,
)
from fa_hetdp.clients.silo_summaries import arm_local_data, read_arm_file, split_arm
from fa_hetdp.config.partition import client_records, client_summary, require_dataset
from fa_hetdp.config.sites import site_arm_records, site_records
from fa_hetdp.data.check import load_checked, load_checked_records
from fa_hetdp.data.summaries import ClientSummary, summarise, summarise_mean
from fa_hetdp.errors import InputDataError
from fa_hetdp.flowerkit.measurement import SETTINGS_KEY, check_node_safety
from fa_hetdp.flowerkit.settings import (
    RunSettings,
    node_secagg,
    releases_silo_summaries,
    two_arm_sums,
)
from fa_hetdp.flowerkit.steps import (
    ADVERTISE_KEYS,
    INPUT_STEP,
    SHARE_KEYS,
    STAGE0_CONSISTENCY,
    STAGE0_INPUT,
    STAGE0_UNMASK,
    STAGE1_CONSISTENCY,
    STAGE1_INPUT,
    STAGE1_UNMASK,
    STAGE2_CONSISTENCY,
    STAGE2_INPUT,
    STAGE2_UNMASK,
    WIRE_REVISION,
    Key,
    NodeConfig,
    State,
)
from fa_hetdp.flowerkit.wire import decode
from fa_hetdp.protocol.client import (
    LocalValues,
    local_values,
    stage1_contribution,
    stage2_contribution,
    stage_lattice,
)
from fa_hetdp.protocol.floor import FLOOR_RELEASE, floor_contribution
from fa_hetdp.protocol.plan import ProtocolPlan
from fa_hetdp.secagg.client import SecAggClient

__all__ = [
    "Records",
    "RecordsLoader",
    "SimulatedDropoutError",
    "app",
    "check_two_arm_sums_arms",
    "register_steps",
    "scenario_records",
]

Records = npt.ArrayLike | tuple[npt.ArrayLike, npt.ArrayLike | None]
"""What a records loader returns: ``features`` ``(N, d)``, or ``(features, labels)``."""
RecordsLoader = Callable[[Context], Records]
"""``records(context)``: the node's records (:func:`register_steps`)."""
SettingsSource = Literal["run-config", "message"]
"""Where a session's settings come from: the run config (this package's own app) or the
first message of a drop-in measurement (:mod:`fa_hetdp.flowerkit.measurement`)."""


app = ClientApp()
log = logging.getLogger("flwr.fa_hetdp.client")


def load_vector(
    path: str,
    *,
    columns: Sequence[str] | None = None,
    bounds: Mapping[str, tuple[float, float]] | None = None,
) -> np.ndarray:
    """Read a data owner's records and average them: ``x_i``; rows are records.

    Without ``columns``: ``.npy`` (no pickles) or a headerless numeric ``.csv`` with values in
    ``[0, 1]``. With the run's ``columns`` (and public ``bounds``): a CSV with a header row or
    ``.parquet``, the named columns clipped into their bounds and scaled to ``[0, 1]``
    (:mod:`fa_hetdp.data.tables`). One row is the client's vector ``x_i``; several rows are
    averaged (docs/design.md: a client holding several records contributes their mean). The
    pre-flight check of ``fa-hetdp check-data`` runs first
    (:func:`fa_hetdp.data.check.load_checked`): NaN, shape, a header without the run's
    columns, values outside ``[0, 1]``... stop the node before the first round, and the error
    the coordinator sees names the kind of problem only (no value, no position).
    """
    return load_checked(path, columns=columns, bounds=bounds)


def scenario_records(context: Context) -> tuple[np.ndarray, np.ndarray | None]:
    """Return the records of this package's own app: the node's data file, or its partition.

    ``node_config["data-path"]`` (a data owner's own file, checked as :func:`load_vector`
    checks it, with the run's ``[data] columns`` and ``bounds`` from the scenario of the run
    config when it states them): its rows in ``[0, 1]``, without labels (the paper's
    statistics average them into one vector; a meta-analysis uses every record). Else the
    node's partition (``partition-id`` of ``num-partitions``) of the run's scenario, with
    labels; in a simulation of the user's files (``[data] sites``), the file of the node's
    partition (:func:`fa_hetdp.config.sites.site_records`), without labels (a two-arm
    scenario's: ``(outcomes, arms)``, :func:`fa_hetdp.config.sites.site_arm_records`). A
    scenario that names no dataset (``[data] columns`` only) has no partitions: a node without
    ``data-path`` refuses with :data:`fa_hetdp.config.partition.NO_DATASET` (public: no path,
    no value).
    """
    scenario = run_settings(context).scenario
    data = scenario.data
    data_path = context.node_config.get(NodeConfig.DATA_PATH)
    if isinstance(data_path, str) and data_path:
        if data.columns is None:  # .npy or a headerless numeric .csv, values in [0, 1]
            return load_checked_records(data_path), None  # a file has no labels
        if data.arm is not None:  # two-arm effects: the arm column read beside the outcomes
            return read_arm_file(
                data_path, columns=data.columns, arm=data.arm, bounds=data.column_bounds()
            )
        records = load_checked_records(data_path, columns=data.columns, bounds=data.column_bounds())
        return records, None
    require_dataset(scenario)  # no dataset: every node needs a data-path
    if data.arm is not None and data.sites is None:
        split_arm(None, str(data.arm))  # refused: a two-arm run needs the node's data file
    pid, num = node_partition(context)
    if data.sites is not None:  # client i reads sites[i], as a data owner's file
        if data.arm is not None:  # and its arm column, as read_arm_file reads a data-path
            return site_arm_records(scenario, pid, num)
        return site_records(scenario, pid, num), None
    return client_records(scenario, pid, num)


def _records_of(
    loaded: Records, *, effect: str | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Check what a records loader returned: ``(N, d)`` finite features in [0, 1].

    ``effect`` names a two-arm run's effect (None: one arm): the loader must then return
    ``(outcomes, arms)``, the arms one per record, integers or booleans (cast to 0/1; their
    values are checked by :func:`~fa_hetdp.clients.silo_summaries.arm_local_data`).

    Raises
    ------
    InputDataError
        One line naming the kind of problem (shape, NaN, range; the labels or the arms; a
        two-arm run's loader that returned no arms), never a value.
    """
    if isinstance(loaded, tuple):
        if len(loaded) != 2:
            raise InputDataError(
                f"records(context) must return features or (features, labels), got a "
                f"tuple of {len(loaded)}"
            )
        raw_features, raw_labels = loaded
    else:
        raw_features, raw_labels = loaded, None
    try:
        features = np.asarray(raw_features, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputDataError("records(context): features are not numeric") from exc
    if features.ndim != 2 or features.shape[0] < 1 or features.shape[1] < 1:
        raise InputDataError(
            f"records(context): features must have shape (records, d) with both >= 1, got "
            f"shape {features.shape}"
        )
    if not np.isfinite(features).all():
        raise InputDataError("records(context): features hold NaN or infinite values")
    if ((features < 0.0) | (features > 1.0)).any():
        raise InputDataError(
            "records(context): features outside [0, 1] (scale them first, e.g. pixels / 16)"
        )
    if raw_labels is None:
        if effect is not None:
            raise InputDataError(no_arms(effect))
        return features, None
    labels = np.asarray(raw_labels)
    if effect is not None and labels.dtype == np.bool_:  # e.g. df.treated == 1
        labels = labels.astype(np.int64)
    if labels.shape != (features.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
        what = "labels" if effect is None else "arms"
        kind = "integers" if effect is None else "0/1 integers or booleans"
        raise InputDataError(
            f"records(context): {what} must be {features.shape[0]} {kind} (one per record), "
            f"got shape {labels.shape} of {labels.dtype}"
        )
    return features, labels


def no_arms(effect: str) -> str:
    """Return the refusal of a two-arm run's node whose ``records(context)`` gave no arms."""
    return (
        f"effect={effect!r} needs records(context) to return (outcomes, arms), arms one 0/1 "
        "per record (1 = treated); this node's loader returned no arms"
    )


def check_two_arm_sums_arms(settings: RunSettings, arms: Sequence[int]) -> None:
    """Refuse to join a two-arm secure-sums session with an arm of fewer than 2 records.

    The secure sums enter the silo's MD or RD as one summary
    (:func:`fa_hetdp.protocol.two_arm_sums.reduced_summaries`: each arm's sample variance), and
    every silo of the key directory takes part in every round: a silo that could not is
    refused at its first step (the server drops it before the key directory is fixed), not at
    round A (which would end the run).

    Raises
    ------
    InputDataError
        An arm below 2 records (one line, the node's arm sizes: public on its consent).
    """
    if min(arms) < 2:
        raise InputDataError(
            f"effect={settings.scenario.data.effect!r} under the secure sums needs at least 2 "
            f"records in each arm of every silo; this node holds {arms[0]} treated and "
            f"{arms[1]} control"
        )


def _check_record_count(settings: RunSettings, count: int) -> None:
    """Refuse to join a record-unit session with fewer records than its ``min_records``.

    Under ``privacy_unit = "record"`` the paper's statistics size their noise for one record
    moving the client's mean by at most ``1/min_records``: a session that states no bound is
    refused (the noise would assume none), and a client holding fewer records moves it
    further. A meta-analysis publishes the client's own count (its first reply) and is
    calibrated on it, checked at its first release (the round-A and ``silo_summaries``
    requests must list it; two-arm effects: the arm sizes): a stated bound is still checked,
    a missing one is not needed.
    """
    if settings.protocol.setting("privacy_unit") != "record":
        return
    bound = settings.protocol.setting("min_records")
    if bound is None and analysis_of(settings) == "meta":
        return
    if bound is None:
        raise InputDataError(
            "min_records is required with privacy_unit='record' for the paper's statistics: "
            "the session states no public lower bound on the clients' record counts, which "
            "their record-level noise is calibrated to; refused"
        )
    if not isinstance(bound, int) or count < bound:
        raise InputDataError(
            f"this node holds {count} records, fewer than the session's min_records={bound!r} "
            "(privacy unit 'record': the noise would be too small for one of its records)"
        )


def _summarise(
    features: np.ndarray, labels: np.ndarray | None, summary: ClientSummary
) -> np.ndarray:
    """Return ``x_i``: the summary of the records (labels: for the histogram only)."""
    if labels is None:  # summarise_mean refuses the label histogram with one line
        return summarise_mean(features.mean(axis=0), summary)
    if summary.kind == "label-histogram" and (
        labels.min() < 0 or labels.max() >= summary.num_labels
    ):
        raise InputDataError(
            f"records(context): labels must lie in 0 .. {summary.num_labels - 1} "
            f"(num_labels={summary.num_labels})"
        )
    return summarise(features, labels, summary)


#: Under which key of :attr:`State.LOCAL` each analysis keeps the client's data.
_LOCAL_KEY: Mapping[str, str] = {"heterogeneity": State.X, "meta": State.RECORDS}


def _local_data(
    settings: RunSettings,
    features: np.ndarray,
    labels: np.ndarray | None,
    summary: ClientSummary,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Return what the session keeps of the records, and what the first reply shows of them.

    The paper's statistics keep the summary ``x_i`` (:func:`_summarise`); a meta-analysis
    keeps the records themselves and shows their count ``m_i`` (public in a meta-analysis:
    the plan is calibrated on every client's count).
    """
    if analysis_of(settings) == "meta":
        if features.shape[0] < 2:
            raise InputDataError(
                f"a meta-analysis needs at least 2 records per client, this node holds "
                f"{features.shape[0]}"
            )
        if settings.scenario.data.arm is not None:  # two-arm effects: the arms are needed
            if labels is None:  # refused here, never taken for a one-arm node
                raise InputDataError(no_arms(settings.scenario.data.effect))
            local, shown = arm_local_data(features, labels)
            return local, {Key.RECORDS: int(features.shape[0]), **shown}
        return {State.RECORDS: features}, {Key.RECORDS: int(features.shape[0])}
    return {State.X: _summarise(features, labels, summary)}, {}


def _local(context: Context, plan: ProtocolPlan) -> LocalValues:
    arrays = context.state.get(State.LOCAL)
    if not isinstance(arrays, ArrayRecord):
        raise RuntimeError("no local data: the session did not start on this node")
    x = np.asarray(arrays[State.X].numpy(), dtype=np.float64)
    return local_values(x, variance_floor=plan.variance_floor)  # the adaptive floor, if any


def _plan(settings: RunSettings, record: ConfigRecord) -> ProtocolPlan:
    """Return the node's own plan: n from the key directory, its own d, gamma and roster."""
    n = state_int(record, State.SESSION_SIZE)
    floor = record.get(State.FLOOR)  # set by stage1_input in adaptive_floor runs
    floor = float(floor) if isinstance(floor, float) else None
    gamma, roster_size = policy.node_gamma_roster(record)
    return policy.node_protocol_plan(
        settings,
        n=n,
        d=state_int(record, State.D),
        gamma=gamma,
        roster_size=roster_size,
        floor=floor,
    )


def advertise_keys(
    msg: Message,
    context: Context,
    *,
    records: RecordsLoader | None = None,
    settings_from: SettingsSource = "run-config",
) -> Message:
    """Secagg round 0: start the session, load ``x_i``, advertise the public keys.

    ``records`` loads the node's records (default :func:`scenario_records`: the node's data
    file or its partition of the scenario). ``settings_from = "message"`` (a drop-in
    measurement): the settings are the document in the request
    (:mod:`fa_hetdp.flowerkit.measurement`), checked with the run config's validator and
    against the node's own safety settings, and kept in the session state for the next steps.
    """
    if State.RECORD in context.state:  # a new session: nothing of the last one is reused
        del context.state[State.RECORD]
    if settings_from == "message":
        # k is not known yet: the first request's own cap, refused on its length unparsed
        request = decode(msg.content, limits=step_limits_of(context, ADVERTISE_KEYS))
        sent = read_sent(request.get(SETTINGS_KEY))
        settings = sent.run
        check_node_safety(context.node_config, settings)
        pid, num = node_partition(context, required=settings.mode == "simulation")
        maybe_drop(settings, pid, ADVERTISE_KEYS)
    else:
        settings = run_settings(context)
        check_node_safety(context.node_config, settings, default_unit=None)
        pid, num = node_partition(context)
        maybe_drop(settings, pid, ADVERTISE_KEYS)
        request = decode(msg.content, limits=step_limits_of(context, ADVERTISE_KEYS))
        sent = None
    two_arm = settings.scenario.data.arm is not None
    effect = settings.scenario.data.effect if two_arm else None
    features, labels = _records_of((records or scenario_records)(context), effect=effect)
    _check_record_count(settings, features.shape[0])
    summary = (
        client_summary(settings.scenario)
        if sent is None
        else sent.summary.resolve(features.shape[1])
    )
    local, shown = _local_data(settings, features, labels, summary)
    if analysis_of(settings) == "meta":  # the server runs the secure sums if any node says no
        shown[Key.RELEASES_SILO_SUMMARIES] = releases_silo_summaries(context.node_config)
    d = int(local[_LOCAL_KEY[analysis_of(settings)]].shape[-1])
    client_id = int(request[Key.CLIENT_ID])
    own = node_secagg(context.node_config, settings, (pid, num))  # the node's own keys
    if own.roster is not None:
        log.info(
            "fa-hetdp: secagg roster %s: %d members, SHA-256 %s (compare it out of band); "
            "threat model %s, gamma floor %g",
            context.node_config.get(NodeConfig.ROSTER)
            or "(simulation: from the seed, no protection)",
            len(own.roster.members),
            own.roster.sha256,
            own.threat_model,
            own.gamma,
        )
    roster_size = None if own.roster is None else len(own.roster.members)
    # the node's policy and ledger (issue 27): checked before anything leaves the node
    policy.start_session(
        context,
        settings,
        request[Key.SETUP],
        threat_model=own.threat_model,
        gamma=own.gamma,
        roster_size=roster_size,
        d=d,
        meta=analysis_of(settings) == "meta",
        dropin=sent is not None,
    )
    if Key.ARM_COUNTS in shown and two_arm_sums(settings):  # its consent given: said here
        check_two_arm_sums_arms(settings, shown[Key.ARM_COUNTS])
    secagg = SecAggClient(
        client_id,
        threat_model=own.threat_model,
        gamma=own.gamma,
        identity=own.identity,
        roster=own.roster,
    )
    reply = secagg.advertise_keys(request[Key.SETUP])
    context.state[State.LOCAL] = ArrayRecord(
        array_dict={k: Array(np.ascontiguousarray(v)) for k, v in local.items()}
    )
    record = ConfigRecord(
        {
            State.SECAGG: secagg.to_bytes(),
            State.CLIENT_ID: client_id,
            State.D: d,
            State.RNG_STATE: "",
            SENT_SETTINGS: "" if sent is None else sent.to_json(),
            NEIGHBOURS: len(secagg.neighbours),  # the k of the later steps' caps
            State.SESSION_NONCE: secagg.session,
        }
    )
    policy.save_node_view(record, own.gamma, roster_size)
    context.state[State.RECORD] = record
    return reply_to(
        msg,
        {
            Key.D: d,
            **shown,
            Key.PARTITION_ID: pid,
            Key.NUM_PARTITIONS: num,
            Key.VERSION: fa_hetdp.__version__,
            Key.WIRE: WIRE_REVISION,
            Key.SECAGG: reply,
        },
    )


def share_keys(msg: Message, context: Context) -> Message:
    """Secagg round 1: encrypted shares of the mask keys and self-mask seeds."""
    _, _, record = start_step(context, SHARE_KEYS)
    secagg = secagg_client(record)
    request = decode(msg.content, limits=step_limits_of(context, SHARE_KEYS))
    reply = secagg.share_keys(request[Key.SECAGG])
    record[State.SECAGG] = secagg.to_bytes()
    # n (sets the noise share) from the key directory, never a number the server states
    record[State.SESSION_SIZE] = secagg.session_size
    return reply_to(msg, {Key.SECAGG: reply})


def stage0_input(msg: Message, context: Context) -> Message:
    """Stage 0: ``adaptive_floor``'s bucket of ``s_i^2`` plus a noise share."""
    return _input(msg, context, 0)


def _realised(stage: Literal[0, 1, 2]) -> UnmaskCheck:
    """Return the node's realised charge of stage ``stage``'s sum, run before its unmasking."""

    def check(
        context: Context, settings: RunSettings, record: ConfigRecord, secagg: SecAggClient, k: int
    ) -> None:
        plan = _plan(settings, record)
        blocks = () if stage == 0 else plan.layout(stage).blocks
        releases = [FLOOR_RELEASE] if stage == 0 else [b.release for b in blocks]
        policy.realise(context, settings, record, secagg, plan, releases, k)

    return check


def stage0_unmask(msg: Message, context: Context) -> Message:
    """Stage 0: reveal the shares that remove the masks."""
    return unmask(msg, context, STAGE0_UNMASK, before=_realised(0))


def stage1_input(msg: Message, context: Context) -> Message:
    """Stage 1: ``[x, w x, w]`` plus a noise share."""
    return _input(msg, context, 1)


def stage1_unmask(msg: Message, context: Context) -> Message:
    """Stage 1: reveal the shares that remove the masks."""
    return unmask(msg, context, STAGE1_UNMASK, before=_realised(1))


def stage2_input(msg: Message, context: Context) -> Message:
    """Stage 2: ``[(x - mu')^2, w (x - mu_bar')^2]`` plus a noise share."""
    return _input(msg, context, 2)


def stage2_unmask(msg: Message, context: Context) -> Message:
    """Stage 2: reveal the shares that remove the masks."""
    return unmask(msg, context, STAGE2_UNMASK, before=_realised(2))


InputValues = Callable[
    [Context, RunSettings, ConfigRecord, dict[str, Any], np.random.Generator], np.ndarray
]
"""``values(context, settings, record, request, rng)``: one stage's vector plus noise share."""


def _input(msg: Message, context: Context, stage: int) -> Message:
    # Every masked-input step of the paper's stages: this stage's values, encoded and masked.
    settings, pid, record = start_step(context, INPUT_STEP[stage])
    if analysis_of(settings) != "heterogeneity":  # e.g. an older server's meta rounds
        raise RuntimeError(
            f"{INPUT_STEP[stage]} in a {analysis_of(settings)!r} session: the meta-analysis' "
            "rounds have their own steps (meta_round_a, meta_round_b, meta_round_c); the "
            "server runs an older fa-hetdp"
        )
    request = decode(msg.content, limits=step_limits_of(context, INPUT_STEP[stage]))
    rng = noise_generator(settings, record, pid)
    values = _STAGE_VALUES[stage](context, settings, record, request, rng)
    # the whole plan charged to the node's ledger before the reply is built (each stage: a
    # later one that asks for more than the first charge is refused)
    policy.charge(context, settings, record, secagg_client(record), _plan(settings, record))
    return masked_input(msg, request, values, settings, record, rng)


def _floor_values(
    context: Context,
    settings: RunSettings,
    record: ConfigRecord,
    request: dict[str, Any],
    rng: np.random.Generator,
) -> np.ndarray:
    """Stage 0 (``adaptive_floor``): the one-hot bucket of ``s_i^2`` plus a noise share."""
    plan = _plan(settings, record)
    if not plan.adaptive or plan.floor is not None:
        raise RuntimeError("stage0_input outside an adaptive_floor session, or after stage 1")
    x = _local(context, plan).x
    lattice = stage_lattice(plan, 0, modulus_bits=settings.modulus_bits)  # ddg/skellam
    share = plan.floor_share_std
    return floor_contribution(
        x, plan.floor_edges, share, mechanism=plan.mechanism, rng=rng, lattice=lattice
    )


def _stage1_values(
    context: Context,
    settings: RunSettings,
    record: ConfigRecord,
    request: dict[str, Any],
    rng: np.random.Generator,
) -> np.ndarray:
    """Stage 1: ``[x, w x, w]`` plus a noise share."""
    if _plan(settings, record).adaptive:  # the floor picked from the stage-0 histogram
        if Key.FLOOR not in request:
            raise RuntimeError("adaptive_floor session: the server sent no variance floor")
        record[State.FLOOR] = float(request[Key.FLOOR])  # plan_protocol checks [v_min, 1/4]
    plan = _plan(settings, record)
    bits = settings.modulus_bits  # a ddg/skellam contribution's lattice depends on the ring
    return stage1_contribution(_local(context, plan), plan, rng=rng, modulus_bits=bits)


def _stage2_values(
    context: Context,
    settings: RunSettings,
    record: ConfigRecord,
    request: dict[str, Any],
    rng: np.random.Generator,
) -> np.ndarray:
    """Stage 2: ``[(x - mu')^2, w (x - mu_bar')^2]`` plus a noise share."""
    plan = _plan(settings, record)
    return stage2_contribution(
        _local(context, plan),
        plan,
        np.asarray(request[Key.MU_PRIME], dtype=np.float64),
        np.asarray(request[Key.WEIGHTED_MU_PRIME], dtype=np.float64),
        rng=rng,
        modulus_bits=settings.modulus_bits,
    )


#: The values of the paper's masked-input stages 0 (``adaptive_floor``), 1 and 2.
_STAGE_VALUES: Mapping[int, InputValues] = {0: _floor_values, 1: _stage1_values, 2: _stage2_values}


def stage0_consistency(msg: Message, context: Context) -> Message:
    """Stage 0 (malicious-server sessions): sign the survivor list shown."""
    return consistency(msg, context, STAGE0_CONSISTENCY)


def stage1_consistency(msg: Message, context: Context) -> Message:
    """Stage 1 (malicious-server sessions): sign the survivor list shown."""
    return consistency(msg, context, STAGE1_CONSISTENCY)


def stage2_consistency(msg: Message, context: Context) -> Message:
    """Stage 2 (malicious-server sessions): sign the survivor list shown."""
    return consistency(msg, context, STAGE2_CONSISTENCY)


#: The handler of every step but ``advertise_keys`` (which takes the records loader): the
#: paper protocol's (here), the meta-analysis' rounds (clients.meta) and the silo summaries
#: (clients.silo_summaries); flowerkit.steps.ALL_STEPS lists them all.
_STEP_HANDLERS: Mapping[str, Handler] = {
    SHARE_KEYS: share_keys,
    STAGE0_INPUT: stage0_input,
    STAGE0_UNMASK: stage0_unmask,
    STAGE0_CONSISTENCY: stage0_consistency,
    STAGE1_INPUT: stage1_input,
    STAGE1_UNMASK: stage1_unmask,
    STAGE1_CONSISTENCY: stage1_consistency,
    STAGE2_INPUT: stage2_input,
    STAGE2_UNMASK: stage2_unmask,
    STAGE2_CONSISTENCY: stage2_consistency,
    **meta.HANDLERS,
    **silo_summaries.HANDLERS,
}


def register_steps(
    target: ClientApp, *, records: RecordsLoader, settings_from: SettingsSource
) -> None:
    """Register every step's handler on ``target`` as ``@target.query(<step>)``.

    One set of handlers: this package's own ``app`` registers them with
    :func:`scenario_records` and the run config; :func:`fa_hetdp.flower.register` with the
    user's loader and the settings of the first message.

    Raises
    ------
    ValueError
        A step already has a handler on ``target``, or ``target`` was built with a
        ``client_fn`` (Flower's own one-line errors).
    """

    def advertise(msg: Message, context: Context) -> Message:
        return advertise_keys(msg, context, records=records, settings_from=settings_from)

    advertise.__doc__ = advertise_keys.__doc__
    target.query(ADVERTISE_KEYS)(advertise)
    for step, handler in _STEP_HANDLERS.items():
        target.query(step)(handler)


register_steps(app, records=scenario_records, settings_from="run-config")
