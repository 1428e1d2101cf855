"""``layerlab sweep`` and ``layerlab lockstep``: run the grid, derive the figures, write CSV and JSON, report.

The grid is archs x thread counts (CPU) x batch sizes x filter counts; every point is one
:func:`nncore.bench.bench_layerlab` measurement (warm-up excluded, median of repeats) of the config's network.
"""
from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

from . import analysis, bench
from .errors import LayerlabError
from .fileio import write_or_rescue
from .network import check_batch


COLUMNS = ["arch", "threads", "batch", "filters", "samples_per_s", "ms_per_step", "epoch_s", "gflops", "speedup",
           "efficiency", "karp_flatt", "launches"]


def count_launches(net, ws, opt) -> int:
    """Kernel launches of one training step (batch gather included), counted by wrapping every kernel."""
    import importlib
    import pkgutil

    from . import kernels
    from .runtime import ti

    from . import layers

    count = [1]  # the batch gather, not part of the step below
    patched = []

    def wrap(owner, name, fn):
        def wrapped(*a, _fn=fn, **k):
            count[0] += 1
            return _fn(*a, **k)
        patched.append((owner, name, fn))
        setattr(owner, name, wrapped)

    # Kernels are reached through their modules, and the activations through class attributes.
    for info in pkgutil.iter_modules(kernels.__path__):
        mod = importlib.import_module(f"{kernels.__name__}.{info.name}")
        for name, fn in list(vars(mod).items()):
            if callable(fn) and hasattr(fn, "_primal"):
                wrap(mod, name, fn)
    for cls in layers._Activation.__subclasses__():
        for name in ("_forward", "_backward"):
            wrap(cls, name, vars(cls)[name])
    nd_cls = type(ws.x)
    orig_fill = nd_cls.fill
    vec_cls = type(ti.Vector.ndarray(16, ti.f32, shape=(1,)))
    orig_vfill = vec_cls.fill

    def fill(self, v, _orig=None):
        count[0] += 1
        return (orig_vfill if isinstance(self, vec_cls) else orig_fill)(self, v)

    nd_cls.fill = vec_cls.fill = fill
    try:
        net.train_step(ws, opt)
    finally:
        nd_cls.fill, vec_cls.fill = orig_fill, orig_vfill
        for mod, name, fn in patched:
            setattr(mod, name, fn)
    return count[0]


def threads_used(points: list[dict]) -> int | None:
    """The most threads any of a sweep's points ran on (what the run store lists for the sweep); None for none:
    a sweep of cpu-serial alone ran on one thread whatever the thread counts asked for."""
    return max((p.get("threads") or 0 for p in points), default=0) or None


class Stopped(list):
    """The points a sweep measured before it was stopped (``run_sweep``): a list of them, in the grid's order,
    with how many the whole sweep had (``of``)."""

    def __init__(self, points, of: int, error: LayerlabError | None = None):
        super().__init__(points)
        self.of = of
        self.error = error  # what refused the next point, where that (not a stop) ended the sweep


def check_grid(model: dict, batches: list[int], filters: list) -> None:
    """Every batch size at every filter count one the buffers can index: refused before any point is measured."""
    for f in filters:
        for b in batches:
            check_batch(bench.with_filters(model, f), b)


