import numpy as np
import pytest
from test_secagg_blame import resign

from fa_hetdp.secagg import crypto, shamir
from fa_hetdp.secagg.client import SecAggClient
from fa_hetdp.secagg.encoding import choose_encoding
from fa_hetdp.secagg.errors import EncodingError, MessageRejected, ProtocolAborted
from fa_hetdp.secagg.server import SecAggServer

D = 4


def advertised(n=6, t=3, summations=2, neighbours="complete", seed=0):
    server = SecAggServer(
        range(n),
        threshold=t,
        num_summations=summations,
        neighbours=neighbours,
        rng=np.random.default_rng(seed),
    )
    clients = {i: SecAggClient(i) for i in range(n)}
    setup = server.setup_messages()
    replies = {i: c.advertise_keys(setup[c.client_id]) for i, c in clients.items()}
    return server, clients, replies


def shared(n=6, t=3, summations=2, neighbours="complete", seed=0):
    server, clients, replies = advertised(n, t, summations, neighbours, seed)
    for reply in replies.values():
        server.receive_advertise_keys(reply)
    directory = server.key_directory()
    for c in clients.values():
        server.receive_share_keys(c.share_keys(directory[c.client_id]))
    return server, clients


def x_values(n=6, seed=1):
    return np.random.default_rng(seed).integers(-9, 9, size=(n, D)).astype(np.float64)


def enc(n=6):
    return choose_encoding(n, np.full(D, 10.0))


def inputs(server, clients, x, skip=()):
    requests = server.start_summation(enc(len(clients)))
    replies = {}
    for i, request in requests.items():
        if i not in skip:
            replies[i] = clients[i].masked_input(request, x[i], rng=np.random.default_rng(i))
            server.receive_masked_input(replies[i])
    return replies


def test_rejects_replayed_unknown_and_foreign_advertise():
    server, _, replies = advertised()
    server.receive_advertise_keys(replies[0])
    with pytest.raises(MessageRejected, match="replayed"):
        server.receive_advertise_keys(replies[0])
    with pytest.raises(MessageRejected, match="unknown"):
        server.receive_advertise_keys({**replies[1], "sender": 42})
    with pytest.raises(MessageRejected, match="another session"):
        server.receive_advertise_keys({**replies[1], "session": b"x" * 32})


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("channel_key", bytes(32), "small-order"),
        ("channel_key", bytes(30), "32 bytes"),
        ("mask_keys", bytes(64), "small-order"),
        ("mask_keys", bytes(32), "mask keys"),
    ],
)
def test_rejects_malformed_or_small_order_keys(field, value, match):
    server, _, replies = advertised()
    with pytest.raises(MessageRejected, match=match):
        server.receive_advertise_keys({**replies[0], field: value})


def test_rejects_reused_public_key():
    server, _, replies = advertised()
    server.receive_advertise_keys(replies[0])
    with pytest.raises(MessageRejected, match="reuses"):
        server.receive_advertise_keys({**replies[1], "channel_key": replies[0]["channel_key"]})


def test_aborts_when_too_few_advertise():
    server, _, replies = advertised(t=3)
    server.receive_advertise_keys(replies[0])
    server.receive_advertise_keys(replies[1])
    with pytest.raises(ProtocolAborted, match="fewer than threshold"):
        server.key_directory()


def test_rejects_wrong_round_messages():
    server, clients, replies = advertised()
    for reply in replies.values():
        server.receive_advertise_keys(reply)
    directory = server.key_directory()
    with pytest.raises(MessageRejected, match="wrong round"):
        server.receive_advertise_keys(replies[0])
    share = clients[0].share_keys(directory[0])
    server.receive_share_keys(share)
    with pytest.raises(MessageRejected, match="replayed"):
        server.receive_share_keys(share)
    with pytest.raises(MessageRejected, match="wrong round"):
        server.unmask_requests()


def test_rejects_shares_to_non_neighbours():
    server, clients, replies = advertised(n=12, t=3, neighbours=4)
    for reply in replies.values():
        server.receive_advertise_keys(reply)
    directory = server.key_directory()
    reply = clients[0].share_keys(directory[0])
    stranger = next(c for c in range(1, 12) if not server.graph.linked(0, c))
    forged = {**reply, "recipients": [*reply["recipients"][:-1], stranger]}
    with pytest.raises(MessageRejected, match="not neighbours"):
        server.receive_share_keys(forged)


def test_rejects_masked_input_replay_wrong_length_and_ineligible():
    server, clients = shared()
    x = x_values()
    replies = inputs(server, clients, x, skip={5})
    with pytest.raises(MessageRejected, match="replayed"):
        server.receive_masked_input(replies[0])
    short = {**replies[1], "sender": 5, "vector": np.zeros(D + 1, dtype=np.uint64)}
    with pytest.raises(MessageRejected, match="shape"):
        server.receive_masked_input(short)
    with pytest.raises(MessageRejected, match="not eligible"):
        server.receive_masked_input({**replies[1], "sender": 99})


