"""The graph degree ``k`` and the threshold ``t`` from the adversary (Bell et al., CCS 2020).

A client's Shamir shares go to its ``k`` neighbours only (never to itself), and ``t`` of
those ``k`` shares reconstruct a secret. With a fraction ``gamma`` of corrupt clients and a
fraction ``delta`` of clients that drop out, fixed before the random ring permutation of
:mod:`fa_hetdp.secagg.graph` is drawn, the number of corrupt neighbours of a client is (close to,
and dominated by) ``Bin(k, gamma)`` and the number of surviving neighbours ``Bin(k, 1 -
delta)``. Bell et al. (CCS 2020, Sec. 3.2, Thm 3.6) choose ``(k, t)`` so that, over all ``n``
clients (a union bound),

    privacy:      n * P[Bin(k, gamma) >= t]      <= 2^-sigma   (no coalition of corrupt
                                                                 neighbours reaches t)
    correctness:  n * P[Bin(k, 1 - delta) < t]   <= 2^-eta     (every client keeps t
                                                                 surviving share holders)

and, for the sparse graph, the honest survivors stay connected (the degree rule of
:func:`secagg.graph.default_degree` with ``f = gamma + delta``). :func:`choose_parameters`
returns the smallest ``k`` for which some ``t`` meets both tails, with the smallest such
``t`` (more tolerance for dropouts); the tails are exact (integer arithmetic over the
binary fractions of ``gamma`` and ``delta``). ``k >= n - 1`` means the complete graph
(``k = n - 1`` share holders per client).

Malicious server (``threat_model = "malicious-server"``): the consistency round
(:mod:`fa_hetdp.secagg.consistency`) needs more than half of the session, plus the corrupt clients,
to sign one survivor list; :func:`min_signatures` gives that count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

__all__ = [
    "THREAT_MODELS",
    "UNSHARED_SEED",
    "SecAggParameters",
    "ThreatModel",
    "binomial_tail_at_least",
    "choose_parameters",
    "min_private_threshold",
    "min_signatures",
]

ThreatModel = Literal["honest-but-curious", "malicious-server"]
THREAT_MODELS: tuple[ThreatModel, ...] = ("honest-but-curious", "malicious-server")


def binomial_tail_at_least(k: int, p: Fraction, t: int) -> Fraction:
    """Return ``P[Bin(k, p) >= t]`` exactly (``p`` a fraction in [0, 1])."""
    if t <= 0:
        return Fraction(1)
    if t > k:
        return Fraction(0)
    num, den = p.numerator, p.denominator
    rest = den - num
    total = sum(math.comb(k, i) * num**i * rest ** (k - i) for i in range(t, k + 1))
    return Fraction(total, den**k)


def _fraction(value: float, name: str) -> Fraction:
    if not 0.0 <= value < 1.0 or math.isnan(value):
        raise ValueError(f"{name} must lie in [0, 1), got {value}.")
    return Fraction(value)


def min_signatures(n: int, gamma: float) -> int:
    """Return the signatures on one survivor list a client needs against a malicious server.

    Honest clients sign one list per summation; corrupt ones may sign two. Two different
    lists with ``m`` valid signatures each need ``2 m - c <= n`` signers, ``c = ceil(gamma
    n)`` corrupt, so ``m = floor((n + c) / 2) + 1`` makes the accepted list unique
    (Bonawitz et al., CCS 2017, Sec. 6: ``t > (n + n_C) / 2``).
    """
    corrupt = math.ceil(gamma * n - 1e-12)
    return (n + corrupt) // 2 + 1


def min_private_threshold(n: int, degree: int, gamma: float, sigma: float = 40.0) -> int:
    """Return the smallest ``t`` a client accepts for ``gamma`` against an honest server.

    The privacy tail of :func:`choose_parameters`: the smallest ``t >= 2`` with ``n *
    P[Bin(k, gamma) >= t] <= 2^-sigma`` for ``k = min(degree, n - 1)`` share holders
    (``k + 1``, never met, when no ``t <= k`` is private enough).
    """
    k = min(degree, n - 1)
    g, bound = _fraction(gamma, "gamma"), Fraction(2.0**-sigma)
    t = next((t for t in range(1, k + 1) if n * binomial_tail_at_least(k, g, t) <= bound), k + 1)
    return max(t, 2)


@dataclass(frozen=True)
class SecAggParameters:
    """A graph degree and threshold with the guarantee they give.

    Attributes
    ----------
    n, degree, threshold : int
        Clients, neighbours per client (``n - 1``: the complete graph), shares needed.
    gamma, delta : float
        Tolerated fractions of corrupt and of dropped clients.
    sigma, eta : float
        Security and correctness parameters (failure at most ``2^-sigma`` / ``2^-eta``).
    privacy_failure, correctness_failure : float
        ``log2`` of ``n * P[Bin(k, gamma) >= t]`` and of ``n * P[Bin(k, 1 - delta) < t]``.
    threat_model : str
        ``"honest-but-curious"`` or ``"malicious-server"``.
    """

    n: int
    degree: int
    threshold: int
    gamma: float
    delta: float
    sigma: float
    eta: float
    privacy_failure: float
    correctness_failure: float
    threat_model: ThreatModel = "honest-but-curious"

    @property
    def complete(self) -> bool:
        """Whether the degree is the complete graph's."""
        return self.degree >= self.n - 1

    def guarantee(self) -> str:
        """Return the guarantee in words."""
        graph = "the complete graph" if self.complete else f"a random {self.degree}-regular graph"
        corrupt = math.ceil(self.gamma * self.n - 1e-12)
        if self.threat_model == "malicious-server":
            server = (
                "a server that may deviate (malicious: it may drop, reorder, alter or invent "
                "messages and show clients different views)"
            )
            assumes = (
                " Assumed: every data owner holds the same roster of Ed25519 identity keys, "
                "distributed out of band and compared by its SHA-256, and a client accepts "
                "only round-0 keys signed by the roster member their owner claims to be (the "
                "server can neither substitute keys nor add clients off the roster); the "
                "identity keys stay with their owners; at most gamma n = "
                f"{corrupt} of the {self.n} clients collude with the server, a bound each "
                "node enforces itself (its secagg-min-gamma: t >= floor((n + ceil(gamma n)) / "
                "2) + 1, whatever the run config says); a consistency round of Ed25519 "
                "signatures binds every unmasking to one survivor list. Not covered: traffic "
                "analysis, and a roster member that colludes counts among the gamma n."
            )
        else:
            server = (
                "an honest-but-curious server (it follows the protocol and forwards every "
                "public key as received)"
            )
            assumes = ""
        return (
            f"n = {self.n} clients on {graph}: each client's secrets are shared among its "
            f"{min(self.degree, self.n - 1)} neighbours (never itself), t = {self.threshold} "
            f"shares reconstruct one. Against {server} colluding with up to a fraction "
            f"gamma = {self.gamma:g} of the clients, no client's input is exposed "
            f"{_failure(self.privacy_failure, self.sigma)}; with up to {self.delta:.3g} of "
            "the clients dropping out (the dropout tolerance of the secure aggregation, not "
            f"the DP delta), every sum completes {_failure(self.correctness_failure, self.eta)}."
            + assumes
            + UNSHARED_SEED
        )

    def shortfalls(self) -> tuple[str, ...]:
        """Return a line per failure bound above its target (empty: both targets met)."""
        out = []
        if self.privacy_failure > -self.sigma:
            out.append(
                f"secure aggregation: an input may be exposed with probability up to "
                f"2^{self.privacy_failure:.1f}, above the target 2^-{self.sigma:g} (raise "
                "the threshold or the degree, or state a smaller gamma)"
            )
        if self.correctness_failure > -self.eta:
            out.append(
                f"secure aggregation: a sum may fail to complete with probability up to "
                f"2^{self.correctness_failure:.1f}, above the target 2^-{self.eta:g}, with "
                f"{self.delta:.3g} of the clients dropping out (lower the threshold, raise the "
                "degree, or expect an aborted run)"
            )
        return tuple(out)


