"""The headless CLI as a user runs it: exit codes, one-line errors, JSON lines, Ctrl-C, no Textual."""
import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib

import numpy as np
import pytest

from nncore import runtime
from nncore.events import EVENT_TYPES, from_dict
from tests.nncore.test_data import _corrupt

QUICK = ["--epochs", "1", "--limit", "40"]


def layerlab(*args, timeout=120, **kwargs):
    return subprocess.run([sys.executable, "-m", "nncore.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def one_line_error(proc, needle):
    err = proc.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert needle in err, err


def test_engine_imports_without_textual():
    code = ("import sys, nncore.cli, nncore.train, nncore.network, nncore.data, nncore.report; "
            "assert 'textual' not in sys.modules and 'tui' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_archs_lists_every_backend():
    proc = layerlab("archs")
    assert proc.returncode == 0
    names = [line.split()[0] for line in proc.stdout.splitlines()]
    assert names == ["cpu-serial", "cpu-parallel", "cuda"]


def test_jsonl_to_stdout_is_pure_json(tmp_path):
    proc = layerlab("train", "quadrant", "--epochs", "2", "--jsonl", "-", "--save-weights", tmp_path / "w.npz")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    events = [json.loads(line) for line in lines]
    assert all(e["schema"] == 1 and e["event"] in EVENT_TYPES for e in events)
    assert [e["event"] for e in events if e["event"] != "step"] == \
        ["run_started", "epoch_end", "epoch_end", "run_finished"]
    for e in events:
        from_dict(e)  # every field is known to the schema
    assert events[0]["arch"] == "cpu-parallel" and events[-1]["weights"] == str(tmp_path / "w.npz")


def test_human_output_has_epochs_and_a_timing_table():
    proc = layerlab("train", "quadrant", "--epochs", "2", "--arch", "cpu-serial")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "cpu-serial (1 thread)" in out and "epoch   2" in out
    assert "layer 0 (Linear)" in out and "GFLOP/s" in out and "test acc" in out.splitlines()[-1]


def write(tmp_path, text, name="c.toml"):
    (tmp_path / name).write_bytes(text.encode("utf-8", "surrogateescape"))  # (\udcXX: the byte XX, not UTF-8)
    return tmp_path / name


MLP = '[model]\ninput = [2]\nloss = "bce"\nlayers = [{type = "Linear", out_features = 1}]\n'


@pytest.mark.parametrize("config,args,needle", [
    ("[model\n", [], "invalid TOML"),
    ('[model]\ninput = [2]\nloss = "bce"\nlayers = [{type = "Dense", out_features = 1}]\n', [], "layer 0: unknown type 'Dense'"),
    ('[model]\ninput = [2]\nloss = "bce"\nlayers = [{type = "Linear", out_features = 4, in_features = 3}]\n', [],
     "layer 0 (Linear): in_features 3 does not match the input size 2"),
    (MLP + '[train]\nbatch_size = 0\n', [], "train.batch_size = 0 must be a positive integer"),
    (MLP + '[train]\nlrr = 0.1\n', [], "unknown field train.lrr"),
    ("\udcff\udcfe[model]\n", [], "not UTF-8 text (byte 0); a config is a TOML or JSON file"),  # (codec's words)
    (MLP, ["--data", "{csv}", "--limit", "1"], "data.limit (--limit) = 1 reads one row"),  # (blamed the file)
    (MLP + '[data]\ntest_ratio = 0\n', [], "data.test_ratio = 0 must be a number in (0, 1)"),  # ([0, 1) there,
    (MLP + '[data]\nnoise = 1.5\n', [], "data.noise = 1.5 must be a number in [0, 1]"),   # (0, 1) later)
    (MLP, ["--epochs", "x"], "--epochs: 'x' must be a whole number written in digits 0-9"),
    (MLP, ["--dataset", "nope"], "dataset 'nope' is unknown; choose one of quadrant"),
    (MLP, ["--lr", "-1"], "--lr: train.lr = -1.0 must be a finite number > 0"),
    (MLP, ["--limit", "0"], "--limit: data.limit = 0 must be a positive integer"),  # the flag, not the file
    ("name = 3\n" + MLP, [], "c.toml: name = 3 must be one line of text of at most 64 characters"),
    ('name = "two\\nlines"\n' + MLP, [], "c.toml: name = 'two\\nlines' must be one line of text"),
    ('name = "' + 'x' * 65 + '"\n' + MLP, [], "name = '" + "x" * 35 + "…' must be one line of text of at most 64"),
    ("description = [1]\n" + MLP, [], "c.toml: description = [1] must be one line of text"),
    (MLP, ["--save-weights", "/nonexistent/dir/w.npz"], "its directory does not exist"),
])
def test_bad_config_or_arguments_exit_2(tmp_path, config, args, needle):
    csv = tmp_path / "d.csv"  # ({csv} in args: a table of 50 rows)
    csv.write_text("".join(f"{i % 7},{i % 5},{'ab'[i % 2]}\n" for i in range(50)))
    proc = layerlab("train", write(tmp_path, config), *[a.format(csv=csv) for a in args])
    assert proc.returncode == 2
    one_line_error(proc, needle)


def test_a_configs_name_names_the_run(tmp_path):
    """A config's top-level ``name`` is what the run store lists for its runs (it was the file's name, and
    ``name`` was read and dropped); without one, the file's name still is."""
    store = tmp_path / "runs.sqlite"
    named = write(tmp_path, 'name = "xor-probe"\n' + MLP, "a.toml")
    plain = write(tmp_path, MLP, "b.toml")
    as_json = write(tmp_path, json.dumps({"name": "json-probe", **tomllib.loads(MLP)}), "run.json")  # (the app's)
    for cfg in (named, plain, as_json):
        proc = layerlab("train", cfg, "--arch", "cpu-serial", "--epochs", "1", "--quiet", "--store", store)
        assert proc.returncode == 0, proc.stderr
    listed = layerlab("runs", "--store", store, "list").stdout
    assert "xor-probe" in listed and " b " in listed and "json-probe" in listed, listed
    assert " a " not in listed and " run " not in listed, listed
    # `layerlab runs` alone lists them too (it was an error asking for a subcommand)
    alone = layerlab("runs", "--store", store)
    assert alone.returncode == 0 and alone.stdout == listed, alone.stderr


def test_an_unknown_dataset_names_the_known_ones_and_where_other_data_goes(tmp_path):
    proc = layerlab("train", write(tmp_path, MLP), "--dataset", "nope")
    assert proc.returncode == 2
    one_line_error(proc, "fashion-subset")
    assert "or a directory of IDX files or a CSV file (--data, data.path)" in proc.stderr, proc.stderr


def test_an_option_is_named_the_same_way_whichever_check_refuses_it(tmp_path):
    """argparse's checks said "argument --lr: ...", the settings' checks "--lr: ...": one wording now."""
    for value in ["x", "-1"]:  # (refused by argparse's type, then by the config's range)
        proc = layerlab("train", write(tmp_path, MLP), "--lr", value)
        assert proc.returncode == 2 and proc.stderr.startswith("layerlab: error: --lr: "), proc.stderr
    proc = layerlab("nosuchcommand")
    assert proc.returncode == 2 and proc.stderr.startswith("layerlab: error: command: invalid choice"), proc.stderr


@pytest.mark.parametrize("layers,needle", [
    ('[{type = "Dense", out_features = 1}]', "layer 0: unknown type 'Dense'"),
    ('[{type = "Linear", out_features = -8}]', "layer 0 (Linear): out_features -8 must be >= 1"),
    ('"x"', "layers must be a non-empty list of layer tables")])
def test_a_bad_network_in_a_file_names_the_file_and_the_layer(tmp_path, layers, needle):
    path = write(tmp_path, f'[model]\ninput = [2]\nloss = "bce"\nlayers = {layers}\n')
    proc = layerlab("train", path)
    assert proc.returncode == 2
    one_line_error(proc, f"{path}: {needle}")


def test_missing_config_exits_2(tmp_path):
    proc = layerlab("train", tmp_path / "nope.toml")
    assert proc.returncode == 2
    one_line_error(proc, "nope.toml: no such file")


@pytest.mark.parametrize("how", ["missing", "truncated", "magic", "counts"])
def test_bad_idx_data_exits_2(tmp_path, how):
    data_dir = tmp_path / "idx"
    data_dir.mkdir()
    needle = _corrupt(data_dir, how)
    cfg = write(tmp_path, '[model]\nloss = "cross_entropy"\nlayers = [{type = "Flatten"}, '
                          '{type = "Linear", out_features = 10}]\n')
    proc = layerlab("train", cfg, "--data", data_dir, *QUICK)
    assert proc.returncode == 2
    one_line_error(proc, needle)


def test_divergence_exits_3_naming_the_step():
    proc = layerlab("train", "quadrant", "--lr", "3e38", "--epochs", "1")
    assert proc.returncode == 3
    one_line_error(proc, "non-finite loss at step")


def test_unavailable_cuda_exits_4():
    if {s.name: s for s in runtime.available_archs()}["cuda"].available:
        pytest.skip("this machine has a working GPU, so cuda is not unavailable")
    proc = layerlab("train", "quadrant", "--arch", "cuda")
    assert proc.returncode == 4
    one_line_error(proc, "cuda is unavailable")


def test_init_weights_mismatch_exits_2(tmp_path):
    np.savez(tmp_path / "w.npz", **{"0.weight": np.zeros((3, 3), np.float32)})
    proc = layerlab("train", "quadrant", "--init-weights", tmp_path / "w.npz", *QUICK)
    assert proc.returncode == 2
    one_line_error(proc, "0.weight has shape (3, 3), the network expects (16, 2)")


def test_sigint_stops_cleanly_with_weights_saved(tmp_path):
    out, log = tmp_path / "w.npz", tmp_path / "events.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "nncore.cli", "train", "quadrant", "--epochs", "100000",
                             "--save-weights", str(out), "--jsonl", str(log)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and (not log.exists() or log.read_text().count("epoch_end") < 2):
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    last = json.loads(log.read_text().splitlines()[-1])
    assert last["event"] == "run_finished" and last["stopped"] is True
    with np.load(out) as data:
        assert set(data.files) == {"0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"}
        assert all(np.all(np.isfinite(data[k])) for k in data.files)


def test_help_lists_the_version_flag_and_the_exit_codes():
    from nncore import cli

    proc = layerlab("--help")
    assert proc.returncode == 0 and "--version" in proc.stdout
    codes = {int(line.split()[0]) for line in proc.stdout.split("exit codes:")[1].strip().splitlines()
             if not line.startswith(" " * 7)}  # (a code's second line is indented past the codes)
    assert codes == {cli.EXIT_OK, cli.EXIT_ERROR, cli.EXIT_CONFIG, cli.EXIT_DIVERGED, cli.EXIT_BACKEND,
                     cli.EXIT_INTERRUPTED}
    version = layerlab("--version")
    assert version.returncode == 0 and version.stdout.startswith("layerlab ") and not version.stderr


def _first_line_then_close(*args, cwd=None):
    """Run the CLI with stdout a pipe that its reader closes after the first line (`| head -1`): that line, the
    exit code and the whole of stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "nncore.cli", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=cwd,
                            env=dict(os.environ, PYTHONPATH=os.getcwd()))
    first = proc.stdout.readline()
    proc.stdout.close()
    stderr = proc.stderr.read()
    return first, proc.wait(timeout=120), stderr


@pytest.mark.parametrize("out,what", [(["--jsonl", "-"], "--jsonl -"), ([], "stdout")])
def test_train_output_to_a_closed_pipe_says_what_is_missing(tmp_path, out, what):
    # `layerlab train ... [--jsonl -] | head -1`: the reader goes away; the run trains to its end and is recorded,
    # and stderr says so once as it happens and once at the end, in words that agree, with exit 2.
    first, code, stderr = _first_line_then_close("train", "quadrant", "--epochs", "2", *out,
                                                 "--store", tmp_path / "runs.sqlite")
    assert json.loads(first)["event"] == "run_started" if out else first.startswith("layerlab: ")
    assert code == 2
    lines = [line for line in stderr.strip().splitlines() if not line.startswith("layerlab: new run store created")]
    assert "Traceback" not in stderr and len(lines) == 2, stderr
    written = "the events" if out else "the report"
    assert lines[0].startswith(f"layerlab: warning: {what}: writing {written} failed (Broken pipe)")
    assert lines[0].endswith("the run goes on")
    assert lines[1].startswith(f"layerlab: error: {what}: {written} from event ")
    assert lines[1].endswith("missing (Broken pipe); the run itself finished")
    at = [re.search(r" event ([\d,]+) \(an? (\w+) event\)", line) for line in lines]
    assert all(at) and at[0].groups() == at[1].groups() and int(at[0][1].replace(",", "")) >= 2, lines
    listed = layerlab("runs", "list", "--store", tmp_path / "runs.sqlite")
    assert listed.returncode == 0 and "finished" in listed.stdout, listed.stdout + listed.stderr


@pytest.mark.parametrize("out", [["--jsonl", "-"], []])
def test_train_with_stderr_in_the_same_closed_pipe_trains_to_its_end(tmp_path, out):
    """`layerlab train ... 2>&1 | head -2`: stderr's reader is gone too, so the warning could not be written
    either; that raised out of the run, which ended after an epoch or two with exit 0, recorded as died. It
    trains to its end, is recorded as finished, and exits 2."""
    proc = subprocess.Popen([sys.executable, "-m", "nncore.cli", "train", "quadrant", "--epochs", "3", *out,
                             "--store", str(tmp_path / "runs.sqlite")], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=dict(os.environ, PYTHONPATH=os.getcwd()))
    first = proc.stdout.readline()
    proc.stdout.close()
    assert first and proc.wait(timeout=120) == 2
    (run,) = json.loads(layerlab("runs", "list", "--json", "--store", tmp_path / "runs.sqlite").stdout)
    assert run["status"] == "finished" and run["epochs_done"] == 3, {k: run[k] for k in ("status", "epochs_done")}


@pytest.mark.parametrize("args", [("bench", "--workloads", "net-1h", "--batch", "64", "--steps", "2", "--repeats", "2",
                                   "--no-torch", "--no-store"),
                                  ("sweep", "quadrant", "--archs", "cpu-serial", "--batch", "16", "--steps", "2",
                                   "--no-store")])
def test_tables_to_a_closed_pipe_end_quietly(args, tmp_path):
    # `layerlab bench | head -1`: the reader has what it wanted; exit 0 and nothing on stderr but progress.
    first, code, stderr = _first_line_then_close(*args, cwd=tmp_path)  # (sweep writes its files where it runs)
    assert first and code == 0
    assert "Traceback" not in stderr and "Error" not in stderr, stderr


def test_no_arguments_opens_the_app_on_the_default(monkeypatch):
    import tui.app
    from tui import launch

    opened = []
    monkeypatch.setattr(tui.app, "run_app", lambda config=None, store=None: opened.append((config, store)) or 0)
    monkeypatch.setattr(launch, "_not_a_terminal", lambda: None)
    assert launch.main([]) == 0 and launch.main(["tui", "cnn"]) == 0
    assert launch.main(["tui", "--no-store"]) == 0 and launch.main(["tui", "cnn", "--store", "x.sqlite"]) == 0
    assert launch.main(["tui", "--store=y.sqlite"]) == 0
    # None: the app's default (quadrant, the default store); False: no store
    assert opened == [(None, None), ("cnn", None), (None, False), ("cnn", "x.sqlite"), (None, "y.sqlite")]
    assert launch.main(["tui", "--store"]) == 2  # a path is needed
    assert launch.main(["archs"]) == 0  # anything else goes to the headless CLI


def test_the_app_without_a_terminal_says_so_and_exits_2():
    # `echo | layerlab` waited forever for keys from a pipe.
    proc = subprocess.run([sys.executable, "-m", "tui.launch"], input="", capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "needs a terminal, and stdin" in proc.stderr and "Traceback" not in proc.stderr


def test_tui_usage_errors_exit_2_and_help_exits_0():
    proc = subprocess.run([sys.executable, "-m", "tui.launch", "tui", "a.toml", "b.toml"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "unexpected argument 'b.toml'" in proc.stderr and "Traceback" not in proc.stderr
    one_line_error(proc, "unexpected argument 'b.toml' (layerlab tui --help)")  # (one line, not the usage too)
    proc = subprocess.run([sys.executable, "-m", "tui.launch", "tui", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: layerlab [tui [CONFIG]")
    proc = subprocess.run([sys.executable, "-m", "tui.launch", "--version"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("layerlab ")


def test_saved_weights_get_the_users_umask(tmp_path):
    out = tmp_path / "w.npz"
    proc = layerlab("train", "quadrant", *QUICK, "--quiet", "--save-weights", out, preexec_fn=lambda: os.umask(0o027))
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_mode & 0o777 == 0o640  # 0o666 less the umask, as open() would make it
    proc = layerlab("train", "quadrant", *QUICK, "--quiet", "--save-weights", out)
    assert out.stat().st_mode & 0o777 == 0o640  # replacing a file keeps its mode


def test_sweep_writes_csv_and_json_with_amdahl(tmp_path):
    proc = layerlab("sweep", "quadrant", "--batch", "32", "--steps", "2", "--repeats", "2", "--warmup", "1",
                    "--out", tmp_path / "out", timeout=300)
    assert proc.returncode == 0, proc.stderr
    import csv

    rows = list(csv.DictReader(open(tmp_path / "out" / "sweep.csv")))
    assert [r["arch"] for r in rows] == ["cpu-serial", "cpu-parallel"]
    assert float(rows[0]["speedup"]) == 1.0
    doc = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert doc["amdahl"]["p"] > 0 and len(doc["points"]) == 2
    assert "Amdahl" in proc.stdout


def test_a_sweep_measures_each_backend_and_batch_once(tmp_path):
    """cpu-serial given twice was measured twice, the second with a "speedup" over the first."""
    proc = layerlab("sweep", "quadrant", "--archs", "cpu-serial,cpu-serial", "--batch", "32,32", "--steps", "2",
                    "--repeats", "2", "--warmup", "1", "--out", tmp_path / "out", "--store", tmp_path / "r.sqlite",
                    timeout=300)
    assert proc.returncode == 0, proc.stderr
    points = json.loads((tmp_path / "out" / "sweep.json").read_text())["points"]
    assert [(p["arch"], p["batch"]) for p in points] == [("cpu-serial", 32)]
    from nncore.store import Store

    (run,) = Store(tmp_path / "r.sqlite").runs()
    assert run["threads"] == 1  # the threads it ran on (it recorded none)


@pytest.mark.parametrize("args,needle", [(["--archs", "cpu-serial,gpu"], "unknown arch 'gpu'"),
                                         (["--archs", " , "], "--archs: give one or more of cpu-serial"),
                                         (["--batch", "0"], "--batch entry 0 must be >= 1"),
                                         (["--batch", "64,-5"], "--batch entry -5 must be >= 1"),
                                         (["--filters", "8,16"], "--filters 8,16: the network has no Conv2D")])
def test_sweep_bad_arguments_exit_2(args, needle):
    proc = layerlab("sweep", "quadrant", *args)
    assert proc.returncode == 2
    one_line_error(proc, needle)


@pytest.mark.parametrize("tol,needle", [("-1", "--tol: -1 must be >= 0"), ("nan", "--tol: 'nan' must be a finite")])
def test_lockstep_refuses_a_negative_or_nonfinite_tolerance(tol, needle):
    """A negative tolerance called equal steps different (exit 1): it is a bad argument (exit 2)."""
    proc = layerlab("lockstep", "quadrant", "--steps", "2", "--tol", tol)
    assert proc.returncode == 2
    one_line_error(proc, needle)


def test_lockstep_cli_agrees():
    proc = layerlab("lockstep", "quadrant", "--steps", "5", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "0 of 5 steps beyond" in proc.stdout


def test_lockstep_wants_two_archs_before_it_asks_for_any(tmp_path):
    """Three archs with cuda among them were refused as "cuda is unavailable" (exit 4), not as a bad argument."""
    from tests.cli.test_hostile import in_process

    proc = in_process("lockstep", "quadrant", "--archs", "cpu-serial,cpu-parallel,cuda")
    assert proc.returncode == 2
    one_line_error(proc, "give exactly two archs")


@pytest.mark.parametrize("command", ["lockstep", "sweep"])
def test_a_network_without_model_input_takes_its_datas_shape(tmp_path, command):
    """A config may leave model.input out (the data gives it), but lockstep and sweep refused such a config
    ("needs model.input"), so a CSV table's network could not be checked or swept. The table's width is the
    input: 5 feature columns here, one of them categorical with 3 values, so 4 + 3 = 7 inputs."""
    rng = np.random.default_rng(4)
    rows = [f"{a:.3f},{b:.3f},{c:.3f},{d:.3f},{'pqr'[k]},{'xy'[int(a > b)]}"
            for (a, b, c, d), k in zip(rng.random((60, 4)), rng.integers(0, 3, 60))]
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "net.toml").write_text('[model]\nloss = "cross_entropy"\nlayers = [{ type = "Linear", '
                                       'out_features = 3 }, { type = "ReLU" }, { type = "Linear", out_features = 2 }]'
                                       '\n[data]\npath = "t.csv"\n')
    args = (["--steps", "3"] if command == "lockstep" else
            ["--archs", "cpu-serial", "--batch", "8", "--steps", "1", "--repeats", "1", "--store",
             tmp_path / "s.sqlite", "--out", tmp_path / "out"])
    proc = layerlab(command, tmp_path / "net.toml", *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    if command == "lockstep":
        assert "0 of 3 steps beyond" in proc.stdout
    else:
        from nncore.store import Store

        doc = json.loads((tmp_path / "out" / "sweep.json").read_text())
        assert len(doc["points"]) == 1 and doc["points"][0]["samples_per_s"] > 0
        store = Store(tmp_path / "s.sqlite")
        (run,) = store.runs()
        assert store.run(run["id"])["config"]["model"]["input"] == [7]  # the network swept, as recorded


def test_sigkill_while_checkpointing_leaves_a_loadable_checkpoint(tmp_path):
    """Kill -9 a run that checkpoints every step, at moments spread over its writes; every time, the
    checkpoint on disk loads, and the run resumes from it to the end."""
    from nncore import checkpoint as ckpt

    path = tmp_path / "run.ckpt.npz"
    rng = np.random.default_rng(0)
    steps_seen = []
    for _ in range(4):
        args = ["train", "quadrant", "--epochs", "50", "--checkpoint", str(path), "--checkpoint-every", "1",
                "--quiet"]
        if path.exists():
            args += ["--resume", str(path)]
        proc = subprocess.Popen([sys.executable, "-m", "nncore.cli", *args], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        written = path.stat().st_mtime_ns if path.exists() else None
        deadline = time.time() + 60
        while time.time() < deadline and (not path.exists() or path.stat().st_mtime_ns == written):
            time.sleep(0.02)  # until this run has written its first checkpoint
        time.sleep(float(rng.uniform(0.05, 0.5)))
        proc.kill()
        proc.wait(timeout=30)
        state = ckpt.load(path)  # raises if the file were torn
        steps_seen.append(state["position"].step)
    assert steps_seen == sorted(steps_seen) and steps_seen[-1] > steps_seen[0]  # each run went on from the last
    proc = layerlab("train", "quadrant", "--epochs", "50", "--resume", path, "--quiet", timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_checkpoint_flags_are_checked():
    proc = layerlab("train", "quadrant", "--checkpoint-every", "5")
    assert proc.returncode == 2
    one_line_error(proc, "--checkpoint-every needs --checkpoint FILE")
    proc = layerlab("train", "quadrant", "--checkpoint", "/nonexistent/dir/c.npz", "--checkpoint-every", "5")
    assert proc.returncode == 2
    one_line_error(proc, "--checkpoint /nonexistent/dir/c.npz: its directory does not exist")


@pytest.mark.parametrize("command, canonical, other, value", [
    (["train", "quadrant"], "--batch-size", "--batch", "48"),
    (["lockstep", "quadrant"], "--batch-size", "--batch", "48"),
    (["bench"], "--batch", "--batch-size", "16,48"),
    (["sweep", "quadrant"], "--batch", "--batch-size", "16,48"),
    (["sweep", "quadrant"], "--archs", "--arch", "cpu-serial"),
    (["lockstep", "quadrant"], "--archs", "--arch", "cpu-serial,cpu-parallel"),
])
def test_either_spelling_of_an_option_is_taken_and_help_shows_one(command, canonical, other, value, capsys):
    """--batch and --batch-size (and --arch, --archs where a list is taken) mean the same wherever either is an
    option; --help names only the canonical one."""
    from nncore import cli

    assert vars(cli._parser().parse_args([*command, other, value])) == \
        vars(cli._parser().parse_args([*command, canonical, value]))
    with pytest.raises(SystemExit):
        cli._parser().parse_args([command[0], "--help"])
    shown = capsys.readouterr().out
    assert f"{canonical} " in shown and f"{other} " not in shown and f"{other}," not in shown


def test_train_takes_batch_as_batch_size(tmp_path):
    proc = layerlab("train", "quadrant", "--epochs", "1", "--batch", "40", "--no-store", "--jsonl", "-")
    assert proc.returncode == 0, proc.stderr
    started = json.loads(proc.stdout.splitlines()[0])
    assert started["config"]["train"]["batch_size"] == 40 and started["steps_per_epoch"] == 40  # 1600 samples / 40


def test_sweep_out_in_a_missing_directory_is_refused_and_a_bad_layer_before_the_progress_bar(tmp_path, capsys):
    # --out made a whole tree (/nonexistent/d) and exited 0; a bad layer was reported on the progress bar's line.
    from nncore import cli

    assert cli.main(["sweep", "quadrant", "--batch", "32", "--no-store", "--out", str(tmp_path / "no" / "d")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"no directory {tmp_path / 'no'}" in err, err
    assert not (tmp_path / "no").exists()
    bad = tmp_path / "bad.toml"
    bad.write_text('[model]\ninput = 2\nloss = "cross_entropy"\nlayers = [{type = "Linear", out_features = 4}, '
                   '{type = "Softplus"}]\n')
    assert cli.main(["sweep", str(bad), "--batch", "32", "--no-store", "--out", str(tmp_path / "o")]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("layerlab: error: layer 1: unknown type 'Softplus'"), captured.err
    assert "sweep [" not in captured.err + captured.out and not (tmp_path / "o").exists()


def test_an_unknown_config_name_lists_the_presets(capsys):
    from nncore import cli
    from nncore.config import CONFIG_DIR

    assert cli.main(["train", "nosuchpreset", "--no-store"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nosuchpreset: no such file, nor a preset (" in err, err
    assert all(c.stem in err for c in CONFIG_DIR.glob("*.toml"))


def test_more_threads_than_cores_is_noted_once(monkeypatch, capsys):
    from nncore import cli, runtime

    monkeypatch.setattr(runtime, "cpu_count", lambda: 2)
    assert cli.main(["train", "quadrant", "--threads", "9", "--epochs", "1", "--no-store",
                     "--arch", "cpu-parallel"]) == 0
    err = capsys.readouterr().err
    assert err.count("9 threads on the 2 cores") == 1, err
    assert cli.main(["train", "quadrant", "--threads", "2", "--epochs", "1", "--no-store",
                     "--arch", "cpu-parallel"]) == 0
    assert "threads on the" not in capsys.readouterr().err
    # cpu-serial refuses more than one thread: its one-line error alone, no note before it
    assert cli.main(["train", "quadrant", "--threads", "9", "--no-store", "--arch", "cpu-serial"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not fit cpu-serial" in err, err


@pytest.mark.parametrize("args", [("train", "quadrant", "--lr", "nan"), ("bench", "--steps", "x"),
                                  ("sweep", "quadrant", "--batch", "-3")])
def test_a_subcommands_argument_error_has_the_one_prefix(args):
    # argparse would prefix a subcommand's own errors with "layerlab train:" etc.
    proc = layerlab(*args)
    assert proc.returncode == 2
    one_line_error(proc, "layerlab: error: ")
    assert proc.stderr.startswith("layerlab: error: "), proc.stderr


def test_a_batch_larger_than_the_training_set_is_pointed_out():
    """quadrant has 1,600 training samples: a batch of 5,000 trains one step an epoch on all of them, which the
    run's first lines say; a batch that fits gets no such note."""
    from nncore.report import batch_note

    proc = layerlab("train", "quadrant", "--epochs", "1", "--batch-size", "5000", "--arch", "cpu-serial")
    assert proc.returncode == 0, proc.stderr
    head = proc.stdout.splitlines()[:2]
    assert "1 step per epoch" in head[0], head
    assert head[1] == ("note: train.batch_size 5,000 exceeds the 1,600 training samples: each epoch is one step on "
                       "all 1,600")
    assert proc.stdout.splitlines()[-1].startswith("done: 1 epoch, 1 step, test acc"), proc.stdout
    assert batch_note({"train": {"batch_size": 1600}}, 1600) is None
    assert batch_note({"train": {"batch_size": 1601}}, 1600) is not None
    proc = layerlab("train", "quadrant", "--epochs", "1", "--batch-size", "64", "--arch", "cpu-serial")
    assert proc.returncode == 0 and "note:" not in proc.stdout and "25 steps per epoch" in proc.stdout


def _sweep_interrupted(tmp_path, batches: str, steps: str, at: bytes, sig=signal.SIGINT) -> tuple:
    """A quadrant sweep on cpu-serial, sent ``sig`` once its progress line shows ``at``; (process, stdout bytes,
    stderr text) after it ends."""
    import threading

    proc = subprocess.Popen([sys.executable, "-m", "nncore.cli", "sweep", "quadrant", "--archs", "cpu-serial",
                             "--batch", batches, "--steps", steps, "--repeats", "3", "--warmup", "1",
                             "--out", str(tmp_path / "out"), "--store", str(tmp_path / "r.sqlite")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = bytearray()
    reader = threading.Thread(target=lambda: [err.extend(b) for b in iter(lambda: os.read(proc.stderr.fileno(),
                                                                                         4096), b"")])
    reader.start()
    deadline = time.monotonic() + 240
    while at not in err and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert at in err, err.decode()
    proc.send_signal(sig)
    proc.wait(timeout=120)
    reader.join(10)
    return proc, proc.stdout.read(), err.decode()


@pytest.mark.parametrize("sig,code,said", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "SIGTERM received"),
                                           (signal.SIGHUP, 129, "SIGHUP received")])
def test_a_ctrl_c_during_a_sweep_keeps_the_points_measured(tmp_path, sig, code, said):
    """Ctrl-C ended a sweep with a traceback-free "interrupted" and nothing kept of the points it had measured;
    now they are reported, written and recorded (as a stopped sweep), and the exit code is 130. SIGTERM and
    SIGHUP the same, exit 143 and 129 (they ended it at once, nothing written or recorded)."""
    proc, out, text = _sweep_interrupted(tmp_path, "16,24,32,40,48,56", "1500", b" 2/6 ", sig)  # the third point
    assert proc.returncode == code and "Traceback" not in text, text
    assert f"{said}: the sweep stopped after 2 of 6 points" in text, text
    doc = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert [p["batch"] for p in doc["points"]] == [16, 24] and doc["stopped"] == {"points": 2, "of": 6}
    assert "16" in out.decode() and doc["amdahl"] is None
    from nncore.store import Store

    store = Store(tmp_path / "r.sqlite")
    (run,) = store.runs()
    assert run["status"] == "stopped" and run["kind"] == "sweep"
    assert [p["batch"] for p in store.run(run["id"])["points"]] == [16, 24]


def test_a_ctrl_c_during_a_sweeps_first_point_says_so_on_a_line_of_its_own(tmp_path):
    """Ctrl-C before a sweep's first point ends keeps nothing (exit 130, no files); "layerlab: interrupted" was
    printed at the end of the open progress line, "sweep [----] 0/2 ...layerlab: interrupted"."""
    proc, _, text = _sweep_interrupted(tmp_path, "16,24", "3000", b" 0/2 ")  # the first point under way
    assert proc.returncode == 130 and "Traceback" not in text, text
    assert "layerlab: interrupted" in text.replace("\r", "\n").splitlines(), text
    assert not (tmp_path / "out" / "sweep.json").exists()


@pytest.mark.parametrize("command", [[], ["train"], ["sweep"], ["bench"], ["lockstep"], ["runs"], ["runs", "list"],
                                     ["runs", "export"], ["archs"]])
def test_help_fits_80_columns_and_breaks_lines_at_spaces_only(command, capsys, monkeypatch):
    """At 80 columns sweep's "(default: cpu-serial,cpu-parallel)" was broken after "cpu-", and the exit codes
    (109 columns) and `runs list`'s usage (83) ran past the edge; every line now fits, wrapped at spaces."""
    import re

    from nncore import cli

    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit):
        cli._parser().parse_args([*command, "--help"])
    shown = capsys.readouterr().out
    assert not [line for line in shown.splitlines() if re.search(r"[a-z]-$", line) or len(line) > 80], shown
    assert command != ["sweep"] or "cpu-serial,cpu-parallel)" in shown


def test_the_apps_usage_fits_80_columns():
    from tui.launch import USAGE

    assert max(len(line) for line in USAGE.splitlines()) <= 80
