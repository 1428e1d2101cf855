"""Fuzzing what users hand in: IDX bytes, whole TOML configs, CLI argument lists. Each either works or gives a
one-line error of the documented kind and exit code — never another exception."""
import gzip
import io
import os
import signal
import struct
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nncore import cli, data
from nncore.config import RunConfig
from nncore.errors import ConfigError, DataError, LayerlabError
from nncore.events import RunFailed, RunFinished
from nncore.train import Trainer

def fuzz(n: int):
    """n examples per run, times LAYERLAB_FUZZ_SCALE for longer runs (docs/RELIABILITY.md records one)."""
    return settings(max_examples=n * int(os.environ.get("LAYERLAB_FUZZ_SCALE", "1")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _idx(arr: np.ndarray) -> bytes:
    return bytes([0, 0, 8, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.astype(np.uint8).tobytes()


@fuzz(200)
@given(raw=st.binary(max_size=300))
def test_random_bytes_as_idx(tmp_path_factory, raw):
    path = tmp_path_factory.mktemp("idx") / "f-idx3-ubyte"
    path.write_bytes(raw)
    try:
        arr = data.read_idx(path)
    except DataError as err:
        assert str(path) in str(err) and "\n" not in str(err)
        return
    assert arr.dtype == np.uint8 and arr.ndim in (1, 3)


def _small_idx_set() -> dict:
    """A tiny MNIST-format set (6 training and 3 test images of 4 x 5), the same bytes at every call."""
    rng = np.random.default_rng(0)
    return {"train-images-idx3-ubyte": rng.integers(0, 256, (6, 4, 5)), "train-labels-idx1-ubyte":
            rng.integers(0, 10, 6), "t10k-images-idx3-ubyte": rng.integers(0, 256, (3, 4, 5)),
            "t10k-labels-idx1-ubyte": rng.integers(0, 10, 3)}


@fuzz(150)
@given(cuts=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=4),
       truncate=st.integers(0, 400), gz=st.booleans())
def test_mutated_idx_directories(tmp_path_factory, cuts, truncate, gz):
    d = tmp_path_factory.mktemp("mnist")
    for i, (name, arr) in enumerate(_small_idx_set().items()):
        raw = bytearray(_idx(arr))
        if i == 0:  # mutate the training images: flipped bytes, then a cut
            for pos, val in cuts:
                if pos < len(raw):
                    raw[pos] = val
            raw = raw[:max(len(raw) - truncate, 0)] if truncate else raw
        (d / (name + (".gz" if gz else ""))).write_bytes(gzip.compress(bytes(raw)) if gz else bytes(raw))
    try:
        ds = data.load(directory=d)
    except DataError as err:
        assert "\n" not in str(err) and str(d) in str(err)
        return
    assert ds.x_train.dtype == np.float32 and 0 <= ds.x_train.min() and ds.x_train.max() <= 1


@fuzz(150)
@given(flips=st.lists(st.tuples(st.integers(10, 120), st.integers(0, 255)), min_size=1, max_size=4))
def test_damaged_gzip_streams_are_refused_naming_the_file(tmp_path_factory, flips):
    """Bytes changed inside the compressed stream (past gzip's header): zlib.error escaped describe()."""
    d = tmp_path_factory.mktemp("mnist-gz")
    for i, (name, arr) in enumerate(_small_idx_set().items()):
        raw = bytearray(gzip.compress(_idx(arr), mtime=0))
        if i == 0:
            for pos, val in flips:
                raw[pos % len(raw)] = val
        (d / (name + ".gz")).write_bytes(bytes(raw))
    for read in (lambda: data.describe(directory=d), lambda: data.load(directory=d)):
        try:
            read()
        except DataError as err:
            assert "\n" not in str(err) and str(d) in str(err)


scalars = st.one_of(st.integers(-3, 70), st.floats(-1, 2), st.just(float("nan")), st.booleans(), st.text(max_size=6),
                    st.none())
layer_st = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["Linear", "ReLU", "Sigmoid", "Tanh", "Flatten", "Conv2D",
                                                    "MaxPool2D", "Dense"])},
                          optional={"out_features": scalars, "out_channels": scalars, "kernel_size": scalars,
                                    "stride": scalars, "padding": scalars, "bogus": scalars}),
    scalars)
