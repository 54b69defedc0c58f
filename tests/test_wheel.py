"""The installed package runs: a wheel in a fresh venv (no source tree on its path).

The wheel is built from this tree (``pip wheel --no-deps --no-build-isolation``, so hatchling
must be installed: the test extras carry it), installed without dependencies into a venv made
here; the venv reaches the dependencies (flwr, numpy, ...) through a ``.pth`` line naming this
interpreter's site-packages as plain paths (their own ``.pth`` files, among them the editable
install's, are not processed), and gets Flower's programs as scripts of its own interpreter.
Everything runs from a temporary working directory with ``PYTHONPATH`` unset and the venv's
``bin`` not on ``PATH``, so ``fa-hetdp`` must find Flower's programs beside its interpreter.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest
from test_flower_helpers import scenario_file

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    path = [
        p for p in env.get("PATH", "").split(os.pathsep) if Path(sys.executable).parent != Path(p)
    ]
    env["PATH"] = os.pathsep.join(path)
    env["HOME"] = str(home)
    return env


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("hatchling")
    tmp = tmp_path_factory.mktemp("wheel")
    wheels = tmp / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(ROOT),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
        ],
        check=True,
    )
    (wheel,) = wheels.glob("fa_hetdp-*.whl")
    env_dir = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "-q",
            str(wheel),
        ],
        check=True,
    )
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "host-dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    for entry in importlib.metadata.distribution("flwr").entry_points:
        if entry.group != "console_scripts":
            continue
        module, _, attr = entry.value.partition(":")
        script = env_dir / "bin" / entry.name
        script.write_text(
            f"#!{python}\nimport sys\nfrom {module} import {attr}\nsys.exit({attr}())\n"
        )
        script.chmod(0o755)
    return env_dir


def test_installed_package_is_not_the_source_tree(venv: Path, tmp_path: Path) -> None:
    code = (
        "import json, importlib.util as u, fa_hetdp, fa_hetdp.cli.cluster as c;"
        "import fa_hetdp.server as s, fa_hetdp.clients as k, fa_hetdp.secagg as g;"
        "print(json.dumps([m.__file__ for m in (fa_hetdp, s, k, g)]"
        " + [[n for n in ('server', 'clients', 'secagg') if u.find_spec(n)]]"
        " + [str(c.flower_app_dir(__import__('pathlib').Path('.')))]))"
    )
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code],
        cwd=tmp_path,
        env=_env(tmp_path),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    *files, bare, app = json.loads(out)
    for file in files:
        assert Path(file).is_relative_to(venv), file
        assert not Path(file).is_relative_to(ROOT)
    # The install puts no generic top-level `server`, `clients` or `secagg` into site-packages.
    assert bare == []
    assert (tmp_path / app).resolve() == (tmp_path / "app").resolve()
    assert (tmp_path / "app" / "pyproject.toml").is_file()
    assert (tmp_path / "app" / "scenarios" / "quickstart.toml").is_file()


def test_installed_fa_hetdp_run_works(venv: Path, tmp_path: Path) -> None:
    scenario = scenario_file(tmp_path, 6, seed=5)
    workdir = tmp_path / "work"
    output = tmp_path / "out" / "result.json"
    done = subprocess.run(
        [
            str(venv / "bin" / "fa-hetdp"),
            "run",
            str(scenario),
            "--workdir",
            str(workdir),
            "--output",
            str(output),
            "--timeout",
            "600",
        ],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Cochran" in done.stdout
    result = json.loads(output.read_text())
    assert result["status"] == "success"
    # The FAB was built from the assembled copy of the installed package.
    assert (workdir / "app" / "fa_hetdp" / "server" / "app.py").is_file()
