"""Code that only the tests use: in the repository, not in the library or its wheel.

- :mod:`support.replay` -- the in-process twin of a seeded Flower run
  (:func:`~support.replay.reference_statistics`), which the Flower tests compare against.
- :func:`forbid_flower` -- makes ``fa-hetdp run`` fail if it starts a Flower simulation (the
  tests of "checked before Flower starts").
- :func:`benchmark_module` -- imports a module of ``benchmarks/`` that the benchmarks and
  these tests share (``planned_split``, ``discrete_reference``): benchmark code is kept in
  ``benchmarks/``, and its tests reach it from here.

The test files import this package as ``support`` (pytest puts ``tests/`` on ``sys.path``,
as for ``threshold_audit``).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
"""The repository's ``benchmarks/`` folder."""


def benchmark_module(name: str) -> ModuleType:
    """Import ``benchmarks/<name>.py`` (the folder goes at the end of ``sys.path``)."""
    if not (BENCHMARKS / f"{name}.py").is_file():
        raise ModuleNotFoundError(f"no benchmark module {name!r} in {BENCHMARKS}")
    if str(BENCHMARKS) not in sys.path:
        sys.path.append(str(BENCHMARKS))
    return importlib.import_module(name)


def forbid_flower(monkeypatch: Any) -> None:
    """Make ``fa-hetdp run`` raise if it reaches ``run_simulation`` (``monkeypatch``: pytest's)."""
    import fa_hetdp.cli.run as run_module

    def must_not_start(*args: object, **kwargs: object) -> object:
        raise AssertionError("Flower was started")

    monkeypatch.setattr(run_module, "run_simulation", must_not_start)
