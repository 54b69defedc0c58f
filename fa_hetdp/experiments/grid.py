"""The experiment grid: which cells run, with which settings, and each cell's random stream.

A *cell* is a total budget ``epsilon`` with a ``mechanism`` (AGM / CGM), a noise
``placement`` (distributed / central) and a ``composition`` (basic / gdp). :class:`GridSpec`
holds the values crossed into cells and the protocol settings shared by every cell;
:func:`grid_from_scenario` reads them from a scenario.

Randomness: every cell draws from its own child of ``SeedSequence(seed)`` whose spawn key is
the cell (:func:`cell_seed`), so a run is deterministic for a seed, the cells of a run are
independent, and a cell's draws depend neither on the rest of the grid, nor on the list of
mechanisms the package knows, nor on the data (runs of different data with the same seed share
their noise draws: common random numbers).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fa_hetdp._types import Composition, Mechanism, Placement, Profile
from fa_hetdp.config.center import DispersionCenter
from fa_hetdp.config.noise import NoiseShape
from fa_hetdp.config.rules import cross_rule, raise_problems, validate
from fa_hetdp.config.settings import SETTINGS

__all__ = ["GridSpec", "cell_seed", "grid_from_scenario"]


@dataclass(frozen=True)
class GridSpec:
    """The experiment grid and the fixed protocol settings of every cell.

    Parameters
    ----------
    epsilons
        Total privacy budgets ε (> 0), one cell row each.
    delta
        Total δ in (0, 1) of every measurement (the paper's tables used 1e-5).
    mechanisms, placements, compositions
        Values crossed with ``epsilons``. The combination CGM + gdp is not defined (exact
        composition needs the AGM's exact privacy curve) and is skipped with a reason.
    repeats
        Independent private measurements per cell (>= 1; standard deviations need >= 2).
    seed
        Seed of the :class:`numpy.random.SeedSequence` the cells' generators are spawned from.
    profile, variance_floor, extra_i2_noise, min_honest_clients, corrupt_fraction, split, \
statistics, broadcast_bounds, adaptive_floor, floor_quantile, noise_shape, dispersion_center
        Passed to :class:`fa_hetdp.protocol.ProtocolConfig` unchanged, with its defaults (the
        declared ones, :data:`fa_hetdp.config.settings.SETTINGS`) (``corrupt_fraction``:
        the scenario's ``[secagg]`` gamma; the noise is calibrated to ``n - ceil(gamma n)``
        honest shares).
    extra
        The declared settings without a ProtocolConfig field, ``(name, value)`` pairs
        (:attr:`fa_hetdp.config.schema.PrivacySpec.extra`): each cell's ``ProtocolConfig.extra``
        (checked there).
    """

    epsilons: tuple[float, ...]
    delta: float
    mechanisms: tuple[Mechanism, ...] = ("agm",)
    placements: tuple[Placement, ...] = ("distributed",)
    compositions: tuple[Composition, ...] = ("gdp",)
    repeats: int = 100
    seed: int = 0
    profile: Profile = SETTINGS["profile"].default
    variance_floor: float = SETTINGS["variance_floor"].default
    extra_i2_noise: bool = SETTINGS["extra_i2_noise"].default
    min_honest_clients: int | None = None
    corrupt_fraction: float | None = None
    split: Mapping[str, float] | None = None
    statistics: tuple[str, ...] | None = None
    broadcast_bounds: bool = SETTINGS["broadcast_bounds"].default
    adaptive_floor: bool = SETTINGS["adaptive_floor"].default
    floor_quantile: float = SETTINGS["floor_quantile"].default
    noise_shape: NoiseShape = SETTINGS["noise_shape"].default
    dispersion_center: DispersionCenter = SETTINGS["dispersion_center"].default
    extra: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        # The declared rules of fa_hetdp.config.rules, reported as ``grid.<attribute>``; the
        # crossed values are lists. cgm + gdp is not an error here: such cells are skipped.
        values = {
            "epsilon": self.epsilons,
            "delta": self.delta,
            "mechanism": self.mechanisms,
            "placement": self.placements,
            "composition": self.compositions,
            "repeats": self.repeats,
            "seed": self.seed,
            "profile": self.profile,
            "variance_floor": self.variance_floor,
            "extra_i2_noise": self.extra_i2_noise,
            "min_honest_clients": self.min_honest_clients,
            "corrupt_fraction": self.corrupt_fraction,
            "split": self.split,
            "statistics": self.statistics,
            "broadcast_bounds": self.broadcast_bounds,
            "adaptive_floor": self.adaptive_floor,
            "floor_quantile": self.floor_quantile,
            "noise_shape": self.noise_shape,
            "dispersion_center": self.dispersion_center,
        }
        if self.corrupt_fraction is None:  # not stated: nothing to check
            del values["corrupt_fraction"]
        crossed = {n: n + "s" for n in ("epsilon", "mechanism", "placement", "composition")}
        raise_problems(
            "GridSpec",
            validate(
                values,
                lambda name: f"grid.{crossed.get(name, name)}",
                lists=crossed,
                skip=("composition-supported",),
            ),
        )

    @staticmethod
    def skip_reason(mechanism: str, composition: str) -> str | None:
        """Why a cell cannot run (the declared ``composition-supported`` rule), or None."""
        return cross_rule("composition-supported").check(
            {"mechanism": mechanism, "composition": composition}
        )

    def cells(self) -> Iterator[tuple[float, Mechanism, Placement, Composition]]:
        """Yield the cells in canonical order (ε, mechanism, placement, composition)."""
        for eps in self.epsilons:
            for mechanism in self.mechanisms:
                for placement in self.placements:
                    for composition in self.compositions:
                        yield float(eps), mechanism, placement, composition

    @property
    def n_cells(self) -> int:
        """Number of cells (including those that will be skipped)."""
        return (
            len(self.epsilons)
            * len(self.mechanisms)
            * len(self.placements)
            * len(self.compositions)
        )

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dictionary of the specification."""
        data = asdict(self)
        data["split"] = dict(self.split) if self.split is not None else None
        return data


def _name_word(name: str) -> int:
    """Return a 32-bit word derived from ``name`` alone (BLAKE2b of its UTF-8 bytes)."""
    return int.from_bytes(hashlib.blake2b(name.encode("utf-8"), digest_size=4).digest(), "little")


def cell_seed(
    seed: int, epsilon: float, mechanism: str, placement: str, composition: str
) -> np.random.SeedSequence:
    """Return the :class:`numpy.random.SeedSequence` of one grid cell.

    The cell's stream is a child of ``SeedSequence(seed)`` whose spawn key is the cell itself:
    the 64 bits of ``epsilon`` and one 32-bit word hashed from each of the names of the
    mechanism, placement and composition. The key depends on those values only, never on list
    positions, so a cell's noise depends only on the seed and on the cell: not on the rest of
    the grid, and not on which mechanisms (placements, compositions) the package allows, so
    adding a mechanism leaves the draws of the existing ones unchanged. Runs on different data
    with the same seed (e.g. the six skew levels of the reproduction) therefore use the same
    noise draws for the same cell (common random numbers), while different cells of one run
    are independent.

    Parameters
    ----------
    seed
        The scenario's seed (>= 0).
    epsilon, mechanism, placement, composition
        The cell.

    Returns
    -------
    numpy.random.SeedSequence
    """
    eps_bits = int(np.array(epsilon, dtype=np.float64).view(np.uint64))
    key = (
        eps_bits & 0xFFFFFFFF,
        eps_bits >> 32,
        _name_word(mechanism),
        _name_word(placement),
        _name_word(composition),
    )
    return np.random.SeedSequence(seed, spawn_key=key)


def grid_from_scenario(
    scenario: Any,
    *,
    repeats: int | None = None,
    epsilons: Sequence[float] | None = None,
    compositions: Sequence[Composition] | None = None,
    mechanisms: Sequence[Mechanism] | None = None,
    placements: Sequence[Placement] | None = None,
) -> GridSpec:
    """Build the :class:`GridSpec` of a :class:`fa_hetdp.config.scenario.Scenario`.

    Parameters
    ----------
    scenario
        A validated scenario.
    repeats, epsilons, compositions, mechanisms, placements
        Overrides (``--quick`` runs, ``bench-noise``); default: the scenario's values.

    Returns
    -------
    GridSpec
    """
    privacy = scenario.privacy
    return GridSpec(
        epsilons=tuple(float(e) for e in (epsilons if epsilons is not None else privacy.epsilons)),
        delta=float(privacy.delta),
        mechanisms=tuple(mechanisms if mechanisms is not None else privacy.mechanisms),
        placements=tuple(placements if placements is not None else scenario.protocol.placements),
        compositions=tuple(compositions if compositions is not None else (privacy.composition,)),
        repeats=int(repeats if repeats is not None else scenario.experiment.repeats),
        seed=int(scenario.experiment.seed),
        profile=privacy.profile,
        variance_floor=float(privacy.variance_floor),
        extra_i2_noise=bool(privacy.extra_i2_noise),
        min_honest_clients=privacy.min_honest_clients,
        corrupt_fraction=float(scenario.secagg.corrupt_fraction),
        split=privacy.split_mapping(),
        statistics=privacy.statistics,
        broadcast_bounds=privacy.broadcast_bounds,
        adaptive_floor=privacy.adaptive_floor,
        floor_quantile=privacy.floor_quantile,
        noise_shape=privacy.noise_shape,
        dispersion_center=privacy.dispersion_center,
        extra=privacy.extra,
    )
