"""Caps of the messages decoded before the session size is known (issue 28, "Smaller").

A hostile corpus: the first request a client receives (``advertise_keys``, a drop-in's
carries the settings document) and a client's reply to it (a key advertisement) are decoded
before the receiver knows ``k``. Each has its own cap from what it can hold
(:func:`fa_hetdp.flowerkit.limits.first_request_limits`, ``advertisement_limits``), checked
on the raw lengths before any JSON is parsed; the memory the decoder allocates while refusing
(tracemalloc's peak; the message itself is built before and not counted) is held to
:data:`REFUSAL_PEAK`. Later caps of our ClientApp come from the node's own view (the setup's
neighbourhood, the key directory's session size), never from the ``num-clients`` the server
states. Before the fix: the first request was decoded under the codec's absolute caps (a
4 Mi-character document parsed, a 100 MB blob accepted), a key advertisement under caps
growing with ``k``, and the ClientApp's later caps from the stated ``num-clients``.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.supercore.task_identity import TaskIdentity

import fa_hetdp.flower
from fa_hetdp.clients.session import NEIGHBOURS, SENT_SETTINGS, step_limits_of
from fa_hetdp.flowerkit.limits import (
    MAX_SETUP_NEIGHBOURS,
    SETTINGS_DOCUMENT_CHARS,
    SETUP_PEER_BLOB,
    advertisement_limits,
    first_request_limits,
    step_limits,
)
from fa_hetdp.flowerkit.measurement import SETTINGS_KEY, SummarySpec, settings_document
from fa_hetdp.flowerkit.steps import (
    ADVERTISE_KEYS,
    SHARE_KEYS,
    STAGE1_INPUT,
    STAGE1_UNMASK,
    Key,
    State,
)
from fa_hetdp.flowerkit.wire import WireFormatError, decode, encode
from fa_hetdp.secagg.server import SecAggServer

MIB = 1 << 20
#: Peak bytes the receiver may allocate while refusing an oversized message (it is refused
#: on its lengths: nothing is parsed or copied).
REFUSAL_PEAK = 1 * MIB


def _content(document: str, blob: bytes) -> RecordDict:
    content = RecordDict()
    content["doc"] = ConfigRecord({"json": document, "blob": blob})
    return content


def _peak_of_refusal(call: Callable[[], Any], match: str) -> tuple[str, int]:
    """Run ``call``; assert it raises (``match``); return the reason and tracemalloc's peak."""
    tracemalloc.start()
    try:
        with pytest.raises(Exception, match=match) as excinfo:
            call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return str(excinfo.value), peak


def _dropin_app() -> ClientApp:
    app = ClientApp()
    fa_hetdp.flower.register(app, records=lambda context: np.full((5, 3), 0.5))
    return app


def _first_request(content: RecordDict) -> tuple[Message, Context]:
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 0
    message = Message(
        content=content,
        dst_node_id=5000,
        message_type=f"query.{ADVERTISE_KEYS}",
        group_id=ADVERTISE_KEYS,
    )
    context = Context(
        run_id=1,
        node_id=5000,
        node_config={"partition-id": 0, "num-partitions": 4, "allow-seeded-noise": True},
        state=RecordDict(),
        run_config={"lr": 0.1},  # a user's app: its own keys only
    )
    return message, context


