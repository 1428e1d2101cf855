"""The run store: what a run records is what it emitted; killed runs keep their finished epochs and are marked
died; concurrent writers lose nothing; damaged or newer stores are refused by path and never crash a run."""
import csv
import hashlib
import io
import json
import re
import os
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest

from nncore.config import load_config
from nncore.errors import BackendUnavailable, DataError
from nncore.events import EpochEnd, RunFailed, RunFinished, Step
from nncore.store import SCHEMA_VERSION, Recorder, Store, StoreError
from nncore.train import Trainer
from tests.cli.test_cli import layerlab, one_line_error


def test_a_runs_rows_are_its_events(tmp_path):
    store = Store(tmp_path / "runs.sqlite")
    events = []
    recorder = Recorder(store, "quadrant")
    cfg = load_config("quadrant").override("train", arch="cpu-serial", epochs=3)

    def emit(event):
        events.append(event)
        recorder(event)

    end = Trainer(cfg, emit).run()
    assert isinstance(end, RunFinished)
    (run,) = store.runs()
    full = store.run(run["id"])
    assert full["status"] == "finished" and full["summary"] == end.to_dict()
    assert full["config"] == events[0].config and full["arch"] == "cpu-serial" and full["threads"] == 1
    assert full["epochs"] == [e.to_dict() for e in events if isinstance(e, EpochEnd)]
    assert full["steps"] == [{"step": e.step, "epoch": e.epoch, "loss": e.loss, "samples_per_s": e.samples_per_s}
                             for e in events if isinstance(e, Step)]
    timings = store._query("SELECT name, fwd_ms FROM timings WHERE run_id = ? AND epoch = 3", (run["id"],))
    last = [e for e in events if isinstance(e, EpochEnd)][-1]
    assert [(t["name"], t["fwd_ms"]) for t in timings] == sorted((t.name, t.fwd_ms) for t in last.timings) or \
        {(t["name"], t["fwd_ms"]) for t in timings} == {(t.name, t.fwd_ms) for t in last.timings}
    assert run["epochs_done"] == 3 and run["test_acc"] == last.test_acc


