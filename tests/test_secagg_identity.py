"""Key substitution by a malicious server, and the roster of identity keys that stops it.

Bonawitz et al.'s malicious-server guarantee (CCS 2017, Sec. 6) assumes a PKI: without one
the server hands out every public key, so it can give a target client keys it made itself
for all of the target's peers, read every share the target deals, and unmask its input with
no colluding client at all. Each test plays the deviating server against the real client
state machines.
"""

from __future__ import annotations

import re
import struct
from dataclasses import replace

import numpy as np
import pytest

from fa_hetdp.secagg import crypto, shamir
from fa_hetdp.secagg.client import SecAggClient, share_aad
from fa_hetdp.secagg.encoding import choose_encoding
from fa_hetdp.secagg.errors import MessageRejected
from fa_hetdp.secagg.evidence import share_digests
from fa_hetdp.secagg.identity import Roster, RosterError, generate_roster, main
from fa_hetdp.secagg.inprocess import in_process_identities, run_in_process
from fa_hetdp.secagg.server import SecAggServer

D = 4
TARGET = 0


def _session(n, t, *, malicious):
    server = SecAggServer(
        range(n),
        threshold=t,
        num_summations=1,
        neighbours="complete",
        rng=np.random.default_rng(7),
        consistency=malicious,
    )
    model = "malicious-server" if malicious else "honest-but-curious"
    keys, roster = in_process_identities(n) if malicious else ({}, None)
    clients = {
        i: SecAggClient(i, threat_model=model, identity=keys.get(i), roster=roster)
        for i in range(n)
    }
    setup = server.setup_messages()
    for c in clients.values():
        server.receive_advertise_keys(c.advertise_keys(setup[c.client_id]))
    return server, clients


def _key_substitution(server, clients, x):
    """The server shows the target its own keys for every peer and unmasks the target.

    Returns the target's input as the server recovers it, with no colluding client; raises
    the target's refusal (MessageRejected) when the directory does not pass its checks.
    """
    t, n = server.threshold, len(clients)
    directories = server.key_directory()
    real = dict(directories[TARGET])
    owners = list(real["key_owners"])
    channel, mask, signing = (list(real[k]) for k in ("channel_keys", "mask_keys", "signing_keys"))
    fake: dict[int, tuple[bytes, bytes]] = {}
    for p, j in enumerate(owners):
        if j == TARGET:
            continue
        channel_sk, channel[p] = crypto.generate_keypair()
        mask_sk, mask[p] = crypto.generate_keypair()
        _, public_signing = crypto.generate_signing_key()
        signing[p] = public_signing if signing[p] else b""
        fake[j] = (channel_sk, mask_sk)
    tampered = {**real, "channel_keys": channel, "mask_keys": mask, "signing_keys": signing}
    target = clients[TARGET]
    share_reply = target.share_keys(tampered)  # an honest target refuses here
    server.receive_share_keys(share_reply)
    for i in range(1, n):  # everyone else sees the real directory
        server.receive_share_keys(clients[i].share_keys(directories[i]))
    # the server reads the target's shares: the channel keys are its own
    shares = {}
    for j, blob in zip(share_reply["recipients"], share_reply["ciphertexts"], strict=True):
        agreed = crypto.agree(fake[j][0], target.channel_pk)
        _, receive = crypto.derive_channel_keys(agreed, server.session_id, j, TARGET)
        plain = crypto.open_sealed(receive, blob, share_aad(server.session_id, TARGET, j))
        shares[j] = np.frombuffer(plain[16:], dtype="<u4").reshape(2, shamir.LIMBS)
    holders = sorted(shares)[:t]
    stacked = np.stack([shares[h] for h in holders]).astype(np.uint32)
    mask_key, seed = shamir.reconstruct([server.rank[h] for h in holders], stacked, t)
    # the target masks its input; the server removes every mask it now knows
    encoding = choose_encoding(n, np.full(D, 100.0))
    request = dict(server.start_summation(encoding)[TARGET])
    forged, digests = [], []  # the peers' shares for the target: the server deals them itself
    body = bytes(2 * shamir.LIMBS * 4)
    for j in request["senders"]:
        agreed = crypto.agree(fake[j][0], target.channel_pk)
        send, _ = crypto.derive_channel_keys(agreed, server.session_id, j, TARGET)
        plain = struct.pack("<QQ", j, TARGET) + body
        forged.append(crypto.seal(send, plain, share_aad(server.session_id, j, TARGET)))
        digests.append(share_digests(server.session_id, j, TARGET, body))
    request["ciphertexts"], request["digests"] = forged, digests
    vector = target.masked_input(request, x[TARGET], rng=np.random.default_rng(0))["vector"]
    total = vector - crypto.mask_keystream(seed, encoding.length)
    for j in range(1, n):
        agreed = crypto.agree(fake[j][1], target.mask_pks)
        pair = crypto.derive_mask_key(agreed, server.session_id, TARGET, j, 0)
        total = total - crypto.mask_keystream(pair, encoding.length)
    assert mask_key  # the mask key was exposed too (the target's pairwise masks)
    return encoding.decode(total, 1)


