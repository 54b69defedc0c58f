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
:class:`WireFormatError` (the server counts such a reply as a dropout; a client fails that
step). Decoding is bounded by :class:`Limits`, which the receiver sizes for the step it is
at (:mod:`fa_hetdp.flowerkit.limits`): the message and its document are measured before they
are parsed; nesting deeper than :data:`MAX_DEPTH` and a key given twice are refused; then a
first pass checks every reference -- inside the blob, not overlapping another (each value has
its own range, as :func:`encode` lays them out), arrays with at most :data:`MAX_NDIM` axes of
at most :data:`MAX_DIM` entries, ``__bl__`` items never empty -- and adds up what they would
materialise (payload plus a per-object allowance), and the message is refused if the total
is over ``Limits.decoded``, before anything is copied. A reference repeated any number of
times therefore cannot amplify a message.
"""

from __future__ import annotations

import hashlib
import json
import math
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, RecordDict

__all__ = [
    "ARRAY_OVERHEAD",
    "ITEM_OVERHEAD",
    "MAX_DEPTH",
    "MAX_DIM",
    "MAX_DOCUMENT_CHARS",
    "MAX_MESSAGE_BYTES",
    "MAX_NDIM",
    "Limits",
    "WireFormatError",
    "decode",
    "digest",
    "encode",
]

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
MAX_MESSAGE_BYTES = 1 << 28
"""Absolute cap on a message (document plus blob) and on what it decodes to, in bytes."""
MAX_DOCUMENT_CHARS = 1 << 22
"""Absolute cap on a message's JSON document (the protocol's are O(k) entries, well below)."""
ITEM_OVERHEAD = 48
"""Bytes counted per ``bytes`` value or list item beyond its payload (CPython: 33 for a
``bytes`` header, at most 36 for an int below 2**63, plus an 8-byte list slot)."""
ARRAY_OVERHEAD = 128
"""Bytes counted per array beyond its data (CPython's ndarray header, 112 bytes, plus
16 per axis on top)."""


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


def digest(payload: Mapping[str, Any]) -> bytes:
    """Return the SHA-256 digest of ``payload``'s encoding, its top-level keys sorted.

    The sender's values and the receiver's decoded copy encode alike (arrays keep their
    dtype, numpy scalars become Python numbers, packed lists stay packed), so both ends of a
    message get the same digest: what a secure summation binds its masks to
    (:func:`fa_hetdp.secagg.crypto.bind_mask_key`).
    """
    record = encode(dict(sorted(payload.items())))[_DOC]
    doc = str(record["json"]).encode()
    blob = bytes(record["blob"])  # type: ignore[arg-type]
    head = b"fa-hetdp/wire-digest/" + len(doc).to_bytes(8, "little")
    return hashlib.sha256(head + doc + blob).digest()


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


@dataclass(frozen=True)
class Limits:
    """What one message may make the decoder hold (see :func:`decode`), in bytes.

    ``message``: document plus blob, as received; ``document``: the JSON text alone (its
    parsed form costs a bounded multiple of it: no reference can make it larger);
    ``decoded``: the total that the message's references materialise (payload bytes plus a
    fixed allowance per Python object, :data:`ITEM_OVERHEAD`, :data:`ARRAY_OVERHEAD`).
    Each is checked before the step it bounds: the sizes before parsing, the decoded total
    of all references before any is copied.
    """

    message: int = MAX_MESSAGE_BYTES
    document: int = MAX_DOCUMENT_CHARS
    decoded: int = MAX_MESSAGE_BYTES

    def __post_init__(self) -> None:
        for name in ("message", "document", "decoded"):
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                raise ValueError(f"Limits.{name} must be an int >= 0, got {value!r}")


def decode(
    content: RecordDict, *, max_bytes: int | None = None, limits: Limits | None = None
) -> dict[str, Any]:
    """Decode a ``RecordDict`` built by :func:`encode`; raise :class:`WireFormatError` if not.

    ``limits`` bounds what the message may make the decoder hold (:class:`Limits`; the
    defaults are the absolute caps :data:`MAX_MESSAGE_BYTES`, :data:`MAX_DOCUMENT_CHARS`);
    ``max_bytes`` (older form) caps the message and its decoded total alike, and the
    document at ``min(max_bytes, MAX_DOCUMENT_CHARS)``.

    Every failure -- a missing record, a message or document over its cap (checked before
    anything is parsed), invalid JSON, a duplicated key, too deep a nesting, an integer over
    Python's digit limit, a reference outside the blob or overlapping another, a bad dtype
    or shape, or references that would materialise more than ``limits.decoded`` bytes in all
    (checked before any is copied) -- raises :class:`WireFormatError` (and nothing else).
    """
    if limits is None:
        limits = (
            Limits()
            if max_bytes is None
            else Limits(max_bytes, min(max_bytes, MAX_DOCUMENT_CHARS), max_bytes)
        )
    try:
        return _decode(content, limits)
    except WireFormatError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, RecursionError, MemoryError) as exc:
        # Defence in depth: the checks in _decode should leave nothing to reach here.
        raise WireFormatError(f"undecodable message: {type(exc).__name__}: {exc}") from exc


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise WireFormatError(f"message document repeats the key {_short(key)}")
        out[key] = value
    return out


class _Budget:
    """The blob ranges and bytes a document's references would materialise (pass 1)."""

    def __init__(self) -> None:
        self.ranges: list[tuple[int, int]] = []
        self.total = 0

    def take(self, offset: int, length: int, cost: int) -> None:
        if length:
            self.ranges.append((offset, length))
        self.total += cost

    def check(self, cap: int) -> None:
        if self.total > cap:
            raise WireFormatError(
                f"message references would decode to {self.total} bytes, over this step's "
                f"cap of {cap} (every reference counts, each time it appears)"
            )
        self.ranges.sort()
        end = 0
        for offset, length in self.ranges:
            if offset < end:
                raise WireFormatError(
                    f"message refers to overlapping blob ranges (at offset {offset}); each "
                    "value must have its own range"
                )
            end = offset + length


