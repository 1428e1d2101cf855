"""Parallelism analysis: scaling sweeps, speedup and efficiency, the Amdahl bound, Karp-Flatt, lockstep agreement.

The figures are pure functions of measured timings (so they can be checked against scripted timings with known
answers); :func:`run_sweep` and :func:`lockstep` produce the timings and runs they are computed from.

Definitions: speedup S = samples/s of a point / samples/s of the cpu-serial point with the same batch size and
filter count. Parallel efficiency = S / threads (CPU points). Amdahl: from a cpu-serial profile, p is the share
of the step spent inside kernels, 1 - p the host's share (Python between launches and the launches themselves);
the bound on the speedup with s-fold faster kernels is 1 / ((1 - p) + p / s), s = the thread count for
cpu-parallel and s -> infinity for the GPU (1 / (1 - p)). Karp-Flatt serial fraction from a measured speedup S
on n threads: e = (1/S - 1/n) / (1 - 1/n).
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np

EPOCH_SAMPLES = 60_000  # "time per epoch" is for an MNIST-sized training set


def amdahl_bound(p: float, s: float) -> float:
    """Largest speedup when a share ``p`` of the time gets ``s`` times faster (s = inf: 1 / (1 - p))."""
    if not 0 <= p <= 1:
        raise ValueError(f"parallel share p {p!r} must be in [0, 1]")
    if math.isinf(s):
        return math.inf if p == 1 else 1 / (1 - p)
    return 1 / ((1 - p) + p / s)


# Said where a table shows a Karp-Flatt fraction above 1: the fraction then reads as more than all of the work.
KF_ABOVE_1 = "K-F above 1: slower than cpu-serial (a speedup under 1), not a serial share"


def karp_flatt(speedup: float, n: int) -> float | None:
    """The experimentally determined serial fraction; None for n = 1, where it is undefined."""
    if n <= 1 or speedup <= 0:
        return None
    return (1 / speedup - 1 / n) / (1 - 1 / n)


@dataclass
class SweepPoint:
    arch: str
    threads: int
    batch: int
    filters: int | None
    samples_per_s: float
    ms_per_step: float
    gflops: float
    layers: list = field(default_factory=list)  # per-part name, fwd_ms, bwd_ms, share, gflops
    launches: int = 0  # kernel launches per training step
    epoch_s: float = 0.0  # derived: EPOCH_SAMPLES / samples_per_s
    speedup: float | None = None  # derived: against cpu-serial at the same batch and filters
    efficiency: float | None = None  # derived: speedup / threads, CPU only
    karp_flatt: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def derive(points: list[SweepPoint]) -> list[SweepPoint]:
    """Fill in each point's epoch time, speedup, parallel efficiency and Karp-Flatt fraction."""
    base = {(p.batch, p.filters): p for p in points if p.arch == "cpu-serial"}
    for p in points:
        p.epoch_s = EPOCH_SAMPLES / p.samples_per_s
        ref = base.get((p.batch, p.filters))
        p.speedup = p.samples_per_s / ref.samples_per_s if ref else None
        cpu = p.arch != "cuda"
        p.efficiency = p.speedup / p.threads if (p.speedup is not None and cpu) else None
        p.karp_flatt = karp_flatt(p.speedup, p.threads) if (p.speedup is not None and cpu) else None
    return points


@dataclass
class AmdahlView:
    p: float  # share of the cpu-serial step inside kernels
    kernel_ms: float
    host_ms: float
    bound_threads: float  # for s = the cpu-parallel thread count
    threads: int
    bound_gpu: float  # for s -> infinity
    measured: dict  # arch -> measured speedup
    layer_shares: list  # (part name, share of the step)
    batch: int = 0  # the batch size of the cpu-serial point (and of the measured speedups)
    filters: int | None = None  # its filter count, where the sweep set them

    def at(self) -> str:
        """Where the profile and the measured speedups were taken: "batch 256" or "batch 256, 8 filters"."""
        return f"batch {self.batch}" + (f", {self.filters} filters" if self.filters else "")


