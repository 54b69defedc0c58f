"""The pickle-free wire format between the ClientApp and the ServerApp."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from flwr.app import ConfigRecord, RecordDict
from hypothesis import given, settings
from hypothesis import strategies as st

from fa_hetdp.flowerkit.wire import WireFormatError, decode, encode

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.binary(max_size=16),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=4), inner, max_size=4),
        st.dictionaries(st.integers(0, 2**63), inner, max_size=4),
    ),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(max_size=6), values, max_size=5))
def test_round_trip(payload: dict[str, Any]) -> None:
    assert decode(encode(payload)) == payload


def test_arrays_keep_dtype_shape_and_values() -> None:
    payload = {
        "vector": np.arange(7, dtype=np.uint64) * np.uint64(2**61),
        "shares": np.ones((3, 1, 4), dtype=np.uint32),
        "nested": {5: [np.linspace(0, 1, 3)]},
    }
    out = decode(encode(payload))
    assert out["vector"].dtype == np.uint64
    np.testing.assert_array_equal(out["vector"], payload["vector"])
    assert out["shares"].shape == (3, 1, 4) and out["shares"].dtype == np.uint32
    np.testing.assert_array_equal(out["nested"][5][0], [0.0, 0.5, 1.0])


def test_marker_like_user_keys_survive() -> None:
    payload = {"x": {"__a__": 0}, "y": {"__d__": "text"}}
    assert decode(encode(payload)) == payload


@pytest.mark.parametrize(
    "doc",
    [
        None,
        {"json": "not json", "blob": b""},
        {"json": "[1, 2]", "blob": b""},
        {"json": "{}", "blob": "text"},
    ],
)
def test_malformed_messages_raise(doc: dict[str, Any] | None) -> None:
    content = RecordDict() if doc is None else encode({})
    if doc is not None:
        content["doc"] = ConfigRecord(doc)
    with pytest.raises(WireFormatError):
        decode(content)


@pytest.mark.parametrize(
    ("document", "match"),
    [
        ('{"a": {"__b__": [7, 1]}}', "missing blob range"),
        ('{"a": {"__b__": "x"}}', "malformed blob"),
        ('{"a": {"__bl__": [0, 4, 9]}}', "missing blob range"),
        ('{"a": {"__a__": 3}}', "malformed array"),
        ('{"a": {"__a__": [0, "|O", [1]]}}', "non-numeric"),
        ('{"a": {"__a__": [0, "<f8", [4]]}}', "missing blob range"),
        ('{"a": {"__a__": [0, "<f8", [-1]]}}', "bad shape"),
        ('{"a": {"__il__": 0}}', "malformed int-list"),
        ('{"a": {"__d__": [[[1], 2]]}}', "unhashable"),
        ('{"a": {"__t__": 5}}', "tuple"),
    ],
)
def test_dangling_or_malformed_references_raise(document: str, match: str) -> None:
    content = encode({"a": b"xy", "b": np.zeros(2)})
    content["doc"] = ConfigRecord({"json": document, "blob": b"xy"})
    with pytest.raises(WireFormatError, match=match):
        decode(content)


def test_long_lists_are_packed_into_two_records() -> None:
    keys = [i.to_bytes(2, "big") * 16 for i in range(500)]
    payload = {"ids": list(range(500)), "keys": keys, "mixed": [1, b"a", 2, 3], "flags": [True] * 5}
    content = encode(payload)
    assert list(content.keys()) == ["doc"] and len(content["doc"]) == 2
    out = decode(content)
    assert out == payload
    assert type(out["ids"][0]) is int and out["flags"] == [True] * 5


def test_unencodable_values_raise() -> None:
    with pytest.raises(WireFormatError, match="cannot encode"):
        encode({"f": object()})
    with pytest.raises(WireFormatError, match="dtype"):
        encode({"f": np.array([object()])})


def test_big_endian_and_huge_ints_round_trip() -> None:
    payload = {"be": np.arange(3, dtype=">u4"), "big": [2**70, 1, 2, 3], "empty": np.zeros((0, 2))}
    out = decode(encode(payload))
    np.testing.assert_array_equal(out["be"], [0, 1, 2])
    assert out["big"] == [2**70, 1, 2, 3] and out["empty"].shape == (0, 2)


# ---------------------------------------------------------------------------- hostile input
def _with_document(document: str, blob: bytes = b"xy") -> RecordDict:
    content = RecordDict()
    content["doc"] = ConfigRecord({"json": document, "blob": blob})
    return content


@pytest.mark.parametrize(
    ("document", "match"),
    [
        ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "not JSON"),  # RecursionError in json
        ('{"a": ' + "[" * 100 + "]" * 100 + "}", "deeper than"),
        ('{"a": {"__t__": ' + "[" * 100 + "]" * 100 + "}}", "deeper than"),
        ('{"a": ' + "7" * 5000 + "}", "not JSON"),  # ValueError: int over 4300 digits
        ('{"a": {"__a__": [0, "<f8", [0, 4611686018427387904, 4]]}}', "bad shape"),
        ('{"a": {"__a__": [0, "<f8", [' + ", ".join(["0"] * 40) + "]]}}", "bad shape"),
        ('{"a": {"__a__": [0, "(99999999999,)f8", [1]]}}', "bad dtype"),
        ('{"a": {"__a__": [0, "<f8,<i4", [1]]}}', "non-numeric"),
        ('{"a": {"__a__": [0, "zz", [1]]}}', "bad dtype"),
        ('{"a": {"__a__": [0, 5, [1]]}}', "bad dtype"),
        ('{"a": {"__a__": [0, "<U4", [0]]}}', "non-numeric"),
        ('{"a": {"__bl__": [0, 0, 1000000000000]}}', "malformed bytes-list"),
        ('{"a": {"__bl__": [0, -1, 2]}}', "malformed bytes-list"),
        ('{"a": {"__il__": [0, 1000000000000000000]}}', "bad shape"),
        ('{"a": {"__il__": [0, 1000000]}}', "missing blob range"),
        ('{"a": {"__b__": [0, 1' + "0" * 4000 + "]}}", "missing blob range"),
        ('{"a": {"__d__": [[{"k": 1}, 2]]}}', "unhashable"),
    ],
)
def test_hostile_documents_raise_wire_format_error(document: str, match: str) -> None:
    with pytest.raises(WireFormatError, match=match):
        decode(_with_document(document))


def test_lists_of_empty_bytes_round_trip_unpacked() -> None:
    payload = {"e": [b"", b"", b"", b"", b""]}
    content = encode(payload)
    assert "__bl__" not in content["doc"]["json"]
    assert decode(content) == payload


def _decodes_or_wire_error(content: RecordDict) -> None:
    try:
        out = decode(content)
    except WireFormatError:
        return
    assert isinstance(out, dict)


_json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, 2, 8, -1, 2**40, 2**62]),
    st.floats(),
    st.text(max_size=6),
    st.sampled_from(["<f8", "|u1", "<i8", ">u4", "<c16", "|O", "<U2", "V8", "(2,)f8", "M8"]),
)
_marker_trees = st.recursive(
    _json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(st.text(max_size=3), inner, max_size=3),
        st.builds(
            lambda marker, value: {marker: value},
            st.sampled_from(["__a__", "__b__", "__t__", "__d__", "__il__", "__bl__"]),
            inner,
        ),
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(document=_marker_trees, blob=st.binary(max_size=64))
def test_fuzz_marker_documents_raise_only_wire_format_error(document: Any, blob: bytes) -> None:
    import json

    _decodes_or_wire_error(_with_document(json.dumps({"a": document}), blob))


@settings(max_examples=200, deadline=None)
@given(document=st.text(max_size=64), blob=st.binary(max_size=32))
def test_fuzz_arbitrary_text_raises_only_wire_format_error(document: str, blob: bytes) -> None:
    _decodes_or_wire_error(_with_document(document, blob))


_record_values = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(),
    st.text(max_size=16),
    st.binary(max_size=16),
    st.booleans(),
    st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=3),
    st.lists(st.text(max_size=4), max_size=3),
)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["json", "blob", "other"]), _record_values, max_size=3),
    st.sampled_from(["doc", "other"]),
)
def test_fuzz_arbitrary_records_raise_only_wire_format_error(
    fields: dict[str, Any], name: str
) -> None:
    content = RecordDict()
    content[name] = ConfigRecord(fields)
    _decodes_or_wire_error(content)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_fuzz_mutated_messages_raise_only_wire_format_error(data: st.DataObject) -> None:
    content = encode(
        {"v": np.arange(5.0), "ids": list(range(6)), "keys": [b"ab"] * 4, "t": (1, b"z")}
    )
    document = content["doc"]["json"]
    blob = content["doc"]["blob"]
    assert isinstance(document, str) and isinstance(blob, bytes)
    start = data.draw(st.integers(0, len(document)))
    end = data.draw(st.integers(start, min(len(document), start + 8)))
    filler = data.draw(st.sampled_from(["", "0", "-1", "9" * 30, "[", "]", '"x"', "{}", ","]))
    cut = data.draw(st.integers(0, len(blob)))
    _decodes_or_wire_error(_with_document(document[:start] + filler + document[end:], blob[:cut]))
