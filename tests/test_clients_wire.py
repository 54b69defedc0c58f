"""The pickle-free wire format between the ClientApp and the ServerApp."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from flwr.app import ConfigRecord, RecordDict
from hypothesis import given, settings
from hypothesis import strategies as st

from clients.wire import WireFormatError, decode, encode

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
    "content",
    [
        RecordDict(),
        RecordDict({"doc": ConfigRecord({"json": "not json"})}),
        RecordDict({"doc": ConfigRecord({"json": "[1, 2]"})}),
    ],
)
def test_malformed_messages_raise(content: RecordDict) -> None:
    if "doc" in content:
        good = encode({})
        content["blobs"] = good["blobs"]
        content["arrays"] = good["arrays"]
    with pytest.raises(WireFormatError):
        decode(content)


def test_dangling_references_raise() -> None:
    content = encode({"a": b"x", "b": np.zeros(2)})
    content["doc"] = ConfigRecord({"json": '{"a": {"__b__": 7}}'})
    with pytest.raises(WireFormatError, match="missing blob"):
        decode(content)
    content["doc"] = ConfigRecord({"json": '{"a": {"__a__": 3}}'})
    with pytest.raises(WireFormatError, match="missing array"):
        decode(content)
    content["doc"] = ConfigRecord({"json": '{"a": {"__d__": [[[1], 2]]}}'})
    with pytest.raises(WireFormatError, match="unhashable"):
        decode(content)


def test_unencodable_values_raise() -> None:
    with pytest.raises(WireFormatError, match="cannot encode"):
        encode({"f": object()})
