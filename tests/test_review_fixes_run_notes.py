"""``fa-hetdp run``'s notes under a result: no empty "clients per step:" line (review).

A result made without Flower (in-process: :func:`fa_hetdp.run_protocol`, a reproduced
experiment) has no per-step client counts; the notes printed "clients per step: " with
nothing after it. Now that line is printed only when there are counts.
"""

from __future__ import annotations

import io

from rich.console import Console

from fa_hetdp.cli.run import _print_run_notes


def _notes(result: dict[str, object]) -> str:
    buffer = io.StringIO()
    _print_run_notes(Console(file=buffer, width=200, color_system=None), result)
    return buffer.getvalue()


def test_no_counts_no_clients_per_step_line() -> None:
    for result in ({}, {"survivors": {}}, {"survivors": None}):
        text = _notes({**result, "timings": {"protocol": 1.5}, "labels": ["a note"]})
        assert "clients per step" not in text, result
        assert text.splitlines() == ["protocol time: 1.50 s", "  note: a note"], result


def test_counts_are_listed() -> None:
    text = _notes({"survivors": {"stage1": 5, "stage2": 4}})
    assert text.splitlines() == ["clients per step: stage1=5, stage2=4"]
