"""How much one message of each protocol step may make its receiver decode (per-step caps).

Both apps decode every message under :class:`fa_hetdp.flowerkit.wire.Limits` sized for the step
at hand from the session's public parameters: ``k``, the number of neighbours of a client
(``n - 1`` on the complete graph), and ``d``, the dimension. A message of secure aggregation
holds a constant part (public keys, signatures, the session's fields), a part per neighbour
(a share ciphertext, a share, an id, a signature: O(k)), and, at the input steps only, vectors
of the stage length (at most ``2d + 1`` words; 17 buckets at stage 0): the encoding's scales
and bounds and the broadcast ``mu'`` in the request, the masked vector in the reply.

Measured maxima (the real protocol, ``honest-but-curious`` and ``malicious-server``, n = 12
to 40, d = 64): a constant part under 6 KiB, at most 370 decoded bytes per neighbour, 32
decoded bytes per stage word, documents under 600 characters. The caps leave a stated slack
over these: :data:`BASE_BYTES` (10x), :data:`PER_PEER_BYTES` (5x), :data:`PER_WORD_BYTES`
(2x), and for the document :data:`DOCUMENT_BASE` plus :data:`DOCUMENT_PER_PEER` per
neighbour (~10x). Every cap is also at most the codec's absolute caps
(:data:`~fa_hetdp.flowerkit.wire.MAX_MESSAGE_BYTES`,
:data:`~fa_hetdp.flowerkit.wire.MAX_DOCUMENT_CHARS`).

The server sizes the caps from the session it set up (its sampled ``n``, the run's
``secagg-neighbours``, the ``d`` the clients agreed on); a client from what it holds itself,
never from a number the server states (the run config's or the settings document's
``num-clients``): its own neighbourhood from the setup it received, the session size ``n`` of
the key directory it checked (``State.SESSION_SIZE``), and its own ``d``. A message over its
cap is refused by :func:`~fa_hetdp.flowerkit.wire.decode` with :class:`WireFormatError`: the
server drops that client, the client fails that step (Flower sends an error reply).

Two messages are decoded before the receiver knows ``k``, and each has its own cap from what
it can legitimately hold (:func:`first_request_limits`, :func:`advertisement_limits`): the
first request a client receives (``advertise_keys``: its id, the setup with its
neighbourhood, 16 blob bytes per neighbour, and a drop-in's settings document, measured under
3 000 characters), at most :data:`MAX_SETUP_NEIGHBOURS` neighbours; and a client's reply to
it, a key advertisement (public keys, seed commitments, signatures and a few fields: constant,
nothing per neighbour). Both are refused on their raw lengths before any JSON is parsed.
"""

from __future__ import annotations

from typing import Final

from fa_hetdp.flowerkit.steps import MASKED_INPUT_STEPS, SILO_SUMMARIES
from fa_hetdp.flowerkit.wire import MAX_DOCUMENT_CHARS, MAX_MESSAGE_BYTES, Limits

__all__ = [
    "BASE_BYTES",
    "DOCUMENT_BASE",
    "DOCUMENT_PER_PEER",
    "MAX_SETUP_NEIGHBOURS",
    "PER_PEER_BYTES",
    "PER_WORD_BYTES",
    "SETTINGS_DOCUMENT_CHARS",
    "SETUP_PEER_BLOB",
    "SETUP_PEER_DECODED",
    "advertisement_limits",
    "first_request_limits",
    "stage_words",
    "step_limits",
]

BASE_BYTES: Final = 64 * 1024
"""The constant part of any message (measured under 6 KiB)."""
PER_PEER_BYTES: Final = 2048
"""Per neighbour (measured at most 370 decoded bytes: a share ciphertext and its fields)."""
PER_WORD_BYTES: Final = 64
"""Per stage word at an input step (measured 32: four float64 vectors in a stage-2 request)."""
DOCUMENT_BASE: Final = 16 * 1024
"""The JSON document's constant part, in characters (measured under 600)."""
DOCUMENT_PER_PEER: Final = 256
"""The JSON document's part per neighbour, in characters (measured about 21)."""

SETTINGS_DOCUMENT_CHARS: Final = 32 * 1024
"""A drop-in's settings document in the first request, in characters (measured under 3 000
with every setting given; ~10x)."""
MAX_SETUP_NEIGHBOURS: Final = 1 << 16
"""Most neighbours a first request may list (a complete graph of up to 65 537 clients; a
sparse graph's degree; the largest benchmarked session has n = 10 000)."""
SETUP_PEER_BLOB: Final = 32
"""Blob bytes per neighbour of the setup (measured 16: its id and its Shamir point, int64)."""
SETUP_PEER_DECODED: Final = 192
"""Decoded bytes per neighbour of the setup (counted 96: two list items of
:data:`~fa_hetdp.flowerkit.wire.ITEM_OVERHEAD`)."""

_INPUT_STEPS: Final = MASKED_INPUT_STEPS | {SILO_SUMMARIES}  # d-vectors in them


def stage_words(d: int) -> int:
    """Return the words counted for a stage vector: ``2d + 32``.

    The longest stage vector of a session of dimension ``d`` has ``2d + 1`` words (stage 0:
    17 buckets).
    """
    return 2 * d + 32


def step_limits(step: str, *, k: int, d: int | None) -> Limits:
    """Return the :class:`Limits` of one message of ``step``.

    ``k`` is the number of neighbours of a client, ``d`` the dimension (``None``: not known
    yet, before the input steps).

    Raises
    ------
    ValueError
        If ``k`` or ``d`` is negative, or ``d`` is ``None`` at an input step.
    """
    if isinstance(k, bool) or k < 0:
        raise ValueError(f"k must be an int >= 0, got {k!r}")
    words = 0
    if step in _INPUT_STEPS:
        if d is None or isinstance(d, bool) or d < 0:
            raise ValueError(f"step {step!r} needs the dimension d >= 0, got {d!r}")
        words = stage_words(d)
    size = BASE_BYTES + PER_PEER_BYTES * k + PER_WORD_BYTES * words
    document = DOCUMENT_BASE + DOCUMENT_PER_PEER * k
    return Limits(
        message=min(size, MAX_MESSAGE_BYTES),
        document=min(document, MAX_DOCUMENT_CHARS),
        decoded=min(size, MAX_MESSAGE_BYTES),
    )


def first_request_limits() -> Limits:
    """Return the :class:`Limits` of the first request a client receives (``advertise_keys``).

    Decoded before the client knows ``k``: its cap follows from what the request can hold, a
    constant part, a drop-in's settings document (:data:`SETTINGS_DOCUMENT_CHARS`) and a
    setup of at most :data:`MAX_SETUP_NEIGHBOURS` neighbours -- never from the server's
    ``num-clients``. About 2.1 MB of message and 48 KiB of JSON at most.
    """
    document = DOCUMENT_BASE + SETTINGS_DOCUMENT_CHARS
    return Limits(
        message=BASE_BYTES + document + SETUP_PEER_BLOB * MAX_SETUP_NEIGHBOURS,
        document=document,
        decoded=BASE_BYTES + SETUP_PEER_DECODED * MAX_SETUP_NEIGHBOURS,
    )


def advertisement_limits() -> Limits:
    """Return the :class:`Limits` of a client's reply to the first request (its key advert).

    Constant whatever ``k``: public keys, seed commitments and signatures (at most 64
    summations: 4 KiB), the client's dimension, partition, version and record count.
    """
    return Limits(message=BASE_BYTES, document=DOCUMENT_BASE, decoded=BASE_BYTES)
