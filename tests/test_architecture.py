"""The architecture's rules, checked on the source (imports parsed with ``ast``).

The layout's top-level ``server/``, ``clients/`` and ``secagg/`` are links to the packages
``fa_hetdp/server``, ``fa_hetdp/clients`` and ``fa_hetdp/secagg`` (their install names cannot
collide with other projects'). The rules are stated per component:

- ``server`` never imports ``clients`` and vice versa: the two Flower apps meet only through
  messages and the shared definitions in ``fa_hetdp.flower``;
- ``secagg`` imports nothing from the rest of ``fa_hetdp``, ``clients``, ``server`` or ``flwr``;
- in the core (the rest of ``fa_hetdp``), only the shared codec (``fa_hetdp/flowerkit/wire.py``) and
  the launcher (``fa_hetdp/cli/``) import ``flwr``;
- nothing imports the bare names ``server``, ``clients`` or ``secagg`` (only the install names);
- no tracked file refers to the design notes that live outside the repository (the
  repository's own is ``docs/design.md``);
- the layers (:data:`LAYERS`, drawn in ``docs/design.md``): every module of ``fa_hetdp``
  belongs to exactly one declared layer, and imports only from its own package or from a
  layer below; packages that share a layer do not import each other. ``TYPE_CHECKING``
  imports count like any other: an annotation that names an upper layer is a dependency on it
  (the docs and ``mypy`` resolve it), so it is refused too.

Imports inside functions, relative imports and ``importlib.import_module("...")`` calls with
a literal name count. Each rule is also run on a planted tree, so it is known to fail.
"""

from __future__ import annotations

import ast
import itertools
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("fa_hetdp",)
#: The components whose boundaries the rules keep, by their package (longest prefix first).
COMPONENTS: tuple[tuple[str, str], ...] = (
    ("fa_hetdp.secagg", "secagg"),
    ("fa_hetdp.server", "server"),
    ("fa_hetdp.clients", "clients"),
    ("fa_hetdp", "core"),
)
#: The bare top-level names the components had before they moved into fa_hetdp.
BARE_NAMES = frozenset({"secagg", "server", "clients"})
# Built from parts so that this file does not mention the name it looks for.
OUTSIDE_DESIGN_NOTES = "DESIGN" + ".md"

#: component -> components (or ``flwr``) it must not import.
FORBIDDEN: dict[str, frozenset[str]] = {
    "server": frozenset({"clients"}),
    "clients": frozenset({"server"}),
    "secagg": frozenset({"core", "clients", "server", "flwr"}),
}
#: Inside fa_hetdp, the only modules (files, or folders ending in "/") that may import flwr.
FLWR_ALLOWED_IN_FA_HETDP = (
    "fa_hetdp/flowerkit/wire.py",
    "fa_hetdp/cli/",
    # the drop-in entry points, above the two apps (their flwr names: annotations only)
    "fa_hetdp/flower/dropin_client.py",
    "fa_hetdp/flower/dropin_server.py",
)

