import pickle

import numpy as np
import pytest

from fa_hetdp.secagg import crypto
from fa_hetdp.secagg.client import SecAggClient
from fa_hetdp.secagg.encoding import FixedPointEncoding, choose_encoding
from fa_hetdp.secagg.errors import EncodingError, MessageRejected, ProtocolAborted, UnmaskRefused
from fa_hetdp.secagg.server import SecAggServer

N, T, D = 6, 3, 5


def session(n=N, t=T, summations=2, neighbours="complete", seed=0):
    server = SecAggServer(
        range(n),
        threshold=t,
        num_summations=summations,
        neighbours=neighbours,
        rng=np.random.default_rng(seed),
    )
    clients = {i: SecAggClient(i) for i in range(n)}
    setup = server.setup_messages()
    for c in clients.values():
        server.receive_advertise_keys(c.advertise_keys(setup[c.client_id]))
    directory = server.key_directory()
    for c in clients.values():
        server.receive_share_keys(c.share_keys(directory[c.client_id]))
    return server, clients, directory


def values(n=N, d=D, seed=1):
    return np.random.default_rng(seed).integers(-50, 50, size=(n, d)).astype(np.float64)


def encoding(n=N, d=D):
    return choose_encoding(n, np.full(d, 100.0))


def masked_round(server, clients, x, skip=()):
    requests = server.start_summation(encoding())
    rng = np.random.default_rng(9)
    for i, request in requests.items():
        if i not in skip:
            server.receive_masked_input(clients[i].masked_input(request, x[i], rng=rng))
    return requests


def test_happy_path_two_summations():
    server, clients, _ = session()
    x = values()
    for _ in range(2):
        masked_round(server, clients, x)
        requests = server.unmask_requests()
        for i in server.survivors:
            server.receive_unmask(clients[i].unmask(requests[i]))
        result = server.finish_summation()
        assert np.array_equal(result.sum, x.sum(axis=0))


def test_refuses_unmask_listing_itself_as_dropped():
    server, clients, _ = session()
    masked_round(server, clients, values())
    requests = server.unmask_requests()
    forged = {**requests[0], "survivors": [1, 2, 3, 4, 5], "dropped": [0]}
    with pytest.raises(UnmaskRefused, match="this client as dropped"):
        clients[0].unmask(forged)
    with pytest.raises(MessageRejected):  # and it stays out of the session
        clients[0].unmask(requests[0])


def test_refuses_both_shares_of_one_peer():
    server, clients, _ = session()
    masked_round(server, clients, values())
    requests = server.unmask_requests()
    forged = {**requests[0], "dropped": [2]}  # 2 is also a survivor
    with pytest.raises(UnmaskRefused, match="both"):
        clients[0].unmask(forged)


def test_refuses_reviving_a_peer_dropped_in_an_earlier_summation():
    server, clients, _ = session()
    x = values()
    masked_round(server, clients, x, skip={5})
    unmask = server.unmask_requests()
    for i in server.survivors:
        server.receive_unmask(clients[i].unmask(unmask[i]))
    server.finish_summation()
    requests = server.start_summation(encoding())
    assert 5 not in requests  # a client dropped in one summation stays dropped
    server.receive_masked_input(
        clients[0].masked_input(requests[0], x[0], rng=np.random.default_rng(0))
    )
    forged = {**unmask[0], "summation": 1, "survivors": [0, 1, 5], "dropped": [2, 3, 4]}
    with pytest.raises(UnmaskRefused, match="stays dropped"):
        clients[0].unmask(forged)


@pytest.mark.parametrize(
    ("survivors", "dropped", "match"),
    [
        ([0, 1, 2, 3, 4, 77], [5], "unknown"),
        ([0, 1, 1, 2], [5], "duplicate"),
        ([0, 1, 2], [5, 5], "duplicate"),
        ([0, 1], [2, 3, 4, 5], "fewer than threshold"),
    ],
)
def test_refuses_unknown_duplicate_or_too_few(survivors, dropped, match):
    server, clients, _ = session()
    masked_round(server, clients, values())
    request = {
        **server.unmask_requests()[0],
        "survivors": survivors,
        "dropped": dropped,
        "num_survivors": len(set(survivors)),
    }
    with pytest.raises(UnmaskRefused, match=match):
        clients[0].unmask(request)


def test_refused_request_leaves_state_usable():
    server, clients, _ = session()
    masked_round(server, clients, values())
    requests = server.unmask_requests()
    with pytest.raises(UnmaskRefused):
        clients[0].unmask({**requests[0], "dropped": [1]})
    reply = clients[0].unmask(requests[0])
    assert reply["sender"] == 0


