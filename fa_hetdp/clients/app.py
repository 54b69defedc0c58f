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
``silo_summaries``  a meta-analysis in the silo-summaries design: the silo's own noisy means
                    and variances, unmasked (:mod:`fa_hetdp.clients.meta`); refused when
                    ``node_config["release-silo-summaries"]`` is false (the first reply says so)
==================  =========================================================================

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

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message
from flwr.clientapp import ClientApp

import fa_hetdp
from fa_hetdp.clients import meta
from fa_hetdp.config.partition import client_records, client_summary
from fa_hetdp.config.rules import ConfigError
from fa_hetdp.data.check import load_checked, load_checked_records
from fa_hetdp.data.summaries import ClientSummary, summarise, summarise_mean
from fa_hetdp.dp.rng import client_generator
from fa_hetdp.errors import InputDataError
from fa_hetdp.flowerkit.limits import step_limits
from fa_hetdp.flowerkit.measurement import (
    SETTINGS_KEY,
    SentSettings,
    check_node_safety,
    read_settings,
)
from fa_hetdp.flowerkit.settings import (
    RunSettings,
    dropout_partitions,
    node_secagg,
    releases_silo_summaries,
)
from fa_hetdp.flowerkit.steps import (
    ADVERTISE_KEYS,
    INPUT_STEP,
    SHARE_KEYS,
    SILO_SUMMARIES,
    STAGE0_CONSISTENCY,
    STAGE0_INPUT,
    STAGE0_UNMASK,
    STAGE1_CONSISTENCY,
    STAGE1_INPUT,
    STAGE1_UNMASK,
    STAGE2_CONSISTENCY,
    STAGE2_INPUT,
    STAGE2_UNMASK,
    Key,
    NodeConfig,
    State,
)
from fa_hetdp.flowerkit.wire import Limits, decode, encode
from fa_hetdp.protocol.client import (
    LocalValues,
    local_values,
    stage1_contribution,
    stage2_contribution,
    stage_lattice,
)
from fa_hetdp.protocol.floor import floor_contribution
from fa_hetdp.protocol.plan import ProtocolPlan, plan_protocol
from fa_hetdp.secagg.client import SecAggClient

__all__ = ["Records", "RecordsLoader", "app", "register_steps", "scenario_records"]

Records = npt.ArrayLike | tuple[npt.ArrayLike, npt.ArrayLike | None]
"""What a records loader returns: ``features`` ``(N, d)``, or ``(features, labels)``."""
RecordsLoader = Callable[[Context], Records]
"""``records(context)``: the node's records (:func:`register_steps`)."""
SettingsSource = Literal["run-config", "message"]
"""Where a session's settings come from: the run config (this package's own app) or the
first message of a drop-in measurement (:mod:`fa_hetdp.flowerkit.measurement`)."""

#: ``context.state`` key (in the session's ``ConfigRecord``) of a drop-in's settings document.
SENT_SETTINGS = "sent-settings"

app = ClientApp()
log = logging.getLogger("flwr.fa_hetdp.client")


class SimulatedDropoutError(RuntimeError):
    """Raised by a client chosen to drop out (``dropout-fraction`` > 0, simulation only)."""


def _partition(context: Context, *, required: bool = True) -> tuple[int, int]:
    """Return the node's ``(partition-id, num-partitions)``; ``(-1, 0)`` for its own data.

    ``required = False`` (a drop-in session in deployment mode): a node without a
    ``partition-id`` loads its records itself and needs none.
    """
    config = context.node_config
    try:
        own_data = NodeConfig.DATA_PATH in config or not required
        if own_data and NodeConfig.PARTITION_ID not in config:
            return -1, 0  # a data owner with its own records needs no partition id
        pid = int(config[NodeConfig.PARTITION_ID])
        return pid, int(config.get(NodeConfig.NUM_PARTITIONS, 0))
    except (KeyError, TypeError, ValueError) as exc:
        raise RuntimeError(
            "the SuperNode needs --node-config 'partition-id=<i> num-partitions=<n>' (data "
            "from the scenario) or 'data-path=\"/path/to/x.npy\"' (its own data)"
        ) from exc


