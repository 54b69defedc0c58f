"""Wire format shared by the ClientApp and the ServerApp: plain dicts <-> Flower ``RecordDict``.

The protocol messages (``secagg``'s state-machine messages and our own stage payloads) are
nested dicts of ``str``/``int``/``float``/``bool``/``None``/``bytes``/lists/tuples/numpy
arrays, some keyed by integers (peer ids). A ``RecordDict`` holds flat records only, and
Flower's cost grows with the number of records and array objects, so a message travels as one
record, ``ConfigRecord "doc"`` = ``{"json": <the structure as JSON>, "blob": <bytes>}``, where
the blob holds every ``bytes`` value, every numpy array (raw, little-endian, 8-byte aligned)
and every long list of integers (as int64):

- ``{"__a__": [offset, dtype, shape]}``: a numpy array (numeric dtypes only);
- ``{"__il__": [offset, count]}``: a list of ``count`` ints;
- ``{"__b__": [offset, length]}``: a bytes value;
- ``{"__bl__": [offset, size, count]}``: a list of ``count`` bytes values of equal ``size``;
- ``{"__t__": ...}``: a tuple; ``{"__d__": [[key, value], ...]}``: a dict with non-string keys.

(Secure aggregation's key directories and survivor lists are O(k) per message, O(n) on the
complete graph: packing them keeps a round's cost close to that of a single array.)

No pickle: decoding only builds the types above, and anything else raises
:class:`WireFormatError` (the server counts such a reply as a dropout). Decoding is bounded
by the message itself: nesting deeper than :data:`MAX_DEPTH` is refused, and every packed
value must lie in the blob (``__bl__`` items are never empty, arrays have at most
:data:`MAX_NDIM` axes of at most :data:`MAX_DIM` entries), so a short document cannot make
the decoder build a large object.
"""

from __future__ import annotations

import json
import math
import reprlib
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, RecordDict

__all__ = ["MAX_DEPTH", "MAX_DIM", "MAX_NDIM", "WireFormatError", "decode", "encode"]

_DOC = "doc"
_MARKERS = frozenset({"__a__", "__b__", "__t__", "__d__", "__il__", "__bl__"})
_PACK_MIN = 4  # lists at least this long are packed
_INT64 = np.dtype("<i8")

MAX_DEPTH = 64
"""Deepest nesting of lists and dicts a message may have (the protocol's use about 6)."""
MAX_NDIM = 32
"""Most axes an array in a message may have."""
MAX_DIM = 2**40
"""Largest length of one array axis (bounds the shape of an empty array)."""


class WireFormatError(ValueError):
    """A message could not be encoded or decoded (malformed or unexpected content)."""


def encode(payload: Mapping[str, Any]) -> RecordDict:
    """Encode a message dict into a ``RecordDict`` (see the module docstring)."""
    blob = bytearray()

    def append(data: bytes | memoryview, *, align: bool = False) -> int:
        if align and len(blob) % 8:
            blob.extend(bytes(8 - len(blob) % 8))
        offset = len(blob)
        blob.extend(data)
        return offset

    def walk(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            if value.dtype.kind not in "biufc" or value.dtype.hasobject:
                raise WireFormatError(f"cannot encode an array of dtype {value.dtype}")
            array = np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<"))
            offset = append(array.tobytes(), align=True)
            return {"__a__": [offset, array.dtype.str, list(array.shape)]}
        if isinstance(value, (bytes, bytearray, memoryview)):
            data = bytes(value)
            return {"__b__": [append(data), len(data)]}
        if isinstance(value, np.generic):
            return value.item()
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, tuple):
            return {"__t__": walk(list(value))}
        if isinstance(value, list):
            if len(value) >= _PACK_MIN:
                kinds = set(map(type, value))
                if kinds == {int}:
                    try:
                        packed = np.array(value, dtype=_INT64)
                    except OverflowError:
                        packed = None
                    if packed is not None:
                        offset = append(packed.tobytes(), align=True)
                        return {"__il__": [offset, len(value)]}
                elif kinds == {bytes} and len(set(map(len, value))) == 1 and value[0]:
                    offset = append(b"".join(value))
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
    return content


def _short(value: Any) -> str:
    # A bounded repr for error messages (a hostile reference may hold a huge list).
    return reprlib.repr(value)


def _slice(blob: bytes, spec: Any) -> tuple[int, int]:
    if not isinstance(spec, list) or len(spec) != 2 or not all(type(v) is int for v in spec):
        raise WireFormatError(f"malformed blob reference {_short(spec)}")
    offset, length = spec
    if offset < 0 or length < 0 or offset + length > len(blob):
        raise WireFormatError(f"message refers to a missing blob range {_short(spec)}")
    return offset, length


