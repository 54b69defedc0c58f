"""Pairwise-masking secure aggregation with dropout recovery (transport-agnostic).

The protocol of Bonawitz et al. (CCS 2017, "Practical Secure Aggregation for
Privacy-Preserving Machine Learning") with the sparse neighbour graphs of SecAgg+ (Bell et
al., CCS 2020), for a session that carries several summations (the DP protocol needs two).
Client and server are state machines that exchange plain dictionaries of ``bytes``, ``int``,
lists of those, and numpy arrays, so the Flower apps and :func:`run_in_process` run the
very same code. The library knows nothing of DP or Flower.

Threat model
------------
Honest-but-curious server: it follows the protocol and routes every message but tries to
learn more than the sums. Clients below the threshold ``t`` may collude with each other
and with the server. Guarantee: for each summation the server learns only the sum of the
surviving clients' inputs (plus who survived); a coalition of fewer than ``t`` of a client's
share holders learns nothing about that client's secrets. Not covered: a server that sends
different clients inconsistent views (active attacks need Bonawitz et al.'s consistency
round and signatures), and traffic analysis. With a SecAgg+ graph, "the sum" is the sum over
survivors as long as the honest survivors stay connected (see :mod:`secagg.graph`).

Message flow (``S`` summations; each arrow is one ``dict``)
---------------------------------------------------------
====  =====================================  ===========================================
 #    server -> client(s)                    client -> server
====  =====================================  ===========================================
 0    ``server.setup_message()`` (all)       ``client.advertise_keys(setup)``
                                             -> ``server.receive_advertise_keys(msg)``
 1    ``server.key_directory()`` (all that    ``client.share_keys(directory)``
      advertised; closes round 0)            -> ``server.receive_share_keys(msg)``
 2    ``server.start_summation(encoding)``   ``client.masked_input(request, values,
      -> ``{client_id: request}`` (closes    rng=...)`` -> ``server.receive_masked_input``
      round 1 / previous summation)
 3    ``server.unmask_request()`` (every     ``client.unmask(request)``
      survivor; closes round 2)              -> ``server.receive_unmask(msg)``
      ``server.finish_summation()`` -> :class:`SumResult` (closes round 3)
====  =====================================  ===========================================

Rounds 2-3 repeat for every summation ``s = 0 .. S-1``. The first masked-input request
also carries the encrypted Shamir shares addressed to that client. Per client and summation
there is an independent X25519 mask key pair (pairwise masks) and an independent self-mask
seed, all Shamir-shared in round 1. A client whose input missed a summation is dropped for
the rest of the session; a client never reveals both secrets of one peer and summation.

Driving it from Flower (one handler per round)
----------------------------------------------
Client app: keep the client across handlers as bytes in ``context.state``::

    client = SecAggClient(node_id)                        # handler "advertise-keys"
    reply = client.advertise_keys(setup_dict)
    state_blob = client.to_bytes()
    ...
    client = SecAggClient.from_bytes(state_blob)          # every later handler
    reply = client.share_keys(directory_dict)             # or masked_input / unmask
    state_blob = client.to_bytes()

Every message dict maps to a ``ConfigRecord`` (bytes, int, lists of those) plus an
``ArrayRecord`` for the numpy arrays (``scales``, ``bounds``, ``vector``, ``seed_shares``,
``key_shares``); the ``"message"`` key carries the tag. The server app keeps one
:class:`SecAggServer` in memory for the whole session, feeds it every reply, treats missing
replies, error replies and :class:`MessageRejected` as dropouts, and stops on
:class:`ProtocolAborted`.

Encoding: inputs are fixed-point numbers in Z_{2^64} with stochastic rounding
(:mod:`secagg.encoding`); :func:`choose_encoding` picks scales from ``n``, the clip bound and
the noise share's sigma so the sum cannot wrap, and refuses settings that could.
"""

from secagg.client import SecAggClient
from secagg.encoding import FixedPointEncoding, choose_encoding
from secagg.errors import (
    EncodingError,
    MessageRejected,
    ProtocolAborted,
    SecAggError,
    UnmaskRefused,
)
from secagg.graph import NeighbourGraph, complete_graph, default_degree, random_harary_graph
from secagg.inprocess import InProcessSession, default_threshold, run_in_process
from secagg.messages import parse_message
from secagg.server import SecAggServer, SumResult

__all__ = [
    "EncodingError",
    "FixedPointEncoding",
    "InProcessSession",
    "MessageRejected",
    "NeighbourGraph",
    "ProtocolAborted",
    "SecAggClient",
    "SecAggError",
    "SecAggServer",
    "SumResult",
    "UnmaskRefused",
    "choose_encoding",
    "complete_graph",
    "default_degree",
    "default_threshold",
    "parse_message",
    "random_harary_graph",
    "run_in_process",
]