def amdahl_view(serial: SweepPoint, launch_ms: float, threads: int, measured: dict) -> AmdahlView:
    """From a cpu-serial point: the kernel share of its step, counting each launch's host cost as serial.

    The synced profile's part times include each launch; the host's part of the step is the step time not
    covered by the parts, plus ``launch_ms`` per launch.
    """
    parts_ms = sum(l["fwd_ms"] + l["bwd_ms"] for l in serial.layers)
    host = max(serial.ms_per_step - parts_ms, 0.0) + serial.launches * launch_ms
    host = min(host, serial.ms_per_step)
    kernel = serial.ms_per_step - host
    p = kernel / serial.ms_per_step
    # Shares of the synced profile: where steps run as compute graphs, the parts' synced times (each launched from
    # Python, with a sync after it) can add up to more than the graph step they were sampled from.
    whole = max(parts_ms, serial.ms_per_step)
    shares = [(l["name"], (l["fwd_ms"] + l["bwd_ms"]) / whole) for l in serial.layers]
    return AmdahlView(p, kernel, host, amdahl_bound(p, threads), threads, amdahl_bound(p, math.inf), measured,
                      shares, serial.batch, serial.filters)


def measure_launch_ms(repeats: int = 2000) -> float:
    """Host time of one kernel launch as a training step pays it, on the current runtime, in ms (median of
    blocks): an empty kernel dispatched from a compute graph of ten where steps run as graphs (nncore.graph),
    launched from Python otherwise."""
    from . import graph
    from .kernels.loss import loss_sum
    from .runtime import sync, ti

    out, src = ti.ndarray(ti.f32, shape=(1,)), ti.ndarray(ti.f32, shape=(1,))
    per_run = 10 if graph.default_enabled() else 1
    if per_run > 1:
        calls = graph.record(lambda: [loss_sum(out, src) for _ in range(per_run)])
        compiled, values = graph.build(calls), graph._values(calls)
        run = lambda: compiled.run(values)  # noqa: E731
    else:
        run = lambda: loss_sum(out, src)  # noqa: E731
    run()
    sync()
    rates = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(repeats // (5 * per_run)):
            run()
        sync()
        rates.append((time.perf_counter() - t0) / (repeats // (5 * per_run)) / per_run)
    return 1e3 * float(np.median(rates))


# -- lockstep ---------------------------------------------------------------------------------------------------
@dataclass
class LockstepStep:
    step: int
    loss_a: float
    loss_b: float
    loss_diff: float  # |loss_a - loss_b| / max(|loss_b|, tiny)
    weight_diff: float  # largest over tensors of max|w_a - w_b| / max|w_b|
    ok: bool


def _run_steps(model: dict, arch: str, batch: int, steps: int, seed: int, lr: float) -> tuple[list, list]:
    from . import runtime
    from .network import Sequential
    from .optim import SGD

    runtime.init(arch)
    net = Sequential.from_spec(model, seed=seed)
    opt = SGD(net.n_params, lr=lr, momentum=0.9)
    rng = np.random.default_rng(seed)
    n_out = net.loss.n_classes
    ws = net.workspace(batch)
    losses, weights = [], []
    for _ in range(steps):
        ws.load(rng.random((batch, *net.input_shape), dtype=np.float32), rng.integers(0, n_out, size=batch))
        net.train_step(ws, opt)
        losses.append(ws.loss_value())
        weights.append(net.state_dict())
    return losses, weights


def lockstep(model: dict, arch_a: str, arch_b: str, steps: int = 20, batch: int = 64, seed: int = 0,
             lr: float = 0.05, tol: float = 1e-5) -> list[LockstepStep]:
    """The same seed, initial weights and batches on two archs; per step the loss and weight differences."""
    la, wa = _run_steps(model, arch_a, batch, steps, seed, lr)
    lb, wb = _run_steps(model, arch_b, batch, steps, seed, lr)
    out = []
    for i in range(steps):
        wd = max(float(np.max(np.abs(wa[i][k] - wb[i][k])) / max(float(np.max(np.abs(wb[i][k]))), 1e-30))
                 for k in wa[i])
        ld = abs(la[i] - lb[i]) / max(abs(lb[i]), 1e-30)
        out.append(LockstepStep(i + 1, la[i], lb[i], ld, wd, wd <= tol and ld <= tol))
    return out
