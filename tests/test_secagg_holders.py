"""The server aborts when a seed or key cannot get ``t`` shares, before any unmask request.

Found by the soak (``benchmarks/soak_bench.py``, session 19 of seed 50): 100 clients on the
complete graph, ``t = 75`` of the 99 share holders, 25 dropped at stage 2's masked input.
The server compared the 75 survivors with ``t`` and sent unmask requests; but a survivor's
own share does not count (its holders are its neighbours), so each survivor's seed had 74
surviving holders and all 75 refused: a round wasted and every survivor reported as a
dropout of the step. The rule is the clients' (``secagg.refusals``): every survivor's
self-mask seed and every dropped neighbour's mask key needs ``t`` shares from survivors
other than its owner.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_secagg_server import D, enc, shared, x_values

from fa_hetdp.secagg.errors import ProtocolAborted, UnmaskRefused


def _masked(n: int, t: int, skip: tuple[int, ...], neighbours: object = "complete"):
    server, clients = shared(n=n, t=t, summations=1, neighbours=neighbours)
    requests = server.start_summation(enc(n))
    x = x_values(n)
    for i, request in requests.items():
        if i not in skip:
            reply = clients[i].masked_input(request, x[i], rng=np.random.default_rng(i))
            server.receive_masked_input(reply)
    return server, clients, x


def test_survivors_equal_to_t_abort_before_any_unmask_request() -> None:
    # n = 8, t = 7 = every holder: one dropout leaves 7 survivors, each seed with 6 holders
    server, _, _ = _masked(8, 7, skip=(3,))
    with pytest.raises(ProtocolAborted, match="6 surviving share holders, fewer than threshold 7"):
        server.unmask_requests()
    assert server.phase == "aborted"


def test_the_clients_would_have_refused_the_request_the_server_no_longer_sends() -> None:
    # the clients' own rule, unchanged: with the check off they refuse (the soak's symptom)
    server, clients, _ = _masked(8, 7, skip=(3,))
    server._check_holders = lambda survivors: None  # type: ignore[method-assign]
    requests = server.unmask_requests()
    for i, request in requests.items():
        with pytest.raises(UnmaskRefused, match="6 of its share holders"):
            clients[i].unmask(request)


def test_one_more_holder_than_t_unmasks_and_sums_exactly() -> None:
    server, clients, x = _masked(8, 6, skip=(3,))
    for i, request in server.unmask_requests().items():
        server.receive_unmask(clients[i].unmask(request))
    result = server.finish_summation()
    expected = x[[i for i in range(8) if i != 3]].sum(axis=0)
    assert np.all(np.abs(result.sum - expected) <= result.max_error)
    assert result.sum.shape == (D,)


def test_on_a_sparse_graph_one_short_survivor_aborts() -> None:
    # k = 4 neighbours, t = 4: a survivor that lost one neighbour has 3 holders left
    server, _, _ = _masked(10, 4, skip=(0,), neighbours=4)
    with pytest.raises(ProtocolAborted, match="surviving share holders, fewer than threshold 4"):
        server.unmask_requests()