def test_rejects_message_for_another_session():
    _, clients, _ = session()
    other, _, other_directory = session(seed=5)
    with pytest.raises(MessageRejected):
        SecAggClient(0).share_keys(other_directory[0])  # wrong round for a fresh client
    requests = other.start_summation(encoding())
    with pytest.raises(MessageRejected, match="another session"):
        clients[0].masked_input(requests[0], values()[0], rng=np.random.default_rng(0))


def test_rejects_replayed_requests():
    server, clients, directory = session()
    with pytest.raises(MessageRejected, match="wrong round"):
        clients[0].share_keys(directory[0])
    requests = server.start_summation(encoding())
    x = values()
    clients[0].masked_input(requests[0], x[0], rng=np.random.default_rng(0))
    with pytest.raises(MessageRejected, match="wrong round"):
        clients[0].masked_input(requests[0], x[0], rng=np.random.default_rng(0))


def test_rejects_replayed_share_ciphertexts_in_later_summation():
    server, clients, _ = session()
    first = masked_round(server, clients, values())
    requests = server.unmask_requests()
    for i in server.survivors:
        server.receive_unmask(clients[i].unmask(requests[i]))
    server.finish_summation()
    second = server.start_summation(encoding())
    replay = {
        **second[0],
        "senders": first[0]["senders"],
        "ciphertexts": first[0]["ciphertexts"],
        "digests": first[0]["digests"],
    }
    with pytest.raises(MessageRejected, match="replayed"):
        clients[0].masked_input(replay, values()[0], rng=np.random.default_rng(0))


def test_rejects_tampered_share_ciphertext():
    server, clients, _ = session()
    request = server.start_summation(encoding())[0]
    blobs = list(request["ciphertexts"])
    tampered = bytearray(blobs[0])
    tampered[-1] ^= 0x01
    blobs[0] = bytes(tampered)
    # the holder does not drop out: it masks without that sender and reports it (the server
    # then drops the sender; issue 17 item 4)
    reply = clients[0].masked_input(
        {**request, "ciphertexts": blobs}, values()[0], rng=np.random.default_rng(0)
    )
    sender = request["senders"][0]
    assert reply["rejected"] == (sender,)
    assert sender not in clients[0].alive and sender not in clients[0].held_shares


def test_rejects_wrong_recipient():
    server, clients, _ = session()
    requests = server.start_summation(encoding())
    with pytest.raises(MessageRejected, match="addressed to client 1"):
        clients[0].masked_input(requests[1], values()[0], rng=np.random.default_rng(0))
    # ciphertexts meant for client 1, delivered to client 0 under its own header
    misrouted = {
        **requests[0],
        "senders": requests[1]["senders"],
        "ciphertexts": requests[1]["ciphertexts"],
    }
    with pytest.raises(MessageRejected):
        clients[0].masked_input(misrouted, values()[0], rng=np.random.default_rng(0))


def test_rejects_wrong_round():
    server, clients, directory = session()
    fresh = SecAggClient(0)
    with pytest.raises(MessageRejected, match="wrong round"):
        fresh.share_keys(directory[0])
    with pytest.raises(MessageRejected, match="wrong round"):
        clients[0].advertise_keys(server.setup_messages()[0])
    masked_round(server, clients, values(), skip={0})
    with pytest.raises(MessageRejected):
        clients[0].unmask(server.unmask_requests()[1])  # never sent its input


@pytest.mark.parametrize(
    "vector",
    [np.zeros(D + 1), np.zeros(D, dtype=np.float32), np.zeros(D, dtype=np.int64), np.full(D, 1e9)],
)
def test_refuses_vector_of_wrong_length_dtype_or_bound(vector):
    server, clients, _ = session()
    request = server.start_summation(encoding())[0]
    with pytest.raises(EncodingError):
        clients[0].masked_input(request, vector, rng=np.random.default_rng(0))


def _directory_with_key(directory, position, field, key):
    keys = list(directory[field])
    keys[position] = key
    return {**directory, field: keys}


@pytest.mark.parametrize(
    ("field", "key"),
    [
        ("channel_keys", bytes(32)),
        ("channel_keys", (1).to_bytes(32, "little")),
        ("channel_keys", bytes(31)),
        ("mask_keys", bytes(64)),
        ("mask_keys", bytes(32)),
    ],
)
def test_rejects_malformed_or_small_order_neighbour_keys(field, key):
    server = SecAggServer(
        range(4), threshold=2, num_summations=2, neighbours="complete", rng=np.random.default_rng(0)
    )
    clients = [SecAggClient(i) for i in range(4)]
    for c in clients:
        server.receive_advertise_keys(c.advertise_keys(server.setup_messages()[c.client_id]))
    directory = server.key_directory()
    with pytest.raises(MessageRejected):
        clients[0].share_keys(_directory_with_key(directory[0], 1, field, key))