config_st = st.fixed_dictionaries(
    {"model": st.fixed_dictionaries({"layers": st.lists(layer_st, max_size=4)},
                                    optional={"input": st.one_of(st.just([2]), st.just([1, 28, 28]), scalars),
                                              "loss": st.sampled_from(["bce", "mse", "cross_entropy", "hinge", 3])})},
    optional={"data": st.fixed_dictionaries({}, optional={"dataset": st.sampled_from(["xor", "circle", "nope", 7]),
                                                          "samples": scalars, "noise": scalars, "limit": scalars}),
              "train": st.fixed_dictionaries({}, optional={"lr": scalars, "batch_size": scalars,
                                                           "optimizer": st.sampled_from(["sgd", "adam", "rmsprop"]),
                                                           "momentum": scalars, "seed": scalars, "bogus": scalars})})


@fuzz(60)
@given(doc=config_st)
def test_random_configs(doc):
    doc.setdefault("train", {})
    doc["train"].update(epochs=1, arch="cpu-serial")
    doc.setdefault("data", {}).setdefault("samples", 40)
    try:
        cfg = RunConfig(doc["model"], doc["data"], doc["train"], source="fuzz.toml")
    except ConfigError as err:
        assert "\n" not in str(err)
        return
    end = Trainer(cfg).run()
    assert isinstance(end, (RunFinished, RunFailed))
    if isinstance(end, RunFailed):
        assert end.exit_code in (2, 3) and "\n" not in end.error


FLAGS = {"--arch": st.sampled_from(["cpu-serial", "cpu-parallel", "gpu", ""]),
         "--threads": st.sampled_from(["1", "2", "0", "-1", "x"]), "--batch-size": st.sampled_from(["1", "7", "0", "q"]),
         "--lr": st.sampled_from(["0.1", "-1", "nan", "1e30", "x"]), "--optimizer": st.sampled_from(["sgd", "adam", "x"]),
         "--momentum": st.sampled_from(["0.9", "1.5", "x"]), "--seed": st.sampled_from(["0", "-2", "x"]),
         "--dataset": st.sampled_from(["xor", "fashion-subset", "zzz"]), "--no-shuffle": st.none(),
         "--checkpoint-every": st.sampled_from(["3", "0", "2e", "x"]), "--init-weights": st.sampled_from(["/nope.npz"]),
         "--bogus": st.sampled_from(["1"])}


@pytest.fixture
def keep_sigint():
    handler = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, handler)


@fuzz(60)
@given(picked=st.lists(st.sampled_from(sorted(FLAGS)), unique=True, max_size=4), data_=st.data())
def test_random_cli_arguments(keep_sigint, picked, data_):
    argv = ["train", "quadrant", "--epochs", "1", "--limit", "40", "--quiet"]
    for flag in picked:
        value = data_.draw(FLAGS[flag])
        argv += [flag] if value is None else [flag, value]
    out, err = io.StringIO(), io.StringIO()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            code = cli.main(argv)
    except SystemExit as exc:  # argparse's refusal, one line and 2
        code = exc.code
    except LayerlabError as exc:  # must never escape the CLI
        raise AssertionError(f"{argv}: {exc!r} escaped") from exc
    assert code in (0, 2, 3, 4), (argv, code, err.getvalue())
    if code:
        lines = [l for l in err.getvalue().splitlines() if l.strip()]
        assert lines and "Traceback" not in err.getvalue(), (argv, err.getvalue())
        assert lines[-1].startswith("layerlab"), (argv, err.getvalue())