def _decode(content: RecordDict, limits: Limits) -> dict[str, Any]:
    try:
        record = content[_DOC]
        doc = record["json"]
        blob = record["blob"]
    except (KeyError, TypeError) as exc:
        raise WireFormatError(f"message lacks the record {exc}") from exc
    if not isinstance(doc, str) or not isinstance(blob, bytes):
        raise WireFormatError("message records have the wrong types")
    if len(doc) + len(blob) > limits.message:
        raise WireFormatError(
            f"message of {len(doc) + len(blob)} bytes exceeds this step's cap of {limits.message}"
        )
    if len(doc) > limits.document:
        raise WireFormatError(
            f"message document of {len(doc)} characters exceeds this step's cap of "
            f"{limits.document}"
        )
    try:
        tree = json.loads(doc, object_pairs_hook=_unique_keys)
    except WireFormatError:
        raise
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, the int digit limit
        raise WireFormatError(f"message document is not JSON: {exc}") from exc
    if not isinstance(tree, dict):
        raise WireFormatError("message document is not a mapping")
    budget = _Budget()
    _walk(tree, budget, blob)  # pass 1: validate, add up; nothing copied
    budget.check(limits.decoded)
    result = _walk(tree, None, blob)  # pass 2: build
    if not isinstance(result, dict):  # e.g. a top-level blob reference
        raise WireFormatError("message document is not a mapping")
    return result


