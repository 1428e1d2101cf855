"""`layerlab bench` and its script form, benchmarks/bench.py, as a user runs them: the JSON's numbers agree with
each other, the per-layer breakdown names the network's parts, bad options give one-line errors."""
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_cli import layerlab, one_line_error

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench.py"


def test_bench_script_json_is_consistent(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--workloads", "net-1h", "--batch", "17,33", "--steps", "3",
                           "--repeats", "3", "--warmup", "2", "--no-torch", "--json", "-", "--arch", "cpu-serial"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    assert [(r["workload"], r["batch"]) for r in results] == [("net-1h", 17), ("net-1h", 33)]
    flops = []
    for r in results:
        assert r["arch"] == "cpu-serial" and r["threads"] == 1 and r["steps"] == 3 and r["repeats"] == 3
        assert len(r["runs"]) == 3 and r["samples_per_s"] == pytest.approx(statistics.median(r["runs"]))
        assert r["ms_per_step"] == pytest.approx(1e3 * r["batch"] / r["samples_per_s"])
        assert r["compile_s"] > 0 and r["torch_samples_per_s"] is None and r["ratio"] is None
        # net-1h (Flatten, 784-1024 Linear+Sigmoid fused, 1024-10 Linear, Sigmoid): the parts, whose shares add up
        names = [t["name"] for t in r["layers"]]
        assert {"layers 1-2 (Linear+Sigmoid)", "layer 3 (Linear)", "layer 4 (Sigmoid)", "optimizer"} <= set(names)
        assert sum(t["share"] for t in r["layers"]) == pytest.approx(1.0, abs=0.02)
        flops.append(r["gflops"] * r["ms_per_step"] / r["batch"])  # FLOPs per sample: the same at both sizes
    per_sample = 2 * 784 * 1024 * 2 + 2 * 1024 * 10 * 3  # the products: forward + weight gradient (+ input grad)
    assert flops[0] == pytest.approx(flops[1], rel=1e-3)
    assert per_sample * 1e-6 < flops[0] < per_sample * 1.05e-6  # GFLOP/s * ms / sample = MFLOP per sample


@pytest.mark.parametrize("args,needle", [(["--batch", "0"], "--batch"), (["--workloads", "net-3h"], "net-3h"),
                                         (["--steps", "0"], "--steps"), (["--round-warmup", "-1"], "--round-warmup"),
                                         (["--steps", "2000000000"], "is more than 1,000,000")])
def test_bench_bad_options_are_one_line_errors(args, needle):
    proc = layerlab("bench", "--no-torch", *args)
    assert proc.returncode == 2, proc.stderr
    one_line_error(proc, needle)


def test_an_unavailable_backend_is_refused_before_the_table():
    """`bench --arch cuda` without a working GPU: exit 4 and one line, and none of the table on stdout."""
    from nncore import runtime

    cuda = {s.name: s for s in runtime.available_archs()}["cuda"]
    if cuda.available:
        pytest.skip("this machine has a working CUDA backend: nothing to refuse")
    proc = layerlab("bench", "--arch", "cuda", "--workloads", "net-1h", "--batch", "64", "--no-store")
    assert proc.returncode == 4 and proc.stdout == ""
    one_line_error(proc, "cuda is unavailable")


def test_a_recorded_bench_lists_its_rate_threads_and_device(tmp_path):
    """A bench of one point is listed with its samples/s and the threads that ran it; `runs show` names the
    device, and the stored config holds the bench's options, not the CLI's --version flag."""
    store = tmp_path / "runs.sqlite"
    proc = layerlab("bench", "--workloads", "net-1h", "--batch", "17", "--steps", "2", "--repeats", "2",
                    "--arch", "cpu-serial", "--no-torch", "--json", tmp_path / "b.json", "--store", store)
    assert proc.returncode == 0, proc.stderr
    rate = json.loads((tmp_path / "b.json").read_text())[0]["samples_per_s"]
    listed = layerlab("runs", "list", "--store", store).stdout.splitlines()[-1].split()
    assert listed[3:7] == ["bench", "net-1h", "—", "cpu-serial"] and listed[7] == "1"  # data: none; threads
    assert listed[-1] == f"{rate:,.0f}"
    shown = layerlab("runs", "show", "1", "--store", store).stdout
    assert "device unknown" not in shown and '"version"' not in shown and '"workloads": "net-1h"' in shown


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
@pytest.mark.parametrize("json_arg", [["--json", "-"], []])
def test_a_full_stdout_is_one_line_and_the_results_are_rescued(tmp_path, json_arg):
    """`bench ... > /dev/full` ended in OSError (ENOSPC), exit 1, its measurements lost; now it measures on,
    rescues the results to a file it names (in TMPDIR) and exits 2."""
    import os

    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "nncore.cli", "bench", "--workloads", "net-1h", "--batch", "8",
                               "--steps", "1", "--repeats", "1", "--warmup", "1", "--arch", "cpu-serial",
                               "--no-torch", "--no-store", *json_arg], stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=300, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert proc.returncode == 2
    one_line_error(proc, "layerlab: error: the results could not be written to stdout (No space left on device); "
                         f"saved to {tmp_path}/layerlab-bench.json.rescued-")
    (rescued,) = tmp_path.glob("layerlab-bench.json.rescued-*")
    assert proc.stderr.strip().endswith(f"{rescued} instead")
    results = json.loads(rescued.read_text())
    assert [(r["workload"], r["batch"], r["arch"], r["steps"]) for r in results] == [("net-1h", 8, "cpu-serial", 1)]
    assert results[0]["samples_per_s"] > 0