def load_vector(path: str) -> np.ndarray:
    """Read a data owner's records: ``.npy`` (no pickles) or ``.csv``; rows are records.

    One row is the client's vector ``x_i``; several rows are averaged (docs/design.md: a
    client holding several records contributes their mean). The pre-flight check of
    ``fa-hetdp check-data`` runs first (:func:`fa_hetdp.data.check.load_checked`): NaN,
    shape and values outside ``[0, 1]`` stop the node before the first round, and the error
    the coordinator sees names the kind of problem only (no value, no position).
    """
    return load_checked(path)


def scenario_records(context: Context) -> tuple[np.ndarray, np.ndarray | None]:
    """Return the records of this package's own app: the node's data file, or its partition.

    ``node_config["data-path"]`` (a data owner's own file, checked as :func:`load_vector`
    checks it): its rows, without labels (the paper's statistics average them into one
    vector; a meta-analysis uses every record). Else the node's partition (``partition-id``
    of ``num-partitions``) of the run's scenario, with labels.
    """
    data_path = context.node_config.get(NodeConfig.DATA_PATH)
    if isinstance(data_path, str) and data_path:
        return load_checked_records(data_path), None  # a file has no labels
    pid, num = _partition(context)
    return client_records(_settings(context).scenario, pid, num)


def _records_of(loaded: Records) -> tuple[np.ndarray, np.ndarray | None]:
    """Check what a records loader returned: ``(N, d)`` finite features in [0, 1].

    Raises
    ------
    InputDataError
        One line naming the kind of problem (shape, NaN, range), never a value.
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
        return features, None
    labels = np.asarray(raw_labels)
    if labels.shape != (features.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
        raise InputDataError(
            f"records(context): labels must be {features.shape[0]} integers (one per record), "
            f"got shape {labels.shape} of {labels.dtype}"
        )
    return features, labels


def _check_record_count(settings: RunSettings, count: int) -> None:
    """Refuse to join a record-unit session with fewer records than its ``min_records``.

    Under ``privacy_unit = "record"`` the noise is sized for one record moving the client's
    mean by at most ``1/min_records``; a client holding fewer records moves it further.
    """
    if settings.protocol.setting("privacy_unit") != "record":
        return
    bound = settings.protocol.setting("min_records")
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


def _analysis(settings: RunSettings) -> str:
    """Return the run's ``analysis`` setting: ``"heterogeneity"`` or ``"meta"``."""
    return str(settings.protocol.setting("analysis"))


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
    if _analysis(settings) == "meta":
        if features.shape[0] < 2:
            raise InputDataError(
                f"a meta-analysis needs at least 2 records per client, this node holds "
                f"{features.shape[0]}"
            )
        return {State.RECORDS: features}, {Key.RECORDS: int(features.shape[0])}
    return {State.X: _summarise(features, labels, summary)}, {}


_SETTINGS_CACHE: dict[object, RunSettings] = {}
_SENT_CACHE: dict[str, SentSettings] = {}


def _settings(context: Context) -> RunSettings:
    """Resolve the run settings (cached per process: a run sends six messages per client).

    A drop-in session keeps the settings document of its first message in its state
    (:data:`SENT_SETTINGS`); every other session reads the run config.
    """
    sent = _sent_settings(context)
    if sent is not None:
        return sent.run
    key = tuple(sorted(context.run_config.items()))
    settings = _SETTINGS_CACHE.get(key)
    if settings is None:
        if len(_SETTINGS_CACHE) >= 4:
            _SETTINGS_CACHE.clear()
        settings = RunSettings.from_run_config(context.run_config)
        _SETTINGS_CACHE[key] = settings
    return settings


def _sent_settings(context: Context) -> SentSettings | None:
    record = context.state.get(State.RECORD)
    if not isinstance(record, ConfigRecord):
        return None
    text = record.get(SENT_SETTINGS, "")
    if not isinstance(text, str) or not text:
        return None
    return _read_sent(json.loads(text))


def _read_sent(document: object) -> SentSettings:
    key = json.dumps(document, sort_keys=True)
    sent = _SENT_CACHE.get(key)
    if sent is None:
        if len(_SENT_CACHE) >= 4:
            _SENT_CACHE.clear()
        try:
            sent = read_settings(document)
        except ConfigError as exc:  # one line: the server keeps the first line of a reason
            problems = "; ".join(f"{where}: {what}" for where, what in exc.problems)
            raise ValueError(f"the measurement's settings are refused: {problems}") from exc
        _SENT_CACHE[key] = sent
    return sent


