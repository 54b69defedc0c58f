import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import benchmark_module

from fa_hetdp.secagg import (
    EncodingError,
    InProcessSession,
    ProtocolAborted,
    default_threshold,
    run_in_process,
)


def integer_vectors(n, d, seed):
    # integers encode exactly at any power-of-two scale >= 1, so the ring sum is
    # deterministic and can be checked bit for bit
    return np.random.default_rng(seed).integers(-1000, 1001, size=(n, d)).astype(np.float64)


def expected_ring_sum(vectors, scales):
    codes = [int(v) for v in np.zeros(vectors.shape[1])]
    for row in vectors:
        for j, value in enumerate(row):
            codes[j] = (codes[j] + int(value * scales[j])) % 2**64
    return np.array(codes, dtype=np.uint64)


def check_exact(result, vectors, survivors):
    kept = vectors[list(survivors)]
    assert result.survivors == tuple(survivors)
    assert np.array_equal(result.sum, kept.sum(axis=0))
    step = result.max_error / len(survivors)  # = 1 / scale
    assert np.array_equal(result.raw, expected_ring_sum(kept, 1.0 / step))


@pytest.mark.parametrize(
    ("n", "neighbours"),
    [
        (3, "complete"),
        (10, "complete"),
        (10, 4),
        (100, "complete"),
        (100, None),
    ],
)
def test_exact_sums(n, neighbours):
    vectors = integer_vectors(n, 6, seed=n)
    threshold = default_threshold(n, neighbours)
    result = run_in_process(
        vectors, threshold=threshold, neighbours=neighbours, rng=np.random.default_rng(n)
    )
    check_exact(result, vectors, range(n))


@pytest.mark.slow
def test_exact_sum_n1000_sparse_graph_with_dropouts():
    n = 1000
    vectors = integer_vectors(n, 64, seed=7)
    dropped = set(range(0, n, 20))  # 5 % drop before sending their masked input
    result = run_in_process(
        vectors,
        threshold=default_threshold(n),
        dropouts={"masked_input": dropped, "unmask": {1, 2, 3}},
        rng=np.random.default_rng(7),
    )
    check_exact(result, vectors, sorted(set(range(n)) - dropped))


def test_exact_sum_complete_graph():
    # the complete graph's path (every key in every directory, n - 1 holders per secret) at
    # n = 150, a few seconds; n = 1000 (~2M X25519 agreements, ~2 minutes of CPU) is
    # `python benchmarks/secagg_bench.py --exact-complete`, which asserts the same
    n = 150
    vectors = integer_vectors(n, 4, seed=8)
    result = run_in_process(
        vectors,
        threshold=n // 2 + 1,
        neighbours="complete",
        dropouts={"masked_input": {5, 6}},
        rng=np.random.default_rng(8),
    )
    check_exact(result, vectors, sorted(set(range(n)) - {5, 6}))


def test_bench_exact_complete_mode_asserts_exactness():
    # the benchmark's n = 1000 check, at a size the suite can afford
    bench = benchmark_module("secagg_bench")
    out = bench.exact_complete(12)
    assert (out["n"], out["t"], out["survivors"]) == (12, 7, 10)


@pytest.mark.parametrize("neighbours", ["complete", 8])
@pytest.mark.parametrize("phase", ["advertise_keys", "share_keys", "masked_input", "unmask"])
def test_dropouts_after_each_round(phase, neighbours):
    n = 30
    vectors = integer_vectors(n, 5, seed=3)
    dropped = {2, 11, 17}
    result = run_in_process(
        vectors,
        threshold=4,
        neighbours=neighbours,
        dropouts={phase: dropped},
        rng=np.random.default_rng(3),
    )
    # a client that drops during unmasking has already sent its input: it is in the sum
    expected = range(n) if phase == "unmask" else sorted(set(range(n)) - dropped)
    check_exact(result, vectors, expected)


