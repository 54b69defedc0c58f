"""The secure-aggregation graph and threshold: one resolution, its rules and its guarantee.

A client's Shamir shares go to its share holders (:func:`share_holders`: its ``k``
neighbours, or the other ``n - 1`` clients on the complete graph; never itself) and ``t`` of
them reconstruct a secret. ``[secagg]`` states ``(neighbours, threshold)`` either explicitly
(a degree or ``"complete"``; a fraction of the holders or a count) or as ``"auto"``: the
smallest ``(k, t)`` that :func:`secagg.params.choose_parameters` finds for the stated
adversary (Bell et al., CCS 2020, Thm 3.6), namely

- ``corrupt_fraction`` (gamma): the fraction of clients that may collude with the server;
- ``dropout_tolerance`` (delta): the fraction of clients that may drop out while every sum
  still completes (the secure-aggregation correctness parameter; neither the DP ``delta`` of
  ``[privacy]`` nor the *simulated* ``dropout_fraction``);
- ``security_bits`` (sigma) and ``correctness_bits`` (eta): failure bounds ``2^-sigma`` and
  ``2^-eta`` over all ``n`` clients;
- ``threat_model``: ``"honest-but-curious"`` or ``"malicious-server"``.

:func:`resolve_graph` is THE resolution (the scenario's derived values and the Flower run
settings both call it), and :func:`secagg_parameters` returns the
:class:`~secagg.params.SecAggParameters` of any ``(k, t)``, explicit or ``"auto"``, with the
exact failure probabilities under the stated gamma and delta, so
``SecAggParameters.guarantee()`` says in words what a configuration protects.

:func:`resolve_modulus_bits` is THE resolution of the ring ``Z_2^m`` of the masked sums: an
explicit ``modulus_bits`` (64 or 32) wins; left out, it follows the mechanism
(:data:`DEFAULT_MODULUS_BITS`): 32 for the discrete mechanisms ``"ddg"`` and ``"skellam"``
(they aggregate in ``Z_m``, ``m = 2^32``, as Kairouz, Liu & Steinke 2021 and Agarwal, Kairouz
& Liu 2021 do), 64 for the Gaussian ones. The Flower run settings call it, so the result
document records the ring actually used. The check functions here are declared as rules in
:data:`fa_hetdp.config.rules.CROSS_RULES`.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Final

from fa_hetdp.dp.mechanisms import DiscreteMechanism, get_mechanism
from fa_hetdp.secagg.encoding import MODULUS_BITS
from fa_hetdp.secagg.params import (
    THREAT_MODELS,
    SecAggParameters,
    ThreatModel,
    binomial_tail_at_least,
    choose_parameters,
    min_signatures,
)

__all__ = [
    "AUTO",
    "DEFAULT_CORRECTNESS_BITS",
    "DEFAULT_MODULUS_BITS",
    "DEFAULT_SECAGG_THRESHOLD",
    "DEFAULT_SECURITY_BITS",
    "MIN_SPARSE_DEGREE",
    "MODULUS_BITS",
    "THREAT_MODELS",
    "auto_parameters",
    "graph_degree",
    "malicious_complete",
    "malicious_gamma_possible",
    "malicious_threshold",
    "modulus_supported",
    "resolve_graph",
    "resolve_modulus_bits",
    "resolve_threshold",
    "secagg_parameters",
    "share_holders",
]

AUTO: Final = "auto"
DEFAULT_SECAGG_THRESHOLD: Final[float] = 2.0 / 3.0
DEFAULT_SECURITY_BITS: Final[float] = 40.0
DEFAULT_CORRECTNESS_BITS: Final[float] = 20.0
MIN_SPARSE_DEGREE: Final[int] = 4
#: The ring's bits when ``modulus_bits`` is left out: by the mechanism's kind.
DEFAULT_MODULUS_BITS: Final[Mapping[str, int]] = {"discrete": 32, "gaussian": 64}


def _is_count(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def graph_degree(neighbours: str | int | None, num_clients: int) -> int | None:
    """Return the masking graph's degree ``k``, or None for the complete graph.

    ``"complete"``, None and any ``k >= n - 1`` all mean the complete graph (``"auto"`` is
    resolved first, by :func:`resolve_graph`).
    """
    if neighbours is None or neighbours == "complete":
        return None
    k = int(neighbours)
    return None if k >= num_clients - 1 else k


def share_holders(num_clients: int, neighbours: str | int | None) -> int:
    """Return a client's Shamir share holders: its ``k`` neighbours, or ``n - 1`` (never itself)."""
    return num_clients - 1 if (k := graph_degree(neighbours, num_clients)) is None else k


