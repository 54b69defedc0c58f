"""The deployment samples of README.md and docs/deployment.md work as written (issue 28).

- every certificate command makes a SuperLink certificate that names the host the shipped
  nginx front door checks (``proxy_ssl_name``; without it every route answers 502);
- the malicious-server sample (its node config, its run config, its roster) is one that the
  nodes accept, and it runs: three owners in process, each with its own identity key;
- a run config that no node could accept against a malicious server (a gamma no threshold
  meets, a threshold below the floor, a sparse graph) is refused before the run starts, with
  why, instead of by every node after a key round;
- a server that skips that check still meets every node's own refusal.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
from test_flower_helpers import APP_CONFIG, run_config, scenario_file
from test_operator_docs import commands

from fa_hetdp.config.rules import ConfigError

ROOT = Path(__file__).resolve().parents[1]
DEPLOYMENT = ROOT / "docs" / "deployment.md"
NGINX = ROOT / "deploy" / "nginx" / "fleet-gateway.conf"


def certificate_commands() -> list[tuple[str, list[str]]]:
    """``(file, arguments)`` of every ``python -m fa_hetdp.server.certs`` command documented."""
    found = []
    for name in ("README.md", "docs/deployment.md"):
        text = (ROOT / name).read_text()
        for line in commands(text, "python -m fa_hetdp.server.certs"):
            words = shlex.split(line.split("#")[0])
            found.append((name, words[3:]))
    return found


def test_every_certificate_command_names_the_host_nginx_checks(tmp_path: Path) -> None:
    from cryptography import x509

    from fa_hetdp.server.certs import main as certs

    checked = set(re.findall(r"^\s*proxy_ssl_name\s+(\S+);", NGINX.read_text(), re.MULTILINE))
    assert checked == {"localhost"}
    found = certificate_commands()
    assert {name for name, _ in found} == {"README.md", "docs/deployment.md"}
    for i, (name, args) in enumerate(found):
        out = tmp_path / str(i)
        assert certs([str(out), *args[1:]]) == 0  # the command as written, into tmp_path
        cert = x509.load_pem_x509_certificate((out / "server.pem").read_bytes())
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert checked <= set(names.get_values_for_type(x509.DNSName)), (name, args)


def malicious_sample() -> tuple[dict[str, Any], list[float], int]:
    """docs/deployment.md's malicious-server sample: run config, node gammas, roster size."""
    text = DEPLOYMENT.read_text()
    blocks = re.findall(r"```toml\n(# run-malicious\.toml.*?)```", text, flags=re.DOTALL)
    assert len(blocks) == 1, "one run-malicious.toml sample expected in docs/deployment.md"
    gammas = [float(g) for g in re.findall(r"secagg-min-gamma=([0-9.]+)", text)]
    rosters = commands(text, "python -m fa_hetdp.secagg.identity roster")
    assert len(rosters) == 1 and gammas
    members = [w for w in shlex.split(rosters[0]) if "=" in w]
    return tomllib.loads(blocks[0]), gammas, len(members)


def test_the_malicious_server_sample_agrees_with_its_nodes_and_runs(tmp_path: Path) -> None:
    from test_secagg_flower import roster_nodes, run_nodes

    sample, gammas, members = malicious_sample()
    n = int(sample["num-clients"])
    assert n == members  # one client per owner on the roster
    stated = float(sample["secagg-corrupt-fraction"])
    assert all(stated >= g for g in gammas)  # a node refuses a run config below its own gamma
    config = {**APP_CONFIG, **sample, "result-path": str(tmp_path / "result.json")}
    config.update({"node-wait-timeout": 1.0, "progress-path": ""})
    nodes = roster_nodes(
        tmp_path,
        n,
        **{"secagg-threat-model": "malicious-server", "secagg-min-gamma": max(gammas)},
    )
    document = run_nodes(config, n, nodes)
    assert document["status"] == "success", document.get("reason")
    assert document["secagg"]["threat_model"] == "malicious-server"


