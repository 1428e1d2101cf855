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

On CUDA a fused kernel is also static (``static_default``): the ndarrays' shapes and the integers (all but
those that change every step, ``VARYING``) are compile-time constants of the kernel. Loops then have constant
bounds, which Taichi would otherwise compute in a one-thread task per loop (each task is a driver launch of its
own), and the launch has fewer arguments to pass; the graph is cached under those values too, so another batch
size compiles another kernel.

Taichi's graph builder refuses kernels with template parameters; nncore's kernels have some (the activation
of a fused Linear, a product's mode), so a dispatch is built from the kernel Taichi compiles for the recorded
arguments, whose parameter list holds the non-template arguments only. If building fails (an argument type a
graph cannot carry), the recorded launches run one by one, as without graphs, and that sequence is not tried
again.
"""
from __future__ import annotations

import inspect
import itertools
import operator
import os
import time
import types

from . import coop, cudagraph
from . import kernels as _k
from . import runtime
from .runtime import ti
from taichi.lang import impl as _impl
from taichi.lang.any_array import AnyArray

_clock = time.perf_counter  # (tests swap it)


def default_enabled() -> bool:
    """Whether train steps run as compute graphs: yes, on every backend, unless the environment variable
    LAYERLAB_GRAPHS=0 turns them off. On CUDA launches dominate small steps; on the CPU a graph's launches,
    issued from C++ one after another, also keep Taichi's workers busier (net-1h at batch 64 on cpu-parallel
    ran 1.35x as fast with graphs on the 2-core AMD EPYC VM; docs/LOG.md, 'figures moved out of
    comments')."""
    return os.environ.get("LAYERLAB_GRAPHS", "").strip() != "0"


def fused_default() -> bool:
    """Whether a step's launches are fused into one kernel (``fuse_plan``) before the graph is built: on CUDA, unless
    LAYERLAB_FUSED_STEP=0; on the CPU only with LAYERLAB_FUSED_STEP=1 (there a graph's launches cost little,
    and the CPU's in-place and pooled loops would split the kernel anyway)."""
    flag = os.environ.get("LAYERLAB_FUSED_STEP", "").strip()
    return flag == "1" if flag in ("0", "1") else not _k.on_cpu()


def static_default() -> bool:
    """Whether fused kernels fix their ndarrays' shapes and their fixed integers at compile time
    (``fuse_plan``'s ``static``): where the step is fused on CUDA, unless LAYERLAB_STATIC_BOUNDS=0; on the CPU
    only with LAYERLAB_STATIC_BOUNDS=1. A loop whose bounds are constants needs no serial task to compute them,
    and on CUDA each task is a driver launch of its own."""
    flag = os.environ.get("LAYERLAB_STATIC_BOUNDS", "").strip()
    return flag == "1" if flag in ("0", "1") else not _k.on_cpu()


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


# Integer parameters so named change from one training step to the next (the batch's first sample, the step's
# number): a static fused kernel takes them as run-time arguments. Every other integer (offsets, sizes, flags,
# conv geometry) is fixed for a network and workspace and becomes a compile-time constant there, one argument
# fewer for each launch to convert and pass (a scalar costs about 1 us of a CUDA graph's launch). An integer that
# changes every step under another name stays correct: past MAX_VARIANTS graphs, the signature's generic one.
VARYING = frozenset({"start", "step"})


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
        self.nds = [i for i, kind in self.runtime if kind == "nd"]
        # The integers a static fused kernel fixes (``fuse_plan``): all but those that change from step to step.
        names = [a.name for a in kern._primal.arguments]
        self.consts = [i for i, kind in self.runtime if kind == "i" and names[i] not in VARYING]
        # What identifies a recorded call to ``StepGraphs``' cache of keys: the templates, the ndarrays
        # themselves and, for a static graph, the fixed integers (``_fast_key``).
        self.pick = _picker(self.templates + self.nds)
        self.pick_static = _picker(self.templates + self.nds + self.consts)


def _picker(positions: list):
    """A function of a call's arguments giving those at ``positions`` as a tuple (operator.itemgetter's speed)."""
    if not positions:
        return lambda args: ()
    if len(positions) == 1:
        i = positions[0]
        return lambda args: (args[i],)
    return operator.itemgetter(*positions)


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
    return kern._primal.compiled_kernels[_k.compiled_key(kern, args, in_place)]


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


MAX_ARGS = 64  # Taichi 1.7's limit on a kernel's (non-template) arguments
# Kernels with shared-memory arrays (``shared_memory`` set on the Taichi kernel) per fused kernel: net-2h's step
# with four of them (batch 64) read out of bounds on an H100 where each part alone, and runs of up to three, ran
# right (40 ndarray parameters alone do not do it); so at most two, with which every seed network's step matched.
MAX_SHARED = 2
_funcs: dict = {}  # a kernel's Python function -> the same code as a ti.func taking every argument as a template
_fused: dict = {}  # (signature, the ndarrays' sharing pattern, static spec) -> (fused kernel, its parameter sources)
_serial = itertools.count()
MAX_VARIANTS = 8  # static fused kernels per step signature (shapes, fixed integers); past it, one generic
# Steps of a launch sequence before its cooperative kernel (StepGraphs.coop_after): its first compile takes
# seconds (net-1h's), and even from Taichi's offline cache its machine code takes most of a second to make at
# every start, which a run of a few thousand steps does not win back (docs/perf-log.md, "2026-11-26, late
# evening").
COOP_AFTER = 5000


class _Trial:
    """Two ways of running steps, 0 and 1, timed against each other: a trial alternates blocks of BLOCK timed
    calls of each, way 1 first, BLOCKS blocks in all; then the way with the lower mean time (its slowest
    twelfth left out: a call that met a page fault or an epoch's evaluation before it is not the way's doing)
    runs for RUN steps, and a new trial follows. Means, not medians: a spinning step is slow only now and then,
    when the scheduler gives a worker's core to another process, and a median missed it (with a busy process
    beside net-1h, it chose the cooperative step, 15% slower over the run)."""

    BLOCK, BLOCKS, RUN = 16, 6, 2000

    def __init__(self):
        self.times: tuple = ([], [])  # seconds: way 0's calls, way 1's
        self.trial = 0  # calls of the current trial taken; -1 while the winner runs
        self.left = 0  # the winner's steps left before the next trial
        self.winner = 1
        self.trials = self.wins = 0  # trials so far, and how many way 1 won

    def choice(self) -> int:
        """The way for the next call."""
        if self.trial < 0 and self.left > 0:
            return self.winner
        self.trial = max(self.trial, 0)
        return 1 - (self.trial // self.BLOCK) % 2

    def _took(self, way: int, seconds: float, steps: int) -> None:
        if self.trial < 0:
            self.left -= steps
            return
        self.times[way].append(seconds)
        self.trial += 1
        if self.trial >= self.BLOCK * self.BLOCKS:
            zero, one = (sum(sorted(t)[:len(t) - len(t) // 12]) / max(1, len(t) - len(t) // 12) for t in self.times)
            self.winner = int(one <= zero)
            self.trials += 1
            self.wins += self.winner
            self.times = ([], [])
            self.trial, self.left = -1, self.RUN


class _Duel(_Trial):
    """A launch sequence's two ways, Taichi's loops (0) and its cooperative kernel (1), as a ``_Trial`` of single
    steps: spin barriers are fast on cores of their own and slow where another busy process shares them (net-1h's
    step took 1.6x as long as with Taichi's loops while a test suite ran on the same two cores), so the faster of
    the two, as measured, runs. Both give the same results bit for bit (tests/nncore/test_coop.py), so a switch
    changes nothing but the time."""

    def __init__(self, loops, coop_entry):
        super().__init__()
        self.entries = (loops, coop_entry)
        self.current = 1

    def pick(self):
        """The entry for this step."""
        self.current = self.choice()
        return self.entries[self.current]

    def took(self, seconds: float) -> None:
        """This step's time (the launch, which on the CPU returns when the step is done)."""
        self._took(self.current, seconds, 1)


class _MultiTrial(_Trial):
    """Single steps (0) against steps in one launch (1, ``StepGraphs.run_steps``), as a ``_Trial`` of calls, each
    timed a step, its recording included (which single steps pay every step): a long launch keeps both cores
    spinning for all its steps, and on a shared VM it sometimes ran slower than single steps (cnn64;
    docs/LOG.md), where on quiet cores it saves a launch's hand-off and the recording's Python."""

    BLOCK, BLOCKS = 4, 8

    @property
    def multi(self) -> bool:
        return bool(self.winner)

    @property
    def calls(self) -> int:
        return self.trial

    def use_multi(self) -> bool:
        return bool(self.choice())

    def took(self, multi: bool, per_step: float, steps: int) -> None:
        self._took(int(multi), per_step, steps)


def _as_func(kern):
    """The kernel's own Python function as a ti.func (every parameter a template: ndarrays by reference, scalars
    as the fused kernel's parameters, templates as their values). Its top-level loops stay top-level loops of
    the kernel it is inlined into, each an offloaded task launched in order within that kernel's one launch."""
    fn = kern._primal.func
    f = _funcs.get(fn)
    if f is None:
        g = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
        g.__annotations__ = {name: ti.template() for name in inspect.signature(fn).parameters}
        g.__module__, g.__qualname__ = fn.__module__, fn.__qualname__
        f = _funcs[fn] = ti.func(g)
    return f


class _Shaped(AnyArray):
    """An ndarray parameter of a static fused kernel, seen by the inlined kernels with its shape as Python
    integers: loops over it get compile-time bounds (Taichi's ndarray shapes are otherwise run-time values)."""

    def __init__(self, arr, shape):
        self.ptr, self._shape = arr.ptr, list(shape)  # (arr was type-checked as the kernel's parameter)

    @property
    def shape(self):
        return list(self._shape)


def _n_params(calls) -> int:
    """Parameters of the kernel ``_make_fused`` makes for ``calls``: the distinct ndarrays and every scalar."""
    nds = {id(args[i]) for kern, args, _ in calls for i, kind in _slots(kern).runtime if kind == "nd"}
    return len(nds) + sum(kind != "nd" for kern, _, _ in calls for _, kind in _slots(kern).runtime)


def _fits(calls) -> bool:
    n = _n_params(calls)
    shared = sum(bool(getattr(kern, "shared_memory", False)) for kern, _, _ in calls)
    return n <= MAX_ARGS and shared <= MAX_SHARED


def _make_fused(calls, static: bool = False, threads: int = 0, steps: bool = False):
    """A kernel that runs ``calls``' kernels one after another as one launch: its body calls each kernel's
    function (``_as_func``) with the recorded templates; its parameters are the distinct ndarrays, then every
    scalar, each in order of first use. ``static``: the ndarrays reach the functions with their recorded shapes
    as constants (``_Shaped``), and the fixed integers (``_Slots.consts``) as constants, not
    parameters. ``threads`` > 0: a cooperative kernel (nncore.coop) of that many threads, each function in
    its rewritten form; with ``steps`` too, the threads loop over ``_K`` steps, each integer parameter named in
    VARYING advanced by a delta parameter of its own. Returns the kernel and, per parameter, the (call, argument)
    it comes from; with ``steps`` the last are ("delta", (call, argument)) for each delta, then ("K", None)."""
    ns: dict = {"ti": ti, "_S": _Shaped}
    params, sources, lines, nd_param, deltas = [], [], [], {}, []
    scalars, scalar_sources = [], []
    for c, (kern, args, _) in enumerate(calls):
        slots = _slots(kern)
        ns[f"f{c}"] = coop.cooperative(kern._primal.func) if threads else _as_func(kern)
        kinds = dict(slots.runtime)
        fixed = set(slots.templates) | (set(slots.consts) if static else set())
        actual = []
        for i, a in enumerate(args):
            if i in fixed:
                ns[f"t{c}_{i}"] = a if i in slots.templates else int(a)
                actual.append(f"t{c}_{i}")
                continue
            if kinds[i] == "nd":
                name = nd_param.get(id(a))
                if name is None:
                    name = nd_param[id(a)] = f"n{len(nd_param)}"
                    params.append(name)
                    sources.append((c, i))
                    ns[f"T_{name}"] = slots.dtypes[i]
                actual.append(f"ti.static(_S({name}, {tuple(a.shape)!r}))" if static else name)
                continue
            name = f"s{c}_{i}"
            scalars.append(name)
            scalar_sources.append((c, i))
            ns[f"T_{name}"] = slots.dtypes[i]
            if steps and kinds[i] == "i" and kern._primal.arguments[i].name in VARYING:
                deltas.append((c, i))
                ns[f"T_d{c}_{i}"] = slots.dtypes[i]
                actual.append(f"({name} + _s * d{c}_{i})")
            else:
                actual.append(name)
        if threads:
            actual += ["_sync", "_tid", str(threads)]
        lines.append(f"{'            ' if steps else '        ' if threads else '    '}f{c}({', '.join(actual)})")
    if threads:  # (the sync field is the runtime's at compile time: a kernel outlives a re-initialisation)
        # (a loop of steps is never serialised: as one serial task on one thread it lost work between the steps)
        ns["_coop_sync"] = coop.current_sync
        lines[:0] = ["    _sync = ti.static(_coop_sync())",
                     f"    ti.loop_config(block_dim=1, serialize={threads == 1 and not steps})", f"    for _tid in range({threads}):"]
        if steps:
            lines.insert(3, "        for _s in range(_K):")
            ns["T__K"] = ti.i32
    params += scalars
    sources += scalar_sources
    if steps:
        params += [f"d{c}_{i}" for c, i in deltas] + ["_K"]
        sources += [("delta", d) for d in deltas] + [("K", None)]
    fname = f"fused_step_{next(_serial)}"
    src = f"def {fname}({', '.join(f'{p}: T_{p}' for p in params)}):\n" + "\n".join(lines) + "\n"
    filename = f"<nncore {fname}>"
    _k.register_source(filename, src)  # Taichi reads the source
    exec(compile(src, filename, "exec", dont_inherit=True), ns)  # (annotations evaluated, not strings)
    return ti.kernel(ns[fname]), sources


def fuse_plan(calls, static: bool = False, threads: int = 0) -> list:
    """How ``calls`` launch fused: a list of (kernel, [(call, argument) for each of its arguments], in
    place). Each run of consecutive calls with the same in-place flag (nncore.kernels.Sized), at most MAX_ARGS
    parameters and at most MAX_SHARED shared-memory kernels becomes one kernel that holds them all
    (``_make_fused``, ``static`` as there), cached by the kernels, their templates, which arguments share an
    ndarray and, where static, the shapes and fixed integers (on CUDA a static group of one too). A step of a
    dozen kernels then pays one launch's fixed cost instead of a dozen; each of its loops still costs a driver
    launch of its own.
    ``threads`` > 0 (the CPU): cooperative kernels (nncore.coop) of that many threads instead, in-place flags
    ignored (the kernel shares every loop out itself); a kernel the rewrite refuses raises NotCooperative."""
    _k.restore_sources()  # (the kernels made here compile next, from their sources)
    if threads:
        coop.sync_field()  # (made here, in Python scope: a kernel compiling only finds it)
    groups: list = []
    for c, call in enumerate(calls):
        g = groups[-1] if groups else None
        if g is not None and (threads or call[2] == calls[g[-1]][2]) and _fits([calls[i] for i in g] + [call]):
            g.append(c)
        else:
            groups.append([c])
    plan = []
    # On CUDA a static plan's kernels are its own, even a group of one: the step's CUDA-graph replay needs the
    # PTX of each kernel, dumped only when it is first compiled, and a library kernel may have been compiled
    # earlier by the part-by-part path (nncore.cudagraph.traced).
    own = static and not _k.on_cpu()
    for g in groups:
        if len(g) == 1 and not threads and not own:
            kern, args, in_place = calls[g[0]]
            plan.append((kern, [(g[0], i) for i in range(len(args))], in_place))
            continue
        sub = [calls[c] for c in g]
        key = (_key(sub, True, static), threads)
        made = _fused.get(key)
        if made is None:
            made = _fused[key] = _make_fused(sub, static, threads)
        kern, sources = made
        plan.append((kern, [(g[c], i) for c, i in sources], False if threads else sub[0][2]))
    return plan


def apply_plan(plan, calls) -> list:
    """The calls of a ``fuse_plan`` made for calls like these (same signature and sharing), with their values."""
    return [(kern, [calls[c][1][i] for c, i in sources], in_place) for kern, sources, in_place in plan]


def _key(calls, fused: bool, static: bool = False) -> tuple:
    """What a step's graph is cached under, in one pass: (the signature: each call's kernel and its template
    values, the other arguments being symbolic; and where ``fused`` is on the sharing: each ndarray argument's
    index among the distinct ones, since a fused kernel's parameters follow it; else None), and where ``static``
    is on also every ndarray argument's shape and the fixed integers (``_Slots.consts``), which a static
    fused kernel fixes."""
    try:
        return _key_of(calls, fused, static)
    except AttributeError:  # a kernel seen for the first time: make its _slots
        for kern, _, _ in calls:
            _slots(kern)
        return _key_of(calls, fused, static)


def _key_of(calls, fused: bool, static: bool) -> tuple:
    sig = tuple([(kern, ip, tuple([args[i] for i in kern._graph_slots.templates])) for kern, args, ip in calls])
    if not fused:
        return sig, None
    nds = [args[i] for kern, args, _ in calls for i in kern._graph_slots.nds]
    seen: dict = {}
    sharing = tuple([seen.setdefault(id(a), len(seen)) for a in nds])
    if not static:
        return sig, sharing
    return sig, sharing, (tuple([a.shape for a in nds]),
                          tuple([args[i] for kern, args, _ in calls for i in kern._graph_slots.consts]))


# Keys of ``StepGraphs``' fast cache at most; it holds the recorded ndarrays themselves, so it is emptied when full.
MAX_FAST = 16


def _fast_key(calls, static: bool) -> tuple:
    """A key that determines ``_key``'s, cheaper to form: each call's kernel, in-place flag, templates and ndarray
    objects (so the sharing and the shapes), and for a static graph its fixed integers. A training loop records
    the same ndarrays every step, so its steps after the first find their graph here."""
    if static:
        return tuple([(kern, ip, kern._graph_slots.pick_static(args)) for kern, args, ip in calls])
    return tuple([(kern, ip, kern._graph_slots.pick(args)) for kern, args, ip in calls])


_arr = operator.attrgetter("arr")  # what Taichi's Graph.run passes for an ndarray
_CONVERT = {"nd": _arr, "f": float, "i": int}


def _binds(plan) -> list:
    """For a plan's launches (as ``apply_plan`` makes them), each graph argument as (name, call, argument,
    conversion) of the recorded calls: a step's arguments are then read straight from its recording, named as
    ``_values`` names them, converted as Taichi's ``Graph.run`` would."""
    return [(f"{c2}_{i}", *sources[i], _CONVERT[kind])
            for c2, (kern, sources, _) in enumerate(plan) for i, kind in _slots(kern).runtime]


def _args(binds, calls) -> dict:
    return {name: conv(calls[c][1][a]) for name, c, a, conv in binds}


def _run_graph(graph, args) -> None:
    """Run a compiled graph on arguments as ``_args`` makes them: straight into Taichi's compiled graph,
    without ``Graph.run``'s per-argument type dispatch (it accepts what ``_CONVERT`` gives)."""
    graph._compiled_graph.jit_run(_impl.get_runtime().prog.config(), args)


def launch(calls) -> None:
    """Run recorded calls one by one (what the code would have done without the recording)."""
    for kern, args, in_place in calls:
        _k._launch(kern, args, in_place)


class StepGraphs:
    """Compute graphs for the launch sequences of one owner (a network), rebuilt after a runtime re-init."""

    def __init__(self, enabled: bool | None = None, fused: bool | None = None, static: bool | None = None,
                 coop_on: bool | None = None, coop_after: int | None = None):
        self.enabled = default_enabled() if enabled is None else enabled
        # CPU steps as cooperative kernels (nncore.coop; fused, so graphs are cached as fused ones are)
        self.coop = coop.enabled() and _k.on_cpu() if coop_on is None else coop_on
        self._coop_always = coop_on is True  # (asked for: every step, not only those where ``coop.pays``)
        # Steps of one launch sequence run with Taichi's loops before their cooperative kernel is built: that
        # kernel compiles slowly (nncore.coop), and short runs (tests, a few epochs) would pay it for nothing.
        self.coop_after = COOP_AFTER if coop_after is None else coop_after
        self._pending: dict = {}  # id(entry) -> [its key, steps run]: entries awaiting their cooperative kernel
        self._duels: dict = {}  # id(cooperative entry) -> its _Duel with the entry of Taichi's loops it replaced
        self.fuse_asked = fused_default() if fused is None else fused
        self.fused = self.fuse_asked or self.coop  # steps fused into one kernel (``fuse_plan``)
        self.static = self.fused and (static_default() if static is None else static)
        self._graphs: dict = {}
        self._variants: dict = {}  # (signature, sharing) -> static graphs built for it
        self._fast: dict = {}  # ``_fast_key`` -> the entry its ``_key`` found or built
        self._gen = runtime.generation()
        self.built = self.fallbacks = self.unfused = 0
        self.replays = self.unreplayed = 0  # CUDA-graph replays built (``_replay``), and steps that could not have one
        self._ran = False
        self.cuda_graphs: bool | None = None  # replays on CUDA; None: ``cudagraph.enabled()``
        self.launches = (0, 0)  # the last run's kernel calls: as recorded, and as launched after fusion
        self._coop_ids: set = set()  # ids of the entries that are one cooperative kernel
        self._multis: dict = {}  # id of such an entry -> its k-step graph (``run_steps``), or False
        self._trials: dict = {}  # id of such an entry -> its _MultiTrial
        self.multi_steps = 0  # steps run by k-step launches

    def run(self, fn) -> None:
        """``fn()``'s kernel launches, as one graph where enabled."""
        if not self.enabled:
            fn()
            return
        calls = self._record(fn)
        if calls:
            self._launch(calls)

    def run_steps(self, fn, k: int, deltas: dict) -> int:
        """``fn()``'s launches as the first of ``k`` steps that differ only in the integers named in ``deltas``
        (``VARYING``'s: each step adds its delta to the first's), run as one cooperative kernel that loops over
        the steps: a launch's hand-off to the thread pool and the recording's Python are paid once for ``k``
        steps. Returns the steps run: ``k``, or 1 where that does not apply (not a cooperative CPU step, a
        timed trial of ``_Duel`` under way, a step that fuses into more than one kernel, an integer of
        VARYING's without a delta), the first step then run as ``run`` runs it."""
        if not self.enabled:
            fn()
            return 1
        t0 = _clock()
        calls = self._record(fn)
        if not calls:
            return 1
        entry = self._entry(calls)
        multi = self._multi(entry, calls, k, deltas) if k > 1 else None
        trial = self._trials.setdefault(id(entry), _MultiTrial()) if multi is not None else None
        if trial is not None and not trial.use_multi():
            multi = None
        if multi is None:
            self._launch(calls, entry)
            if trial is not None:
                trial.took(False, _clock() - t0, 1)
            return 1
        graph, binds = multi
        self.launches = (len(calls), 1)
        duel = self._duels.get(id(entry)) if self._duels else None
        if duel is not None:
            duel.left -= k
        _run_graph(graph, {name: conv(calls[c][1][a] if c >= 0 else (k if a is None else deltas[a]))
                           for name, c, a, conv in binds})
        self.multi_steps += k
        trial.took(True, (_clock() - t0) / k, k)
        return k

    def trying(self) -> bool:
        """Whether a trial of steps in one launch against single steps (``_MultiTrial``) is under way."""
        return any(t.calls >= 0 for t in self._trials.values())

    def _multi(self, entry, calls, k: int, deltas: dict):
        """The k-step graph of a cooperative entry, as (graph, binds), or None where it does not apply."""
        if id(entry) not in self._coop_ids or self.static:
            return None
        duel = self._duels.get(id(entry)) if self._duels else None
        if duel is not None and (duel.trial >= 0 or duel.left < k or duel.winner != 1):
            return None
        made = self._multis.get(id(entry))
        if made is None:
            made = self._multis[id(entry)] = self._build_multi(calls)
        if made is False:
            return None
        graph, binds, names = made
        return (graph, binds) if names <= deltas.keys() else None

    def _build_multi(self, calls):
        """(graph, binds, the VARYING names it advances) of a k-step cooperative kernel for these calls, or
        False where the step needs more than one kernel or its build fails."""
        try:
            kern, sources = _make_fused(calls, False, coop.threads(), steps=True)
            kinds = dict(_slots(kern).runtime)
            binds, vals, names = [], [], set()
            for j, src in enumerate(sources):
                if src[0] == "delta":
                    c, i = src[1]
                    name = calls[c][0]._primal.arguments[i].name
                    names.add(name)
                    binds.append((f"0_{j}", -1, name, _CONVERT[kinds[j]]))
                    vals.append(0)
                elif src[0] == "K":
                    binds.append((f"0_{j}", -1, None, _CONVERT[kinds[j]]))
                    vals.append(1)
                else:
                    binds.append((f"0_{j}", src[0], src[1], _CONVERT[kinds[j]]))
                    vals.append(calls[src[0]][1][src[1]])
            graph = build([(kern, vals, False)])
        except Exception:  # noqa: BLE001 -- more arguments than a kernel takes, or any failure to build
            return False
        return graph, binds, names

    def _record(self, fn) -> list:
        if self._gen != runtime.generation():
            self.close()
            self._gen = runtime.generation()
        self._ran = False  # set where building this step's entry runs it (``_replay``)
        return record(fn)

    def _entry(self, calls):
        """The cached entry for these calls (built, or upgraded to its cooperative kernel, where due)."""
        try:
            fast = _fast_key(calls, self.static)
        except AttributeError:  # a kernel seen for the first time: make its _slots
            for kern, _, _ in calls:
                _slots(kern)
            fast = _fast_key(calls, self.static)
        try:
            entry = self._fast.get(fast)
        except TypeError:  # an argument that cannot be hashed (a NumPy array for an ndarray): the full key only
            entry = fast = None
        if entry is None:
            key = _key(calls, self.fused, self.static)
            entry = self._graphs.get(key)
            if entry is None:
                entry = self._new(calls, key)
            if fast is not None:
                if len(self._fast) >= MAX_FAST:
                    self._fast.clear()
                self._fast[fast] = entry
        if self._pending:
            entry = self._upgrade(entry, calls)
        return entry

    def _launch(self, calls, entry=None) -> None:
        """One step of these calls through its entry (a duel's pick where one is under way)."""
        if entry is None:
            entry = self._entry(calls)
        duel = self._duels.get(id(entry)) if self._duels else None
        if duel is not None:
            entry = duel.pick()
        graph, plan, binds = entry
        self.launches = (len(calls), len(plan) if plan is not None else len(calls))
        if self._ran:  # building it ran this step (``_replay``)
            return
        t0 = _clock() if duel is not None else 0.0
        if binds is None and plan is not None:
            graph.run(apply_plan(plan, calls))
        elif graph is False:
            launch(apply_plan(plan, calls) if plan is not None else calls)
        else:  # the graph's arguments straight from the recorded calls (``_binds``)
            _run_graph(graph, _args(binds, calls))
        if duel is not None:
            duel.took(_clock() - t0)

    def _new(self, calls, key) -> tuple:
        """The entry for a key not seen yet: a static one, unless MAX_VARIANTS static graphs of this signature
        exist (a fixed integer that changes every step after all), then the signature's generic one."""
        if len(key) == 3:
            n = self._variants.get(key[:2], 0)
            if n >= MAX_VARIANTS:
                generic = self._graphs.get(key[:2])  # (not stored under key: such keys do not recur)
                if generic is None:
                    generic = self._graphs[key[:2]] = self._build(calls, False)
                return generic
            self._variants[key[:2]] = n + 1
        wait = self.coop and self.coop_after > 0 and coop.threads() > 0 and self._coop_pays(calls)
        entry = self._graphs[key] = self._build(calls, len(key) == 3, coop_now=not wait)
        if wait:
            self._pending[id(entry)] = [key, 0]
        return entry

    def _coop_pays(self, calls) -> bool:
        return self._coop_always or coop.pays(calls)

    def _upgrade(self, entry, calls) -> tuple:
        """``entry``, or where it has run ``coop_after`` steps with Taichi's loops, its cooperative one."""
        p = self._pending.get(id(entry))
        if p is None:
            return entry
        p[1] += 1
        if p[1] < self.coop_after:
            return entry
        del self._pending[id(entry)]
        key = p[0]
        new = self._graphs[key] = self._build(calls, len(key) == 3, coop_now=True)
        self._fast.clear()  # (it holds the old entry; the next step finds the new one by its full key)
        if new[1] is not None and new is not entry:  # (a cooperative kernel was built: it runs where it is faster)
            self._duels[id(new)] = _Duel(entry, new)
        return new

    def close(self) -> None:
        """Drop every graph (their CUDA resources freed)."""
        for entry in self._graphs.values():
            if isinstance(entry[0], cudagraph.Replay):
                entry[0].close()
        self._graphs.clear()
        self._coop_ids.clear()
        self._multis.clear()
        self._trials.clear()
        self._variants.clear()
        self._fast.clear()
        self._pending.clear()
        self._duels.clear()

    def _replay(self, plan, calls):
        """The fused step as a CUDA graph (nncore.cudagraph): its kernels launched once through Taichi, traced,
        which runs this step (``_ran``); then their tasks captured. None where a replay cannot be built (counted
        in ``unreplayed``): the step goes on as Taichi's compute graph."""
        launches = apply_plan(plan, calls)
        try:
            traced = cudagraph.traced(launches)
        except cudagraph.NotTraced:  # nothing ran: the step goes on as Taichi's graph
            self.unreplayed += 1
            return None
        self._ran = True
        if traced is not None:
            try:
                replay = cudagraph.Replay(launches, traced)
                self.built += 1
                self.replays += 1
                return replay
            except Exception:  # noqa: BLE001 -- any failure to capture: the step ran; Taichi's graph from now on
                pass
        self.unreplayed += 1
        return None

    def _build(self, calls, static: bool, coop_now: bool = True) -> tuple:
        """(graph, fuse_plan, _binds) for this launch sequence: the fused step's graph where ``fused`` is on, else
        (or if that fails to build: ``unfused`` counts it) the recorded launches' graph (plan None), else (False,
        None, None), launched one by one (``fallbacks`` counts it)."""
        threads = coop.threads() if self.coop and coop_now and self._coop_pays(calls) else 0
        if threads or self.fuse_asked:
            try:
                plan = fuse_plan(calls, static, threads)
            except Exception:  # noqa: BLE001 -- any failure to build: the step as recorded, and remember
                plan = None
                self.unfused += 1
            # (outside the try: a launch that fails while traced has run part of the step; its error goes up)
            if plan is not None and not _k.on_cpu() and (
                    cudagraph.enabled() if self.cuda_graphs is None else self.cuda_graphs):
                replay = self._replay(plan, calls)
                if replay is not None:
                    return replay, plan, None
            if plan is not None:
                try:
                    graph = build(apply_plan(plan, calls))
                    self.built += 1
                    entry = graph, plan, _binds(plan)
                    if threads and len(plan) == 1:
                        self._coop_ids.add(id(entry))
                    return entry
                except Exception:  # noqa: BLE001 -- any failure to build: the step as recorded, and remember
                    self.unfused += 1
        try:
            graph = build(calls)
            self.built += 1
            return graph, None, _binds([(kern, [(c, i) for i in range(len(args))], ip)
                                        for c, (kern, args, ip) in enumerate(calls)])
        except Exception:  # noqa: BLE001 -- any failure to build: launch as without graphs, and remember
            self.fallbacks += 1
            return False, None, None
