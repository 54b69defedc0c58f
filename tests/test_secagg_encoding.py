import numpy as np
import pytest

from fa_hetdp.secagg.encoding import FixedPointEncoding, choose_encoding
from fa_hetdp.secagg.errors import EncodingError


def test_scale_is_power_of_two_and_cannot_wrap():
    enc = choose_encoding(1000, np.array([1.0, 100.0]), noise_std=np.array([0.5, 2.0]))
    assert np.all(np.log2(enc.scales) == np.floor(np.log2(enc.scales)))
    assert np.all(1000 * (enc.bounds * enc.scales + 1) < 2.0**63)
    assert np.all(enc.bounds == np.array([1.0 + 12 * 0.5, 100.0 + 12 * 2.0]))


def test_worst_case_sum_decodes_without_wrap():
    n = 1000
    enc = choose_encoding(n, 1.0)
    rng = np.random.default_rng(0)
    for sign in (1.0, -1.0):
        total = np.zeros(1, dtype=np.uint64)
        for _ in range(n):
            total += enc.encode(np.array([sign * 1.0]), rng=rng)
        assert enc.decode(total, n)[0] == pytest.approx(sign * n, abs=n / enc.scales[0])


def test_decoding_error_below_n_over_scale():
    rng = np.random.default_rng(1)
    n, d = 200, 50
    enc = choose_encoding(n, np.ones(d), min_scale=1.0)
    coarse = FixedPointEncoding(scales=np.full(d, 8.0), bounds=np.ones(d), max_clients=n)
    values = rng.uniform(-1, 1, size=(n, d))
    for e in (enc, coarse):
        total = np.zeros(d, dtype=np.uint64)
        for row in values:
            total += e.encode(row, rng=rng)
        err = np.abs(e.decode(total, n) - values.sum(axis=0))
        assert np.all(err <= e.max_decoding_error(n))


def test_stochastic_rounding_is_unbiased():
    # mean of 20000 roundings of 0.3 at scale 1: binomial, 6-sigma band (alpha ~ 2e-9)
    enc = FixedPointEncoding(scales=np.ones(20000), bounds=np.ones(20000), max_clients=1)
    codes = enc.encode(np.full(20000, 0.3), rng=np.random.default_rng(2)).view(np.int64)
    assert set(np.unique(codes)) <= {0, 1}
    assert abs(codes.mean() - 0.3) < 6 * np.sqrt(0.21 / 20000)


def test_refuses_settings_that_could_wrap():
    with pytest.raises(EncodingError, match="wrap"):
        FixedPointEncoding(scales=np.array([2.0**40]), bounds=np.array([10.0]), max_clients=10**6)
    with pytest.raises(EncodingError, match="min_scale"):
        choose_encoding(10**6, 1e12, min_scale=2.0**20)


def test_refuses_out_of_bound_values_never_clips():
    enc = choose_encoding(10, 1.0)
    with pytest.raises(EncodingError, match="exceeds the stated"):
        enc.encode(np.array([1.5]), rng=np.random.default_rng(0))


@pytest.mark.parametrize(
    "values",
    [
        np.zeros(3),
        np.zeros(2, dtype=np.float32),
        np.zeros(2, dtype=np.int64),
        [0.0, 0.0],
        np.array([np.nan, 0.0]),
    ],
)
def test_refuses_wrong_length_dtype_or_nonfinite(values):
    enc = choose_encoding(10, np.ones(2))
    with pytest.raises(EncodingError):
        enc.encode(values, rng=np.random.default_rng(0))


def test_decode_refuses_more_clients_than_planned():
    enc = choose_encoding(5, 1.0)
    with pytest.raises(EncodingError, match="max_clients"):
        enc.decode(np.zeros(1, dtype=np.uint64), 6)


def test_modulus_32_scale_cannot_wrap_in_z_2_32():
    enc = choose_encoding(100, np.array([1.0, 100.0]), noise_std=0.5, modulus_bits=32)
    assert enc.modulus_bits == 32 and enc.word_bytes == 4
    assert np.all(100 * (enc.bounds * enc.scales + 1) < 2.0**31)
    wide = choose_encoding(100, np.array([1.0, 100.0]), noise_std=0.5)
    assert wide.modulus_bits == 64 and wide.word_bytes == 8
    want = np.exp2(np.floor(np.log2((2.0**31 / 100 - 2.0) / enc.bounds)))
    np.testing.assert_array_equal(enc.scales, want)  # the largest power of two that fits
    assert np.all(wide.scales >= 2.0**20 * enc.scales)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_modulus_32_worst_case_sum_with_masks_decodes(sign):
    # Clients add masks that cancel in Z_2^64 and send the low 32 bits (reduce); the
    # server sums those in Z_2^64 (or in uint32): the low 32 bits read as signed decode.
    n, d = 300, 4
    enc = choose_encoding(n, np.ones(d), modulus_bits=32)
    rng = np.random.default_rng(3)
    masks = rng.integers(0, 2**63, size=(n, d), dtype=np.uint64) * np.uint64(2)
    masks[-1] = -masks[:-1].sum(axis=0, dtype=np.uint64)  # all masks cancel mod 2^64
    sent = []
    for i in range(n):
        code = enc.encode(np.full(d, sign), rng=rng)
        assert code.max() < 2**32
        sent.append(enc.reduce(code + masks[i]))
    sent_arr = np.array(sent)
    assert sent_arr.max() < 2**32
    total64 = sent_arr.sum(axis=0, dtype=np.uint64)
    total32 = sent_arr.astype(np.uint32).sum(axis=0, dtype=np.uint32).astype(np.uint64)
    for total in (total64, total32):
        decoded = enc.decode(total, n)
        assert np.all(np.abs(decoded - sign * n) <= enc.max_decoding_error(n))


def test_modulus_32_refuses_settings_that_could_wrap():
    fits_64 = {"scales": np.array([2.0**20]), "bounds": np.array([10.0]), "max_clients": 10**4}
    FixedPointEncoding(**fits_64)
    with pytest.raises(EncodingError, match=r"2\^31 and wrap in Z_2\^32"):
        FixedPointEncoding(**fits_64, modulus_bits=32)
    with pytest.raises(EncodingError, match=r"min_scale.*Z_2\^32"):
        choose_encoding(10**4, 1e3, min_scale=2.0**10, modulus_bits=32)
    choose_encoding(10**4, 1e3, min_scale=2.0**10)  # the 64-bit ring has room


@pytest.mark.parametrize("bits", [16, 128, True, "32", 32.5])
def test_modulus_bits_other_than_32_or_64_refused(bits):
    with pytest.raises(EncodingError, match="modulus_bits must be one of"):
        choose_encoding(10, 1.0, modulus_bits=bits)
    with pytest.raises(EncodingError, match="modulus_bits must be one of"):
        FixedPointEncoding(np.ones(1), np.ones(1), 1, modulus_bits=bits)
