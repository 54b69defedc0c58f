"""Pairwise masks bound to the summation's public inputs (``context``).

A server that shows some clients other public inputs than the rest (a raised floor, another
silo's count: inputs the clients calibrate their noise shares to) must not get a decodable sum:
every pairwise mask is bound to the digest of the inputs its client was shown
(:func:`fa_hetdp.secagg.crypto.bind_mask_key`), so masks of two clients shown different inputs
do not cancel. ``tests/test_meta_flower.py`` runs the attack over Flower's message path.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from fa_hetdp.secagg import crypto
from fa_hetdp.secagg.encoding import choose_encoding
from fa_hetdp.secagg.errors import EncodingError
from fa_hetdp.secagg.inprocess import InProcessSession
from fa_hetdp.secagg.server import SumResult

N, D = 6, 4
SHOWN = hashlib.sha256(b"the broadcast every client was shown").digest()
OTHER = hashlib.sha256(b"a raised floor, shown to one client").digest()


def _sum(
    contexts: dict[int, bytes], server_context: bytes, *, drop: int | None = None
) -> tuple[SumResult, np.ndarray]:
    rng = np.random.default_rng(7)
    session = InProcessSession(N, threshold=4, neighbours="complete", rng=rng)
    values = rng.uniform(-1.0, 1.0, (N, D))
    encoding = choose_encoding(N, np.ones(D), noise_std=np.zeros(D), noise_tail=12.0)
    requests = session.server.start_summation(encoding, server_context)
    for i, request in requests.items():
        if i == drop:
            continue
        reply = session.clients[i].masked_input(request, values[i], rng=rng, context=contexts[i])
        session.server.receive_masked_input(reply)
    unmask = session.server.unmask_requests()
    for i in session.server.survivors:
        session.server.receive_unmask(session.clients[i].unmask(unmask[i]))
    kept = [i for i in range(N) if i != drop]
    return session.server.finish_summation(), values[kept].sum(axis=0)


@pytest.mark.parametrize("drop", [None, 2])
def test_clients_shown_the_same_inputs_sum_exactly(drop: int | None) -> None:
    result, want = _sum(dict.fromkeys(range(N), SHOWN), SHOWN, drop=drop)
    assert np.all(np.abs(result.sum - want) <= np.asarray(result.max_error) + 1e-12)


def test_a_client_shown_other_inputs_leaves_the_sum_undecodable() -> None:
    contexts = dict.fromkeys(range(N), SHOWN)
    contexts[3] = OTHER
    # the masks of client 3 and each peer do not cancel: every word is uniform in Z_2^64, and
    # the sum's range check refuses it (a uniform word lands in range with probability 1.5e-3
    # per coordinate: all D = 4 of them, 5e-12)
    with pytest.raises(EncodingError, match="a mask that does not cancel"):
        _sum(contexts, SHOWN)


def test_the_server_needs_the_same_inputs_to_remove_a_dropped_clients_masks() -> None:
    # the server's own digest enters only where it removes a dropped client's masks
    with pytest.raises(EncodingError, match="a mask that does not cancel"):
        _sum(dict.fromkeys(range(N), SHOWN), OTHER, drop=2)


def test_no_context_leaves_the_keys_as_they_were() -> None:
    key = bytes(range(32))
    assert crypto.bind_mask_key(key, b"") == key
    bound = crypto.bind_mask_key(key, SHOWN)
    assert len(bound) == 32 and bound not in (key, crypto.bind_mask_key(key, OTHER))
