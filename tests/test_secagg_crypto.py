import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from fa_hetdp.secagg import crypto
from fa_hetdp.secagg.errors import MessageRejected

P = 2**255 - 19


def test_prg_known_answer_zero_key():
    # AES-256 of the all-zero block under the all-zero key: dc95c078a2408989ad48a21492842087
    # (the standard AES-256 zero-key known answer), read as two little-endian uint64 words.
    stream = crypto.mask_keystream(bytes(32), 2)
    assert stream.dtype == np.uint64
    assert [int(x) for x in stream] == [0x898940A278C095DC, 0x8720849214A248AD]
    assert stream.astype("<u8").tobytes().hex() == "dc95c078a2408989ad48a21492842087"


def test_prg_matches_independent_aes_ctr():
    key = bytes(range(32))
    length = 1000
    encryptor = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor()
    expected_bytes = encryptor.update(bytes(8 * length)) + encryptor.finalize()
    expected = [int.from_bytes(expected_bytes[8 * i : 8 * i + 8], "little") for i in range(length)]
    stream = crypto.mask_keystream(key, length)
    assert [int(x) for x in stream] == expected
    # pinned prefix (computed once with the code above; AES-256-CTR, counter block zero)
    assert stream[:4].astype("<u8").tobytes().hex() == (
        "f29000b62a499fd0a9f39a6add2e7780f05d76ae4ab99fe5a6f69b3148c2363d"
    )


def test_prg_prefix_is_stable_across_lengths():
    key = bytes(range(1, 33))
    assert np.array_equal(crypto.mask_keystream(key, 10), crypto.mask_keystream(key, 50)[:10])


def test_prg_rejects_short_key():
    with pytest.raises(ValueError, match="32 bytes"):
        crypto.mask_keystream(bytes(16), 4)


@pytest.mark.parametrize("buffer_bytes", [1 << 22, 8 * 37 * 2, 1])
def test_mask_sum_equals_keystreams_added_one_by_one(monkeypatch, buffer_bytes):
    # the buffered signed sum (any chunking) is the sequential sum mod 2^64, bit for bit
    monkeypatch.setattr(crypto, "_MASK_BUFFER", buffer_bytes)
    rng = np.random.default_rng(7)
    base = rng.integers(0, 2**64, size=37, dtype=np.uint64)
    add = [bytes([i]) * 32 for i in range(5)]
    subtract = [bytes([100 + i]) * 32 for i in range(4)]
    expected = base.copy()
    for key in add:
        expected += crypto.mask_keystream(key, 37)
    for key in subtract:
        expected -= crypto.mask_keystream(key, 37)
    out = crypto.mask_sum(base, add, subtract)
    assert out.dtype == np.uint64 and out.tobytes() == expected.tobytes()
    assert np.array_equal(crypto.mask_sum(base, [], []), base)
    assert crypto.mask_sum(base, [], []) is not base


def test_mask_sum_rejects_short_key():
    with pytest.raises(ValueError, match="32 bytes, got 16"):
        crypto.mask_sum(np.zeros(4, dtype=np.uint64), [bytes(32)], [bytes(16)])


def test_keypair_is_clamped_and_consistent():
    private, public = crypto.generate_keypair()
    value = int.from_bytes(private, "little")
    assert value % 8 == 0 and 2**254 <= value < 2**255
    assert crypto.public_from_private(private) == public


def test_key_agreement_is_symmetric():
    a_sk, a_pk = crypto.generate_keypair()
    b_sk, b_pk = crypto.generate_keypair()
    assert crypto.agree(a_sk, b_pk) == crypto.agree(b_sk, a_pk)


@pytest.mark.parametrize(
    "u",
    [
        0,
        1,
        P - 1,
        P,
        P + 1,
        325606250916557431795983626356110631294008115727848805560023387167927233504,
        39382357235489614581723060781553021112529911719440698176882885853963445705823,
    ],
)
def test_small_order_public_keys_rejected(u):
    raw = u.to_bytes(32, "little")
    with pytest.raises(MessageRejected, match="small-order"):
        crypto.validate_public_key(raw)
    # cross-check: OpenSSL's X25519 indeed yields the all-zero secret for these points
    with pytest.raises(ValueError):
        X25519PrivateKey.generate().exchange(X25519PublicKey.from_public_bytes(raw))


def test_small_order_with_high_bit_set_rejected():
    raw = bytearray((1).to_bytes(32, "little"))
    raw[31] |= 0x80  # X25519 ignores bit 255, so this is still the point u = 1
    with pytest.raises(MessageRejected):
        crypto.validate_public_key(bytes(raw))


@pytest.mark.parametrize("raw", [b"", bytes(31), bytes(33), "a" * 32, None])
def test_malformed_public_keys_rejected(raw):
    with pytest.raises(MessageRejected):
        crypto.validate_public_key(raw)


