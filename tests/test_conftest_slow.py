"""The slow-test check in tests/conftest.py, run on small throw-away suites with pytester.

Each test copies tests/conftest.py into a pytester directory. Durations are set exactly by a
``fake_duration`` mark (a hook below rewrites the call report's duration), so nothing sleeps
except the one test that checks the real clock is used.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py").read_text(encoding="utf-8")

FAKE_DURATION = """

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    mark = item.get_closest_marker("fake_duration")
    if mark is not None and report.when == "call":
        report.duration = float(mark.args[0])


def pytest_configure(config):
    config.addinivalue_line("markers", "fake_duration(seconds): the call report's duration")
    config.addinivalue_line("markers", "slow: long-running")
    _check_configure(config)
"""

SUITE = """
import pytest

@pytest.mark.fake_duration(9.0)
def test_unmarked_long():
    pass

@pytest.mark.fake_duration(6.5)
@pytest.mark.slow
def test_marked_long():
    pass

@pytest.mark.fake_duration(0.01)
def test_short():
    pass

@pytest.mark.fake_duration(7.0)
@pytest.mark.parametrize(
    "case", [pytest.param("big", marks=pytest.mark.slow), "small"]
)
def test_cases(case):
    pass
"""


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.delenv("FA_HETDP_STRICT_SLOW", raising=False)
    monkeypatch.delenv("FA_HETDP_SLOW_THRESHOLD_S", raising=False)
    source = CONFTEST.replace("def pytest_configure(", "def _check_configure(")
    assert source != CONFTEST, "tests/conftest.py no longer defines pytest_configure"
    pytester.makeconftest(source + FAKE_DURATION)
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def _section(result: pytest.RunResult) -> list[str]:
    lines = result.outlines
    starts = [i for i, line in enumerate(lines) if "slow tests not marked slow" in line]
    if not starts:
        return []
    end = next(
        (i for i in range(starts[0] + 1, len(lines)) if not lines[i] or lines[i].startswith("=")),
        len(lines),
    )
    return lines[starts[0] + 1 : end]


def test_reports_unmarked_tests_over_the_threshold_and_passes(suite: pytest.Pytester) -> None:
    result = suite.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=5)
    assert result.ret == pytest.ExitCode.OK
    section = _section(result)
    assert section == [
        "   9.00s test_suite.py::test_unmarked_long",
        "   7.00s test_suite.py::test_cases[small]",
        "2 test(s) took over 5 s without @pytest.mark.slow "
        "(set FA_HETDP_STRICT_SLOW=1 to fail on this)",
    ]


def test_strict_mode_fails_the_session(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FA_HETDP_STRICT_SLOW", "1")
    result = suite.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=5)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "(fails the session)" in _section(result)[-1]


def test_strict_mode_passes_when_the_long_tests_are_marked(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FA_HETDP_STRICT_SLOW", "1")
    result = suite.runpytest("-p", "no:cacheprovider", "-k", "not unmarked and not small")
    result.assert_outcomes(passed=3, deselected=2)
    assert result.ret == pytest.ExitCode.OK
    assert _section(result) == []


def test_the_threshold_can_be_raised(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FA_HETDP_SLOW_THRESHOLD_S", "8")
    monkeypatch.setenv("FA_HETDP_STRICT_SLOW", "1")
    result = suite.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert _section(result)[:-1] == ["   9.00s test_suite.py::test_unmarked_long"]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("FA_HETDP_SLOW_THRESHOLD_S", "-1"),
        ("FA_HETDP_SLOW_THRESHOLD_S", "five"),
        ("FA_HETDP_STRICT_SLOW", "yes"),
    ],
)
def test_a_bad_setting_is_a_usage_error(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    result = suite.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{name}={value!r} is not allowed*"])


def test_the_real_call_duration_is_measured(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FA_HETDP_STRICT_SLOW", raising=False)
    monkeypatch.setenv("FA_HETDP_SLOW_THRESHOLD_S", "0.2")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_sleep="import time\n\ndef test_nap():\n    time.sleep(0.4)\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*slow tests not marked slow*", "*s test_sleep.py::test_nap"])


def test_under_xdist_the_controller_reports_what_the_workers_ran(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("xdist")
    monkeypatch.setenv("FA_HETDP_STRICT_SLOW", "1")
    # pytest-benchmark (present on some machines) warns under -n; the inner run has no ini.
    result = suite.runpytest("-p", "no:cacheprovider", "-p", "no:benchmark", "-n", "2")
    result.assert_outcomes(passed=5)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert sorted(_section(result)[:-1]) == [
        "   7.00s test_suite.py::test_cases[small]",
        "   9.00s test_suite.py::test_unmarked_long",
    ]
