"""Communication graphs: who masks with whom and who holds whose Shamir shares.

Bonawitz et al. (CCS 2017) use the complete graph: every client masks with and secret-shares
to every other client, which costs O(n) key agreements and keystreams per client. SecAgg+
(Bell et al., CCS 2020, Sec. 3-4) replaces it by a random k-regular graph of degree
k = O(log n): the Harary graph H_{k,n} (each client linked to the k/2 nearest positions on
either side of a ring) laid over a uniformly random permutation of the clients.

Degree rule (:func:`default_degree`): the smallest even ``k`` with

    k * log2(1 / f) >= sigma + 2 log2 n,     i.e.  k = 2 ceil((sigma + 2 log2 n) / (2 log2(1/f)))

for statistical security ``sigma = 40`` and a tolerated bad fraction ``f = gamma + delta =
1/4`` (corrupt plus dropped clients); the complete graph when that is not below ``n - 1``.
E.g. n = 100 -> k = 28, n = 1000 -> k = 30, n = 10^6 -> k = 40: k = O(sigma + log n).

What it gives (honest-but-curious server; a fraction ``gamma`` of corrupt clients and
``delta`` of dropouts, fixed independently of the random permutation). Pairwise masks hide
an input inside the sum of its connected component of honest survivors, so privacy needs
that subgraph connected. A vertex separator of ``H_{k,n}`` must contain two disjoint runs of
``k/2`` consecutive ring positions (its connectivity is k), and under a uniform permutation a
given set of ``k`` positions is all corrupt-or-dropped with probability at most
``(gamma + delta)^k``; hence, for ``gamma + delta <= f``,

    P[honest survivors disconnected] <= n^2 / 2 * f^k <= 2^-(sigma + 1).

Bell et al. (CCS 2020, Sec. 3-4) prove the general form of this (connectivity plus every sum
covering many honest inputs, failure ``2^-sigma``) with k = O(log n) and constants that
depend on ``gamma``, ``delta`` and ``sigma``; our rule is one simple instance of that family,
not their optimised parameter table. Correctness additionally needs ``t`` of each client's
``k`` share holders to survive (the server aborts otherwise); :func:`secagg.params.
choose_parameters` sizes ``(k, t)`` from ``(gamma, delta, sigma, eta)`` with both tails.

The Shamir share holders of client ``i`` are its neighbours, never ``i`` itself (``k``
holders); the threshold ``t`` counts shares among those holders.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

__all__ = [
    "NeighbourGraph",
    "Neighbours",
    "choose_graph",
    "complete_graph",
    "default_degree",
    "random_harary_graph",
]

Neighbours = int | Literal["complete"] | None
"""A graph choice: an even degree ``k``, ``"complete"``, or None for :func:`default_degree`."""


def default_degree(n: int, *, sigma: float = 40.0, bad_fraction: float = 0.25) -> int:
    """Return the SecAgg+ degree ``k`` of the rule above, or ``n - 1`` (complete) if larger.

    Parameters
    ----------
    n : int
        Number of clients.
    sigma : float
        Statistical security parameter: the honest survivors stay connected except with
        probability ``2^-(sigma + 1)``.
    bad_fraction : float
        Upper bound on ``gamma + delta``, the fraction of corrupt plus dropped clients.
    """
    if n < 2:
        raise ValueError(f"need at least 2 clients, got n={n}.")
    if not 0.0 < bad_fraction < 1.0:
        raise ValueError(f"bad_fraction must lie in (0, 1), got {bad_fraction}.")
    if not sigma > 0:
        raise ValueError(f"sigma must be positive, got {sigma}.")
    k = 2 * math.ceil((sigma + 2 * math.log2(n)) / (2 * math.log2(1.0 / bad_fraction)))
    return n - 1 if k >= n - 1 else k


@dataclass(frozen=True)
class NeighbourGraph:
    """A complete graph or a Harary graph ``H_{k,n}`` over a ring order of client ids.

    Parameters
    ----------
    ring : tuple of int
        All client ids, in ring order (a random permutation for SecAgg+ graphs).
    degree : int
        ``n - 1`` for the complete graph, otherwise an even ``k`` with ``2 <= k < n - 1``.
    """

    ring: tuple[int, ...]
    degree: int
    _position: dict[int, int] | None = field(default=None, init=False, repr=False, compare=False)
    _neighbours: dict[int, tuple[int, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        n = len(self.ring)
        if n < 2:
            raise ValueError(f"a graph needs at least 2 clients, got {n}.")
        if len(set(self.ring)) != n:
            raise ValueError("ring lists a client id twice.")
        if self.degree != n - 1 and not (2 <= self.degree < n - 1 and self.degree % 2 == 0):
            raise ValueError(
                f"degree must be n - 1 = {n - 1} (complete) or even in [2, {n - 2}], "
                f"got {self.degree}."
            )

    def _positions(self) -> dict[int, int]:
        # built on first use only (O(n)); a client needs just its own position
        if self._position is None:
            object.__setattr__(
                self, "_position", {client: pos for pos, client in enumerate(self.ring)}
            )
        return self._position  # type: ignore[return-value]

    @property
    def complete(self) -> bool:
        """Whether every client is linked to every other client."""
        return self.degree == len(self.ring) - 1

    def __contains__(self, client_id: object) -> bool:
        return client_id in self._positions()

    def neighbours(self, client_id: int) -> tuple[int, ...]:
        """Return the neighbours of ``client_id`` (sorted), excluding itself.

        On a sparse graph each answer is kept (O(n k) for all clients: the server asks for
        every client's neighbourhood in several rounds).
        """
        n = len(self.ring)
        if self.complete:
            return tuple(sorted(c for c in self.ring if c != client_id))
        cached = self._neighbours.get(client_id)
        if cached is not None:
            return cached
        pos = self._positions()[client_id]
        half = self.degree // 2
        out = tuple(sorted(self.ring[(pos + j) % n] for j in range(-half, half + 1) if j))
        self._neighbours[client_id] = out
        return out

    def linked(self, a: int, b: int) -> bool:
        """Whether clients ``a != b`` are neighbours (O(1))."""
        if a == b:
            return False
        position = self._positions()
        if self.complete:
            return a in position and b in position
        n = len(self.ring)
        gap = abs(position[a] - position[b])
        return min(gap, n - gap) <= self.degree // 2

    def holders(self, client_id: int) -> tuple[int, ...]:
        """Return the Shamir share holders of ``client_id``: its neighbours (never itself)."""
        return self.neighbours(client_id)


def complete_graph(client_ids: Sequence[int]) -> NeighbourGraph:
    """Return the complete graph over ``client_ids`` (Bonawitz et al., CCS 2017)."""
    ring = tuple(sorted(int(c) for c in client_ids))
    return NeighbourGraph(ring=ring, degree=len(ring) - 1)


def random_harary_graph(
    client_ids: Sequence[int], degree: int | None = None, *, rng: np.random.Generator
) -> NeighbourGraph:
    """Return ``H_{k,n}`` over a uniformly random permutation of ``client_ids``.

    Parameters
    ----------
    client_ids : sequence of int
        The clients.
    degree : int, optional
        Even ``k``; defaults to :func:`default_degree`. ``k >= n - 1`` gives the complete
        graph.
    rng : numpy.random.Generator
        Draws the permutation (the graph is public; its randomness need not be secret).
    """
    ids = sorted(int(c) for c in client_ids)
    k = default_degree(len(ids)) if degree is None else int(degree)
    if k >= len(ids) - 1:
        return complete_graph(ids)
    order = rng.permutation(len(ids))
    return NeighbourGraph(ring=tuple(ids[int(i)] for i in order), degree=k)


def choose_graph(
    client_ids: Sequence[int], neighbours: Neighbours, *, rng: np.random.Generator
) -> NeighbourGraph:
    """Return the graph a :class:`~secagg.server.SecAggServer` uses for ``neighbours``.

    Raises
    ------
    ValueError
        If ``neighbours`` is an odd degree or below 2 (and below ``n - 1``).
    """
    if neighbours == "complete":
        return complete_graph(client_ids)
    degree = default_degree(len(client_ids)) if neighbours is None else int(neighbours)
    if degree >= len(client_ids) - 1:
        return complete_graph(client_ids)
    if degree < 2 or degree % 2:
        raise ValueError(f"neighbours must be an even degree >= 2, got {neighbours}.")
    return random_harary_graph(client_ids, degree, rng=rng)
