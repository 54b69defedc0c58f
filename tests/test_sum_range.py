"""The range check: a stage sum that honest inputs cannot reach is refused, not released.

The attack: a client masks with a seed it did not commit to (or corrupts its masked vector),
so a mask stays in the sum and the unmasked sum is uniform in ``Z_2^m``. Before the range
check that sum decoded without error and the run released garbage statistics as a success.
Now the encoding refuses a sum beyond ``count`` times each client's bound
(:meth:`FixedPointEncoding.decode`), the plan refuses a sum beyond its tighter range
(:func:`fa_hetdp.protocol.sum_range.check_sum_range`), and the strategy aborts with the
reason. Honest sums at the edge of the range still pass.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_flower_helpers import run_config, scenario_file
from test_server_strategy import InMemoryTransport

from fa_hetdp.errors import AggregationError
from fa_hetdp.flowerkit.settings import RunSettings
from fa_hetdp.flowerkit.steps import STAGE1_INPUT, STAGE2_INPUT, Key
from fa_hetdp.protocol.client import contribution_encoding
from fa_hetdp.protocol.plan import plan_protocol
from fa_hetdp.protocol.sum_range import (
    SUM_RANGE_FAILURE_PROBABILITY,
    check_sum_range,
    sum_range,
)
from fa_hetdp.secagg.encoding import FixedPointEncoding, choose_encoding
from fa_hetdp.secagg.errors import EncodingError
from fa_hetdp.server.strategy import HeterogeneityStrategy, ProtocolAbortError


def _uniform_words(rng: np.random.Generator, size: int) -> np.ndarray:
    return np.frombuffer(rng.bytes(8 * size), dtype=np.uint64).copy()


# ---------------------------------------------------------------------------- the encoding
@pytest.mark.parametrize("bits", [64, 32])
def test_decode_refuses_a_uniform_sum_and_names_the_bound(bits: int) -> None:
    # Before the fix: decoded to garbage (values up to 2^(m-1)/scale), no error.
    encoding = choose_encoding(10, np.ones(64), noise_std=0.5, modulus_bits=bits)
    garbage = encoding.reduce(_uniform_words(np.random.default_rng(7), 64))
    with pytest.raises(EncodingError, match=r"outside the range honest inputs can reach.*\+/-"):
        encoding.decode(garbage, 10)


@pytest.mark.parametrize("bits", [64, 32])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_honest_sums_at_the_per_client_edge_decode(bits: int, sign: float) -> None:
    # Every client at its stated bound (the largest value encode() accepts): the sum is at
    # the edge of count x the per-client bound, and decodes (exactly up to the rounding).
    n = 10
    encoding = choose_encoding(n, np.ones(16), noise_std=0.5, modulus_bits=bits)
    rng = np.random.default_rng(3)
    values = sign * encoding.bounds
    total = np.zeros(16, dtype=np.uint64)
    for _ in range(n):
        total += encoding.encode(values, rng=rng)
    decoded = encoding.decode(encoding.reduce(total), n)
    np.testing.assert_allclose(decoded, n * values, atol=float(n / encoding.scales.min()))
    # one client short: the same words are beyond 9 clients' range
    with pytest.raises(EncodingError, match="outside the range"):
        encoding.decode(encoding.reduce(total + encoding.encode(values, rng=rng)), n)


def test_lattice_sum_bound_is_the_edge() -> None:
    # With a stated sum bound S (the discrete mechanisms), floor(S scale) words decode and
    # one word more is refused (before the fix: decoded, and beyond 2^(m-1) it wraps).
    encoding = FixedPointEncoding(
        scales=np.full(3, 4.0),
        bounds=np.full(3, 10.0),
        max_clients=5,
        modulus_bits=32,
        lattice=True,
        sum_bounds=np.full(3, 20.3),
    )
    edge = np.array([81, 0, 2**32 - 81], dtype=np.uint64)  # +81, 0, -81 words: +/-20.25
    np.testing.assert_array_equal(encoding.decode(edge, 5), [20.25, 0.0, -20.25])
    with pytest.raises(EncodingError, match="stated sum bound"):
        encoding.decode(edge + np.array([1, 0, 0], dtype=np.uint64), 5)


# ---------------------------------------------------------------------------- the plan
def _plan_and_encoding(tmp_path: Path, n: int, bits: int = 64) -> tuple[Any, Any]:
    config = run_config(tmp_path, scenario_file(tmp_path, n), **{"secagg-modulus-bits": bits})
    settings = RunSettings.from_run_config(config)
    plan = plan_protocol(settings.protocol, n=n, d=64)
    return plan, contribution_encoding(plan, 1, n, modulus_bits=bits)


def test_plan_range_refuses_what_the_encoding_range_lets_through(tmp_path: Path) -> None:
    plan, encoding = _plan_and_encoding(tmp_path, 12)
    bound = sum_range(plan, 1, 12, encoding)
    loose = encoding.sum_limits(12) / encoding.scales
    assert np.all(bound <= loose / 3)  # sqrt(n) concentration: far tighter than n x B
    total = np.zeros(plan.stage1_length)
    total[5] = 0.5 * (bound[5] + loose[5])  # inside the encoding's range, outside the plan's
    with pytest.raises(AggregationError, match=r"stage-1 sum of 12 masked inputs.*coordinate 5"):
        check_sum_range(total, plan, 1, 12, encoding)
    check_sum_range(np.where(np.arange(total.size) == 5, bound, 0.0), plan, 1, 12, encoding)


def test_honest_sums_at_the_box_edge_pass_the_plan_range(tmp_path: Path) -> None:
    # 2000 honest stage-1 sums of 12 clients, every client at the edge of the box (x = 1,
    # w = W: the largest noiseless contribution), with real Gaussian noise shares and the
    # clients' stochastic rounding. None may be refused: an honest run leaves the range with
    # probability below q = 1e-9, so any refusal in 2000 runs has probability below 2e-6
    # (the test's alpha). And the range is not loose: the largest sum reaches over 40 % of it.
    n, runs = 12, 2000
    plan, encoding = _plan_and_encoding(tmp_path, n, bits=32)
    assert SUM_RANGE_FAILURE_PROBABILITY == 1e-9
    bound = sum_range(plan, 1, n, encoding)
    box = plan.contribution_bounds(1)
    share = plan.share_std_vector(1)
    rng = np.random.default_rng(20261126)
    worst = 0.0
    for _ in range(runs):
        total = np.zeros(box.size, dtype=np.uint64)
        for _ in range(n):
            value = box + plan.mechanism.sample(share, box.shape, rng=rng)
            total += encoding.encode(value, rng=rng)
        decoded = encoding.decode(encoding.reduce(total), n)
        check_sum_range(decoded, plan, 1, n, encoding)
        worst = max(worst, float(np.max(np.abs(decoded) / bound)))
    assert 0.4 < worst < 1.0


def test_a_uniform_sum_is_outside_the_plan_range_in_both_rings(tmp_path: Path) -> None:
    # The module's claim: a uniform sum lands inside R with probability below 1e-100
    # (digits scenario, n = 12, d = 64), in Z_2^64 and in Z_2^32.
    for bits in (64, 32):
        plan, encoding = _plan_and_encoding(tmp_path, 12, bits=bits)
        bound = sum_range(plan, 1, 12, encoding)
        inside = np.log10(np.minimum(1.0, (2 * bound * encoding.scales + 1) / 2.0**bits))
        assert float(np.sum(inside)) < -100


# ---------------------------------------------------------------------------- the run
def _uncancelled_mask(step_to_corrupt: str) -> Any:
    rng = np.random.default_rng(99)  # the "extra seed" the client never shared

    def tamper(step: str, partition: int, decoded: dict[str, Any]) -> dict[str, Any] | None:
        if step != step_to_corrupt or partition != 0:
            return None
        message = dict(decoded[Key.SECAGG])
        vector = np.asarray(message["vector"])
        extra = _uniform_words(rng, vector.size).astype(vector.dtype)  # mod 2^m
        message["vector"] = vector + extra
        return {**decoded, Key.SECAGG: message}

    return tamper


@pytest.mark.parametrize(
    ("step", "bits", "stage"),
    [(STAGE1_INPUT, 64, 1), (STAGE1_INPUT, 32, 1), (STAGE2_INPUT, 64, 2)],
)
def test_a_client_masking_with_an_uncommitted_seed_aborts_the_run(
    tmp_path: Path, step: str, bits: int, stage: int
) -> None:
    # Before the fix: status "success", the garbage sum released as statistics.
    n = 8
    config = run_config(
        tmp_path,
        scenario_file(tmp_path, n),
        **{"secagg-modulus-bits": bits, "on-degraded": "release"},
    )
    strategy = HeterogeneityStrategy(RunSettings.from_run_config(config))
    transport = InMemoryTransport(n, config, tamper=_uncancelled_mask(step))
    with pytest.raises(ProtocolAbortError, match=f"stage-{stage} sum.*outside the range"):
        strategy.run(transport)
    import json

    result = json.loads((tmp_path / "result.json").read_text())
    assert result["status"] == "aborted"
    assert f"stage-{stage} sum" in result["reason"] and "outside the range" in result["reason"]


def test_an_honest_run_passes_the_range_checks(tmp_path: Path) -> None:
    n = 8
    config = run_config(tmp_path, scenario_file(tmp_path, n))
    document = HeterogeneityStrategy(RunSettings.from_run_config(config)).run(
        InMemoryTransport(n, config)
    )
    assert document["status"] == "success"