@pytest.mark.parametrize("sig,code,said", [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "SIGTERM received")])
def test_a_stopped_bench_keeps_the_points_measured(tmp_path, sig, code, said):
    """Ctrl-C, SIGTERM or SIGHUP during a benchmark ended it with none of the rows it had printed written to
    --json or recorded, and a Ctrl-C at the terminal (the whole process group) put a traceback from the PyTorch
    peer on the screen. Now the points measured are written and recorded as a stopped run, exit 128 + signal."""
    import os
    import re
    import signal
    import threading
    import time

    from nncore import bench

    store, out = tmp_path / "r.sqlite", tmp_path / "b.json"
    peer = [] if bench.torch_available() else ["--no-torch"]
    proc = subprocess.Popen([sys.executable, "-m", "nncore.cli", "bench", "--arch", "cpu-serial", "--workloads",
                             "net-1h", "--batch", "17,23,29", "--steps", "800", "--repeats", "2", "--warmup", "1",
                             "--json", str(out), "--store", str(store), *peer],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    rows = bytearray()
    reader = threading.Thread(target=lambda: [rows.extend(b) for b in iter(lambda: os.read(proc.stdout.fileno(),
                                                                                          4096), b"")])
    reader.start()
    deadline = time.monotonic() + 240
    first = re.compile(rb"^net-1h +17 ", re.M)  # the first point's row
    while not first.search(rows) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert first.search(rows) and proc.poll() is None, (rows.decode(), proc.poll())
    # Ctrl-C at a terminal reaches every process of the group, the peer too; the others reach layerlab alone.
    (os.killpg if sig == "SIGINT" else os.kill)(proc.pid, getattr(signal, sig))
    proc.wait(timeout=120)
    reader.join(10)
    err = proc.stderr.read().decode()
    assert proc.returncode == code and "Traceback" not in err, err
    assert f"{said}: the benchmark stopped after 1 of 3 points (those are kept)" in err, err
    doc = json.loads(out.read_text())
    assert [(r["workload"], r["batch"]) for r in doc] == [("net-1h", 17)] and doc[0]["samples_per_s"] > 0
    from nncore.store import Store

    (run,) = Store(store).runs()
    assert run["status"] == "stopped" and run["kind"] == "bench"
    assert [p["batch"] for p in Store(store).run(run["id"])["points"]] == [17]


def test_a_batch_the_buffers_cannot_index_is_refused_before_any_point(tmp_path):
    """`--batch 8,2147483647`: batch 8 was measured and printed, then 2**31 - 1 refused, and the row was lost (no
    JSON, nothing recorded). Now refused before anything runs."""
    from tests.cli.test_hostile import in_process

    proc = in_process("bench", "--workloads", "net-1h", "--batch", "8,2147483647", "--steps", "1", "--repeats", "1",
                      "--warmup", "1", "--no-torch", "--no-store", "--json", tmp_path / "b.json")
    assert proc.returncode == 2, proc.stderr
    one_line_error(proc, "batch size 2147483647 times the widest layer's 1,024 values")
    assert "samples/s" not in proc.stdout and not (tmp_path / "b.json").exists()


def test_a_point_refused_after_others_keeps_them(tmp_path, monkeypatch, capsys):
    """A later point refused (its memory, say) ended the benchmark with the points measured lost: they are
    written and recorded (as stopped), and the error says how many were kept."""
    import argparse

    from nncore import bench, benchcli
    from nncore.errors import ConfigError
    from nncore.store import Store

    real, calls = bench.bench_layerlab, []

    def second_refused(name, arch, batch, *args, **kwargs):
        calls.append(batch)
        if len(calls) == 2:
            raise ConfigError(f"batch size {batch} with this network needs more memory than there is")
        return real(name, arch, batch, *args, **kwargs)

    monkeypatch.setattr(bench, "bench_layerlab", second_refused)
    out, store = tmp_path / "b.json", tmp_path / "s.sqlite"
    args = argparse.Namespace(arch="cpu-serial", workloads="net-1h", batch="9,13", steps=1, repeats=1, warmup=1,
                              threads=None, no_torch=True, torch_mode="eager", json=str(out), store=str(store),
                              no_store=False, round_warmup=None)
    assert benchcli.run_bench(args) == 2
    err = capsys.readouterr().err
    assert "batch size 13 with this network needs more memory" in err and "after 1 of 2 points" in err
    rows = json.loads(out.read_text())
    assert [(r["workload"], r["batch"]) for r in rows] == [("net-1h", 9)] and rows[0]["samples_per_s"] > 0
    (run,) = Store(store).runs()
    assert run["kind"] == "bench" and run["status"] == "stopped"
