"""The pickle-free wire format between the ClientApp and the ServerApp."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from flwr.app import ConfigRecord, RecordDict
from hypothesis import given, settings
from hypothesis import strategies as st

from fa_hetdp.flower.wire import WireFormatError, decode, encode

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