def _inputs(n):
    return np.random.default_rng(11).integers(-100, 100, size=(n, D)).astype(np.float64)


def test_key_substitution_recovers_an_input_against_honest_but_curious():
    # The model excludes it: an honest-but-curious server forwards the keys it received.
    n = 6
    server, clients = _session(n, 4, malicious=False)
    x = _inputs(n)
    assert np.array_equal(_key_substitution(server, clients, x), x[TARGET])


def test_key_substitution_is_refused_in_malicious_server_mode():
    # Before the roster: the target accepted the server's keys and its input was recovered
    # exactly with no colluding client. Now every round-0 key is signed by the identity key
    # of the roster member its owner claims to be; the substituted keys carry no such
    # signature and the target refuses the directory (it never sends a share).
    n = 6
    server, clients = _session(n, 4, malicious=True)
    x = _inputs(n)
    with pytest.raises(MessageRejected, match="identity"):
        recovered = _key_substitution(server, clients, x)
        assert not np.array_equal(recovered, x[TARGET])


def _directories(n=5, t=3):
    server, clients = _session(n, t, malicious=True)
    return server, clients, server.key_directory()


def test_a_member_claimed_by_two_client_ids_is_refused():
    # a Sybil: the server replays member 2's name (and its signature) for client 3's row
    _server, clients, directories = _directories()
    d = dict(directories[0])
    names, signatures = list(d["identities"]), list(d["identity_signatures"])
    names[3], signatures[3] = names[2], signatures[2]
    with pytest.raises(MessageRejected, match="claimed by clients 2 and 3"):
        clients[0].share_keys({**d, "identities": names, "identity_signatures": signatures})


def test_an_id_whose_member_is_not_on_the_roster_is_refused():
    _server, clients, directories = _directories()
    d = dict(directories[0])
    names = list(d["identities"])
    names[4] = b"mallory"
    with pytest.raises(MessageRejected, match="'mallory', not a member of the roster"):
        clients[0].share_keys({**d, "identities": names})


def test_a_signature_from_another_session_is_refused():
    # the identity signature binds the session: keys signed for one session fail in another
    _server, clients, directories = _directories()
    _other, _other_clients, other_dirs = _directories()
    d = dict(directories[0])
    for key in ("channel_keys", "mask_keys", "signing_keys", "identity_signatures"):
        rows = list(d[key])
        rows[1] = other_dirs[0][key][1]
        d[key] = rows
    with pytest.raises(MessageRejected, match="not signed by the identity key"):
        clients[0].share_keys(d)


def test_malicious_server_mode_refuses_to_start_without_a_roster():
    with pytest.raises(ValueError, match="needs a roster of identity keys"):
        SecAggClient(0, threat_model="malicious-server")
    with pytest.raises(ValueError, match="needs roster= and identities="):
        run_in_process(
            _inputs(5),
            threshold=3,
            neighbours="complete",
            rng=np.random.default_rng(0),
            threat_model="malicious-server",
        )
    _keys, roster = generate_roster(["a", "b"])
    with pytest.raises(ValueError, match="not on the roster"):
        SecAggClient(0, threat_model="malicious-server", identity=b"\x01" * 32, roster=roster)


def test_in_process_malicious_server_session_with_a_roster_sums_exactly():
    x = _inputs(7)
    identities, roster = in_process_identities(7)
    result = run_in_process(
        x,
        threshold=5,
        neighbours="complete",
        rng=np.random.default_rng(0),
        threat_model="malicious-server",
        gamma=1 / 7,
        identities=identities,
        roster=roster,
        dropouts={"masked_input": {6}},
    )
    assert np.array_equal(result.sum, x[:6].sum(axis=0))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("members = 3", "exactly one non-empty table"),
        ("[members]\n", "exactly one non-empty table"),
        ('[members]\n"a b" = "00"', "member name 'a b'"),
        ('[members]\na = "xyz"', "member 'a': the identity key must be 64"),
        ("[members\n", "not a TOML roster"),
        ('[members]\na = "' + "00" * 32 + '"\n[other]\n', "got keys ['members', 'other']"),
    ],
)
def test_a_malformed_roster_gets_a_one_line_error(text, message):
    with pytest.raises(RosterError, match=re.escape(message)) as caught:
        Roster.from_bytes(text.encode(), source="roster r.toml")
    assert "\n" not in str(caught.value) and str(caught.value).startswith("roster r.toml")