UNSHARED_SEED = (
    " Not identified: a client that masks with a seed it did not share leaves a mask nothing "
    "removes; the sum falls outside the range honest inputs can reach and is refused, so that "
    "summation (and the run) aborts without naming the client (the server sees only the sum; "
    "naming it would need a proof that each masked input used the committed seed)."
)
"""The limitation every :meth:`SecAggParameters.guarantee` states (issue 28)."""


def _failure(log2_p: float, target_bits: float) -> str:
    """Return ``except with probability <= 2^x (target 2^-y)``, ``: missed`` when it is."""
    if log2_p == -math.inf:
        return f"(failure probability 0; target 2^-{target_bits:g})"
    missed = "" if log2_p <= -target_bits else ": missed"
    return f"except with probability <= 2^{log2_p:.1f} (target 2^-{target_bits:g}{missed})"


def _log2(x: Fraction) -> float:
    if x == 0:
        return -math.inf
    return math.log2(x.numerator) - math.log2(x.denominator)


def choose_parameters(
    n: int,
    *,
    gamma: float,
    delta: float,
    sigma: float = 40.0,
    eta: float = 20.0,
    threat_model: ThreatModel = "honest-but-curious",
) -> SecAggParameters:
    """Return the smallest ``(k, t)`` meeting the privacy and correctness tails above.

    Parameters
    ----------
    n : int
        Number of clients, ``>= 3``.
    gamma, delta : float
        Fractions in ``[0, 1)`` of corrupt and of dropped clients.
    sigma, eta : float
        Privacy and correctness failure bounds ``2^-sigma``, ``2^-eta``.
    threat_model : str
        With ``"malicious-server"`` the threshold is also at least :func:`min_signatures`
        restricted to the complete graph (Bonawitz et al.'s consistency round).

    Raises
    ------
    ValueError
        No ``(k, t)`` with ``k <= n - 1`` meets both bounds; the message names the binding
        constraint and its best achievable value.
    """
    if n < 3:
        raise ValueError(f"need at least 3 clients, got n={n}.")
    if threat_model not in THREAT_MODELS:
        raise ValueError(f"threat_model must be one of {THREAT_MODELS}, got {threat_model!r}.")
    g, d = _fraction(gamma, "gamma"), _fraction(delta, "delta")
    if g + d >= 1:
        raise ValueError(f"gamma + delta must be < 1, got {gamma} + {delta}.")
    if not sigma > 0 or not eta > 0:
        raise ValueError(f"sigma and eta must be positive, got sigma={sigma}, eta={eta}.")
    bound_p, bound_c = Fraction(2.0**-sigma), Fraction(2.0**-eta)  # exact binary fractions
    # connectivity of the honest survivors (graph.default_degree) with f = gamma + delta
    bad = float(g + d)
    k_conn = 2 if bad == 0 else 2 * math.ceil((sigma + 2 * math.log2(n)) / (2 * math.log2(1 / bad)))
    best: tuple[int, float, float] | None = None
    for k in range(2, n):
        complete = k == n - 1
        if not complete and (k % 2 or k < k_conn):
            continue
        # smallest t with n P[Bin(k, gamma) >= t] <= 2^-sigma
        t_low = next(
            (t for t in range(1, k + 1) if n * binomial_tail_at_least(k, g, t) <= bound_p), None
        )
        if threat_model == "malicious-server":
            if not complete:
                continue
            t_low = max(t_low or k + 1, min_signatures(n, gamma))
        # correctness: n P[Bin(k, 1 - delta) < t] = n P[Bin(k, delta) > k - t] <= 2^-eta
        if t_low is not None and t_low <= k:
            t_low = max(t_low, 2)
            fail_c = n * binomial_tail_at_least(k, d, k - t_low + 1)
            if fail_c <= bound_c:
                fail_p = n * binomial_tail_at_least(k, g, t_low)
                return SecAggParameters(
                    n=n,
                    degree=k,
                    threshold=t_low,
                    gamma=gamma,
                    delta=delta,
                    sigma=sigma,
                    eta=eta,
                    privacy_failure=_log2(fail_p),
                    correctness_failure=_log2(fail_c),
                    threat_model=threat_model,
                )
            best = (k, _log2(n * binomial_tail_at_least(k, g, t_low)), _log2(fail_c))
        elif complete:
            t_top = k
            best = (k, _log2(n * binomial_tail_at_least(k, g, t_top)), math.nan)
    if best is None or math.isnan(best[2]):
        k = n - 1
        achievable = _log2(n * binomial_tail_at_least(k, g, k))
        raise ValueError(
            f"no (k, t) for n={n}, gamma={gamma}: the privacy constraint binds; even t = k = "
            f"n - 1 = {k} gives n P[Bin(k, gamma) >= t] = 2^{achievable:.1f} > 2^-{sigma:g}. "
            "Lower gamma or sigma, or add clients."
        )
    raise ValueError(
        f"no (k, t) for n={n}, gamma={gamma}, delta={delta}: the correctness constraint binds; "
        f"at k = {best[0]} the smallest private t leaves n P[Bin(k, 1 - delta) < t] = "
        f"2^{best[2]:.1f} > 2^-{eta:g}. Lower delta or eta, or add clients."
    )
