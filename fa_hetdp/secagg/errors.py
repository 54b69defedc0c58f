"""Exceptions raised by :mod:`fa_hetdp.secagg`.

Every error that the secure-aggregation library raises on purpose derives from
:class:`SecAggError`, so a transport (the Flower apps, the in-process driver) can catch the
whole family. Errors about values a caller or a peer supplied also derive from
:class:`ValueError`. The library knows nothing of :mod:`fa_hetdp`, so it keeps its own
hierarchy.
"""

from __future__ import annotations

__all__ = [
    "EncodingError",
    "MessageRejected",
    "ProtocolAborted",
    "SecAggError",
    "UnmaskRefused",
]


class SecAggError(Exception):
    """Base class of every error that :mod:`fa_hetdp.secagg` raises on purpose."""


class MessageRejected(SecAggError, ValueError):  # noqa: N818 (name fixed by the API)
    """A protocol message is malformed, replayed, tampered with, misaddressed or out of round.

    The receiving party's state is unchanged when this is raised: the message is simply not
    accepted. A server treats the sender as dropped; a client stops answering.
    """


class UnmaskRefused(MessageRejected):
    """A client refuses an unmask request that would let the server learn an input.

    Raised when the request lists the client itself as dropped, asks for both the self-mask
    share and the mask-key share of one peer (within a summation or across the summations
    of a session), names unknown or duplicate ids, or leaves fewer than ``threshold``
    survivors.
    """


class ProtocolAborted(SecAggError, RuntimeError):  # noqa: N818 (name fixed by the API)
    """The protocol cannot finish correctly, e.g. survivors fell below the threshold.

    The server raises this instead of ever returning a sum it cannot vouch for.
    """


class EncodingError(SecAggError, ValueError):
    """Fixed-point settings that could wrap in Z_{2^m}, or a value outside its stated bound."""
