"""CSV datasets (nncore.tabular): KDD Cup 99's format and hostile files, against float64 references computed
here from the rows the tests write."""
import gzip

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nncore import tabular
from nncore.data import load
from nncore.errors import ConfigError, DataError
from tests.nncore.test_fuzz_inputs import fuzz

# The 41 features of the KDD Cup 99 task description, in the file's order; the label follows them.
KDD_COLUMNS = [
    "duration", "protocol_type", "service", "flag", "src_bytes", "dst_bytes", "land", "wrong_fragment", "urgent",
    "hot", "num_failed_logins", "logged_in", "num_compromised", "root_shell", "su_attempted", "num_root",
    "num_file_creations", "num_shells", "num_access_files", "num_outbound_cmds", "is_host_login",
    "is_guest_login", "count", "srv_count", "serror_rate", "srv_serror_rate", "rerror_rate", "srv_rerror_rate",
    "same_srv_rate", "diff_srv_rate", "srv_diff_host_rate", "dst_host_count", "dst_host_srv_count",
    "dst_host_same_srv_rate", "dst_host_diff_srv_rate", "dst_host_same_src_port_rate",
    "dst_host_srv_diff_host_rate", "dst_host_serror_rate", "dst_host_srv_serror_rate", "dst_host_rerror_rate",
    "dst_host_srv_rerror_rate"]
PROTOCOLS = ["tcp", "udp", "icmp"]
SERVICES = ["http", "smtp", "finger", "domain_u", "auth", "telnet", "ftp", "eco_i", "ntp_u", "ecr_i", "other",
            "private", "pop_3", "ftp_data", "rje", "time", "mtp", "link", "remote_job", "gopher", "ssh", "name",
            "whois", "domain", "login", "imap4", "daytime", "ctf", "nntp", "shell", "IRC", "nnsp", "http_443",
            "exec", "printer", "efs", "courier", "uucp", "klogin", "kshell", "echo", "discard", "systat",
            "supdup", "iso_tsap", "hostnames", "csnet_ns", "pop_2", "sunrpc", "uucp_path", "netbios_ns",
            "netbios_ssn", "netbios_dgm", "sql_net", "vmnet", "bgp", "Z39_50", "ldap", "netstat", "urh_i", "X11",
            "urp_i", "pm_dump", "tftp_u", "tim_i", "red_i", "harvest", "aol", "http_2784", "http_8001"]
FLAGS = ["SF", "S1", "REJ", "S2", "S0", "S3", "RSTO", "RSTR", "RSTOS0", "OTH", "SH"]
LABELS = ["normal.", "buffer_overflow.", "loadmodule.", "perl.", "neptune.", "smurf.", "guess_passwd.", "pod.",
          "teardrop.", "portsweep.", "ipsweep.", "land.", "ftp_write.", "back.", "imap.", "satan.", "phf.",
          "nmap.", "multihop.", "warezmaster.", "warezclient.", "spy.", "rootkit."]
assert len(KDD_COLUMNS) == 41 and len(LABELS) == 23 and len(SERVICES) == 70


def kdd_rows(n: int, rng, services=SERVICES):
    """``n`` KDD-format records whose label follows a rule a small network can learn: the class is set by the
    protocol, the flag and whether src_bytes is large (12 classes of the 23 in use, the rest rare)."""
    rows, labels = [], []
    for _ in range(n):
        proto, svc, flag = rng.choice(PROTOCOLS), rng.choice(services), rng.choice(FLAGS[:4])
        src = int(rng.integers(0, 2000))
        nums = [int(rng.integers(0, 50))] + [src, int(rng.integers(0, 9000))] + \
            [int(v) for v in rng.integers(0, 3, 16)] + [int(v) for v in rng.integers(0, 512, 2)] + \
            [round(float(v), 2) for v in rng.random(7)] + [int(v) for v in rng.integers(0, 256, 2)] + \
            [round(float(v), 2) for v in rng.random(8)]
        cls = PROTOCOLS.index(proto) * 4 + FLAGS.index(flag)
        label = LABELS[cls] if src < 1500 else LABELS[12 + cls % 11]
        labels.append(label)
        rows.append([nums[0], proto, svc, flag] + nums[1:] + [label])
    return rows, labels


