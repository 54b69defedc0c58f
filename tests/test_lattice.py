"""The ddg/skellam integer pipeline in the protocol (fa_hetdp.dp.lattice, protocol.client).

A distributed discrete client sends ``gamma (R(v/gamma) + Z)``; the encoding at scale
``1/gamma`` must put exactly the integers ``R + Z mod 2^m`` in the ring; the step is a power of
two fitted to the ring within the accounting's limits; and the release keeps its privacy
(Clopper-Pearson audit).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats
from threshold_audit import threshold_epsilon_lower_bound

from fa_hetdp._types import Mechanism
from fa_hetdp.config.protocol import ProtocolConfig
from fa_hetdp.dp.accounting import ReleaseSpec, plan_budget, privacy_spent
from fa_hetdp.dp.discrete import as_rational_variance
from fa_hetdp.dp.lattice import (
    DEFAULT_WRAP_PROBABILITY,
    MAX_LATTICE,
    Lattice,
    choose_lattice,
    discretise,
    lattice_step,
)
from fa_hetdp.dp.mechanisms import get_mechanism
from fa_hetdp.errors import PrivacyParameterError
from fa_hetdp.protocol.client import (
    contribution_encoding,
    local_values,
    stage1_contribution,
    stage2_contribution,
    stage_lattice,
)
from fa_hetdp.protocol.floor import floor_contribution
from fa_hetdp.protocol.plan import ENCODING_FAILURE_PROBABILITY, plan_protocol
from fa_hetdp.secagg.encoding import FixedPointEncoding
from fa_hetdp.secagg.errors import EncodingError

ALPHA = 0.01  # significance level of the statistical tests below (fixed seeds, no redraws)
KINDS: list[Mechanism] = ["ddg", "skellam"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bits", [64, 32])
def test_ring_words_are_the_lattice_integers(kind: Mechanism, bits: int) -> None:
    plan = plan_protocol(ProtocolConfig(1.0, 1e-5, mechanism=kind), n=8, d=6)
    x = np.random.default_rng(0).random(6)
    local = local_values(x, variance_floor=plan.config.variance_floor)
    values = stage1_contribution(local, plan, rng=np.random.default_rng(1), modulus_bits=bits)
    lattice = stage_lattice(plan, 1, modulus_bits=bits)
    assert lattice is not None
    integers = values / lattice.gamma
    np.testing.assert_array_equal(integers, np.round(integers))  # on the lattice, exactly
    encoding = contribution_encoding(plan, 1, plan.n, modulus_bits=bits)
    np.testing.assert_array_equal(encoding.scales, 1.0 / lattice.gamma)
    words = encoding.encode(values, rng=np.random.default_rng(2))
    want = integers.astype(np.int64).view(np.uint64) & np.uint64((1 << bits) - 1)
    assert words.tobytes() == want.tobytes()  # byte for byte: R + Z mod 2^m
    np.testing.assert_array_equal(encoding.decode(words, 1), values)  # decoded exactly
    assert not np.any(encoding.max_decoding_error(plan.n))


def test_stage2_lattice_follows_the_broadcast_and_is_exact() -> None:
    plan = plan_protocol(ProtocolConfig(1.0, 1e-5, mechanism="ddg"), n=8, d=6)
    local = local_values(np.full(6, 0.3), variance_floor=plan.config.variance_floor)
    m = np.full(6, 0.5)
    values = stage2_contribution(local, plan, m, m, rng=np.random.default_rng(3))
    lattice = stage_lattice(plan, 2, broadcast=(m, m))
    assert lattice is not None
    np.testing.assert_array_equal(lattice.units * lattice.gamma, plan.share_std_vector(2, (m, m)))
    assert np.all(lattice.units >= 16.0)
    encoding = contribution_encoding(plan, 2, plan.n, broadcast=(m, m))
    words = encoding.encode(values, rng=np.random.default_rng(4))
    signed = words.view(np.int64).astype(np.float64)
    np.testing.assert_array_equal(signed * lattice.gamma, values)


def test_rounding_is_unbiased_and_adjacent() -> None:
    # No noise: R(v/gamma) is floor or floor + 1 with the right frequency (binomial, ALPHA).
    gamma = np.full(20_000, 0.25)
    lattice = Lattice("ddg", gamma, np.zeros(gamma.size), gamma, 1, 64, 1e-9, gamma, gamma, 1e-9)
    out = discretise(
        get_mechanism("ddg"), np.full(gamma.size, 0.3), lattice, rng=np.random.default_rng(5)
    )
    assert set(np.unique(out)) <= {0.25, 0.5}
    ups = int(np.count_nonzero(out == 0.5))
    assert stats.binomtest(ups, gamma.size, 0.2).pvalue > ALPHA


def test_step_is_the_fine_rule_when_the_ring_is_roomy() -> None:
    s = np.array([1e-3, 0.5, 40.0])
    lat = choose_lattice(
        get_mechanism("ddg"),
        s,
        np.array([1.0, 1.0, 100.0]),
        n=1000,
        modulus_bits=64,
        failure_probability=1e-30,
    )
    np.testing.assert_array_equal(lat.gamma, lattice_step(s))
    assert lat.refusal_probability == pytest.approx(3 * 1000 * 1e-30)


@pytest.mark.parametrize("kind", KINDS)
def test_step_coarsens_to_fit_a_small_ring_within_the_accounting(kind: Mechanism) -> None:
    # n = 20000 weighted coordinates (bound W = 100) do not fit Z_2^32 at 2^-12.
    n, s, b = 20_000, np.array([0.01, 0.5]), np.array([1.0, 100.0])
    lat = choose_lattice(get_mechanism(kind), s, b, n=n, modulus_bits=32, failure_probability=1e-30)
    assert lat.gamma[1] > MAX_LATTICE
    assert np.all(lat.gamma <= MAX_LATTICE * b) and np.all(lat.gamma <= s / 16.0)
    np.testing.assert_array_equal(np.exp2(np.round(np.log2(lat.gamma))), lat.gamma)
    # the SUM fits: n ceil(b/gamma) + ceil(H) < 2^31, H the n shares' tail at q/k (q = 1e-9)
    total = n * np.ceil(b / lat.gamma) + np.ceil(
        [get_mechanism(kind).sum_tail(u, n, 0.5e-9) for u in lat.units]
    )
    assert np.all(total < 2.0**31)
    np.testing.assert_array_equal(lat.sum_bounds, lat.gamma * total)
    half = lat.gamma / 2  # the next finer step would not fit
    finer = n * np.ceil(b / half) + np.ceil(
        [get_mechanism(kind).sum_tail(u, n, 0.5e-9) for u in s / half]
    )
    assert np.all((finer >= 2.0**31) | (lat.gamma == lattice_step(s)))


def test_step_refusal_names_n_the_bound_and_the_ring() -> None:
    with pytest.raises(PrivacyParameterError, match=r"Z_2\^32.*n=1000000.*bounded by 1 plus"):
        choose_lattice(
            get_mechanism("ddg"), [0.01], [1.0], n=10**6, modulus_bits=32, failure_probability=1e-30
        )
    # n = 600 000 unweighted coordinates need n 2^12 > 2^31 words of data alone at 2^-12
    plan = plan_protocol(ProtocolConfig(1.0, 1e-5, mechanism="ddg"), n=600_000, d=4)
    with pytest.raises(PrivacyParameterError, match="n=600000"):
        contribution_encoding(plan, 1, plan.n, modulus_bits=32)  # refused before stage 1


def test_lattice_encoding_refuses_off_lattice_values() -> None:
    plan = plan_protocol(ProtocolConfig(1.0, 1e-5, mechanism="skellam"), n=8, d=3)
    encoding = contribution_encoding(plan, 1, plan.n)
    assert encoding.lattice
    with pytest.raises(EncodingError, match="not on the lattice"):
        encoding.encode(np.full(7, 1e-9), rng=np.random.default_rng(0))
    gaussian = plan_protocol(ProtocolConfig(1.0, 1e-5, mechanism="agm"), n=8, d=3)
    assert stage_lattice(gaussian, 1) is None
    assert not contribution_encoding(gaussian, 1, 8).lattice


def _audit(kind: Mechanism, noise_factor: float, trials: int = 200_000) -> tuple[float, float]:
    """Empirical lower bound on epsilon of the integer pipeline (n = 3, d = 1, Delta = 1).

    Client 0 holds 0 or 1, the others 0.5; each sends ``gamma (R + Z)``. Clopper-Pearson at
    ALPHA (Bonferroni over the thresholds) bounds P(y >= k); returns (lower bound, claimed).
    """
    n = 3
    budget = plan_budget(1.0, 1e-5, [ReleaseSpec("mean", 1.0)], mechanism=kind)
    claimed = privacy_spent(budget).epsilon
    share = budget.sigma("mean") * noise_factor / math.sqrt(n)
    one = choose_lattice(
        get_mechanism(kind),
        [share],
        [1.0],
        n=n,
        modulus_bits=64,
        failure_probability=ENCODING_FAILURE_PROBABILITY,
    )
    size = trials * n
    lattice = Lattice(
        kind,
        np.full(size, one.gamma[0]),
        np.full(size, one.units[0]),
        np.full(size, one.bounds[0]),
        n,
        64,
        one.failure_probability,
        np.full(size, one.data_words[0]),
        np.full(size, one.sum_bounds[0]),
        one.wrap_limit,
    )
    rng = np.random.default_rng(32)
    others = np.full((trials, n), 0.5)
    y = []
    for first in (0.0, 1.0):
        others[:, 0] = first
        y.append(
            discretise(get_mechanism(kind), others.reshape(-1), lattice, rng=rng)
            .reshape(trials, n)
            .sum(1)
        )
    y0, y1 = y
    thresholds = np.quantile(y1, np.linspace(0.5, 0.9999, 60))
    best = threshold_epsilon_lower_bound(y0, y1, thresholds, delta=1e-5, alpha=ALPHA)
    return best, claimed


@pytest.mark.statistical
@pytest.mark.parametrize("kind", KINDS)
def test_privacy_audit_of_the_integer_pipeline(kind: Mechanism) -> None:
    lower, claimed = _audit(kind, 1.0)
    assert lower <= claimed
    lower_weak, _ = _audit(kind, 0.2)  # a fifth of the noise: caught
    assert lower_weak > claimed


def test_mechanism_seam_checks_the_share_scale() -> None:
    mech = get_mechanism("ddg")
    lat = mech.choose_lattice([0.5], [1.0], n=4, modulus_bits=64, failure_probability=1e-20)
    assert lat is not None
    with pytest.raises(PrivacyParameterError, match="scale differs"):
        mech.add_share(np.array([0.2]), 0.25, rng=np.random.default_rng(0), lattice=lat)
    assert (
        get_mechanism("agm").choose_lattice(
            [0.5], [1.0], n=4, modulus_bits=64, failure_probability=1e-20
        )
        is None
    )


@pytest.mark.parametrize("kind", KINDS)
def test_sum_decodes_exactly_within_its_noise_room_and_wraps_beyond(kind: Mechanism) -> None:
    # n = 10 000 shares of scale 9.7 (the synthetic-10k stage-1 share at epsilon = 1): n one-share
    # 12-sd tails would need > 2^31 words; the sum's tail fits with room to spare.
    n, b, s = 10_000, np.array([1.0, 100.0]), np.array([9.7, 970.0])
    lat = choose_lattice(get_mechanism(kind), s, b, n=n, modulus_bits=32, failure_probability=1e-33)
    shares = [get_mechanism(kind).integer_tail(u, 1e-33) for u in lat.units]
    assert np.all(n * (lat.data_words + np.ceil(shares)) >= 2.0**31)  # the old rule: refused
    big_h = lat.sum_bounds / lat.gamma - n * lat.data_words  # ceil(H_j), lattice steps
    np.testing.assert_array_equal(
        big_h, np.ceil([get_mechanism(kind).sum_tail(u, n, 0.5e-9) for u in lat.units])
    )
    assert np.all(big_h <= lat.noise_room)
    for h, u in zip(big_h, lat.units, strict=True):  # the reported bound covers |noise| > H
        v = float(as_rational_variance(u * u))
        assert get_mechanism(kind).tail_probability(v, n, h) <= 0.5e-9
    assert lat.wrap_probability == DEFAULT_WRAP_PROBABILITY
    encoding = FixedPointEncoding(
        scales=1.0 / lat.gamma,
        bounds=lat.bounds,
        max_clients=n,
        modulus_bits=32,
        lattice=True,
        sum_bounds=lat.sum_bounds,
    )
    rng = np.random.default_rng(6)

    def ring_sum(noise: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
        # every client at the top of its box with its share of the planted summed noise
        total = np.zeros(2, dtype=np.uint64)
        for i in range(n):
            share = noise // n + (i < noise % n)
            total += encoding.encode(lat.gamma * (lat.data_words + share), rng=rng)
        return total

    inside = big_h.astype(np.int64)  # just inside H: exact
    want = lat.gamma * (n * lat.data_words + inside)
    np.testing.assert_array_equal(encoding.decode(ring_sum(inside), n), want)
    # Beyond H (probability <= 0.5e-9 for honest shares) the sum is refused by the range
    # check, up to the last value that would still decode and at the wrap (which used to
    # decode to -gamma 2^31 without an error).
    room = lat.noise_room.astype(np.int64)
    for noise in (inside + 1, room, room + 1):
        with pytest.raises(EncodingError, match="stated sum bound"):
            encoding.decode(ring_sum(noise), n)


@pytest.mark.parametrize("kind", KINDS)
def test_ten_thousand_clients_at_d_3072_fit_32_bits(kind: Mechanism) -> None:
    plan = plan_protocol(ProtocolConfig(1.0, 1e-5, mechanism=kind), n=10_000, d=3072)
    contribution_encoding(plan, 1, plan.n, modulus_bits=32)  # stage 1, and stage 2 at c = 1/2
    half = np.full(3072, 0.5)
    for stage, broadcast in ((1, None), (2, (half, half))):
        lat = stage_lattice(plan, stage, modulus_bits=32, broadcast=broadcast)  # type: ignore[arg-type]
        assert lat is not None
        bounds = plan.contribution_bounds(stage)  # type: ignore[arg-type]
        scale = lat.gamma * lat.units
        unweighted = bounds == 1.0  # at the finest step rule; W-bounded ones within 2^-12 W
        np.testing.assert_array_equal(lat.gamma[unweighted], lattice_step(scale[unweighted]))
        assert np.all(lat.gamma <= MAX_LATTICE * bounds) and np.all(lat.units >= 16.0)
        assert float(np.max(lat.sum_bounds / lat.gamma)) < 2.0**31


def test_stage0_histogram_is_on_the_lattice() -> None:
    config = ProtocolConfig(1.0, 1e-5, mechanism="skellam", adaptive_floor=True)
    plan = plan_protocol(config, n=50, d=8)
    lattice = stage_lattice(plan, 0, modulus_bits=32)
    assert lattice is not None and plan.adaptive
    x = np.random.default_rng(7).random(8)
    values = floor_contribution(
        x,
        plan.floor_edges,
        plan.floor_share_std,
        mechanism=plan.mechanism,
        rng=np.random.default_rng(8),
        lattice=lattice,
    )
    integers = values / lattice.gamma
    np.testing.assert_array_equal(integers, np.round(integers))  # integers on the lattice
    encoding = contribution_encoding(plan, 0, plan.n, modulus_bits=32)
    assert encoding.lattice and encoding.sum_bounds is not None
    np.testing.assert_array_equal(encoding.scales, 1.0 / lattice.gamma)
    words = encoding.encode(values, rng=np.random.default_rng(9))
    np.testing.assert_array_equal(encoding.decode(words, 1), values)
    central = plan_protocol(
        ProtocolConfig(1.0, 1e-5, mechanism="skellam", placement="central", adaptive_floor=True),
        n=50,
        d=8,
    )
    assert stage_lattice(central, 0) is None


def test_encoding_checks_the_stated_sum_bound() -> None:
    # n (B + 1) would wrap, the stated sum bound does not; a sum bound at 2^31 is refused
    scales, bounds = np.array([1.0]), np.array([1e6])
    with pytest.raises(EncodingError, match="could reach"):
        FixedPointEncoding(scales=scales, bounds=bounds, max_clients=4000, modulus_bits=32)
    FixedPointEncoding(scales, bounds, 4000, 32, lattice=True, sum_bounds=np.array([2.0**31 - 1]))
    with pytest.raises(EncodingError, match="stated sum bound"):
        FixedPointEncoding(scales, bounds, 4000, 32, lattice=True, sum_bounds=np.array([2.0**31]))


@pytest.mark.parametrize("kind", KINDS)
def test_reported_variance_bounds_the_integer_pipelines_error(kind: Mechanism) -> None:
    # Exact: n clients' rounding (<= gamma^2/4 each) plus their noise (rounded-up variance)
    # never exceed variance(s) at the summed scale s = sqrt(n) s_i, whatever step was chosen.
    mech = get_mechanism(kind)
    for share, bits in ((1e-3, 64), (0.3, 64), (9.7, 32), (970.0, 32)):
        n = 10_000
        lat = choose_lattice(
            get_mechanism(kind), [share], [100.0], n=n, modulus_bits=bits, failure_probability=1e-9
        )
        gamma, units = float(lat.gamma[0]), float(lat.units[0])
        error = n * gamma**2 * (0.25 + float(as_rational_variance(units**2)))
        assert error <= float(mech.variance(math.sqrt(n) * share))
    # and the old dithered figure s^2 + gamma^2/12 would under-state the worst case
    lat = choose_lattice(
        get_mechanism(kind), [0.01], [1.0], n=1, modulus_bits=64, failure_probability=1e-9
    )
    worst = float(lat.gamma[0]) ** 2 * (0.25 + float(as_rational_variance(lat.units[0] ** 2)))
    assert worst > 0.01**2 + float(lattice_step(0.01)) ** 2 / 12.0