#: The layers, bottom first: each a tuple of the packages (or top-level modules) on it. A module
#: may import its own package and anything on a lower layer, nothing on its layer's other
#: packages and nothing above. ``fa_hetdp`` itself (``__init__``: the public names) sits on the
#: layer of the facade, above what it re-exports. The same order is drawn in docs/design.md.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("fa_hetdp._types", "fa_hetdp.errors", "fa_hetdp.registry"),  # types, exceptions, statistics
    ("fa_hetdp.dp", "fa_hetdp.secagg"),  # the leaves: noise and secure aggregation
    ("fa_hetdp.data",),  # datasets, readers, client summaries, data checks
    ("fa_hetdp.config",),  # settings, scenarios, the one validator
    ("fa_hetdp.stats",),  # statistics: exact formulas
    ("fa_hetdp.protocol",),  # the protocol by role: plan, client, server, simulation
    ("fa_hetdp.accuracy",),  # planner, assumptions, expected errors, inverses
    ("fa_hetdp",),  # the facade: the public names of fa_hetdp/__init__.py
    ("fa_hetdp.report",),  # tables, figures, result files
    ("fa_hetdp.experiments",),  # the experiment engine, reproduction, benchmarks of noise
    ("fa_hetdp.flowerkit",),  # what both Flower apps share: settings, steps, the codec
    ("fa_hetdp.clients", "fa_hetdp.server"),  # the two Flower apps
    ("fa_hetdp.flower",),  # the drop-in for a user's app: register(), measure() (and __init__)
    ("fa_hetdp.cli",),  # the fa-hetdp command: argparse and the process supervisor
)
#: The only modules (files, or folders ending in "/") that may import argparse: the command line,
#: and two ``python -m`` tools of packages that cannot import it (secagg stands alone; the dev
#: certificates are the ServerApp's). experiments/ and data/ take typed parameters.
ARGPARSE_ALLOWED = ("fa_hetdp/cli/", "fa_hetdp/secagg/identity.py", "fa_hetdp/server/certs.py")
#: Upward imports allowed for now, each with its reason; the test fails when one is gone, so
#: the list only shrinks. (importer module, imported module prefix)
LAYER_EXCEPTIONS: dict[tuple[str, str], str] = {}


# ---------------------------------------------------------------------------- scanners
def module_name(root: Path, path: Path) -> str:
    """Dotted module name of ``path`` (``fa_hetdp/flower/__init__.py`` -> ``fa_hetdp.flower``)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, module: str) -> set[str]:
    """Every module ``path`` imports, anywhere in the file (dotted names, relatives resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".") if package else []
                anchor = anchor[: len(anchor) - (node.level - 1)] if node.level > 1 else anchor
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            if base:
                found.add(base)
            found.update(f"{base}.{alias.name}" if base else alias.name for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (isinstance(node.func, ast.Name) and node.func.id in {"__import__"})
            )
        ):
            found.add(node.args[0].value)
    return found


def component_of(name: str) -> str:
    """The component of a dotted module name: one of :data:`COMPONENTS`, or its top-level name."""
    for package, component in COMPONENTS:
        if name == package or name.startswith(package + "."):
            return component
    return name.split(".")[0]


def python_files(root: Path, packages: Iterable[str] = PACKAGES) -> Iterator[Path]:
    """The ``.py`` files of ``packages`` under ``root``, sorted."""
    for package in packages:
        yield from sorted((root / package).rglob("*.py"))


def import_violations(root: Path) -> list[str]:
    """Every import that breaks :data:`FORBIDDEN` or the flwr rule, as ``"file: module"``."""
    out: list[str] = []
    for path in python_files(root):
        rel = path.relative_to(root).as_posix()
        module = module_name(root, path)
        top = component_of(module)
        for name in sorted(imports_of(path, module)):
            target = component_of(name)
            if name.split(".")[0] in BARE_NAMES:
                out.append(f"{rel}: imports {name} (use its install name fa_hetdp.{name})")
            elif target in FORBIDDEN.get(top, frozenset()):
                out.append(f"{rel}: imports {name}")
            elif (
                top == "core"
                and target == "flwr"
                and not any(
                    rel == allowed or (allowed.endswith("/") and rel.startswith(allowed))
                    for allowed in FLWR_ALLOWED_IN_FA_HETDP
                )
            ):
                out.append(f"{rel}: imports {name} (only the codec and the CLI may)")
    return out


