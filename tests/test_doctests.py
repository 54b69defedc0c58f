"""The examples in fa_hetdp's docstrings run and print what they say.

One test per module that has a ``>>>`` example, found by reading the sources, so a new example
is run without being listed here and a module without one is not imported for nothing (the
apps' modules need optional packages). The stdlib ``doctest`` runner does the work, with the
options ``pytest --doctest-modules`` would use by default.
"""

from __future__ import annotations

import doctest
import importlib
import types
from pathlib import Path

import pytest

import fa_hetdp

PACKAGE_DIR = Path(fa_hetdp.__file__).parent


def _modules_with_examples() -> list[str]:
    names = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        if ">>>" not in path.read_text(encoding="utf-8"):
            continue
        parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join(parts))
    return names


MODULES = _modules_with_examples()


def test_the_package_has_examples() -> None:
    # The search itself is checked: an empty list would make the test below vacuous.
    assert "fa_hetdp.protocol.recommended" in MODULES


def _failures(module: types.ModuleType) -> list[str]:
    """The report of every failed example in ``module`` (empty when all pass)."""
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = [test for test in finder.find(module, module.__name__) if test.examples]
    assert tests, f"{module.__name__} has '>>>' in its source but no example doctest can find"
    report: list[str] = []
    for test in tests:
        runner.run(test, out=report.append)
    return report if runner.failures else []


def test_a_wrong_example_is_reported() -> None:
    planted = types.ModuleType("planted")
    exec('def two():\n    """\n    >>> two()\n    3\n    """\n    return 2\n', planted.__dict__)
    report = "\n".join(_failures(planted))
    assert "Expected:\n    3\nGot:\n    2" in report


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    report = _failures(importlib.import_module(name))
    assert not report, "\n".join(report)
