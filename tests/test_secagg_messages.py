import numpy as np
import pytest

from fa_hetdp.secagg.errors import MessageRejected
from fa_hetdp.secagg.messages import (
    AdvertiseKeys,
    ConsistencyRequest,
    ConsistencyResponse,
    KeyDirectory,
    MaskedInput,
    MaskedInputRequest,
    SetupMessage,
    ShareKeys,
    UnmaskRequest,
    UnmaskResponse,
    join_arrays,
    parse_message,
    split_arrays,
)
from fa_hetdp.secagg.shamir import LIMBS

SAMPLES = [
    SetupMessage(
        session=b"s" * 32,
        recipient=1,
        num_clients=3,
        threshold=2,
        num_summations=2,
        degree=2,
        consistency=0,
        graph_digest=b"g" * 32,
        neighbours=(2, 3),
        points=(2, 3),
    ),
    AdvertiseKeys(
        session=b"s",
        sender=1,
        channel_key=b"a" * 32,
        mask_keys=b"b" * 64,
        seed_commitments=b"c" * 64,
        signing_key=b"",
    ),
    KeyDirectory(
        session=b"s",
        num_advertised=3,
        advertised_digest=b"d" * 32,
        key_owners=(1, 2),
        channel_keys=(b"a", b"b"),
        mask_keys=(b"c", b"d"),
        signing_keys=(b"", b""),
        identities=(b"owner-1", b"owner-2"),
        identity_signatures=(b"e" * 64, b"f" * 64),
    ),
    ShareKeys(
        session=b"s",
        sender=1,
        recipients=(2, 3),
        ciphertexts=(b"x", b"y"),
        digests=(b"d" * 64, b"e" * 64),
        signature=b"s" * 64,
    ),
    MaskedInputRequest(
        session=b"s",
        summation=0,
        recipient=2,
        scales=np.ones(3),
        bounds=np.ones(3),
        max_clients=3,
        senders=(1,),
        ciphertexts=(b"x",),
        digests=(b"d" * 64,),
    ),
    MaskedInput(session=b"s", sender=2, summation=1, vector=np.arange(4, dtype=np.uint64)),
    MaskedInput(
        session=b"s", sender=2, summation=0, vector=np.arange(4, dtype=np.uint64), rejected=(5,)
    ),
    UnmaskRequest(session=b"s", summation=0, survivors=(1, 2), dropped=(3,), num_survivors=9),
    UnmaskRequest(
        session=b"s",
        summation=1,
        survivors=(1, 2),
        dropped=(),
        num_survivors=2,
        signers=(1, 2),
        signatures=(b"x" * 64, b"y" * 64),
    ),
    ConsistencyRequest(session=b"s", summation=0, survivors=(1, 2)),
    ConsistencyResponse(session=b"s", sender=1, summation=0, signature=b"z" * 64),
    UnmaskResponse(
        session=b"s",
        sender=1,
        summation=0,
        seed_owners=(1, 2),
        seed_shares=np.zeros((2, 1, LIMBS), dtype=np.uint32),
        key_owners=(),
        key_shares=np.zeros((0, 1, LIMBS), dtype=np.uint32),
    ),
]


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_roundtrip_through_plain_dict(message):
    data = message.to_dict()
    allowed = (bytes, int, list, tuple, np.ndarray)
    assert all(isinstance(v, allowed) for v in data.values())
    for v in data.values():
        if isinstance(v, list | tuple):
            assert all(isinstance(x, bytes | int) for x in v)
    back = parse_message(data)
    assert type(back) is type(message)
    assert back.to_dict().keys() == data.keys()
    for key, value in data.items():
        if isinstance(value, np.ndarray):
            assert np.array_equal(back.to_dict()[key], value)
        else:
            assert back.to_dict()[key] == value


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_missing_or_extra_field_rejected(message):
    data = message.to_dict()
    key = next(k for k in data if k != "message")
    broken = dict(data)
    del broken[key]
    with pytest.raises(MessageRejected, match="missing"):
        type(message).from_dict(broken)
    with pytest.raises(MessageRejected, match="unexpected"):
        type(message).from_dict({**data, "extra": 1})