def _maybe_drop(settings: RunSettings, partition_id: int, step: str) -> None:
    if step == settings.dropout_step and partition_id in dropout_partitions(settings):
        raise SimulatedDropoutError(f"partition {partition_id} drops out at step {step!r}")


def _start_step(context: Context, step: str) -> tuple[RunSettings, int, ConfigRecord]:
    # Every step after advertise_keys: settings, partition id (after a simulated dropout
    # check) and the session state.
    settings = _settings(context)
    pid, _ = _partition(context, required=_sent_settings(context) is None)
    _maybe_drop(settings, pid, step)
    return settings, pid, _record(context)


def _record(context: Context) -> ConfigRecord:
    record = context.state.get(State.RECORD)
    if not isinstance(record, ConfigRecord):
        raise RuntimeError("no protocol state: the session did not start on this node")
    return record


def _generator(settings: RunSettings, record: ConfigRecord, pid: int) -> np.random.Generator:
    rng = client_generator(settings.mode, seed=settings.seed, partition_id=pid)
    saved = record.get(State.RNG_STATE, "")
    if settings.mode == "simulation" and isinstance(saved, str) and saved:
        rng.bit_generator.state = json.loads(saved)
    return rng


def _save_generator(settings: RunSettings, record: ConfigRecord, rng: np.random.Generator) -> None:
    if settings.mode == "simulation":
        record[State.RNG_STATE] = json.dumps(rng.bit_generator.state)


def _local(context: Context, plan: ProtocolPlan) -> LocalValues:
    arrays = context.state.get(State.LOCAL)
    if not isinstance(arrays, ArrayRecord):
        raise RuntimeError("no local data: the session did not start on this node")
    x = np.asarray(arrays[State.X].numpy(), dtype=np.float64)
    return local_values(x, variance_floor=plan.variance_floor)  # the adaptive floor, if any


def _state_int(record: ConfigRecord, key: str) -> int:
    value = record.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise RuntimeError(f"corrupt protocol state: {key!r} is {value!r}, not an int")
    return value


def _plan(settings: RunSettings, record: ConfigRecord) -> ProtocolPlan:
    n = _state_int(record, State.SESSION_SIZE)
    floor = record.get(State.FLOOR)  # set by stage1_input in adaptive_floor runs
    floor = float(floor) if isinstance(floor, float) else None
    return plan_protocol(settings.protocol, n=n, d=_state_int(record, State.D), floor=floor)


def _limits(context: Context, step: str) -> Limits:
    """Return what the server's message of ``step`` may make this client decode.

    :mod:`fa_hetdp.flowerkit.limits`: ``k`` from the run config, ``d`` the client's own.
    """
    settings = _settings(context)
    k = settings.num_clients - 1 if settings.neighbours is None else settings.neighbours
    record = context.state.get(State.RECORD)
    d = record.get(State.D) if isinstance(record, ConfigRecord) else None
    return step_limits(step, k=max(k, 0), d=d if isinstance(d, int) else None)


def _reply(msg: Message, payload: dict[str, Any]) -> Message:
    return Message(encode(payload), reply_to=msg)


def _secagg(record: ConfigRecord) -> SecAggClient:
    blob = record.get(State.SECAGG, b"")
    if not isinstance(blob, bytes):
        raise RuntimeError("corrupt secagg state")
    return SecAggClient.from_bytes(blob)


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
        request = decode(msg.content, limits=Limits())  # the codec's caps: k is not known yet
        sent = _read_sent(request.get(SETTINGS_KEY))
        settings = sent.run
        check_node_safety(context.node_config, settings)
        pid, num = _partition(context, required=settings.mode == "simulation")
        _maybe_drop(settings, pid, ADVERTISE_KEYS)
    else:
        settings = _settings(context)
        check_node_safety(context.node_config, settings, default_unit=None)
        pid, num = _partition(context)
        _maybe_drop(settings, pid, ADVERTISE_KEYS)
        request = decode(msg.content, limits=_limits(context, ADVERTISE_KEYS))
        sent = None
    features, labels = _records_of((records or scenario_records)(context))
    _check_record_count(settings, features.shape[0])
    summary = (
        client_summary(settings.scenario)
        if sent is None
        else sent.summary.resolve(features.shape[1])
    )
    local, shown = _local_data(settings, features, labels, summary)
    if _analysis(settings) == "meta":  # the server runs the secure sums if any node says no
        shown[Key.RELEASES_SILO_SUMMARIES] = releases_silo_summaries(context.node_config)
    d = int(local[_LOCAL_KEY[_analysis(settings)]].shape[-1])
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
        }
    )
    context.state[State.RECORD] = record
    return _reply(
        msg,
        {
            Key.D: d,
            **shown,
            Key.PARTITION_ID: pid,
            Key.NUM_PARTITIONS: num,
            Key.VERSION: fa_hetdp.__version__,
            Key.SECAGG: reply,
        },
    )


