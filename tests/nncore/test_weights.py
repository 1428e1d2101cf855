"""Weights I/O: PyTorch state_dict names and shapes, atomic writes, clear errors on mismatch."""
import os

import numpy as np
import pytest

from nncore.errors import DataError
from nncore.fileio import write_npz_atomic
from nncore.network import Sequential
from tests.nncore.test_network import CNN, CNN_INPUT


def test_round_trip(cpu, tmp_path):
    a = Sequential(CNN, CNN_INPUT, seed=1)
    a.save_weights(tmp_path / "w.npz")
    b = Sequential(CNN, CNN_INPUT, seed=2)
    b.load_weights(tmp_path / "w.npz")
    sa, sb = a.state_dict(), b.state_dict()
    assert all(np.array_equal(sa[k], sb[k]) for k in sa)
    with np.load(tmp_path / "w.npz") as data:
        assert data["0.weight"].shape == (3, 2, 3, 3)  # Conv2d (out, in, kh, kw)
        assert data["4.weight"].shape == (6, 36)  # Linear (out, in)
        assert data["6.bias"].shape == (4,)


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d.pop("4.bias"), "missing 4.bias"),
    (lambda d: d.__setitem__("4.weight", np.zeros((36, 6), np.float32)), "4.weight has shape (36, 6), the network expects (6, 36)"),
    (lambda d: d.__setitem__("9.weight", np.zeros(3, np.float32)), "9.weight does not belong"),
])
def test_mismatch_names_the_first_problem(cpu, tmp_path, mutate, needle):
    net = Sequential(CNN, CNN_INPUT)
    state = net.state_dict()
    mutate(state)
    np.savez(tmp_path / "bad.npz", **state)
    before = net.state_dict()
    with pytest.raises(DataError) as err:
        net.load_weights(tmp_path / "bad.npz")
    assert needle in str(err.value) and "bad.npz" in str(err.value)
    after = net.state_dict()
    assert all(np.array_equal(before[k], after[k]) for k in before)  # nothing half-loaded


def test_missing_and_corrupt_files(cpu, tmp_path):
    net = Sequential(CNN, CNN_INPUT)
    with pytest.raises(DataError, match="no such file"):
        net.load_weights(tmp_path / "nope.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip at all")
    with pytest.raises(DataError, match="junk.npz: not a readable"):
        net.load_weights(tmp_path / "junk.npz")


def test_failed_write_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "w.npz"
    write_npz_atomic(path, {"a": np.arange(3.0)})

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError):
        write_npz_atomic(path, {"a": np.zeros(5)})
    with np.load(path) as data:
        assert data["a"].tolist() == [0.0, 1.0, 2.0]
    assert [p.name for p in tmp_path.iterdir()] == ["w.npz"]  # no temporary left behind