def test_wrong_tag_rejected():
    data = SAMPLES[1].to_dict()
    with pytest.raises(MessageRejected, match="expected"):
        ShareKeys.from_dict(data)
    with pytest.raises(MessageRejected, match="unknown message tag"):
        parse_message({**data, "message": b"nope"})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("sender", -1),
        ("sender", True),
        ("sender", "1"),
        ("sender", 2**64),
        ("sender", 2.0),
        ("session", "s"),
        ("summation", 99),
    ],
)
def test_ill_typed_scalar_fields_rejected(field, value):
    data = SAMPLES[5].to_dict()
    data[field] = value
    with pytest.raises(MessageRejected):
        MaskedInput.from_dict(data)


@pytest.mark.parametrize(
    "vector",
    [np.zeros(3, dtype=np.int64), np.zeros(3), np.zeros((2, 2), dtype=np.uint64), [1, 2]],
)
def test_masked_input_vector_dtype_and_shape(vector):
    data = SAMPLES[5].to_dict()
    data["vector"] = vector
    with pytest.raises(MessageRejected):
        MaskedInput.from_dict(data)


def test_share_array_shapes_checked():
    data = next(m for m in SAMPLES if isinstance(m, UnmaskResponse)).to_dict()
    data["seed_shares"] = np.zeros((3, 1, LIMBS), dtype=np.uint32)
    with pytest.raises(MessageRejected, match="shape"):
        UnmaskResponse.from_dict(data)


def test_list_fields_checked():
    data = SAMPLES[3].to_dict()
    data["recipients"] = [2, 2]
    with pytest.raises(MessageRejected, match="twice"):
        ShareKeys.from_dict(data)
    data["recipients"] = [2]
    with pytest.raises(MessageRejected, match="length"):
        ShareKeys.from_dict(data)
    data["recipients"] = [2, "3"]
    with pytest.raises(MessageRejected):
        ShareKeys.from_dict(data)


def test_received_arrays_are_read_only_copies():
    original = np.arange(4, dtype=np.uint64)
    data = SAMPLES[5].to_dict()
    data["vector"] = original
    parsed = MaskedInput.from_dict(data)
    original[0] = 99
    assert parsed.vector[0] == 0 and not parsed.vector.flags.writeable


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_split_and_join_arrays_roundtrip(message):
    scalars, arrays = split_arrays(message.to_dict())
    assert not any(isinstance(v, np.ndarray) for v in scalars.values())
    assert all(isinstance(v, np.ndarray) for v in arrays.values())
    back = parse_message(join_arrays(scalars, arrays))
    assert type(back) is type(message)


def test_join_refuses_overlap():
    with pytest.raises(MessageRejected, match="both"):
        join_arrays({"vector": 1}, {"vector": np.zeros(1)})


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("neighbours", (3, 2), "sorted"),
        ("neighbours", (2, 2), "twice"),
        ("neighbours", (1, 3), "own neighbour"),
        ("neighbours", (2,), "degree"),
        ("points", (2, 2), "twice"),
        ("points", (0, 3), "points must lie"),
        ("points", (2, 4), "points must lie"),
        ("graph_digest", b"g", "digest"),
        ("threshold", 3, "threshold"),
    ],
)
def test_setup_neighbourhood_is_checked(field, value, match):
    data = SAMPLES[0].to_dict()
    data[field] = value
    with pytest.raises(MessageRejected, match=match):
        SetupMessage.from_dict(data)


def test_directory_count_cannot_be_below_the_keys_shown():
    data = {**SAMPLES[2].to_dict(), "num_advertised": 1}
    with pytest.raises(MessageRejected, match="num_advertised"):
        KeyDirectory.from_dict(data)
