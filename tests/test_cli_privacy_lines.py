"""The privacy statement `fa-hetdp run` prints first (fa_hetdp.cli.run.privacy_lines)."""

from __future__ import annotations

from fa_hetdp.cli.run import privacy_lines


def _result(*pairs: tuple[float, float]) -> dict[str, object]:
    return {
        "status": "success",
        "privacy": {"guarantees": [{"epsilon": e, "delta": d} for e, d in pairs]},
    }


def test_a_pair_shown_twice_is_printed_once() -> None:
    # Spent exactly the target: (eps at the target delta) and (delta at the target eps) coincide.
    (line,) = privacy_lines(_result((1.0, 1e-5), (1.0, 1e-5)))
    assert line.count("(ε = 1, δ = 1e-05)") == 1
    assert " or " not in line


def test_two_different_pairs_are_both_printed() -> None:
    (line,) = privacy_lines(_result((0.9, 1e-5), (1.0, 3e-6)))
    assert "(ε = 0.9, δ = 1e-05) or (ε = 1, δ = 3e-06)" in line


def test_a_non_dp_result_shows_no_epsilon() -> None:
    result = {
        "differentially_private": False,
        "privacy": {"not_private_because": ["profile 'paper'"], "guarantees": [{"epsilon": 1}]},
    }
    (line,) = privacy_lines(result)
    assert line.startswith("NOT differentially private") and "ε" not in line
