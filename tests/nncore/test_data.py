"""Datasets: synthetic sets, the IDX reader and its errors, the embedded subset, splits."""
import gzip
import struct

import numpy as np
import pytest

from nncore import data
from nncore.errors import ConfigError, DataError


def write_idx(path, arr, gz=False):
    raw = bytes([0, 0, 8, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.astype(np.uint8).tobytes()
    (gzip.open if gz else open)(path, "wb").write(raw)
    return raw


def make_idx_dir(tmp_path, n_train=13, n_test=7, hw=(5, 6), gz=True, classes=10, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {}
    for part, n in (("train", n_train), ("test", n_test)):
        img, lab = data.IDX_FILES[part]
        arrays[part] = (rng.integers(0, 256, size=(n, *hw)), rng.integers(0, classes, size=n))
        write_idx(tmp_path / (img + (".gz" if gz else "")), arrays[part][0], gz)
        write_idx(tmp_path / (lab + (".gz" if gz else "")), arrays[part][1], gz)
    return arrays


@pytest.mark.parametrize("name", data.SYNTHETIC)
def test_synthetic_sets_are_seeded_and_split(name):
    a = data.synthetic(name, samples=501, noise=0.1, test_ratio=0.3, seed=4)
    b = data.synthetic(name, samples=501, noise=0.1, test_ratio=0.3, seed=4)
    c = data.synthetic(name, samples=501, noise=0.1, test_ratio=0.3, seed=5)
    assert a.x_train.shape == (351, 2) and a.x_test.shape == (150, 2) and a.x_train.dtype == np.float32
    assert np.array_equal(a.x_train, b.x_train) and not np.array_equal(a.x_train, c.x_train)
    assert set(np.unique(a.y_train)) == {0, 1}
    assert np.abs(a.x_train).max() < 2


def test_quadrant_labels_follow_the_quadrants():
    ds = data.synthetic("quadrant", samples=400, noise=0.0, seed=1)
    x, y = ds.x_train, ds.y_train
    assert np.array_equal(y, ((x[:, 0] < 0) != (x[:, 1] < 0)).astype(np.int32))  # 2nd and 4th quadrants


@pytest.mark.parametrize("gz", [True, False])
def test_idx_directory_round_trip(tmp_path, gz):
    arrays = make_idx_dir(tmp_path, gz=gz)
    ds = data.load(directory=tmp_path)
    assert ds.x_train.shape == (13, 1, 5, 6) and ds.x_test.shape == (7, 1, 5, 6)
    assert np.allclose(ds.x_train[:, 0] * 255, arrays["train"][0])
    assert ds.x_train.min() >= 0 and ds.x_train.max() <= 1
    assert np.array_equal(ds.y_test, arrays["test"][1])


def _corrupt(tmp_path, how):
    make_idx_dir(tmp_path, gz=False)
    img = tmp_path / "train-images-idx3-ubyte"
    lab = tmp_path / "train-labels-idx1-ubyte"
    if how == "missing":
        lab.unlink()
        return "train-labels-idx1-ubyte: no such file"
    if how == "magic":
        img.write_bytes(b"\x12\x34" + img.read_bytes()[2:])
        return "train-images-idx3-ubyte: not an IDX file (bad magic number 1234"
    if how == "empty":
        img.write_bytes(b"")
        return "train-images-idx3-ubyte: not an IDX file (it is empty)"
    if how == "truncated":
        img.write_bytes(img.read_bytes()[:-17])
        return "train-images-idx3-ubyte: truncated"
    if how == "counts":
        write_idx(lab, np.zeros(12))
        return "train-labels-idx1-ubyte: 12 labels for 13 images"
    if how == "labels":
        write_idx(lab, np.full(13, 10))
        return "train-labels-idx1-ubyte: label 10 is outside the 10 classes"
    if how == "dtype":
        raw = bytearray(img.read_bytes())
        raw[2] = 0x0D
        img.write_bytes(bytes(raw))
        return "element type 0x0d"
    if how == "gzip":
        (tmp_path / "train-images-idx3-ubyte").unlink()
        (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8b garbage")
        return "train-images-idx3-ubyte.gz: cannot read"
    if how == "deflate":  # a gzip header, then a damaged deflate stream: zlib.error, not OSError
        packed = gzip.compress(img.read_bytes(), mtime=0)
        img.unlink()
        (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(packed[:10] + b"\xff" * 64)
        return "train-images-idx3-ubyte.gz: cannot read (Error -3 while decompressing data"
    if how == "1d-images":
        write_idx(img, np.zeros(13))
        return "train-images-idx3-ubyte: expected images (N, H, W), got 1 dimension(s)"
    if how == "3d-labels":
        write_idx(lab, np.zeros((13, 2, 2)))
        return "train-labels-idx1-ubyte: expected labels (N,), got 3 dimensions"
    if how == "loop":
        lab.unlink()
        lab.symlink_to(tmp_path / "other")
        (tmp_path / "other").symlink_to(lab)
        return "train-labels-idx1-ubyte: a symbolic link loop"
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["missing", "magic", "empty", "truncated", "counts", "labels", "dtype", "gzip", "deflate",
                                 "1d-images", "3d-labels", "loop"])
def test_bad_idx_files_raise_data_error_naming_the_file(tmp_path, how):
    needle = _corrupt(tmp_path, how)
    with pytest.raises(DataError) as err:
        data.load(directory=tmp_path)
    assert needle in str(err.value)


@pytest.mark.parametrize("how", ["missing", "magic", "truncated", "trailing", "dtype", "gzip", "deflate", "1d-images",
                                 "3d-labels", "counts", "loop"])
def test_describe_refuses_what_load_would_from_headers_and_sizes(tmp_path, how):
    """describe() (what the app checks as a path is typed) reads no body, yet refuses a short or long
    uncompressed file as load() does, with the same message naming the file. (A damaged deflate stream was a
    zlib.error traceback; 1-D images named the directory; a link loop was "no such file".)"""
    if how == "trailing":
        make_idx_dir(tmp_path, gz=False)
        img = tmp_path / "t10k-images-idx3-ubyte"
        img.write_bytes(img.read_bytes() + b"\0")
        needle = "t10k-images-idx3-ubyte: bytes after the data the header describes"
    else:
        needle = _corrupt(tmp_path, how)
    with pytest.raises(DataError) as loaded:
        data.load(directory=tmp_path)
    with pytest.raises(DataError) as described:
        data.describe(directory=tmp_path)
    assert needle in str(loaded.value) and str(described.value) == str(loaded.value)


def test_missing_directory(tmp_path):
    with pytest.raises(DataError, match="none: no such file or directory"):
        data.load(directory=tmp_path / "none")


def test_embedded_subset_is_stratified():
    ds = data.load("fashion-subset")
    assert ds.x_train.shape == (6000, 1, 28, 28) and ds.x_test.shape == (1000, 1, 28, 28)
    assert np.bincount(ds.y_train).tolist() == [600] * 10
    assert np.bincount(ds.y_test).tolist() == [100] * 10
    assert 0.2 < ds.x_train.mean() < 0.4  # real images, scaled to [0, 1]


def test_validation_split_and_limit():
    ds = data.load("circle", samples=1000, val_ratio=0.25, seed=3)
    assert len(ds.x_val) == 200 and len(ds.x_train) == 600
    again = data.load("circle", samples=1000, val_ratio=0.25, seed=3)
    assert np.array_equal(ds.x_val, again.x_val)
    assert len(data.load("fashion-subset", limit=50).x_train) == 50


@pytest.mark.parametrize("kwargs,needle", [({"name": "mnist2"}, "dataset 'mnist2' is unknown"),
                                           ({"name": "xor", "samples": 2}, "data.samples = 2 must be a whole"),
                                           ({"name": "xor", "noise": 2.0}, r"data.noise = 2.0 must be in \[0, 1\]"),
                                           ({"name": "xor", "val_ratio": 1.5}, "data.val_ratio = 1.5"),
                                           ({"name": "xor", "limit": 0}, "data.limit = 0")])
def test_bad_dataset_arguments(kwargs, needle):
    with pytest.raises(ConfigError, match=needle):
        data.load(**kwargs)


@pytest.mark.parametrize("read", [data.describe, data.load, data.synthetic])
def test_an_unknown_dataset_name_is_quoted_clipped(read):
    """`--dataset` of 5,000 characters was echoed whole in the error."""
    with pytest.raises(ConfigError) as exc:
        read("x" * 5000)
    assert f"dataset '{'x' * 40}…' is unknown" in str(exc.value) and len(str(exc.value)) < 300
