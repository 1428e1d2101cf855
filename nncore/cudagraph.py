"""A step's compiled kernels replayed as one CUDA graph (CUDA only).

Taichi 1.7 spends host time on every task of every launch, from a compute graph too: it allocates and copies an
argument buffer, then issues one driver launch per top-level loop, on the legacy default stream, which a CUDA
graph cannot capture. A graph launch costs a few microseconds whatever the number of kernels in it.

So a step's kernels run once through Taichi with its PTX dump and trace log switched on (``traced``): the PTX of
each kernel compiled in that window, and each task's name, grid and block as Taichi launched it. ``Replay``
then loads that PTX into Taichi's CUDA context, captures the same tasks with the same dimensions on a stream of
its own, each given a ``RuntimeContext`` whose argument buffer is ours, and launches the graph on the legacy
stream, where Taichi's own launches (data loads, reads, syncs) stay ordered with it. Each step writes its
arguments (the batch's start, the ndarrays' addresses) into that buffer, laid out as Taichi lays out a
kernel's parameters, with one asynchronous copy, then launches the graph.

What the replay cannot do, it refuses at build time, and the step goes on through Taichi's compute graph: a
kernel compiled before the traced launch (no PTX to read), a task that reads the Taichi runtime pointer (the
replay has none to give: random numbers, loops whose bounds are run-time values, which is why only static fused
kernels replay in practice), a parameter that is neither a scalar nor an ndarray of one dimension or more
without a gradient. LAYERLAB_CUDA_GRAPHS=0 switches replays off.
"""
from __future__ import annotations

import ctypes
import glob
import os
import re
import shutil
import struct
import sys
import tempfile

from .runtime import ti
from taichi._logging import is_logging_effective as _is_effective
from taichi.lang import impl as _impl

_LAUNCH = re.compile(r"Launching kernel (\w+)<<<(\d+), (\d+)>>>")
_ENTRY = re.compile(r"\.entry\s+(\w+)\s*\(")
# Taichi's RuntimeContext, passed by value to each task: the argument buffer, the runtime (left null), a CPU
# thread id, the result buffer.
_CONTEXT = struct.Struct("<QQi4xQ")
_SCALAR = {ti.f32: "f", ti.f64: "d", ti.i32: "i", ti.i64: "q", ti.u32: "I", ti.u64: "Q"}


# The Taichi whose internals the replay reads (the argument layout, the RuntimeContext, the trace's wording).
TAICHI = (1, 7, 4)


def enabled() -> bool:
    """Whether fused steps replay as CUDA graphs on CUDA: yes, unless LAYERLAB_CUDA_GRAPHS=0 or Taichi is
    another version than the one whose internals the replay follows."""
    return os.environ.get("LAYERLAB_CUDA_GRAPHS", "").strip() != "0" and tuple(ti.__version__) == TAICHI


class CudaError(RuntimeError):
    pass


class _Driver:
    """The few CUDA driver calls the replay makes, through ctypes."""

    def __init__(self):
        lib = ctypes.CDLL("libcuda.so.1")
        vp, u64, ci, cu = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int, ctypes.c_uint
        sig = {
            "cuCtxGetCurrent": [ctypes.POINTER(vp)], "cuCtxSetCurrent": [vp],
            "cuModuleLoadData": [ctypes.POINTER(vp), ctypes.c_char_p], "cuModuleUnload": [vp],
            "cuModuleGetFunction": [ctypes.POINTER(vp), vp, ctypes.c_char_p],
            "cuMemAlloc_v2": [ctypes.POINTER(u64), ctypes.c_size_t], "cuMemFree_v2": [u64],
            "cuMemcpyHtoDAsync_v2": [u64, vp, ctypes.c_size_t, vp],
            "cuLaunchKernel": [vp, cu, cu, cu, cu, cu, cu, cu, vp, ctypes.POINTER(vp), ctypes.POINTER(vp)],
            "cuStreamCreate": [ctypes.POINTER(vp), cu], "cuStreamDestroy_v2": [vp],
            "cuStreamBeginCapture_v2": [vp, ci], "cuStreamEndCapture": [vp, ctypes.POINTER(vp)],
            "cuGraphInstantiateWithFlags": [ctypes.POINTER(vp), vp, ctypes.c_ulonglong],
            "cuGraphLaunch": [vp, vp], "cuGraphExecDestroy": [vp], "cuGraphDestroy": [vp],
            "cuCtxSynchronize": [],
        }
        for name, args in sig.items():
            f = getattr(lib, name)
            f.argtypes, f.restype = args, ci
            setattr(self, name, f)

    def __call__(self, name: str, *args) -> None:
        rc = getattr(self, name)(*args)
        if rc != 0:
            raise CudaError(f"{name} failed (CUDA error {rc})")


