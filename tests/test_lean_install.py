"""The lean install: the core of fa-hetdp runs without the extras' packages (issue 18, item 7).

``pip install fa-hetdp`` brings numpy, scipy, cryptography, scikit-learn (the embedded digits)
and rich (progress and tables of ``reproduce``/``bench-noise``); Flower, Ray, the gateway's web
stack and matplotlib come with the extras ``[flower]``, ``[gateway]`` and ``[plots]``
(:data:`fa_hetdp.cli.extras.EXTRAS`). Here a subprocess runs with a meta-path finder that refuses
the extras' packages, as if they were not installed, and checks that every core module imports,
that the in-process API runs on digits, that ``fa-hetdp --help``, ``plan`` and ``scenarios``
work, and that a command needing an extra says which one on one line. The slow test installs
the built wheel into a fresh venv that sees only the core dependencies' files.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: The top-level packages the lean install lacks (h11: the gateway's HTTP parser, via uvicorn).
BLOCKED = ("flwr", "ray", "starlette", "uvicorn", "httpx", "h11", "matplotlib")
#: Their distributions, which the core dependencies must not name.
EXTRA_DISTRIBUTIONS = frozenset({"flwr", "ray", "starlette", "uvicorn", "httpx", "matplotlib"})
#: The core dependencies allowed (scikit-learn: load_dataset("digits"); rich: progress/tables).
CORE_DISTRIBUTIONS = frozenset({"numpy", "scipy", "cryptography", "scikit-learn", "rich"})

#: The app modules: exempt from importing without the extras (a name, or a package's prefix).
APP_MODULES = (
    "fa_hetdp.clients",  # the ClientApp
    "fa_hetdp.server",  # the ServerApp
    "fa_hetdp.flowerkit.wire",  # the codec of Flower's RecordDict
    "fa_hetdp.flowerkit.limits",  # the per-step caps of that codec (imports wire)
    "fa_hetdp.cli.gateway_protocol",  # fleet-gateway's uvicorn/h11 protocol
)

#: Prepended to every script run here: the extras' packages cannot be imported.
BLOCKER = textwrap.dedent(
    f"""
    import importlib.abc, sys

    class _Blocked(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in {BLOCKED!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}} (lean install)", name=name)
            return None

    sys.meta_path.insert(0, _Blocked())
    """
)


def _is_app_module(name: str) -> bool:
    return any(name == m or name.startswith(m + ".") for m in APP_MODULES)


def _run_lean(
    body: str, tmp_path: Path, *args: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "lean.py"
    script.write_text(BLOCKER + textwrap.dedent(body), encoding="utf-8")
    env = dict(os.environ)
    env.update(FLWR_HOME=str(tmp_path / "flwr"), FLWR_TELEMETRY_ENABLED="0")
    # Its own session: a command that wrongly starts work (Flower processes) is ended whole.
    with subprocess.Popen(
        [sys.executable, str(script), *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            err += f"\n(killed after {timeout} s)"
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def _cli(tmp_path: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    body = "from fa_hetdp.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"
    return _run_lean(body, tmp_path, *args, timeout=timeout)


def _pyproject() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        project: dict[str, object] = tomllib.load(f)["project"]
    return project


def _name(requirement: str) -> str:
    from packaging.requirements import Requirement

    return Requirement(requirement).name.lower().replace("_", "-")


# ------------------------------------------------------------------------------ pyproject
def test_core_dependencies_leave_the_extras_out() -> None:
    core = {_name(r) for r in _pyproject()["dependencies"]}  # type: ignore[attr-defined]
    assert core <= CORE_DISTRIBUTIONS, core - CORE_DISTRIBUTIONS
    assert not core & EXTRA_DISTRIBUTIONS
    assert {"numpy", "scipy", "cryptography"} <= core


def test_each_extra_declares_the_packages_its_commands_import() -> None:
    from fa_hetdp.cli.extras import EXTRAS

    optional: dict[str, list[str]] = _pyproject()["optional-dependencies"]  # type: ignore[assignment]
    assert {"flower", "gateway", "plots", "datasets", "test"} <= set(optional)
    for extra, modules in EXTRAS.items():
        declared = " ".join(optional[extra]).lower()
        for module in modules:
            # A module's distribution: flwr[simulation] carries ray.
            dist = {"ray": "flwr[simulation]", "flwr_datasets": "flwr-datasets"}.get(module, module)
            assert dist in declared, f"[{extra}] does not declare {dist}"
    # CI installs ".[test]" and runs everything: the test extra pulls every runtime extra.
    test_extra = " ".join(optional["test"])
    assert "fa-hetdp[flower,gateway,plots]" in test_extra.replace(" ", "")


# ------------------------------------------------------------------------------ imports
def test_every_core_module_imports_without_the_extras(tmp_path: Path) -> None:
    body = """
    import importlib, json, pkgutil
    import fa_hetdp
    failed = {}
    for info in pkgutil.walk_packages(fa_hetdp.__path__, "fa_hetdp."):
        try:
            importlib.import_module(info.name)
        except ImportError as exc:
            failed[info.name] = str(exc)
    loaded = sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED_NAMES)
    print(json.dumps({"failed": failed, "loaded": loaded}))
    """
    done = _run_lean(f"BLOCKED_NAMES = {BLOCKED!r}\n" + textwrap.dedent(body), tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    core_failures = {m: e for m, e in report["failed"].items() if not _is_app_module(m)}
    assert core_failures == {}
    assert report["loaded"] == []
    # The exemptions are all needed: each app module does need an extra (the list stays short).
    for app_module in APP_MODULES:
        assert any(m == app_module or m.startswith(app_module + ".") for m in report["failed"]), (
            f"{app_module} imports without the extras: take it off APP_MODULES"
        )


def test_private_statistics_runs_on_digits_without_the_extras(tmp_path: Path) -> None:
    body = """
    import numpy as np
    import fa_hetdp
    x = np.asarray(fa_hetdp.load_dataset("digits").features, dtype=float)
    res = fa_hetdp.private_statistics(
        x, epsilon=1.0, delta=1e-5, variance_floor=0.08, rng=np.random.default_rng(0)
    )
    ci = res.confidence_intervals()
    ordered = ci.lower["total_dispersion"] <= ci.upper["total_dispersion"]
    print(x.shape[0], float(res.total_dispersion), ordered)
    """
    done = _run_lean(body, tmp_path)
    assert done.returncode == 0, done.stderr
    n, dispersion, ordered = done.stdout.split()
    assert n == "1797"
    assert float(dispersion) == float(dispersion)  # a number, not NaN
    assert ordered == "True"


def test_a_figure_without_matplotlib_names_the_plots_extra(tmp_path: Path) -> None:
    body = """
    from fa_hetdp.report.tables import plot_emse_vs_epsilon, plot_frontier
    for draw in (
        lambda: plot_emse_vs_epsilon({"D": {"AGM": ([1.0], [0.1])}}, "e.png"),
        lambda: plot_frontier({"D": {64: ([1.0], [10.0])}}, {}, "f.png"),
    ):
        try:
            draw()
        except ImportError as exc:
            print(str(exc).replace(chr(10), " "))
    """
    done = _run_lean(body, tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 2, done.stdout
    for line in lines:
        assert 'pip install "fa-hetdp[plots]"' in line
    assert not list(tmp_path.glob("*.png"))


# ------------------------------------------------------------------------------ the CLI
@pytest.mark.parametrize(
    ("argv", "shows"),
    [
        (("--help",), "fleet-gateway"),
        (("plan", "-n", "1797", "-d", "64"), "Cochran"),
        (("scenarios",), "digits-all"),
    ],
    ids=["help", "plan", "scenarios"],
)
def test_help_plan_and_scenarios_work_without_the_extras(
    tmp_path: Path, argv: tuple[str, ...], shows: str
) -> None:
    done = _cli(tmp_path, *argv)
    assert done.returncode == 0, done.stderr
    assert shows in done.stdout


COMMANDS_NEEDING_EXTRAS = ["run", "supernode", "fleet-gateway", "reproduce", "bench-noise"]


def test_the_commands_that_need_an_extra_are_the_ones_tried_here() -> None:
    from fa_hetdp.cli.extras import COMMAND_EXTRAS

    assert sorted(COMMAND_EXTRAS) == sorted(COMMANDS_NEEDING_EXTRAS)


@pytest.mark.parametrize(
    ("argv", "extras"),
    [
        (("run",), "flower"),
        (("supernode", "--", "--insecure", "--superlink", "127.0.0.1:1"), "flower"),
        (("fleet-gateway", "--listen", "127.0.0.1:0", "--insecure"), "flower,gateway"),
        (("reproduce", "--quick", "--out", "{tmp}/out"), "plots"),
        (("bench-noise", "quickstart", "--out", "{tmp}/out"), "plots"),
    ],
    ids=COMMANDS_NEEDING_EXTRAS,
)
def test_a_command_needing_an_extra_says_which_on_one_line(
    tmp_path: Path, argv: tuple[str, ...], extras: str
) -> None:
    # A refusal takes a second or two; a command that starts its work instead is cut short.
    done = _cli(tmp_path, *(a.replace("{tmp}", str(tmp_path)) for a in argv), timeout=60)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f'pip install "fa-hetdp[{extras}]"' in lines[0]
    assert lines[0].startswith(f"fa-hetdp {argv[0]}: ")
    assert not (tmp_path / "out").exists()  # refused before any work


# ------------------------------------------------------------------------------ the wheel
def _core_closure(requirements: list[str]) -> set[str]:
    """The distributions a plain ``pip install`` of ``requirements`` brings (installed here)."""
    from packaging.requirements import Requirement

    names: set[str] = set()
    seen: set[tuple[str, frozenset[str]]] = set()
    todo: list[tuple[str, tuple[str, ...]]] = [(r, ()) for r in requirements]
    while todo:
        text, wanted_extras = todo.pop()  # the extras asked of the distribution that needs it
        req = Requirement(text)
        if req.marker is not None and not any(
            req.marker.evaluate({"extra": e}) for e in ("", *wanted_extras)
        ):
            continue
        name = req.name.lower().replace("_", "-")
        if (name, frozenset(req.extras)) in seen:
            continue
        seen.add((name, frozenset(req.extras)))
        names.add(name)
        todo.extend((r, tuple(req.extras)) for r in importlib.metadata.requires(name) or [])
    return names


@pytest.mark.slow
def test_the_wheel_runs_with_its_core_dependencies_only(tmp_path: Path) -> None:
    """The wheel in a fresh venv that sees only the files of its core dependencies' closure.

    Offline, pip cannot fetch numpy or scipy for a fresh venv, so the venv reaches this
    interpreter's installed copies: one folder of links to exactly the files of the
    distributions a plain install would bring (the wheel's ``Requires-Dist`` without an extra,
    followed), named by a ``.pth`` line. Flower and the rest are not there at all.
    """
    pytest.importorskip("hatchling")
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
         "-q", "-w", str(dist)],
        check=True,
    )  # fmt: skip
    (wheel,) = dist.glob("fa_hetdp-*.whl")
    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
         str(wheel)],
        check=True,
    )  # fmt: skip
    requires = json.loads(
        subprocess.run(
            [str(python), "-c", "import json, importlib.metadata as m;"
             "print(json.dumps(m.requires('fa-hetdp')))"],
            check=True, capture_output=True, text=True,
        ).stdout
    )  # fmt: skip
    closure = _core_closure(requires)
    assert not closure & EXTRA_DISTRIBUTIONS, closure & EXTRA_DISTRIBUTIONS
    deps = tmp_path / "core-deps"
    deps.mkdir()
    for name in sorted(closure):
        distribution = importlib.metadata.distribution(name)
        for file in distribution.files or []:
            top = file.parts[0]
            if top in ("..", "__pycache__") or (deps / top).exists():
                continue
            source = Path(str(distribution.locate_file(top)))
            if source.exists():
                (deps / top).symlink_to(source)
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    Path(purelib, "core-dependencies.pth").write_text(f"{deps}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HOME=str(tmp_path), FLWR_TELEMETRY_ENABLED="0")

    def fa_hetdp(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(env_dir / "bin" / "fa-hetdp"), *args],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip

    missing = subprocess.run(
        [str(python), "-c", "import importlib.util as u;"
         f"print([m for m in {BLOCKED!r} if u.find_spec(m)])"],
        cwd=tmp_path, env=env, check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    assert missing == "[]"  # the venv really lacks them
    api = subprocess.run(
        [str(python), "-c", "import numpy as np, fa_hetdp;"
         "x = np.asarray(fa_hetdp.load_dataset('digits').features, dtype=float);"
         "r = fa_hetdp.private_statistics(x, epsilon=1.0, delta=1e-5,"
         " rng=np.random.default_rng(0)); print(fa_hetdp.__file__, r.total_dispersion)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert api.returncode == 0, api.stderr
    assert Path(api.stdout.split()[0]).is_relative_to(env_dir)
    planned = fa_hetdp("plan", "-n", "1797", "-d", "64")
    assert planned.returncode == 0, planned.stderr
    listed = fa_hetdp("scenarios")
    assert listed.returncode == 0, listed.stderr
    ran = fa_hetdp("run")
    assert ran.returncode != 0
    assert len(ran.stderr.strip().splitlines()) == 1, ran.stderr
    assert 'pip install "fa-hetdp[flower]"' in ran.stderr