def _walk(value: Any, budget: _Budget | None, blob: bytes, depth: int = 0) -> Any:
    """Validate ``value`` into ``budget`` (pass 1) or build it from ``blob`` (pass 2)."""
    if isinstance(value, (list, dict)) and depth >= MAX_DEPTH:
        raise WireFormatError(f"message nests deeper than {MAX_DEPTH} levels")
    if isinstance(value, list):
        return [_walk(v, budget, blob, depth + 1) for v in value]
    if not isinstance(value, dict):
        return value
    markers = _MARKERS & set(value)
    if not markers:
        return {k: _walk(v, budget, blob, depth + 1) for k, v in value.items()}
    if len(value) != 1:
        raise WireFormatError(f"message mixes the marker {sorted(markers)[0]} with other keys")
    ((marker, inner),) = value.items()
    if marker == "__t__":
        items = _walk(inner, budget, blob, depth + 1)
        if not isinstance(items, list):
            raise WireFormatError("malformed tuple in message")
        return tuple(items)
    if marker == "__d__":
        if not isinstance(inner, list):
            raise WireFormatError(f"malformed {marker} entry in message")
        out: dict[Any, Any] = {}
        for pair in inner:
            if not isinstance(pair, list) or len(pair) != 2:
                raise WireFormatError("malformed key/value pair in message")
            key = _walk(pair[0], budget, blob, depth + 1)
            value = _walk(pair[1], budget, blob, depth + 1)
            if budget is not None:
                continue  # pass 1 builds placeholders: the keys are checked in pass 2
            try:
                if key in out:
                    raise WireFormatError(f"message mapping repeats the key {_short(key)}")
            except TypeError as exc:
                raise WireFormatError(f"unhashable key in message: {exc}") from exc
            out[key] = value
        return out
    if marker == "__b__":
        offset, length = _slice(blob, inner)
        if budget is not None:
            budget.take(offset, length, length + ITEM_OVERHEAD)
            return None
        return blob[offset : offset + length]
    if marker == "__bl__":
        if not isinstance(inner, list) or len(inner) != 3:
            raise WireFormatError(f"malformed bytes-list reference {_short(inner)}")
        offset, size, count = inner
        if type(count) is not int or count < 0 or type(size) is not int or size < 1:
            raise WireFormatError(f"malformed bytes-list reference {_short(inner)}")
        _slice(blob, [offset, size * count])
        if budget is not None:
            budget.take(offset, size * count, count * (size + ITEM_OVERHEAD) + ITEM_OVERHEAD)
            return []  # a list placeholder (a tuple may hold it)
        return [blob[offset + i * size : offset + (i + 1) * size] for i in range(count)]
    if marker == "__il__":
        if not isinstance(inner, list) or len(inner) != 2:
            raise WireFormatError(f"malformed int-list reference {_short(inner)}")
        spec = [inner[0], _INT64.str, [inner[1]]]
        if budget is not None:
            offset, nbytes, _ = _array_range(blob, spec)
            budget.take(offset, nbytes, (nbytes // 8) * ITEM_OVERHEAD + ITEM_OVERHEAD)
            return []  # a list placeholder (a tuple may hold it)
        return _array(blob, spec).tolist()
    if marker == "__a__":
        if budget is not None:
            offset, nbytes, ndim = _array_range(blob, inner)
            budget.take(offset, nbytes, nbytes + ARRAY_OVERHEAD + 16 * ndim)
            return None
        return _array(blob, inner)
    raise WireFormatError(f"unknown reference {_short(marker)}")  # pragma: no cover


def _array_range(blob: bytes, spec: Any) -> tuple[int, int, int]:
    """Check an array reference; return its blob offset, byte length and number of axes."""
    if not isinstance(spec, list) or len(spec) != 3:
        raise WireFormatError(f"malformed array reference {_short(spec)}")
    offset, dtype_text, shape = spec
    dtype = _dtype(dtype_text)
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_NDIM
        or not all(type(n) is int and 0 <= n <= MAX_DIM for n in shape)
    ):
        raise WireFormatError(
            f"array reference with a bad shape {_short(shape)} (at most {MAX_NDIM} axes of "
            f"0..{MAX_DIM} entries)"
        )
    start, nbytes = _slice(blob, [offset, math.prod(shape) * dtype.itemsize])
    return start, nbytes, len(shape)


def _dtype(dtype_text: Any) -> np.dtype[Any]:
    if not isinstance(dtype_text, str) or len(dtype_text) > 8:
        raise WireFormatError(f"array reference with a bad dtype {_short(dtype_text)}")
    try:
        dtype = np.dtype(dtype_text)
    except Exception as exc:  # numpy raises TypeError, ValueError or SyntaxError
        raise WireFormatError(f"array reference with a bad dtype {_short(dtype_text)}") from exc
    if dtype.kind not in "biufc" or dtype.hasobject or dtype.itemsize < 1:
        raise WireFormatError(f"array reference with a non-numeric dtype {_short(dtype_text)}")
    return dtype


def _array(blob: bytes, spec: Any) -> np.ndarray:
    start, nbytes, _ = _array_range(blob, spec)
    _, dtype_text, shape = spec
    dtype = np.dtype(dtype_text)
    try:
        array = np.frombuffer(blob, dtype=dtype, count=nbytes // dtype.itemsize, offset=start)
        array = array.reshape(shape)
    except (ValueError, MemoryError) as exc:
        raise WireFormatError(f"array reference with a bad shape {_short(shape)}: {exc}") from exc
    return array.copy()
