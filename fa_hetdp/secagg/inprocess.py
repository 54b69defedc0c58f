"""In-process driver: n clients and the server in one Python process, same code as deployed.

:class:`InProcessSession` runs advertise-keys and share-keys once, then one
:meth:`InProcessSession.sum` per summation, so a caller can compute the inputs of a later
summation from the result of an earlier one (stage 2 of the DP protocol needs stage 1's
release). :func:`run_in_process` runs a whole session in one call. Client ids are the row
indices ``0 .. n-1``; every message goes through ``to_dict``/``from_dict`` exactly as over
a network.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Literal, overload

import numpy as np

from .client import SecAggClient
from .encoding import FixedPointEncoding, FloatArray, choose_encoding
from .errors import EncodingError, MessageRejected
from .graph import Neighbours, default_degree
from .identity import Roster, generate_roster
from .params import ThreatModel
from .server import SecAggServer, SumResult

__all__ = [
    "InProcessSession",
    "Phase",
    "default_threshold",
    "in_process_identities",
    "run_in_process",
]

Phase = Literal["advertise_keys", "share_keys", "masked_input", "unmask"]
Dropouts = Mapping[Phase, Collection[int]]


def in_process_identities(n: int) -> tuple[dict[int, bytes], Roster]:
    """Return fresh identity keys for clients ``0 .. n-1`` (members ``client-i``) and their roster.

    For one process only: keys and roster are made side by side, so a session exercises the
    signatures and checks, not the out-of-band distribution a deployment relies on.
    """
    keys, roster = generate_roster([f"client-{i}" for i in range(n)])
    return {i: keys[f"client-{i}"] for i in range(n)}, roster


def default_threshold(n: int, neighbours: Neighbours = None) -> int:
    """Return a majority threshold ``floor(k / 2) + 1`` of a client's ``k`` share holders.

    ``k`` is the graph degree that ``neighbours`` selects (see :class:`SecAggServer`); a
    client's own share never counts. A majority is a floor, not a security argument: size
    ``(k, t)`` from the adversary with :func:`secagg.params.choose_parameters`.
    """
    if neighbours == "complete" or neighbours is None:
        k = n - 1 if neighbours == "complete" else default_degree(n)
    else:
        k = min(int(neighbours), n - 1)
    return max(2, min(k // 2 + 1, k))


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for one round trip over all n clients.

    The rounds allocate O(n k) small objects that live until the session ends; collections
    triggered by those allocations re-scan the growing heap (about a fifth of the CPU time
    at n = 3000). The protocol makes no reference cycles worth collecting mid-round;
    reference counting still frees everything, and the previous state is restored after.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _dropped(dropouts: Dropouts | None, phase: Phase) -> set[int]:
    return {int(c) for c in dropouts.get(phase, ())} if dropouts else set()


class InProcessSession:
    """A secure-aggregation session over ``n`` in-process clients.

    Parameters
    ----------
    n : int
        Number of clients (ids ``0 .. n-1``).
    threshold : int
        Shamir threshold, see :class:`~secagg.server.SecAggServer`.
    num_summations : int
        Number of :meth:`sum` calls the session supports.
    neighbours : int, "complete" or None
        Graph degree, see :class:`~secagg.server.SecAggServer`.
    dropouts : mapping, optional
        Clients that drop before answering ``"advertise_keys"`` or ``"share_keys"``.
    rng : numpy.random.Generator
        Draws the graph permutation and the clients' stochastic rounding (one stream, read
        by the clients in id order: reproducible, and no per-client generator to build).
    threat_model : {"honest-but-curious", "malicious-server"}
        ``"malicious-server"`` adds the consistency round (signatures on the survivor list)
        and makes every client insist on it, on the complete graph and on a threshold of at
        least :func:`secagg.params.min_signatures` for ``gamma``.
    gamma : float
        Corrupt fraction the clients guard against (see :class:`SecAggClient`).
    identities, roster : optional
        Client ``i``'s raw Ed25519 identity key ``identities[i]`` and the roster that lists
        them all (:mod:`fa_hetdp.secagg.identity`): every client signs its round-0 keys and
        checks everyone else's. Required with ``"malicious-server"``;
        :func:`in_process_identities` makes a set for one process.
    """

    def __init__(
        self,
        n: int,
        *,
        threshold: int,
        num_summations: int = 2,
        neighbours: Neighbours = None,
        dropouts: Dropouts | None = None,
        rng: np.random.Generator,
        threat_model: ThreatModel = "honest-but-curious",
        gamma: float = 0.0,
        identities: Mapping[int, bytes] | None = None,
        roster: Roster | None = None,
    ) -> None:
        self.n = int(n)
        self.rng = rng
        if threat_model == "malicious-server" and (roster is None or identities is None):
            raise ValueError(
                "threat model malicious-server needs roster= and identities= (client i's "
                "identity key), e.g. identities, roster = in_process_identities(n): without "
                "a roster the server can substitute every client's keys."
            )
        if roster is not None and (identities is None or set(identities) != set(range(n))):
            raise ValueError(f"a roster needs identities= for every client 0 .. {n - 1}.")
        self.server = SecAggServer(
            range(self.n),
            threshold=threshold,
            num_summations=num_summations,
            neighbours=neighbours,
            rng=rng,
            consistency=threat_model == "malicious-server",
        )
        self.clients = {
            i: SecAggClient(
                i,
                threat_model=threat_model,
                gamma=gamma,
                identity=None if identities is None else identities[i],
                roster=roster,
            )
            for i in range(self.n)
        }
        with _gc_paused():
            self._key_rounds(dropouts)

    def _key_rounds(self, dropouts: Dropouts | None) -> None:
        setups = self.server.setup_messages()
        silent = _dropped(dropouts, "advertise_keys")
        for i, client in self.clients.items():
            if i not in silent:
                self.server.receive_advertise_keys(client.advertise_keys(setups[i]))
        directories = self.server.key_directory()
        silent |= _dropped(dropouts, "share_keys")
        for i, directory in directories.items():
            if i not in silent:
                self.server.receive_share_keys(self.clients[i].share_keys(directory))

    def sum(
        self,
        vectors: FloatArray,
        *,
        bounds: float | FloatArray | None = None,
        noise_std: float | FloatArray = 0.0,
        dropouts: Dropouts | None = None,
        modulus_bits: int = 64,
    ) -> SumResult:
        """Run one summation over the rows of ``vectors`` (rows of dropped clients ignored).

        Parameters
        ----------
        vectors : FloatArray, shape (n, d)
            Client ``i``'s input is row ``i``.
        bounds : float or FloatArray, optional
            Per-client absolute bound of the noiseless inputs; defaults to the largest
            absolute value per coordinate (a convenience of the in-process driver: a
            deployment states bounds in advance).
        noise_std : float or FloatArray
            Per-client noise-share standard deviation already included in ``vectors``
            (widens the stated bound, see :func:`~secagg.encoding.choose_encoding`).
        dropouts : mapping, optional
            Clients that drop before ``"masked_input"`` or before ``"unmask"``.
        modulus_bits : {64, 32}
            The ring ``Z_2^m`` of the sum (:class:`~secagg.encoding.FixedPointEncoding`).
        """
        values = np.asarray(vectors)
        if values.dtype != np.float64 or values.ndim != 2 or values.shape[0] != self.n:
            raise EncodingError(
                f"vectors must be float64 of shape ({self.n}, d), got {values.dtype} "
                f"{values.shape}."
            )
        d = values.shape[1]
        if bounds is None:
            clip, tail = np.max(np.abs(values), axis=0), 0.0
        else:
            clip, tail = np.broadcast_to(np.asarray(bounds, dtype=np.float64), (d,)), 12.0
        sigma = np.broadcast_to(np.asarray(noise_std, dtype=np.float64), (d,))
        encoding = choose_encoding(
            self.n, clip, noise_std=sigma, noise_tail=tail, modulus_bits=modulus_bits
        )
        with _gc_paused():
            return self._summation(values, encoding, dropouts)

    def _summation(
        self, values: FloatArray, encoding: FixedPointEncoding, dropouts: Dropouts | None
    ) -> SumResult:
        requests = self.server.start_summation(encoding)
        silent = _dropped(dropouts, "masked_input")
        for i, request in requests.items():
            if i not in silent:
                reply = self.clients[i].masked_input(request, values[i], rng=self.rng)
                self.server.receive_masked_input(reply)
        if self.server.consistency:
            check = self.server.consistency_request()
            for i in self.server.survivors:
                if i not in silent:
                    self.server.receive_consistency(self.clients[i].sign_survivors(check))
        unmask = self.server.unmask_requests()
        silent |= _dropped(dropouts, "unmask")
        for i in self.server.survivors:
            if i in silent:
                continue
            try:
                self.server.receive_unmask(self.clients[i].unmask(unmask[i]))
            except MessageRejected:
                continue  # a refusing client counts as dropped in this round
        return self.server.finish_summation()


@overload
def run_in_process(
    vectors: FloatArray,
    *,
    threshold: int,
    neighbours: Neighbours = ...,
    dropouts: Dropouts | None = ...,
    rng: np.random.Generator,
    bounds: float | FloatArray | None = ...,
    noise_std: float | FloatArray = ...,
    threat_model: ThreatModel = ...,
    gamma: float = ...,
    modulus_bits: int = ...,
    identities: Mapping[int, bytes] | None = ...,
    roster: Roster | None = ...,
) -> SumResult: ...


@overload
def run_in_process(
    vectors: Sequence[FloatArray],
    *,
    threshold: int,
    neighbours: Neighbours = ...,
    dropouts: Dropouts | None = ...,
    rng: np.random.Generator,
    bounds: float | FloatArray | None = ...,
    noise_std: float | FloatArray = ...,
    threat_model: ThreatModel = ...,
    gamma: float = ...,
    modulus_bits: int = ...,
    identities: Mapping[int, bytes] | None = ...,
    roster: Roster | None = ...,
) -> list[SumResult]: ...


def run_in_process(
    vectors: FloatArray | Sequence[FloatArray],
    *,
    threshold: int,
    neighbours: Neighbours = None,
    dropouts: Dropouts | None = None,
    rng: np.random.Generator,
    bounds: float | FloatArray | None = None,
    noise_std: float | FloatArray = 0.0,
    threat_model: ThreatModel = "honest-but-curious",
    gamma: float = 0.0,
    modulus_bits: int = 64,
    identities: Mapping[int, bytes] | None = None,
    roster: Roster | None = None,
) -> SumResult | list[SumResult]:
    """Run a whole secure-aggregation session over ``n`` in-process clients.

    Parameters
    ----------
    vectors : FloatArray of shape (n, d), or a sequence of such arrays
        One array: one summation, returns one :class:`SumResult`. A sequence (arrays
        ``(n, d_k)``): one summation each, in one session, returns a list.
    threshold : int
        Shamir threshold (see :func:`default_threshold`).
    neighbours : int, "complete" or None
        Graph degree; ``None`` picks :func:`~secagg.graph.default_degree`.
    dropouts : mapping of phase to client indices, optional
        Clients that drop before the named round (``"masked_input"`` and ``"unmask"``
        apply to every summation).
    rng : numpy.random.Generator
        Graph permutation and stochastic rounding.
    bounds, noise_std
        See :meth:`InProcessSession.sum`.
    threat_model, gamma, identities, roster
        See :class:`InProcessSession` (``"malicious-server"`` needs ``identities`` and
        ``roster``, e.g. from :func:`in_process_identities`).
    modulus_bits : {64, 32}
        The ring ``Z_2^m`` of every sum.

    Returns
    -------
    SumResult or list of SumResult
        ``.sum`` (decoded float64) and ``.survivors`` (client indices), per summation.
    """
    single = isinstance(vectors, np.ndarray)
    batches = [vectors] if isinstance(vectors, np.ndarray) else list(vectors)
    if not batches:
        raise EncodingError("need at least one array of vectors.")
    first = np.asarray(batches[0])
    if first.ndim != 2 or first.shape[0] < 2:
        raise EncodingError(f"vectors must have shape (n, d) with n >= 2, got {first.shape}.")
    n = int(first.shape[0])
    session = InProcessSession(
        n,
        threshold=threshold,
        num_summations=len(batches),
        neighbours=neighbours,
        dropouts=dropouts,
        rng=rng,
        threat_model=threat_model,
        gamma=gamma,
        identities=identities,
        roster=roster,
    )
    results = [
        session.sum(
            batch, bounds=bounds, noise_std=noise_std, dropouts=dropouts, modulus_bits=modulus_bits
        )
        for batch in batches
    ]
    return results[0] if single else results
