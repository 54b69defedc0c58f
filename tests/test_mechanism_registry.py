"""The discrete mechanisms are siblings under one base, and a third one is a class plus a line.

``TwinDiscreteGaussian`` below is a third distributed discrete mechanism written here, in the
test, and nowhere else: the discrete Gaussian's exact sampler under another name, with its
own subgaussian tail and the ddg accounting (so its guarantee is honest: it IS the ddg law).
Registered with :func:`register_mechanism`, it must run through config validation, the plan,
the accountant, the lattice and the report of :func:`fa_hetdp.private_statistics` without any
other file knowing its name.

The byte-identity digests pin the built-in ddg and skellam numbers (a seeded
``private_statistics`` result, and the lattice / integer pipeline / calibration hooks): they
were computed on commit b363d1b, before the mechanisms became sibling classes, by the same
functions as below.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
import pytest

from fa_hetdp import private_statistics
from fa_hetdp.config.rules import ConfigError
from fa_hetdp.config.secagg import resolve_modulus_bits
from fa_hetdp.dp.discrete import sample_discrete_gaussian
from fa_hetdp.dp.lattice import SENSITIVITY_INFLATION
from fa_hetdp.dp.mechanisms import (
    DiscreteGaussianMechanism,
    DiscreteMechanism,
    SkellamMechanism,
    get_mechanism,
    mechanism_names,
    register_mechanism,
    unregister_mechanism,
)
from fa_hetdp.errors import PrivacyParameterError

TWIN = "ddg_twin"


class TwinDiscreteGaussian(DiscreteMechanism):
    """The discrete Gaussian under another name: its own sampler, tail and accounting hooks."""

    name = TWIN
    description = "twin of the distributed discrete Gaussian (a test mechanism)"
    accounting = "zCDP of the sum of discrete Gaussians (KLS 2021 Prop. 14), test twin"
    factor = SENSITIVITY_INFLATION**2
    law = "N_Z(0, v)"
    integers = "discrete Gaussian"

    def sample_integers(
        self, variance: float, count: int, *, rng: np.random.Generator
    ) -> npt.NDArray[np.int64]:
        return sample_discrete_gaussian(variance, count, rng=rng)

    def tail_probability(self, variance: float, shares: int, h: float) -> float:
        if h <= 0:
            return 1.0
        return min(1.0, 2.0 * math.exp(-(h * h) / (2.0 * shares * variance)))


@pytest.fixture
def twin() -> Iterator[DiscreteMechanism]:
    mech = register_mechanism(TwinDiscreteGaussian())
    try:
        yield mech
    finally:
        unregister_mechanism(TWIN)


def _data() -> npt.NDArray[np.float64]:
    return np.random.default_rng(7).random((40, 5))


def test_builtin_discrete_mechanisms_are_sibling_classes() -> None:
    ddg, skellam = get_mechanism("ddg"), get_mechanism("skellam")
    assert type(ddg) is DiscreteGaussianMechanism and type(skellam) is SkellamMechanism
    assert isinstance(ddg, DiscreteMechanism) and isinstance(skellam, DiscreteMechanism)
    assert not issubclass(SkellamMechanism, DiscreteGaussianMechanism)
    assert not issubclass(DiscreteGaussianMechanism, SkellamMechanism)


def test_a_third_discrete_mechanism_runs_private_statistics_end_to_end(
    twin: DiscreteMechanism,
) -> None:
    assert TWIN in mechanism_names() and get_mechanism(TWIN) is twin
    x = _data()
    got = private_statistics(x, epsilon=1.0, delta=1e-5, mechanism=TWIN, rng=11)  # type: ignore[arg-type]
    ref = private_statistics(x, epsilon=1.0, delta=1e-5, mechanism="ddg", rng=11)
    # the same law with the same hooks draws the same integers: the plumbing treated the
    # twin exactly as the built-in discrete Gaussian (summed path, lattice, accounting)
    for name in ("mean", "dispersion", "weighted_mean", "q", "i2"):
        np.testing.assert_array_equal(getattr(got, name), getattr(ref, name))
    assert got.spent.epsilon == ref.spent.epsilon <= 1.0
    assert any(twin.description in label and twin.accounting in label for label in got.labels)
    assert got.plan is not None and got.plan.mechanism is twin
    assert resolve_modulus_bits(None, TWIN) == 32  # a discrete mechanism's ring
    # the integer pipeline (what a Flower client sends) uses the twin's own tails
    lat = twin.choose_lattice(
        [0.5, 0.02], [1.0, 1.0], n=50, modulus_bits=32, failure_probability=1e-12
    )
    ddg_lat = get_mechanism("ddg").choose_lattice(
        [0.5, 0.02], [1.0, 1.0], n=50, modulus_bits=32, failure_probability=1e-12
    )
    np.testing.assert_array_equal(lat.gamma, ddg_lat.gamma)
    assert lat.kind == TWIN and np.all(lat.bounds >= ddg_lat.bounds)
    share = twin.add_share(
        [0.3, 0.6], lat.units * lat.gamma, rng=np.random.default_rng(1), lattice=lat
    )
    assert np.all(np.abs(share) <= lat.bounds)
    np.testing.assert_array_equal(share / lat.gamma, np.round(share / lat.gamma))


def test_the_registry_is_what_validation_reads(twin: DiscreteMechanism) -> None:
    with pytest.raises(ConfigError, match="per_coordinate"):  # argued for Gaussian noise only
        private_statistics(
            _data(),
            epsilon=1.0,
            delta=1e-5,
            mechanism=TWIN,  # type: ignore[arg-type]
            noise_shape="per_coordinate",
            rng=1,
        )
    unregister_mechanism(TWIN)
    with pytest.raises(ConfigError, match="ddg_twin"):
        private_statistics(_data(), epsilon=1.0, delta=1e-5, mechanism=TWIN, rng=1)  # type: ignore[arg-type]
    register_mechanism(twin)  # the fixture unregisters it again


def test_registration_refuses_a_taken_name_and_the_builtins_stay() -> None:
    with pytest.raises(PrivacyParameterError, match="already registered"):
        register_mechanism(DiscreteGaussianMechanism())
    with pytest.raises(PrivacyParameterError, match="built-in"):
        unregister_mechanism("skellam")
    assert mechanism_names()[:4] == ("agm", "cgm", "ddg", "skellam")


# ------------------------------------------------------------------ byte identity (b363d1b)
def _digest_result(mechanism: str) -> str:
    r = private_statistics(_data(), epsilon=1.0, delta=1e-5, mechanism=mechanism, rng=11)  # type: ignore[arg-type]
    h = hashlib.sha256()
    for a in (r.mean, r.dispersion, r.weighted_mean, r.q, r.i2, r.i2_extra):
        if a is not None:
            h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
    h.update(repr(sorted(r.sigmas.items())).encode())
    h.update(repr((r.spent.epsilon, r.spent.delta)).encode())
    return h.hexdigest()[:16]


def _digest_pipeline(mechanism: str) -> str:
    m = get_mechanism(mechanism)
    rng = np.random.default_rng(3)
    s = np.array([0.5, 0.5, 0.02, 2.0])
    lat = m.choose_lattice(
        s, [1.0, 1.0, 1.0, 4.0], n=50, modulus_bits=32, failure_probability=1e-12
    )
    assert lat is not None
    v = m.add_share(rng.random(4), lat.units * lat.gamma, rng=rng, lattice=lat)
    h = hashlib.sha256()
    for a in (
        lat.gamma,
        lat.units,
        lat.bounds,
        lat.sum_bounds,
        v,
        m.tail_bound(s, 1e-9),
        m.sample(s, (3, 4), rng=rng),
        m.variance(s),
    ):
        h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
    words = (
        m.calibrate(1.0, 1e-5, 1.0),
        m.calibrate_gdp(0.5, 2.0),
        m.total_mu(1.0, 1e-5),
        m.guarantee(0.7, delta=1e-5, epsilon=1.0),
        m.event(2.0, 1.0).rho,
        m.noise_label("s^2"),
        m.noise_label("s^2", share=True),
        m.accounting,
        m.description,
    )
    h.update(repr(words).encode())
    return h.hexdigest()[:16]


@pytest.mark.parametrize(
    ("mechanism", "result", "pipeline"),
    [
        ("ddg", "5084968ea30b3cfe", "9802d2b2cddfc4cb"),
        ("skellam", "aa022749b81ff228", "9631028696aec51c"),
    ],
)
def test_ddg_and_skellam_numbers_are_byte_identical(
    mechanism: str, result: str, pipeline: str
) -> None:
    assert _digest_result(mechanism) == result
    assert _digest_pipeline(mechanism) == pipeline