def resolve_threshold(
    threshold: float | int, num_clients: int, neighbours: str | int | None
) -> int:
    """Return an explicit secure-aggregation threshold as a count of shares.

    Parameters
    ----------
    threshold : float or int
        A fraction in (0, 1] of a client's share holders (rounded up, at least 2), or an
        integer count.
    num_clients : int
        ``n``.
    neighbours : "complete", int or None
        The masking graph (see :func:`graph_degree`).
    """
    if _is_count(threshold):
        return int(threshold)
    holders = share_holders(num_clients, neighbours)
    return max(2, math.ceil(float(threshold) * holders - 1e-9))


@functools.lru_cache(maxsize=256)
def auto_parameters(
    num_clients: int,
    gamma: float,
    delta: float,
    sigma: float = DEFAULT_SECURITY_BITS,
    eta: float = DEFAULT_CORRECTNESS_BITS,
    threat_model: ThreatModel = "honest-but-curious",
) -> SecAggParameters:
    """Return :func:`secagg.params.choose_parameters` for these settings (cached).

    Raises
    ------
    ValueError
        No ``(k, t)`` exists; the message names the binding constraint.
    """
    return choose_parameters(
        num_clients, gamma=gamma, delta=delta, sigma=sigma, eta=eta, threat_model=threat_model
    )


def resolve_graph(
    num_clients: int,
    neighbours: str | int,
    threshold: str | float | int,
    *,
    gamma: float = 0.0,
    delta: float = 0.0,
    sigma: float = DEFAULT_SECURITY_BITS,
    eta: float = DEFAULT_CORRECTNESS_BITS,
    threat_model: ThreatModel = "honest-but-curious",
) -> tuple[int | None, int]:
    """Return the masking degree (None: complete graph) and the threshold count of a run.

    THE resolution: ``"auto"`` (both keys) takes ``(k, t)`` from :func:`auto_parameters`;
    otherwise the degree is :func:`graph_degree` and the threshold :func:`resolve_threshold`.
    """
    if neighbours == AUTO or threshold == AUTO:
        p = auto_parameters(num_clients, gamma, delta, sigma, eta, threat_model)
        return graph_degree(p.degree, num_clients), p.threshold
    return graph_degree(neighbours, num_clients), resolve_threshold(
        threshold,  # type: ignore[arg-type]  # not AUTO here
        num_clients,
        neighbours,
    )


def resolve_modulus_bits(modulus_bits: int | None, mechanism: str) -> int:
    """Return the bits ``m`` of the ring ``Z_2^m`` a run with ``mechanism`` aggregates in.

    THE resolution: an explicit ``modulus_bits`` (64 or 32) wins; None (left out) is
    :data:`DEFAULT_MODULUS_BITS` of the mechanism's kind: 32 for the discrete mechanisms
    (``"ddg"``, ``"skellam"``: the papers' ``m = 2^32``), 64 for the Gaussian ones.

    Parameters
    ----------
    modulus_bits : int or None
        The stated ring (``[secagg] modulus_bits``, run config ``secagg-modulus-bits``), or
        None for the mechanism's default.
    mechanism : str
        A registered mechanism name (:func:`fa_hetdp.dp.mechanisms.mechanism_names`).

    Raises
    ------
    PrivacyParameterError
        ``mechanism`` is not registered (with the allowed names).
    """
    if modulus_bits is not None:
        return int(modulus_bits)
    discrete = isinstance(get_mechanism(mechanism), DiscreteMechanism)
    return DEFAULT_MODULUS_BITS["discrete" if discrete else "gaussian"]


def _log2(x: Fraction) -> float:
    return -math.inf if x == 0 else math.log2(x.numerator) - math.log2(x.denominator)


