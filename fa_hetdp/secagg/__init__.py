"""Pairwise-masking secure aggregation with dropout recovery (transport-agnostic).

The protocol of Bonawitz et al. (CCS 2017, "Practical Secure Aggregation for
Privacy-Preserving Machine Learning") with the sparse neighbour graphs of SecAgg+ (Bell et
al., CCS 2020), for a session that carries several summations (the DP protocol needs two).
Client and server are state machines that exchange plain dictionaries of ``bytes``, ``int``,
tuples or lists of those, and numpy arrays, so the Flower apps and :func:`run_in_process` run the
very same code. The library knows nothing of DP or Flower.

Threat models
-------------
``"honest-but-curious"`` (default): the server follows the protocol and routes every message
but tries to learn more than the sums; a fraction ``gamma`` of the clients may collude with
it. Guarantee: for each summation the server learns only the sum of the surviving clients'
inputs (plus who survived); a coalition of fewer than ``t`` of a client's share holders (its
neighbours; never itself) learns nothing about that client's secrets. Size ``(k, t)`` with
:func:`secagg.params.choose_parameters` (Bell et al.'s two binomial tails). Self-mask seeds are
committed in round 0, reconstructed secrets are checked, and a client is named a cheater
(``SumResult.cheaters``) only on evidence it signed (:mod:`fa_hetdp.secagg.evidence`: share
digests signed by their dealer, unmask responses signed by their holder); a sender whose shares
its holders cannot open is dropped with the reason (``SumResult.reasons``), not the holders.
``"malicious-server"``: a consistency round with
Ed25519 signatures on the survivor list (:mod:`fa_hetdp.secagg.consistency`,
:meth:`SecAggServer.consistency_request`, :meth:`SecAggClient.sign_survivors`), complete graph,
``t >= min_signatures(n, gamma)``, and a PKI: a roster of Ed25519 identity keys
(:mod:`fa_hetdp.secagg.identity`, the same file on every node, compared by SHA-256) with which
each client signs its round-0 keys; a client refuses a key directory with a key not signed by
the roster member its owner claims to be, so the server can neither substitute keys nor add
clients. The mode refuses to start without a roster (``SecAggClient(identity=, roster=)``,
``run_in_process(identities=, roster=)``, :func:`in_process_identities`). Guarantee: as in the
honest-but-curious model, assuming the roster, identity keys that stay with their owners and at
most ``gamma n`` colluding clients (``gamma`` the client's own, never the server's word).
Honest-but-curious sessions may use a roster too; without one they assume the server forwards
every key as received. Not covered: traffic analysis, a colluding roster member beyond
``gamma n``. :meth:`SecAggParameters.guarantee` says all of this in words.
With a SecAgg+ graph, "the sum" is the sum over survivors as long as the honest survivors stay
connected (see :mod:`fa_hetdp.secagg.graph`).

Message flow
------------
``S`` summations; every request and reply is one plain ``dict``::

    round  server -> client(s)                     client -> server
    0      server.setup_messages()                 client.advertise_keys(setup)
           -> {client_id: setup} (its                -> server.receive_advertise_keys
           neighbourhood)
    1      server.key_directory()                  client.share_keys(directory)
           -> {client_id: directory} (closes         -> server.receive_share_keys
           round 0; neighbours' keys only)
    2      server.start_summation(encoding)        client.masked_input(request, values, rng=)
           -> {client_id: request}  (closes          -> server.receive_masked_input
           round 1 / the previous summation)
    3      server.unmask_requests()                client.unmask(request)
           -> {survivor: request} (closes            -> server.receive_unmask
           round 2; its neighbourhood)
           server.finish_summation() -> SumResult  (closes round 3)

Rounds 2-3 repeat for every summation ``s = 0 .. S-1``. Every message names the recipient's
neighbourhood only (O(k); the session's id lists travel as counts and SHA-256 digests bound
into the session id), and a client takes the session size n from its key directory
(:attr:`SecAggClient.session_size`). The first masked-input request
also carries the encrypted Shamir shares addressed to that client. Each client holds one
X25519 key pair for the share channel and, per summation, one X25519 mask key pair and one
self-mask seed, all Shamir-shared in round 1 (with one summation that is the two key pairs
of Bonawitz et al.). Mask keys are per summation on purpose: with one mask key for the
whole session, recovering a client that drops in summation 2 would hand the server its mask
key while it already holds that client's summation-1 self-mask seed, unmasking its
summation-1 input. A client whose input missed a summation is dropped for the rest of the
session; a client never reveals both secrets of one peer for one summation.

Crypto (:mod:`fa_hetdp.secagg.crypto`): X25519, the NIST SP 800-56C one-step KDF with SHA-256
(FixedInfo = purpose + session id + ordered pair (+ summation); session id = SHA-256 of the
setup's session-wide fields and of who advertised keys), AES-256-GCM
share channel (associated data: session id, round, sender, recipient), AES-256-CTR mask
PRG read as little-endian uint64. Shamir (:mod:`fa_hetdp.secagg.shamir`): t-of-n over GF(2^21 - 9),
13 limbs per 256-bit secret, vectorised. Graphs (:mod:`fa_hetdp.secagg.graph`): complete or random
Harary with ``k = 2 ceil((40 + 2 log2 n) / 4)`` (disconnection probability <= 2^-41 when at
most a quarter of the clients are corrupt or dropped); ``t`` counts shares among a client's
k holders (its neighbours).

Driving it from Flower (one handler per round)
----------------------------------------------
Client ids: any distinct ints in ``[0, 2^64)``; Shamir points are the ranks of the sorted
ids, so raw Flower node ids work, but a ``ConfigRecord`` int is signed 64-bit, so ids
``>= 2^63`` must be mapped (e.g. to their rank among the sampled nodes) before they travel.

Client app: one ``@app.query`` handler per round; keep the client across handlers as bytes in
``context.state`` (a ``ConfigRecord`` holding ``client.to_bytes()``)::

    # "secagg-advertise-keys"
    client = SecAggClient(my_id)
    reply = client.advertise_keys(request)
    # every later handler: "secagg-share-keys", "secagg-masked-input", "secagg-unmask"
    client = SecAggClient.from_bytes(blob)
    reply = client.share_keys(request)   # or .masked_input(request, values, rng=rng)
    blob = client.to_bytes()             # or .unmask(request)

where ``request`` is ``join_arrays(config_record, arrays)`` and a reply goes back as
``scalars, arrays = split_arrays(reply)``: the scalars (bytes, ints, lists of those; the
``"message"`` key holds the tag) fit a ``ConfigRecord`` and the numpy arrays (``scales``,
``bounds``, ``vector``, ``seed_shares``, ``key_shares``) an ``ArrayRecord``. A handler that
catches :class:`SecAggError` should reply with an error (the server counts it as a dropout).

Server app: keep one :class:`SecAggServer` in memory for the session, in this order::

    server = SecAggServer(ids, threshold=t, num_summations=2, rng=rng)
    send(server.setup_messages())  # dict: client id -> its setup; feed receive_advertise_keys
    send(server.key_directory())   # dict: client id -> its directory; feed receive_share_keys
    for each summation:
        send(server.start_summation(encoding))   # dict: client id -> its own request
        feed replies to receive_masked_input
        send(server.unmask_requests())           # dict: survivor -> its request
        feed replies to receive_unmask
        result = server.finish_summation()       # SumResult: .sum, .survivors, ...

A missing reply, an error reply or a :class:`MessageRejected` from ``receive_*`` means the
client dropped; :class:`ProtocolAborted` ends the session (never a wrong sum). The
encoding of each summation comes from :func:`choose_encoding` (or
:class:`FixedPointEncoding`) with the clients' stated per-coordinate bounds.

Encoding: inputs are fixed-point numbers in Z_{2^64}, or Z_{2^32} (``modulus_bits=32``: half
the bytes per masked vector), with stochastic rounding (:mod:`fa_hetdp.secagg.encoding`);
:func:`choose_encoding` picks scales from ``n``, the clip bound and the noise share's sigma so
the sum cannot wrap, and refuses settings that could. An encoding given ``sum_bounds`` (a bound
on the whole sum per coordinate, e.g. the lattice encodings of the discrete mechanisms, whose
summed noise is bounded in probability) only refuses settings where that bound could wrap:
its sum wraps exactly when the sum leaves the bound, with the probability its caller states.
"""

