"""Tests of fa_hetdp.experiments (engine, grid, results, outputs).

Determinism, grid semantics, cell seeds, outputs, validation.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from fa_hetdp.errors import InputDataError, ScenarioError
from fa_hetdp.experiments.engine import run_grid, run_scenario
from fa_hetdp.experiments.grid import GridSpec, grid_from_scenario
from fa_hetdp.experiments.outputs import CELL_CSV_FIXED_COLUMNS, write_outputs
from fa_hetdp.experiments.results import load_results
from fa_hetdp.registry import STATISTIC_KEYS

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _data(n: int = 30, d: int = 12, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(0.0, 1.0, size=(n, d))


def _grid(**kwargs: object) -> GridSpec:
    base: dict[str, object] = {
        "epsilons": (0.5, 2.0),
        "delta": 1e-5,
        "mechanisms": ("agm", "cgm"),
        "placements": ("distributed", "central"),
        "compositions": ("basic", "gdp"),
        "repeats": 8,
        "seed": 11,
    }
    base.update(kwargs)
    return GridSpec(**base)  # type: ignore[arg-type]


def _strict_json(path: Path) -> dict:
    def no_constants(name: str) -> float:
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(path.read_text(), parse_constant=no_constants)


def test_same_seed_same_results_different_seed_different() -> None:
    x = _data()
    first = run_grid(x, _grid(), progress=False)
    second = run_grid(x, _grid(), progress=False)
    other = run_grid(x, _grid(seed=12), progress=False)
    for a, b, c in zip(first.cells, second.cells, other.cells, strict=True):
        assert a.key == b.key == c.key
        if a.skipped is not None:
            continue
        assert a.emse == b.emse
        assert a.emse_sd == b.emse_sd
        assert a.emse != c.emse


def test_cell_draws_do_not_depend_on_the_other_cells() -> None:
    # Each cell's generator is spawned from the seed by the cell's grid position, so the
    # first cell is the same whatever follows it in the grid.
    x = _data()
    full = run_grid(x, _grid(), progress=False)
    small = run_grid(x, _grid(epsilons=(0.5,)), progress=False)
    assert small.cells[0].key == full.cells[0].key
    assert small.cells[0].emse == full.cells[0].emse


def test_grid_order_skips_and_cmse() -> None:
    x = _data()
    result = run_grid(x, _grid(), progress=False)
    assert len(result.cells) == 2 * 2 * 2 * 2
    assert [c.key for c in result.cells] == list(_grid().cells())
    skipped = [c for c in result.cells if c.skipped is not None]
    assert {(c.mechanism, c.composition) for c in skipped} == {("cgm", "gdp")}
    assert all("gdp" in (c.skipped or "") for c in skipped)
    for c in result.cells:
        if c.skipped is not None:
            continue
        central = result.cell(c.epsilon, c.mechanism, "central", c.composition)
        assert c.cmse == central.emse
        assert set(c.emse) == set(STATISTIC_KEYS)
        assert all(v >= 0 for v in c.emse.values())
        assert c.sigmas and all(v > 0 for v in c.sigmas.values())
        assert 0 < c.spent_epsilon <= c.epsilon * (1 + 1e-9)
    # CGM at eps >= 1 (per-release share >= 1 at eps = 2? shares are eps/5 < 1) is not
    # necessarily a baseline; the paper profile always is.
    paper = run_grid(x, _grid(profile="paper", compositions=("basic",)), progress=False)
    assert all(c.is_baseline for c in paper.cells)


def test_cgm_baseline_is_labelled_not_warned() -> None:
    # pytest turns warnings into errors: the engine must record the CGM baseline (eps_k >= 1)
    # as a label instead of letting BaselineWarning escape.
    result = run_grid(_data(), _grid(epsilons=(20.0,), compositions=("basic",)), progress=False)
    cgm = result.cell(20.0, "cgm", "distributed", "basic")
    assert cgm.is_baseline
    assert any("baseline" in label.lower() for label in cgm.labels)
    assert not result.cell(20.0, "agm", "distributed", "basic").is_baseline


def test_emse_matches_a_direct_computation() -> None:
    # EMSE of mu' with central noise: sigma_mean^2 / n^2 per coordinate in expectation.
    # statistical: 400 repeats, d = 12; the relative SE of the mean of 4800 chi2(1) values is
    # sqrt(2/4800) ~ 2 %; we allow 12 % (about 6 SE).
    x = _data()
    result = run_grid(
        x,
        _grid(
            epsilons=(1.0,),
            mechanisms=("agm",),
            placements=("central",),
            compositions=("basic",),
            repeats=400,
        ),
        progress=False,
    )
    cell = result.cells[0]
    expected = (cell.sigmas["mean"] / x.shape[0]) ** 2
    assert cell.emse["mean"] == pytest.approx(expected, rel=0.12)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilons": ()}, "epsilons"),
        ({"epsilons": (0.5, -1.0)}, r"grid\.epsilons\[1\]"),
        ({"delta": 1.5}, "delta"),
        ({"mechanisms": ("lap",)}, "mechanisms"),
        ({"placements": ("local",)}, "placements"),
        ({"compositions": ("rdp",)}, "compositions"),
        ({"repeats": 0}, "repeats"),
        ({"seed": -1}, "seed"),
        ({"variance_floor": 0.5}, "variance_floor"),
        ({"profile": "loose"}, "profile"),
        ({"mechanisms": ("agm", "agm")}, "repeated"),
    ],
)
def test_grid_validation(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ScenarioError, match=match):
        _grid(**kwargs)


def test_bad_data_rejected_before_any_cell(tmp_path: Path) -> None:
    x = _data()
    x[0, 0] = np.nan
    with pytest.raises(InputDataError):
        run_grid(x, _grid(), progress=False)


def test_outputs_written(tmp_path: Path) -> None:
    result = run_grid(_data(), _grid(), name="tiny", progress=False)
    written = write_outputs(result, tmp_path / "results" / "tiny")
    folder = tmp_path / "results" / "tiny"
    assert folder / "results.json" in written
    data = _strict_json(folder / "results.json")
    assert data["name"] == "tiny"
    assert data["n"] == 30 and data["d"] == 12
    assert len(data["cells"]) == 16
    first = data["cells"][0]
    assert first["emse"]["dispersion"] == result.cells[0].emse["dispersion"]
    assert "emse_over_expected" in first["ratios"]
    assert load_results(folder / "results.json")["grid"]["seed"] == 11
    with (folder / "cells.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 16
    header = list(rows[0])
    assert header[: len(CELL_CSV_FIXED_COLUMNS)] == list(CELL_CSV_FIXED_COLUMNS)
    for s in STATISTIC_KEYS:
        assert f"emse_{s}" in header and f"cmse_{s}" in header
    assert float(rows[0]["emse_q"]) == result.cells[0].emse["q"]
    for placement in ("distributed", "central"):
        assert (folder / f"emse_{placement}.csv").stat().st_size > 0
        assert (folder / f"emse_{placement}.md").read_text().startswith("**")
    for png in ("emse_vs_epsilon.png", "emse_over_expected.png"):
        content = (folder / png).read_bytes()
        assert content.startswith(PNG_MAGIC) and len(content) > 10_000
    assert not list(folder.glob("*.tmp")) and not list(folder.glob(".*.tmp"))


def test_nan_written_as_null(tmp_path: Path) -> None:
    result = run_grid(_data(), _grid(compositions=("gdp",), mechanisms=("cgm",)), progress=False)
    write_outputs(result, tmp_path)
    data = _strict_json(tmp_path / "results.json")
    assert all(cell["skipped"] for cell in data["cells"])
    assert data["cells"][0]["spent_epsilon"] is None
    assert result.cells[0].spent_epsilon is None  # skipped: nothing spent, no number


TINY_SCENARIO = """
[scenario]
name = "tiny-digits"

