import math

import numpy as np
import pytest

from fa_hetdp.secagg.graph import (
    NeighbourGraph,
    complete_graph,
    default_degree,
    random_harary_graph,
)


@pytest.mark.parametrize(
    ("n", "k"), [(2, 1), (10, 9), (27, 26), (30, 26), (100, 28), (1000, 30), (10**6, 40)]
)
def test_default_degree_rule(n, k):
    assert default_degree(n) == k
    if k < n - 1:
        assert k % 2 == 0
        # the stated guarantee: n^2 / 2 * (1/4)^k <= 2^-41, and k is the smallest such even k
        assert math.log2(n**2 / 2) - 2 * k <= -41
        assert math.log2(n**2 / 2) - 2 * (k - 2) > -41


def test_default_degree_parameters():
    assert default_degree(1000, sigma=80) > default_degree(1000)
    assert default_degree(1000, bad_fraction=0.5) > default_degree(1000)
    with pytest.raises(ValueError, match="bad_fraction"):
        default_degree(1000, bad_fraction=1.0)


@pytest.mark.parametrize(("n", "k"), [(12, 4), (15, 6), (20, 8)])
def test_harary_separators_are_two_runs_of_half_k(n, k):
    # removing k/2 consecutive ring positions keeps H_{k,n} connected; two disjoint such
    # runs disconnect it (the fact behind the degree rule)
    graph = NeighbourGraph(ring=tuple(range(n)), degree=k)

    def connected(removed):
        alive = [c for c in range(n) if c not in removed]
        seen, todo = {alive[0]}, [alive[0]]
        while todo:
            for j in graph.neighbours(todo.pop()):
                if j not in removed and j not in seen:
                    seen.add(j)
                    todo.append(j)
        return len(seen) == len(alive)

    half = k // 2
    assert connected(set(range(half)))
    assert not connected(set(range(half)) | set(range(n // 2, n // 2 + half)))
    assert connected(set(range(half - 1)) | set(range(n // 2, n // 2 + half)))


def test_harary_graph_is_k_regular_and_symmetric():
    ids = list(range(100, 300))
    graph = random_harary_graph(ids, 12, rng=np.random.default_rng(5))
    for c in ids:
        nbrs = graph.neighbours(c)
        assert len(nbrs) == 12 and c not in nbrs
        for j in nbrs:
            assert c in graph.neighbours(j)
            assert graph.linked(c, j) and graph.linked(j, c)
    edges = sum(len(graph.neighbours(c)) for c in ids) // 2
    assert edges == 12 * 200 // 2


def test_linked_agrees_with_neighbours():
    graph = random_harary_graph(range(40), 6, rng=np.random.default_rng(1))
    for a in range(40):
        nbrs = set(graph.neighbours(a))
        assert all(graph.linked(a, b) == (b in nbrs) for b in range(40))


def test_permutation_comes_from_rng():
    a = random_harary_graph(range(50), 8, rng=np.random.default_rng(3))
    b = random_harary_graph(range(50), 8, rng=np.random.default_rng(3))
    c = random_harary_graph(range(50), 8, rng=np.random.default_rng(4))
    assert a.ring == b.ring and a.ring != c.ring


def test_complete_graph_and_fallback():
    graph = complete_graph([5, 3, 9])
    assert (
        graph.complete and graph.neighbours(3) == (5, 9) and graph.holders(3) == (5, 9)
    )  # never itself
    assert random_harary_graph(range(6), 8, rng=np.random.default_rng(0)).complete


@pytest.mark.parametrize("degree", [3, 0, 10])
def test_invalid_degree_rejected(degree):
    with pytest.raises(ValueError, match="degree"):
        NeighbourGraph(ring=tuple(range(10)), degree=degree)


def test_duplicate_ring_rejected():
    with pytest.raises(ValueError, match="twice"):
        NeighbourGraph(ring=(1, 1, 2), degree=2)