from .client import SecAggClient
from .encoding import FixedPointEncoding, choose_encoding
from .errors import (
    EncodingError,
    MessageRejected,
    ProtocolAborted,
    SecAggError,
    UnmaskRefused,
)
from .graph import (
    NeighbourGraph,
    complete_graph,
    default_degree,
    random_harary_graph,
)
from .identity import Roster, RosterError
from .inprocess import InProcessSession, default_threshold, in_process_identities, run_in_process
from .messages import join_arrays, parse_message, split_arrays
from .params import SecAggParameters, choose_parameters, min_private_threshold, min_signatures
from .server import SecAggServer, SumResult

__all__ = [
    "EncodingError",
    "FixedPointEncoding",
    "InProcessSession",
    "MessageRejected",
    "NeighbourGraph",
    "ProtocolAborted",
    "Roster",
    "RosterError",
    "SecAggClient",
    "SecAggError",
    "SecAggParameters",
    "SecAggServer",
    "SumResult",
    "UnmaskRefused",
    "choose_encoding",
    "choose_parameters",
    "complete_graph",
    "default_degree",
    "default_threshold",
    "in_process_identities",
    "join_arrays",
    "min_private_threshold",
    "min_signatures",
    "parse_message",
    "random_harary_graph",
    "run_in_process",
    "split_arrays",
]
