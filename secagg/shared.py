"""Checks of a session's O(n) id tuples that every client repeats, computed once per tuple.

Each function is pure; :mod:`secagg.client` calls it through :func:`secagg.messages.memo`, so
n in-process clients that share one setup, directory or unmask request do the O(n) work once
(O(n) in all, not O(n^2)); a client over a network parses its own copy and does it once.
"""

from __future__ import annotations

from secagg.graph import NeighbourGraph
from secagg.messages import id_set, memo

__all__ = ["request_sets", "session_graph", "within"]


def session_graph(ring: tuple[int, ...], degree: int) -> NeighbourGraph:
    """Return the graph of a session, its position index built (one per ring object).

    Raises
    ------
    ValueError
        If ``ring`` and ``degree`` do not describe a graph (see :class:`NeighbourGraph`).
    """
    return memo(("graph", degree), (ring,), lambda: _graph(ring, degree))


def _graph(ring: tuple[int, ...], degree: int) -> NeighbourGraph:
    graph = NeighbourGraph(ring=ring, degree=degree)
    _ = ring[0] in graph  # builds the position index once (shared, see messages.memo)
    return graph


def within(ids: tuple[int, ...], setup_ids: tuple[int, ...]) -> bool:
    """Return whether every id of ``ids`` is in ``setup_ids``."""
    return memo(("within",), (ids, setup_ids), lambda: id_set(ids) <= id_set(setup_ids))


RequestSets = tuple[frozenset[int], frozenset[int], str, list[int], list[int]]


def request_sets(
    survivors: tuple[int, ...], dropped: tuple[int, ...], directory: frozenset[int]
) -> RequestSets:
    """Return the O(n) checks of an unmask request: id sets, duplicates, unknown ids, overlap.

    Returns ``(survivors, dropped, name of a list with duplicates or "", unknown ids, ids in
    both lists)``.
    """
    return memo(
        ("unmask-sets",),
        (survivors, dropped, directory),
        lambda: _request_sets(survivors, dropped, directory),
    )


def _request_sets(
    survivors: tuple[int, ...], dropped: tuple[int, ...], directory: frozenset[int]
) -> RequestSets:
    survivor_set, dropped_set = frozenset(survivors), frozenset(dropped)
    duplicate = next(
        (
            name
            for name, ids, unique in (
                ("survivors", survivors, survivor_set),
                ("dropped", dropped, dropped_set),
            )
            if len(unique) != len(ids)
        ),
        "",
    )
    unknown = sorted((survivor_set | dropped_set) - directory)
    return survivor_set, dropped_set, duplicate, unknown, sorted(survivor_set & dropped_set)