def share_keys(msg: Message, context: Context) -> Message:
    """Secagg round 1: encrypted shares of the mask keys and self-mask seeds."""
    _, _, record = _start_step(context, SHARE_KEYS)
    secagg = _secagg(record)
    reply = secagg.share_keys(decode(msg.content, limits=_limits(context, SHARE_KEYS))[Key.SECAGG])
    record[State.SECAGG] = secagg.to_bytes()
    # n (sets the noise share) from the key directory, never a number the server states
    record[State.SESSION_SIZE] = secagg.session_size
    return _reply(msg, {Key.SECAGG: reply})


def stage0_input(msg: Message, context: Context) -> Message:
    """Stage 0: ``adaptive_floor``'s bucket of ``s_i^2``, or round A of a meta-analysis."""
    return _input(msg, context, 0)


def stage0_unmask(msg: Message, context: Context) -> Message:
    """Stage 0: reveal the shares that remove the masks."""
    return _unmask(msg, context, STAGE0_UNMASK)


def stage1_input(msg: Message, context: Context) -> Message:
    """Stage 1: ``[x, w x, w]``, or round B of a meta-analysis, plus a noise share."""
    return _input(msg, context, 1)


def stage1_unmask(msg: Message, context: Context) -> Message:
    """Stage 1: reveal the shares that remove the masks."""
    return _unmask(msg, context, STAGE1_UNMASK)


def stage2_input(msg: Message, context: Context) -> Message:
    """Stage 2: ``[(x - mu')^2, w (x - mu_bar')^2]``, or round C, plus a noise share."""
    return _input(msg, context, 2)


def stage2_unmask(msg: Message, context: Context) -> Message:
    """Stage 2: reveal the shares that remove the masks."""
    return _unmask(msg, context, STAGE2_UNMASK)


InputValues = Callable[
    [Context, RunSettings, ConfigRecord, dict[str, Any], np.random.Generator], np.ndarray
]
"""``values(context, settings, record, request, rng)``: one stage's vector plus noise share."""


def _input(msg: Message, context: Context, stage: int) -> Message:
    # Every masked-input step: the analysis' values of this stage, encoded and masked.
    settings, pid, record = _start_step(context, INPUT_STEP[stage])
    request = decode(msg.content, limits=_limits(context, INPUT_STEP[stage]))
    rng = _generator(settings, record, pid)
    values = _INPUT_VALUES[_analysis(settings)][stage](context, settings, record, request, rng)
    return _masked_input(msg, request, values, settings, record, rng)


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


def _meta_values(stage: int) -> InputValues:
    """Round A, B or C of a meta-analysis (:mod:`fa_hetdp.clients.meta`) at ``stage``."""

    def values(
        context: Context,
        settings: RunSettings,
        record: ConfigRecord,
        request: dict[str, Any],
        rng: np.random.Generator,
    ) -> np.ndarray:
        arrays = context.state.get(State.LOCAL)
        if not isinstance(arrays, ArrayRecord):
            raise RuntimeError("no local data: the session did not start on this node")
        records = np.asarray(arrays[State.RECORDS].numpy(), dtype=np.float64)
        if stage == 0:  # round A: the public counts the plan is calibrated on
            counts = meta.read_counts(
                request,
                client_id=_state_int(record, State.CLIENT_ID),
                m=records.shape[0],
                n=_state_int(record, State.SESSION_SIZE),
            )
            record[State.META_COUNTS] = meta.counts_to_json(counts)
        counts = meta.counts_from_json(record.get(State.META_COUNTS))
        return meta.meta_round(settings, records, counts, stage, request, rng)

    return values


