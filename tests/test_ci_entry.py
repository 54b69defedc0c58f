"""CI runs exactly the README's test command, and that command is the staged check.

``.ci/run`` is CI's entry point; its command line must be the README's test command
character for character, and the command must run ``scripts/check.sh``, whose stages are, in
order: ruff, ruff format --check and mypy; the tests not marked slow on two processes; the
slow tests.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_test_command() -> str:
    """The command of the README's "Run the tests" block."""
    text = (ROOT / "README.md").read_text()
    found = re.findall(r"Run the tests[^\n]*\n\n```bash\n(.*?)\n```", text, flags=re.DOTALL)
    assert len(found) == 1, "one 'Run the tests' block expected in README.md"
    return str(found[0]).strip()


def test_ci_runs_exactly_the_readme_test_command() -> None:
    lines = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    command = readme_test_command()
    assert lines[-1] == command
    assert lines[:-1] == ["set -euo pipefail", 'cd "$(dirname "$0")/.."']  # nothing else
    assert command.startswith('pip install -e ".[test]" && ')


def test_the_test_command_runs_the_check_in_stages() -> None:
    command = readme_test_command()
    assert command.endswith("bash scripts/check.sh")
    script = (ROOT / "scripts" / "check.sh").read_text()
    assert script.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in script
    # the commands in the order they run: lint() is defined above the stages that call it
    steps = re.findall(r'"\$py" -m ([^\n]*)', script)
    assert steps == [
        "ruff check .",
        "ruff format --check .",
        "mypy",
        'pytest -m "not slow" -n 2',
        "pytest -m slow -n 2 --durations=30",
    ]
    stages = re.findall(r"^stage .*$", script, flags=re.MULTILINE)
    assert [line.split('" ', 1)[1] for line in stages] == [
        "lint",
        '"$py" -m pytest -m "not slow" -n 2',
        '"$py" -m pytest -m slow -n 2 --durations=30',
    ]