def absolute_imports_in_secagg(root: Path) -> list[str]:
    """Absolute imports of ``fa_hetdp`` inside secagg, as ``"file: module"``.

    secagg refers to its own modules relatively, so it names nothing of the project: it is the
    same transport-agnostic package under any install name.
    """
    out: list[str] = []
    for path in sorted((root / "fa_hetdp" / "secagg").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            out.extend(
                f"{path.relative_to(root).as_posix()}: {name}"
                for name in names
                if name.split(".")[0] == "fa_hetdp"
            )
    return out


def files_mentioning(root: Path, files: Iterable[str], needle: str) -> list[str]:
    """Those of ``files`` (relative to ``root``) whose bytes contain ``needle``."""
    data = needle.encode()
    return [f for f in files if (root / f).is_file() and data in (root / f).read_bytes()]


def tracked_files(root: Path) -> list[str]:
    """``git ls-files`` of ``root``; skip the test outside a git checkout."""
    try:
        listing = subprocess.run(
            ["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [name for name in listing.decode().split("\0") if name]


def layer_units(layers: tuple[tuple[str, ...], ...] = LAYERS) -> dict[str, int]:
    """Each declared package or module of :data:`LAYERS` -> the index of its layer."""
    return {unit: index for index, layer in enumerate(layers) for unit in layer}


def unit_of(name: str, units: Iterable[str]) -> str | None:
    """The longest declared unit that ``name`` is or lies under, or None (outside fa_hetdp)."""
    best: str | None = None
    for unit in units:
        if (name == unit or name.startswith(unit + ".")) and (
            best is None or len(unit) > len(best)
        ):
            best = unit
    return best


def modules_without_layer(root: Path, layers: tuple[tuple[str, ...], ...] = LAYERS) -> list[str]:
    """The files of fa_hetdp whose module no layer declares (only ``fa_hetdp`` itself claims
    ``fa_hetdp/__init__.py``: a new sub-package or top-level module needs its own entry)."""
    units = layer_units(layers)
    out = []
    for path in python_files(root):
        module = module_name(root, path)
        unit = unit_of(module, units)
        if unit is None or (unit == "fa_hetdp" and module != "fa_hetdp"):
            out.append(path.relative_to(root).as_posix())
    return out


def asserts_in_library(root: Path) -> list[str]:
    """``file:line`` of every ``assert`` statement in the packages (gone under python -O)."""
    out = []
    for path in python_files(root):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        rel = path.relative_to(root).as_posix()
        out += [f"{rel}:{node.lineno}" for node in ast.walk(tree) if isinstance(node, ast.Assert)]
    return out


def argparse_outside_cli(root: Path) -> list[str]:
    """The files of fa_hetdp outside :data:`ARGPARSE_ALLOWED` that import argparse."""
    out = []
    for path in python_files(root):
        rel = path.relative_to(root).as_posix()
        if any(rel == a or (a.endswith("/") and rel.startswith(a)) for a in ARGPARSE_ALLOWED):
            continue
        if any(
            n == "argparse" or n.startswith("argparse.")
            for n in imports_of(path, module_name(root, path))
        ):
            out.append(rel)
    return out


def layer_violations(
    root: Path,
    layers: tuple[tuple[str, ...], ...] = LAYERS,
    exceptions: Iterable[tuple[str, str]] = (),
) -> list[str]:
    """Every import that goes up :data:`LAYERS` or across a layer, as ``"file: module (why)"``."""
    units = layer_units(layers)
    allowed = set(exceptions)
    out: list[str] = []
    for path in python_files(root):
        module = module_name(root, path)
        source = unit_of(module, units)
        if source is None:
            continue  # reported by modules_without_layer
        for name in sorted(imports_of(path, module)):
            target = unit_of(name, units)
            if target is None or target == source or (target == "fa_hetdp" and name != target):
                # outside the project, its own package, or an attribute of the facade
                # (``from fa_hetdp import __version__`` also yields ``fa_hetdp``, checked)
                continue
            if any(module == m and (name == p or name.startswith(p + ".")) for m, p in allowed):
                continue
            rel = path.relative_to(root).as_posix()
            if units[target] > units[source]:
                out.append(f"{rel}: imports {name} (layer {units[target]} above {units[source]})")
            elif units[target] == units[source] and target != source:
                out.append(f"{rel}: imports {name} (same layer, another package)")
    return out


# ---------------------------------------------------------------------------- the rules
def test_apps_and_secagg_keep_their_import_boundaries() -> None:
    assert import_violations(ROOT) == []


def test_no_file_refers_to_design_notes_outside_the_repository() -> None:
    assert files_mentioning(ROOT, tracked_files(ROOT), OUTSIDE_DESIGN_NOTES) == []


def test_the_scanned_tree_is_the_project() -> None:
    # The rules above pass vacuously if the scan finds nothing.
    files = {p.relative_to(ROOT).as_posix() for p in python_files(ROOT)}
    assert {
        "fa_hetdp/clients/app.py",
        "fa_hetdp/server/strategy.py",
        "fa_hetdp/flowerkit/wire.py",
    } <= files
    assert any(f.startswith("fa_hetdp/secagg/") for f in files)
    wire = imports_of(ROOT / "fa_hetdp/flowerkit/wire.py", "fa_hetdp.flowerkit.wire")
    assert "flwr.app" in wire


def test_no_import_goes_up_the_layers() -> None:
    assert layer_violations(ROOT, exceptions=LAYER_EXCEPTIONS) == []


def test_no_assert_in_library_code() -> None:
    # An assert vanishes under python -O: library code raises a project error instead.
    assert asserts_in_library(ROOT) == []


def test_assert_rule_catches_a_planted_assert(tmp_path: Path) -> None:
    root = _plant(tmp_path, {"fa_hetdp/ok.py": "x = 1\n", "fa_hetdp/bad.py": "assert True\n"})
    assert asserts_in_library(root) == ["fa_hetdp/bad.py:1"]


def test_argparse_lives_in_the_cli() -> None:
    assert argparse_outside_cli(ROOT) == []


def test_every_module_belongs_to_a_declared_layer() -> None:
    assert modules_without_layer(ROOT) == []
    units = layer_units()
    assert len(units) == sum(len(layer) for layer in LAYERS)  # no unit on two layers


def test_each_allowed_exception_still_exists() -> None:
    # An exception that is no longer needed is removed, so the list only shrinks.
    units = layer_units()
    for module, prefix in LAYER_EXCEPTIONS:
        path = ROOT / (module.replace(".", "/") + ".py")
        assert any(n == prefix or n.startswith(prefix + ".") for n in imports_of(path, module)), (
            f"{module} no longer imports {prefix}: drop it from LAYER_EXCEPTIONS"
        )
        assert units[unit_of(prefix, units) or ""] > units[unit_of(module, units) or ""]


def test_design_doc_draws_the_layers_in_the_enforced_order() -> None:
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    start = text.index("<!-- layers -->")
    drawn = text[start : text.index("<!-- /layers -->", start)]
    positions = [
        [drawn.index(f"`{unit.removeprefix('fa_hetdp.')}`") for unit in layer] for layer in LAYERS
    ]
    for lower, upper in itertools.pairwise(positions):
        assert max(lower) < min(upper)


# ---------------------------------------------------------------------------- self-checks
def _plant(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for package in PACKAGES:
        (root / package).mkdir(exist_ok=True)
    return root


def test_scanner_finds_imports_inside_functions_relative_and_dynamic(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            "fa_hetdp/server/__init__.py": "",
            "fa_hetdp/server/sub/__init__.py": "",
            "fa_hetdp/server/sub/mod.py": (
                "import json\n"
                "def f():\n"
                "    from fa_hetdp.clients import app\n"
                "    return app\n"
                "from ..strategy import X\n"
                "from . import sibling\n"
                "import importlib\n"
                "importlib.import_module('flwr.app')\n"
            ),
        },
    )
    found = imports_of(root / "fa_hetdp/server/sub/mod.py", "fa_hetdp.server.sub.mod")
    assert {
        "json",
        "fa_hetdp.clients",
        "fa_hetdp.clients.app",
        "fa_hetdp.server.strategy",
        "fa_hetdp.server.sub.sibling",
    } <= found
    assert "flwr.app" in found


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        (
            "fa_hetdp/server/strategy.py",
            "def f():\n    import fa_hetdp.clients.app\n",
            "fa_hetdp/server/strategy.py",
        ),
        (
            "fa_hetdp/clients/app.py",
            "from fa_hetdp.server.strategy import X\n",
            "fa_hetdp/clients/app.py",
        ),
        ("fa_hetdp/clients/app.py", "import secagg\n", "fa_hetdp/clients/app.py"),
        ("fa_hetdp/cli/run.py", "from server.app import app\n", "fa_hetdp/cli/run.py"),
        (
            "fa_hetdp/secagg/crypto.py",
            "from fa_hetdp.errors import E\n",
            "fa_hetdp/secagg/crypto.py",
        ),
        ("fa_hetdp/secagg/crypto.py", "from ..dp import rng\n", "fa_hetdp/secagg/crypto.py"),
        ("fa_hetdp/secagg/server.py", "import flwr\n", "fa_hetdp/secagg/server.py"),
        (
            "fa_hetdp/secagg/client.py",
            "def g():\n    from fa_hetdp.server import app\n",
            "fa_hetdp/secagg/client.py",
        ),
        (
            "fa_hetdp/protocol/plan.py",
            "from flwr.app import Message\n",
            "fa_hetdp/protocol/plan.py",
        ),
        ("fa_hetdp/flowerkit/settings.py", "import flwr.app\n", "fa_hetdp/flowerkit/settings.py"),
    ],
)
def test_import_rule_catches_a_planted_import(
    tmp_path: Path, name: str, text: str, expected: str
) -> None:
    root = _plant(tmp_path, {name: text})
    violations = import_violations(root)
    assert violations
    assert all(v.startswith(f"{expected}: imports ") for v in violations)


def test_import_rule_allows_the_codec_cli_and_shared_modules(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            "fa_hetdp/flowerkit/wire.py": "from flwr.app import RecordDict\n",
            "fa_hetdp/cli/cluster.py": "def f():\n    import flwr\n",
            "fa_hetdp/server/app.py": "from fa_hetdp.flowerkit.wire import decode\nimport flwr\n",
            "fa_hetdp/clients/app.py": (
                "from fa_hetdp.flowerkit.steps import Key\nimport fa_hetdp.secagg\n"
            ),
            "fa_hetdp/secagg/client.py": (
                "import numpy\nfrom cryptography import x509\nfrom . import shamir\n"
            ),
        },
    )
    assert import_violations(root) == []