def secagg_parameters(
    num_clients: int,
    neighbours: str | int,
    threshold: str | float | int,
    *,
    gamma: float = 0.0,
    delta: float = 0.0,
    sigma: float = DEFAULT_SECURITY_BITS,
    eta: float = DEFAULT_CORRECTNESS_BITS,
    threat_model: ThreatModel = "honest-but-curious",
) -> SecAggParameters:
    """Return the degree, threshold and guarantee of a ``[secagg]`` setting for ``n`` clients.

    For ``"auto"`` this is :func:`auto_parameters`; for explicit values, the resolved
    ``(k, t)`` with the exact failure probabilities ``log2(n P[Bin(k, gamma) >= t])`` and
    ``log2(n P[Bin(k, 1 - delta) < t])`` (which may miss the targets ``2^-sigma``,
    ``2^-eta``: the guarantee says both).
    """
    if neighbours == AUTO or threshold == AUTO:
        return auto_parameters(num_clients, gamma, delta, sigma, eta, threat_model)
    degree, t = resolve_graph(num_clients, neighbours, threshold)
    k = num_clients - 1 if degree is None else degree
    g, d = Fraction(gamma), Fraction(delta)
    return SecAggParameters(
        n=num_clients,
        degree=k,
        threshold=t,
        gamma=gamma,
        delta=delta,
        sigma=sigma,
        eta=eta,
        privacy_failure=_log2(num_clients * binomial_tail_at_least(k, g, t)),
        correctness_failure=_log2(num_clients * binomial_tail_at_least(k, d, k - t + 1)),
        threat_model=threat_model,
    )


# --------------------------------------------------------------------------------------------
# Rules between settings (declared in fa_hetdp.config.rules.CROSS_RULES)
# --------------------------------------------------------------------------------------------


def modulus_supported(v: Mapping[str, Any]) -> str | None:
    """Rule ``modulus-bits``: the ring is ``Z_2^64`` or ``Z_2^32`` (:data:`MODULUS_BITS`).

    None (left out) is allowed: the mechanism's default (:func:`resolve_modulus_bits`).
    """
    bits = v["modulus_bits"]
    if bits is not None and bits not in MODULUS_BITS:
        return (
            f"must be one of {MODULUS_BITS} (the ring Z_2^m of the sums), or left out (run "
            "config: 0) for the mechanism's default, 32 for ddg and skellam and 64 for the "
            f"Gaussian mechanisms; got {bits}"
        )
    return None


def neighbours_even(v: Mapping[str, Any]) -> str | None:
    """Rule ``degree-even``: a sparse degree is even and at least :data:`MIN_SPARSE_DEGREE`."""
    k, n = v["neighbours"], v["num_clients"]
    if k == AUTO or graph_degree(k, n) is None:
        return None
    if k < MIN_SPARSE_DEGREE or k % 2:
        return (
            f"must be 'complete', 'auto' or an even integer k >= {MIN_SPARSE_DEGREE} (k >= n - 1 "
            f"= {n - 1} is the complete graph), got {k}"
        )
    return None


def threshold_within_holders(v: Mapping[str, Any]) -> str | None:
    """Rule ``threshold-within-holders``: an explicit count lies in ``2 .. holders``."""
    t, n, k = v["threshold"], v["num_clients"], v["neighbours"]
    if t == AUTO or k == AUTO:
        return None  # auto-together / secagg-parameters-exist report these
    if _is_count(k) and graph_degree(k, n) is not None and neighbours_even(v):
        return None  # the degree is already reported
    holders = share_holders(n, k)
    count = resolve_threshold(t, n, k)
    if not 2 <= count <= holders:
        return (
            f"an integer is a count of shares and must be in 2..{holders} (the share holders "
            f"of a client), got {t} (write a float such as 0.5 for a fraction of the holders)"
        )
    return None


def auto_together(v: Mapping[str, Any]) -> str | None:
    """Rule ``auto-together``: ``"auto"`` chooses ``k`` and ``t`` together, or neither."""
    k, t = v["neighbours"], v["threshold"]
    if (k == AUTO) != (t == AUTO):
        return (
            f"'auto' chooses the degree and the threshold together: set both neighbours and "
            f"threshold to 'auto' or neither (got neighbours={k!r}, threshold={t!r})"
        )
    return None


def parameters_exist(v: Mapping[str, Any]) -> str | None:
    """Rule ``secagg-parameters-exist``: ``"auto"`` has a solution (else why it has none).

    A malicious-server ``gamma`` that no threshold meets is reported by
    :func:`malicious_gamma_possible` instead (with the reason).
    """
    if v["neighbours"] != AUTO and v["threshold"] != AUTO:
        return None
    if v["threat_model"] == "malicious-server" and _malicious_floor(v)[1] is not None:
        return None
    try:
        auto_parameters(
            int(v["num_clients"]),
            float(v["corrupt_fraction"]),
            float(v["dropout_tolerance"]),
            float(v["security_bits"]),
            float(v["correctness_bits"]),
            v["threat_model"],
        )
    except ValueError as exc:
        return f"'auto' has no solution: {exc}"
    return None


