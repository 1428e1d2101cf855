"""The PyTorch peer of the benchmarks runs in a process of its own, with none of layerlab's threads or
affinity, on the same network, weights and batches as layerlab."""
import importlib.util
import os

import numpy as np
import pytest

from nncore import bench, runtime

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="PyTorch is not installed (the optional torch extra)")


def test_peer_process_holds_nothing_of_layerlab():
    info = runtime.init("cpu-parallel")
    cores = sorted(os.sched_getaffinity(0))
    with bench.torch_peer("cpu-parallel", None) as peer:
        res, _ = bench.bench_layerlab("net-1h", "cpu-parallel", 33, 2, 2, 1, peer=peer)
        got = peer.info()
    assert got["pid"] != os.getpid()
    assert not got["taichi"], "the peer imported Taichi"
    assert set(got["nncore"]) <= {"nncore", "nncore.peer", "nncore.interop"}, got["nncore"]
    assert got["torch_threads"] == info.threads
    assert got["process_cpus"] == cores  # the caller's main thread's set, never a pinned worker's one core
    assert all(cpus == cores for cpus in got["threads"].values()), got["threads"]
    # PyTorch's pool and a few of Python's: nowhere near layerlab's workers plus PyTorch's own
    assert len(got["threads"]) <= info.threads + 4
    assert len(res.torch_runs) == 2 and all(r > 0 for r in res.torch_runs)
    assert res.ratio == pytest.approx(res.samples_per_s / np.median(res.torch_runs))


def test_peer_trains_on_layerlab_batches_and_weights():
    """The peer's weights after its warm-up and one round (its own warm-up steps, then the timed ones) equal
    PyTorch's trained in this process on the batches bench_layerlab used (odd batch, one thread: the same
    arithmetic in the same order)."""
    import torch

    from nncore.interop import torch_from_specs, torch_loss

    with bench.torch_peer("cpu-serial", None) as peer:
        res, ctx = bench.bench_layerlab("net-1h-relu", "cpu-serial", 37, 3, 1, 2, peer=peer, round_warmup=2)
        theirs = peer.state()
    torch.set_num_threads(1)
    model = torch_from_specs(ctx["specs"])
    model.load_state_dict({k: torch.from_numpy(v) for k, v in ctx["init"].items()})
    crit, target = torch_loss(ctx["loss"])
    opt = torch.optim.SGD(model.parameters(), lr=ctx["lr"])
    x, y = torch.from_numpy(ctx["x"]), target(ctx["y"], ctx["n_out"])
    assert res.round_warmup == 2
    # the warm-up's 2 steps, then a round's 2 untimed and 3 timed, each from the start
    for s in ctx["starts"][:2] + ctx["starts"][:2] + ctx["starts"][:3]:
        opt.zero_grad(set_to_none=True)
        crit(model(x[s:s + 37]), y[s:s + 37]).backward()
        opt.step()
    for k, v in model.state_dict().items():
        assert not np.array_equal(v.numpy(), ctx["init"][k])  # it trained
        np.testing.assert_array_equal(theirs[k], v.numpy(), err_msg=k)


def test_peer_failure_is_an_error_not_a_hang():
    from nncore.peer import PeerError, TorchPeer

    with TorchPeer("cpu", 1) as peer:
        with pytest.raises(PeerError, match="PyTorch peer failed"):
            peer.call("round", 3)  # before setup: no network
        peer._proc.kill()
        peer._proc.wait()
        with pytest.raises(PeerError, match="ended"):
            peer.round(3)


def test_bench_goes_on_without_a_failing_peer(monkeypatch, capsys):
    """A PyTorch process that fails costs the comparison, not layerlab's figures: a warning, ratio None, exit 0."""
    import argparse

    from nncore import benchcli
    from nncore.peer import PeerError

    def broken(*_):
        raise PeerError("the PyTorch peer failed: ImportError: broken install")

    monkeypatch.setattr(bench, "torch_peer", broken)
    args = argparse.Namespace(arch="cpu-serial", workloads="net-1h", batch="17", steps=2, repeats=1, warmup=1,
                              threads=None, no_torch=False, torch_mode="eager", json="-", store=None, no_store=True)
    assert benchcli.run_bench(args) == 0
    out = capsys.readouterr()
    assert "warning: the PyTorch peer failed: ImportError: broken install; going on without PyTorch" in out.err
    import json

    (row,) = json.loads(out.out)
    assert row["ratio"] is None and row["samples_per_s"] > 0


def test_peer_times_every_mode_asked_for_and_ratios_each():
    """--torch-mode eager,compile: each round times both modes (each its own model from the same weights), and
    the result holds a median and a ratio for each; the first mode's is the result's headline ratio."""
    pytest.importorskip("torch._dynamo", reason="torch.compile is not available in this PyTorch")
    with bench.torch_peer("cpu-serial", None, ("eager", "compile")) as peer:
        res, _ = bench.bench_layerlab("net-1h", "cpu-serial", 19, 2, 2, 1, peer=peer)
    assert set(res.torch_modes) == {"eager", "compile"} and res.torch_mode == "eager"
    for mode, got in res.torch_modes.items():
        assert len(got["runs"]) == 2 and got["samples_per_s"] == pytest.approx(np.median(got["runs"]))
        assert got["ratio"] == pytest.approx(res.samples_per_s / got["samples_per_s"]), mode
    assert res.ratio == res.torch_modes["eager"]["ratio"]


def test_torch_mode_is_checked_before_anything_runs(capsys):
    from nncore.cli import main

    assert main(["bench", "--torch-mode", "eager,graf", "--no-store"]) == 2
    assert "--torch-mode: unknown 'graf'; choose from eager, graph, compile" in capsys.readouterr().err
    assert main(["bench", "--arch", "cpu-serial", "--torch-mode", "graph", "--no-store"]) == 2
    assert "needs --arch cuda" in capsys.readouterr().err


def _on_cpu_ns(pid: int) -> int:
    """Nanoseconds the process's threads have run on a CPU (the kernel's schedstat), all threads summed."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:  # a thread that ended meanwhile
            pass
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/schedstat") or runtime.cpu_count() < 2,
                    reason="needs Linux's per-thread schedstat and two cores (PyTorch's pool spins on a second)")
def test_the_peer_is_idle_when_our_rounds_start():
    """After a round on two threads PyTorch's OpenMP workers spin for milliseconds; bench waits QUIET_S before
    timing its own round, by which time the peer must use no CPU (else the two share the cores)."""
    import time

    with bench.torch_peer("cpu-parallel", 2) as peer:
        bench.bench_layerlab("net-1h", "cpu-parallel", 64, 2, 1, 1, peer=peer)
        pid = peer.info()["pid"]
        busy = []
        for _ in range(3):
            peer.round(20)
            time.sleep(bench.QUIET_S)
            t0, c0 = time.perf_counter(), _on_cpu_ns(pid)
            time.sleep(0.02)
            busy.append((_on_cpu_ns(pid) - c0) / ((time.perf_counter() - t0) * 1e9))
    assert max(busy) < 0.05, f"the peer used {max(busy):.0%} of a CPU after the quiet time"
