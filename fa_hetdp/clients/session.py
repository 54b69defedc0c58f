"""A node's side of a session: what every analysis' step handlers share.

The step handlers of :mod:`fa_hetdp.clients.app` (the paper protocol's, the key
advertisement), :mod:`fa_hetdp.clients.meta` (the meta-analysis' rounds) and
:mod:`fa_hetdp.clients.silo_summaries` use these: the run settings (the run config, or a
drop-in's settings document from the first message), the node's partition, the session state
kept in ``context.state`` between steps, the noise generator (a seeded stream kept in the state
in a simulation, a fresh CSPRNG-backed one in deployment), the per-step decode limits, the
secure-aggregation rounds every masked summation has (masked input, consistency, unmask), and
the simulated dropouts of the tests.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final

import numpy as np
from flwr.app import ConfigRecord, Context, Message

from fa_hetdp.config.rules import ConfigError
from fa_hetdp.dp.rng import client_generator
from fa_hetdp.flowerkit.limits import first_request_limits, step_limits
from fa_hetdp.flowerkit.measurement import SentSettings, read_settings
from fa_hetdp.flowerkit.settings import RunSettings, dropout_partitions
from fa_hetdp.flowerkit.steps import (
    ADVERTISE_KEYS,
    META_ROUNDS,
    STAGE_SUMS,
    Key,
    NodeConfig,
    State,
    summation_inputs,
)
from fa_hetdp.flowerkit.wire import Limits, decode, digest, encode
from fa_hetdp.secagg.client import SecAggClient
from fa_hetdp.secagg.messages import UnmaskRequest

__all__ = [
    "DROPOUT_ALIASES",
    "NEIGHBOURS",
    "SENT_SETTINGS",
    "Handler",
    "SimulatedDropoutError",
    "analysis_of",
    "consistency",
    "masked_input",
    "maybe_drop",
    "node_partition",
    "noise_generator",
    "read_sent",
    "reply_to",
    "run_settings",
    "save_generator",
    "secagg_client",
    "sent_settings",
    "session_record",
    "start_step",
    "state_int",
    "step_limits_of",
    "unmask",
]

Handler = Callable[[Message, Context], Message]
"""A step's handler: ``handler(message, context) -> reply``."""

DROPOUT_ALIASES: Final[Mapping[str, str]] = {
    step: stage_step
    for rnd, stage in (("A", 0), ("B", 1), ("C", 2))
    for step, stage_step in zip(META_ROUNDS[rnd].steps, STAGE_SUMS[stage].steps, strict=True)
}
"""The paper protocol's step each meta-analysis round step stands for in ``dropout-stage``."""


#: ``context.state`` key (in the session's ``ConfigRecord``) of a drop-in's settings document.
SENT_SETTINGS = "sent-settings"
#: ``context.state`` key (in the session's ``ConfigRecord``) of the number of neighbours the
#: setup gave this client (its share holders): the ``k`` of its later caps.
NEIGHBOURS = "neighbours"


class SimulatedDropoutError(RuntimeError):
    """Raised by a client chosen to drop out (``dropout-fraction`` > 0, simulation only)."""


def node_partition(context: Context, *, required: bool = True) -> tuple[int, int]:
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


def analysis_of(settings: RunSettings) -> str:
    """Return the run's ``analysis`` setting: ``"heterogeneity"`` or ``"meta"``."""
    return str(settings.protocol.setting("analysis"))


_SETTINGS_CACHE: dict[object, RunSettings] = {}


_SENT_CACHE: dict[str, SentSettings] = {}


def run_settings(context: Context) -> RunSettings:
    """Resolve the run settings (cached per process: a run sends six messages per client).

    A drop-in session keeps the settings document of its first message in its state
    (:data:`SENT_SETTINGS`); every other session reads the run config.
    """
    sent = sent_settings(context)
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


def sent_settings(context: Context) -> SentSettings | None:
    """Return a drop-in session's settings document (None: the run config's session)."""
    record = context.state.get(State.RECORD)
    if not isinstance(record, ConfigRecord):
        return None
    text = record.get(SENT_SETTINGS, "")
    if not isinstance(text, str) or not text:
        return None
    return read_sent(json.loads(text))


def read_sent(document: object) -> SentSettings:
    """Read a drop-in's settings document (cached); refused with one line."""
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


def maybe_drop(settings: RunSettings, partition_id: int, step: str) -> None:
    """Fail ``step`` on a node chosen to drop out (``dropout-fraction``, simulation only).

    ``dropout-stage`` names the paper protocol's stages; a meta-analysis' round A, B or C
    stands for stage 0, 1 or 2 there (:data:`DROPOUT_ALIASES`).
    """
    stage = DROPOUT_ALIASES.get(step, step)
    if settings.dropout_step in (step, stage) and partition_id in dropout_partitions(settings):
        raise SimulatedDropoutError(f"partition {partition_id} drops out at step {step!r}")


def start_step(context: Context, step: str) -> tuple[RunSettings, int, ConfigRecord]:
    """Start a step after ``advertise_keys``: settings, partition id, session state.

    The partition id comes after the simulated dropout check of ``step``.
    """
    settings = run_settings(context)
    pid, _ = node_partition(context, required=sent_settings(context) is None)
    maybe_drop(settings, pid, step)
    return settings, pid, session_record(context)


def session_record(context: Context) -> ConfigRecord:
    """Return the session's state record (the session started on this node)."""
    record = context.state.get(State.RECORD)
    if not isinstance(record, ConfigRecord):
        raise RuntimeError("no protocol state: the session did not start on this node")
    return record


