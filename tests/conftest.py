"""Suite-wide checks: report tests that are slow but not marked ``slow``.

``pytest -m "not slow"`` is the contributor loop (CONTRIBUTING.md); it stays fast only while
every long test carries the ``slow`` mark. This conftest times the call phase of each test and,
at the end of the session, lists every test whose call took longer than the threshold and is
not marked ``slow``. That is a report line, not a failure: machines are noisy, and a loaded
machine makes fast tests slow. ``FA_HETDP_STRICT_SLOW=1`` turns the report into a failed
session, which is how the marks are checked (on a quiet machine).

Environment:

- ``FA_HETDP_SLOW_THRESHOLD_S``: the threshold in seconds (default ``SLOW_THRESHOLD_S``).
- ``FA_HETDP_STRICT_SLOW=1``: fail the session when any unmarked test is over the threshold.

Under pytest-xdist the workers send their reports to the controller, which does the counting.
"""

from __future__ import annotations

import math
import os

import pytest

#: A test whose call phase takes longer than this (seconds) belongs under ``@pytest.mark.slow``.
SLOW_THRESHOLD_S = 5.0
THRESHOLD_ENV = "FA_HETDP_SLOW_THRESHOLD_S"
STRICT_ENV = "FA_HETDP_STRICT_SLOW"


def _threshold_s() -> float:
    raw = os.environ.get(THRESHOLD_ENV, "").strip()
    if not raw:
        return SLOW_THRESHOLD_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise pytest.UsageError(
            f"{THRESHOLD_ENV}={raw!r} is not allowed: give a positive number of seconds "
            f"(default {SLOW_THRESHOLD_S:g})"
        )
    return value


def _strict() -> bool:
    raw = os.environ.get(STRICT_ENV, "").strip()
    if raw in ("", "0"):
        return False
    if raw == "1":
        return True
    raise pytest.UsageError(f"{STRICT_ENV}={raw!r} is not allowed: use 1 (strict) or 0 (report)")


class SlowCheck:
    """Collects the unmarked slow tests of one session and reports them at its end."""

    def __init__(self, threshold_s: float, strict: bool) -> None:
        self.threshold_s = threshold_s
        self.strict = strict
        self.found: list[tuple[str, float]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call" or "slow" in report.keywords:
            return
        if report.duration > self.threshold_s:
            self.found.append((report.nodeid, report.duration))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.strict and self.found and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.found:
            return
        terminalreporter.section(
            "slow tests not marked slow", sep="=", yellow=not self.strict, red=self.strict
        )
        for nodeid, duration in sorted(self.found, key=lambda item: -item[1]):
            terminalreporter.line(f"{duration:7.2f}s {nodeid}")
        verdict = "fails the session" if self.strict else f"set {STRICT_ENV}=1 to fail on this"
        terminalreporter.line(
            f"{len(self.found)} test(s) took over {self.threshold_s:g} s without "
            f"@pytest.mark.slow ({verdict})"
        )


def pytest_configure(config: pytest.Config) -> None:
    # Under pytest-xdist a worker's reports also reach the controller, which does the counting.
    if hasattr(config, "workerinput"):
        return
    config.pluginmanager.register(SlowCheck(_threshold_s(), _strict()), "fa_hetdp_slow_check")


@pytest.fixture(autouse=True)
def _own_flower_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Give every test its own ``FLWR_HOME``: the nodes' default privacy ledgers live there.

    A node without ``ledger-path`` keeps its ledger under the Flower home (issue 27); the
    in-process nodes of the tests would otherwise share one ledger per partition across the
    whole suite (and the user's ``~/.flwr``), and run out of budget.
    """
    monkeypatch.setenv("FLWR_HOME", str(tmp_path_factory.mktemp("flwr-home")))
