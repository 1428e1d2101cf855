"""Hostile input: files and arguments made to crash, hang or misdirect the CLI end in one line and exit 2.

Each test here reproduces an attack that once crashed the process (SIGSEGV, SIGFPE), trained on stray memory,
hung, or printed a traceback.
"""
import json
import subprocess
import sys

import numpy as np
import pytest

from nncore import checkpoint as ckpt
from nncore.config import load_config
from nncore.events import RunFailed
from nncore.train import Trainer
from tests.cli.test_cli import layerlab, one_line_error

RUN = ["quadrant", "--arch", "cpu-serial", "--epochs", "2"]  # 1,600 training samples, 50 steps an epoch


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A real mid-epoch checkpoint of RUN (step 4 of epoch 1)."""
    path = tmp_path_factory.mktemp("ckpt") / "run.npz"
    cfg = load_config("quadrant").override("train", arch="cpu-serial", epochs=2)
    calls = []
    Trainer(cfg, checkpoint=path, checkpoint_every="4", should_stop=lambda: len(calls.append(1) or calls) > 5).run()
    assert ckpt.load(path)["position"].offset == 4 * 32
    return path


def tampered(src, dst, meta=None, **arrays):
    """A copy of checkpoint ``src`` with ``meta`` changed by a function and arrays replaced."""
    with np.load(src) as f:
        data = {k: f[k] for k in f.files}
    if meta is not None:
        doc = meta(json.loads(bytes(data["meta"]).decode()))
        data["meta"] = np.frombuffer(json.dumps(doc).encode(), np.uint8)
    data.update(arrays)
    np.savez(dst, **data)
    return dst


def position(**changes):
    def edit(doc):
        doc["position"].update(changes)
        return doc
    return edit


@pytest.mark.parametrize("value", [50_000_000, 2**31 - 1, -2**31, 10**6, -7])
def test_a_checkpoint_cannot_steer_the_sample_gather(checkpoint, tmp_path, value):
    """The order array indexes the dataset inside a kernel: out-of-range entries once read stray memory
    (SIGSEGV, or exit 0 having trained on it). Run in a subprocess: a crash must show as a crash."""
    with np.load(checkpoint) as f:
        order = f["order"].copy()
    order[7] = value
    bad = tampered(checkpoint, tmp_path / "bad.npz", order=order.astype(np.int64 if abs(value) > 2**31 else np.int32))
    proc = layerlab("train", *RUN, "--resume", bad)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    one_line_error(proc, "bad.npz: order")


@pytest.mark.parametrize("edit,needle", [
    (lambda d: [d], "not an object"),
    (lambda d: {**d, "position": {k: v for k, v in d["position"].items() if k != "offset"}}, "position must hold"),
    (position(offset="256"), "position.offset = '256'"),
    (position(offset=10**6), "position.offset 1000000 is past"),
    (position(step=2**40), "position.step"),
    (position(epoch=0), "position.epoch"),
    (position(loss_sum=float("nan")), "position.loss_sum"),
    (lambda d: {**d, "rng": {"bit_generator": "MT19937", "state": {"key": [1, 2], "pos": 3}}}, "rng is not the state"),
    (lambda d: {**d, "rng": [1, 2, 3]}, "rng is missing or not an object"),
    (lambda d: {**d, "optimizer": "adam"}, "made with optimizer 'adam'"),
])
def test_malformed_checkpoint_metadata_is_refused_by_name(checkpoint, tmp_path, edit, needle):
    bad = tampered(checkpoint, tmp_path / "meta.npz", meta=edit)
    end = Trainer(load_config("quadrant").override("train", arch="cpu-serial", epochs=2), resume=bad).run()
    assert isinstance(end, RunFailed) and end.exit_code == 2, end
    assert "meta.npz" in end.error and needle in end.error, end.error


@pytest.mark.parametrize("arrays,needle", [
    ({"opt/velocity": np.zeros(5, np.float32)}, "optimizer state velocity must be"),
    ({"opt/velocity": np.full(337, np.nan, np.float32)}, "optimizer state velocity must be"),
    ({"opt/steps": np.array([1, 2])}, "steps must be one"),
    ({"opt/extra": np.zeros(3)}, "optimizer state must hold exactly"),
    ({"order": np.zeros((2, 2), np.int32)}, "order must be a 1-D integer array"),
    ({"order": np.zeros(1600, np.float32)}, "order must be a 1-D integer array"),
    ({"order": np.zeros(1600, np.int32)}, "not a permutation"),
    ({"order": np.arange(1599, dtype=np.int32)}, "order has 1599 entries"),
])
def test_malformed_checkpoint_arrays_are_refused_by_name(checkpoint, tmp_path, arrays, needle):
    bad = tampered(checkpoint, tmp_path / "arr.npz", **arrays)
    end = Trainer(load_config("quadrant").override("train", arch="cpu-serial", epochs=2), resume=bad).run()
    assert isinstance(end, RunFailed) and end.exit_code == 2, end
    assert "arr.npz" in end.error and needle in end.error, end.error


def test_an_untouched_checkpoint_still_resumes(checkpoint, tmp_path):
    copy = tampered(checkpoint, tmp_path / "same.npz")
    end = Trainer(load_config("quadrant").override("train", arch="cpu-serial", epochs=2), resume=copy).run()
    assert not isinstance(end, RunFailed), end


@pytest.mark.parametrize("key,value", [("stride", 2**32), ("stride", 2**31), ("padding", 2**31),
                                       ("padding", 2**31 - 1), ("kernel_size", 2**32)])
def test_integers_past_32_bits_are_refused_before_a_kernel_sees_them(tmp_path, key, value):
    """stride = 2**32 once passed validation and died in the first step (pybind cast; SIGFPE without graphs);
    2**31 trained on wrapped geometry."""
    extra = "" if key == "kernel_size" else ", kernel_size=3"
    (tmp_path / "c.toml").write_text(
        '[model]\ninput = [1, 28, 28]\nloss = "cross_entropy"\n'
        f'layers = [{{type = "Conv2D", out_channels = 2{extra}, {key} = {value}}}, {{type = "Flatten"}}, '
        '{type = "Linear", out_features = 10}]\n[data]\ndataset = "fashion-subset"\nlimit = 64\n')
    proc = layerlab("train", tmp_path / "c.toml", "--epochs", "1", env={**__import__("os").environ,
                                                                        "LAYERLAB_GRAPHS": "0"})
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    one_line_error(proc, "layer 0 (Conv2D)")
    assert "32-bit" in proc.stderr