def _malicious_floor(v: Mapping[str, Any]) -> tuple[int, int | None]:
    """Return the malicious-server threshold floor and the smallest ``n`` that meets it.

    The second is None when this ``n`` already does (some ``t <= n - 1`` meets the floor).
    """
    n, gamma = int(v["num_clients"]), float(v["corrupt_fraction"])
    needed = min_signatures(n, gamma)
    if needed <= n - 1:
        return needed, None
    enough = next((m for m in range(n + 1, 10**6) if min_signatures(m, gamma) <= m - 1), 10**6)
    return needed, enough


def malicious_gamma_possible(v: Mapping[str, Any]) -> str | None:
    """Rule ``malicious-server-gamma``: some threshold meets the malicious-server floor.

    Against a malicious server every node refuses a session whose threshold is below
    :func:`secagg.params.min_signatures` ``(n, gamma)`` (``gamma``: the larger of its own
    ``secagg-min-gamma`` and the run's ``corrupt_fraction``, so at least the run's), and a
    client's shares go to the other ``n - 1`` clients, never itself: with ``t > n - 1`` no node
    can accept the run (with ``n = 3`` no ``gamma > 0``). Refused before the run starts rather
    than by every node after a key round.
    """
    if v["threat_model"] != "malicious-server":
        return None
    needed, enough = _malicious_floor(v)
    if enough is None:
        return None
    n, gamma = int(v["num_clients"]), float(v["corrupt_fraction"])
    return (
        f"no node can accept a malicious-server session of n = {n} clients guarding against "
        f"gamma = {gamma:g}: each node needs threshold >= floor((n + ceil(gamma n)) / 2) + 1 "
        f"= {needed} shares, and a client's shares go to the other n - 1 = {n - 1} clients "
        f"(never itself); use corrupt_fraction = 0 with {n} clients, or at least {enough} "
        f"clients for gamma = {gamma:g}"
    )


def malicious_complete(v: Mapping[str, Any]) -> str | None:
    """Rule ``malicious-server-complete``: an explicit graph is the complete graph.

    Against a malicious server every node refuses a session on a sparse graph (the
    consistency round needs the complete graph, :mod:`fa_hetdp.secagg.consistency`).
    """
    if v["threat_model"] != "malicious-server" or v["neighbours"] == AUTO:
        return None
    n, k = int(v["num_clients"]), v["neighbours"]
    degree = graph_degree(k, n)
    if degree is None:
        return None
    return (
        f"every node refuses a malicious-server session that is not on the complete graph "
        f"(its consistency round needs it); {k} is a {degree}-regular graph for n = {n}: use "
        "'complete' (run config: secagg-neighbours = 0) or 'auto'"
    )


def malicious_threshold(v: Mapping[str, Any]) -> str | None:
    """Rule ``malicious-server-threshold``: an explicit threshold nodes can accept.

    Against a malicious server every node refuses a session whose threshold is below
    :func:`secagg.params.min_signatures` ``(n, gamma)`` (:mod:`fa_hetdp.secagg.consistency`),
    ``gamma`` at least the run's ``corrupt_fraction``. ``"auto"`` meets it
    (:func:`parameters_exist`); a ``gamma`` that no threshold meets is
    :func:`malicious_gamma_possible`'s, a sparse graph :func:`malicious_complete`'s.
    """
    if v["threat_model"] != "malicious-server" or AUTO in (v["neighbours"], v["threshold"]):
        return None
    n, k, gamma = int(v["num_clients"]), v["neighbours"], float(v["corrupt_fraction"])
    needed, enough = _malicious_floor(v)
    if enough is not None or graph_degree(k, n) is not None:
        return None
    t = resolve_threshold(v["threshold"], n, k)
    if t < needed and threshold_within_holders(v) is None:
        return (
            f"every node refuses a malicious-server session (n = {n} clients, gamma = "
            f"{gamma:g}) whose threshold is below floor((n + ceil(gamma n)) / 2) + 1 = "
            f"{needed}; {v['threshold']} is {t} shares: use a count from {needed} to the "
            f"{n - 1} share holders, or 'auto'"
        )
    return None