def test_secagg_imports_itself_relatively() -> None:
    assert absolute_imports_in_secagg(ROOT) == []


def test_secagg_rule_catches_an_absolute_self_import(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            "fa_hetdp/secagg/ok.py": "from . import crypto\nfrom .errors import E\n",
            "fa_hetdp/secagg/bad.py": "def f():\n    from fa_hetdp.secagg.crypto import kdf\n",
        },
    )
    assert absolute_imports_in_secagg(root) == ["fa_hetdp/secagg/bad.py: fa_hetdp.secagg.crypto"]


def test_mention_rule_catches_a_planted_reference(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text(f"see {OUTSIDE_DESIGN_NOTES}\n")
    (tmp_path / "b.md").write_text("see docs/design.md\n")
    assert files_mentioning(tmp_path, ["a.md", "b.md", "missing.md"], OUTSIDE_DESIGN_NOTES) == [
        "a.md"
    ]


def test_the_layout_names_link_to_the_packages() -> None:
    # The user's top-level names stay browsable; the code lives once, under its install name.
    for name in sorted(BARE_NAMES):
        link = ROOT / name
        assert link.is_symlink(), f"{name} should link to fa_hetdp/{name}"
        assert link.resolve() == (ROOT / "fa_hetdp" / name).resolve()


# ---------------------------------------------------------------------------- layer self-checks
PLANTED_LAYERS: tuple[tuple[str, ...], ...] = (
    ("fa_hetdp.errors",),
    ("fa_hetdp.dp", "fa_hetdp.secagg"),
    ("fa_hetdp.stats",),
    ("fa_hetdp.protocol",),
    ("fa_hetdp",),
    ("fa_hetdp.cli",),
)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("fa_hetdp/stats/exact.py", "from fa_hetdp.protocol.plan import ProtocolPlan\n"),
        ("fa_hetdp/stats/exact.py", "def f():\n    from ..protocol import plan\n"),
        (
            "fa_hetdp/stats/exact.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import fa_hetdp.cli.main\n",
        ),
        ("fa_hetdp/dp/rng.py", "from fa_hetdp.secagg import crypto\n"),
        ("fa_hetdp/protocol/plan.py", "from fa_hetdp import plan_accuracy\n"),
        ("fa_hetdp/errors.py", "import importlib\nimportlib.import_module('fa_hetdp.dp.rng')\n"),
    ],
    ids=["top-level", "relative-in-function", "type-checking", "same-layer", "facade", "dynamic"],
)
def test_layer_rule_catches_a_planted_upward_import(tmp_path: Path, name: str, text: str) -> None:
    root = _plant(tmp_path, {name: text})
    violations = layer_violations(root, PLANTED_LAYERS)
    assert violations
    assert all(v.startswith(f"{name}: imports ") for v in violations)


