"""The malicious-server option through the Flower apps (in-memory transport, real handlers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_flower_helpers import assert_matches_reference, run_config, scenario_file
from test_server_strategy import run

from fa_hetdp.flower.steps import CONSISTENCY_STEP


def test_malicious_server_mode_adds_the_consistency_steps_and_matches_the_twin(
    tmp_path: Path,
) -> None:
    # n = 10, complete graph, t = ceil(2/3 x 9) = 6 >= floor(10 / 2) + 1: safe for gamma = 0
    config = run_config(
        tmp_path, scenario_file(tmp_path, 10), **{"secagg-threat-model": "malicious-server"}
    )
    document = run(config, 10)
    assert document["status"] == "success"
    steps = [s["step"] for s in document["steps"]]
    assert CONSISTENCY_STEP[1] in steps and CONSISTENCY_STEP[2] in steps
    assert_matches_reference(document, config)


def test_a_client_insisting_on_a_safe_threshold_refuses_a_weaker_session(tmp_path: Path) -> None:
    # the run config says malicious-server, but the server's threshold (3) is below
    # floor((10 + 2) / 2) + 1 = 7 for gamma = 0.2: every client refuses at the setup
    overrides: dict[str, Any] = {
        "secagg-threat-model": "malicious-server",
        "secagg-corrupt-fraction": 0.2,
        "secagg-threshold": 3.0,
    }
    config = run_config(tmp_path, scenario_file(tmp_path, 10), **overrides)
    try:
        document = run(config, 10)
    except Exception as exc:  # the strategy aborts: too few clients left
        assert "threshold" in str(exc)
    else:
        assert document["status"] == "aborted"


def test_decode_refuses_a_message_over_the_step_cap_before_parsing() -> None:
    import numpy as np
    import pytest

    from fa_hetdp.flower.wire import WireFormatError, decode, encode

    message = encode({"vector": np.zeros(1000, dtype=np.uint64)})
    assert decode(message, max_bytes=10_000)["vector"].shape == (1000,)
    with pytest.raises(WireFormatError, match="cap of 4000"):
        decode(message, max_bytes=4000)
