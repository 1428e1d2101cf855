"""The validation layer at the boundary, fuzzed: configs (TOML and JSON text), CLI argument lists, IDX headers,
.npz and checkpoint contents, and special files. Nothing but the project's own one-line errors may escape, no
input may hang a reader, and no declared size may make us allocate it.

These are cheap (no training): at the default scale the five hypothesis tests run 10,400 examples in CI.
"""
import gzip
import io
import json
import os
import resource
import struct
import threading
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nncore import checkpoint as ckpt
from nncore import cli, data
from nncore.config import load_config, check_run
from nncore.errors import LayerlabError
from nncore.fileio import read_npz

PEAK_CAP = 1 << 30  # bytes of peak RSS the whole module may add: every hostile size is refused unallocated
_peak_at_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def fuzz(n: int):
    return settings(max_examples=n * int(os.environ.get("LAYERLAB_FUZZ_SCALE", "1")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def one_line(err: Exception) -> str:
    text = str(err)
    assert text and "\n" not in text, repr(text)
    return text


# -- configs -------------------------------------------------------------------------------------------------
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                    st.text(max_size=12), st.sampled_from([0, 1, 2, 3, 28, 2**31 - 1, 2**31, 2**32, -1, 1e400,
                                                           -10**40, 10**400]))
KEYS = st.sampled_from(["type", "out_features", "kernel_size", "stride", "padding", "out_channels", "in_features",
                        "init", "epochs", "batch_size", "lr", "momentum", "optimizer", "seed", "shuffle", "samples",
                        "dataset", "path", "noise", "limit", "threads", "ranks", "input", "layers", "loss", "x"])
LAYER_TYPES = st.sampled_from(["Linear", "ReLU", "Sigmoid", "Tanh", "Conv2D", "MaxPool2D", "Flatten", "linear", "?"])
LAYER = st.fixed_dictionaries({"type": LAYER_TYPES}, optional={
    "out_features": SCALARS, "kernel_size": SCALARS, "stride": SCALARS, "padding": SCALARS, "out_channels": SCALARS,
    "init": st.sampled_from(["he", "xavier", None, 3])})
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(KEYS, inner, max_size=4)), max_leaves=12)
DOC = st.fixed_dictionaries({}, optional={
    "model": st.one_of(VALUES, st.fixed_dictionaries(
        {"layers": st.lists(LAYER, max_size=5)},
        optional={"input": st.one_of(SCALARS, st.lists(SCALARS, max_size=4)),
                  "loss": st.sampled_from(["cross_entropy", "bce", "mse", None, "hinge"])})),
    "data": st.dictionaries(KEYS, SCALARS, max_size=4),
    "train": st.dictionaries(KEYS, SCALARS, max_size=4),
})


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v) if v == v and abs(v) != float("inf") else ("nan" if v != v else ("inf" if v > 0 else "-inf"))
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v if x is not None) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items() if x is not None) + "}"
    return '""'


def _toml(doc: dict) -> str:
    out = []
    for table, body in doc.items():
        if isinstance(body, dict):
            out.append(f"[{table}]")
            out += [f"{k} = {_toml_value(v)}" for k, v in body.items() if v is not None]
        else:
            out.insert(0, f"{table} = {_toml_value(body)}")
    return "\n".join(out) + "\n"


def _check_config(path) -> None:
    try:
        check_run(load_config(path))
    except LayerlabError as err:
        one_line(err)


@fuzz(3000)
@given(doc=DOC, as_json=st.booleans(), noise=st.binary(max_size=6), cut=st.integers(0, 400))
def test_random_configs_are_accepted_or_refused_in_one_line(tmp_path_factory, doc, as_json, noise, cut):
    path = tmp_path_factory.mktemp("cfg") / ("c.json" if as_json else "c.toml")
    text = (json.dumps(doc, allow_nan=True) if as_json else _toml(doc)).encode()
    if noise:  # a damaged file as often as a well-formed one
        text = text[:cut] + noise + text[cut:]
    path.write_bytes(text)
    _check_config(path)


MLP = '[model]\ninput = [2]\nloss = "bce"\nlayers = [{type = "Linear", out_features = %s}]\n'
JMLP = '{"model": {"input": [2], "loss": "bce", "layers": [{"type": "Linear", "out_features": 1}]}, %s}'