def decode(content: RecordDict, *, max_bytes: int | None = None) -> dict[str, Any]:
    """Decode a ``RecordDict`` built by :func:`encode`; raise :class:`WireFormatError` if not.

    Every failure -- a missing record, invalid JSON, too deep a nesting, an integer over
    Python's digit limit, a reference outside the blob, a bad dtype or shape, or a message
    larger than ``max_bytes`` (document plus blob; what the current step can legitimately
    carry, checked before anything is parsed) -- raises :class:`WireFormatError` (and
    nothing else).
    """
    try:
        return _decode(content, max_bytes)
    except WireFormatError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, RecursionError, MemoryError) as exc:
        # Defence in depth: the checks in _decode should leave nothing to reach here.
        raise WireFormatError(f"undecodable message: {type(exc).__name__}: {exc}") from exc


def _decode(content: RecordDict, max_bytes: int | None) -> dict[str, Any]:
    try:
        record = content[_DOC]
        doc = record["json"]
        blob = record["blob"]
    except (KeyError, TypeError) as exc:
        raise WireFormatError(f"message lacks the record {exc}") from exc
    if not isinstance(doc, str) or not isinstance(blob, bytes):
        raise WireFormatError("message records have the wrong types")
    if max_bytes is not None and len(doc) + len(blob) > max_bytes:
        raise WireFormatError(
            f"message of {len(doc) + len(blob)} bytes exceeds this step's cap of {max_bytes}"
        )
    try:
        tree = json.loads(doc)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, the int digit limit
        raise WireFormatError(f"message document is not JSON: {exc}") from exc

    def walk(value: Any, depth: int = 0) -> Any:
        if isinstance(value, (list, dict)) and depth >= MAX_DEPTH:
            raise WireFormatError(f"message nests deeper than {MAX_DEPTH} levels")
        if isinstance(value, list):
            return [walk(v, depth + 1) for v in value]
        if isinstance(value, dict):
            if len(value) == 1 and (_MARKERS & set(value)):
                ((marker, inner),) = value.items()
                if marker == "__a__":
                    return _array(blob, inner)
                if marker == "__il__":
                    if not isinstance(inner, list) or len(inner) != 2:
                        raise WireFormatError(f"malformed int-list reference {_short(inner)}")
                    return _array(blob, [inner[0], _INT64.str, [inner[1]]]).tolist()
                if marker == "__b__":
                    offset, length = _slice(blob, inner)
                    return blob[offset : offset + length]
                if marker == "__bl__":
                    if not isinstance(inner, list) or len(inner) != 3:
                        raise WireFormatError(f"malformed bytes-list reference {_short(inner)}")
                    offset, size, count = inner
                    if type(count) is not int or count < 0 or type(size) is not int or size < 1:
                        raise WireFormatError(f"malformed bytes-list reference {_short(inner)}")
                    _slice(blob, [offset, size * count])
                    return [blob[offset + i * size : offset + (i + 1) * size] for i in range(count)]
                if marker == "__t__":
                    items = walk(inner, depth + 1)
                    if not isinstance(items, list):
                        raise WireFormatError("malformed tuple in message")
                    return tuple(items)
                if marker == "__d__" and isinstance(inner, list):
                    out: dict[Any, Any] = {}
                    for pair in inner:
                        if not isinstance(pair, list) or len(pair) != 2:
                            raise WireFormatError("malformed key/value pair in message")
                        key = walk(pair[0], depth + 1)
                        value = walk(pair[1], depth + 1)
                        try:
                            out[key] = value
                        except TypeError as exc:
                            raise WireFormatError(f"unhashable key in message: {exc}") from exc
                    return out
                raise WireFormatError(f"malformed {marker} entry in message")
            return {k: walk(v, depth + 1) for k, v in value.items()}
        return value

    result = walk(tree)
    if not isinstance(result, dict):
        raise WireFormatError("message document is not a mapping")
    return result


def _array(blob: bytes, spec: Any) -> np.ndarray:
    if not isinstance(spec, list) or len(spec) != 3:
        raise WireFormatError(f"malformed array reference {_short(spec)}")
    offset, dtype_text, shape = spec
    if not isinstance(dtype_text, str) or len(dtype_text) > 8:
        raise WireFormatError(f"array reference with a bad dtype {_short(dtype_text)}")
    try:
        dtype = np.dtype(dtype_text)
    except Exception as exc:  # numpy raises TypeError, ValueError or SyntaxError
        raise WireFormatError(f"array reference with a bad dtype {_short(dtype_text)}") from exc
    if dtype.kind not in "biufc" or dtype.hasobject or dtype.itemsize < 1:
        raise WireFormatError(f"array reference with a non-numeric dtype {_short(dtype_text)}")
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_NDIM
        or not all(type(n) is int and 0 <= n <= MAX_DIM for n in shape)
    ):
        raise WireFormatError(
            f"array reference with a bad shape {_short(shape)} (at most {MAX_NDIM} axes of "
            f"0..{MAX_DIM} entries)"
        )
    count = math.prod(shape)
    start, _ = _slice(blob, [offset, count * dtype.itemsize])
    try:
        array = np.frombuffer(blob, dtype=dtype, count=count, offset=start).reshape(shape)
    except (ValueError, MemoryError) as exc:
        raise WireFormatError(f"array reference with a bad shape {_short(shape)}: {exc}") from exc
    return array.copy()
