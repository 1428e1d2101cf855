"""A training step's kernel launches replayed as one Taichi compute graph.

Launching a kernel from Python costs several times a launch from a compute graph (`ti.graph`), whose launches
are issued from C++: Taichi 1.7 checks and converts every argument in Python. A net-1h step is eight launches
and a few microseconds of GPU work each at batch 64, so on CUDA the step is the launches
(``scripts/launch_cost.py`` measures both; figures in docs/LOG.md). On the CPU a step gains from a graph too
(``default_enabled``).

:class:`StepGraphs` runs a function that only launches nncore kernels (no host reads, no ``fill``): the first
time, it records the launches instead of running them (``nncore.kernels.Kernel`` and ``Sized`` hand their
calls to the recording), builds a graph with one symbolic argument per kernel argument, and caches it under the
sequence of kernels; every call records again (the Python code of the layers picks kernels and computes
offsets in microseconds) and runs the cached graph with the new arguments. So a step whose kernels change (a
last batch of another size, Adam's bias corrections, a new batch start) stays correct: other arguments are
only new values, another kernel sequence another graph.

Taichi's graph builder refuses kernels with template parameters; nncore's kernels have some (the activation
of a fused Linear, a product's mode), so a dispatch is built from the kernel Taichi compiles for the recorded
arguments, whose parameter list holds the non-template arguments only. If building fails (an argument type a
graph cannot carry), the recorded launches run one by one, as without graphs, and that sequence is not tried
again.
"""
from __future__ import annotations

import os

from . import kernels as _k
from . import runtime
from .runtime import ti

def default_enabled() -> bool:
    """Whether train steps run as compute graphs: yes, on every backend, unless the environment variable
    LAYERLAB_GRAPHS=0 turns them off. On CUDA launches dominate small steps; on the CPU a graph's launches,
    issued from C++ one after another, also keep Taichi's workers busier (2-core development VM, samples/s with
    graphs against without, same rounds: net-1h batch 64 19.9k against 14.7k on cpu-parallel and 12.1k against
    10.3k on cpu-serial; batch 256 29.2k against 26.1k; cnn64 batch 256 17.4k against 15.8k)."""
    return os.environ.get("LAYERLAB_GRAPHS", "").strip() != "0"


def record(fn) -> list:
    """The kernel calls ``fn()`` makes, as (Taichi kernel, args, in place), none of them launched."""
    if _k._recording is not None:
        raise RuntimeError("compute-graph recordings do not nest")
    calls: list = []
    _k._recording = calls
    try:
        fn()
    finally:
        _k._recording = None
    return calls


class _Slots:
    """A Taichi kernel's parameters as a graph sees them: which are templates (compile-time values, part of
    the graph's cache key) and how each other argument becomes a graph argument."""

    def __init__(self, kern):
        self.templates, self.runtime = [], []  # runtime: (position, kind) with kind "nd", "f" or "i"
        self.problem = ""
        for i, a in enumerate(kern._primal.arguments):
            anno = a.annotation
            if isinstance(anno, ti.types.template):
                self.templates.append(i)
            elif isinstance(anno, ti.types.ndarray_type.NdarrayType):
                self.runtime.append((i, "nd"))
            elif anno in (ti.f32, ti.f64):
                self.runtime.append((i, "f"))
            elif anno in (ti.i32, ti.i64, ti.u32, ti.u64):
                self.runtime.append((i, "i"))
            else:
                self.problem = f"{kern._primal.func.__name__}: a compute graph cannot carry parameter {a.name}"
        self.dtypes = {i: a.annotation for i, a in enumerate(kern._primal.arguments)}


def _slots(kern) -> _Slots:
    """The kernel's _Slots, kept on the kernel itself (made on first use)."""
    s = getattr(kern, "_graph_slots", None)
    if s is None:
        s = kern._graph_slots = _Slots(kern)
    return s


def _symbol(name: str, value, kind: str, dtype):
    if kind == "nd":
        if not isinstance(value, ti.Ndarray):
            raise TypeError(f"{name}: expected an ndarray, got {type(value).__name__}")
        vdt = ti.types.vector(value.n, value.dtype) if hasattr(value, "n") else value.dtype
        return ti.graph.Arg(ti.graph.ArgKind.NDARRAY, name, vdt, ndim=len(value.shape))
    return ti.graph.Arg(ti.graph.ArgKind.SCALAR, name, dtype)


def _compiled(kern, args, in_place: bool):
    primal = kern._primal
    with _k.compiling(in_place):
        key = primal.ensure_compiled(*args)
    return primal.compiled_kernels[key]


def _signature(calls) -> tuple:
    """What a graph is cached under: each call's kernel and its template values (other arguments are
    symbolic; their dtypes and dimensions are fixed by the kernels' annotations)."""
    return tuple((kern, in_place, tuple(args[i] for i in _slots(kern).templates))
                 for kern, args, in_place in calls)


def _values(calls) -> dict:
    """The graph's arguments for these calls, scalars converted to their parameter's type."""
    values = {}
    for c, (kern, args, _) in enumerate(calls):
        for i, kind in _slots(kern).runtime:
            v = args[i]
            values[f"{c}_{i}"] = v if kind == "nd" else (float(v) if kind == "f" else int(v))
    return values


def build(calls):
    """A compiled compute graph that launches ``calls`` in order; its arguments are named ``{call}_{arg}``."""
    builder = ti.graph.GraphBuilder()
    for c, (kern, args, in_place) in enumerate(calls):
        slots = _slots(kern)
        if slots.problem:
            raise TypeError(slots.problem)
        symbols = [_symbol(f"{c}_{i}", args[i], kind, slots.dtypes[i]) for i, kind in slots.runtime]
        builder._graph_builder.dispatch(_compiled(kern, args, in_place), symbols)
    return builder.compile()


def launch(calls) -> None:
    """Run recorded calls one by one (what the code would have done without the recording)."""
    for kern, args, in_place in calls:
        _k._launch(kern, args, in_place)


class StepGraphs:
    """Compute graphs for the launch sequences of one owner (a network), rebuilt after a runtime re-init."""

    def __init__(self, enabled: bool | None = None):
        self.enabled = default_enabled() if enabled is None else enabled
        self._graphs: dict = {}
        self._gen = runtime.generation()
        self.built = self.fallbacks = 0

    def run(self, fn) -> None:
        """``fn()``'s kernel launches, as one graph where enabled."""
        if not self.enabled:
            fn()
            return
        if self._gen != runtime.generation():
            self._graphs.clear()
            self._gen = runtime.generation()
        calls = record(fn)
        if not calls:
            return
        sig = _signature(calls)
        graph = self._graphs.get(sig)
        if graph is None:
            try:
                graph = build(calls)
                self.built += 1
            except Exception:  # noqa: BLE001 -- any failure to build: launch as without graphs, and remember
                graph = False
                self.fallbacks += 1
            self._graphs[sig] = graph
        if graph is False:
            launch(calls)
        else:
            graph.run(_values(calls))