def test_late_masked_input_is_refused_and_stays_masked():
    server, clients = shared(n=6, t=3)
    x = x_values()
    requests = server.start_summation(enc())
    late_reply = clients[5].masked_input(requests[5], x[5], rng=np.random.default_rng(5))
    for i in range(5):
        server.receive_masked_input(
            clients[i].masked_input(requests[i], x[i], rng=np.random.default_rng(i))
        )
    requests = server.unmask_requests()  # closes the round: client 5 is declared dropped
    assert 5 in requests[0]["dropped"]
    with pytest.raises(MessageRejected, match="wrong round"):
        server.receive_masked_input(late_reply)
    with pytest.raises(MessageRejected):
        clients[5].unmask(requests[0])
    responses = [clients[i].unmask(requests[i]) for i in range(5)]
    assert all(5 not in r["seed_owners"] for r in responses)  # its self-mask seed never leaks
    for r in responses:
        server.receive_unmask(r)
    result = server.finish_summation()
    assert np.array_equal(result.sum, x[:5].sum(axis=0))
    # Even a server that keeps the late vector and strips every pairwise mask (with the
    # mask key it reconstructed for client 5) is left with the encoding plus PRG(b_5).
    xs = [shamir_x for shamir_x in range(1, 4)]
    key_shares = np.stack([r["key_shares"][list(r["key_owners"]).index(5)] for r in responses[:3]])
    (mask_sk,) = shamir.reconstruct(xs, key_shares, 3)
    vector = late_reply["vector"].copy()
    size = crypto.KEY_BYTES
    for i in range(5):
        peer = server.keys[i].mask_keys[:size]
        key = crypto.derive_mask_key(crypto.agree(mask_sk, peer), server.session_id, i, 5, 0)
        stream = crypto.mask_keystream(key, D)
        vector += stream if i < 5 else -stream  # undo client 5's -PRG(m_{i,5}) for i < 5
    encoded = np.round(x[5] * enc().scales).astype(np.int64).view(np.uint64)
    assert not np.any(vector == encoded)
    seed_stream = crypto.mask_keystream(clients[5].seeds[0], D)
    assert np.array_equal(vector - seed_stream, encoded)  # only b_5 was still hiding it


def test_aborts_when_masked_inputs_below_threshold():
    server, clients = shared(n=6, t=4)
    inputs(server, clients, x_values(), skip={0, 1, 2})
    with pytest.raises(ProtocolAborted, match="fewer than threshold"):
        server.unmask_requests()


def test_aborts_when_unmask_shares_below_threshold_never_returns_sum():
    server, clients = shared(n=6, t=4)
    inputs(server, clients, x_values())
    requests = server.unmask_requests()
    for i in range(3):
        server.receive_unmask(clients[i].unmask(requests[i]))
    with pytest.raises(ProtocolAborted, match="fewer than threshold"):
        server.finish_summation()
    assert server.results == []


def test_dropouts_during_unmasking_with_enough_shares():
    # a client's own share never counts: each seed owner keeps >= 2 responding neighbours
    server, clients = shared(n=6, t=2)
    x = x_values()
    inputs(server, clients, x, skip={4})
    requests = server.unmask_requests()
    for i in (0, 1, 2):  # clients 3 and 5 drop while unmasking
        server.receive_unmask(clients[i].unmask(requests[i]))
    result = server.finish_summation()
    assert result.survivors == (0, 1, 2, 3, 5)
    assert np.array_equal(result.sum, x[[0, 1, 2, 3, 5]].sum(axis=0))


@pytest.mark.parametrize("limb", [0, 5])
def test_one_bad_key_share_is_identified_not_fatal(limb):
    # finding 5: one bad key share used to abort the summation; now the other shares
    # reconstruct the key, the public key identifies the sender, and the sum is right
    server, clients = shared(n=6, t=3)
    x = x_values()
    inputs(server, clients, x, skip={5})
    requests = server.unmask_requests()
    for i in range(5):
        reply = clients[i].unmask(requests[i])
        if i == 0:
            shares = reply["key_shares"].copy()
            shares[0, 0, limb] = (int(shares[0, 0, limb]) + 1) % shamir.PRIME
            reply = resign(clients[i], {**reply, "key_shares": shares})
        server.receive_unmask(reply)
    result = server.finish_summation()
    assert np.array_equal(result.sum, x[:5].sum(axis=0))
    assert result.cheaters == (0,)