def test_layer_rule_allows_downward_and_own_package_imports(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            "fa_hetdp/__init__.py": "from fa_hetdp.protocol.plan import plan\n",
            "fa_hetdp/protocol/plan.py": (
                "from fa_hetdp.stats.exact import f\nfrom . import client\nimport numpy\n"
                "from fa_hetdp.errors import E\n"
            ),
            "fa_hetdp/stats/exact.py": (
                "from fa_hetdp.dp import rng\nfrom fa_hetdp.secagg import x\n"
            ),
            "fa_hetdp/cli/main.py": "from fa_hetdp import __version__\nimport fa_hetdp\n",
        },
    )
    assert layer_violations(root, PLANTED_LAYERS) == []
    assert (
        layer_violations(root, PLANTED_LAYERS, exceptions=[("fa_hetdp.stats.exact", "fa_hetdp.dp")])
        == []
    )


def test_layer_rule_allows_only_the_listed_exception(tmp_path: Path) -> None:
    root = _plant(tmp_path, {"fa_hetdp/stats/exact.py": "import fa_hetdp.protocol.plan\n"})
    assert (
        layer_violations(
            root, PLANTED_LAYERS, exceptions=[("fa_hetdp.stats.exact", "fa_hetdp.protocol")]
        )
        == []
    )
    assert layer_violations(
        root, PLANTED_LAYERS, exceptions=[("fa_hetdp.stats.other", "fa_hetdp.protocol")]
    )


