"""Wire format shared by the ClientApp and the ServerApp: plain dicts <-> Flower ``RecordDict``.

The protocol messages (``secagg``'s state-machine messages and our own stage payloads) are
nested dicts of ``str``/``int``/``float``/``bool``/``None``/``bytes``/lists/tuples/numpy
arrays, some keyed by integers (peer ids). A ``RecordDict`` holds flat records only, so a
message travels as:

- ``ArrayRecord "arrays"``: every numpy array, under keys ``"0"``, ``"1"``, ...;
- ``ConfigRecord "blobs"``: every ``bytes`` value, under keys ``"0"``, ``"1"``, ...;
- ``ConfigRecord "doc"``: ``{"json": <the structure as JSON>}`` where arrays and bytes are
  replaced by ``{"__a__": k}`` / ``{"__b__": k}``, tuples by ``{"__t__": [...]}`` and dicts
  with non-string keys by ``{"__d__": [[key, value], ...]}``.

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
_BLOBS = "blobs"
_ARRAYS = "arrays"
_MARKERS = frozenset({"__a__", "__b__", "__t__", "__d__"})


class WireFormatError(ValueError):
    """A message could not be encoded or decoded (malformed or unexpected content)."""


def encode(payload: Mapping[str, Any]) -> RecordDict:
    """Encode a message dict into a ``RecordDict`` (see the module docstring)."""
    arrays: list[np.ndarray] = []
    blobs: list[bytes] = []

    def walk(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            arrays.append(value)
            return {"__a__": len(arrays) - 1}
        if isinstance(value, (bytes, bytearray, memoryview)):
            blobs.append(bytes(value))
            return {"__b__": len(blobs) - 1}
        if isinstance(value, np.generic):
            return value.item()
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, tuple):
            return {"__t__": [walk(v) for v in value]}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, Mapping):
            if all(isinstance(k, str) for k in value) and not (_MARKERS & set(value)):
                return {k: walk(v) for k, v in value.items()}
            return {"__d__": [[walk(k), walk(v)] for k, v in value.items()]}
        raise WireFormatError(f"cannot encode a value of type {type(value).__name__}")

    doc = json.dumps(walk(dict(payload)), allow_nan=True, separators=(",", ":"))
    content = RecordDict()
    content[_DOC] = ConfigRecord({"json": doc})
    content[_BLOBS] = ConfigRecord({str(i): b for i, b in enumerate(blobs)})
    content[_ARRAYS] = ArrayRecord(
        array_dict={str(i): Array(np.ascontiguousarray(a)) for i, a in enumerate(arrays)}
    )
    return content


def decode(content: RecordDict) -> dict[str, Any]:
    """Decode a ``RecordDict`` built by :func:`encode`; raise :class:`WireFormatError` if not."""
    try:
        doc = content[_DOC]["json"]
        blobs = content[_BLOBS]
        arrays = content[_ARRAYS]
    except (KeyError, TypeError) as exc:
        raise WireFormatError(f"message lacks the record {exc}") from exc
    if not isinstance(doc, str) or not isinstance(blobs, ConfigRecord):
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
                if marker == "__b__":
                    blob = blobs.get(str(inner))
                    if not isinstance(blob, bytes):
                        raise WireFormatError(f"message refers to a missing blob {inner!r}")
                    return blob
                if marker == "__t__" and isinstance(inner, list):
                    return tuple(walk(v) for v in inner)
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
