"""Taichi kernels, one module per layer family, forward and backward side by side.

Conventions (llm.c style): outputs first, gradients prefixed ``d``, a shape comment on every array.
Activations are kept flat, ``(B, features)``, whatever the layer's logical shape; conv and pool kernels take
their geometry as scalars. Parameters and their gradients live in one flat f32 buffer per network; a layer
finds its weight and bias by offset, so the optimizer updates every parameter in one launch.

Only the outermost loop of a kernel runs in parallel. Reductions (bias and weight gradients) loop in
parallel over the output element and reduce serially inside: no atomics, so results do not depend on the
number of threads.
"""
import contextlib
import linecache

from .. import runtime
from ..runtime import ti  # noqa: F401  (makes sure Taichi is imported with nncore's settings)

f32 = ti.f32
i32 = ti.i32
F1 = ti.types.ndarray(dtype=ti.f32, ndim=1)
F2 = ti.types.ndarray(dtype=ti.f32, ndim=2)
I1 = ti.types.ndarray(dtype=ti.i32, ndim=1)
I2 = ti.types.ndarray(dtype=ti.i32, ndim=2)


def pool_threads() -> int:
    """The threads of the current runtime's pool (1 where there is none yet), which kernels split their work
    into tasks for."""
    return max(1, getattr(runtime.current(), "threads", 1) or 1)


def chunk() -> int:
    """Elements per thread in element-wise and sliding-window kernels.

    CPU: long runs per thread, so the index decomposition (an integer division) happens once per run rather
    than once per element, and a thread walks memory contiguously. CUDA: one element per thread, so
    neighbouring threads touch neighbouring addresses (coalesced).
    """
    cur = runtime.current()
    return 1 if cur is not None and cur.arch == "cuda" else 4096


# Sources of the kernels and functions nncore generates (nncore.graph's fused steps, nncore.coop's rewrites),
# by their made-up file names: Taichi reads a function's source through linecache whenever it compiles it (on
# every runtime), and other libraries empty linecache (PyTorch's inductor calls linecache.clearcache()).
_sources: dict = {}


def register_source(filename: str, src: str) -> None:
    """Make ``src`` the source of ``filename`` for Taichi (and tracebacks), now and after linecache is emptied."""
    entry = (len(src), None, src.splitlines(True), filename)
    _sources[filename] = entry
    linecache.cache[filename] = entry


def restore_sources() -> None:
    """Put back any generated source linecache has lost (before compiling generated kernels)."""
    for filename, entry in _sources.items():
        if linecache.cache.get(filename) is not entry:
            linecache.cache[filename] = entry


# A call whose estimated single-thread time (ns) is below this runs its loops in place, on the calling thread:
# handing a loop to Taichi's thread pool costs wake-up and wait (60-95 us a call on the 2-core Xeon VM; docs/LOG.md,
# '2026-11-23, evening: SGD inside the weight gradient; ...', the in-place threshold), and two threads can save
# at most half of the work. The estimates (``sized``) are single-thread times, and only approximate.
IN_PLACE_NS = 150_000


# While a compute graph is being recorded (nncore.graph), kernel calls land here instead of launching:
# (Taichi kernel, args, whether its loops run in place).
_recording: list | None = None


def compiling(in_place: bool):
    """The context a kernel compiles in: runtime.loops_in_place() for the in-place variant of a Sized kernel
    (read while it compiles, on its first call), nothing otherwise."""
    return runtime.loops_in_place() if in_place else contextlib.nullcontext()


def compiled_key(kern, args, in_place: bool = False):
    """The key of the Taichi kernel's compiled instance for these arguments, compiling it on first use."""
    with compiling(in_place):
        return kern._primal.ensure_compiled(*args)


def _launch(kern, args, in_place: bool = False):
    if _recording is not None:
        _recording.append((kern, args, in_place))
        return None
    with compiling(in_place):
        return kern(*args)


class Kernel:
    """A Taichi kernel that a compute-graph recording (nncore.graph) can capture instead of launching."""

    def __init__(self, fn):
        self.ti = ti.kernel(fn)
        self.__name__, self.__doc__ = fn.__name__, fn.__doc__
        self._primal = self.ti._primal  # marks a kernel, as on Taichi's own wrappers (nncore.sweep counts them)

    def __call__(self, *args):
        return _launch(self.ti, args)


def kernel(fn):
    """``@kernel`` instead of ``@ti.kernel`` for every nncore kernel: see :class:`Kernel`."""
    return Kernel(fn)


class Sized:
    """A CPU kernel compiled twice: loops spread over the thread pool, and loops run in place (for calls whose
    ``work(*args)`` estimate, in ns, is below IN_PLACE_NS). On CUDA only the pool variant runs (Taichi's usual
    GPU launch); on a one-thread runtime too, as it already runs every loop in place (``runtime.serial``)."""

    def __init__(self, fn, work):
        self.pool, self.here, self.work = ti.kernel(fn), ti.kernel(fn), work
        self.pool._nncore_work = self.here._nncore_work = work  # (for a recorded call: ``work_of``)
        self.__name__, self.__doc__ = fn.__name__, fn.__doc__
        self._primal = self.pool._primal  # marks a kernel, as on Taichi's own wrappers

    def __call__(self, *args):
        if runtime.serial or not on_cpu() or self.work(*args) >= IN_PLACE_NS:
            return _launch(self.pool, args)
        return _launch(self.here, args, in_place=True)


def work_of(call) -> int:
    """A recorded call's estimated single-thread time in ns (``Sized``'s estimate; 0 for other kernels)."""
    kern, args, _ = call
    work = getattr(kern, "_nncore_work", None)
    return work(*args) if work is not None else 0


def sized(work):
    """``@sized(lambda *args: ns)`` instead of ``@kernel``: see :class:`Sized`."""
    return lambda fn: Sized(fn, work)


def n_elems(a) -> int:
    return int(a.shape[0]) * (int(a.shape[1]) if len(a.shape) > 1 else 1)


def on_cpu() -> bool:
    cur = runtime.current()
    return cur is None or cur.arch != "cuda"