def test_bad_key_shares_abort_when_too_few_good_remain():
    server, clients = shared(n=6, t=3)
    inputs(server, clients, x_values(), skip={5})
    requests = server.unmask_requests()
    for i in range(3):  # three of the key's holders answer, one of them lies
        reply = clients[i].unmask(requests[i])
        if i == 0:
            shares = reply["key_shares"].copy()
            shares[0, 0, 3] = (int(shares[0, 0, 3]) + 1) % shamir.PRIME
            reply = resign(clients[i], {**reply, "key_shares": shares})
        server.receive_unmask(reply)
    with pytest.raises(ProtocolAborted, match=r"commitment|fewer than threshold"):
        server.finish_summation()


def test_rejects_unmask_shares_for_wrong_owners():
    server, clients = shared(n=6, t=3)
    inputs(server, clients, x_values(), skip={5})
    requests = server.unmask_requests()
    reply = clients[0].unmask(requests[0])
    with pytest.raises(MessageRejected, match="key share"):
        server.receive_unmask({**reply, "key_owners": [1]})
    server.receive_unmask(reply)
    with pytest.raises(MessageRejected, match="replayed"):
        server.receive_unmask(reply)
    with pytest.raises(MessageRejected, match="non-survivor"):
        server.receive_unmask({**reply, "sender": 5})


def test_rejects_out_of_range_unmask_shares():
    server, clients = shared(n=6, t=3)
    inputs(server, clients, x_values())
    reply = clients[0].unmask(server.unmask_requests()[0])
    shares = reply["seed_shares"].copy()
    shares[0, 0, 3] = shamir.PRIME
    with pytest.raises(MessageRejected, match="outside"):
        server.receive_unmask({**reply, "seed_shares": shares})


def test_message_order_does_not_change_the_sum():
    x = x_values()
    raws = []
    for order_seed in (0, 1):
        server, clients = shared(seed=3)
        order = np.random.default_rng(order_seed).permutation(6)
        requests = server.start_summation(enc())
        replies = [
            clients[i].masked_input(requests[i], x[i], rng=np.random.default_rng(i))
            for i in range(6)
        ]
        for i in order:
            server.receive_masked_input(replies[i])
        requests = server.unmask_requests()
        for i in order:
            server.receive_unmask(clients[int(i)].unmask(requests[int(i)]))
        raws.append(server.finish_summation().raw)
    assert np.array_equal(raws[0], raws[1])


def test_encoding_must_cover_all_clients_and_summations_are_limited():
    server, clients = shared(summations=1)
    with pytest.raises(EncodingError, match="summands"):
        server.start_summation(choose_encoding(3, np.ones(D)))
    inputs(server, clients, x_values())
    requests = server.unmask_requests()
    for i in server.survivors:
        server.receive_unmask(clients[i].unmask(requests[i]))
    server.finish_summation()
    with pytest.raises(ProtocolAborted, match="only 1 summations"):
        server.start_summation(enc())


@pytest.mark.parametrize("threshold", [1, 7, True])
def test_invalid_threshold(threshold):
    with pytest.raises(ValueError, match="threshold"):
        SecAggServer(
            range(6), threshold=threshold, neighbours="complete", rng=np.random.default_rng(0)
        )


def test_invalid_degree():
    with pytest.raises(ValueError, match="even"):
        SecAggServer(range(20), threshold=2, neighbours=5, rng=np.random.default_rng(0))


def test_dropping_in_a_later_summation_reveals_only_that_summations_mask_key():
    # With one mask key per session, the server would now hold client 5's mask key and its
    # summation-0 self-mask seed, i.e. could unmask its summation-0 input. Per-summation keys
    # keep that input hidden.
    server, clients = shared(n=6, t=3, summations=2)
    x = x_values()
    first = inputs(server, clients, x)
    requests = server.unmask_requests()
    for i in server.survivors:
        server.receive_unmask(clients[i].unmask(requests[i]))
    server.finish_summation()
    inputs(server, clients, x, skip={5})
    requests = server.unmask_requests()
    replies = [clients[i].unmask(requests[i]) for i in server.survivors]
    for reply in replies:
        server.receive_unmask(reply)
    assert np.array_equal(server.finish_summation().sum, x[:5].sum(axis=0))
    holders = replies[:3]
    shares = np.stack([r["key_shares"][list(r["key_owners"]).index(5)] for r in holders])
    (revealed,) = shamir.reconstruct([r["sender"] + 1 for r in holders], shares, 3)
    assert revealed == clients[5].mask_sks[1]
    assert revealed != clients[5].mask_sks[0]
    # the summation-0 masked input is still hidden by its pairwise masks
    assert not np.array_equal(
        first[5]["vector"] - crypto.mask_keystream(clients[5].seeds[0], D),
        np.round(x[5] * enc().scales).astype(np.int64).view(np.uint64),
    )