def test_a_roster_listing_one_key_twice_is_refused():
    _, roster = generate_roster(["a"])
    key = roster.members["a"].hex()
    text = f'[members]\na = "{key}"\nb = "{key}"\n'
    with pytest.raises(RosterError, match="listed for two members"):
        Roster.from_bytes(text.encode())


def test_the_command_line_writes_keys_and_a_roster_and_prints_its_sha256(tmp_path, capsys):
    import hashlib
    import stat

    from fa_hetdp.secagg.identity import load_identity_key, public_identity

    for name in ("owner-0", "owner-1"):
        assert main(["keygen", str(tmp_path / f"{name}.identity")]) == 0
    key_file = tmp_path / "owner-0.identity"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    roster_path = tmp_path / "roster.toml"
    pairs = [f"{n}={tmp_path / n}.identity.pub" for n in ("owner-0", "owner-1")]
    assert main(["roster", str(roster_path), *pairs]) == 0
    digest = hashlib.sha256(roster_path.read_bytes()).hexdigest()
    assert f"2 members, SHA-256 {digest}" in capsys.readouterr().out
    roster = Roster.load(roster_path)
    assert roster.sha256 == digest
    assert roster.member_of(public_identity(load_identity_key(key_file))) == "owner-0"
    assert main(["keygen", str(key_file)]) == 2  # never overwrites a key
    (tmp_path / "bad.toml").write_text("[members]\n")
    assert main(["digest", str(tmp_path / "bad.toml")]) == 2


def test_the_guarantee_names_what_the_malicious_server_mode_assumes():
    # Before: "a server that may deviate (malicious; a consistency round ...)" with no word
    # on the PKI it rests on, the roster's distribution, or who bounds the colluders.
    from fa_hetdp.secagg.params import choose_parameters

    malicious = choose_parameters(20, gamma=0.1, delta=0.0, threat_model="malicious-server")
    text = malicious.guarantee()
    for phrase in (
        "roster of Ed25519 identity keys",
        "distributed out of band",
        "compared by its SHA-256",
        "at most gamma n = 2 of the 20 clients collude",
        "secagg-min-gamma",
        "identity keys stay with their owners",
    ):
        assert phrase in text, phrase
    honest = choose_parameters(20, gamma=0.1, delta=0.0).guarantee()
    assert "forwards every public key as received" in honest
    assert "roster" not in honest


def test_an_honest_but_curious_sparse_session_checks_the_roster_too():
    # with a roster, every client checks its neighbours' signatures (O(k) keys shown)
    x = _inputs(24)
    identities, roster = in_process_identities(24)
    result = run_in_process(
        x,
        threshold=4,
        neighbours=6,
        rng=np.random.default_rng(2),
        identities=identities,
        roster=roster,
    )
    assert np.array_equal(result.sum, x.sum(axis=0))


def test_the_node_floor_is_checked_again_at_every_unmask_request():
    # the floor is the client's own: raised between rounds (the node's config read again),
    # the next unmask request is refused although the setup passed
    from fa_hetdp.secagg.errors import UnmaskRefused
    from fa_hetdp.secagg.inprocess import InProcessSession

    session = InProcessSession(
        9, threshold=6, num_summations=1, neighbours="complete", rng=np.random.default_rng(0)
    )
    server, clients = session.server, session.clients
    requests = server.start_summation(choose_encoding(9, np.full(D, 100.0)))
    x = _inputs(9)
    for i, request in requests.items():
        server.receive_masked_input(
            clients[i].masked_input(request, x[i], rng=np.random.default_rng(i))
        )
    unmask = server.unmask_requests()
    clients[0].gamma = 0.5  # needs t >= min_private_threshold(9, 8, 0.5) > 6
    with pytest.raises(UnmaskRefused, match=re.escape("guards against gamma = 0.5")):
        clients[0].unmask(unmask[0])
    assert clients[1].unmask(unmask[1])["seed_owners"]