def test_two_summations_stepwise_and_dropped_stays_dropped():
    n = 40
    session = InProcessSession(
        n, threshold=5, num_summations=2, neighbours=10, rng=np.random.default_rng(4)
    )
    first_inputs = integer_vectors(n, 7, seed=1)
    first = session.sum(first_inputs, dropouts={"masked_input": {3}, "unmask": {8}})
    check_exact(first, first_inputs, sorted(set(range(n)) - {3}))
    # stage 2 depends on stage 1's result
    second_inputs = integer_vectors(n, 3, seed=2) + np.round(first.sum[:3] / n)
    second = session.sum(second_inputs, dropouts={"masked_input": {9}})
    check_exact(second, second_inputs, sorted(set(range(n)) - {3, 9}))
    assert set(second.dropped) == {3, 9}
    with pytest.raises(ProtocolAborted, match="only 2 summations"):
        session.sum(second_inputs)


def test_multiple_summations_in_one_call():
    vectors = [integer_vectors(12, 5, seed=1), integer_vectors(12, 2, seed=2)]
    results = run_in_process(vectors, threshold=5, rng=np.random.default_rng(0))
    assert [r.summation for r in results] == [0, 1]
    for r, v in zip(results, vectors, strict=True):
        check_exact(r, v, range(12))


def test_real_valued_inputs_within_documented_error():
    rng = np.random.default_rng(5)
    vectors = rng.normal(size=(50, 20))
    result = run_in_process(vectors, threshold=10, rng=rng, bounds=5.0, noise_std=0.1)
    assert np.all(np.abs(result.sum - vectors.sum(axis=0)) <= result.max_error)


def test_aborts_when_survivors_fall_below_threshold():
    vectors = integer_vectors(10, 3, seed=0)
    with pytest.raises(ProtocolAborted, match="fewer than threshold"):
        run_in_process(
            vectors,
            threshold=6,
            neighbours="complete",
            dropouts={"masked_input": {0, 1, 2, 3, 4}},
            rng=np.random.default_rng(0),
        )
    with pytest.raises(ProtocolAborted, match="fewer than threshold"):
        run_in_process(
            vectors,
            threshold=6,
            neighbours="complete",
            dropouts={"unmask": {0, 1, 2, 3, 4}},
            rng=np.random.default_rng(0),
        )


@pytest.mark.parametrize("bad", [np.zeros((5, 3), dtype=np.float32), np.zeros(5)])
def test_rejects_bad_input_arrays(bad):
    with pytest.raises(EncodingError):
        run_in_process(bad, threshold=2, rng=np.random.default_rng(0))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    n=st.integers(min_value=3, max_value=9),
    d=st.integers(min_value=1, max_value=4),
)
def test_property_masks_cancel_for_any_survivor_set(data, n, d):
    # a client's own share never counts: each survivor needs t other survivors' shares
    threshold = data.draw(st.integers(min_value=2, max_value=n - 1))
    survivors = data.draw(
        st.sets(st.integers(0, n - 1), min_size=threshold + 1, max_size=n).map(sorted)
    )
    values = data.draw(st.lists(st.integers(-(2**20), 2**20), min_size=n * d, max_size=n * d))
    vectors = np.array(values, dtype=np.float64).reshape(n, d)
    dropped = set(range(n)) - set(survivors)
    result = run_in_process(
        vectors,
        threshold=threshold,
        neighbours="complete",
        dropouts={"masked_input": dropped},
        rng=np.random.default_rng(data.draw(st.integers(0, 2**32))),
    )
    check_exact(result, vectors, survivors)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(min_value=4, max_value=12))
def test_property_sum_does_not_depend_on_client_order(seed, n):
    rng = np.random.default_rng(seed)
    vectors = rng.integers(-(2**30), 2**30, size=(n, 3)).astype(np.float64)
    perm = rng.permutation(n)
    a = run_in_process(vectors, threshold=3, rng=np.random.default_rng(seed))
    b = run_in_process(vectors[perm], threshold=3, rng=np.random.default_rng(seed + 1))
    assert np.array_equal(a.raw, b.raw)
    assert np.array_equal(a.sum, b.sum)


def test_default_threshold_is_a_majority_of_holders():
    # k holders (the neighbours; a client's own share never counts): floor(k / 2) + 1
    assert default_threshold(3, "complete") == 2
    assert default_threshold(10, "complete") == 5
    assert default_threshold(1000) == 16  # k = 30 holders
    assert default_threshold(1000, 8) == 5