[data]
dataset = "digits"
num_clients = 20
label_ratios = [1, 1]

[privacy]
epsilon = [0.5, 1.0]
delta = 1e-5
mechanism = ["agm", "cgm"]
composition = "basic"  # AGM against CGM, as the paper compares them

[protocol]
placement = ["distributed", "central"]

[experiment]
repeats = 6
seed = 4
"""


def test_run_scenario_on_a_tiny_scenario_file(tmp_path: Path) -> None:
    from fa_hetdp.config.scenario import load_scenario

    path = tmp_path / "tiny.toml"
    path.write_text(TINY_SCENARIO)
    scenario = load_scenario(path)
    grid = grid_from_scenario(scenario)
    assert grid.epsilons == (0.5, 1.0) and grid.repeats == 6 and grid.seed == 4
    assert grid.compositions == ("basic",)
    result = run_scenario(scenario, progress=False)
    assert result.name == "tiny-digits"
    assert (result.n, result.d) == (20, 64)
    assert result.metadata["clients_per_label"][:2] == [10, 10]
    assert len(result.cells) == 2 * 2 * 2
    again = run_scenario(scenario, progress=False)
    assert [c.emse for c in again.cells] == [c.emse for c in result.cells]


def test_metrics_recorded_per_cell() -> None:
    # statistical: 200 repeats, seed 11; EMSE / expected MSE of mu' (exact formula) within
    # [0.8, 1.25] (relative SE of the EMSE ~ sqrt(2/(200*12)) ~ 3 %, so about 7 SE).
    result = run_grid(
        _data(),
        _grid(epsilons=(1.0,), mechanisms=("agm",), compositions=("basic",), repeats=200),
        progress=False,
    )
    for cell in result.cells:
        assert set(cell.expected_mse) == set(STATISTIC_KEYS)
        assert 0.8 <= cell.ratio("emse", "expected_mse")["mean"] <= 1.25
        # The paper's TMSE of mu' (Cor. 3.4) is Y_1^2 on the realised noise: equal to the EMSE.
        assert cell.tmse["mean"] == pytest.approx(cell.emse["mean"], rel=1e-9)
        assert set(cell.tmse) >= {"dispersion", "q", "i2_extra"}
        assert set(cell.coverage_paper) == {"dispersion", "q", "i2_extra"}
        assert set(cell.coverage_noise) >= {"mean", "dispersion", "q", "i2"}
        assert all(0.0 <= v <= 1.0 for v in cell.coverage_noise.values())
        # Nominal 95 % interval from the noise distribution of mu' is exact: coverage over
        # 200 x 12 draws within [0.93, 0.97].
        assert 0.93 <= cell.coverage_noise["mean"] <= 0.97


def test_invalid_cell_settings_rejected_before_any_measurement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import fa_hetdp.experiments.engine as engine
    from fa_hetdp.errors import FaHetdpError

    calls: list[object] = []
    monkeypatch.setattr(engine, "_measure_cell", lambda *a, **k: calls.append(a))
    # 31 honest clients out of n = 30 is impossible: every cell's plan is checked first.
    with pytest.raises(FaHetdpError, match="31"):
        run_grid(_data(), _grid(min_honest_clients=31), progress=False)
    assert calls == []


def test_default_output_folder_is_results_slash_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = run_grid(
        _data(), _grid(epsilons=(1.0,), compositions=("basic",)), name="demo", progress=False
    )
    written = write_outputs(result, figures=False)
    assert (tmp_path / "results" / "demo" / "results.json").is_file()
    assert all(p.suffix != ".png" for p in written)


def test_cell_noise_depends_only_on_seed_and_cell() -> None:
    from fa_hetdp.experiments.grid import cell_seed

    # Same cell, different grid shapes: same draws (the cell's spawn key is the cell itself).
    x = _data()
    wide = run_grid(x, _grid(epsilons=(0.25, 0.5, 2.0)), progress=False)
    narrow = run_grid(
        x, _grid(epsilons=(2.0,), mechanisms=("agm",), compositions=("basic",)), progress=False
    )
    assert narrow.cells[0].emse == wide.cell(2.0, "agm", "distributed", "basic").emse
    # Different cells of one run are independent streams.
    a = np.random.default_rng(cell_seed(5, 1.0, "agm", "distributed", "basic")).random(4)
    b = np.random.default_rng(cell_seed(5, 1.0, "agm", "central", "basic")).random(4)
    c = np.random.default_rng(cell_seed(5, 1.0 + 1e-12, "agm", "distributed", "basic")).random(4)
    assert not np.array_equal(a, b) and not np.array_equal(a, c)
    again = np.random.default_rng(cell_seed(5, 1.0, "agm", "distributed", "basic")).random(4)
    np.testing.assert_array_equal(a, again)


def test_cell_seeds_do_not_change_when_a_mechanism_is_added(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The (agm, cgm) cells keep their streams when the package learns a new mechanism."""
    from typing import Literal

    import fa_hetdp.experiments.grid as grid_module

    def states(grid: GridSpec) -> dict[tuple[float, str, str, str], list[int]]:
        return {
            cell: grid_module.cell_seed(grid.seed, *cell).generate_state(4).tolist()
            for cell in grid.cells()
        }

    before = states(_grid(seed=11))
    # A new mechanism registered in front of the others and requested in the grid.
    monkeypatch.setattr(grid_module, "Mechanism", Literal["skellam", "agm", "cgm"])
    import fa_hetdp.config.rules as rules  # the allowed names come from the declared rules

    mechanisms = rules.Field((rules.Options(("skellam", "agm", "cgm")),))
    monkeypatch.setitem(rules.FIELDS, "mechanism", mechanisms)  # type: ignore[index]
    wider = _grid(seed=11, mechanisms=("skellam", "agm", "cgm"))
    after = states(wider)
    assert {k: v for k, v in after.items() if k[1] != "skellam"} == before
    # The new mechanism's cells get streams of their own.
    new = [v for k, v in after.items() if k[1] == "skellam"]
    assert len(new) == 8 and all(v not in before.values() for v in new)
    # Pinned value: the stream of a cell is a fixed function of (seed, ε, names).
    seq = grid_module.cell_seed(0, 0.25, "agm", "distributed", "basic")
    assert seq.spawn_key == (0, 0x3FD00000, *seq.spawn_key[2:])
    assert len(seq.spawn_key) == 5


