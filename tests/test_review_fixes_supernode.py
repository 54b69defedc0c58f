"""``fa-hetdp supernode`` prints its starting ledger lines once (review).

The supervisor printed the node's ledger at start, then again whenever the ledger file
changed. The first ClientApp of a run records its session's nonce in the ledger before it
replies (:meth:`fa_hetdp.flowerkit.ledger.NodeLedger.begin`): the file changes but nothing is
spent, and the same starting lines were printed a second time. Now the summary is printed
again only when it says something new (a measurement charged).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

import fa_hetdp.cli.cluster as cluster_module
import fa_hetdp.cli.supernode as supernode_module
from fa_hetdp.flowerkit.ledger import NodeLedger


def test_the_starting_ledger_lines_are_printed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ledger" / "node.json"
    argv = [
        "--superlink",
        "127.0.0.1:1",
        "--isolation",
        "process",  # no SuperExec needed
        "--node-config",
        f'partition-id=0 ledger-path="{path}"',
    ]

    def supervise(
        args: Sequence[str], *, on_poll: Callable[[], None] | None = None, **_: Any
    ) -> int:
        """The SuperNode's life: a session begins (no charge), then one measurement."""
        assert on_poll is not None
        on_poll()
        ledger = NodeLedger(path, "record")  # a ClientApp's own view of the same ledger
        ledger.begin(b"\x07" * 16)
        for _ in range(3):
            on_poll()
        ledger.charge(b"\x07" * 16, (1.0, 1e-5), unit="record")
        for _ in range(3):
            on_poll()
        return 0

    monkeypatch.setattr(cluster_module, "find_program", lambda name: "/bin/true")
    monkeypatch.setattr(supernode_module, "supervise", supervise)
    args = argparse.Namespace(grace=1.0, supernode_args=["--", *argv])
    assert supernode_module.run_command(args) == 0
    out = capsys.readouterr().out
    assert out.count("spent epsilon = 0 ") == 1, out  # the start, once
    assert out.count("left epsilon = 10 of 10") == 1, out
    assert out.count("over 1 measurement;") == 1, out  # the charge, once


def test_a_ledger_that_changed_without_a_new_summary_prints_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    watch = supernode_module.LedgerWatch(NodeLedger(tmp_path / "node.json", "record"))
    watch.show()
    assert "spent epsilon = 0 " in capsys.readouterr().out
    watch.ledger.begin(b"\x01" * 16)
    watch.poll()
    assert capsys.readouterr().out == ""
    watch.ledger.charge(b"\x01" * 16, (1.0, 1e-5), unit="record")
    watch.poll()
    assert "over 1 measurement" in capsys.readouterr().out
    watch.show()  # asked for: printed again, whatever was printed before
    assert "over 1 measurement" in capsys.readouterr().out