def run_sweep(model: dict, archs: list[str], batches: list[int], filters: list, threads: list, steps: int,
              repeats: int, warmup: int, progress=None, should_stop=None) -> list[analysis.SweepPoint]:
    """Measure every point of the grid. ``should_stop()`` is asked before each point; where it says yes, or a
    Ctrl-C (KeyboardInterrupt) comes during a point, the sweep ends there and returns the points measured so far
    as ``Stopped`` (a point cut short is dropped; a Ctrl-C before any point is measured is raised as it came)."""
    grid = [(a, t, b, f) for a in archs for t in (threads if a == "cpu-parallel" else [None])
            for f in filters for b in batches]
    check_grid(model, batches, filters)
    # Measured point by point with every arch of one (filters, batch) back to back, so that the speedups
    # compare the same minutes of a shared machine; reported in the grid's order.
    order = sorted(range(len(grid)), key=lambda k: (filters.index(grid[k][3]), batches.index(grid[k][2]), k))
    points = [None] * len(grid)
    stopped, error = False, None
    for i, k in enumerate(order):
        arch, thr, batch, filt = grid[k]
        try:
            if should_stop is not None and should_stop():
                stopped = True
                break
            if progress:
                progress(i, len(grid), f"{arch}{'' if thr is None else f' x{thr}'} batch {batch}"
                         + (f" filters {filt}" if filt else ""))
            res, _ = bench.bench_layerlab("sweep", arch, batch, steps, repeats, warmup, thr,
                                          model=bench.with_filters(model, filt))
            from .network import Sequential
            from .optim import SGD
            net = Sequential.from_spec(bench.with_filters(model, filt))
            launches = count_launches(net, net.workspace(batch), SGD(net.n_params, lr=0.01))
            points[k] = analysis.SweepPoint(res.arch, res.threads or 0, batch, filt, res.samples_per_s,
                                            res.ms_per_step, res.gflops, res.layers, launches)
        except KeyboardInterrupt:
            if all(p is None for p in points):  # nothing measured yet: nothing to keep
                raise
            stopped = True
            break
        except LayerlabError as exc:  # a point refused (its memory, say): the points measured are kept
            if all(p is None for p in points):
                raise
            stopped, error = True, exc
            break
    done = analysis.derive([p for p in points if p is not None])
    if stopped:
        return Stopped(done, len(grid), error)
    if progress:
        progress(len(grid), len(grid), "done")
    return done


def write_results(points, out_dir: Path, extra: dict) -> None:
    """sweep.csv and sweep.json in ``out_dir``, each written atomically (saved elsewhere, and named, if not)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    table = io.StringIO()
    w = csv.DictWriter(table, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for p in points:
        w.writerow(p.to_dict())
    doc = json.dumps({**extra, "points": [p.to_dict() for p in points]}, indent=1, default=str) + "\n"
    write_or_rescue(out_dir / "sweep.csv", lambda fh: fh.write(table.getvalue().encode()), "the sweep table")
    write_or_rescue(out_dir / "sweep.json", lambda fh: fh.write(doc.encode()), "the sweep results")


def _fmt(v, spec):
    return "—" if v is None else format(v, spec)


def report(points, amdahl: analysis.AmdahlView | None, out=sys.stdout) -> None:
    print(f"{'arch':<13} {'thr':>3} {'batch':>6} {'filters':>7} {'samples/s':>11} {'s/epoch':>8} {'GFLOP/s':>8} "
          f"{'speedup':>8} {'effic.':>7} {'K-F e':>7} {'launch':>6}", file=out)
    for p in points:
        print(f"{p.arch:<13} {p.threads:>3} {p.batch:>6} {_fmt(p.filters, ''):>7} {p.samples_per_s:>11,.0f} "
              f"{p.epoch_s:>8.2f} {p.gflops:>8.2f} {_fmt(p.speedup, '.2f'):>8} {_fmt(p.efficiency, '.2f'):>7} "
              f"{_fmt(p.karp_flatt, '.3f'):>7} {p.launches:>6}", file=out)
    print(f"s/epoch: for an epoch of {analysis.EPOCH_SAMPLES:,} samples (MNIST's); effic.: speedup per thread;\n"
          "K-F e: the Karp-Flatt serial fraction; launch: kernel launches a step", file=out)
    if any(p.karp_flatt is not None and p.karp_flatt > 1 for p in points):
        print(analysis.KF_ABOVE_1, file=out)
    if amdahl is not None:
        a = amdahl
        print(f"\nAmdahl (cpu-serial profile at {a.at()}): kernels {a.kernel_ms:.2f} ms, host and launches "
              f"{a.host_ms:.2f} ms per step, so p = {a.p:.3f}", file=out)
        print(f"  bound for {a.threads} threads: {a.bound_threads:.2f}x; for a GPU (s -> inf): {a.bound_gpu:.1f}x",
              file=out)
        for arch, s in a.measured.items():
            print(f"  measured {arch}: {s:.2f}x", file=out)
        print("  share of the serial step: " + ", ".join(f"{n} {100 * s:.1f}%" for n, s in a.layer_shares), file=out)


def _progress(i, n, what):
    if not sys.stderr.isatty():  # a log: a line a point, no bar redrawn in place
        print(f"sweep {i}/{n} {what}", file=sys.stderr, flush=True)
        return
    width = 24
    done = int(width * i / max(n, 1))
    sys.stderr.write(f"\rsweep [{'#' * done}{'-' * (width - done)}] {i}/{n} {what:<40}")
    if i == n:
        sys.stderr.write("\n")
    sys.stderr.flush()