def test_noise_shape_travels_from_the_scenario_to_every_cell() -> None:
    # digits-all states noise_shape = "per_coordinate": the in-process grid must run it (it
    # once ran uniform noise silently), and the cells' stage-2 noise must differ from uniform.
    from fa_hetdp.config.scenario import load_scenario

    root = Path(__file__).resolve().parents[1]
    grid = grid_from_scenario(load_scenario(root / "scenarios" / "digits-all.toml"))
    assert grid.noise_shape == "per_coordinate"
    x = _data(n=40, d=12)
    shaped = run_grid(
        x,
        _grid(
            epsilons=(1.0,),
            mechanisms=("agm",),
            compositions=("gdp",),
            placements=("distributed",),
            repeats=4,
            noise_shape="per_coordinate",
        ),
        progress=False,
    )
    uniform = run_grid(
        x,
        _grid(
            epsilons=(1.0,),
            mechanisms=("agm",),
            compositions=("gdp",),
            placements=("distributed",),
            repeats=4,
            noise_shape="uniform",
        ),
        progress=False,
    )
    assert shaped.cells[0].emse["dispersion"] != uniform.cells[0].emse["dispersion"]
    assert shaped.cells[0].emse["mean"] == pytest.approx(uniform.cells[0].emse["mean"])
    with pytest.raises(ScenarioError, match="noise_shape"):
        _grid(mechanisms=("ddg",), compositions=("gdp",), noise_shape="per_coordinate")