@pytest.mark.parametrize("name,text,needle", [
    ("c.toml", "x = " + "9" * 4301 + "\n", "c.toml:1: x = 99999999999999999999… (4,301 digits) is far beyond"),
    ("c.toml", MLP % ("9" * 4400), "c.toml:4: out_features = 99999999999999999999… (4,400 digits)"),
    ("c.toml", MLP % 1 + "[train]\nseed = -" + "9" * 5000 + "\n", "c.toml:6: seed = -9999999999999999999… (5,000"),
    ("c.toml", MLP % ("9" * 4000), "c.toml: model.layers[0].out_features = 99999999999999999999… (4,000 digits)"),
    ("c.toml", MLP % ("9" * 40), "c.toml: model.layers[0].out_features = 99999999999999999999… (40 digits)"),
    ("c.json", JMLP % ('"train": {"epochs": ' + "9" * 5000 + "}"), "c.json: train.epochs = 99999999999999999999… (5,000"),
    ("c.json", JMLP % ('"data": {"a b": [1, -' + "9" * 100 + "]}"), 'c.json: data."a b"[1] = -9999999999999999999… (100'),
], ids=["toml-4301", "toml-layer-4400", "toml-minus-5000", "toml-layer-4000", "toml-40", "json-5000", "json-list-100"])
def test_integers_of_thousands_of_digits_are_refused_by_key_in_one_short_line(tmp_path, name, text, needle):
    """int() refuses more than 4,300 digits: tomllib and json raised its ValueError (a traceback, exit 1); and
    below that a 4,000-digit value was quoted whole in the error."""
    from nncore.errors import ConfigError

    (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_config(tmp_path / name)
    msg = one_line(exc.value)
    assert needle in msg and len(msg) < len(str(tmp_path)) + 140, msg
    assert exc.value.exit_code == 2


@pytest.mark.parametrize("text,needle", [
    (JMLP % '"train": {"lr": 1e400}', "c.json: train.lr = 1e400 is beyond float's range"),
    (JMLP % '"train": {"lr": Infinity}', "c.json: train.lr = Infinity is not a number a config may hold"),
    (JMLP % '"data": {"noise": [0, -Infinity]}', "c.json: data.noise[1] = -Infinity is not a number"),
    ('{"model": {"input": [2], "loss": "bce", "layers": [{"type": "Linear", "out_features": NaN}]}}',
     "c.json: model.layers[0].out_features = NaN is not a number"),
    (JMLP % '"train": {"epochs": 1, "epochs": 2}', "c.json: train.epochs is given twice in its object"),
    (JMLP % '"model": {}', "c.json: model is given twice in its object"),
], ids=["1e400", "Infinity", "-Infinity-in-list", "NaN-in-layer", "twice", "twice-top"])
def test_json_numbers_json_cannot_hold_and_repeated_keys_are_refused_by_file_and_key(tmp_path, text, needle):
    """Infinity and NaN were refused naming neither the file nor the key ("Infinity is not a number a config
    may hold"), 1e400 was read as infinity, and a key given twice silently kept its last value."""
    from nncore.errors import ConfigError

    (tmp_path / "c.json").write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_config(tmp_path / "c.json")
    assert needle in one_line(exc.value) and str(tmp_path) in str(exc.value)


@pytest.mark.parametrize("name", ["c.toml", "c.json"])
def test_a_byte_order_mark_before_a_config_is_accepted(tmp_path, name):
    """tomllib said "invalid TOML (Invalid statement (at line 1, column 1))" and json "Unexpected UTF-8 BOM"."""
    text = MLP % 3 if name == "c.toml" else JMLP % '"train": {"epochs": 3}'
    (tmp_path / name).write_bytes(b"\xef\xbb\xbf" + text.encode())
    cfg = load_config(tmp_path / name)
    assert cfg.model["input"] == [2]
    assert (cfg.model["layers"][0]["out_features"] if name == "c.toml" else cfg.train["epochs"]) == 3


@pytest.mark.parametrize("samples,needle", [
    (1, "c.toml: data.samples = 1 must be a whole number of at least 4"),
    (1_000_000, "c.toml: data.samples = 1,000,000 needs about 0.1 GiB, more than the 0.0 GiB of host memory"),
])
def test_a_synthetic_size_refused_names_the_config_file(tmp_path, monkeypatch, samples, needle):
    """The size checks of a synthetic set said "data.samples = 1 must be ..." and "samples = ... needs about
    ... GiB" without the file that set it."""
    from nncore import limits
    from nncore.errors import ConfigError

    monkeypatch.setattr(limits, "host_memory", lambda: 1 << 20)
    (tmp_path / "c.toml").write_text(MLP % 1 + f'[data]\ndataset = "circle"\nsamples = {samples}\n')
    with pytest.raises(ConfigError) as exc:
        check_run(load_config(tmp_path / "c.toml"))
    assert one_line(exc.value).startswith(str(tmp_path)) and needle in str(exc.value), exc.value
    assert exc.value.field == "data.samples"


def test_a_run_named_after_its_file_has_no_escape_sequence_or_newline():
    """`layerlab runs list` showed a file's ESC [31m raw (the terminal turned red) and export wrote its newline."""
    from nncore.config import RunConfig

    assert RunConfig({}, source="d/ev\x1b[31mRED\x1b[0m\nx.toml").label == "ev?[31mRED?[0m?x"
    assert RunConfig({}, source="d/" + "n" * 300 + ".toml").label == "n" * 64
    assert RunConfig({}, source="d/ev\x1b.toml", name="kept").label == "kept"


@fuzz(300)
@given(stem=st.text(min_size=1, max_size=100).filter(lambda t: "/" not in t and "\0" not in t))
def test_any_file_name_gives_a_printable_run_name_of_at_most_64_characters(stem):
    from nncore.config import NAME_CHARS, RunConfig

    label = RunConfig({}, source=f"/tmp/{stem}.toml").label
    assert label.isprintable() and len(label) <= NAME_CHARS and not any(c in label for c in "\n\r\x1b")


# -- CLI argument lists -----------------------------------------------------------------------------------------
FLAGS = ["--epochs", "--batch-size", "--lr", "--momentum", "--seed", "--threads", "--limit", "--timing-every",
         "--checkpoint-every", "--optimizer", "--arch", "--dataset", "--ranks"]
ARG_VALUES = st.one_of(st.sampled_from(["0", "1", "-1", "5", "2147483648", "1e9", "nan", "inf", "-inf", "²", "５",
                                        " 7", "0x10", "1_000", "", "adam", "sgd", "cuda", "2e", "3steps", "٣",
                                        "9" * 5000, "-" + "9" * 5000]),
                       st.text(max_size=6), st.integers(-2**40, 2**40).map(str))


@fuzz(3000)
@given(args=st.lists(st.tuples(st.sampled_from(FLAGS), ARG_VALUES), max_size=4))
def test_random_argument_lists_parse_or_exit_2_in_one_line(args):
    argv = ["train", "quadrant", *[x for pair in args for x in pair]]
    err = io.StringIO()
    try:
        from contextlib import redirect_stderr
        with redirect_stderr(err):
            parsed = cli._parser().parse_args(argv)
    except SystemExit as exc:
        assert exc.code == 2 and len(err.getvalue().strip().splitlines()) == 1, err.getvalue()
        if "invalid choice" not in err.getvalue():  # (argparse's own choices message quotes it whole)
            assert len(err.getvalue()) < 200, err.getvalue()  # a number is quoted clipped, not in full
        return
    try:
        cfg = cli._config(parsed)
        check_run(cfg)
        if parsed.checkpoint_every:
            ckpt.parse_every(parsed.checkpoint_every)
    except LayerlabError as exc:
        one_line(exc)


@pytest.mark.parametrize("flag,value,needle", [
    ("--epochs", "9" * 5000, "--epochs: 99999999999999999999… is too large (beyond 2147483647)"),
    ("--seed", "-" + "9" * 5000, "--seed: -9999999999999999999… is too small"),
    ("--epochs", "x" * 5000, "--epochs: 'xxxxxxxxxxxxxxxxxxxx…' must be a whole number written in digits 0-9"),
    ("--lr", "9" * 5000, "--lr: '99999999999999999999…' must be a finite number"),
], ids=["epochs-digits", "seed-minus-digits", "epochs-letters", "lr-digits"])
def test_an_argument_of_thousands_of_digits_is_named_by_its_flag_and_clipped(capsys, flag, value, needle):
    """Past 4,300 digits int() raised a ValueError, which argparse reported as "invalid _int_arg value: " and
    the whole value."""
    with pytest.raises(SystemExit) as exc:
        cli._parser().parse_args(["train", "quadrant", flag, value])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1 and len(err) < 120, err
    assert needle in err and "_int_arg" not in err, err


def test_checkpoint_every_of_thousands_of_digits_is_a_config_error():
    from nncore.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^--checkpoint-every: '9{20}…' must be N"):
        ckpt.parse_every("9" * 5000)  # (int() raised ValueError past 4,300 digits)


def test_ascii_int_clips_what_it_quotes():
    from nncore.errors import ConfigError
    from nncore.limits import ascii_int

    with pytest.raises(ConfigError, match=r"^--batch entry 9{20}… is too large \(beyond 2147483647\)$"):
        ascii_int("9" * 5000, "--batch entry")


# -- IDX headers --------------------------------------------------------------------------------------------------
@fuzz(2000)
@given(ndim=st.sampled_from([0, 1, 2, 3, 4, 255]), dtype=st.sampled_from([8, 8, 8, 9, 0x0D]),
       dims=st.lists(st.sampled_from([0, 1, 2, 3, 28, 60000, 2**16, 2**31, 2**32 - 1]), min_size=0, max_size=4),
       body=st.integers(0, 64), gz=st.booleans())
def test_idx_headers_are_checked_before_the_body_is_read(tmp_path_factory, ndim, dtype, dims, body, gz):
    head = bytes([0, 0, dtype, ndim]) + struct.pack(f">{len(dims)}I", *dims)
    raw = head + bytes(range(body % 256))[:body] * 1
    path = tmp_path_factory.mktemp("idx") / ("f-idx3-ubyte.gz" if gz else "f-idx3-ubyte")
    path.write_bytes(gzip.compress(raw) if gz else raw)
    try:
        arr = data.read_idx(path)
    except LayerlabError as err:
        assert str(path) in one_line(err)
        return
    assert arr.size == len(raw) - 4 - 4 * ndim and arr.ndim in (1, 3)  # declared dims beyond ndim are body


def test_a_gzip_bomb_is_refused_before_it_is_expanded(tmp_path):
    """A 3 MB gzip expanding to 3 GiB once reached 6.4 GB of memory before it was refused."""
    path = tmp_path / "train-images-idx3-ubyte.gz"
    n = 3 * 2**30 // (28 * 28)
    with gzip.open(path, "wb", compresslevel=9) as fh:  # a header declaring it, and 64 MiB of zeros
        fh.write(bytes([0, 0, 8, 3]) + struct.pack(">3I", n, 28, 28))
        fh.write(bytes(64 << 20))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with pytest.raises(LayerlabError) as err:
        data.read_idx(path)
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert str(path) in one_line(err.value) and grew < 256 << 20


# -- .npz and checkpoint contents -----------------------------------------------------------------------------
def _npy(shape, dtype: str, lie: int, body: int) -> bytes:
    header = {"descr": dtype, "fortran_order": False, "shape": tuple(shape)}
    text = repr(header).encode()
    text += b" " * ((64 - (10 + len(text) + 1) % 64) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + bytes(max(0, body + lie))


@pytest.mark.filterwarnings("ignore:Duplicate name")  # two members of one name: one more hostile case
@fuzz(2000)
@given(members=st.lists(st.tuples(st.sampled_from(["order", "meta", "opt/velocity", "opt/steps", "weights/0.weight",
                                                   "x"]),
                                  st.lists(st.sampled_from([0, 1, 3, 7, 2**20, 2**42]), max_size=3),
                                  st.sampled_from(["<f4", "<i4", "<i8", "|u1", "<U3", "|O", "|S2", "<c8"]),
                                  st.integers(-8, 8)), max_size=4),
       meta=st.one_of(st.none(), VALUES.map(lambda v: json.dumps(v, allow_nan=True))))
def test_npz_and_checkpoint_contents_are_checked_before_use(tmp_path_factory, members, meta):
    path = tmp_path_factory.mktemp("npz") / "c.npz"
    with zipfile.ZipFile(path, "w") as zf:
        for name, shape, dtype, lie in members:
            size = int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize if dtype != "|O" else 8
            zf.writestr(name + ".npy", _npy(shape, dtype, lie, min(size, 4096)))
        if meta is not None:
            zf.writestr("meta.npy", _npy([len(meta.encode())], "|u1", 0, 0) + meta.encode())
    try:
        read_npz(path)
        ckpt.load(path)
    except LayerlabError as err:
        assert str(path) in one_line(err)


# -- special files ------------------------------------------------------------------------------------------------
def _special(tmp_path, kind):
    if kind == "fifo":
        p = tmp_path / "fifo"
        os.mkfifo(p)
        return p
    if kind == "link-to-fifo":
        os.mkfifo(tmp_path / "f")
        (tmp_path / "link").symlink_to(tmp_path / "f")
        return tmp_path / "link"
    if kind == "dir":
        return tmp_path
    return kind  # a device


@pytest.mark.parametrize("kind", ["fifo", "link-to-fifo", "dir", "/dev/zero", "/dev/urandom", "/dev/null"])
@pytest.mark.parametrize("reader", ["config", "idx", "npz", "idx-dir"])
def test_special_files_are_refused_at_once(tmp_path, kind, reader):
    """A FIFO once blocked for ever; /dev/urandom as a config grew memory at 200 MB/s."""
    target = _special(tmp_path, kind)
    if reader == "idx-dir":
        if kind == "dir" or str(target).startswith("/dev"):
            pytest.skip("the idx-dir reader is tried with a FIFO inside the directory; a device or a directory as "
                        "the IDX directory itself is covered by the idx reader's cases")
        (tmp_path / "d").mkdir()
        os.symlink(target, tmp_path / "d" / "train-images-idx3-ubyte")
    call = {"config": lambda: check_run(load_config(target)), "idx": lambda: data.read_idx(target),
            "npz": lambda: read_npz(target), "idx-dir": lambda: data.load_idx_dir(tmp_path / "d")}[reader]
    outcome = []

    def attempt():
        try:
            call()
            outcome.append("accepted")
        except LayerlabError as err:
            outcome.append(one_line(err))
        except BaseException as err:  # noqa: BLE001 (reported below)
            outcome.append(err)

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), f"{reader} blocked on {kind}"
    assert outcome and isinstance(outcome[0], str) and outcome[0] != "accepted", outcome


@pytest.mark.parametrize("reader", ["config", "bare-config", "idx", "idx-dir", "csv"])
def test_a_symbolic_link_loop_is_named_as_one(tmp_path, monkeypatch, reader):
    """A loop was "no such file" (exists() says False) or "cannot read (Too many levels of symbolic links)"."""
    from nncore.tabular import read_csv

    monkeypatch.chdir(tmp_path)
    name = {"config": "c.toml", "bare-config": "c", "idx": "train-images-idx3-ubyte", "csv": "t.csv"}.get(reader)
    if reader == "idx-dir":
        (tmp_path / "d").mkdir()
        name = "d/train-images-idx3-ubyte"
    os.symlink("other", tmp_path / name)
    os.symlink(name.rpartition("/")[2], tmp_path / name.replace(name.rpartition("/")[2], "other"))
    call = {"config": lambda: load_config(name), "bare-config": lambda: load_config(name),
            "idx": lambda: data.read_idx(name), "idx-dir": lambda: data.describe(directory="d"),
            "csv": lambda: read_csv(name)}[reader]
    with pytest.raises(LayerlabError) as exc:
        call()
    assert one_line(exc.value).startswith(f"{name}: a symbolic link loop"), exc.value
    assert exc.value.exit_code == 2


def test_the_module_stayed_within_its_memory_cap():
    """Runs last in this file (pytest keeps file order): the peak RSS the hostile sizes above could add."""
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - _peak_at_start
    assert grew < PEAK_CAP, f"peak RSS grew {grew / 2**20:.0f} MiB"
