"""`fa-hetdp run` and the process management behind it (FlowerCluster)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from support import forbid_flower
from test_flower_helpers import scenario_file

from fa_hetdp.cli.cluster import (
    ClusterError,
    FlowerCluster,
    _descendants,
    free_port,
    read_progress,
    toml_value,
)
from fa_hetdp.cli.main import main


def processes_with_home(home: Path) -> list[int]:
    """Pids whose environment has FLWR_HOME=home (everything a cluster started)."""
    marker = f"FLWR_HOME={home}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if marker in environ.split(b"\0") and stat[stat.rfind(")") + 2] != "Z":
            found.append(int(entry.name))
    return found


def test_free_port_is_bindable() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


@pytest.mark.parametrize(
    ("value", "text"),
    [(True, "true"), (3, "3"), (0.25, "0.25"), ('a "b"', '"a \\"b\\""'), ("x", '"x"')],
)
def test_toml_value(value: object, text: str) -> None:
    assert toml_value(value) == text


def test_toml_value_rejects_other_types() -> None:
    with pytest.raises(ClusterError):
        toml_value([1])
    with pytest.raises(ClusterError):
        toml_value(float("nan"))


def test_stop_kills_the_whole_tree_even_other_sessions(tmp_path: Path) -> None:
    with FlowerCluster(tmp_path) as cluster:
        parent = cluster.start(
            "tree",
            ["bash", "-c", "sleep 300 & setsid sleep 300 & wait"],
        )
        deadline = time.monotonic() + 10
        while len(_descendants(parent.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        children = _descendants(parent.pid)
        assert len(children) == 2
        assert processes_with_home(cluster.home)
    assert not parent.alive()
    for pid in children:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()
    assert processes_with_home(cluster.home) == []


def test_failed_start_reports_the_log(tmp_path: Path) -> None:
    with FlowerCluster(tmp_path) as cluster, pytest.raises(ClusterError, match="not on PATH"):
        cluster.start("nothing", ["no-such-program-fa-hetdp"])
    with FlowerCluster(tmp_path) as cluster, pytest.raises(ClusterError, match="before"):
        cluster.submit({"seed": 1})


def test_read_progress_skips_partial_lines(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    assert read_progress(path) == []
    path.write_text('{"event": "nodes"}\n{"event": "st')
    assert read_progress(path) == [{"event": "nodes"}]


@pytest.mark.slow
def test_fa_hetdp_run_prints_the_table_and_cleans_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the result is kept under ./results/
    scenario = scenario_file(tmp_path, 12, seed=4)
    workdir = tmp_path / "work"
    output = tmp_path / "copy.json"
    code = main(["run", str(scenario), "--workdir", str(workdir), "--output", str(output)])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    for text in ("mean μ'", "dispersion D''", "Cochran's Q''", "I²''", "privacy spent"):
        assert text in printed.out
    assert output.is_file()
    assert (workdir / "logs" / "superlink.log").is_file()
    assert processes_with_home(workdir / "flwr-home") == []
    # nothing listens on the SuperLink's port any more
    config = (workdir / "flwr-home" / "config.toml").read_text()
    port = int(config.split("127.0.0.1:")[1].split('"')[0])
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.slow
def test_fa_hetdp_run_reports_an_abort(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the result is kept under ./results/
    scenario = scenario_file(tmp_path, 6, extra="[secagg]\nthreshold = 5\ndropout_fraction = 0.5\n")
    scenario.write_text(scenario.read_text().replace("[secagg]\nthreshold = 0.6\n", ""))
    code = main(["run", str(scenario), "--workdir", str(tmp_path / "work")])
    printed = capsys.readouterr()
    assert code == 1
    assert "threshold" in printed.err
    assert processes_with_home(tmp_path / "work" / "flwr-home") == []
    # the aborted run's document is kept under results/ and the failure names it
    kept = list((tmp_path / "results").glob(f"{scenario.stem}-*.json"))
    assert len(kept) == 1
    assert json.loads(kept[0].read_text())["status"] == "aborted"
    assert kept[0].name in printed.err + printed.out


def test_print_result_lists_every_released_statistic_from_the_registry(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from fa_hetdp.cli.run import RunSetup, print_result
    from fa_hetdp.registry import STATISTICS

    monkeypatch.setenv("COLUMNS", "200")
    truth = {"mean": 0.5, "dispersion": 0.1, "weighted_mean": 0.4, "q": 30.0, "i2": 0.25}
    setup = RunSetup(scenario_name="demo", num_clients=3, run_config={}, truth=truth)
    summary = {s.key: 0.0 for s in STATISTICS if s.key != "i2_extra"}
    summary["q"] = 32.5
    result = {"n": 3, "d": 2, "summary": summary, "sigmas": {"q": 1.5}, "privacy": {}}
    print_result(setup, result)
    out = capsys.readouterr().out
    for spec in STATISTICS:
        assert (spec.display in out) == (spec.key in summary)
    q_row = next(line for line in out.splitlines() if "Cochran" in line)
    # private, true, error (private - true) and the σ of the q release.
    assert ["32.5", "30", "2.5", "1.5"] == [c.strip() for c in q_row.split("│")[2:6]]


# --------------------------------------------------------------------------------------------
# Checked before Flower starts; results kept; one line, no traceback
# --------------------------------------------------------------------------------------------


def _no_flower(monkeypatch: pytest.MonkeyPatch) -> None:
    forbid_flower(monkeypatch)


@pytest.mark.parametrize(
    ("flags", "blamed"),
    [
        (["--epsilon", "0"], "--epsilon"),
        (["--delta", "0"], "--delta"),
        (["--epsilon", "-1"], "--epsilon"),
        (["--delta", "1"], "--delta"),
        (["--seed", "-3"], "--seed"),
        (["digits/digits-dirichlet"], "scenario"),
        (["digits/digits-skew10", "--epsilon", "1"], "scenario"),
        (["--output", "/proc/no/result.json"], "--output"),
        (["--workdir", "/proc/no-workdir"], "--workdir"),
        (["--on-degraded", "maybe"], "--on-degraded"),
        (["--max-epsilon", "-1"], "--max-epsilon"),
    ],
)
def test_refused_with_one_line_before_flower_starts(
    flags: list[str],
    blamed: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _no_flower(monkeypatch)
    assert main(["run", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"fa-hetdp run: error: {blamed}: "), err


def test_grid_point_chosen_by_flags_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from fa_hetdp.cli.run import check_flags
    from fa_hetdp.config.scenario import load_scenario

    args = argparse.Namespace(
        epsilon=0.5, delta=None, mechanism=None, placement="central", composition=None,
        seed=None, timeout=10.0,
    )  # fmt: skip
    overrides = check_flags(args, load_scenario("digits/digits-dirichlet"))
    assert overrides == {"epsilon": 0.5, "placement": "central"}


def test_interrupt_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import fa_hetdp.cli.run as run_module

    def interrupted(*args: object, **kwargs: object) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(run_module, "run_simulation", interrupted)
    assert main(["run"]) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "interrupted" in err and "Traceback" not in err


def test_flower_start_failure_is_one_line_with_a_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import fa_hetdp.cli.run as run_module

    def timed_out(*args: object, **kwargs: object) -> object:
        raise ClusterError("superlink did not listen on port 1 within 60 s:\nlog line\nlog line")

    monkeypatch.setattr(run_module, "run_simulation", timed_out)
    assert main(["run"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "did not listen" in err and "--workdir" in err


def _outcome(tmp_path: Path, result: dict[str, object]) -> object:
    from fa_hetdp.cli.cluster import RunOutcome

    return RunOutcome(returncode=0, output="", result=result, result_path=tmp_path / "r.json")


def test_unwritable_output_after_the_run_keeps_the_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from fa_hetdp.cli.run import save_result

    monkeypatch.chdir(tmp_path)
    blocked = tmp_path / "blocked"
    blocked.write_text("a file, not a folder")
    result = {"status": "success", "run_id": 7, "summary": {}}
    where = save_result(result, blocked / "result.json")
    assert where == tmp_path / "fa-hetdp-result-7.json"
    assert json.loads(where.read_text()) == result
    assert str(where) in capsys.readouterr().err


def test_a_failure_never_replaces_a_success(tmp_path: Path) -> None:
    from fa_hetdp.cli.run import save_result

    output = tmp_path / "result.json"
    save_result({"status": "success", "run_id": 1}, output)
    where = save_result({"status": "aborted", "run_id": 2, "reason": "x"}, output)
    assert json.loads(output.read_text())["status"] == "success"
    assert where == tmp_path / "result-2.json"
    assert json.loads(where.read_text())["status"] == "aborted"


def test_flwr_run_exit_0_on_an_aborted_run_is_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import fa_hetdp.cli.run as run_module

    aborted = {"status": "aborted", "reason": "step 'x': 2 of 6 clients remain", "privacy": {}}
    monkeypatch.setattr(run_module, "run_simulation", lambda *a, **k: _outcome(tmp_path, aborted))
    assert main(["run"]) == 1
    err = capsys.readouterr().err
    assert "2 of 6 clients remain" in err
    log = Path(err.split("flwr run output: ")[1].strip())
    assert log.is_file() and "Traceback" not in err
    log.unlink()


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    import fa_hetdp

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"fa-hetdp {fa_hetdp.__version__}"


def test_not_private_result_shows_no_epsilon_before_any_number(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from fa_hetdp.cli.run import RunSetup, print_result

    setup = RunSetup(scenario_name="demo", num_clients=3, run_config={}, truth={})
    result = {
        "status": "success",
        "differentially_private": False,
        "n": 3,
        "d": 2,
        "summary": {"q": 1.0},
        "privacy": {"differentially_private": False, "not_private_because": ["paper profile"]},
    }
    print_result(setup, result)
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("NOT differentially private: paper profile")
    assert "ε" not in out


@pytest.mark.filterwarnings("ignore::fa_hetdp.errors.BaselineWarning")
def test_non_dp_setting_is_said_before_the_plan_and_any_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import fa_hetdp.cli.run as run_module

    # the simulated nodes must allow a non-DP profile, or the run is refused before Flower
    scenario = scenario_file(tmp_path, 6, extra="[nodes]\nallow_non_dp = true\n")
    scenario.write_text(
        scenario.read_text().replace("delta = 1e-5", 'delta = 1e-5\nprofile = "paper"')
    )
    aborted = {"status": "aborted", "reason": "test", "differentially_private": False}
    monkeypatch.setattr(run_module, "run_simulation", lambda *a, **k: _outcome(tmp_path, aborted))
    code = main(["run", str(scenario)])
    assert code == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("NOT differentially private: paper profile")


def test_degraded_policy_flags_reach_the_run_config() -> None:
    import argparse

    from fa_hetdp.cli.run import add_arguments, check_flags
    from fa_hetdp.config.scenario import load_scenario

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--on-degraded", "release", "--max-epsilon", "1.5"])
    overrides = check_flags(args, load_scenario("quickstart"))
    assert overrides == {"on-degraded": "release", "max-epsilon": 1.5}
