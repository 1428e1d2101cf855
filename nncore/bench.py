"""Benchmark the seed workloads on one arch, and the identical PyTorch network on the identical batches.

For each (workload, batch size): build the network, upload a fixed pool of random MNIST-shaped samples once,
run ``warmup`` steps (the first compiles the kernels: reported on its own as ``compile_s``), then ``repeats``
timed runs of ``steps`` training steps each, with a device sync before and after. samples/s is the median over
the repeats. One extra pass with a sync after every part gives the per-layer breakdown. Where PyTorch is
importable, the same network (same initial weights) trains on the same batches with the same optimizer in a
PyTorch process of its own (nncore.peer: nothing of layerlab's runs there), timed the same way, its rounds
alternated with layerlab's; the ratio is ours / PyTorch's median.
"""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from . import runtime
from .config import is_conv2d, load_config
from .kernels.data import gather_rows
from .network import STEPS_A_LAUNCH, Sequential, check_spec, launch_steps
from .optim import SGD
from .peer import layer_specs
from .runtime import ti

WORKLOADS = {  # name -> (config, overrides of the first Conv2D)
    "net-1h": ("net-1h", None), "net-1h-relu": ("net-1h-relu", None), "net-2h": ("net-2h", None),
    "cnn32": ("cnn", 32), "cnn64": ("cnn", 64), "cnn256": ("cnn", 256),
}
POOL = 4096  # samples resident on the device; batches cycle through them
# Seconds of quiet before each timed round, ours and the peer's: PyTorch's OpenMP threads keep spinning on
# every core for a while after its round, and a round started in that time shares the cores with them
# (net-1h at batch 64 on cpu-parallel ran 26% slower right after a peer round; docs/LOG.md, 2026-11-26).
QUIET_S = float(os.environ.get("LAYERLAB_BENCH_QUIET_S", "0.05"))
# Untimed steps before each timed round, ours and the peer's, after the quiet gap between them: the first
# launch after a sleep runs slower than the steps after it, more so on two threads than on one, so a round
# started cold measures the wake-up along with the steps (docs/LOG.md, "a warm-up before each round"). Rounds
# with no peer follow each other with no gap, and none.
ROUND_WARMUP = 8
# The most steps a timed run, warm-up or round warm-up may ask for (each step's batch start is kept in a list).
MAX_STEPS = 1_000_000


def check_step_counts(args, names) -> None:
    """ConfigError for the first of the options ``names`` (argparse dests) past MAX_STEPS (bench and sweep)."""
    from .errors import ConfigError

    for name in names:
        if getattr(args, name) > MAX_STEPS:
            raise ConfigError(f"--{name.replace('_', '-')} {getattr(args, name)} is more than {MAX_STEPS:,}")


@dataclass
class BenchResult:
    workload: str
    arch: str
    threads: int
    batch: int
    steps: int
    repeats: int
    compile_s: float
    samples_per_s: float
    ms_per_step: float
    gflops: float  # achieved: training FLOPs per step / time per step
    layers: list = field(default_factory=list)  # name, ms, share, gflops
    torch_samples_per_s: float | None = None  # PyTorch's median in the first mode asked for
    ratio: float | None = None  # ours / PyTorch's
    runs: list = field(default_factory=list)  # samples/s of every repeat
    torch_runs: list = field(default_factory=list)  # PyTorch's samples/s of every round, in its own process
    torch_mode: str | None = None  # the mode of torch_samples_per_s (nncore.peer.MODES)
    torch_modes: dict = field(default_factory=dict)  # mode -> {"samples_per_s", "ratio", "runs"}, every mode
    round_warmup: int = 0  # untimed steps before each timed round, both sides (with PyTorch's rounds between)

    def to_dict(self) -> dict:
        return asdict(self)


def workload_model(name: str) -> dict:
    cfg_name, filters = WORKLOADS[name]
    return with_filters(load_config(cfg_name).model, filters)


