"""Wire format shared by the ClientApp and the ServerApp: plain dicts <-> Flower ``RecordDict``.

The protocol messages (``secagg``'s state-machine messages and our own stage payloads) are
nested dicts of ``str``/``int``/``float``/``bool``/``None``/``bytes``/lists/tuples/numpy
arrays, some keyed by integers (peer ids). A ``RecordDict`` holds flat records only, and
Flower's cost grows with the number of record entries, so a message travels as two records:

- ``ConfigRecord "doc"``: ``{"json": <the structure as JSON>, "blob": <all bytes values
  concatenated>}``;
- ``ArrayRecord "arrays"``: every numpy array, and every long list of integers as an int64
  array, under keys ``"0"``, ``"1"``, ...

In the JSON, ``{"__a__": k}`` is array ``k``; ``{"__il__": k}`` a list of ints stored as
array ``k``; ``{"__b__": [offset, length]}`` a bytes value in the blob;
``{"__bl__": [offset, size, count]}`` a list of ``count`` bytes values of equal ``size``;
``{"__t__": ...}`` a tuple; ``{"__d__": [[key, value], ...]}`` a dict with non-string keys.
(Key directories and survivor lists of secure aggregation are O(n) per message: packing them
keeps a round's cost close to that of a single array.)

No pickle: decoding only builds the types above, and anything else raises
:class:`WireFormatError` (the server counts such a reply as a dropout).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

__all__ = ["WireFormatError", "decode", "encode"]

_DOC = "doc"
_ARRAYS = "arrays"
_MARKERS = frozenset({"__a__", "__b__", "__t__", "__d__", "__il__", "__bl__"})
_PACK_MIN = 4  # lists at least this long are packed
_INT64 = (-(2**63), 2**63 - 1)


class WireFormatError(ValueError):
    """A message could not be encoded or decoded (malformed or unexpected content)."""


def _int_list(value: list[Any]) -> bool:
    return all(
        type(v) is int and _INT64[0] <= v <= _INT64[1]
        for v in value
    )


def _bytes_list(value: list[Any]) -> bool:
    if not all(isinstance(v, bytes) for v in value):
        return False
    size = len(value[0])
    return all(len(v) == size for v in value)


def encode(payload: Mapping[str, Any]) -> RecordDict:
    """Encode a message dict into a ``RecordDict`` (see the module docstring)."""
    arrays: list[np.ndarray] = []
    blob = bytearray()

    def add_array(array: np.ndarray) -> int:
        arrays.append(array)
        return len(arrays) - 1

    def walk(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            return {"__a__": add_array(value)}
        if isinstance(value, (bytes, bytearray, memoryview)):
            data = bytes(value)
            offset = len(blob)
            blob.extend(data)
            return {"__b__": [offset, len(data)]}
        if isinstance(value, np.generic):
            return value.item()
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, tuple):
            return {"__t__": walk(list(value))}
        if isinstance(value, list):
            if len(value) >= _PACK_MIN and _int_list(value):
                return {"__il__": add_array(np.array(value, dtype=np.int64))}
            if len(value) >= _PACK_MIN and _bytes_list(value):
                offset = len(blob)
                for item in value:
                    blob.extend(item)
                return {"__bl__": [offset, len(value[0]), len(value)]}
            return [walk(v) for v in value]
        if isinstance(value, Mapping):
            if all(isinstance(k, str) for k in value) and not (_MARKERS & set(value)):
                return {k: walk(v) for k, v in value.items()}
            return {"__d__": [[walk(k), walk(v)] for k, v in value.items()]}
        raise WireFormatError(f"cannot encode a value of type {type(value).__name__}")

    doc = json.dumps(walk(dict(payload)), allow_nan=True, separators=(",", ":"))
    content = RecordDict()
    content[_DOC] = ConfigRecord({"json": doc, "blob": bytes(blob)})
    content[_ARRAYS] = ArrayRecord(
        array_dict={str(i): Array(np.ascontiguousarray(a)) for i, a in enumerate(arrays)}
    )
    return content


def _slice(blob: bytes, spec: Any) -> tuple[int, int]:
    if (
        not isinstance(spec, list) or len(spec) != 2 or not all(type(v) is int for v in spec)
    ):
        raise WireFormatError(f"malformed blob reference {spec!r}")
    offset, length = spec
    if offset < 0 or length < 0 or offset + length > len(blob):
        raise WireFormatError(f"message refers to a missing blob range {spec!r}")
    return offset, length


def decode(content: RecordDict) -> dict[str, Any]:
    """Decode a ``RecordDict`` built by :func:`encode`; raise :class:`WireFormatError` if not."""
    try:
        record = content[_DOC]
        doc = record["json"]
        blob = record["blob"]
        arrays = content[_ARRAYS]
    except (KeyError, TypeError) as exc:
        raise WireFormatError(f"message lacks the record {exc}") from exc
    if not isinstance(doc, str) or not isinstance(blob, bytes):
        raise WireFormatError("message records have the wrong types")
    if not isinstance(arrays, ArrayRecord):
        raise WireFormatError("message records have the wrong types")
    try:
        tree = json.loads(doc)
    except json.JSONDecodeError as exc:
        raise WireFormatError(f"message document is not JSON: {exc}") from exc

    def walk(value: Any) -> Any:
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, dict):
            if len(value) == 1 and (_MARKERS & set(value)):
                ((marker, inner),) = value.items()
                if marker == "__a__":
                    return _array(arrays, inner)
                if marker == "__il__":
                    array = _array(arrays, inner)
                    if array.dtype != np.int64 or array.ndim != 1:
                        raise WireFormatError("packed int list is not a 1-D int64 array")
                    return array.tolist()
                if marker == "__b__":
                    offset, length = _slice(blob, inner)
                    return blob[offset : offset + length]
                if marker == "__bl__":
                    if not isinstance(inner, list) or len(inner) != 3:
                        raise WireFormatError(f"malformed bytes-list reference {inner!r}")
                    offset, size, count = inner
                    if type(count) is not int or count < 0:
                        raise WireFormatError(f"malformed bytes-list reference {inner!r}")
                    _slice(blob, [offset, size * count if type(size) is int else -1])
                    return [blob[offset + i * size : offset + (i + 1) * size] for i in range(count)]
                if marker == "__t__":
                    items = walk(inner)
                    if not isinstance(items, list):
                        raise WireFormatError("malformed tuple in message")
                    return tuple(items)
                if marker == "__d__" and isinstance(inner, list):
                    out: dict[Any, Any] = {}
                    for pair in inner:
                        if not isinstance(pair, list) or len(pair) != 2:
                            raise WireFormatError("malformed key/value pair in message")
                        key = walk(pair[0])
                        try:
                            out[key] = walk(pair[1])
                        except TypeError as exc:
                            raise WireFormatError(f"unhashable key in message: {exc}") from exc
                    return out
                raise WireFormatError(f"malformed {marker} entry in message")
            return {k: walk(v) for k, v in value.items()}
        return value

    result = walk(tree)
    if not isinstance(result, dict):
        raise WireFormatError("message document is not a mapping")
    return result


def _array(arrays: ArrayRecord, index: Any) -> np.ndarray:
    key = str(index)
    if key not in arrays:
        raise WireFormatError(f"message refers to a missing array {index!r}")
    try:
        return np.asarray(arrays[key].numpy())
    except Exception as exc:  # malformed bytes from a peer
        raise WireFormatError(f"array {index!r} cannot be decoded: {exc}") from exc