def test_a_package_without_a_layer_is_reported(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            "fa_hetdp/__init__.py": "",
            "fa_hetdp/stats/exact.py": "",
            "fa_hetdp/newpkg/__init__.py": "",
            "fa_hetdp/loose.py": "",
        },
    )
    assert modules_without_layer(root, PLANTED_LAYERS) == [
        "fa_hetdp/loose.py",
        "fa_hetdp/newpkg/__init__.py",
    ]


def test_argparse_rule_catches_a_planted_parser(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            "fa_hetdp/experiments/reproduce.py": "def f():\n    import argparse\n",
            "fa_hetdp/data/download.py": "from argparse import Namespace\n",
            "fa_hetdp/cli/reproduce.py": "import argparse\n",
            "fa_hetdp/server/certs.py": "import argparse\n",
        },
    )
    assert argparse_outside_cli(root) == [
        "fa_hetdp/data/download.py",
        "fa_hetdp/experiments/reproduce.py",
    ]


def test_the_variance_effects_are_the_continuous_measures() -> None:
    # data.arms (the data layer) names them for the arm sizes; stats names them for escalc
    from fa_hetdp.data.arms import VARIANCE_EFFECTS
    from fa_hetdp.stats.effect_sizes import CONTINUOUS_MEASURES

    assert VARIANCE_EFFECTS == CONTINUOUS_MEASURES