def noise_generator(settings: RunSettings, record: ConfigRecord, pid: int) -> np.random.Generator:
    """Return the node's noise generator (its seeded stream restored in a simulation)."""
    rng = client_generator(settings.mode, seed=settings.seed, partition_id=pid)
    saved = record.get(State.RNG_STATE, "")
    if settings.mode == "simulation" and isinstance(saved, str) and saved:
        rng.bit_generator.state = json.loads(saved)
    return rng


def save_generator(settings: RunSettings, record: ConfigRecord, rng: np.random.Generator) -> None:
    """Keep the noise generator's state (simulation: one stream across the steps)."""
    if settings.mode == "simulation":
        record[State.RNG_STATE] = json.dumps(rng.bit_generator.state)


def state_int(record: ConfigRecord, key: str) -> int:
    """Return an integer of the session state."""
    value = record.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise RuntimeError(f"corrupt protocol state: {key!r} is {value!r}, not an int")
    return value


def step_limits_of(context: Context, step: str) -> Limits:
    """Return what the server's message of ``step`` may make this client decode.

    :mod:`fa_hetdp.flowerkit.limits`, from the node's own view only, never from a number the
    server states (the run config's or the settings document's ``num-clients``): the first
    request (``advertise_keys``, no session yet) has its own cap
    (:func:`~fa_hetdp.flowerkit.limits.first_request_limits`); later steps take ``k`` from
    the neighbourhood the setup gave this client (:data:`NEIGHBOURS`), at most the session
    size of the key directory it checked less one (``State.SESSION_SIZE``), and its own ``d``.
    """
    record = context.state.get(State.RECORD)
    if step == ADVERTISE_KEYS or not isinstance(record, ConfigRecord):
        return first_request_limits()
    k = record.get(NEIGHBOURS)
    if not isinstance(k, int) or isinstance(k, bool):  # a state written without it
        k = len(secagg_client(record).neighbours)
    n = record.get(State.SESSION_SIZE)
    if isinstance(n, int) and not isinstance(n, bool):
        k = min(k, n - 1)
    d = record.get(State.D)
    return step_limits(step, k=max(k, 0), d=d if isinstance(d, int) else None)


def reply_to(msg: Message, payload: dict[str, Any]) -> Message:
    """Return the reply to ``msg`` carrying ``payload``."""
    return Message(encode(payload), reply_to=msg)


def secagg_client(record: ConfigRecord) -> SecAggClient:
    """Return the session's secure-aggregation client."""
    blob = record.get(State.SECAGG, b"")
    if not isinstance(blob, bytes):
        raise RuntimeError("corrupt secagg state")
    return SecAggClient.from_bytes(blob)


def masked_input(
    msg: Message,
    request: dict[str, Any],
    values: np.ndarray,
    settings: RunSettings,
    record: ConfigRecord,
    rng: np.random.Generator,
) -> Message:
    """Mask ``values`` (the step's contribution); keep the secagg and noise generator state.

    The masks are bound to the digest of the request's public inputs (everything but the
    secure-aggregation message: the round's broadcast) and of a drop-in's settings document as
    this node resolved it, as the server's session binds them
    (:func:`fa_hetdp.flowerkit.steps.summation_inputs`): a sum over nodes shown different
    inputs cannot be decoded.
    """
    secagg = secagg_client(record)
    sent = record.get(SENT_SETTINGS, "")
    context = digest(summation_inputs(request, sent if isinstance(sent, str) else ""))
    reply = secagg.masked_input(request[Key.SECAGG], values, rng=rng, context=context)
    record[State.SECAGG] = secagg.to_bytes()
    save_generator(settings, record, rng)
    return reply_to(msg, {Key.SECAGG: reply})


def consistency(msg: Message, context: Context, step: str) -> Message:
    """Sign the survivor list shown (a malicious-server session's consistency check)."""
    _, _, record = start_step(context, step)
    secagg = secagg_client(record)
    request = decode(msg.content, limits=step_limits_of(context, step))
    reply = secagg.sign_survivors(request[Key.SECAGG])
    record[State.SECAGG] = secagg.to_bytes()
    return reply_to(msg, {Key.SECAGG: reply})


UnmaskCheck = Callable[[Context, RunSettings, ConfigRecord, SecAggClient, int], None]
"""``check(context, settings, record, secagg, survivors)``: raises to refuse the unmasking
(the node's realised charge: :func:`fa_hetdp.clients.policy.realise`)."""


def unmask(
    msg: Message, context: Context, step: str, *, before: UnmaskCheck | None = None
) -> Message:
    """Reveal the shares that remove the masks of the summation ``step`` unmasks.

    ``before`` is called with the number of masked inputs in the sum (the request's count)
    after the secure aggregation has checked the request and before any share leaves the node;
    it raises to refuse (the node's reply is then an error and holds no share).
    """
    settings, _, record = start_step(context, step)
    secagg = secagg_client(record)
    request = decode(msg.content, limits=step_limits_of(context, step))[Key.SECAGG]
    try:  # the secure aggregation's own checks first (a refusal names its reason)
        reply = secagg.unmask(request)
    finally:  # a refusal can change the state too (e.g. "excluded"): keep it
        record[State.SECAGG] = secagg.to_bytes()
    if before is not None:  # the shares are built, not sent: a refusal here sends none
        before(context, settings, record, secagg, survivors_of(request))
    return reply_to(msg, {Key.SECAGG: reply})


def survivors_of(request: Any) -> int:
    """Return the masked inputs an unmask request says are in the sum (``num_survivors``)."""
    return int(UnmaskRequest.from_dict(request).num_survivors)