def test_channel_keys_are_directional_and_match():
    a_sk, a_pk = crypto.generate_keypair()
    b_sk, b_pk = crypto.generate_keypair()
    sid = b"s" * 32
    a_send, a_recv = crypto.derive_channel_keys(crypto.agree(a_sk, b_pk), sid, 3, 9)
    b_send, b_recv = crypto.derive_channel_keys(crypto.agree(b_sk, a_pk), sid, 9, 3)
    assert a_send == b_recv and b_send == a_recv and a_send != a_recv


def test_derived_keys_depend_on_session_pair_and_summation():
    shared = bytes(range(32))
    base = crypto.derive_mask_key(shared, b"A" * 32, 1, 2, 0)
    assert base == crypto.derive_mask_key(shared, b"A" * 32, 2, 1, 0)
    assert base != crypto.derive_mask_key(shared, b"B" * 32, 1, 2, 0)
    assert base != crypto.derive_mask_key(shared, b"A" * 32, 1, 3, 0)
    assert base != crypto.derive_mask_key(shared, b"A" * 32, 1, 2, 1)
    assert base not in crypto.derive_channel_keys(shared, b"A" * 32, 1, 2)


def test_seal_open_roundtrip_and_tamper_detection():
    key = bytes(range(32))
    blob = crypto.seal(key, b"secret shares", b"aad")
    assert crypto.open_sealed(key, blob, b"aad") == b"secret shares"
    tampered = bytearray(blob)
    tampered[20] ^= 1
    with pytest.raises(MessageRejected, match="authentication"):
        crypto.open_sealed(key, bytes(tampered), b"aad")
    with pytest.raises(MessageRejected, match="authentication"):
        crypto.open_sealed(key, blob, b"other aad")
    with pytest.raises(MessageRejected, match="too short"):
        crypto.open_sealed(key, blob[:10], b"aad")


def test_session_digest_is_length_prefixed():
    assert crypto.session_digest([b"ab", b"c"]) != crypto.session_digest([b"a", b"bc"])


@pytest.mark.parametrize("length", [1, 32, 64, 65, 100])
@pytest.mark.parametrize("info", [b"", b"info/" + bytes(17), b"x" * 100])
def test_kdf_sha256_equals_the_reference_implementation(length, info):
    # NIST SP 800-56C one-step KDF (SHA-256) = cryptography's ConcatKDFHash
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.concatkdf import ConcatKDFHash

    secret = bytes(range(32))
    reference = ConcatKDFHash(algorithm=hashes.SHA256(), length=length, otherinfo=info).derive(
        secret
    )
    assert crypto.kdf_sha256(secret, info, length) == reference


def test_seal_many_opens_like_seal_with_fresh_nonces():
    keys = [bytes([i]) * 32 for i in range(3)]
    blobs = crypto.seal_many(keys, [b"a", b"bb", b"ccc"], [b"x", b"y", b"z"])
    assert [
        crypto.open_sealed(k, b, bytes([a])) for k, b, a in zip(keys, blobs, b"xyz", strict=True)
    ] == [b"a", b"bb", b"ccc"]
    assert len({b[:12] for b in blobs}) == 3  # distinct random nonces


def test_batch_key_derivations_equal_the_single_ones():
    secrets = [bytes([i]) * 32 for i in range(4)]
    peers = [0, 5, 9, 2**64 - 1]
    sid = b"S" * 32
    assert crypto.derive_channel_keys_many(secrets, sid, 7, peers) == [
        crypto.derive_channel_keys(z, sid, 7, j) for z, j in zip(secrets, peers, strict=True)
    ]
    assert crypto.derive_mask_keys(secrets, sid, 7, peers, 3) == [
        crypto.derive_mask_key(z, sid, 7, j, 3) for z, j in zip(secrets, peers, strict=True)
    ]
    with pytest.raises(ValueError):
        crypto.derive_mask_keys(secrets, sid, 7, peers[:2], 0)


def test_normalised_public_keys_is_normalised_public_key_for_each():
    # the one-pass form the client uses on its directory: the same keys, the same refusals
    honest = [crypto.generate_keypair()[1] for _ in range(6)]
    assert crypto.normalised_public_keys(honest) == honest
    high = bytearray(honest[2])
    high[31] |= 0x80  # bit 255 set: another encoding of the same key
    mixed = [*honest[:2], bytes(high), *honest[3:]]
    assert crypto.normalised_public_keys(mixed) == [crypto.normalised_public_key(k) for k in mixed]
    assert crypto.normalised_public_keys(mixed)[2] == honest[2]
    for bad, why in (((1).to_bytes(32, "little"), "small-order"), (bytes(31), "32 bytes")):
        with pytest.raises(MessageRejected, match=why):
            crypto.normalised_public_keys([*honest, bad])
