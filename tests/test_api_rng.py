"""The Python API's noise source: an int seed, a Generator, or (neither) a CSPRNG."""

from __future__ import annotations

import numpy as np
import pytest

import fa_hetdp
from fa_hetdp.dp.rng import AesCtrBitGenerator
from fa_hetdp.errors import PrivacyParameterError
from fa_hetdp.protocol.simulate import as_generator


@pytest.fixture(scope="module")
def x() -> np.ndarray:
    return fa_hetdp.load_dataset("digits").rows(np.arange(60))


def run(x: np.ndarray, **kwargs: object) -> fa_hetdp.PrivateStatistics:
    return fa_hetdp.private_statistics(x, epsilon=1.0, delta=1e-5, **kwargs)  # type: ignore[arg-type]


def test_an_int_seed_is_default_rng_of_it(x: np.ndarray) -> None:
    by_seed = run(x, rng=7)
    by_generator = run(x, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(by_seed.mean, by_generator.mean)
    np.testing.assert_array_equal(by_seed.q, by_generator.q)
    assert not np.array_equal(run(x, rng=8).mean, by_seed.mean)


def test_no_rng_draws_from_a_csprng(x: np.ndarray) -> None:
    assert isinstance(as_generator(None).bit_generator, AesCtrBitGenerator)
    first, second = run(x), run(x)  # fresh CSPRNG keys: different noise each time
    assert not np.array_equal(first.mean, second.mean)


def test_the_batch_takes_the_same_sources(x: np.ndarray) -> None:
    config = fa_hetdp.ProtocolConfig(epsilon=1.0, delta=1e-5)
    a = fa_hetdp.private_statistics_batch(x, config, repeats=2, rng=3)
    b = fa_hetdp.private_statistics_batch(x, config, repeats=2, rng=np.random.default_rng(3))
    np.testing.assert_array_equal(a.mean, b.mean)
    fa_hetdp.private_statistics_batch(x, config, repeats=1)  # a CSPRNG


@pytest.mark.parametrize("bad", [-1, True, 1.5, "7", np.random.RandomState(0)])
def test_other_sources_are_refused_with_the_value(bad: object) -> None:
    with pytest.raises(PrivacyParameterError, match="rng must be"):
        as_generator(bad)  # type: ignore[arg-type]