# ---------------------------------------------------------------------------- first request
def test_a_4_mi_character_first_request_is_refused_before_it_is_parsed() -> None:
    # A drop-in's first request whose settings document is 4 Mi characters of JSON (just
    # under the codec's absolute cap). Before the fix it was parsed (a million floats:
    # tracemalloc peak ~40 MiB) and only then refused as bad settings.
    pad = ",".join(["0.5"] * ((4 * MIB - 64) // 4))
    document = f'{{"{SETTINGS_KEY}": {{"pad": [{pad}]}}, "client-id": 1}}'
    assert first_request_limits().document < len(document) < 4 * MIB
    message, context = _first_request(_content(document, b""))
    app = _dropin_app()
    reason, peak = _peak_of_refusal(lambda: app(message, context), "exceeds")
    assert "\n" not in reason and "cap" in reason, reason
    assert peak < REFUSAL_PEAK, peak


def test_a_100_mb_first_request_is_refused_on_its_length() -> None:
    # 100 MB of blob behind a small document: under the codec's absolute cap (256 MiB) it was
    # accepted; the first request's own cap (about 2.1 MB) refuses it before parsing.
    document = json.dumps({SETTINGS_KEY: {}, Key.CLIENT_ID: 1})
    message, context = _first_request(_content(document, bytes(100_000_000)))
    app = _dropin_app()
    reason, peak = _peak_of_refusal(lambda: app(message, context), "exceeds")
    assert "\n" not in reason and "bytes exceeds this step's cap" in reason, reason
    assert peak < REFUSAL_PEAK, peak


def test_a_real_first_request_fits_its_cap_with_room() -> None:
    # The largest settings document (every summary parameter) and a complete graph of 1000:
    # at most half of each part of the cap; per neighbour at most half its allowance.
    doc = settings_document(
        epsilon=1.0,
        delta=1e-6,
        num_clients=1000,
        seed=None,
        statistics=("mean", "q"),
        summary=SummarySpec(kind="pooled", num_labels=None, image_shape=(3, 32, 32)),
        settings={"neighbours": 100, "mechanism": "skellam", "stage_timeout": 5.0},
    )
    assert len(json.dumps(doc)) < SETTINGS_DOCUMENT_CHARS // 10
    server = SecAggServer(
        list(range(1, 1001)),
        threshold=600,
        num_summations=3,
        neighbours="complete",
        rng=np.random.default_rng(0),
    )
    setup = server.setup_messages()[1]
    content = encode(
        {Key.CLIENT_ID: 1, Key.SESSION_SIZE: 1000, Key.SETUP: setup, SETTINGS_KEY: doc}
    )
    limits = first_request_limits()
    decode(content, limits=limits)
    text, blob = content["doc"]["json"], content["doc"]["blob"]
    assert isinstance(text, str) and isinstance(blob, bytes)
    assert len(text) < limits.document // 2
    assert len(blob) / 999 <= SETUP_PEER_BLOB / 2 + 1
    assert limits.message >= SETUP_PEER_BLOB * MAX_SETUP_NEIGHBOURS


# ---------------------------------------------------------------------------- server side
def test_a_key_advertisement_has_its_own_cap_whatever_k(tmp_path: Path) -> None:
    # A 1 MiB key advertisement from one client of a 10 000-client session: before the fix
    # decoded under caps growing with k (about 20 MB at k = 9 999); a key advertisement holds
    # nothing per neighbour, so its cap is constant and it is refused on its length.
    from test_flower_helpers import run_config, scenario_file

    from fa_hetdp.flowerkit.settings import RunSettings
    from fa_hetdp.server.strategy import HeterogeneityStrategy

    settings = RunSettings.from_run_config(run_config(tmp_path, scenario_file(tmp_path, 12)))
    strategy = HeterogeneityStrategy(settings)
    strategy._session_k = 9_999  # as after sampling 10 000 nodes
    limits = strategy.message_limits(ADVERTISE_KEYS)
    assert limits == advertisement_limits()
    padded = encode({Key.D: 64, Key.SECAGG: {"pad": bytes(MIB)}})
    reason, peak = _peak_of_refusal(lambda: decode(padded, limits=limits), "exceeds")
    assert "\n" not in reason and peak < REFUSAL_PEAK


def test_the_server_has_no_caps_for_later_steps_before_sampling(tmp_path: Path) -> None:
    from test_flower_helpers import run_config, scenario_file

    from fa_hetdp.flowerkit.settings import RunSettings
    from fa_hetdp.server.strategy import HeterogeneityStrategy

    settings = RunSettings.from_run_config(run_config(tmp_path, scenario_file(tmp_path, 12)))
    with pytest.raises(RuntimeError, match="before the clients are sampled"):
        HeterogeneityStrategy(settings).message_limits(SHARE_KEYS)


# ---------------------------------------------------------------------------- node's own view
def _session_context(num_clients: int, neighbours: int, session_size: int | None) -> Context:
    """A drop-in node's context after round 0 whose server stated ``num_clients``."""
    sent = settings_document(
        epsilon=1.0, delta=1e-6, num_clients=num_clients, seed=0, summary=SummarySpec("mean")
    )
    record = ConfigRecord(
        {
            SENT_SETTINGS: json.dumps(sent),
            NEIGHBOURS: neighbours,
            State.D: 64,
            State.CLIENT_ID: 1,
        }
    )
    if session_size is not None:
        record[State.SESSION_SIZE] = session_size
    state = RecordDict()
    state[State.RECORD] = record
    return Context(run_id=1, node_id=5000, node_config={}, state=state, run_config={})


@pytest.mark.parametrize("step", [SHARE_KEYS, STAGE1_INPUT, STAGE1_UNMASK])
def test_a_huge_stated_num_clients_does_not_loosen_the_nodes_caps(step: str) -> None:
    # The server states num-clients = 10^6; the node's setup gave it 11 neighbours and its key
    # directory 12 clients. Before the fix its caps were sized for k = 999 999 (the 256 MiB
    # absolute caps); now for its own k = 11.
    context = _session_context(10**6, 11, 12 if step != SHARE_KEYS else None)
    d = 64 if step == STAGE1_INPUT else None
    assert step_limits_of(context, step) == step_limits(step, k=11, d=d)
    padded = encode({Key.SECAGG: {"pad": bytes(4 * MIB)}})
    _, peak = _peak_of_refusal(
        lambda: decode(padded, limits=step_limits_of(context, step)), "exceeds"
    )
    assert peak < REFUSAL_PEAK


def test_the_key_directorys_session_size_bounds_k_below_the_setups() -> None:
    # A setup of 30 neighbours but a key directory of 8 clients: k = 7 from then on.
    context = _session_context(40, 30, 8)
    assert step_limits_of(context, STAGE1_UNMASK) == step_limits(STAGE1_UNMASK, k=7, d=64)


def test_the_first_requests_cap_ignores_the_stated_num_clients() -> None:
    context = _session_context(10**6, 11, None)
    del context.state[State.RECORD]  # a new session: nothing known yet
    assert step_limits_of(context, ADVERTISE_KEYS) == first_request_limits()
    with pytest.raises(WireFormatError, match="exceeds"):
        decode(encode({"pad": bytes(3 * MIB)}), limits=step_limits_of(context, ADVERTISE_KEYS))