def write_csv(path, rows, header=None, gz=False):
    text = "".join(",".join(map(str, r)) + "\n" for r in ([header] if header else []) + rows)
    if gz:
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    return path


def reference(rows, train_idx, test_idx, label_col):
    """float64 standardisation and one-hot of the training rows, applied to both splits, written directly."""
    cols = list(zip(*rows))
    xs = {"train": [], "test": []}
    for c, col in enumerate(cols):
        if c == label_col:
            continue
        try:
            vals = np.array([float(v) for v in col])
        except ValueError:
            words = sorted({col[i] for i in train_idx})
            for part, idx in (("train", train_idx), ("test", test_idx)):
                xs[part].append(np.array([[1.0 if col[i] == w else 0.0 for w in words] for i in idx]))
            continue
        mu = vals[train_idx].mean()
        sd = vals[train_idx].std() or 1.0
        for part, idx in (("train", train_idx), ("test", test_idx)):
            xs[part].append(((vals[idx] - mu) / sd)[:, None])
    classes = sorted({rows[i][label_col] for i in list(train_idx) + list(test_idx)})
    ys = {p: np.array([classes.index(rows[i][label_col]) for i in idx]) for p, idx in
          (("train", train_idx), ("test", test_idx))}
    return {p: np.concatenate(xs[p], axis=1) for p in xs}, ys, classes


@pytest.fixture(autouse=True)
def _fresh():
    tabular.forget()
    yield
    tabular.forget()