def silo_summaries(msg: Message, context: Context) -> Message:
    """Meta-analysis, silo-summaries design: this silo's own noisy means and variances.

    Refused (one line) when the node's config says ``release-silo-summaries = false``, and
    outside a meta-analysis session. The noise comes from the node's generator (a CSPRNG in
    deployment mode, the seeded stream in simulation).
    """
    if not releases_silo_summaries(context.node_config):  # the node's word, checked first
        raise ValueError(
            f"this node does not release its own summaries (node-config "
            f"{NodeConfig.RELEASE_SILO_SUMMARIES} = false): only the secure sums"
        )
    settings, pid, record = _start_step(context, SILO_SUMMARIES)
    if _analysis(settings) != "meta":
        raise RuntimeError("silo_summaries outside a meta-analysis session")
    arrays = context.state.get(State.LOCAL)
    if not isinstance(arrays, ArrayRecord):
        raise RuntimeError("no local data: the session did not start on this node")
    records = np.asarray(arrays[State.RECORDS].numpy(), dtype=np.float64)
    request = decode(msg.content, limits=_limits(context, SILO_SUMMARIES))
    client_id = _state_int(record, State.CLIENT_ID)
    counts = meta.read_silo_counts(
        request, client_id=client_id, m=records.shape[0], d=records.shape[1]
    )
    rng = _generator(settings, record, pid)
    release = meta.silo_release(settings, records, counts, client_id, rng)
    _save_generator(settings, record, rng)
    return _reply(msg, {Key.SILO_RELEASE: release})


#: Each analysis' values of the masked-input stages 0, 1, 2 (the ``analysis`` setting).
_INPUT_VALUES: Mapping[str, Mapping[int, InputValues]] = {
    "heterogeneity": {0: _floor_values, 1: _stage1_values, 2: _stage2_values},
    "meta": {stage: _meta_values(stage) for stage in (0, 1, 2)},
}


def _masked_input(
    msg: Message,
    request: dict[str, Any],
    values: np.ndarray,
    settings: RunSettings,
    record: ConfigRecord,
    rng: np.random.Generator,
) -> Message:
    # Shared tail of both input stages: mask the contribution, keep the secagg and rng state.
    secagg = _secagg(record)
    reply = secagg.masked_input(request[Key.SECAGG], values, rng=rng)
    record[State.SECAGG] = secagg.to_bytes()
    _save_generator(settings, record, rng)
    return _reply(msg, {Key.SECAGG: reply})


def stage0_consistency(msg: Message, context: Context) -> Message:
    """Stage 0 (malicious-server sessions): sign the survivor list shown."""
    return _consistency(msg, context, STAGE0_CONSISTENCY)


def stage1_consistency(msg: Message, context: Context) -> Message:
    """Stage 1 (malicious-server sessions): sign the survivor list shown."""
    return _consistency(msg, context, STAGE1_CONSISTENCY)


def stage2_consistency(msg: Message, context: Context) -> Message:
    """Stage 2 (malicious-server sessions): sign the survivor list shown."""
    return _consistency(msg, context, STAGE2_CONSISTENCY)


def _consistency(msg: Message, context: Context, step: str) -> Message:
    _, _, record = _start_step(context, step)
    secagg = _secagg(record)
    reply = secagg.sign_survivors(decode(msg.content, limits=_limits(context, step))[Key.SECAGG])
    record[State.SECAGG] = secagg.to_bytes()
    return _reply(msg, {Key.SECAGG: reply})


def _unmask(msg: Message, context: Context, step: str) -> Message:
    _, _, record = _start_step(context, step)
    secagg = _secagg(record)
    try:
        reply = secagg.unmask(decode(msg.content, limits=_limits(context, step))[Key.SECAGG])
    finally:  # a refusal can change the state too (e.g. "excluded"): keep it
        record[State.SECAGG] = secagg.to_bytes()
    return _reply(msg, {Key.SECAGG: reply})


#: The handler of every step but ``advertise_keys`` (which takes the records loader).
_STEP_HANDLERS: Mapping[str, Callable[[Message, Context], Message]] = {
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
    SILO_SUMMARIES: silo_summaries,
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
