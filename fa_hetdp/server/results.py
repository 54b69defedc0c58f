"""The result document's privacy part and where the ServerApp writes it.

Privacy, stated so that it holds (docs/deployment.md, "Reading a result"):

- A setting that is not differentially private (the ``paper`` profile; CGM at a per-release
  epsilon >= 1) shows no epsilon: ``"differentially_private": false`` with the reasons.
- Every ``(epsilon, delta)`` shown is one guarantee of the exact composition
  (Dong, Roth & Su, Cor. 3.3) of what was released: epsilon at the target delta, and the
  target epsilon at its exact delta (two readings of the same ``mu``-GDP curve).
- A release with missing noise shares spends more than the target; :func:`degraded_refusal`
  applies the run's policy (``max-epsilon``, ``on-degraded``) before it goes out.
- An abort after stage 1 was released records that release and its cost
  (:func:`stage1_spent`).

Writing (:func:`write_result`): ``{run_id}`` in the configured path becomes Flower's run id
(one file per run); a failure never replaces a success (it goes beside it); a path that cannot
be written leaves the result in a fallback file named in the log. While the run goes on the
file says ``"status": "running"`` and lists what was released so far with its cost (the
strategy rewrites it after each release); at the end it says ``"success"`` or ``"aborted"``.
A ServerApp stopped before its end (its SuperLink stopped, the process killed) leaves it
``"running"``: :func:`read_result`, the reader for every tool, marks such a file aborted once
the run is known to be over, keeping the releases it records.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fa_hetdp.dp.accounting import PrivacySpent
from fa_hetdp.dp.lattice import SENSITIVITY_INFLATION
from fa_hetdp.flowerkit.settings import RunSettings
from fa_hetdp.protocol.client import stage_lattice
from fa_hetdp.protocol.floor import FLOOR_BUDGET_SHARE, FLOOR_RELEASE, FloorChoice
from fa_hetdp.protocol.guarantee import guarantee_of
from fa_hetdp.protocol.plan import ProtocolPlan
from fa_hetdp.protocol.server import Stage1Release, privacy_spent_of
from fa_hetdp.report.files import write_json_atomic
from fa_hetdp.secagg.params import SecAggParameters

__all__ = [
    "STAGE1_RELEASES",
    "UNFINISHED_REASON",
    "degraded_refusal",
    "floor_section",
    "not_private_reasons",
    "privacy_section",
    "read_result",
    "result_path",
    "secagg_section",
    "simulation_caveats",
    "stage1_spent",
    "words_section",
    "write_result",
]

#: Flower's logger (a child of ``flwr``): ``flwr log`` and ``flwr run --stream`` show it.
log = logging.getLogger("flwr.fa_hetdp.server")

#: The reason given to a result file found ``"running"`` after its run ended.
UNFINISHED_REASON = (
    "the run ended while its result file still said 'running': the ServerApp was stopped "
    "before it finished (its SuperLink stopped or restarted, or the process killed); what it "
    "had released by then is listed under privacy.released, with its cost"
)

#: Releases of stage 1 (broadcast to the clients before stage 2).
STAGE1_RELEASES = ("floor", "mean", "weighted")  # before stage 2 ("floor": adaptive_floor)


def not_private_reasons(plan: ProtocolPlan) -> list[str]:
    """Return why the plan is not a DP guarantee (empty when it is one).

    The ``paper`` profile (its weighted stages ignore the weights) and a mechanism used
    outside its guarantee (CGM at a per-release epsilon >= 1): the plan's
    :attr:`~fa_hetdp.protocol.plan.ProtocolPlan.not_dp_because`.
    """
    return list(plan.not_dp_because)


def _number(value: float) -> float | str:
    return float(value) if math.isfinite(value) else str(value)


def _plain(value: Any) -> Any:
    if isinstance(value, (float, np.floating)):
        return _number(float(value))
    if isinstance(value, np.integer):
        return int(value)
    return value


def _pairs(plan: ProtocolPlan, epsilon: float, delta_at_target: float) -> list[Any]:
    """Return two readings of one ``mu``-GDP guarantee: ε at the target δ, δ at the target ε."""
    return [
        {"epsilon": _number(epsilon), "delta": plan.config.delta},
        {"epsilon": plan.config.epsilon, "delta": _number(delta_at_target)},
    ]


def floor_section(plan: ProtocolPlan, choice: FloorChoice | None) -> dict[str, Any] | None:
    """Return the document's ``adaptive_floor`` part: floor, noisy histogram, release cost.

    The count of floored clients is the histogram's noisy estimate (never an exact count).
    """
    if choice is None:
        return None
    release = plan.budget.release(FLOOR_RELEASE)
    return {**choice.as_dict(), "budget_share": FLOOR_BUDGET_SHARE, "mu": release.mu_share}


def stage1_spent(
    plan: ProtocolPlan, fraction1: float, fraction0: float = 1.0, *, stage1: bool = True
) -> dict[str, Any]:
    """Privacy spent before stage 2 (``fraction1`` of the stage-1 noise arrived).

    With ``adaptive_floor`` the stage-0 histogram counts too (``fraction0`` of its noise);
    ``stage1=False``: only the histogram was released.
    """
    full = privacy_spent_of(plan, fraction1, 1.0, fraction0)
    names = STAGE1_RELEASES if stage1 else ("floor",)
    terms = [r.mu**2 for r in full.per_release if r.name in names and r.counts_for_privacy]
    mu = math.sqrt(math.fsum(terms)) if terms else 0.0
    if math.isinf(mu):
        eps, delta_at = math.inf, 1.0
    elif mu == 0.0:
        eps, delta_at = 0.0, 0.0
    else:
        # Gaussian: Thm 2.10 with sigma/Delta = 1/mu; ddg/skellam: zCDP rho = mu^2/2
        conf = plan.config
        eps, delta_at = plan.mechanism.guarantee(mu, delta=conf.delta, epsilon=conf.epsilon)
    return {"mu": _number(mu), "guarantees": _pairs(plan, eps, delta_at)}


def simulation_caveats(settings: RunSettings) -> tuple[str, ...]:
    """Return what a seeded simulation does not protect, for the result's guarantee.

    A ``mode = "simulation"`` run with a seed draws every noise share from that seed, so
    anyone who knows it can remove the noise; a malicious-server simulation whose nodes hold no
    roster also derives their identity keys from the seed
    (:func:`fa_hetdp.flowerkit.settings.simulation_identities`); central placement, which a
    node accepts only by its own policy (the simulated nodes: the scenario's ``[nodes]``), lets
    the server see the exact sum. The (epsilon, delta) is what the protocol gives when the
    noise is secret, as in a deployment (CSPRNG noise, a roster).
    """
    if settings.mode != "simulation" or settings.seed is None:
        return ()
    caveats = [
        f"seeded simulation (seed {settings.seed}): every noise share follows from the seed, "
        "so the privacy stated describes the protocol, not a protection of these data; a "
        "deployment draws its noise from a CSPRNG"
    ]
    if settings.threat_model == "malicious-server":
        caveats.append(
            "malicious-server simulation: nodes without a roster use identity keys derived "
            "from the seed, so the key-substitution defence is exercised, not in force"
        )
    if settings.protocol.placement == "central":
        caveats.append(
            "central placement: the server adds all the noise and sees the exact sum; a node "
            "accepts it only by its own policy (node config allow-central-placement = true; a "
            "Flower simulation's nodes: the scenario's [nodes] allow_central_placement = true)"
        )
    return tuple(caveats)


def privacy_section(
    plan: ProtocolPlan,
    spent: PrivacySpent | None,
    *,
    released: Sequence[str],
    stage1_fraction: float | None = None,
    floor_fraction: float | None = None,
    secagg: SecAggParameters | None = None,
    caveats: Sequence[str] = (),
) -> dict[str, Any]:
    """Return the document's ``privacy`` part.

    Its ``guarantee`` (:func:`fa_hetdp.protocol.guarantee.guarantee_of`) states the unit of
    privacy and the adversary (with the secure-aggregation sentence of ``secagg``), and the
    ``(epsilon, delta)`` of a finished run (None for both when the setting is not DP).

    Parameters
    ----------
    plan : ProtocolPlan
        The run's plan.
    spent : PrivacySpent or None
        The exact composition of every release (a finished run); None when the run stopped
        before stage 2 was released.
    released : sequence of str
        What went out, in words (``"stage 1: mu', mu_bar' broadcast to 12 clients"``).
    stage1_fraction : float, optional
        The stage-1 noise fraction, when stage 1 (only) was released.
    floor_fraction : float, optional
        The stage-0 histogram's noise fraction, when it was released (``adaptive_floor``).
    secagg : SecAggParameters, optional
        The run's secure aggregation (:meth:`RunSettings.secagg_parameters`).
    caveats : sequence of str, optional
        What the run's settings weaken (:func:`simulation_caveats`), stated in the guarantee.
    """
    reasons = not_private_reasons(plan)
    section: dict[str, Any] = {"differentially_private": not reasons, "released": list(released)}
    guarantee = guarantee_of(plan, spent, secagg=secagg, caveats=caveats).as_dict()
    if spent is None and guarantee["dp"]:  # not finished: "guarantees" below has the pair
        guarantee["epsilon"] = guarantee["delta"] = None
    section["guarantee"] = guarantee
    if reasons:
        section["not_private_because"] = reasons
        return section  # no epsilon for a setting that is not DP
    section["target_epsilon"] = plan.config.epsilon
    section["target_delta"] = plan.config.delta
    if spent is not None:
        epsilon, delta_at = spent.epsilon, spent.delta_at_target_epsilon
        if epsilon is None or delta_at is None:  # what was released is not DP after all
            section["differentially_private"] = False
            section["not_private_because"] = list(spent.not_dp) or ["no epsilon holds"]
            return section
        section.update(
            {
                "guarantees": _pairs(plan, epsilon, delta_at),
                "epsilon_spent": _number(epsilon),
                "delta": spent.delta,
                "mu": _number(spent.mu),
                "delta_at_target_epsilon": delta_at,
                "degraded": spent.degraded,
                "composition": spent.accounting,  # how the releases were composed
                "per_release": [
                    {k: _plain(v) for k, v in dataclasses.asdict(r).items()}
                    for r in spent.per_release
                ],
            }
        )
    elif stage1_fraction is not None:
        fraction0 = 1.0 if floor_fraction is None else floor_fraction
        section.update(stage1_spent(plan, stage1_fraction, fraction0))
        section["degraded"] = min(stage1_fraction, fraction0) < 1.0
    elif floor_fraction is not None:  # only the stage-0 histogram went out
        section.update(stage1_spent(plan, 1.0, floor_fraction, stage1=False))
        section["degraded"] = floor_fraction < 1.0
    else:
        section["guarantees"] = []  # nothing released: nothing spent
    return section


def secagg_section(
    settings: RunSettings, plan: ProtocolPlan | None = None, stage1: Stage1Release | None = None
) -> dict[str, Any]:
    """Return the secure-aggregation section: gamma, delta, sigma, eta, (k, t), guarantee, ring.

    ``degree`` and ``threshold`` are the run's (``settings.neighbours``, ``.threshold``);
    ``guarantee`` is :meth:`secagg.params.SecAggParameters.guarantee` in words. With the
    ``plan`` and the ``stage1`` release, ``words`` says what the masked words carry: for a
    distributed ``ddg``/``skellam`` run the lattice integers (:func:`words_section`).
    """
    p = settings.secagg_parameters()
    words = {} if plan is None else {"words": words_section(settings, plan, stage1)}
    return {
        "threat_model": p.threat_model,
        "corrupt_fraction": p.gamma,
        "dropout_tolerance": p.delta,
        "security_bits": p.sigma,
        "correctness_bits": p.eta,
        "degree": p.degree,
        "threshold": p.threshold,
        "privacy_failure_log2": _number(p.privacy_failure),
        "correctness_failure_log2": _number(p.correctness_failure),
        "guarantee": p.guarantee(),
        "shortfalls": list(p.shortfalls()),  # failure bounds above their targets
        "modulus_bits": settings.modulus_bits,  # the ring Z_2^m the masked words live in
        **words,
    }


def words_section(
    settings: RunSettings, plan: ProtocolPlan, stage1: Stage1Release | None
) -> dict[str, Any]:
    """Return what the stage-1/2 masked words carry; for ``ddg``/``skellam``, the lattice.

    ``gamma``: ``[min, max]`` of the lattice steps per stage (stage 0 with ``adaptive_floor``,
    stage 2 at the broadcast); ``refusal_probability``: bound on some client's value being
    refused for exceeding its stated bound
    (:attr:`~fa_hetdp.dp.lattice.Lattice.refusal_probability`); ``wrap_probability``: bound
    on some coordinate of the stage's sum wrapping around ``Z_2^m`` (the ring holds the sum
    of ``n`` values but for the summed noise's tail,
    :attr:`~fa_hetdp.dp.lattice.Lattice.wrap_probability`).
    """
    bits = settings.modulus_bits
    lattices = {"stage1": stage_lattice(plan, 1, modulus_bits=bits)}
    if plan.adaptive:
        lattices = {"stage0": stage_lattice(plan, 0, modulus_bits=bits), **lattices}
    if stage1 is not None:
        broadcast = (stage1.mu_prime_broadcast, stage1.weighted_mu_prime)
        lattices["stage2"] = stage_lattice(plan, 2, modulus_bits=bits, broadcast=broadcast)
    if lattices["stage1"] is None:
        return {"carry": "fixed-point encoding of the real-valued noisy contributions"}
    out: dict[str, Any] = {
        "carry": "lattice integers R + Z mod 2^m: randomized rounding of the contribution "
        "at step gamma plus the exact integer noise share (decoded exactly)",
        "gamma": {},
        "refusal_probability": {},
        "wrap_probability": {},
        "sensitivity_inflation": SENSITIVITY_INFLATION,
    }
    for stage, lattice in lattices.items():
        if lattice is not None:
            noisy = lattice.gamma[lattice.units > 0.0]
            out["gamma"][stage] = [float(noisy.min()), float(noisy.max())] if noisy.size else []
            out["refusal_probability"][stage] = lattice.refusal_probability
            out["wrap_probability"][stage] = lattice.wrap_probability
    return out


def degraded_refusal(settings: RunSettings, epsilon: float | None, what: str) -> str | None:
    """Return why ``what`` (a release spending ``epsilon``) must not go out, or None.

    ``on-degraded = "refuse"`` (default) refuses above ``max-epsilon`` (default: the target);
    ``"release"`` refuses only above an explicit ``max-epsilon``. ``epsilon`` None: the
    setting is not DP (no epsilon to cap; the result says so), never refused here.
    """
    if epsilon is None:
        return None
    target = settings.protocol.epsilon
    cap = settings.max_epsilon
    if cap is None:
        cap = target if settings.on_degraded == "refuse" else math.inf
    if epsilon <= cap * (1.0 + 1e-9):
        return None
    return (
        f"{what} would spend epsilon={epsilon:.4g} at delta={settings.protocol.delta:.3g} "
        f"(noise shares missing), above max-epsilon={cap:.4g} (target epsilon={target:.4g}); "
        f"refused (on-degraded={settings.on_degraded!r}; set max-epsilon or "
        "on-degraded='release' to allow it)"
    )


def result_path(template: Path, run_id: int | str | None) -> Path:
    """Return the result path: ``{run_id}`` in ``template`` becomes the run id."""
    text = str(template)
    if "{run_id}" in text:
        text = text.replace("{run_id}", "local" if run_id is None else str(run_id))
    return Path(text)


def write_result(path: Path, document: Mapping[str, Any]) -> Path:
    """Write ``document`` at ``path``, never replacing a success with a failure; return where.

    A failure whose path holds a successful result goes beside it
    (``<stem>-<run id>-<status>.json``). If the path cannot be written the result goes to
    ``fa-hetdp-result-<run id>.json`` in the temporary directory, and the log says where.

    Raises
    ------
    OSError
        Neither the path nor the fallback could be written.
    """
    if document.get("status") != "success":
        with contextlib.suppress(OSError, ValueError, AttributeError):
            if json.loads(path.read_text()).get("status") == "success":
                run_id = document.get("run_id") or "local"
                path = path.with_name(f"{path.stem}-{run_id}-{document.get('status')}.json")
    try:
        write_json_atomic(path, dict(document))
        return path
    except OSError as exc:
        fallback = Path(tempfile.gettempdir()) / (
            f"fa-hetdp-result-{document.get('run_id') or 'local'}.json"
        )
        write_json_atomic(fallback, dict(document))
        log.error("fa-hetdp: cannot write %s (%s); the result is in %s", path, exc, fallback)
        return fallback


def read_result(path: Path, *, ended: bool = True) -> dict[str, Any] | None:
    """Read a result file; one still ``"running"`` after its run ``ended`` becomes aborted.

    The document then gets ``"status": "aborted"`` and :data:`UNFINISHED_REASON`, and keeps
    everything else (what was released, with its cost); the file is rewritten so (atomically;
    if it cannot be, the returned document still says aborted). ``ended=False`` (a run that
    may still be going on) returns the file as it is.

    Returns
    -------
    dict or None
        None when there is no file or it does not hold a JSON object.
    """
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(loaded, dict):
        return None
    if ended and loaded.get("status") == "running":
        loaded = {"status": "aborted", "reason": UNFINISHED_REASON, **loaded}
        loaded["status"] = "aborted"
        with contextlib.suppress(OSError):
            write_json_atomic(path, loaded)
        log.warning("fa-hetdp: %s was left running; marked aborted", path)
    return loaded
