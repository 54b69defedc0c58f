"""Tests of fa_hetdp.data (dataset, readers, catalog, synthetic, download) on small files."""

from __future__ import annotations

import argparse
import gzip
import pickle
import struct
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fa_hetdp.cli import data as download
from fa_hetdp.data.catalog import LABEL_COUNTS, default_data_root, load_dataset
from fa_hetdp.data.dataset import Dataset
from fa_hetdp.data.readers import read_cifar10, read_cifar100, read_fashion_mnist, read_idx
from fa_hetdp.data.synthetic import synthetic_dataset
from fa_hetdp.errors import DatasetError

# ---------------------------------------------------------------------------------------------
# Writers of the on-disk formats (CIFAR python pickles, IDX files)
# ---------------------------------------------------------------------------------------------


def _pixels(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    return rng.integers(0, 256, size=(n, d), dtype=np.uint8)


def write_cifar10(root: Path, *, per_batch: int = 4, protocol: int = 2, seed: int = 0) -> dict:
    """Write data_batch_1..5 and test_batch as the CIFAR-10 python version does."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    written = {}
    for name in [f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]:
        pixels = _pixels(rng, per_batch, 3072)
        labels = [int(v) for v in rng.integers(0, 10, size=per_batch)]
        batch = {
            b"batch_label": name.encode(),
            b"labels": labels,
            b"data": pixels,
            b"filenames": [f"img{i}.png".encode() for i in range(per_batch)],
        }
        (folder / name).write_bytes(pickle.dumps(batch, protocol=protocol))
        written[name] = (pixels, labels)
    return written


def write_cifar100(root: Path, *, n_train: int = 6, n_test: int = 3, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    written = {}
    for name, n in (("train", n_train), ("test", n_test)):
        pixels = _pixels(rng, n, 3072)
        coarse = [int(v) for v in rng.integers(0, 20, size=n)]
        batch = {
            b"filenames": [b"x"] * n,
            b"batch_label": name.encode(),
            b"fine_labels": [int(v) for v in rng.integers(0, 100, size=n)],
            b"coarse_labels": coarse,
            b"data": pixels,
        }
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
        written[name] = (pixels, coarse)
    return written


def idx_bytes(array: np.ndarray, magic: int) -> bytes:
    header = struct.pack(">i", magic) + struct.pack(f">{array.ndim}i", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def write_fashion(
    root: Path, *, n_train: int = 5, n_test: int = 3, gz: tuple[bool, bool] = (False, True)
) -> dict:
    rng = np.random.default_rng(2)
    folder = root / "FashionMNIST" / "raw"
    folder.mkdir(parents=True)
    written = {}
    for (prefix, n), compress in zip((("train", n_train), ("t10k", n_test)), gz, strict=True):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n).astype(np.uint8)
        for stem, blob in (
            (f"{prefix}-images-idx3-ubyte", idx_bytes(images, 2051)),
            (f"{prefix}-labels-idx1-ubyte", idx_bytes(labels, 2049)),
        ):
            if compress:
                (folder / f"{stem}.gz").write_bytes(gzip.compress(blob))
            else:
                (folder / stem).write_bytes(blob)
        written[prefix] = (images, labels)
    return written


# ---------------------------------------------------------------------------------------------
# CIFAR-10
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_cifar10_reads_train_test_all(tmp_path: Path, protocol: int) -> None:
    written = write_cifar10(tmp_path, protocol=protocol)
    train = read_cifar10(tmp_path, split="train")
    names = [f"data_batch_{k}" for k in range(1, 6)]
    expected = np.concatenate([written[n][0] for n in names])
    assert train.raw.shape == (20, 3072) and train.dim == 3072
    np.testing.assert_array_equal(train.raw, expected)
    np.testing.assert_array_equal(train.labels, [label for n in names for label in written[n][1]])
    np.testing.assert_array_equal(train.features, expected / 255.0)  # pixels / 255, flattened
    test = read_cifar10(tmp_path, split="test")
    np.testing.assert_array_equal(test.raw, written["test_batch"][0])
    both = load_dataset("cifar10", root=tmp_path, split="all")
    assert both.size == 24
    np.testing.assert_array_equal(both.raw[20:], written["test_batch"][0])


def test_cifar10_pickle_written_by_old_numpy(tmp_path: Path) -> None:
    # The real CIFAR files were pickled by numpy 1.x (module numpy.core.multiarray).
    write_cifar10(tmp_path)
    path = tmp_path / "cifar-10-batches-py" / "test_batch"
    blob = path.read_bytes()
    assert b"numpy._core.multiarray" in blob
    path.write_bytes(blob.replace(b"numpy._core.multiarray", b"numpy.core.multiarray"))
    assert read_cifar10(tmp_path, split="test").size == 4


def test_cifar10_missing_file_names_path_and_layout(tmp_path: Path) -> None:
    write_cifar10(tmp_path)
    missing = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    missing.unlink()
    with pytest.raises(DatasetError) as info:
        read_cifar10(tmp_path)
    message = str(info.value)
    assert str(missing) in message
    assert "data_batch_1 .. data_batch_5" in message
    assert "fa-hetdp data download cifar10" in message


def test_cifar10_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="cifar-10-batches-py"):
        load_dataset("cifar10", root=tmp_path / "nowhere")


def test_cifar10_truncated_pickle(tmp_path: Path) -> None:
    write_cifar10(tmp_path)
    path = tmp_path / "cifar-10-batches-py" / "data_batch_1"
    path.write_bytes(path.read_bytes()[:500])
    with pytest.raises(DatasetError, match=r"corrupt dataset file .*data_batch_1"):
        read_cifar10(tmp_path)


def test_cifar10_garbage_file(tmp_path: Path) -> None:
    write_cifar10(tmp_path)
    path = tmp_path / "cifar-10-batches-py" / "test_batch"
    path.write_bytes(b"this is not a pickle at all")
    with pytest.raises(DatasetError, match="test_batch"):
        read_cifar10(tmp_path, split="test")


@pytest.mark.parametrize(
    ("batch", "match"),
    [
        ({b"labels": [0]}, "needs keys"),
        ({b"data": np.zeros((2, 3072), np.uint8)}, "needs keys"),
        ({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}, r"shape \(N, 3072\)"),
        ({b"data": np.zeros((2, 3072), np.float64), b"labels": [0, 1]}, "uint8"),
        ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}, "2 images but"),
        (
            {b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 10]},
            r"labels must lie in 0\.\.9",
        ),
        ([1, 2, 3], "expected a pickled dict"),
    ],
)
def test_cifar10_bad_contents(tmp_path: Path, batch: Any, match: str) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    (folder / "test_batch").write_bytes(pickle.dumps(batch, protocol=2))
    with pytest.raises(DatasetError, match=match):
        read_cifar10(tmp_path, split="test")


class _Exploit:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.marker), "w"))


def test_pickle_reader_refuses_code(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    payload = {b"data": _Exploit(marker), b"labels": [0]}
    (folder / "test_batch").write_bytes(pickle.dumps(payload, protocol=2))
    with pytest.raises(DatasetError, match="refusing to load global"):
        read_cifar10(tmp_path, split="test")
    assert not marker.exists()


def test_pickle_reader_refuses_object_arrays(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    payload = {b"data": np.array([{"a": 1}], dtype=object), b"labels": [0]}
    (folder / "test_batch").write_bytes(pickle.dumps(payload, protocol=2))
    with pytest.raises(DatasetError, match="refusing dtype 'O"):
        read_cifar10(tmp_path, split="test")


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_pickle_reader_survives_random_corruption(tmp_path: Path, protocol: int) -> None:
    # numpy's own ndarray/dtype __setstate__ can crash the interpreter on malformed state (seen
    # while fuzzing); the reader's stand-ins must turn every corruption into DatasetError.
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    batch = {b"data": np.arange(2 * 3072, dtype=np.uint64).astype(np.uint8).reshape(2, 3072)}
    batch[b"labels"] = [3, 4]
    good = pickle.dumps(batch, protocol=protocol)
    rng = np.random.default_rng(protocol)
    outcomes = {"ok": 0, "error": 0}
    for _ in range(300):
        blob = bytearray(good)
        for _ in range(int(rng.integers(1, 4))):
            blob[int(rng.integers(0, 220))] = int(rng.integers(0, 256))
        (folder / "test_batch").write_bytes(bytes(blob))
        try:
            ds = read_cifar10(tmp_path, split="test")
        except DatasetError:
            outcomes["error"] += 1
        else:
            outcomes["ok"] += 1
            assert ds.raw.shape == (2, 3072)
    assert outcomes["error"] > 100  # the mutations do hit the structure


# ---------------------------------------------------------------------------------------------
# CIFAR-100
# ---------------------------------------------------------------------------------------------


def test_cifar100_coarse_labels_merged_by_two(tmp_path: Path) -> None:
    written = write_cifar100(tmp_path)
    train = read_cifar100(tmp_path)
    np.testing.assert_array_equal(train.raw, written["train"][0])
    np.testing.assert_array_equal(train.labels, np.asarray(written["train"][1]) // 2)
    assert train.num_labels == 10
    both = read_cifar100(tmp_path, split="all")
    assert both.size == 9
    np.testing.assert_array_equal(both.labels[6:], np.asarray(written["test"][1]) // 2)


def test_cifar100_bucket_mapping_explicit(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    coarse = [0, 1, 2, 3, 18, 19]
    batch = {b"data": np.zeros((6, 3072), np.uint8), b"coarse_labels": coarse}
    (folder / "test").write_bytes(pickle.dumps(batch, protocol=2))
    assert read_cifar100(tmp_path, split="test").labels.tolist() == [0, 0, 1, 1, 9, 9]


def test_cifar100_rejects_coarse_label_20(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    batch = {b"data": np.zeros((1, 3072), np.uint8), b"coarse_labels": [20]}
    (folder / "test").write_bytes(pickle.dumps(batch, protocol=2))
    with pytest.raises(DatasetError, match=r"0\.\.19"):
        read_cifar100(tmp_path, split="test")


def test_cifar100_missing(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as info:
        read_cifar100(tmp_path)
    assert str(tmp_path / "cifar-100-python" / "train") in str(info.value)
    assert "cifar-100-python/train and test" in str(info.value)


# ---------------------------------------------------------------------------------------------
# Fashion-MNIST (IDX)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gz", [(False, False), (True, True), (False, True), (True, False)])
def test_fashion_plain_and_gzip(tmp_path: Path, gz: tuple[bool, bool]) -> None:
    written = write_fashion(tmp_path, gz=gz)
    train = read_fashion_mnist(tmp_path)
    assert train.raw.shape == (5, 784)
    np.testing.assert_array_equal(train.raw, written["train"][0].reshape(5, 784))
    np.testing.assert_array_equal(train.labels, written["train"][1])
    np.testing.assert_allclose(train.features, written["train"][0].reshape(5, 784) / 255.0)
    both = load_dataset("fashion-mnist", root=tmp_path, split="all")
    assert both.size == 8
    np.testing.assert_array_equal(both.labels[5:], written["t10k"][1])


def test_read_idx_header(tmp_path: Path) -> None:
    array = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    path = tmp_path / "x-idx3-ubyte"
    path.write_bytes(idx_bytes(array, 2051))
    np.testing.assert_array_equal(read_idx(path, magic=2051), array)


def _fashion_image_path(root: Path) -> Path:
    return root / "FashionMNIST" / "raw" / "train-images-idx3-ubyte"


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda b: b[:-10], r"header says shape \(5, 28, 28\)"),  # truncated payload
        (lambda b: b + b"\x00", "file has 3937 bytes"),  # trailing bytes
        (lambda b: struct.pack(">i", 2049) + b[4:], "magic number 2049, expected 2051"),
        (lambda b: b[:2], "no IDX header"),
        (lambda b: b[:9], "truncated IDX header"),
    ],
)
def test_fashion_corrupt_images(tmp_path: Path, mutate: Any, match: str) -> None:
    write_fashion(tmp_path, gz=(False, False))
    path = _fashion_image_path(tmp_path)
    path.write_bytes(mutate(path.read_bytes()))
    with pytest.raises(DatasetError, match=match) as info:
        read_fashion_mnist(tmp_path)
    assert str(path) in str(info.value)


def test_fashion_corrupt_gzip(tmp_path: Path) -> None:
    write_fashion(tmp_path, gz=(True, True))
    path = tmp_path / "FashionMNIST" / "raw" / "train-labels-idx1-ubyte.gz"
    path.write_bytes(path.read_bytes()[:12])
    with pytest.raises(DatasetError, match=r"train-labels-idx1-ubyte\.gz"):
        read_fashion_mnist(tmp_path)


def test_fashion_count_mismatch(tmp_path: Path) -> None:
    write_fashion(tmp_path, gz=(False, False))
    folder = tmp_path / "FashionMNIST" / "raw"
    (folder / "train-labels-idx1-ubyte").write_bytes(idx_bytes(np.zeros(4, dtype=np.uint8), 2049))
    with pytest.raises(DatasetError, match=r"5 images but .* 4 labels"):
        read_fashion_mnist(tmp_path)


def test_fashion_label_out_of_range(tmp_path: Path) -> None:
    write_fashion(tmp_path, gz=(False, False))
    folder = tmp_path / "FashionMNIST" / "raw"
    (folder / "train-labels-idx1-ubyte").write_bytes(
        idx_bytes(np.full(5, 12, dtype=np.uint8), 2049)
    )
    with pytest.raises(DatasetError, match=r"labels must lie in 0\.\.9"):
        read_fashion_mnist(tmp_path)


def test_fashion_missing_names_path_and_layout(tmp_path: Path) -> None:
    write_fashion(tmp_path, gz=(False, True))
    (tmp_path / "FashionMNIST" / "raw" / "t10k-images-idx3-ubyte.gz").unlink()
    with pytest.raises(DatasetError) as info:
        read_fashion_mnist(tmp_path, split="test")
    message = str(info.value)
    assert str(tmp_path / "FashionMNIST" / "raw" / "t10k-images-idx3-ubyte") in message
    assert "FashionMNIST/raw/train-images-idx3-ubyte" in message


# ---------------------------------------------------------------------------------------------
# Digits, synthetic, load_dataset, Dataset
# ---------------------------------------------------------------------------------------------


def test_digits_embedded() -> None:
    digits = load_dataset("digits")
    assert (digits.size, digits.dim, digits.num_labels) == (1797, 64, 10)
    features = digits.features
    assert features.min() == 0.0 and features.max() == 1.0  # pixels 0..16 / 16
    # Counts of sklearn's load_digits, used by scenario validation.
    assert tuple(digits.label_counts()) == LABEL_COUNTS[("digits", "train")]
    assert load_dataset("digits", split="all").size == 1797


def test_digits_has_no_test_split() -> None:
    with pytest.raises(DatasetError, match="no test split"):
        load_dataset("digits", split="test")


def test_load_dataset_is_cached_and_read_only() -> None:
    a = load_dataset("digits")
    assert load_dataset("digits") is a
    with pytest.raises(ValueError, match="read-only"):
        a.raw[0, 0] = 3.0


@pytest.mark.parametrize(
    ("name", "split", "match"),
    [
        ("mnist", "train", "unknown dataset 'mnist'; allowed: digits, cifar10"),
        ("synthetic", "train", "synthetic_dataset"),
        ("digits", "validation", "unknown split 'validation'"),
    ],
)
def test_load_dataset_rejects(name: str, split: Any, match: str) -> None:
    with pytest.raises(DatasetError, match=match):
        load_dataset(name, split=split)


def test_default_root_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_fashion(tmp_path)
    monkeypatch.setenv("FA_HETDP_DATA", str(tmp_path))
    assert default_data_root() == tmp_path
    assert load_dataset("fashion-mnist").size == 5


def test_synthetic_shape_balance_and_determinism() -> None:
    ds = synthetic_dataset(1003, 50, 10, 0.5, rng=np.random.default_rng(7))
    assert ds.raw.dtype == np.uint8 and ds.raw.shape == (1003, 50)
    assert ds.label_counts().tolist() == [101, 101, 101] + [100] * 7
    again = synthetic_dataset(1003, 50, 10, 0.5, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(ds.raw, again.raw)
    np.testing.assert_array_equal(ds.labels, again.labels)
    other = synthetic_dataset(1003, 50, 10, 0.5, rng=np.random.default_rng(8))
    assert not np.array_equal(ds.raw, other.raw)
    assert 0.0 <= ds.features.min() and ds.features.max() <= 1.0


def _between_label_spread(heterogeneity: float) -> float:
    ds = synthetic_dataset(2000, 200, 4, heterogeneity, rng=np.random.default_rng(3))
    x = ds.features
    means = np.stack([x[ds.labels == k].mean(axis=0) for k in range(4)])
    return float(means.var(axis=0).mean())


def test_synthetic_heterogeneity_controls_label_differences() -> None:
    # h = 0: label means differ only by sampling error (noise var 0.01 / 500 per mean, ~2e-5);
    # h = 1: centres independent U(0.1, 0.9), variance ~0.05. Fixed seed, no re-draws.
    iid = _between_label_spread(0.0)
    mid = _between_label_spread(0.5)
    het = _between_label_spread(1.0)
    assert iid < 1e-4
    assert 0.005 < mid < het
    assert het > 0.02


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0, 5, 1, 0.5), "n >= 1"),
        ((10, 0, 1, 0.5), "d >= 1"),
        ((10, 5, 11, 0.5), "num_labels"),
        ((10, 5, 2, 1.5), "heterogeneity"),
    ],
)
def test_synthetic_rejects(args: tuple[int, int, int, float], match: str) -> None:
    with pytest.raises(DatasetError, match=match):
        synthetic_dataset(*args, rng=np.random.default_rng(0))


def test_synthetic_large_is_compact() -> None:
    ds = synthetic_dataset(10_000, 3072, 10, 0.5, rng=np.random.default_rng(0))
    assert ds.raw.nbytes == 10_000 * 3072  # one byte per value


def test_dataset_validates() -> None:
    with pytest.raises(DatasetError, match=r"labels must lie in 0\.\.1"):
        Dataset("x", np.zeros((2, 3)), 1.0, np.array([0, 2]), 2, "test")
    with pytest.raises(DatasetError, match="labels must have shape"):
        Dataset("x", np.zeros((2, 3)), 1.0, np.array([0]), 2, "test")
    with pytest.raises(DatasetError, match="scale"):
        Dataset("x", np.zeros((2, 3)), 0.0, np.array([0, 1]), 2, "test")


def test_dataset_rows_and_indices() -> None:
    ds = Dataset(
        "x", np.arange(12, dtype=np.uint8).reshape(4, 3), 4.0, np.array([1, 0, 1, 0]), 2, "t"
    )
    np.testing.assert_array_equal(ds.rows([[2], [0]]), [[[1.5, 1.75, 2.0]], [[0.0, 0.25, 0.5]]])
    assert ds.indices_of(1).tolist() == [0, 2]


# ---------------------------------------------------------------------------------------------
# `fa-hetdp data download`
# ---------------------------------------------------------------------------------------------


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fa-hetdp data")
    download.add_arguments(parser)
    return parser.parse_args(argv)


def test_download_without_torchvision_explains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torchvision", None)  # makes `import torchvision` fail
    monkeypatch.setitem(sys.modules, "torchvision.datasets", None)
    code = download.run_command(_parse(["download", "cifar10", "--root", str(tmp_path)]))
    assert code == 1
    err = capsys.readouterr().err
    assert "pip install 'fa-hetdp[datasets]'" in err
    assert f"{tmp_path}/cifar-10-batches-py/data_batch_1 .. data_batch_5, test_batch" in err
    assert "https://www.cs.toronto.edu/~kriz/cifar.html" in err


def test_download_with_torchvision_verifies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[tuple[str, bool, bool]] = []

    class FakeFashion:
        def __init__(self, root: str, *, train: bool, download: bool) -> None:
            calls.append((root, train, download))
            if train:
                write_fashion(Path(root))

    fake_datasets = types.ModuleType("torchvision.datasets")
    fake_datasets.FashionMNIST = FakeFashion  # type: ignore[attr-defined]
    fake_datasets.CIFAR10 = FakeFashion  # type: ignore[attr-defined]
    fake_datasets.CIFAR100 = FakeFashion  # type: ignore[attr-defined]
    fake = types.ModuleType("torchvision")
    fake.datasets = fake_datasets  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torchvision", fake)
    monkeypatch.setitem(sys.modules, "torchvision.datasets", fake_datasets)
    code = download.run_command(_parse(["download", "fashion-mnist", "--root", str(tmp_path)]))
    assert code == 0
    assert calls == [(str(tmp_path), True, True), (str(tmp_path), False, True)]
    assert "fashion-mnist: 8 images of dimension 784" in capsys.readouterr().out


def test_download_without_torchvision_fashion_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torchvision", None)
    monkeypatch.setitem(sys.modules, "torchvision.datasets", None)
    assert download.run_command(_parse(["download", "fashion-mnist", "--root", str(tmp_path)])) == 1
    err = capsys.readouterr().err
    assert f"{tmp_path}/FashionMNIST/raw/train-images-idx3-ubyte.gz" in err
    assert "zalandoresearch/fashion-mnist" in err


def test_download_digits_needs_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert download.run_command(_parse(["download", "digits"])) == 0
    assert "embedded" in capsys.readouterr().out


def test_download_rejects_unknown_name() -> None:
    with pytest.raises(SystemExit):
        _parse(["download", "imagenet"])


def test_catalog_has_one_record_per_dataset_and_the_lists_are_views_of_it() -> None:
    from typing import get_args

    from fa_hetdp.data.catalog import DATASET_NAMES, DATASETS, DOWNLOADABLE, dataset_info
    from fa_hetdp.data.dataset import DatasetName

    assert DATASET_NAMES == get_args(DatasetName) == tuple(i.name for i in DATASETS)
    assert DOWNLOADABLE == ("cifar10", "cifar100", "fashion-mnist")
    assert {name for name, _ in LABEL_COUNTS} == {"digits", "cifar10", "cifar100", "fashion-mnist"}
    assert LABEL_COUNTS[("fashion-mnist", "all")] == (7000,) * 10
    assert ("digits", "test") not in LABEL_COUNTS
    digits = load_dataset("digits")
    info = dataset_info("digits")
    assert (info.dim, info.num_labels) == (digits.dim, digits.num_labels)
    for record in DATASETS:
        assert (record.reader is None) == (record.name == "synthetic")
        assert (record.manual is None) == (record.torchvision is None)
    with pytest.raises(DatasetError, match="unknown dataset 'imagenet'; allowed: digits"):
        dataset_info("imagenet")
    with pytest.raises(DatasetError, match="'synthetic' is generated"):
        load_dataset("synthetic")
