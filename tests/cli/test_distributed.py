"""Data parallelism over MPI ranks: N ranks with global batch B end where 1 process with batch B ends.

The ranks run as a user runs them (`layerlab train ... --ranks N`, which starts mpiexec), oversubscribing this
machine's cores where N exceeds them. Reference runs are the plain single-process command.
"""
import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, strategies as st

from nncore import distributed
from nncore.errors import ConfigError
from tests.cli.test_cli import layerlab, one_line_error


def _mpi_missing() -> str | None:
    # mpi4py is loaded in a child process: importing its MPI module here would initialise MPI in the test
    # process, and Open MPI's mpiexec, started from a process that is an MPI singleton, exits 1 silently.
    probe = subprocess.run([sys.executable, "-c", "from nncore import distributed; distributed.load_mpi()"],
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        return probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else "mpi4py does not load"
    return distributed.mpi_missing()


needs_mpi = pytest.mark.skipif(_mpi_missing() is not None, reason=f"MPI is not installed here: {_mpi_missing()}")

# 297 samples in batches of 37: eight full batches and a last one of a single sample, so with two or more
# ranks the last step has ranks with nothing to contribute.
SMALL = ["--limit", "297", "--batch-size", "37", "--quiet"]


@given(st.integers(1, 600), st.integers(1, 9))
def test_shards_cover_every_batch_once_and_evenly(batch, size):
    parts = [distributed.shard(batch, r, size) for r in range(size)]
    assert parts[0][0] == 0 and sum(n for _, n in parts) == batch
    for (lo, n), (lo2, _) in zip(parts, parts[1:]):
        assert lo + n == lo2  # contiguous, in rank order
    assert max(n for _, n in parts) - min(n for _, n in parts) <= 1
    assert parts[0][1] >= 1  # rank 0 (which reports the loss) always has a sample


def test_gradient_staging_copies_exactly_and_directly(arch):
    """The host round trip of the all-reduce: bit-exact both ways, and by the direct route (no Taichi kernel
    over a temporary copy) on every backend here."""
    from nncore.runtime import ti

    rng = np.random.default_rng(7)
    values = rng.standard_normal(1237).astype(np.float32)
    arr = ti.ndarray(ti.f32, shape=(1237,))
    arr.from_numpy(values)
    stage = distributed._Staging(arr, np.zeros(1238, np.float32))
    assert stage.direct
    stage.down()
    np.testing.assert_array_equal(stage.host[:1237], values)
    assert stage.host[1237] == 0  # the stop flag's slot is left alone
    stage.host[:1237] = -3 * values
    stage.up()
    np.testing.assert_array_equal(arr.to_numpy(), -3 * values)


def test_missing_mpi4py_is_a_config_error_with_the_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # makes `from mpi4py import MPI` raise ImportError
    with pytest.raises(ConfigError, match=r"layerlab\[mpi\]"):
        distributed.load_mpi()


def _weights(path):
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


def _max_diff(a, b):
    assert a.keys() == b.keys()
    return max(float(np.abs(a[k].astype(np.float64) - b[k]).max()) for k in a)


def _jsonl(proc):
    return [json.loads(line) for line in proc.stdout.splitlines()]


@needs_mpi
@pytest.mark.parametrize("config,extra", [("net-1h", ["--lr", "0.5", "--momentum", "0.9"]),
                                          ("cnn", ["--momentum", "0.5"])])
def test_two_ranks_end_with_one_ranks_weights(tmp_path, config, extra):
    one, two = tmp_path / "one.npz", tmp_path / "two.npz"
    args = ["train", config, "--arch", "cpu-serial", "--epochs", "2", *SMALL, *extra]
    ref = layerlab(*args, "--save-weights", one, timeout=300)
    assert ref.returncode == 0, ref.stderr
    proc = layerlab(*args, "--save-weights", two, "--ranks", "2", timeout=300)
    assert proc.returncode == 0, proc.stderr
    w1, w2 = _weights(one), _weights(two)
    assert any(np.abs(w).max() > 0 for w in w2.values())
    assert _max_diff(w1, w2) < 1e-5


@needs_mpi
def test_three_oversubscribed_ranks_with_adam_match_one(tmp_path):
    args = ["train", "quadrant", "--arch", "cpu-serial", "--epochs", "3", "--optimizer", "adam", "--lr", "0.01",
            "--batch-size", "50", "--limit", "331", "--quiet"]
    ref = layerlab(*args, "--save-weights", tmp_path / "one.npz", timeout=300)
    proc = layerlab(*args, "--save-weights", tmp_path / "three.npz", "--ranks", "3", timeout=300)
    assert ref.returncode == 0 and proc.returncode == 0, proc.stderr
    assert _max_diff(_weights(tmp_path / "one.npz"), _weights(tmp_path / "three.npz")) < 1e-5


@needs_mpi
def test_rank_zero_reports_every_rank_and_the_communication_share(tmp_path):
    proc = layerlab("train", "quadrant", "--arch", "cpu-serial", "--epochs", "2", "--limit", "301",
                    "--batch-size", "40", "--jsonl", "-", "--ranks", "2", timeout=300)
    assert proc.returncode == 0, proc.stderr
    events = _jsonl(proc)  # only rank 0 writes: a second rank's lines would break the sequence below
    assert [e["event"] for e in events if e["event"] != "step"] == \
        ["run_started", "epoch_end", "epoch_end", "run_finished"]
    start = events[0]
    assert start["ranks"] == 2 and len(start["rank_devices"]) == 2
    for end in (e for e in events if e["event"] == "epoch_end"):
        ranks = end["ranks"]
        assert [r["rank"] for r in ranks] == [0, 1]
        assert sum(r["samples"] for r in ranks) == start["train_samples"]  # every sample once, on one rank
        assert abs(ranks[0]["samples"] - ranks[1]["samples"]) <= start["steps_per_epoch"]
        assert all(0 < r["comm_s"] < r["epoch_s"] for r in ranks)
        assert 0 < end["comm_share"] < 1
        assert any(t["name"] == "allreduce" and t["fwd_ms"] > 0 for t in end["timings"])
    steps = [e for e in events if e["event"] == "step"]
    assert steps and all(0 <= e["comm_share"] < 1 for e in steps)


@needs_mpi
def test_a_distributed_run_resumes_from_its_checkpoint(tmp_path):
    """Checkpoint mid-epoch under two ranks (rank 0 writes), resume under two ranks: the same weights as one
    uninterrupted single-process run."""
    ck = tmp_path / "run.ckpt.npz"
    base = ["train", "net-1h", "--arch", "cpu-serial", "--lr", "0.5", "--momentum", "0.9", *SMALL]
    ref = layerlab(*base, "--epochs", "2", "--save-weights", tmp_path / "ref.npz", timeout=300)
    assert ref.returncode == 0, ref.stderr
    # 9 steps an epoch, a checkpoint every 4: the last one written is step 8, one step before the epoch ends.
    first = layerlab(*base, "--epochs", "1", "--checkpoint", ck, "--checkpoint-every", "4", "--ranks", "2",
                     timeout=300)
    assert first.returncode == 0, first.stderr
    second = layerlab(*base, "--epochs", "2", "--resume", ck, "--save-weights", tmp_path / "resumed.npz",
                      "--ranks", "2", timeout=300)
    assert second.returncode == 0, second.stderr
    assert _max_diff(_weights(tmp_path / "ref.npz"), _weights(tmp_path / "resumed.npz")) < 1e-5


@needs_mpi
@pytest.mark.parametrize("args,code,needle", [
    (["--batch-size", "1"], 2, "train.batch_size 1 is smaller than the 2 ranks"),
    (["--lr", "1e38", "--momentum", "0.99"], 3, "diverged"),
    (["--data", "/no/such/dir"], 2, "/no/such/dir"),
    (["--resume", "/no/such/run.ckpt.npz"], 2, "/no/such/run.ckpt.npz"),  # read by every rank
])
def test_failures_end_every_rank_with_one_line_and_the_exit_code(args, code, needle):
    proc = layerlab("train", "quadrant", "--arch", "cpu-serial", "--epochs", "3", *args, "--ranks", "2",
                    timeout=300)
    assert proc.returncode == code, proc.stderr
    one_line_error(proc, needle)  # said once, by rank 0, though every rank saw it


@needs_mpi
def test_ctrl_c_stops_every_rank_after_the_same_step_and_keeps_stdout_json(tmp_path):
    """Ctrl-C from a terminal reaches the whole foreground group: the launcher, mpiexec and the ranks."""
    import os
    import signal
    import subprocess

    weights = tmp_path / "w.npz"
    proc = subprocess.Popen([sys.executable, "-m", "nncore.cli", "train", "net-1h", "--arch", "cpu-serial",
                             "--epochs", "50", "--jsonl", "-", "--save-weights", str(weights), "--ranks", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if '"event":"step"' in line:
            break
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    lines += out.splitlines(keepends=True)
    assert proc.returncode == 130, err
    events = [json.loads(line) for line in lines]  # mpiexec's own notes went to stderr
    assert events[-1]["event"] == "run_finished" and events[-1]["stopped"]
    assert weights.exists()  # rank 0 wrote what was asked for


def test_ranks_must_be_positive():
    proc = layerlab("train", "quadrant", "--ranks", "0")
    assert proc.returncode == 2
    one_line_error(proc, "--ranks: 0 must be at least 1")


@needs_mpi
@pytest.mark.gpu
def test_two_ranks_on_cuda_end_with_one_ranks_weights(tmp_path):
    args = ["train", "cnn", "--arch", "cuda", "--epochs", "2", *SMALL, "--momentum", "0.5"]
    ref = layerlab(*args, "--save-weights", tmp_path / "one.npz", timeout=300)
    proc = layerlab(*args, "--save-weights", tmp_path / "two.npz", "--ranks", "2", "--jsonl", tmp_path / "e.jsonl",
                    timeout=300)
    assert ref.returncode == 0 and proc.returncode == 0, proc.stderr
    assert _max_diff(_weights(tmp_path / "one.npz"), _weights(tmp_path / "two.npz")) < 1e-5
    started = json.loads((tmp_path / "e.jsonl").read_text().splitlines()[0])
    assert started["arch"] == "cuda" and started["ranks"] == 2


def test_mpiexec_is_found_beside_the_interpreter(tmp_path, monkeypatch):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "mpiexec").write_text("#!/bin/sh\n")
    monkeypatch.setattr(sys, "executable", str(fake / "python"))
    assert distributed.find_mpiexec() == str(fake / "mpiexec")


@needs_mpi
def test_train_ranks_in_a_json_config_starts_the_ranks(tmp_path):
    """What the app does: a JSON config whose train.ranks is 2, run with no --ranks."""
    from nncore.config import load_config

    cfg = load_config("quadrant")
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"model": cfg.model, "data": {"limit": 200},
                                "train": {"ranks": 2, "arch": "cpu-serial", "epochs": 1, "batch_size": 32}}))
    proc = layerlab("train", path, "--jsonl", "-", timeout=300)
    assert proc.returncode == 0, proc.stderr
    started = _jsonl(proc)[0]
    assert started["ranks"] == 2 and started["config"]["train"]["ranks"] == 2


def test_a_json_config_that_is_not_an_object_is_refused(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("[1, 2]")
    proc = layerlab("train", path)
    assert proc.returncode == 2
    one_line_error(proc, "a config must be a JSON object")


@pytest.mark.parametrize("euid,preset,want", [(0, None, "1"), (0, "0", "0"), (1000, None, None)])
def test_ranks_started_as_root_may_run_open_mpi(monkeypatch, euid, preset, want):
    """As root, the mpiexec that --ranks starts gets Open MPI's two run-as-root variables (a user's own values
    kept); as anyone else, nothing is added."""
    monkeypatch.setattr(distributed.os, "geteuid", lambda: euid)
    for var in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"):
        if preset is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, preset)
    cmd, env = distributed.launch_command(2, ["train", "cnn"])
    assert cmd[1:3] == ["-n", "2"] and cmd[-1] == "--distributed" and env["LAYERLAB_RANKS"] == "2"
    assert env.get("OMPI_ALLOW_RUN_AS_ROOT") == want and env.get("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM") == want