def _counting_verifications(monkeypatch):
    """Count every Ed25519 verification (crypto.verify_signature) from now on."""
    calls = []
    real = crypto.verify_signature

    def counted(public, message, signature):
        calls.append(public)
        return real(public, message, signature)

    monkeypatch.setattr(crypto, "verify_signature", counted)
    return calls


def test_each_client_verifies_every_neighbour_key_itself(monkeypatch):
    # the floor of benchmarks/secagg_bench.py counts n k verifications with a roster: each
    # client verifies its k neighbours' signatures itself (nothing shared between clients),
    # and compares its own entry with what it signed instead of verifying it
    n, k = 24, 6
    x = _inputs(n)
    identities, roster = in_process_identities(n)
    calls = _counting_verifications(monkeypatch)
    result = run_in_process(
        x,
        threshold=4,
        neighbours=k,
        rng=np.random.default_rng(2),
        identities=identities,
        roster=roster,
    )
    assert np.array_equal(result.sum, x.sum(axis=0))
    assert len(calls) == n * k
    assert len(set(calls)) == n  # every member's key, each verified by its k neighbours


@pytest.mark.parametrize("field", ["signing_keys", "identity_signatures"])
def test_an_altered_own_entry_is_refused(field):
    # the own entry is compared with what the client signed: another signing key, or
    # another member's valid signature in its row, is refused as before
    _server, clients, directories = _directories()
    d = dict(directories[0])
    rows = list(d[field])
    own = list(d["key_owners"]).index(0)
    rows[own] = rows[1]
    with pytest.raises(MessageRejected, match="own signing key or identity signature altered"):
        clients[0].share_keys({**d, field: rows})


@pytest.mark.parametrize("old_state", [False, True])
def test_the_own_entry_check_survives_the_state_between_rounds(old_state):
    # the client's state between rounds keeps what it signed; a state written before it
    # kept them verifies its own entry like the others
    import json

    _server, clients, directories = _directories()
    state = json.loads(clients[0].to_bytes())
    if old_state:
        del state["signing_pk"], state["identity_signature"]
    data = json.dumps(state).encode()
    assert SecAggClient.from_bytes(data).share_keys(directories[0])["ciphertexts"]
    d = dict(directories[0])
    rows = list(d["signing_keys"])
    rows[list(d["key_owners"]).index(0)] = rows[1]
    why = "not signed by the identity key" if old_state else "own signing key or identity"
    with pytest.raises(MessageRejected, match=why):
        SecAggClient.from_bytes(data).share_keys({**d, "signing_keys": rows})


def test_a_client_stops_verifying_survivor_signatures_at_the_threshold(monkeypatch):
    # malicious-server mode: t valid signatures on the list suffice; the rest of the
    # request's signatures are not verified (garbage after them changes nothing), and
    # fewer than t valid ones are still refused
    from fa_hetdp.secagg.consistency import check_signatures
    from fa_hetdp.secagg.errors import UnmaskRefused
    from fa_hetdp.secagg.inprocess import InProcessSession
    from fa_hetdp.secagg.messages import UnmaskRequest

    n, t = 7, 5
    identities, roster = in_process_identities(n)
    session = InProcessSession(
        n,
        threshold=t,
        num_summations=1,
        neighbours="complete",
        rng=np.random.default_rng(0),
        threat_model="malicious-server",
        gamma=1 / 7,
        identities=identities,
        roster=roster,
    )
    server, clients = session.server, session.clients
    x = _inputs(n)
    for i, request in server.start_summation(choose_encoding(n, np.full(D, 100.0))).items():
        server.receive_masked_input(
            clients[i].masked_input(request, x[i], rng=np.random.default_rng(i))
        )
    check = server.consistency_request()
    for i in server.survivors:
        server.receive_consistency(clients[i].sign_survivors(check))
    request = UnmaskRequest.from_dict(server.unmask_requests()[0])
    assert len(request.signers) == n
    garbage = tuple(sig if p < t else bytes(64) for p, sig in enumerate(request.signatures))
    calls = _counting_verifications(monkeypatch)
    check_signatures(clients[0], replace(request, signatures=garbage))
    assert len(calls) == t
    short = tuple(sig if p < t - 1 else bytes(64) for p, sig in enumerate(request.signatures))
    with pytest.raises(UnmaskRefused, match=f"{t - 1} valid signatures"):
        check_signatures(clients[0], replace(request, signatures=short))