@pytest.mark.parametrize("header,gz", [(True, False), (False, True)], ids=["header", "no-header-gz"])
def test_kdd_file_encodes_as_a_float64_reference(tmp_path, rng, header, gz):
    rows, _ = kdd_rows(301, rng)
    path = write_csv(tmp_path / ("kdd.csv.gz" if gz else "kdd.csv"), rows,
                     KDD_COLUMNS + ["label"] if header else None, gz)
    ds = load(None, path, test_ratio=0.25, seed=7)
    order = np.random.default_rng(7).permutation(301)
    n_test = round(301 * 0.25)
    test_idx, train_idx = np.sort(order[:n_test]), np.sort(order[n_test:])
    xs, ys, classes = reference(rows, train_idx, test_idx, 41)
    assert ds.meta["classes"] == classes and ds.n_classes == len(classes)
    assert ds.x_train.dtype == np.float32 and ds.x_train.shape == xs["train"].shape
    n_feat = 38 + 3 + len({rows[i][2] for i in train_idx}) + len({rows[i][3] for i in train_idx})
    assert ds.x_train.shape[1] == n_feat
    np.testing.assert_allclose(ds.x_train, xs["train"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ds.x_test, xs["test"], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(ds.y_train, ys["train"])
    np.testing.assert_array_equal(ds.y_test, ys["test"])
    if header:
        assert ds.meta["features"][:3] == ["duration", "protocol_type=icmp", "protocol_type=tcp"]


def test_label_by_name_or_index_and_separate_test_file(tmp_path, rng):
    rows, _ = kdd_rows(120, rng)
    moved = [[r[-1]] + r[:-1] for r in rows]  # the label first
    header = ["label"] + KDD_COLUMNS
    train = write_csv(tmp_path / "train.csv", moved[:100], header)
    test = write_csv(tmp_path / "test.csv", moved[100:], header)
    by_name = load(None, train, csv={"label": "label", "test_path": str(test)})
    by_index = load(None, train, csv={"label": 0, "test_path": str(test)})
    xs, ys, _ = reference(moved, np.arange(100), np.arange(100, 120), 0)
    for ds in (by_name, by_index):
        np.testing.assert_allclose(ds.x_test, xs["test"], rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(ds.y_train, ys["train"])
    with pytest.raises(ConfigError, match=r"data.label 'lable' is not a column of .*train.csv"):
        load(None, train, csv={"label": "lable"})
    with pytest.raises(ConfigError, match=r"data.label 42 is outside .*train.csv's 42 columns"):
        load(None, train, csv={"label": 42})


def test_unseen_test_category_is_all_zeros_and_counted(tmp_path, rng):
    rows, _ = kdd_rows(80, rng, services=SERVICES[:5])
    test_rows, _ = kdd_rows(20, rng, services=SERVICES[:5])
    for r in test_rows[:3]:
        r[2] = "gopher"  # a service the training file never has
    train = write_csv(tmp_path / "train.csv", rows)
    test = write_csv(tmp_path / "test.csv", test_rows)
    ds = load(None, train, csv={"test_path": str(test)})
    svc = [i for i, f in enumerate(ds.meta["features"]) if f.startswith("2=")]
    assert len(svc) == len({r[2] for r in rows})
    assert (ds.x_test[:3][:, svc] == 0).all() and (ds.x_test[3:][:, svc].sum(axis=1) == 1).all()
    assert ds.meta["unseen"] == {"2": 3}  # (no header: columns are named by their index)
    assert any("never saw, encoded as all zeros: column 2 in 3 rows" in n for n in ds.meta["notes"])  # ("2 3")


@pytest.mark.parametrize("text,culprit", [
    ("", "empty (no header and no rows)"),
    ("\n\n", "empty (no header and no rows)"),
    ("a,b,label\n", "one row only (a header, or a single record)"),  # ("auto" cannot tell which)
    ("a,b,label\n\n", "one row only"),
    ("1,2,x\n3,4,y\n5,6\n", ":3: 2 fields, expected 3"),
    ("1,2,x\n3,4,y\n5,abc,x\n", ":3: column '1' holds 'abc', not a finite number"),
    ("1,2,x\n3,4,y\n5,nan,x\n", ":3: column '1' holds 'nan', not a finite number (a numeric column needs"),
    ("1,inf,x\n3,4,y\n5,6,x\n", ":1: column '1' holds 'inf', not a finite number (a numeric column needs"),
    ("1,2,x\n1,2,x\n", "one label (x)"),
    ("x\ny\n", "no feature columns besides the label"),
    ('1,2,x\n3,4,y\n5,"6,x\n7,8,y\n', ":3: 2 fields, expected 3"),  # an open quote runs to the end
    # float() and numpy read these as 1000, 3 and 1: a CSV number is ASCII digits, sign, point, exponent
    ("1,2,x\n3,4,y\n1_000,2,x\n", ":3: column '0' holds '1_000'; a number in a CSV file is written in ASCII digits"),
    ("1,2,x\n\uff13,4,y\n5,6,x\n", ":2: column '0' holds '\uff13'; a number in a CSV file is written in ASCII"),
    ("\u0661,2,x\n3,4,y\n", ":1: column '0' holds '\u0661'; a number in a CSV file"),
    # finite as float64, past float32 (the features' type): cast to inf, a nan loss and exit 0
    ("1,2,x\n3,4,y\n1e300,6,x\n", ":3: column '0' holds 1e+300, beyond float32's range"),
    ("1,-4e38,x\n3,4,y\n5,6,x\n", ":1: column '1' holds -4e+38, beyond float32's range"),
])
def test_malformed_files_are_one_line_errors_with_the_line(tmp_path, text, culprit):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises((DataError, ConfigError)) as exc:
        load(None, path)
    msg = str(exc.value)
    assert culprit in msg and "\n" not in msg and msg.startswith(str(path)), msg


def test_huge_header_and_overlong_lines_are_refused_unread(tmp_path):
    wide = tmp_path / "wide.csv"
    wide.write_text(",".join(f"c{i}" for i in range(tabular.MAX_COLUMNS + 1)) + "\n1\n")
    with pytest.raises(DataError, match=r"wide.csv:1: .*columns, more than"):
        load(None, wide)
    long = tmp_path / "long.csv"
    long.write_text("a" * (tabular.MAX_LINE + 10))  # one line, no newline: not a table of records
    with pytest.raises(DataError, match=r"long.csv:1: a line longer than"):
        load(None, long)


def test_not_utf8_and_bad_gzip_name_the_line(tmp_path):
    path = tmp_path / "latin.csv"
    path.write_bytes(b"1,2,x\n3,4,y\n5,6,\xe9\n")
    with pytest.raises(DataError, match=r"latin.csv:3: not UTF-8"):
        load(None, path)
    for name, data in [("zeros.csv", b"\0" * 1000), ("late.csv", b"1,2,x\n3,4,y\n5,\x006,x\n")]:
        (tmp_path / name).write_bytes(data)  # (NUL is valid UTF-8: a binary file read as one record)
        with pytest.raises(DataError, match=rf"{name}:{1 if name == 'zeros.csv' else 3}: a NUL byte"):
            load(None, tmp_path / name)
    gz = tmp_path / "cut.csv.gz"
    body = "".join(f"{v},{v * 7 % 1000},{'xy'[v % 2]}\n" for v in np.random.default_rng(1).integers(0, 10**6, 5000))
    whole = gzip.compress(body.encode())
    gz.write_bytes(whole[:len(whole) // 2])
    with pytest.raises(DataError, match=r"cut.csv.gz:\d+: cannot read"):
        load(None, gz)


def test_limit_reads_only_the_first_rows(tmp_path, rng):
    rows, _ = kdd_rows(500, rng)
    rows[300][4] = "oops"  # past the limit: never read
    path = write_csv(tmp_path / "kdd.csv", rows)
    ds = load(None, path, limit=200)
    assert len(ds.y_train) + len(ds.y_test) == 200


def test_kdd_network_learns_the_rule_well_above_the_majority_class(tmp_path, rng):
    """A KDD-format file whose label follows a learnable rule: the seed KDD config's network (its input width
    taken from the file) trains to test accuracy well above always answering the most common class."""
    from nncore.config import load_config
    from nncore.train import Trainer

    rows, labels = kdd_rows(3000, rng)
    path = write_csv(tmp_path / "kdd.csv", rows, KDD_COLUMNS + ["label"])
    cfg = load_config("kdd-net-1h").override("data", path=str(path), limit=None)
    cfg = cfg.override("train", epochs=20, arch="cpu-serial")
    end = Trainer(cfg).run()
    test = load(None, path, test_ratio=cfg.data["test_ratio"], seed=cfg.train["seed"])
    majority = np.bincount(test.y_test).max() / len(test.y_test)
    print("kdd accuracy", end.test_acc, "majority", majority)
    assert end.test_acc > majority + 0.5, (end.test_acc, majority)


def test_trains_on_a_real_table_that_scikit_learn_ships(tmp_path):
    """scikit-learn's bundled iris.csv (its first row: sample and feature counts and the class names, so the
    automatic header check takes it for a header): 4 features, 3 classes; a small MLP learns it."""
    datasets = pytest.importorskip("sklearn.datasets", reason="scikit-learn (the test extra) is not installed")
    from pathlib import Path

    from nncore.config import RunConfig
    from nncore.train import Trainer

    path = Path(datasets.__file__).parent / "data" / "iris.csv"
    ds = load(None, path, seed=0)
    assert ds.input_shape == (4,) and ds.n_classes == 3 and len(ds.y_train) + len(ds.y_test) == 150
    assert ds.meta["classes"] == ["0", "1", "2"]
    raw = np.loadtxt(path, delimiter=",", skiprows=1)
    order = np.random.default_rng(0).permutation(150)
    train = np.sort(order[30:])
    mu, sd = raw[train, :4].mean(0), raw[train, :4].std(0)
    np.testing.assert_allclose(ds.x_train, (raw[train, :4] - mu) / sd, rtol=1e-5, atol=1e-6)
    model = {"loss": "cross_entropy", "layers": [{"type": "Linear", "out_features": 16}, {"type": "ReLU"},
                                                 {"type": "Linear", "out_features": 3}]}
    cfg = RunConfig(model, {"path": str(path)}, {"epochs": 60, "batch_size": 16, "lr": 0.05, "arch": "cpu-serial",
                                                 "momentum": 0.9})
    end = Trainer(cfg).run()
    assert end.test_acc >= 0.85, end.test_acc


@fuzz(300)
@given(body=st.one_of(st.binary(max_size=400),
                      st.lists(st.lists(st.sampled_from(["1", "-2.5", "x", "tcp", "", " ", "nan", "1e999", '"',
                                                          "a,b", "é", "\x00", "1e300",
                                                          "1_0", "３"]), min_size=1, max_size=5),
                               max_size=12).map(lambda rows: "\n".join(",".join(r) for r in rows).encode("utf-8"))),
       gz=st.booleans(), header=st.sampled_from(["auto", True, False]))
def test_random_files_load_or_fail_in_one_line(tmp_path, body, gz, header):
    """Arbitrary bytes and CSV-shaped noise, raw or gzip: a Dataset whose features are finite, or a one-line
    DataError/ConfigError; nothing else escapes."""
    path = tmp_path / "f.csv"
    path.write_bytes(gzip.compress(body) if gz else body)
    tabular.forget()
    try:
        ds = load(None, path, csv={"header": header})
    except (DataError, ConfigError) as exc:
        assert "\n" not in str(exc) and str(exc)
        return
    assert np.isfinite(ds.x_train).all() and np.isfinite(ds.x_test).all()
    assert ds.n_classes >= 2 and len(ds.y_train) >= 1 and len(ds.y_test) >= 1


def test_a_header_alone_is_refused_even_with_a_test_file(tmp_path, rng):
    rows, _ = kdd_rows(30, rng)
    head = write_csv(tmp_path / "head.csv", [], KDD_COLUMNS + ["label"])
    test = write_csv(tmp_path / "test.csv", rows, KDD_COLUMNS + ["label"])
    with pytest.raises(DataError, match=r"head.csv: one row only"):
        load(None, head, csv={"test_path": str(test)})


def test_labels_only_in_the_test_rows_are_noted(tmp_path, rng):
    rows, _ = kdd_rows(60, rng)
    test_rows, _ = kdd_rows(10, rng)
    test_rows[0][-1] = "unheard_of."
    ds = load(None, write_csv(tmp_path / "a.csv", rows), csv={"test_path": str(write_csv(tmp_path / "b.csv", test_rows))})
    assert "unheard_of." in ds.meta["classes"] and "unheard_of." not in ds.meta["train_classes"]
    assert any("labels in the test rows only" in n and "unheard_of." in n for n in ds.meta["notes"])


def test_a_network_too_narrow_for_a_class_of_the_test_file_is_told_where_it_is(tmp_path, rng):
    """A label found only in --test-data was blamed on the training file ("the dataset a.csv has N"): the
    error now names the class and the file it is in."""
    from nncore.config import fit_model
    from nncore.data import describe

    rows, _ = kdd_rows(60, rng)
    test_rows = [list(r) for r in rows[5:15]]  # (classes of the training rows, but one)
    test_rows[3][-1] = "unheard_of."
    csv = {"test_path": str(write_csv(tmp_path / "b.csv", test_rows))}
    info = describe(None, write_csv(tmp_path / "a.csv", rows), csv=csv)
    trained = len(load(None, tmp_path / "a.csv", csv=csv).meta["train_classes"])
    model = {"loss": "cross_entropy", "layers": [{"type": "Linear", "out_features": trained}]}
    with pytest.raises(ConfigError, match=rf"fit for {trained} classes, but the dataset a.csv has {trained + 1} "
                                          r"\(unheard_of. only in the test file b.csv\); set"):
        fit_model(model, info)
    model["layers"][0]["out_features"] = trained + 1
    fit_model(model, info)  # (the note says the network never trains on it; the run goes on)


def test_a_file_is_read_once_for_several_checks_and_errors_are_kept(tmp_path, rng, monkeypatch):
    """Checking a run and starting it (and the app's checks as a user types) read a file once per options;
    a file that fails is not read again either."""
    rows, _ = kdd_rows(50, rng)
    good = write_csv(tmp_path / "good.csv", rows)
    bad = tmp_path / "bad.csv"
    bad.write_text("1,2,x\n3,abc,y\n")
    reads = []
    real = tabular.read_csv
    monkeypatch.setattr(tabular, "read_csv", lambda *a, **k: reads.append(a[0]) or real(*a, **k))
    for _ in range(3):
        load(None, good)
        with pytest.raises(DataError, match=":2: column '1' holds 'abc'"):
            load(None, bad)
    assert tabular.is_loaded(good) and reads == [good, bad]
    assert load(None, good, csv={"label": 1}).n_classes == 3 and reads == [good, bad]  # a new label: no new read


@pytest.mark.parametrize("train,test,culprit", [
    ("0,1,a\n1,2,b\n2,3,a\n", "1,2,a\n3,1,b\n1e300,1,b\n", "test.csv:3: column '0' holds 1e+300, beyond float32's range"),
    # within float32, but standardised by a deviation of 5e-31 it is 2e40
    ("0,1,a\n1e-30,2,b\n0,3,a\n1e-30,1,b\n", "0,2,a\n1e10,1,b\n",
     "test.csv:2: column '0' holds 1e+10, which standardised (mean 5e-31, standard deviation 5e-31"),
])
def test_a_test_file_value_past_float32_is_refused_with_its_line(tmp_path, train, test, culprit):
    """1e300 in a test file was cast to inf: numpy's 'overflow encountered in cast' warning, then 'test loss nan'
    and exit 0."""
    (tmp_path / "train.csv").write_text(train)
    (tmp_path / "test.csv").write_text(test)
    with pytest.raises(DataError) as exc:
        load(None, tmp_path / "train.csv", csv={"test_path": str(tmp_path / "test.csv")})
    assert culprit in str(exc.value) and str(exc.value).startswith(str(tmp_path / "test.csv")), exc.value


def test_a_word_label_that_float_reads_as_a_number_stays_its_own_class(tmp_path):
    """Labels '1_000' and '1000' were one class: float('1_000') is 1000."""
    (tmp_path / "t.csv").write_text("1,x\n2,1000\n3,1_000\n4,x\n")
    ds = load(None, tmp_path / "t.csv", csv={"header": False})
    assert ds.n_classes == 3 and sorted(ds.meta["classes"]) == ["1000", "1_000", "x"]


@pytest.mark.parametrize("text,culprit", [
    ("", "empty (no header and no rows)"),
    ("1,2,x\n3,4,y\n5,abc,x\n", ":3: column '1' holds 'abc'"),
    ("1,2,x\n3,4,y\n5,1e300,x\n", ":3: column '1' holds 1e+300, beyond float32's range"),
    (",".join(f"c{i}" for i in range(tabular.MAX_COLUMNS + 1)) + "\n", ":1: 65,537 columns, more than"),
])
def test_the_cli_gives_one_line_and_exit_2(tmp_path, capsys, text, culprit):
    from nncore import cli

    path = tmp_path / "bad.csv"
    path.write_text(text)
    assert cli.main(["train", "kdd-net-1h", "--data", str(path), "--no-store", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"layerlab: error: {path}") and culprit in err, err


def test_a_run_on_a_relative_path_is_stored_with_the_absolute_one(tmp_path, rng, monkeypatch):
    """`layerlab train --data kdd.csv` in one directory, rerun from the app in another: the stored config must
    name the file absolutely, as the run read it (it kept 'kdd.csv' and could not run again)."""
    from nncore import cli
    from nncore.store import Store

    rows, _ = kdd_rows(200, rng)
    write_csv(tmp_path / "kdd.csv", rows, KDD_COLUMNS + ["label"])
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train", "kdd-net-1h", "--data", "kdd.csv", "--epochs", "1", "--arch", "cpu-serial",
                     "--store", "runs.sqlite", "--quiet"]) == 0
    assert cli.main(["train", "kdd-net-1h", "--data", "missing.csv", "--store", "runs.sqlite", "--quiet"]) == 2
    store = Store(tmp_path / "runs.sqlite")
    paths = sorted(r["config"]["data"]["path"] for r in store.runs())
    store.close()
    assert paths[0] == str(tmp_path / "kdd.csv")  # (the refused one, if it is stored at all, too)
    assert all(p.startswith(str(tmp_path)) for p in paths), paths


@pytest.mark.parametrize("zipped", [False, True])
@pytest.mark.parametrize("head", [b"\0\0\x08\x03\0\0\0\x02\0\0\0\x03\0\0\0\x03", b"\0\0\x08\x01\0\0\0\x05"])
def test_an_idx_file_given_as_a_table_says_to_give_its_directory(tmp_path, zipped, head):
    """An IDX file (images or labels, plain or gzip) named where a directory of them belongs is refused as
    such, not read as a CSV file that is not UTF-8 or has one row."""
    body = head + bytes(range(7, 25))
    path = tmp_path / ("train-images-idx3-ubyte.gz" if zipped else "train-images-idx3-ubyte")
    path.write_bytes(gzip.compress(body) if zipped else body)
    with pytest.raises(DataError, match="an IDX file, not a CSV table; give the directory that holds it"):
        load(directory=str(path))


def test_a_table_that_starts_with_zero_bytes_is_still_read_as_one(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"\0\0,1\n2,3\n")  # not an IDX header: its fourth byte is a comma
    with pytest.raises(DataError) as err:
        load(directory=str(path))
    assert "IDX" not in str(err.value)
