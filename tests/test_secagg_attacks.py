"""Attacks on secure aggregation that used to succeed (issue: secure aggregation hardened).

Each test plays a deviating party against the real client and server state machines and
asserts the outcome the hardened protocol guarantees: a wrong sum is never returned, a
cheater is identified, a coalition does not recover an input.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_secagg_blame import resign

from fa_hetdp.secagg import crypto, shamir
from fa_hetdp.secagg.client import SecAggClient
from fa_hetdp.secagg.encoding import choose_encoding
from fa_hetdp.secagg.errors import MessageRejected, ProtocolAborted, UnmaskRefused
from fa_hetdp.secagg.inprocess import in_process_identities
from fa_hetdp.secagg.messages import ConsistencyRequest, UnmaskRequest
from fa_hetdp.secagg.server import SecAggServer

D = 8


def _session(n, t, *, neighbours="complete", consistency=False, threat_model=None, gamma=0.0):
    server = SecAggServer(
        range(n),
        threshold=t,
        num_summations=1,
        neighbours=neighbours,
        rng=np.random.default_rng(3),
        consistency=consistency,
    )
    model = threat_model or ("malicious-server" if consistency else "honest-but-curious")
    keys, roster = in_process_identities(n) if model == "malicious-server" else ({}, None)
    clients = {
        i: SecAggClient(i, threat_model=model, gamma=gamma, identity=keys.get(i), roster=roster)
        for i in range(n)
    }
    setup = server.setup_messages()
    for c in clients.values():
        server.receive_advertise_keys(c.advertise_keys(setup[c.client_id]))
    return server, clients


def _inputs(n, seed=0):
    return np.random.default_rng(seed).integers(-100, 100, size=(n, D)).astype(np.float64)


def _masked(server, clients, x, skip=()):
    requests = server.start_summation(choose_encoding(len(clients), np.full(D, 100.0)))
    replies = {}
    for i, request in requests.items():
        if i not in skip:
            replies[i] = clients[i].masked_input(request, x[i], rng=np.random.default_rng(i))
            server.receive_masked_input(replies[i])
    return replies


# ------------------------------------------------------------------------------ finding 2
def test_share_keys_omitting_a_neighbour_is_rejected_not_a_wrong_sum():
    # Before: accepted; client 0 masked with 1 one way only and the sum was off by ~1e3.
    n = 6
    server, clients = _session(n, 3)
    directories = server.key_directory()
    x = _inputs(n)
    for i, c in clients.items():
        reply = c.share_keys(directories[i])
        if i == 0:  # deviating client: leaves out its neighbour 1
            keep = [k for k, r in enumerate(reply["recipients"]) if r != 1]
            reply = {
                **reply,
                "recipients": [reply["recipients"][k] for k in keep],
                "ciphertexts": [reply["ciphertexts"][k] for k in keep],
            }
        try:
            server.receive_share_keys(reply)
        except MessageRejected:
            assert i == 0
    _masked(server, clients, x, skip={0})
    requests = server.unmask_requests()
    for i in server.survivors:
        server.receive_unmask(clients[i].unmask(requests[i]))
    result = server.finish_summation()
    assert 0 not in result.survivors
    assert np.array_equal(result.sum, x[list(result.survivors)].sum(axis=0))


def test_shifted_self_mask_seed_share_is_detected_and_its_sender_excluded():
    # Before: an in-range shifted seed share went unchecked and the sum was off by ~1e3.
    n = 7
    server, clients = _session(n, 3)
    directories = server.key_directory()
    for i, c in clients.items():
        server.receive_share_keys(c.share_keys(directories[i]))
    x = _inputs(n, seed=1)
    _masked(server, clients, x)
    requests = server.unmask_requests()
    for i in server.survivors:
        reply = clients[i].unmask(requests[i])
        if i == 1:  # cheater: shifts its share of client 0's seed, staying in [0, p)
            shares = reply["seed_shares"].copy()
            row = list(reply["seed_owners"]).index(0)
            shares[row, 0, 0] = (int(shares[row, 0, 0]) + 12345) % shamir.PRIME
            reply = resign(clients[i], {**reply, "seed_shares": shares})
        server.receive_unmask(reply)
    result = server.finish_summation()
    assert np.array_equal(result.sum, x.sum(axis=0))
    assert result.cheaters == (1,)


def test_seed_commitment_binds_session_id_and_summation():
    seed = bytes(range(32))
    base = crypto.commit_seed(b"s" * 32, 4, 0, seed)
    assert base != crypto.commit_seed(b"t" * 32, 4, 0, seed)
    assert base != crypto.commit_seed(b"s" * 32, 5, 0, seed)
    assert base != crypto.commit_seed(b"s" * 32, 4, 1, seed)


# ------------------------------------------------------------------------------ finding 1
def test_own_share_never_counts_a_timed_out_neighbourhood_cannot_expose_a_client():
    # Before: t counted the target's own share, so with t - 1 colluders as the only other
    # "survivors" (the server timed out every honest neighbour) the target unmasked and the
    # sum of three inputs, minus the colluders' own, was the target's input.
    n, t = 7, 3
    server, clients = _session(n, t)
    directories = server.key_directory()
    for i, c in clients.items():
        server.receive_share_keys(c.share_keys(directories[i]))
    x = _inputs(n, seed=2)
    _masked(server, clients, x, skip={3, 4, 5, 6})  # honest neighbours "time out"
    # an honest server aborts here (tests/test_secagg_holders.py); a malicious one asks anyway
    server._check_holders = lambda survivors: None  # type: ignore[method-assign]
    requests = server.unmask_requests()
    assert server.survivors == (0, 1, 2)
    with pytest.raises(UnmaskRefused, match="fewer than threshold"):
        clients[0].unmask(requests[0])
    for i in (1, 2):  # honest or not, the colluders' own state machines refuse as well
        with pytest.raises(UnmaskRefused):
            clients[i].unmask(requests[i])
    with pytest.raises(ProtocolAborted):
        server.finish_summation()


# ------------------------------------------------------------------------------ finding 4
def _split_view_attack(n, t, colluders, *, consistency, gamma=0.0):
    """A server shows client 0 as survivor to group A and as dropped to group B.

    Returns client 0's input as recovered by the server and the colluders, or raises the
    refusal of an honest client.
    """
    server, clients = _session(n, t, consistency=consistency, gamma=gamma)
    directories = server.key_directory()
    for i, c in clients.items():
        server.receive_share_keys(c.share_keys(directories[i]))
    x = _inputs(n, seed=4)
    replies = _masked(server, clients, x)
    target = 0
    honest = [i for i in range(1, n) if i not in colluders]
    group_a, group_b = honest[: t - len(colluders)], honest[t - len(colluders) :]
    list_a = tuple(range(n))  # shown to group A: everyone survived
    list_b = tuple(range(1, n))  # shown to group B: the target dropped
    views = {i: list_a for i in group_a} | {i: list_b for i in group_b}
    signatures: dict[tuple[int, ...], dict[int, bytes]] = {list_a: {}, list_b: {}}
    if consistency:
        for i, shown in views.items():
            request = ConsistencyRequest(session=server.session, summation=0, survivors=shown)
            reply = clients[i].sign_survivors(request.to_dict())
            signatures[shown][i] = reply["signature"]
        for shown in (list_a, list_b):  # colluders sign both lists
            for c in colluders:
                payload = _payload(server, shown)
                signatures[shown][c] = crypto.sign(clients[c].signing_sk, payload)
    seed_shares, key_shares = {}, {}
    for i, shown in views.items():
        dropped = tuple(sorted(set(range(n)) - set(shown)))
        signed = signatures[shown]
        request = UnmaskRequest(
            session=server.session,
            summation=0,
            survivors=shown,
            dropped=dropped,
            num_survivors=len(shown),
            signers=tuple(sorted(signed)),
            signatures=tuple(signed[j] for j in sorted(signed)),
        ).to_dict()
        reply = clients[i].unmask(request)  # an honest client's refusal ends the attack
        if target in reply["seed_owners"]:
            seed_shares[i] = reply["seed_shares"][list(reply["seed_owners"]).index(target)]
        if target in reply["key_owners"]:
            key_shares[i] = reply["key_shares"][list(reply["key_owners"]).index(target)]
    for c in colluders:  # a corrupt holder hands over its raw share of both secrets
        raw = np.frombuffer(clients[c].held_shares[target], dtype="<u4")
        key_shares[c] = raw[: shamir.LIMBS].reshape(1, shamir.LIMBS)
        seed_shares[c] = raw[shamir.LIMBS : 2 * shamir.LIMBS].reshape(1, shamir.LIMBS)

    def open_secret(shares):
        holders = sorted(shares)[:t]
        stacked = np.stack([shares[h] for h in holders]).astype(np.uint32)
        return shamir.reconstruct([h + 1 for h in holders], stacked, t)[0]

    seed, mask_key = open_secret(seed_shares), open_secret(key_shares)
    encoding = server.encoding
    total = replies[target]["vector"] - crypto.mask_keystream(seed, encoding.length)
    size = crypto.KEY_BYTES
    for j in range(1, n):
        public = server.keys[j].mask_keys[:size]
        shared = crypto.agree(mask_key, public)
        stream = crypto.mask_keystream(
            crypto.derive_mask_key(shared, server.session_id, target, j, 0), encoding.length
        )
        total = total - stream if j > target else total + stream
    return encoding.decode(total, 1), x[target]


def _payload(server, survivors):
    from fa_hetdp.secagg.consistency import consistency_payload

    return consistency_payload(server.session_id, 0, survivors)


@pytest.mark.parametrize(("t", "colluders"), [(4, (1,)), (5, (1, 2))])
def test_split_view_attack_recovers_an_input_against_honest_but_curious(t, colluders):
    # n = 9, complete graph: without a consistency round the attack works (the model
    # excludes it). A client's own share no longer counts, so at t = 5 it needs two
    # colluders, at t = 4 one.
    recovered, truth = _split_view_attack(9, t, colluders, consistency=False)
    assert np.array_equal(recovered, truth)


def test_split_view_attack_is_refused_with_the_consistency_round():
    # malicious-server mode: t = 6 >= floor((9 + 1) / 2) + 1 for gamma = 1/9; each honest
    # client sees fewer than t signatures on its list and refuses to unmask.
    with pytest.raises(UnmaskRefused, match="valid signatures"):
        _split_view_attack(9, 6, (1,), consistency=True, gamma=1 / 9)


def test_malicious_server_mode_refuses_unsafe_parameters_whatever_the_server_says():
    server = SecAggServer(
        range(9),
        threshold=4,
        num_summations=1,
        neighbours="complete",
        rng=np.random.default_rng(0),
        consistency=True,
    )
    keys, roster = in_process_identities(20)

    def insisting(gamma=0.0):
        return SecAggClient(
            0, threat_model="malicious-server", gamma=gamma, identity=keys[0], roster=roster
        )

    # gamma = 1/9 of the 20-member roster: c = ceil(20/9) = 3 colluders, not ceil(9/9) = 1 of
    # the session the server picked (issue 27), so t >= floor((9 + 3)/2) + 1 = 7
    client = insisting(1 / 9)
    with pytest.raises(MessageRejected, match=r"threshold >= 7 .*roster of 20"):
        client.advertise_keys(server.setup_messages()[client.client_id])
    plain = SecAggServer(
        range(9),
        threshold=6,
        num_summations=1,
        neighbours="complete",
        rng=np.random.default_rng(0),
    )
    with pytest.raises(MessageRejected, match="consistency"):
        insisting().advertise_keys(plain.setup_messages()[0])
    sparse = SecAggServer(
        range(20),
        threshold=4,
        num_summations=1,
        neighbours=6,
        rng=np.random.default_rng(0),
        consistency=True,
    )
    with pytest.raises(MessageRejected, match="complete"):
        insisting().advertise_keys(sparse.setup_messages()[0])


def test_malicious_server_mode_sums_correctly_with_consistent_lists():
    from fa_hetdp.secagg import run_in_process

    x = _inputs(9, seed=5)
    identities, roster = in_process_identities(9)
    result = run_in_process(
        x,
        threshold=6,
        neighbours="complete",
        rng=np.random.default_rng(0),
        threat_model="malicious-server",
        gamma=1 / 9,
        identities=identities,
        roster=roster,
        dropouts={"masked_input": {8}},
    )
    assert np.array_equal(result.sum, x[:8].sum(axis=0))


# ------------------------------------------------------------------------------ finding 5
def test_public_keys_are_normalised_before_the_duplicate_check():
    # Before: bit 255 set gave a different byte string for the same X25519 key.
    replies = {}
    server2 = SecAggServer(
        range(4),
        threshold=2,
        num_summations=1,
        neighbours="complete",
        rng=np.random.default_rng(1),
    )
    fresh = {i: SecAggClient(i) for i in range(2)}
    for i, c in fresh.items():
        replies[i] = c.advertise_keys(server2.setup_messages()[c.client_id])
    server2.receive_advertise_keys(replies[0])
    alias = bytearray(replies[0]["channel_key"])
    alias[31] ^= 0x80  # same u-coordinate, different bytes
    with pytest.raises(MessageRejected, match="reuses"):
        server2.receive_advertise_keys({**replies[1], "channel_key": bytes(alias)})
