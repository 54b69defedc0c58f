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
``secagg-neighbours``, the ``d`` the clients agreed on); a client from what it knows: the
run config's ``num-clients`` and ``secagg-neighbours`` and its own ``d``. A message over its
cap is refused by :func:`~fa_hetdp.flowerkit.wire.decode` with :class:`WireFormatError`: the
server drops that client, the client fails that step (Flower sends an error reply).
"""

from __future__ import annotations

from typing import Final

from fa_hetdp.flowerkit.steps import MASKED_INPUT_STEPS, SILO_SUMMARIES
from fa_hetdp.flowerkit.wire import MAX_DOCUMENT_CHARS, MAX_MESSAGE_BYTES, Limits

__all__ = [
    "BASE_BYTES",
    "DOCUMENT_BASE",
    "DOCUMENT_PER_PEER",
    "PER_PEER_BYTES",
    "PER_WORD_BYTES",
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