def _data(model: dict, seed: int = 0):
    """A fixed pool of random inputs in [0, 1) and labels, the same for layerlab and PyTorch."""
    rng = np.random.default_rng(seed)
    n_out = check_spec(model)[0][-1].out_shape[0]
    x = rng.random((POOL, *model["input"]), dtype=np.float32)
    y = rng.integers(0, max(n_out, 2), size=POOL).astype(np.int32)
    return x, y


def device_pool(x: np.ndarray, y: np.ndarray) -> tuple:
    """The pool on the device, as ``gather_rows`` reads it: inputs flattened (POOL, features), labels, and the
    identity order."""
    xs = ti.ndarray(ti.f32, shape=(len(x), x[0].size))
    xs.from_numpy(x.reshape(len(x), -1))
    ys, order = ti.ndarray(ti.i32, shape=(len(y),)), ti.ndarray(ti.i32, shape=(len(y),))
    ys.from_numpy(y)
    order.from_numpy(np.arange(len(y), dtype=np.int32))
    return xs, ys, order


def plain_steps(name: str, batch: int, lr: float = 0.01) -> tuple:
    """(net, step) for scripts that time a workload's steps on the current runtime: the workload's network
    (seed 0) and a function ``step(s)`` that trains one plain SGD step on the pool's batch starting at sample s."""
    model = workload_model(name)
    net = Sequential.from_spec(model, seed=0)
    opt = SGD(net.n_params, lr=lr)
    xs, ys, order = device_pool(*_data(model))
    ws = net.workspace(batch)

    def step(s: int) -> None:
        net.train_step(ws, opt, gather=lambda: gather_rows(ws.x, ws.labels, xs, ys, order, s))
    return net, step


def _flops_per_step(net: Sequential, batch: int) -> int:
    return sum(r["flops_fwd"] + r["flops_bwd"] for r in net.summary(batch))


def with_filters(model: dict, filters: int | None) -> dict:
    """The model with every Conv2D's out_channels set to ``filters`` (None: unchanged)."""
    if filters is None:
        return model
    return {**model, "layers": [dict(l, out_channels=filters) if is_conv2d(l) else l for l in model["layers"]]}