def test_a_run_killed_mid_epoch_keeps_its_finished_epochs_and_is_marked_died(tmp_path):
    path = tmp_path / "runs.sqlite"
    proc = subprocess.Popen([sys.executable, "-m", "nncore.cli", "train", "net-1h", "--arch", "cpu-serial",
                             "--epochs", "50", "--store", str(path), "--jsonl", str(tmp_path / "e.jsonl")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    done = 0
    while done < 2 and time.monotonic() < deadline:
        time.sleep(0.3)
        if path.exists():
            try:
                with sqlite3.connect(path, timeout=5) as db:
                    done = db.execute("SELECT COUNT(*) FROM epochs").fetchone()[0]
            except sqlite3.OperationalError:
                pass
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    store = Store(path)
    (run,) = store.runs()
    assert run["status"] == "died" and run["epochs_done"] >= 2
    emitted = [json.loads(line) for line in (tmp_path / "e.jsonl").read_text().splitlines()
               if '"event":"epoch_end"' in line]
    assert store.run(run["id"])["epochs"] == emitted[:run["epochs_done"]]


def test_two_runs_writing_at_once_lose_nothing(tmp_path):
    path = tmp_path / "runs.sqlite"
    procs = [subprocess.Popen([sys.executable, "-m", "nncore.cli", "train", "quadrant", "--arch", "cpu-serial",
                               "--epochs", "12", "--store", str(path), "--quiet", "--seed", str(seed)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for seed in (1, 2)]
    for p in procs:
        assert p.wait(timeout=180) == 0, p.stderr.read()
    runs = Store(path).runs()
    assert sorted(r["status"] for r in runs) == ["finished", "finished"]
    assert [r["epochs_done"] for r in runs] == [12, 12]


@pytest.mark.parametrize("damage", ["garbage", "truncated", "other-database", "fifo", "directory", "version 0",
                                    "version \u00b2", "version x"])
def test_a_damaged_store_is_named_and_the_run_goes_on_without_it(tmp_path, damage):
    path = tmp_path / "runs.sqlite"
    Store(path).close()
    if damage.startswith("version"):  # a schema version no layerlab wrote ('²' passes str.isdigit, not int)
        db = sqlite3.connect(path)
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (damage.split()[1],))
        db.commit()
        db.close()  # (the WAL folded into the file before its fingerprint is taken)
    elif damage == "garbage":
        path.write_bytes(os.urandom(5000))
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    elif damage == "other-database":
        path.unlink()
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE stuff (x)")
    else:
        path.unlink()
        os.mkfifo(path) if damage == "fifo" else path.mkdir()
    fingerprint = lambda: hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else damage  # noqa: E731
    before = fingerprint()
    with pytest.raises(StoreError, match=str(path)):
        Store(path)
    proc = layerlab("train", "quadrant", "--epochs", "1", "--store", path)
    assert proc.returncode == 0 and "going on without recording the run" in proc.stderr
    assert str(path) in proc.stderr and "Traceback" not in proc.stderr
    proc = layerlab("runs", "--store", path, "list")
    assert proc.returncode == 2
    one_line_error(proc, str(path))
    assert fingerprint() == before  # never written


def test_a_store_from_a_newer_layerlab_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "runs.sqlite"
    Store(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1} is from a newer layerlab"):
        Store(path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_runs_list_show_compare_export_and_rm(tmp_path):
    path = tmp_path / "runs.sqlite"
    for arch in ("cpu-serial", "cpu-parallel"):
        assert layerlab("train", "quadrant", "--arch", arch, "--epochs", "3", "--store", path).returncode == 0
    listed = json.loads(layerlab("runs", "--store", path, "list", "--json").stdout)
    assert [r["arch"] for r in listed] == ["cpu-parallel", "cpu-serial"]  # newest first
    serial, parallel = listed[1]["id"], listed[0]["id"]
    assert [r["id"] for r in json.loads(layerlab("runs", "--store", path, "list", "--arch", "cpu-serial",
                                                 "--json").stdout)] == [serial]
    text = layerlab("runs", "--store", path, "list").stdout
    assert "quadrant" in text and "finished" in text
    assert len(json.loads(layerlab("runs", "--store", path, "list", "--limit", "1", "--json").stdout)) == 1
    proc = layerlab("runs", "--store", path, "list", "--limit", "-1")  # (it listed them all)
    assert proc.returncode == 2
    one_line_error(proc, "--limit: -1 must be >= 0")
    shown = json.loads(layerlab("runs", "--store", path, "show", str(serial), "--json").stdout)
    assert len(shown["epochs"]) == 3 and shown["config"]["train"]["arch"] == "cpu-serial"
    text = layerlab("runs", "--store", path, "show", str(serial)).stdout
    assert "test acc" in text
    # The charts, in plain text (not a terminal): axes, the epochs on x, the legend.
    assert "\x1b[" not in text and "loss" in text and "test accuracy" in text and "train (raw)" in text
    assert "┤" in text and "epoch" in text.split("loss")[-1]
    assert "┤" not in layerlab("runs", "--store", path, "show", str(serial), "--no-chart").stdout
    text = layerlab("runs", "--store", path, "compare", str(serial), str(parallel)).stdout
    assert f"#{serial} train" in text and f"#{parallel} test" in text  # the curves overlaid
    # Without colour each line has a character of its own (every one was braille, all alike).
    legend = dict((m[1], m[0]) for m in re.findall(r"│ (\S)\1 (#\d+ (?:train|test))", text))
    assert len(legend) == 4 and len(set(legend.values())) == 4, text
    # (the runs' curves are equal here, so the last drawn covers the first)
    assert all(text.count(legend[f"#{parallel} {k}"]) > 4 for k in ("train", "test")), text
    compared = json.loads(layerlab("runs", "--store", path, "compare", str(serial), str(parallel), "--json").stdout)
    assert compared[0]["speedup"] == pytest.approx(1.0)
    assert compared[1]["speedup"] == pytest.approx(compared[1]["samples_per_s"] / compared[0]["samples_per_s"])
    # Exports parse and carry what the store holds.
    proc = layerlab("runs", "--store", path, "export", "--all", "--csv", tmp_path / "r.csv")
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(io.StringIO((tmp_path / "r.csv").read_text())))
    assert len(rows) == 6 and {r["run_id"] for r in rows} == {str(serial), str(parallel)}
    epochs = {(int(r["run_id"]), int(r["epoch"])): float(r["test_loss"]) for r in rows}
    assert epochs[(serial, 3)] == shown["epochs"][2]["test_loss"]
    assert layerlab("runs", "--store", path, "export", str(serial), "--json", tmp_path / "r.json").returncode == 0
    assert json.loads((tmp_path / "r.json").read_text())[0]["epochs"] == shown["epochs"]
    assert layerlab("runs", "--store", path, "rm", str(serial)).returncode == 0
    assert [r["id"] for r in json.loads(layerlab("runs", "--store", path, "list", "--json").stdout)] == [parallel]
    proc = layerlab("runs", "--store", path, "show", str(serial))
    assert proc.returncode == 2
    one_line_error(proc, f"run {serial}: not in {path}")


def _three_runs(path) -> list[int]:
    """Three finished one-epoch runs written through the store's own API; their ids, oldest first."""
    store = Store(path)
    ids = []
    for i in range(3):
        run_id = store.begin("train", f"net{i}", {"train": {"batch_size": 8}}, arch="cpu-serial", threads=1)
        store.add_epoch(run_id, {"epoch": 1, "steps": 4, "train_loss": 0.5, "test_loss": 0.6, "test_acc": 0.75,
                                 "samples_per_s": 100.0, "epoch_s": 0.32},
                        [{"step": s, "epoch": 1, "loss": 0.5, "samples_per_s": 100.0} for s in range(1, 5)])
        store.update(run_id, status="finished", ended=time.time(), summary=json.dumps({"event": "run_finished"}))
        ids.append(run_id)
    store.close()
    return ids


@pytest.mark.parametrize("damage, reason", [
    ("UPDATE runs SET config = '{x' WHERE id = ?", "its config is not JSON"),
    ("UPDATE runs SET started = 'garbage' WHERE id = ?", "its started is 'garbage', not a number"),
    ("UPDATE runs SET started = 1e300 WHERE id = ?", "its started is 1e+300, not a time"),
    ("UPDATE runs SET summary = '[1]' WHERE id = ?", "its summary is not a JSON object"),
    ("UPDATE runs SET status = 'running', pid = 'x' WHERE id = ?", "its pid is 'x', not a whole number"),
    ("UPDATE epochs SET epoch_s = 'slow' WHERE run_id = ?", "an epoch's epoch_s is 'slow', not a number")])
def test_a_damaged_run_is_named_and_the_others_still_read(tmp_path, damage, reason):
    path = tmp_path / "runs.sqlite"
    ids = _three_runs(path)
    db = sqlite3.connect(path)
    db.execute(damage, (ids[1],))  # (edited by hand)
    db.commit()
    db.close()
    named = f"run {ids[1]} in {path}: damaged ({reason})"
    proc = layerlab("runs", "--store", path, "list", "--json")
    assert proc.returncode == 0 and [r["id"] for r in json.loads(proc.stdout)] == [ids[2], ids[0]]
    one_line_error(proc, named + "; not listed")
    proc = layerlab("runs", "--store", path, "list")
    assert proc.returncode == 0 and "net2" in proc.stdout and "net0" in proc.stdout and "net1" not in proc.stdout
    one_line_error(proc, named)
    if "epoch" not in damage:  # (show reads the epochs' events, which are whole)
        proc = layerlab("runs", "--store", path, "show", ids[1])
        assert proc.returncode == 2 and not proc.stdout
        one_line_error(proc, named)
    if "config" not in damage:
        return
    proc = layerlab("runs", "--store", path, "compare", ids[0], ids[1], "--json")
    assert proc.returncode == 2 and not proc.stdout
    one_line_error(proc, named)
    proc = layerlab("runs", "--store", path, "export", "--all", "--json", "-")
    assert proc.returncode == 0 and [r["id"] for r in json.loads(proc.stdout)] == [ids[2], ids[0]]
    one_line_error(proc, named + "; not exported")
    proc = layerlab("runs", "--store", path, "export", ids[1], "--csv", "-")
    assert proc.returncode == 2 and not proc.stdout
    one_line_error(proc, named)
    proc = layerlab("runs", "--store", path, "rm", ids[1])  # a damaged run can be removed
    assert proc.returncode == 0, proc.stderr
    proc = layerlab("runs", "--store", path, "list", "--json")
    assert [r["id"] for r in json.loads(proc.stdout)] == [ids[2], ids[0]] and not proc.stderr


def test_a_damaged_epoch_event_or_point_is_named_by_show(tmp_path):
    path = tmp_path / "runs.sqlite"
    ids = _three_runs(path)
    store = Store(path)
    bench = store.add_finished("bench", "net-1h", {}, [{"arch": "cpu-serial", "batch": 8, "samples_per_s": 10.0}])
    store.db.execute("UPDATE epochs SET event = '{\"epoch\": 1}' WHERE run_id = ?", (ids[0],))
    store.db.execute("UPDATE points SET data = '{\"batch\": \"eight\"}' WHERE run_id = ?", (bench,))
    with pytest.raises(StoreError, match=re.escape(f"run {ids[0]} in {path}: damaged (its epoch 1: no steps)")):
        store.run(ids[0])
    with pytest.raises(StoreError, match=re.escape(f"run {bench} in {path}: damaged (its point 0: batch is "
                                                   "'eight', not a number)")):
        store.run(bench)
    assert store.run(ids[1])["epochs"][0]["epoch_s"] == 0.32  # the others read
    store.close()


def _read_only(monkeypatch, path) -> None:
    """SQLite opens ``path`` read-only from here on (SQLITE_OPEN_READONLY), as for a user who may not write it
    (file modes do not stop root, who runs the suite in containers)."""
    connect = sqlite3.connect

    def read_only(database, *args, **kwargs):
        if str(database) == str(path):
            return connect(f"file:{path}?mode=ro", *args, uri=True, **kwargs)
        return connect(database, *args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", read_only)


def test_a_read_only_store_lists_and_its_rm_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    from nncore.cli import main

    path = tmp_path / "runs.sqlite"
    ids = _three_runs(path)
    store = Store(path)  # and a run left running by a process that is gone (another start time: not this one)
    gone = store.begin("train", "gone", {})
    store.db.execute("UPDATE runs SET pid_start = '0' WHERE id = ?", (gone,))
    store.close()
    _read_only(monkeypatch, path)
    assert main(["runs", "--store", str(path), "list", "--json"]) == 0  # marking it died is left to a writer
    out, err = capsys.readouterr()
    assert [(r["id"], r["status"]) for r in json.loads(out)] == [(gone, "running"), *((i, "finished") for i in
                                                                                      ids[::-1])] and not err
    assert main(["runs", "--store", str(path), "rm", str(ids[0])]) == 2
    out, err = capsys.readouterr()
    assert not out and err == (f"layerlab: error: cannot change {path}: read-only (attempt to write a readonly "
                               "database)\n")
    monkeypatch.undo()
    assert [r["id"] for r in Store(path).runs()] == [gone, *ids[::-1]]  # (and now it could be marked died)
    assert Store(path).run(gone)["status"] == "died"


def test_rm_refuses_a_run_still_being_recorded(tmp_path):
    path = tmp_path / "runs.sqlite"
    proc = subprocess.Popen([sys.executable, "-m", "nncore.cli", "train", "quadrant", "--arch", "cpu-serial",
                             "--epochs", "100000", "--store", str(path), "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline, found = time.monotonic() + 120, None
        while found is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            try:
                with sqlite3.connect(path, timeout=5) as db:
                    found = db.execute("SELECT id FROM runs WHERE status = 'running'").fetchone()
            except sqlite3.OperationalError:  # (not made yet)
                pass
        assert found is not None, proc.stderr.read() if proc.poll() is not None else "no run recorded"
        run_id = found[0]
        rm = layerlab("runs", "--store", path, "rm", run_id)
        assert rm.returncode == 2
        one_line_error(rm, f"run {run_id} in {path} is still being recorded (by process {proc.pid}): stop it "
                           "before removing it")
    finally:
        proc.send_signal(signal.SIGTERM)  # stops after its step, the run recorded as stopped
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    assert "recording stopped" not in proc.stderr.read()  # its run was never taken from under it
    assert layerlab("runs", "--store", path, "rm", run_id).returncode == 0  # stopped: it goes
    assert not Store(path).exists(run_id)


def test_a_running_run_of_another_host_is_not_removed(tmp_path):
    path = tmp_path / "runs.sqlite"
    ids = _three_runs(path)
    store = Store(path)
    store.update(ids[1], status="running", host="elsewhere")  # its process cannot be checked from here
    with pytest.raises(StoreError, match=re.escape(f"run {ids[1]} in {path} is still being recorded (on host "
                                                   "elsewhere, which cannot be checked from here)")):
        store.remove(ids)
    assert [r["id"] for r in store.runs()] == ids[::-1]  # nothing removed
    assert store.remove([ids[0], ids[2]]) == 2


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize("args", [["list"], ["list", "--json"], ["show", "1"], ["compare", "1", "2"],
                                  ["export", "--all", "--json", "-"], ["export", "1", "--csv", "-"]])
def test_a_full_stdout_is_one_line_exit_2(tmp_path, args):
    path = tmp_path / "runs.sqlite"
    _three_runs(path)
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "nncore.cli", "runs", "--store", str(path), *args], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 2
    one_line_error(proc, "layerlab: error: stdout: the output could not be written (No space left on device)")


def test_no_store_records_nothing_and_a_failed_run_is_recorded(tmp_path):
    home = tmp_path / "home"
    proc = layerlab("train", "quadrant", "--epochs", "1", "--no-store", env={**os.environ, "LAYERLAB_HOME": str(home)})
    assert proc.returncode == 0 and not (home / "runs.sqlite").exists()
    path = tmp_path / "runs.sqlite"
    proc = layerlab("train", "quadrant", "--epochs", "2", "--lr", "3e38", "--store", path)
    assert proc.returncode == 3
    (run,) = Store(path).runs()
    assert run["status"] == "failed" and run["exit_code"] == 3 and "non-finite" in run["error"]


def test_a_run_that_fails_before_it_starts_is_recorded_refused_or_failed_not_died(tmp_path):
    """A run that fails when it sets up (RunFailed with no RunStarted before it) is recorded with its error and
    exit code, not left "running" for the next open to call died: "refused" where the backend was unavailable
    (nothing ran; exit 4), "failed" for any other set-up failure."""
    path = tmp_path / "runs.sqlite"
    for error, code in (("cuda is unavailable: no CUDA driver", BackendUnavailable.exit_code),
                        ("/x/train-images-idx3-ubyte: truncated", DataError.exit_code)):
        recorder = Recorder(Store(path), "quadrant", load_config("quadrant").to_dict())
        recorder(RunFailed(error, code, 0, 0))
    failed, refused = Store(path).runs()
    assert refused["status"] == "refused" and refused["exit_code"] == 4 and refused["error"].startswith("cuda is")
    assert failed["status"] == "failed" and failed["exit_code"] == 2 and "truncated" in failed["error"]


def test_runs_list_says_what_each_run_trained_on(tmp_path):
    """A run on a CSV table and one on the default data listed alike; the data column tells them apart."""
    path, table = tmp_path / "runs.sqlite", tmp_path / "pairs.csv"
    rng = np.random.default_rng(5)
    table.write_text("".join(f"{a:.3f},{b:.3f},{'pq'[int(a > b)]}\n" for a, b in rng.random((50, 2))))
    net = tmp_path / "net.toml"
    net.write_text('[model]\nloss = "cross_entropy"\nlayers = [{ type = "Linear", out_features = 2 }]\n')
    for extra in (["--data", table], []):
        proc = layerlab("train", net, "--epochs", "1", "--store", path, "--quiet", *extra)
        assert proc.returncode == 0, proc.stderr
    lines = layerlab("runs", "--store", path, "list").stdout.splitlines()
    header = lines[0].split()
    assert header[header.index("network") + 1] == "data"
    assert [line.split()[header.index("data") + 1] for line in lines[1:]] == ["quadrant", "pairs.csv"]


@pytest.mark.parametrize("data,label", [({"path": "/d/ev\x1b[31mRED\nx.csv"}, "ev?[31mRED?x.csv"),
                                        ({"path": "/d/idx/", "dataset": None}, "idx"),
                                        ({"path": None, "dataset": "quadrant"}, "quadrant"), ({}, None)])
def test_the_data_label_is_one_printable_line(data, label):
    """A data file's name goes into `runs list` and the app's table: an escape sequence or a newline in it would
    reach the terminal as it is."""
    from nncore.report import data_label

    assert data_label({"data": data}) == label


def test_a_cuda_run_refused_for_want_of_a_gpu_is_listed_refused(tmp_path):
    from nncore.runtime import available_archs

    if next(a for a in available_archs() if a.name == "cuda").available:
        pytest.skip("cuda works here: nothing is refused")
    path = tmp_path / "runs.sqlite"
    proc = layerlab("train", "quadrant", "--arch", "cuda", "--store", path)
    assert proc.returncode == 4 and "cuda is unavailable" in proc.stderr
    (run,) = json.loads(layerlab("runs", "--store", path, "list", "--status", "refused", "--json").stdout)
    assert run["status"] == "refused" and run["arch"] == "cuda"
    assert json.loads(layerlab("runs", "--store", path, "list", "--status", "failed", "--json").stdout) == []
    assert " refused " in layerlab("runs", "--store", path, "list").stdout


def test_sweeps_and_benchmarks_are_recorded_with_their_points(tmp_path):
    path = tmp_path / "runs.sqlite"
    proc = layerlab("bench", "--workloads", "net-1h", "--batch", "16", "--steps", "2", "--repeats", "1", "--warmup",
                    "1", "--no-torch", "--json", tmp_path / "b.json", "--store", path)
    assert proc.returncode == 0, proc.stderr
    proc = layerlab("sweep", "quadrant", "--archs", "cpu-serial", "--batch", "16,32", "--steps", "2", "--repeats", "1",
                    "--warmup", "1", "--out", tmp_path / "sw", "--store", path)
    assert proc.returncode == 0, proc.stderr
    sweep, bench = Store(path).runs()
    assert (sweep["kind"], bench["kind"]) == ("sweep", "bench")
    # Started when the command began, not as it ended (they were recorded ending before they started).
    assert all(r["ended"] - r["started"] > 0.5 for r in (sweep, bench)), [(r["started"], r["ended"]) for r in (sweep, bench)]
    assert Store(path).run(bench["id"])["points"] == json.loads((tmp_path / "b.json").read_text())
    assert Store(path).run(sweep["id"])["points"] == json.loads((tmp_path / "sw" / "sweep.json").read_text())["points"]
    text = layerlab("runs", "--store", path, "show", str(sweep["id"])).stdout
    assert "samples/s (log) against batch size" in text and "cpu-serial" in text.split("samples/s (log)")[-1]


def test_listed_rates_leave_out_step_one_as_the_app_does(tmp_path):
    from tui.state import RunRecord

    store = Store(tmp_path / "runs.sqlite")
    events = []
    recorder = Recorder(store, "quadrant")
    cfg = load_config("quadrant").override("train", arch="cpu-serial", epochs=3)
    Trainer(cfg, lambda e: (events.append(e), recorder(e))).run()
    app_view = RunRecord("quadrant", "cpu-serial", 1, cfg.train["batch_size"])
    for e in events:
        if isinstance(e, EpochEnd):
            app_view.add_epoch(e.to_dict())
    (run,) = store.runs()
    assert run["samples_per_s"] == pytest.approx(app_view.samples_per_s)


def test_two_processes_making_a_new_store_at_once_both_open_it(tmp_path):
    # Two runs that start together on a store that does not exist yet both switch the new file to WAL; SQLite
    # answered "database is locked" at once to one of them in about a third of the tries (and the run went on
    # unrecorded). Each pair here races on a fresh file.
    code = ("import sys; from nncore.store import Store; s = Store(sys.argv[1]); s.begin('train', 'x', {}); "
            "print(s.count())")
    for i in range(25):
        (tmp_path / f"s{i}").mkdir()  # a path given names a store in a directory that exists
        path = str(tmp_path / f"s{i}" / "runs.sqlite")
        procs = [subprocess.Popen([sys.executable, "-c", code, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for _ in range(2)]
        for p in procs:
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
        assert Store(path).count() == 2


def test_a_store_path_in_a_missing_directory_is_refused_and_a_new_store_is_announced(tmp_path, monkeypatch, capsys):
    """--store never makes directories (a typo would start a store of its own in a new tree): a path in a missing
    directory is a one-line error, exit 2, before anything runs; a new file in a directory that exists is created
    and named once on stderr, and not again once it exists."""
    from tui import launch

    typo = tmp_path / "typo" / "runs.sqlite"
    for argv in (("train", "quadrant", "--epochs", "1"), ("sweep", "quadrant", "--archs", "cpu-serial", "--batch",
                                                         "16", "--steps", "1", "--out", tmp_path / "sw")):
        proc = layerlab(*argv, "--store", typo)
        assert proc.returncode == 2 and proc.stdout == ""
        one_line_error(proc, f"--store {typo}: no directory {typo.parent}")
    monkeypatch.setattr(launch, "_not_a_terminal", lambda: None)  # (under pytest stdin is no terminal: exit 2 too)
    assert launch.main(["tui", "--store", str(typo)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--store {typo}: no directory {typo.parent}" in err, err
    with pytest.raises(StoreError, match="no directory"):
        Store(typo)
    assert not typo.parent.exists() and not (tmp_path / "sw").exists()
    path = tmp_path / "runs.sqlite"
    said = [layerlab("train", "quadrant", "--epochs", "1", "--store", path).stderr for _ in range(2)]
    assert said[0].count(f"new run store created: {path}") == 1 and "new run store" not in said[1]
    assert len(Store(path).runs()) == 2


def test_overlaid_accuracy_is_never_labelled_past_1(tmp_path):
    """`runs compare` overlays the runs' test accuracy with a legend above the curves; its y axis is labelled up
    to 1 (100%) and no further, and every stored accuracy lies within the labelled range."""
    import re

    path = tmp_path / "runs.sqlite"
    for lr in ("0.1", "0.05"):
        assert layerlab("train", "quadrant", "--epochs", "3", "--lr", lr, "--quiet", "--store", path).returncode == 0
    ids = [str(r["id"]) for r in Store(path).runs()]
    text = layerlab("runs", "--store", path, "compare", *ids).stdout
    chart = text[text.index("test accuracy"):]
    labels = [float(v) for v in re.findall(r"^\s*([0-9.]+)┤", chart, re.M)]
    accs = [e["test_acc"] for i in ids for e in Store(path).run(int(i))["epochs"]]
    assert labels and max(labels) == 1.0, chart
    assert min(labels) - 0.1 <= min(accs), chart


@pytest.mark.parametrize("cut", ["body", "header"])
def test_data_refused_before_training_is_not_recorded_whichever_check_finds_it(tmp_path, cut):
    # A truncated image file was recorded as a failed run when its body was short (found as the trainer loads
    # it) and not at all when its header was bad (found before): both exit 2 before anything ran.
    import struct

    import numpy as np

    rng = np.random.default_rng(0)
    d = tmp_path / "idx"
    d.mkdir()
    for name, arr in {"train-images-idx3-ubyte": rng.integers(0, 256, (40, 28, 28)),
                      "train-labels-idx1-ubyte": rng.integers(0, 10, 40),
                      "t10k-images-idx3-ubyte": rng.integers(0, 256, (10, 28, 28)),
                      "t10k-labels-idx1-ubyte": rng.integers(0, 10, 10)}.items():
        raw = bytes([0, 0, 8, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.astype(np.uint8).tobytes()
        if name == "train-images-idx3-ubyte":
            raw = raw[:-100] if cut == "body" else raw[:2] + b"\x0d" + raw[3:]  # short, or a wrong element type
        (d / name).write_bytes(raw)
    path = tmp_path / "runs.sqlite"
    proc = layerlab("train", "cnn", "--data", d, "--epochs", "1", "--store", path)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("layerlab: error:")]
    assert proc.returncode == 2 and len(errors) == 1 and "train-images-idx3-ubyte" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not path.exists() or Store(path).runs() == []