_driver: _Driver | None = None


def driver() -> _Driver:
    global _driver
    if _driver is None:
        _driver = _Driver()
    return _driver


# Task name -> the PTX module that defines it, for kernels whose compilation a traced launch saw; and each traced
# kernel's tasks, keyed by the kernel's compiled instance. Both belong to one Taichi runtime (``_gen``).
_ptx: dict = {}
_tasks: dict = {}
_gen = [None]


def _fresh() -> None:
    from . import runtime
    if _gen[0] != runtime.generation():
        _ptx.clear()
        _tasks.clear()
        _gen[0] = runtime.generation()


class NotTraced(RuntimeError):
    """The traced launch could not be set up (a temporary directory, a file descriptor); nothing was launched."""


_libc = ctypes.CDLL(None)


def traced(launches) -> list | None:
    """Launch ``launches`` ((kernel, args, in place), as ``graph.apply_plan`` makes them) through Taichi, each
    kernel compiled in the meantime dumping its PTX and each launch logging its tasks. Returns per launch
    (tasks, ptx): tasks [(name, grid, block)], ptx the module text; None where a kernel was compiled before and
    was never traced (its PTX is gone) or the log or the PTX could not be read: the launches have run all the
    same, the step is done. Raises NotTraced, having launched nothing, where the trace cannot be set up; a
    launch's own error propagates (the launches before it have run)."""
    from .kernels import _launch, compiled_key
    _fresh()
    cfg = _impl.get_runtime().prog.config()
    level = next((lv for lv in ("trace", "debug", "info", "warn", "error", "critical")
                  if _is_effective(lv)), "critical")
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        tmp = tempfile.mkdtemp(prefix="layerlab-ptx-")
    except OSError as e:
        raise NotTraced(str(e)) from e
    log = saved = None
    found = []
    try:
        try:
            cwd = os.getcwd()
            log = open(os.path.join(tmp, "launches.log"), "w+")
            saved = os.dup(1), os.dup(2)
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            os.chdir(tmp)  # Taichi writes the PTX to the working directory
            cfg.print_kernel_asm = True
            ti.set_logging_level("trace")
            keys = [compiled_key(kern, args, in_place) for kern, args, in_place in launches]
        except Exception as e:  # noqa: BLE001 -- before any launch: the caller launches the step its own way
            raise NotTraced(str(e)) from e
        for (kern, args, in_place), key in zip(launches, keys):
            tasks = []
            try:
                _libc.fflush(None)  # Taichi's log lines out of the C library's buffer
                at = log.seek(0, 2)  # (the log's descriptor and fd 1 share one offset)
            except (OSError, ValueError):
                at = None
            _launch(kern, args, in_place)
            try:
                if at is not None:
                    _libc.fflush(None)
                    log.seek(at)
                    tasks = [(n, int(g), int(b)) for n, g, b in _LAUNCH.findall(log.read())]
                    log.seek(0, 2)
            except (OSError, ValueError):  # an unreadable log: no replay, the launches go on
                tasks = []
            found.append(((kern, key), tasks))
    finally:
        ti.set_logging_level(level)
        cfg.print_kernel_asm = False
        if saved is not None:
            os.chdir(cwd)
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        if log is not None:
            log.close()
        try:
            for path in sorted(glob.glob(os.path.join(tmp, "*.ptx"))):
                with open(path) as f:
                    text = f.read()
                for name in _ENTRY.findall(text):
                    _ptx[name] = text
        except (OSError, ValueError):  # unreadable PTX: the tasks it defines are not found below
            pass
        shutil.rmtree(tmp, ignore_errors=True)
    out = []
    for ident, tasks in found:
        if tasks:
            _tasks[ident] = tasks
        else:
            tasks = _tasks.get(ident, [])
        if not tasks or any(name not in _ptx for name, _, _ in tasks):
            return None
        out.append((tasks, _ptx[tasks[0][0]]))
    return out