def test_rejects_altered_own_keys_and_key_reuse():
    server = SecAggServer(
        range(4), threshold=2, neighbours="complete", rng=np.random.default_rng(0)
    )
    clients = [SecAggClient(i) for i in range(4)]
    for c in clients:
        server.receive_advertise_keys(c.advertise_keys(server.setup_messages()[c.client_id]))
    directory = server.key_directory()
    _, fresh = crypto.generate_keypair()
    with pytest.raises(MessageRejected, match="own keys"):
        clients[0].share_keys(_directory_with_key(directory[0], 0, "channel_keys", fresh))
    reused = _directory_with_key(directory[0], 2, "channel_keys", directory[0]["channel_keys"][1])
    with pytest.raises(MessageRejected, match="reuses"):
        clients[0].share_keys(reused)


def test_aborts_when_too_few_holders_advertised():
    server = SecAggServer(
        range(5), threshold=4, neighbours="complete", rng=np.random.default_rng(0)
    )
    clients = [SecAggClient(i) for i in range(5)]
    for c in clients[:4]:
        server.receive_advertise_keys(c.advertise_keys(server.setup_messages()[c.client_id]))
    directory = server.key_directory()
    short = {k: (v[:3] if isinstance(v, list | tuple) else v) for k, v in directory[0].items()}
    short["num_advertised"] = 3  # the complete graph shows every advertised key
    with pytest.raises(ProtocolAborted, match="fewer than threshold"):
        clients[0].share_keys(short)


def test_refuses_unusable_encoding_in_request():
    server, clients, _ = session()
    request = server.start_summation(encoding())[0]
    bad = {**request, "scales": np.full(D, 2.0**60)}
    with pytest.raises(MessageRejected, match="encoding"):
        clients[0].masked_input(bad, values()[0], rng=np.random.default_rng(0))


@pytest.mark.parametrize("how", ["bytes", "pickle"])
def test_state_survives_serialisation_between_rounds(how):
    def freeze(client):
        if how == "bytes":
            return SecAggClient.from_bytes(client.to_bytes())
        return pickle.loads(pickle.dumps(client))

    server = SecAggServer(
        range(4), threshold=3, num_summations=2, neighbours="complete", rng=np.random.default_rng(0)
    )
    clients = {i: SecAggClient(i) for i in range(4)}
    for i in clients:
        server.receive_advertise_keys(clients[i].advertise_keys(server.setup_messages()[i]))
        clients[i] = freeze(clients[i])
    directory = server.key_directory()
    for i in clients:
        server.receive_share_keys(clients[i].share_keys(directory[i]))
        clients[i] = freeze(clients[i])
    x = values(4, 3)
    for _ in range(2):
        requests = server.start_summation(choose_encoding(4, np.full(3, 100.0)))
        for i, req in requests.items():
            server.receive_masked_input(
                clients[i].masked_input(req, x[i], rng=np.random.default_rng(i))
            )
            clients[i] = freeze(clients[i])
        requests = server.unmask_requests()
        for i in server.survivors:
            server.receive_unmask(clients[i].unmask(requests[i]))
            clients[i] = freeze(clients[i])
        assert np.array_equal(server.finish_summation().sum, x.sum(axis=0))


def test_from_bytes_rejects_garbage():
    with pytest.raises(MessageRejected):
        SecAggClient.from_bytes(b"{not json")
    with pytest.raises(MessageRejected):
        SecAggClient.from_bytes(b'{"client_id": 1}')


def test_encoding_values_come_from_request():
    server, clients, _ = session()
    tight = FixedPointEncoding(scales=np.ones(D), bounds=np.full(D, 0.5), max_clients=N)
    request = server.start_summation(tight)[0]
    with pytest.raises(EncodingError, match="bound"):
        clients[0].masked_input(request, np.ones(D), rng=np.random.default_rng(0))


def test_rejects_out_of_range_share_inside_valid_ciphertext():
    import struct

    from fa_hetdp.secagg.client import share_aad
    from fa_hetdp.secagg.shamir import LIMBS, PRIME

    server, clients, _ = session()
    request = server.start_summation(encoding())[0]
    sender = request["senders"][0]
    key = clients[0].receive_keys[sender]  # what the sender's send key must equal
    body = np.zeros((4, LIMBS), dtype="<u4")
    body[1, 2] = PRIME
    plaintext = struct.pack("<QQ", sender, 0) + body.tobytes()
    forged = crypto.seal(key, plaintext, share_aad(clients[0].session_id, sender, 0))
    blobs = [forged, *request["ciphertexts"][1:]]
    reply = clients[0].masked_input(
        {**request, "ciphertexts": blobs}, values()[0], rng=np.random.default_rng(0)
    )
    assert reply["rejected"] == (sender,)  # reported, never held