@pytest.mark.parametrize(
    ("overrides", "blamed", "says"),
    [
        # the docs' three owners with the app's default scenario (quickstart: gamma = 0.05):
        # t would be 3 of 2 share holders
        (
            {"num-clients": 3},
            "run-config.secagg-corrupt-fraction",
            "no node can accept a malicious-server session of n = 3",
        ),
        (
            {"num-clients": 3, "secagg-neighbours": -1, "secagg-threshold": 0.0},
            "run-config.secagg-corrupt-fraction",
            "at least 4 clients for gamma = 0.05",
        ),
        (
            {"secagg-corrupt-fraction": 0.2, "secagg-threshold": 3.0},
            "run-config.secagg-threshold",
            "below floor((n + ceil(gamma n)) / 2) + 1 = 7",
        ),
        (
            {"secagg-corrupt-fraction": 0.0, "secagg-neighbours": 4, "secagg-threshold": 3.0},
            "run-config.secagg-neighbours",
            "not on the complete graph",
        ),
    ],
)
def test_a_malicious_server_run_config_no_node_accepts_is_refused_first(
    tmp_path: Path, overrides: dict[str, Any], blamed: str, says: str
) -> None:
    from fa_hetdp.flowerkit.settings import RunSettings

    config = {
        **APP_CONFIG,
        "result-path": str(tmp_path / "result.json"),
        "secagg-threat-model": "malicious-server",
        "secagg-neighbours": 0,
        "num-clients": 10,
        **overrides,
    }
    with pytest.raises(ConfigError) as caught:
        RunSettings.from_run_config(config)
    problems = dict(caught.value.problems)
    assert blamed in problems and says in problems[blamed], problems


def test_a_malicious_server_run_config_every_node_accepts_passes(tmp_path: Path) -> None:
    from fa_hetdp.flowerkit.settings import RunSettings

    for overrides in (
        {"num-clients": 3, "secagg-corrupt-fraction": 0.0, "secagg-threshold": 2.0},
        {"num-clients": 5, "secagg-corrupt-fraction": 0.1, "secagg-threshold": 4.0},
        {"num-clients": 10, "secagg-corrupt-fraction": 0.2, "secagg-threshold": 7.0},
        {"num-clients": 10, "secagg-neighbours": -1, "secagg-threshold": 0.0},  # quickstart's
    ):
        config = {
            **APP_CONFIG,
            "result-path": str(tmp_path / "result.json"),
            "secagg-threat-model": "malicious-server",
            "secagg-neighbours": 0,
            **overrides,
        }
        assert RunSettings.from_run_config(config).threat_model == "malicious-server"


def test_fa_hetdp_run_refuses_it_before_flower_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import fa_hetdp.cli.run as run_module
    from fa_hetdp.cli.main import main

    def started(*args: object, **kwargs: object) -> object:
        raise AssertionError("Flower started")

    monkeypatch.setattr(run_module, "run_simulation", started)
    monkeypatch.chdir(tmp_path)
    scenario = scenario_file(tmp_path, 3, extra="")
    text = scenario.read_text().replace(
        "[secagg]\n", '[secagg]\nthreat_model = "malicious-server"\ncorrupt_fraction = 0.05\n'
    )
    scenario.write_text(text)
    assert main(["run", str(scenario)]) == 2
    err = capsys.readouterr().err
    assert "no node can accept a malicious-server session of n = 3 clients" in err


def test_a_server_that_skips_the_check_still_meets_every_nodes_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Attack: the server (and, in process, the nodes' copy of the validator) skips the run
    # config's malicious-server rules and offers t = 3 for gamma = 0.2. Every node refuses at
    # the setup all the same: its node policy first (clients.policy, issue 27: c = 2 of its
    # roster of 10 need t >= 7), as secagg.consistency.check_safe would after it.
    from test_secagg_flower import aborted, roster_nodes, run_nodes

    import fa_hetdp.config.rules as rules

    kept = tuple(r for r in rules.CROSS_RULES if not r.name.startswith("malicious-server"))
    monkeypatch.setattr(rules, "CROSS_RULES", kept)
    overrides = {
        "secagg-threat-model": "malicious-server",
        "secagg-corrupt-fraction": 0.2,
        "secagg-threshold": 3.0,
    }
    config = run_config(tmp_path, scenario_file(tmp_path, 10), **overrides)
    nodes = roster_nodes(tmp_path, 10, **{"secagg-min-gamma": 0.2})
    document = aborted(config, lambda: run_nodes(config, 10, nodes))
    reasons = [r for step in document["steps"] for r in step["dropouts"].values()]
    assert len(reasons) == 10, reasons
    assert all("need t >= floor((n + c)/2) + 1 = 7" in r for r in reasons), reasons
