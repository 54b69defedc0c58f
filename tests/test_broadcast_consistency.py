"""A server that shows nodes different public inputs gets no decodable sum (over Flower).

Each node calibrates its noise share to the public inputs of the round it is sent: the
meta-analysis' counts (round A) and broadcast (the floor, the clips: round B). A server that
shows one node a raised floor (its bounds, and with them its noise share, shrink) or another
silo's count raised (the bound at the largest count moves) could once collect a completed run in
which that node under-noised (found in review: the run succeeded, the result said "server
malicious"). Every masked input now binds its pairwise masks to the digest of what its node was
shown (:func:`fa_hetdp.flowerkit.steps.public_inputs`, :func:`fa_hetdp.flowerkit.wire.digest`,
:func:`fa_hetdp.secagg.crypto.bind_mask_key`): the masks of a node shown other inputs do not
cancel against its peers' and the sum is refused before anything is released. A drop-in's settings
document (the budget: a node told a larger epsilon adds a smaller share) is bound the same way
(:func:`fa_hetdp.flowerkit.steps.summation_inputs`). Each attack below completed before that
binding (checked by running these tests without it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Message
from test_dropin import InMemoryGrid, rewritten
from test_flower_helpers import run_config
from test_meta_flower import our_grid, run_meta, silos_file

from fa_hetdp.flowerkit.steps import META_ROUND_A, META_ROUND_B, Key, public_inputs
from fa_hetdp.flowerkit.wire import decode, digest, encode
from fa_hetdp.server.strategy import ProtocolAbortError

VICTIM = 7001  # the node shown other inputs


def _tampering(step: str, change: Any) -> Any:
    def tamper(message: Message) -> Message:
        if message.metadata.message_type != f"query.{step}":
            return message
        if message.metadata.dst_node_id != VICTIM:
            return message
        return rewritten(message, change)

    return tamper


def _raise_floor(payload: dict[str, Any]) -> None:
    floor = np.asarray(payload[Key.META_FLOOR], dtype=np.float64)
    payload[Key.META_FLOOR] = np.minimum(4.0 * floor, 0.25)  # 4x: bounds ~ 1/f, 1/f^2 shrink


def _raise_another_count(payload: dict[str, Any]) -> None:
    counts = [list(row) for row in payload[Key.META_COUNTS]]
    own = payload[Key.SECAGG]["recipient"]  # the victim's secure-aggregation id
    for row in counts:
        if row[0] != own:  # the node checks only its own entry
            row[1] = int(row[1]) * 3
            break
    payload[Key.META_COUNTS] = counts


def _grid(config: dict[str, Any], tamper: Any) -> InMemoryGrid:
    grid = our_grid(config)
    grid.tamper = tamper
    return grid


def test_the_digest_of_a_request_is_the_same_at_both_ends() -> None:
    sent = {
        Key.SECAGG: {"recipient": 3, "blob": b"\x01\x02"},
        Key.META_FLOOR: np.array([0.01, 0.02]),
        Key.META_KAPPA: np.array([4.0, 4.0]),
        Key.META_COUNTS: [[0, 300], [1, 300], [2, 300], [3, 300]],
    }
    received = decode(encode(sent))
    assert digest(public_inputs(received)) == digest(public_inputs(sent))
    assert Key.SECAGG not in public_inputs(received)  # per-node: not a public input
    changed = dict(received, **{Key.META_FLOOR: np.array([0.01, 0.03])})
    assert digest(public_inputs(changed)) != digest(public_inputs(sent))


@pytest.mark.parametrize(
    ("step", "change"),
    [(META_ROUND_B, _raise_floor), (META_ROUND_A, _raise_another_count)],
    ids=["a raised floor at round B", "another silo's count raised at round A"],
)
def test_a_node_shown_other_inputs_leaves_the_round_undecodable(
    tmp_path: Path, step: str, change: Any
) -> None:
    config = run_config(tmp_path, silos_file(tmp_path))
    honest = run_meta(config, our_grid(config))[1]
    assert honest["status"] == "success"  # the same run, untampered
    with pytest.raises(ProtocolAbortError, match="a mask that does not cancel") as info:
        run_meta(config, _grid(config, _tampering(step, change)))
    assert "is refused" in str(info.value)  # before anything is released


def test_a_node_sent_another_settings_document_leaves_the_sum_undecodable() -> None:
    """A drop-in's settings travel in each node's first message: one node told epsilon = 4
    (it accepts: within its cap) adds a noise share a quarter of its peers'."""
    from test_dropin import SEED, _with_settings, make_grid, server_context

    import fa_hetdp
    from fa_hetdp.flowerkit.steps import ADVERTISE_KEYS

    def tamper(message: Message) -> Message:
        if message.metadata.message_type != f"query.{ADVERTISE_KEYS}":
            return message
        if message.metadata.dst_node_id != 7003:
            return message
        return _with_settings(message, lambda d: d["run-config"].update({"epsilon": 4.0}))

    honest = fa_hetdp.flower.measure(
        make_grid(), server_context(), epsilon=1.0, delta=1e-5, seed=SEED, threshold=4
    )
    assert honest is not None  # the same measurement, untampered
    with pytest.raises(ProtocolAbortError, match="a mask that does not cancel"):
        fa_hetdp.flower.measure(
            make_grid(tamper=tamper),
            server_context(),
            epsilon=1.0,
            delta=1e-5,
            seed=SEED,
            threshold=4,
        )


def test_a_node_of_another_wire_revision_is_dropped_by_name_at_its_first_reply(
    tmp_path: Path,
) -> None:
    """A node that masks without the binding (an older fa-hetdp: no revision stated) would make
    every sum undecodable; the server drops it at its first reply and names why."""
    from test_flower_helpers import scenario_file
    from test_server_strategy import run

    from fa_hetdp.flowerkit.steps import ADVERTISE_KEYS, WIRE_REVISION

    def tamper(step: str, partition: int, reply: dict[str, Any]) -> dict[str, Any] | None:
        if step == ADVERTISE_KEYS and partition == 2:
            del reply[Key.WIRE]  # what an older node's first reply holds
            return reply
        if step == ADVERTISE_KEYS and partition == 4:
            reply[Key.WIRE] = WIRE_REVISION + 1
            return reply
        return None

    config = run_config(tmp_path, scenario_file(tmp_path, 8), **{"on-degraded": "release"})
    document = run(config, 8, tamper=tamper)
    assert document["status"] == "success"
    assert sorted(document["partitions_in_sum"]["stage1"]) == [0, 1, 3, 5, 6, 7]
    reasons = sorted(document["steps"][0]["dropouts"].values())
    assert len(reasons) == 2
    assert any("no wire revision" in r and "upgrade that node" in r for r in reasons)
    assert any(f"wire revision {WIRE_REVISION + 1}" in r for r in reasons)
