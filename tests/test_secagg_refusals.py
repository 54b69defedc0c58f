"""O(k) messages and state, n from the key directory, and the client's checks (secagg.refusals).

Every message a client receives or sends names its neighbourhood only, so its size and the
client's state do not grow with n; the checks that used the session's full id lists are made
against the client's own neighbourhood and the counts bound into the session id.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fa_hetdp.secagg import choose_encoding, crypto
from fa_hetdp.secagg.client import SecAggClient
from fa_hetdp.secagg.errors import MessageRejected, ProtocolAborted, UnmaskRefused
from fa_hetdp.secagg.server import SecAggServer

K, T, D = 8, 5, 4


def keyed(n: int, *, neighbours: Any = K, t: int = T, silent: frozenset[int] = frozenset()):
    """A session through advertise-keys; ``silent`` clients never advertise."""
    server = SecAggServer(
        range(n), threshold=t, num_summations=2, neighbours=neighbours, rng=np.random.default_rng(3)
    )
    clients = {i: SecAggClient(i) for i in range(n)}
    setups = server.setup_messages()
    for i, c in clients.items():
        if i not in silent:
            server.receive_advertise_keys(c.advertise_keys(setups[i]))
    return server, clients, server.key_directory()


def shared(n: int, **kwargs: Any):
    server, clients, directories = keyed(n, **kwargs)
    for i, directory in directories.items():
        server.receive_share_keys(clients[i].share_keys(directory))
    return server, clients


def ids_in(message: dict[str, Any]) -> int:
    """The longest id or key list (or first array axis) a message carries."""
    sizes = [len(v) for v in message.values() if isinstance(v, list | tuple)]
    sizes += [v.shape[0] for v in message.values() if isinstance(v, np.ndarray) and v.ndim == 3]
    return max(sizes, default=0)


def one_summation(n: int) -> tuple[int, int]:
    """Run one summation at degree K, 2 dropouts; return (longest list, client state bytes)."""
    server, clients, directories = keyed(n)
    longest = max(ids_in(m) for m in server.setup_messages().values())
    longest = max(longest, *(ids_in(m) for m in directories.values()))
    for i, directory in directories.items():
        reply = clients[i].share_keys(directory)
        longest = max(longest, ids_in(reply))
        server.receive_share_keys(reply)
    requests = server.start_summation(choose_encoding(n, np.ones(D)))
    x = np.random.default_rng(0).uniform(-1, 1, size=(n, D))
    for i, request in requests.items():
        longest = max(longest, ids_in(request))
        if i not in (0, 1):
            server.receive_masked_input(
                clients[i].masked_input(request, x[i], rng=np.random.default_rng(i))
            )
    for i, request in server.unmask_requests().items():
        reply = clients[i].unmask(request)
        longest = max(longest, ids_in(request), ids_in(reply))
        server.receive_unmask(reply)
    result = server.finish_summation()
    np.testing.assert_allclose(result.sum, x[2:].sum(axis=0), atol=float(result.max_error.max()))
    return longest, len(clients[5].to_bytes())


def test_every_message_and_the_client_state_are_o_k_not_o_n():
    small_longest, small_state = one_summation(40)
    large_longest, large_state = one_summation(400)
    assert small_longest <= K + 1 and large_longest <= K + 1  # the neighbourhood, itself included
    # a 10x larger session leaves one client's serialised state the same size (ids are a few
    # digits longer), where an O(n) id list would add ~3 KB
    assert large_state - small_state < 200


def test_setup_shows_only_the_neighbourhood_and_the_graph_digest():
    server, _, _ = keyed(30)
    setup = server.setup_messages()[7]
    assert tuple(setup["neighbours"]) == server.graph.neighbours(7)
    assert tuple(setup["points"]) == tuple(j + 1 for j in server.graph.neighbours(7))  # ranks
    assert setup["graph_digest"] == crypto.id_digest(server.graph.ring)
    assert setup["num_clients"] == 30


def test_session_size_is_the_directory_count_not_the_setup_count():
    _, clients = shared(12, silent=frozenset({3}))
    others = [c for i, c in clients.items() if i != 3]
    assert {c.num_clients for c in others} == {12}  # invited, merely stated
    assert {c.session_size for c in others} == {11}  # advertised: the directory's count


def test_complete_graph_directory_that_miscounts_its_keys_is_refused():
    _, clients, directories = keyed(6, neighbours="complete", t=3)
    # 6 keys shown: the complete graph shows every advertised key
    for stated, match in ((5, "num_advertised"), (7, "shows 6 keys")):
        with pytest.raises(MessageRejected, match=match):
            clients[0].share_keys({**directories[0], "num_advertised": stated})
    clients[0].share_keys(directories[0])
    assert clients[0].session_size == 6


def test_sparse_directory_cannot_state_more_clients_than_were_invited():
    _, clients, directories = keyed(30)
    with pytest.raises(MessageRejected, match="invited 30"):
        clients[0].share_keys({**directories[0], "num_advertised": 31})


def test_a_different_count_shown_to_one_client_breaks_its_share_channels():
    # the count and digest enter the session id: a client told n' != n derives other channel
    # keys, so it can open none of its neighbours' shares, and they report its own as
    # unreadable (the server then drops it)
    server, clients, directories = keyed(30)
    victim = 4
    for i, directory in directories.items():
        if i == victim:
            directory = {**directory, "num_advertised": 20}
        server.receive_share_keys(clients[i].share_keys(directory))
    assert clients[victim].session_size == 20
    assert clients[victim].session_id != clients[0].session_id
    requests = server.start_summation(choose_encoding(30, np.ones(D)))
    x = np.zeros(D)
    with pytest.raises(ProtocolAborted, match="usable shares arrived from 0"):
        clients[victim].masked_input(requests[victim], x, rng=np.random.default_rng(0))
    neighbour = server.graph.neighbours(victim)[0]
    reply = clients[neighbour].masked_input(requests[neighbour], x, rng=np.random.default_rng(0))
    assert reply["rejected"] == (victim,)


def test_another_digest_of_the_advertised_ids_also_breaks_the_channels():
    server, clients, directories = keyed(30)
    for i, directory in directories.items():
        forged = {**directory, "advertised_digest": bytes(32)} if i == 4 else directory
        server.receive_share_keys(clients[i].share_keys(forged))
    requests = server.start_summation(choose_encoding(30, np.ones(D)))
    with pytest.raises(ProtocolAborted, match="usable shares arrived from 0"):
        clients[4].masked_input(requests[4], np.zeros(D), rng=np.random.default_rng(0))


def test_directory_with_keys_of_a_non_neighbour_is_refused():
    server, clients, directories = keyed(30)
    stranger = next(j for j in range(30) if j != 0 and j not in server.graph.neighbours(0))
    directory = dict(directories[0])
    owners = sorted([*directory["key_owners"], stranger])
    row = owners.index(stranger)
    for field, value in (
        ("channel_keys", server.keys[stranger].channel_key),
        ("mask_keys", server.keys[stranger].mask_keys),
        ("signing_keys", b""),
        ("identities", b""),
        ("identity_signatures", b""),
    ):
        directory[field] = (*directory[field][:row], value, *directory[field][row:])
    directory["key_owners"] = tuple(owners)
    with pytest.raises(MessageRejected, match="not neighbours"):
        clients[0].share_keys(directory)


def masked(n: int, **kwargs: Any):
    server, clients = shared(n, **kwargs)
    requests = server.start_summation(choose_encoding(n, np.ones(D)))
    for i, request in requests.items():
        x = np.zeros(D)
        server.receive_masked_input(
            clients[i].masked_input(request, x, rng=np.random.default_rng(i))
        )
    return server, clients, server.unmask_requests()


def test_sparse_unmask_request_names_the_neighbourhood_and_counts_everyone():
    server, _, requests = masked(30)
    request = requests[0]
    assert set(request["survivors"]) == {0, *server.graph.neighbours(0)}
    assert request["num_survivors"] == 30 and request["dropped"] == ()


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda r, s: {"survivors": (*r["survivors"], s)}, "unknown ids"),
        (lambda r, s: {"dropped": (s,)}, "unknown ids"),
        (lambda r, s: {"num_survivors": len(r["survivors"]) - 1}, "counts"),
        (lambda r, s: {"num_survivors": T - 1, "survivors": r["survivors"][: T - 1]}, "fewer"),
        (lambda r, s: {"dropped": (r["survivors"][1],)}, "both"),
        (lambda r, s: {"survivors": (*r["survivors"][:2], *r["survivors"][:2])}, "duplicate"),
    ],
)
def test_sparse_unmask_request_checks_hold_on_the_neighbourhood(change, match):
    server, clients, requests = masked(30)
    stranger = next(j for j in range(30) if j != 0 and j not in server.graph.neighbours(0))
    forged = {**requests[0], **change(requests[0], stranger)}
    with pytest.raises(UnmaskRefused, match=match):
        clients[0].unmask(forged)
    reply = clients[0].unmask(requests[0])  # a refusal leaves the state usable
    assert set(reply["seed_owners"]) == set(server.graph.neighbours(0))


def test_complete_graph_unmask_count_must_equal_the_list():
    _, clients, requests = masked(6, neighbours="complete", t=3)
    with pytest.raises(UnmaskRefused, match="counts 7 survivors but lists 6"):
        clients[0].unmask({**requests[0], "num_survivors": 7})


def test_a_client_reveals_only_shares_of_its_own_neighbours():
    # the "never both shares" rule needs only the neighbourhood: a client holds no other share
    server, clients, requests = masked(30)
    for i, request in requests.items():
        reply = clients[i].unmask(request)
        owners = set(reply["seed_owners"]) | set(reply["key_owners"])
        assert owners <= set(server.graph.neighbours(i))
        assert not set(reply["seed_owners"]) & set(reply["key_owners"])
