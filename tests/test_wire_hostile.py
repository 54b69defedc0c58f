"""A hostile wire-document corpus: documents that try to make the decoder hold too much.

The codec (:mod:`fa_hetdp.flowerkit.wire`) is shared by both apps, so every case here is an
attack of a client on the server and of a server on a client. Each must be refused with
:class:`WireFormatError` (the receiver then drops that client or fails that step), and the
memory the decoder allocated while refusing is measured with ``tracemalloc`` (its peak,
the message itself, built before, not counted) against a stated bound. Legitimate
documents of the real protocol still decode (``test_flower_wire.py``, and below under the
per-step caps of :mod:`fa_hetdp.flowerkit.limits`, on both sides).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from flwr.app import ConfigRecord, RecordDict

from fa_hetdp.flowerkit.limits import step_limits
from fa_hetdp.flowerkit.steps import ADVERTISE_KEYS, SHARE_KEYS, STAGE1_INPUT
from fa_hetdp.flowerkit.wire import MAX_MESSAGE_BYTES, Limits, WireFormatError, decode, encode

MIB = 1 << 20
#: Peak bytes the decoder may allocate while refusing one of the documents below: a few
#: times the document, never a multiple of the blob (1 MiB here) per reference.
REFUSAL_PEAK = 4 * MIB


def _message(document: Any, blob: bytes) -> RecordDict:
    content = RecordDict()
    text = document if isinstance(document, str) else json.dumps(document)
    content["doc"] = ConfigRecord({"json": text, "blob": blob})
    return content


def _refused_peak(content: RecordDict, match: str, **kwargs: Any) -> int:
    """Decode ``content``; assert it is refused (``match``); return tracemalloc's peak."""
    tracemalloc.start()
    try:
        with pytest.raises(WireFormatError, match=match):
            decode(content, **kwargs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak


def test_two_hundred_references_to_one_range_are_refused_before_any_copy() -> None:
    # Reported: 200 references to one 1 MiB range made a 1 MiB reply decode to 200 MiB.
    # Before the fix: decoded without error, tracemalloc peak ~200 MiB.
    blob = bytes(MIB)
    ref = {"__a__": [0, "<f8", [MIB // 8]]}
    content = _message({"v": [ref] * 200}, blob)
    assert len(content["doc"]["json"]) < 8_000  # an 8 KB document
    peak = _refused_peak(content, "overlapping blob ranges|would decode to")
    assert peak < REFUSAL_PEAK


def test_repeated_references_are_counted_each_time_against_the_budget() -> None:
    # Four references to disjoint 256 KiB ranges: fine alone, over a 512 KiB budget together.
    blob = bytes(MIB)
    refs = [{"__b__": [i * MIB // 4, MIB // 4]} for i in range(4)]
    content = _message({"v": refs}, blob)
    assert decode(content)["v"] == [bytes(MIB // 4)] * 4
    limits = Limits(message=2 * MIB, document=MIB, decoded=MIB // 2)
    assert _refused_peak(content, "would decode to", limits=limits) < REFUSAL_PEAK


_GIANT = textwrap.dedent(
    """
    import json, sys, tracemalloc
    from flwr.app import ConfigRecord, RecordDict
    from fa_hetdp.flowerkit.wire import WireFormatError, decode

    size = (1 << 28) - (1 << 16)  # 256 MiB less the document: under a client reply's cap
    blob = bytes(size)
    ref = {"__b__": [1, size - 1]}  # a proper slice: a copy (the whole blob would not be)
    content = RecordDict()
    doc = json.dumps({"v": [ref] * 1000})
    content["doc"] = ConfigRecord({"json": doc, "blob": blob})
    tracemalloc.start()
    try:
        decode(content)
        outcome = "decoded"
    except WireFormatError as exc:
        outcome = f"refused: {exc}"
    except MemoryError:
        outcome = "MemoryError"
    peak = tracemalloc.get_traced_memory()[1]
    print(json.dumps({"doc": len(doc), "outcome": outcome, "peak": peak}))
    """
)


def test_a_47_kib_document_asking_for_250_gib_is_refused_with_little_memory() -> None:
    # Reported: a 47 KiB document asked for 250 GiB under the 256 MiB cap (1000 references
    # to the same 256 MiB range). Run in a child whose address space is capped at 3 GiB, so
    # that today's decoder (which copies each reference in turn) fails with MemoryError
    # after ~10 copies instead of exhausting this machine; after the fix it is refused
    # before any copy, with a peak of a few MiB.
    limit = 3 << 30
    code = f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))\n"
    out = subprocess.run(
        [sys.executable, "-c", code + _GIANT],
        capture_output=True,
        text=True,
        timeout=300,
        env={"OPENBLAS_NUM_THREADS": "1", "FLWR_TELEMETRY_ENABLED": "0", "PATH": ""},
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["doc"] < 48 * 1024
    assert report["outcome"].startswith("refused: "), report
    assert "overlapping" in report["outcome"] or "would decode to" in report["outcome"]
    assert report["peak"] < REFUSAL_PEAK


@pytest.mark.parametrize(
    ("refs", "match"),
    [
        # byte ranges [0, 8) and [4, 12) share four bytes
        ([{"__b__": [0, 8]}, {"__b__": [4, 8]}], "overlapping"),
        # an array over the range of a bytes value
        ([{"__b__": [0, 16]}, {"__a__": [8, "<u8", [1]]}], "overlapping"),
        # an int list inside a bytes list
        ([{"__bl__": [0, 4, 4]}, {"__il__": [8, 1]}], "overlapping"),
        # the same range twice
        ([{"__b__": [0, 16]}, {"__b__": [0, 16]}], "overlapping"),
    ],
)
def test_overlapping_ranges_are_refused(refs: list[Any], match: str) -> None:
    # Before the fix: decoded, each reference a fresh copy of shared bytes.
    with pytest.raises(WireFormatError, match=match):
        decode(_message({"v": refs}, bytes(16)))


def test_empty_values_may_share_an_offset() -> None:
    # What encode() writes for b"" and empty arrays: zero-length ranges, no overlap.
    payload = {"a": b"", "b": np.zeros((0, 3)), "c": b"", "d": np.arange(2.0)}
    out = decode(encode(payload))
    assert out["a"] == b"" and out["b"].shape == (0, 3)
    np.testing.assert_array_equal(out["d"], [0.0, 1.0])


def test_one_bytes_list_of_tiny_items_counts_its_object_overhead() -> None:
    # One reference, no overlap: 1 MiB of 2-byte items is 2^19 bytes objects (~22 MiB in
    # CPython). The budget counts ITEM_OVERHEAD per item, so a 4 MiB cap refuses it.
    # Before the fix: decoded under max_bytes=4 MiB, tracemalloc peak ~22 MiB.
    content = _message({"v": {"__bl__": [0, 2, MIB // 2]}}, bytes(MIB))
    assert _refused_peak(content, "would decode to", max_bytes=4 * MIB) < REFUSAL_PEAK


@pytest.mark.parametrize(
    "ref",
    [
        {"__b__": [-1, 1]},
        {"__b__": [0, -1]},
        {"__b__": [2**63, 1]},
        {"__b__": [2**64 - 1, 2]},
        {"__a__": [-8, "<f8", [1]]},
        {"__a__": [2**62, "<f8", [2**40, 2**40]]},
        {"__il__": [-8, 1]},
        {"__il__": [0, 2**61]},
        {"__bl__": [2**63 - 1, 2**32, 2**32]},
        {"__bl__": [-4, 4, 1]},
    ],
)
def test_negative_and_huge_offsets_and_lengths_are_refused(ref: dict[str, Any]) -> None:
    # Already refused before the fix (Python ints do not overflow, and every range is
    # checked against the blob); kept so that the corpus stays complete.
    with pytest.raises(WireFormatError, match=r"missing blob range|bad shape"):
        decode(_message({"v": ref}, bytes(64)))


@pytest.mark.parametrize(
    "document",
    [
        '{"v": ' + "[" * 65 + "]" * 65 + "}",
        '{"v": ' + '{"k": ' * 65 + "0" + "}" * 65 + "}",
        '{"v": ' + '{"__t__": ' * 70 + "[]" + "}" * 70 + "}",
        '{"v": ' + '{"__d__": [[1, ' * 70 + "0" + "]]}" * 70 + "}",
    ],
)
def test_nesting_deeper_than_the_cap_is_refused(document: str) -> None:
    with pytest.raises(WireFormatError, match="deeper than"):
        decode(_message(document, b""))


@pytest.mark.parametrize(
    ("ref", "match"),
    [
        ({"__b__": [True, 1]}, "malformed blob"),
        ({"__b__": [0.0, 1]}, "malformed blob"),
        ({"__b__": ["0", 1]}, "malformed blob"),
        ({"__a__": [0, "<f8", ["1"]]}, "bad shape"),
        ({"__a__": [0, "<f8", 1]}, "bad shape"),
        ({"__il__": [0, True]}, "bad shape"),
        ({"__bl__": [0, 1.0, 1]}, "malformed bytes-list"),
        ({"__d__": {"1": 2}}, "malformed __d__"),
        ({"__b__": [0, 1], "x": 1}, "mixes the marker"),
        ({"__il__": [0, 1], "__b__": [0, 1]}, "mixes the marker"),
    ],
)
def test_wrong_types_are_refused(ref: dict[str, Any], match: str) -> None:
    # The two "mixes the marker" cases decoded before the fix, as a plain dict holding
    # marker keys (which encode() never writes: such a mapping travels as "__d__").
    with pytest.raises(WireFormatError, match=match):
        decode(_message({"v": ref}, bytes(8)))


@pytest.mark.parametrize(
    ("document", "match"),
    [
        ('{"v": 1, "v": 2}', "repeats the key"),
        ('{"v": {"a": 1, "b": 2, "a": 3}}', "repeats the key"),
        ('{"v": {"__d__": [[1, "x"], [1, "y"]]}}', "repeats the key"),
        ('{"v": {"__d__": [[{"__t__": [1, 2]}, 0], [{"__t__": [1, 2]}, 1]]}}', "repeats the key"),
    ],
)
def test_duplicated_keys_are_refused(document: str, match: str) -> None:
    # Before the fix: the last value silently won (a receiver and an auditor parsing the
    # same document could disagree on what it says).
    with pytest.raises(WireFormatError, match=match):
        decode(_message(document, b""))


def test_document_over_its_cap_is_refused_before_parsing() -> None:
    # 300 000 empty lists: 900 KB of text that json would turn into ~20 MB of objects.
    document = '{"v": [' + ",".join(["[]"] * 300_000) + "]}"
    limits = Limits(message=4 * MIB, document=64 * 1024, decoded=MIB)
    assert _refused_peak(_message(document, b""), "document of", limits=limits) < MIB


def test_limits_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match=r"Limits\.decoded"):
        Limits(decoded=-1)


# ---------------------------------------------------------------------------- per-step caps
def _session(tmp_path: Path, n: int, **overrides: Any) -> tuple[Any, Any]:
    from test_flower_helpers import run_config, scenario_file

    from fa_hetdp.flowerkit.settings import RunSettings

    config = run_config(tmp_path, scenario_file(tmp_path, n), **overrides)
    return config, RunSettings.from_run_config(config)


@pytest.mark.parametrize(("n", "overrides"), [(12, {}), (20, {"secagg-neighbours": 6})])
def test_real_protocol_messages_fit_their_step_caps_with_room(
    tmp_path: Path, n: int, overrides: dict[str, Any]
) -> None:
    # Every request (the ClientApp decodes it under its own caps) and every reply (decoded
    # here under the strategy's caps) of a real run fits, using at most half of each cap.
    from test_server_strategy import InMemoryTransport

    from fa_hetdp.server.strategy import HeterogeneityStrategy

    config, settings = _session(tmp_path, n, **overrides)
    strategy = HeterogeneityStrategy(settings)
    used: dict[str, float] = {}

    class Capped(InMemoryTransport):
        def exchange(self, step: str, payloads: Any, timeout: float) -> Any:
            limits = strategy.message_limits(step)
            replies, dropouts = super().exchange(step, payloads, timeout)
            for reply in replies.values():
                content = encode(reply)
                decode(content, limits=limits)  # raises if over a cap
                size = len(content["doc"]["json"]) + len(content["doc"]["blob"])
                used[step] = max(used.get(step, 0.0), size / limits.message)
            return replies, dropouts

    document = strategy.run(Capped(n, config))
    assert document["status"] == "success"
    assert document["survivors"] == {step: n for step in document["survivors"]}
    assert max(used.values()) < 0.5, used


def test_step_caps_grow_with_k_and_d_only_where_the_messages_do() -> None:
    small = step_limits(SHARE_KEYS, k=10, d=None)
    assert step_limits(SHARE_KEYS, k=20, d=None).decoded > small.decoded  # O(k)
    assert step_limits(SHARE_KEYS, k=10, d=10**6) == small  # no vectors at share_keys
    assert step_limits(STAGE1_INPUT, k=10, d=10**4).decoded > 10**4 * 2 * 8  # a masked vector
    assert step_limits(STAGE1_INPUT, k=10, d=10**9).decoded == MAX_MESSAGE_BYTES
    with pytest.raises(ValueError, match="needs the dimension"):
        step_limits(STAGE1_INPUT, k=10, d=None)


@dataclass
class _OneStepGrid:
    """A grid whose nodes reply once with the given content (a fake SuperLink)."""

    contents: dict[int, RecordDict]
    sent: dict[str, int] = field(default_factory=dict)

    def push_messages(self, messages: Any) -> list[str]:
        for i, message in enumerate(messages):
            self.sent[f"m{i}"] = int(message.metadata.dst_node_id)
        return list(self.sent)

    def pull_messages(self, message_ids: Any) -> list[Any]:
        out = [
            SimpleNamespace(
                metadata=SimpleNamespace(reply_to_message_id=mid, src_node_id=self.sent[mid]),
                has_error=lambda: False,
                content=self.contents[self.sent[mid]],
            )
            for mid in list(message_ids)
        ]
        return out

    def get_node_ids(self) -> list[int]:
        return sorted(self.contents)


def test_an_over_cap_reply_drops_that_client_not_the_step(tmp_path: Path) -> None:
    # Node 2 pads its share_keys reply with 1 MiB: under the old absolute cap (256 MiB) it was
    # decoded; under the step's cap (k = 11 neighbours: about 86 KiB) it is refused and only
    # node 2 is dropped. Before the fix: GridTransport had no per-step caps (TypeError).
    from flwr.supercore.task_identity import TaskIdentity

    from fa_hetdp.server.app import GridTransport
    from fa_hetdp.server.strategy import HeterogeneityStrategy

    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 0
    _, settings = _session(tmp_path, 12)
    strategy = HeterogeneityStrategy(settings)
    strategy._session_k, strategy._session_d = 11, 64  # as after sampling 12 nodes
    fine = encode({"secagg": {"shares": [bytes(300)] * 11}})
    padded = encode({"secagg": {"shares": [bytes(300)] * 11}, "pad": bytes(MIB)})
    grid = _OneStepGrid({1: fine, 2: padded})
    transport = GridTransport(grid, limits=strategy.message_limits)  # type: ignore[arg-type]
    replies, dropouts = transport.exchange(SHARE_KEYS, {1: {}, 2: {}}, 1.0)
    assert set(replies) == {1} and set(dropouts) == {2}
    assert "exceeds this step's cap" in dropouts[2]


def test_a_hostile_server_cannot_make_a_client_decode_much(tmp_path: Path) -> None:
    # The server's advertise_keys request carries 200 references to one 1 MiB range. Before
    # the fix the ClientApp decoded it (tracemalloc peak ~200 MiB) and only then failed;
    # now the client refuses it (its step fails: Flower sends an error reply) with a peak
    # of a few MiB.
    from flwr.app import Context, Message
    from flwr.supercore.task_identity import TaskIdentity

    from fa_hetdp.clients.app import app as client_app

    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 0
    config, _ = _session(tmp_path, 12)
    ref = {"__a__": [0, "<f8", [MIB // 8]]}
    document = {"client-id": 1, "session-size": 12, "setup": {"pad": [ref] * 200}}
    message = Message(
        content=_message(document, bytes(MIB)),
        dst_node_id=5000,
        message_type=f"query.{ADVERTISE_KEYS}",
        group_id=ADVERTISE_KEYS,
    )
    context = Context(
        run_id=1,
        node_id=5000,
        node_config={"partition-id": 0, "num-partitions": 12, "allow-seeded-noise": True},
        state=RecordDict(),
        run_config=dict(config),
    )
    tracemalloc.start()
    try:
        with pytest.raises(Exception, match=r"overlapping|would decode to|exceeds"):
            client_app(message, context)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * MIB


@pytest.mark.parametrize(
    "document",
    [{"__b__": [0, 4]}, {"__il__": [0, 1]}, {"__a__": [0, "<f8", [1]]}],
    ids=["bytes", "int-list", "array"],
)
def test_a_document_that_is_one_reference_is_not_a_mapping(document: dict[str, Any]) -> None:
    # It used to reach an assert (AssertionError, or nothing under python -O), not a
    # WireFormatError that drops the sender.
    with pytest.raises(WireFormatError, match="not a mapping"):
        decode(_message(document, bytes(8)))
