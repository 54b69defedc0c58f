"""The Z_2^32 option: ``[secagg] modulus_bits`` through the one validator to the encoding."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_flower_helpers import run_config
from test_server_strategy import run

from fa_hetdp.config.rules import ConfigError
from fa_hetdp.config.scenario import scenario_from_dict
from fa_hetdp.flowerkit.settings import RunSettings
from fa_hetdp.secagg.encoding import choose_encoding
from fa_hetdp.secagg.errors import MessageRejected
from fa_hetdp.secagg.inprocess import InProcessSession

BASE: dict[str, Any] = {
    "data": {"dataset": "digits", "num_clients": 8, "label_ratios": [1] * 10},
    "privacy": {"epsilon": 1.0, "delta": 1e-5},
}


def with_modulus(bits: object) -> dict[str, Any]:
    raw = copy.deepcopy(BASE)
    raw["secagg"] = {"modulus_bits": bits}
    return raw


def test_scenario_default_is_64_and_32_is_accepted() -> None:
    assert scenario_from_dict(copy.deepcopy(BASE)).secagg.ring_bits("agm") == 64  # left out
    scenario = scenario_from_dict(with_modulus(32))
    assert scenario.secagg.modulus_bits == 32
    assert scenario.to_dict()["secagg"]["modulus_bits"] == 32


@pytest.mark.parametrize(
    ("bits", "message"),
    [
        (48, r"must be one of \(64, 32\).*got 48"),
        (16, r"must be one of \(64, 32\).*got 16"),
        ("32", "must be an integer"),
        (True, "must be an integer"),
    ],
)
def test_scenario_refuses_other_rings_with_the_key(bits: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        scenario_from_dict(with_modulus(bits))
    assert "secagg.modulus_bits" in str(info.value)


# --------------------------------------------------------------------------------------------
# secagg in Z_2^32: the masked vectors are uint32 on the wire and the sums decode
# --------------------------------------------------------------------------------------------


def _session(n: int) -> tuple[InProcessSession, list[np.ndarray]]:
    session = InProcessSession(n, threshold=n // 2 + 1, neighbours="complete", rng=rng_of(1))
    sent: list[np.ndarray] = []
    receive = session.server.receive_masked_input

    def spy(message: Mapping[str, Any]) -> None:
        sent.append(message["vector"])
        receive(message)

    session.server.receive_masked_input = spy  # type: ignore[method-assign]
    return session, sent


def rng_of(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


@pytest.mark.parametrize("bits", [64, 32])
def test_sum_in_the_ring_decodes_and_sends_m_bit_words(bits: int) -> None:
    n, d = 12, 50
    values = rng_of(2).uniform(-3.0, 3.0, size=(n, d))
    session, sent = _session(n)
    dropped = {"masked_input": [3], "unmask": [5]}
    result = session.sum(values, bounds=3.0, dropouts=dropped, modulus_bits=bits)
    assert 3 not in result.survivors and 5 in result.survivors
    want = values[list(result.survivors)].sum(axis=0)
    assert np.all(np.abs(result.sum - want) <= result.max_error)
    assert all(v.dtype == (np.uint32 if bits == 32 else np.uint64) for v in sent)
    assert {v.nbytes for v in sent} == {d * bits // 8}  # Z_2^32 halves the bytes
    assert int(result.raw.max()) < 2**bits


def test_server_refuses_a_word_width_other_than_the_summations() -> None:
    n, d = 4, 3
    server_enc = choose_encoding(n, np.ones(d), modulus_bits=32)
    session, _ = _session(n)
    requests = session.server.start_summation(server_enc)
    reply = session.clients[0].masked_input(requests[0], np.zeros(d), rng=rng_of(0))
    assert reply["vector"].dtype == np.uint32
    wide = dict(reply, vector=reply["vector"].astype(np.uint64))
    with pytest.raises(MessageRejected, match=r"uint64 words, expected uint32 \(Z_2\^32\)"):
        session.server.receive_masked_input(wide)


def test_client_refuses_a_request_for_another_ring() -> None:
    n, d = 4, 3
    session, _ = _session(n)
    requests = session.server.start_summation(choose_encoding(n, np.ones(d)))
    with pytest.raises(MessageRejected, match="modulus_bits"):
        session.clients[0].masked_input(
            dict(requests[0], modulus_bits=48), np.zeros(d), rng=rng_of(0)
        )


# --------------------------------------------------------------------------------------------
# the Flower apps (in-memory transport): [secagg] modulus_bits = 32 reaches the encoding
# --------------------------------------------------------------------------------------------


def _scenario(tmp_path: Path, bits: int) -> Path:
    path = tmp_path / f"digits-{bits}.toml"
    path.write_text(
        '[scenario]\nname = "ring"\n[data]\ndataset = "digits"\nnum_clients = 6\n'
        '[privacy]\nepsilon = 1.0\ndelta = 1e-5\nmechanism = "ddg"\n'
        f"[secagg]\nthreshold = 0.6\nmodulus_bits = {bits}\n[experiment]\nseed = 4\n"
    )
    return path


def test_flower_run_in_z_2_32_matches_the_64_bit_run(tmp_path: Path) -> None:
    docs = {}
    for bits in (64, 32):
        config = run_config(tmp_path / str(bits), _scenario(tmp_path, bits))
        (tmp_path / str(bits)).mkdir()
        assert RunSettings.from_run_config(config).modulus_bits == bits
        docs[bits] = run(config, 6)
        assert docs[bits]["status"] == "success", docs[bits].get("reason")
    wide, narrow = docs[64], docs[32]
    err64 = np.asarray(wide["encoding_error_bound"]["stage1"])
    err32 = np.asarray(narrow["encoding_error_bound"]["stage1"])
    assert np.all(err32 >= 2.0**20 * err64)  # 32 bits less precision (same power-of-two rule)
    d = int(narrow["d"])
    got, want = np.asarray(narrow["statistics"]["mean"]), np.asarray(wide["statistics"]["mean"])
    # The same seeded noise; the means differ only by the two encodings' errors (Eq.: n/scale).
    np.testing.assert_array_less(np.abs(got - want), (err32[:d] + err64[:d]) / 6 + 1e-12)
    assert narrow["privacy"]["epsilon_spent"] == wide["privacy"]["epsilon_spent"]
    # The result document says which ring the masked words lived in.
    assert (wide["secagg"]["modulus_bits"], narrow["secagg"]["modulus_bits"]) == (64, 32)
