import itertools
import os

import numpy as np
import pytest

from fa_hetdp.secagg import shamir
from fa_hetdp.secagg.errors import MessageRejected, ProtocolAborted


def test_prime_is_prime():
    p = shamir.PRIME
    assert p == 2**21 - 9
    assert all(p % q for q in range(2, int(p**0.5) + 1))
    # exact float64 products: a block of 2048 products of field elements stays below 2^53
    assert 2048 * (p - 1) ** 2 < 2**53


def test_any_t_shares_reconstruct_and_t_minus_1_do_not():
    secrets = [os.urandom(32), os.urandom(32)]
    n, t = 7, 4
    xs = list(range(1, n + 1))
    shares = shamir.share(secrets, xs, t)
    for subset in itertools.combinations(range(n), t):
        got = shamir.reconstruct([xs[i] for i in subset], shares[list(subset)], t)
        assert got == secrets
    for subset in itertools.combinations(range(n), t - 1):
        idx = list(subset)
        with pytest.raises(ProtocolAborted, match=r"fewer|below"):
            shamir.reconstruct([xs[i] for i in idx], shares[idx], t)
        # interpolating t-1 shares as if the threshold were t-1 does not give the secret
        try:
            wrong = shamir.reconstruct([xs[i] for i in idx], shares[idx], t - 1)
        except ProtocolAborted:
            continue  # limbs out of range: certainly not the secret
        assert wrong != secrets


def test_large_threshold_blocked_matmul():
    # t > 2048 exercises the blocked exact matrix product
    secret = [os.urandom(32)]
    xs = list(range(1, 2600))
    shares = shamir.share(secret, xs, 2500)
    idx = np.random.default_rng(0).permutation(len(xs))[:2500]
    assert shamir.reconstruct([xs[i] for i in idx], shares[idx], 2500) == secret


def test_t_minus_1_shares_are_uniform_per_limb():
    # the shares of a fixed secret at one point are uniform over GF(p); chi-square on the
    # top 4 bits of 13 * 400 limbs, alpha = 1e-6 (critical value 15 dof: 54.0)
    secret = [bytes(32)]
    counts = np.zeros(16)
    for _ in range(400):
        values = shamir.share(secret, [1, 2, 3], 3)[0, 0]
        np.add.at(counts, (values.astype(np.int64) * 16) // shamir.PRIME, 1)
    expected = counts.sum() / 16
    assert ((counts - expected) ** 2 / expected).sum() < 54.0


def test_lagrange_cached_per_point_set():
    shamir.lagrange_at_zero.cache_clear()
    first = shamir.lagrange_at_zero((1, 2, 3))
    second = shamir.lagrange_at_zero((1, 2, 3))
    assert first is second
    assert int(first.sum()) % shamir.PRIME == 1  # interpolating a constant polynomial


def test_out_of_range_shares_rejected():
    xs = [1, 2, 3]
    shares = shamir.share([os.urandom(32)], xs, 2)
    bad = shares.copy()
    bad[0, 0, 0] = shamir.PRIME
    with pytest.raises(MessageRejected, match="out of range"):
        shamir.reconstruct(xs, bad, 2)
    with pytest.raises(MessageRejected, match="uint32"):
        shamir.reconstruct(xs, shares.astype(np.int64), 2)  # type: ignore[arg-type]


@pytest.mark.parametrize("xs", [[0, 1, 2], [1, 1, 2], [1, 2, shamir.PRIME]])
def test_bad_points_rejected(xs):
    with pytest.raises(MessageRejected):
        shamir.share([os.urandom(32)], xs, 2)


def test_bad_threshold_and_secret_size():
    with pytest.raises(ValueError, match="threshold"):
        shamir.share([os.urandom(32)], [1, 2], 3)
    with pytest.raises(ValueError, match="32 bytes"):
        shamir.share([os.urandom(16)], [1, 2], 2)


def test_reconstruct_each_uses_each_rows_own_points():
    share, reconstruct, reconstruct_each = shamir.share, shamir.reconstruct, shamir.reconstruct_each
    PRIME, LIMBS = shamir.PRIME, shamir.LIMBS
    rng = np.random.default_rng(4)
    secrets = [bytes(rng.integers(0, 256, 32, dtype=np.uint8)) for _ in range(5)]
    t = 3
    xs, rows = [], []
    for g, secret in enumerate(secrets):
        points = sorted(rng.choice(np.arange(1, 50), size=6, replace=False).tolist())
        shares = share([secret], points, t)
        pick = [0, 2, 5] if g % 2 else [1, 3, 4]
        xs.append([points[i] for i in pick])
        rows.append(shares[pick, 0, :])
    got = reconstruct_each(np.asarray(xs, dtype=np.int64), np.stack(rows))
    assert got == secrets
    for g, secret in enumerate(secrets):  # the same as one reconstruction per secret
        assert reconstruct(xs[g], np.stack(rows)[g][:, None, :], t) == [secret]
    spoiled = np.stack(rows)
    spoiled[1, 0, 0] = (int(spoiled[1, 0, 0]) + 1) % PRIME
    out = reconstruct_each(np.asarray(xs, dtype=np.int64), spoiled)
    assert out[1] != secrets[1] and [out[g] for g in (0, 2, 3, 4)] == [
        secrets[g] for g in (0, 2, 3, 4)
    ]
    with pytest.raises(MessageRejected, match="distinct"):
        reconstruct_each(
            np.asarray([[1, 1, 2]], dtype=np.int64), np.zeros((1, 3, LIMBS), np.uint32)
        )