def _body(ptx: str, task: str) -> str:
    """A task's PTX, from its ``.entry`` to the brace that closes its body."""
    at = ptx.find(".entry " + task + "(")
    start = ptx.find("{", at) if at >= 0 else -1
    if start < 0:
        return ""
    depth = 0
    for i in range(start, len(ptx)):
        c = ptx[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return ptx[at:i + 1]
    return ptx[at:]


def _reads_runtime(ptx: str, task: str) -> bool:
    """Whether a task's code may read its RuntimeContext's runtime pointer (bytes 8-15), which the replay leaves
    null. The context is a by-value parameter: Taichi's code takes its address (``mov.b64 %rd, param``), copies
    it, and loads fields through the copies (``ld.param [%rd+off]``). Any other use of the address, or a load
    that touches bytes 8-15, counts as a read."""
    body = _body(ptx, task)
    if not body:
        return True
    param = task + "_param_0"
    aliases, lines = set(), body.splitlines()[1:]
    for line in lines:  # the address and its copies
        m = re.match(r"\s*mov\.(?:b64|u64)\s+(%rd\d+),\s*(\S+);", line)
        if m and (m.group(2) == param or m.group(2) in aliases):
            aliases.add(m.group(1))
    names = [re.escape(param)] + [re.escape(a) + r"\b" for a in aliases]
    use = re.compile("(" + "|".join(names) + ")")
    for line in lines:
        if not use.search(line) or line.lstrip().startswith(".param"):  # (the declaration)
            continue
        m = re.match(r"\s*mov\.(?:b64|u64)\s+(%rd\d+),\s*(\S+);", line)
        if m and m.group(1) in aliases:
            continue
        m = re.match(r"\s*ld\.param(\.v(\d))?\.[a-z]+(\d+)\s+[^\[]*\[(\S+?)(\+(\d+))?\];", line)
        if not m or not (m.group(4) == param or m.group(4) in aliases):
            return True
        offset = int(m.group(6) or 0)
        width = int(m.group(2) or 1) * int(m.group(3)) // 8
        if offset < 16 and offset + width > 8:
            return True
    return False


def _layout(kern, args) -> tuple[struct.Struct, list]:
    """Taichi's argument buffer for this kernel's non-template parameters, in order: an ndarray is a struct of its
    shape (int32 each) then its data pointer, aligned to 8; a scalar is its own type, aligned to its size.
    Returns the struct and, per parameter, (position, kind)."""
    from .graph import _slots
    slots = _slots(kern)
    if slots.problem:
        raise TypeError(slots.problem)
    fmt, size = "<", 0

    def pad(to):
        nonlocal fmt, size
        extra = -size % to
        if extra:
            fmt += f"{extra}x"
            size += extra

    for i, kind in slots.runtime:
        if kind == "nd":
            a = args[i]
            if not isinstance(a, ti.Ndarray) or hasattr(a, "n") or not a.shape:
                raise TypeError(f"argument {i}: not a plain ndarray of one dimension or more")
            if getattr(a, "grad", None) is not None or getattr(slots.dtypes[i], "needs_grad", False):
                raise TypeError(f"argument {i}: an ndarray with a gradient (its struct holds one more pointer)")
            pad(8)
            fmt += f"{len(a.shape)}i"
            size += 4 * len(a.shape)
            pad(8)
            fmt += "Q"
            size += 8
        else:
            code = _SCALAR.get(slots.dtypes[i])
            if code is None:
                raise TypeError(f"argument {i}: type {slots.dtypes[i]}")
            k = struct.calcsize(code)
            pad(k)
            fmt += code
            size += k
    pad(8)
    return struct.Struct(fmt), slots.runtime


class Replay:
    """One step's launches as an instantiated CUDA graph over their traced tasks (``traced``)."""

    def __init__(self, launches, traced_launches):
        d = driver()
        self._d = d
        self._mods, self._bufs, self._keep = [], [], []
        self._exec = self._graph = self._stream = None
        ctx = ctypes.c_void_p()
        d("cuCtxGetCurrent", ctypes.byref(ctx))
        if not ctx.value:
            raise CudaError("no CUDA context is current")
        self._ctx = ctx
        try:
            self._setup(launches, traced_launches)
        except BaseException:
            self.close()
            raise

    def _setup(self, launches, traced_launches):
        d = self._d
        self._layouts, offsets, total = [], [], 0
        for kern, args, _ in launches:
            layout = _layout(kern, args)
            self._layouts.append(layout)
            offsets.append(total)
            total += -(-max(layout[0].size, 8) // 16) * 16
        self._size = total
        buf = ctypes.c_uint64()
        d("cuMemAlloc_v2", ctypes.byref(buf), max(total, 16))
        self._bufs.append(buf)
        result = ctypes.c_uint64()
        d("cuMemAlloc_v2", ctypes.byref(result), 256)
        self._bufs.append(result)
        self._arg_base = buf.value
        modules = {}
        stream = ctypes.c_void_p()
        d("cuStreamCreate", ctypes.byref(stream), 1)  # CU_STREAM_NON_BLOCKING: unordered with the legacy stream
        self._stream = stream
        nodes = []
        for (tasks, ptx), off in zip(traced_launches, offsets):
            mod = modules.get(id(ptx))
            if mod is None:
                mod = ctypes.c_void_p()
                d("cuModuleLoadData", ctypes.byref(mod), ptx.encode())
                self._mods.append(mod)
                modules[id(ptx)] = mod
            context = ctypes.create_string_buffer(_CONTEXT.pack(buf.value + off, 0, 0, result.value), 32)
            params = (ctypes.c_void_p * 1)(ctypes.cast(context, ctypes.c_void_p))
            self._keep += [context, params]
            for name, grid, block in tasks:
                if _reads_runtime(ptx, name):
                    raise TypeError(f"task {name} reads the Taichi runtime")
                fn = ctypes.c_void_p()
                d("cuModuleGetFunction", ctypes.byref(fn), mod, name.encode())
                nodes.append((fn, grid, block, params))
        d("cuStreamBeginCapture_v2", stream, 2)  # CU_STREAM_CAPTURE_MODE_RELAXED
        graph = ctypes.c_void_p()
        try:
            for fn, grid, block, params in nodes:
                d("cuLaunchKernel", fn, grid, 1, 1, block, 1, 1, 0, stream, params, None)
        finally:
            d("cuStreamEndCapture", stream, ctypes.byref(graph))
        self._graph = graph
        ex = ctypes.c_void_p()
        d("cuGraphInstantiateWithFlags", ctypes.byref(ex), graph, 0)
        self._exec = ex
        self._offsets = offsets
        self._host = bytearray(self._size)
        self._host_ptr = ctypes.addressof((ctypes.c_char * max(self._size, 1)).from_buffer(self._host))
        self._nds = None  # the ndarrays ``_vals`` were packed for
        self._vals = self._scalars = None
        self.tasks = len(nodes)

    def _refresh(self, launches) -> None:
        """The packed values of every parameter (ndarray shapes and addresses, scalars), and where each scalar
        goes, for these launches' ndarrays."""
        prog = _impl.get_runtime().prog
        self._vals, self._scalars = [], []
        for (kern, args, _), (st, slots) in zip(launches, self._layouts):
            vals, scal = [], []
            for i, kind in slots:
                a = args[i]
                if kind == "nd":
                    vals.extend(a.shape)
                    vals.append(prog.get_ndarray_data_ptr_as_int(a.arr))
                else:
                    scal.append((i, len(vals), float if kind == "f" else int))
                    vals.append(0)
            self._vals.append(vals)
            self._scalars.append(scal)

    def run(self, launches) -> None:
        """One replay with these launches' arguments (the recorded step's, as ``graph.apply_plan`` gives them)."""
        nds = [args[i] for (_, args, _), (_, slots) in zip(launches, self._layouts) for i, kind in slots
               if kind == "nd"]
        last = self._nds
        if last is None or len(nds) != len(last) or any(a is not b for a, b in zip(nds, last)):
            self._refresh(launches)
            self._nds = nds  # (kept alive, so that no other array takes one of their ids or addresses)
        host = self._host
        for (_, args, _), (st, _), off, vals, scal in zip(launches, self._layouts, self._offsets, self._vals,
                                                           self._scalars):
            for i, j, conv in scal:
                vals[j] = conv(args[i])
            st.pack_into(host, off, *vals)
        d = self._d
        if d.cuCtxSetCurrent(self._ctx) or d.cuMemcpyHtoDAsync_v2(self._arg_base, self._host_ptr, self._size, None) \
                or d.cuGraphLaunch(self._exec, None):
            raise CudaError("a CUDA graph's replay failed")

    def close(self) -> None:
        """Free the graph, the modules and the buffers (after the GPU is done with them)."""
        d = self._d
        d.cuCtxSetCurrent(self._ctx)
        d.cuCtxSynchronize()
        if self._exec is not None:
            d.cuGraphExecDestroy(self._exec)
        if self._graph is not None:
            d.cuGraphDestroy(self._graph)
        if self._stream is not None:
            d.cuStreamDestroy_v2(self._stream)
        for m in self._mods:
            d.cuModuleUnload(m)
        for b in self._bufs:
            d.cuMemFree_v2(b)
        self._exec = self._graph = self._stream = None
        self._mods, self._bufs = [], []

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 -- at interpreter exit the driver may be gone
            pass
