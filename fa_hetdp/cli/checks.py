"""Checks of a run's settings that need the data's dimension, made before Flower starts.

:func:`ring_problems` asks whether the masked sums of every summation fit the run's ring
``Z_2^m`` (:func:`fa_hetdp.config.secagg.resolve_modulus_bits`: 32 bits for ddg and skellam
unless stated, 64 otherwise). It makes the ServerApp's own encoding choice
(:func:`fa_hetdp.protocol.client.contribution_encoding`, the function ``server.strategy``
calls: ddg/skellam's lattice in the ring, else the fixed-point scales of the contribution
bounds plus the noise-share tail bounds) for the largest ``n`` a run can have (every sampled
client) and the plan at ``v_min`` (the largest ``W``, the adaptive floor's stage-0 plan), so
a setting that would be refused at the first masked input is refused here, with the ring, the
reason and what to change.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

from fa_hetdp.config.rules import Problem, raise_problems
from fa_hetdp.errors import BaselineWarning, PrivacyParameterError
from fa_hetdp.flowerkit.settings import RunSettings
from fa_hetdp.protocol.client import contribution_encoding
from fa_hetdp.protocol.plan import SumStage, plan_protocol
from fa_hetdp.secagg.errors import EncodingError

__all__ = ["check_ring", "ring_problems"]

_PLACEHOLDERS: Mapping[str, object] = {
    "node-wait-timeout": 1.0,
    "stage-timeout": 1.0,
    "result-path": "unused",
}


def ring_problems(run_config: Mapping[str, object], dim: int) -> list[Problem]:
    """Return one problem per summation whose masked sum cannot fit the run's ring.

    Parameters
    ----------
    run_config : mapping
        The run config ``fa-hetdp run`` submits (the scenario and its overrides).
    dim : int
        ``d``, the dimension of a client's vector.

    Returns
    -------
    list of (str, str)
        ``("secagg.modulus_bits", why and what to do)``, empty when every sum fits.
    """
    settings = RunSettings.from_run_config({**_PLACEHOLDERS, **run_config})
    n, bits = settings.num_clients, settings.modulus_bits
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BaselineWarning)
        plan = plan_protocol(settings.protocol, n=n, d=dim)
    stages: tuple[SumStage, ...] = (0, 1, 2) if plan.adaptive else (1, 2)
    mechanism = settings.protocol.mechanism
    stated = settings.scenario.secagg.modulus_bits is not None or (
        run_config.get("secagg-modulus-bits", 0) != 0
    )
    where = f"as stated: {bits} bits" if stated else f"the default for mechanism {mechanism!r}"
    refused: list[tuple[SumStage, Exception]] = []
    for stage in stages:
        try:  # the ServerApp's own choice (server.strategy), stage 1 checking stage 2 too
            contribution_encoding(plan, stage, n, modulus_bits=bits)
        except (EncodingError, PrivacyParameterError) as exc:
            refused.append((stage, exc))
    if not refused:
        return []
    fix = (
        "set [secagg] modulus_bits = 64 in the scenario (run config: secagg-modulus-bits=64)"
        if bits < 64
        else "use fewer clients or a larger variance_floor (a smaller W)"
    )
    listed = ", ".join(str(stage) for stage, _ in refused)
    reason = (
        f"the masked sums of stage {listed} cannot fit the ring Z_2^{bits} ({where}) with "
        f"n={n} clients and d={dim}: {refused[0][1]} To run it, {fix}."
    )
    problems: list[Problem] = [("secagg.modulus_bits", reason)]
    return problems


def check_ring(run_config: Mapping[str, object], dim: int) -> None:
    """Raise :func:`ring_problems` as one ``ConfigError`` (nothing when every sum fits).

    Raises
    ------
    ConfigError
        Before Flower starts: the ring, why a sum could wrap, and what to set.
    """
    raise_problems("run settings", ring_problems(run_config, dim))