def bench_layerlab(name: str, arch: str, batch: int, steps: int, repeats: int, warmup: int,
                   threads: int | None = None, lr: float = 0.01, model: dict | None = None, peer=None,
                   round_warmup: int = ROUND_WARMUP) -> tuple[BenchResult, dict]:
    """Time ``model`` (default: the workload ``name``) on ``arch``; also returns what PyTorch needs. With a
    ``peer`` (nncore.peer.TorchPeer), PyTorch is set up on the same context and timed for a round after each
    of layerlab's; its median lands in the result, and each timed round, ours and the peer's, follows
    ``round_warmup`` untimed steps on the round's first batches."""
    info = runtime.init(arch, threads)
    round_warmup = round_warmup if peer is not None else 0
    model = model or workload_model(name)
    net = Sequential.from_spec(model, seed=0)
    net.graphs.coop_after = 0  # the step as a long run has it (cooperative where it pays), from the warm-up on
    init = net.state_dict()
    opt = SGD(net.n_params, lr=lr)
    x, y = _data(model)
    xs, ys, order = device_pool(x, y)
    ws = net.workspace(batch)
    starts = [(i * batch) % (POOL - batch + 1) for i in range(max(steps, warmup, round_warmup, STEPS_A_LAUNCH))]

    most = STEPS_A_LAUNCH  # (until a step's time is known, below)

    def run(n: int) -> None:
        # As the trainer runs them: plain steps in runs of up to ``most`` (network.launch_steps) whose batches
        # follow each other in the pool (Sequential.train_steps), a run cut where the starts wrap around.
        i = 0
        while i < n:
            s0, k = starts[i], 1
            while k < min(most, n - i) and starts[i + k] == s0 + k * batch:
                k += 1
            i += net.train_steps(ws, opt, k, deltas={"start": batch},
                                 gather=lambda j: lambda: gather_rows(ws.x, ws.labels, xs, ys, order, s0 + j * batch))  # noqa: B023

    t0 = time.perf_counter()
    run(1)
    runtime.sync()
    compile_s = time.perf_counter() - t0
    run(max(warmup - 1, 2))  # (two at least: the launch of several steps compiles its kernel here)

    def measure_most() -> int:
        runtime.sync()
        t0 = time.perf_counter()
        run(2)
        runtime.sync()
        return launch_steps((time.perf_counter() - t0) / 2)

    most = measure_most()
    for _ in range(64):  # the launch's trial against single steps runs here, as at a training run's start
        if not net.graphs.trying():
            break
        run(most)
    most = measure_most()
    ctx = {"specs": layer_specs(net), "loss": net.loss.name, "n_out": net.out_shape[0], "init": init, "x": x,
           "y": y, "starts": starts, "lr": lr}
    if peer is not None:
        peer.setup(ctx, batch, warmup)
    rates, theirs = [], []
    for _ in range(repeats):
        if peer is not None:
            time.sleep(QUIET_S)
        if round_warmup:
            run(round_warmup)
            runtime.sync()
        t0 = time.perf_counter()
        run(steps)
        runtime.sync()
        rates.append(steps * batch / (time.perf_counter() - t0))
        if peer is not None:
            theirs.append(peer.round(steps, QUIET_S, round_warmup))  # {mode: samples/s}
    rate = statistics.median(rates)
    ms = 1e3 * batch / rate
    layers = _breakdown(net, ws, opt, xs, ys, order, reps=max(3, min(steps, 10)))
    res = BenchResult(name, info.arch, info.threads, batch, steps, repeats, compile_s, rate, ms,
                      _flops_per_step(net, batch) / (ms / 1e3) / 1e9, layers, runs=rates,
                      round_warmup=round_warmup)
    for mode in peer.modes if theirs else ():
        runs = [r[mode] for r in theirs]
        med = statistics.median(runs)
        res.torch_modes[mode] = {"samples_per_s": med, "ratio": rate / med, "runs": runs}
        if res.torch_mode is None:
            res.torch_mode, res.torch_samples_per_s, res.torch_runs, res.ratio = mode, med, runs, rate / med
    return res, ctx


def _breakdown(net, ws, opt, xs, ys, order, reps: int) -> list[dict]:
    """Per-part ms with a sync after every part (the training loop's method, see docs/PERFORMANCE.md)."""
    from .train import _Timer

    timer = _Timer(net)
    gather = lambda: gather_rows(ws.x, ws.labels, xs, ys, order, 0)  # noqa: E731
    net.timed_step(ws, opt, gather)  # untimed: the part-by-part kernels compile here where the step ran fused
    for _ in range(reps):
        timer.add(net.timed_step(ws, opt, gather), ws.batch)
    return [{"name": t.name, "fwd_ms": t.fwd_ms, "bwd_ms": t.bwd_ms, "share": t.share, "gflops": t.gflops}
            for t in timer.results()]


def torch_peer(arch: str, threads: int | None, modes: tuple = ("eager",)):
    """A PyTorch process (nncore.peer) for ``arch``, timing each of ``modes``: the GPU for cuda, else the CPU
    with the thread count layerlab's backend runs (1 on cpu-serial)."""
    from .peer import TorchPeer

    if arch == "cuda":
        return TorchPeer("cuda", 1, modes)
    return TorchPeer("cpu", 1 if arch == "cpu-serial" else (threads or runtime.cpu_count()), modes)


def torch_available() -> bool:
    """Whether PyTorch is installed (found, not imported: it runs only in the peer's process)."""
    import importlib.util

    return importlib.util.find_spec("torch") is not None
