"""The one place that calls ``ti.init``: backend names, availability, and switching between them.

Arch names: ``cpu-serial`` (one thread), ``cpu-parallel`` (all cores, or ``threads=N``) and ``cuda``.
Taichi silently falls back to the CPU when CUDA does not work; :func:`init` checks the arch actually in
use and raises :class:`BackendUnavailable` instead, so CPU timings are never labelled CUDA.

Limits: Taichi is bound to the thread that called ``ti.init`` -- every Taichi call of a process must
happen on that thread. Re-initialising (switching arch) destroys every ndarray; objects holding
ndarrays notice through :func:`generation` and must be rebuilt from host copies.
"""
from __future__ import annotations

import contextlib
import ctypes
import io
import os
import platform
import threading
from dataclasses import dataclass

# Quiet Taichi's import banner and its info lines; must happen before taichi is first imported.
os.environ.setdefault("ENABLE_TAICHI_HEADER_PRINT", "0")
os.environ.setdefault("TI_LOG_LEVEL", "error")
os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")  # ti.init would otherwise ask the network

import taichi as ti  # noqa: E402

from . import pinning  # noqa: E402
from .errors import BackendUnavailable, ConfigError  # noqa: E402
from .limits import check_threads  # noqa: E402

ARCHS = ("cpu-serial", "cpu-parallel", "cuda")
# Iterations per scheduled task of a CPU parallel loop (see init). Not 32, Taichi's default: the offline cache
# key holds this number but not the scheduling switches, so kernels cached under the old scheme are not reused.
CPU_TASK = 512
# ``ti.loop_config(block_dim=runtime.coarse_block)`` goes before a loop whose every iteration is a long run of
# work (a GEMM tile, a conv row, a run of elements): on the CPU each iteration is then one task, so even a few
# dozen iterations spread over every core; on CUDA it is None, Taichi's default. Kernels read it when they are
# compiled, which happens again after every init.
coarse_block: int | None = 1
# A memory-bound loop over a long array (the optimizers) runs as tasks of ``runtime.stream_run`` consecutive
# elements, each task a plain loop (nncore/kernels/optim.py): a Taichi CPU parallel loop calls its body
# once per iteration through a function pointer, so a loop over single elements is neither vectorised nor
# cheap (SGD over net-1h's parameters ran about 5x faster in runs of 16,384; docs/LOG.md). Runs of 64 KiB are
# also what the prefetcher follows. 1 on CUDA: a thread per element, neighbours on
# neighbours.
STREAM_TASK = 16384
stream_run: int = STREAM_TASK
# ``serialize=runtime.serial`` in the same ``ti.loop_config``: True on a one-thread CPU runtime, where a parallel
# loop would still be handed to Taichi's thread pool (one worker thread) and the caller would wait for it: a
# wake-up and a wait cost several times a whole launch run in place. False elsewhere.
serial: bool = False


@contextlib.contextmanager
def loops_in_place():
    """Kernels compiled inside run every loop in place (see nncore.kernels.Sized)."""
    global serial
    saved, serial = serial, True
    try:
        yield
    finally:
        serial = saved


@dataclass(frozen=True)
class ArchStatus:
    """Whether one backend works on this machine, and why not if it does not."""

    name: str
    available: bool
    reason: str  # empty when available
    device: str  # CPU model or GPU name, when known


@dataclass(frozen=True)
class RuntimeInfo:
    """The backend actually in use after :func:`init`."""

    arch: str
    threads: int  # CPU worker threads; 0 on cuda
    device: str
    generation: int
    pinned: tuple = ()  # the core of each CPU worker thread, where they are pinned (nncore.pinning)


_current: RuntimeInfo | None = None
_generation = 0
_owner_thread: int | None = None


def _guard_stale_ndarrays() -> None:
    """Make a Taichi ndarray from an earlier runtime harmless when Python collects it.

    Taichi 1.7's ``ScalarNdarray.__del__`` asks the *current* program to delete its C++ object by address.
    Once the runtime has been re-initialised, that address may already belong to a live ndarray of the new
    program (the allocator reuses it), which then gets freed under its owner: its next kernel launch fails
    with "argument not found" or reads garbage. Each ndarray is therefore stamped with the generation that
    made it, and only the current generation's are handed to ``delete_ndarray``; the old program released the
    others' memory when it was torn down.
    """
    from taichi.lang._ndarray import ScalarNdarray

    if getattr(ScalarNdarray, "_layerlab_guarded", False):
        return
    init, delete = ScalarNdarray.__init__, ScalarNdarray.__del__

    def guarded_init(self, *args, **kwargs):
        self._layerlab_generation = _generation
        init(self, *args, **kwargs)

    def guarded_del(self):
        if getattr(self, "_layerlab_generation", None) == _generation:
            delete(self)

    ScalarNdarray.__init__, ScalarNdarray.__del__ = guarded_init, guarded_del
    ScalarNdarray._layerlab_guarded = True


_guard_stale_ndarrays()


def _cache_source_positions() -> None:
    """Memoise the source-position text Taichi's frontend builds for every AST node it transforms.

    Taichi 1.7 formats each node's file, line and a caret line under the code (textwrap included) before it
    transforms the node, whether or not an error follows, and a ``ti.static`` loop transforms its body once per
    iteration, so the CPU kernels' unrolled loops (vector lanes, register-tile rows) asked for the same text
    thousands of times. The frontend runs on every start, offline cache or not (the cache key is the kernel's
    IR): this saved about 0.2 s of a net-1h run's time to its first step (docs/LOG.md, 'figures moved out of
    comments'). The text is a function of the function and the node's position, which is the key here.
    """
    from taichi.lang.ast import ast_transformer_utils as utils

    ctx_cls = utils.ASTTransformerContext
    if getattr(ctx_cls, "_layerlab_cached", False):
        return
    uncached, cache = ctx_cls.get_pos_info, {}

    def get_pos_info(self, node):
        body = getattr(node, "body", None)
        key = (self.file, self.lineno_offset, self.func.func.__name__, self.indent, type(node).__name__,
               node.lineno, node.end_lineno, node.col_offset, node.end_col_offset,
               body[0].lineno if isinstance(body, list) and body else None)
        text = cache.get(key)
        if text is None:
            text = cache[key] = uncached(self, node)
        return text

    ctx_cls.get_pos_info = get_pos_info
    ctx_cls._layerlab_cached = True


_cache_source_positions()


def cpu_count() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields in /proc/cpuinfo (``flags``, ``model name``, ``cpu family``, ...); empty
    where it cannot be read."""
    fields = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    break
                name, _, value = line.partition(":")
                fields[name.strip()] = value.strip()
    except OSError:
        pass
    return fields


def cpu_flags() -> frozenset:
    """The CPU's feature flags (``avx512f``, ``fma``, ...) as /proc/cpuinfo lists them; empty where it cannot
    be read."""
    return frozenset(_cpuinfo().get("flags", "").split())


# A tiny kernel of 16-wide vector multiply-adds, compiled with the settings of ``init`` and its machine code
# written out (Taichi writes it to the working directory): whether that code uses AVX-512's zmm registers.
_JIT_PROBE = r"""
import contextlib, glob, io
import taichi as ti
with contextlib.redirect_stdout(io.StringIO()):
    ti.init(arch=ti.cpu, offline_cache=False, print_kernel_asm=True, log_level=ti.ERROR, cpu_max_num_threads=1,
            real_matrix_scalarize=False, fast_math=False, opt_level=0)
V = ti.types.vector(16, ti.f32)
@ti.kernel
def k(a: ti.types.ndarray(dtype=V, ndim=1)):
    for i in range(1):
        acc = V(0.0)
        for j in range(a.shape[0]):
            acc += a[j] * a[j]
        a[0] = acc
k(ti.ndarray(V, 4))
code = "".join(open(f).read() for f in glob.glob("taichi_kernel_cpu*.s"))
print("zmm" if "zmm" in code else "ymm" if "ymm" in code else "?")
"""


def jit_avx512() -> bool:
    """Whether Taichi's CPU code uses AVX-512 registers on this machine, which the CPU having AVX-512 does not
    settle: Taichi 1.7's LLVM 15 takes an AMD Zen 4 (family 25) for a Zen 3 and emits AVX2 code for it, 16
    vector registers of 8 floats, where a Zen 5 or a recent Xeon gets 32 of 16. The CPU products size their
    register tiles by this (``gemm_cpu._layout``). Found once per machine by compiling a probe kernel in a
    process of its own (0.6 s on a 2-core VM) and kept in the user cache directory; where the probe fails, the
    CPU's flags decide."""
    if "avx512f" not in cpu_flags():
        return False
    import hashlib
    import json
    import subprocess
    import sys
    import tempfile

    import platformdirs

    key = hashlib.sha256(f"{ti.__version__}|{cpu_name()}|{sorted(cpu_flags())}|{_cpu_model()}".encode()).hexdigest()
    path = os.path.join(platformdirs.user_cache_dir("layerlab", appauthor=False), "jit-avx512.json")
    try:
        with open(path, encoding="utf-8") as fh:
            known = json.load(fh)
        if isinstance(known, dict) and isinstance(known.get(key), bool):
            return known[key]
    except (OSError, ValueError):
        known = {}
    try:
        with tempfile.TemporaryDirectory(prefix="layerlab-jit-") as tmp:
            with open(os.path.join(tmp, "probe.py"), "w", encoding="utf-8") as fh:
                fh.write(_JIT_PROBE)  # (Taichi reads a kernel's source from its file)
            out = subprocess.run([sys.executable, "probe.py"], cwd=tmp, capture_output=True, text=True,
                                 timeout=120, env=dict(os.environ, TI_LOG_LEVEL="error")).stdout.split()
    except (OSError, subprocess.SubprocessError):
        out = []
    if not out or out[-1] not in ("zmm", "ymm"):
        return True  # (the probe did not answer: trust the flags)
    found = out[-1] == "zmm"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        known = {**(known if isinstance(known, dict) else {}), key: found}
        tmp_path = f"{path}.{os.getpid()}"
        with open(tmp_path, "w", encoding="utf-8") as fh:
            json.dump(known, fh)
        os.replace(tmp_path, path)
    except OSError:
        pass
    return found


def _cpu_model() -> str:
    """The CPU's vendor, family, model and stepping (part of ``jit_avx512``'s key)."""
    fields = _cpuinfo()
    return "/".join(fields.get(k, "") for k in ("vendor_id", "cpu family", "model", "stepping"))


def cpu_name() -> str:
    return _cpuinfo().get("model name") or platform.processor() or platform.machine()


def _probe_cuda() -> tuple[bool, str, str]:
    """Ask the CUDA driver directly (without ``ti.init``, which would reset the runtime)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False, "no CUDA driver (libcuda.so.1 not found)", ""
    if lib.cuInit(0) != 0:
        return False, "the CUDA driver failed to initialise (cuInit)", ""
    count = ctypes.c_int(0)
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
        return False, "the CUDA driver sees no GPU", ""
    dev = ctypes.c_int(0)
    name = ctypes.create_string_buffer(256)
    lib.cuDeviceGet(ctypes.byref(dev), 0)
    lib.cuDeviceGetName(name, 256, dev)
    return True, "", name.value.decode(errors="replace")


_cuda_probe: tuple[bool, str, str] | None = None


def require_available(arch: str) -> ArchStatus:
    """``arch``'s status where it works here (``available_archs``; nothing started), else BackendUnavailable
    with the reason."""
    status = {s.name: s for s in available_archs()}[arch]
    if not status.available:
        raise BackendUnavailable(f"{arch} is unavailable: {status.reason}")
    return status


def available_archs() -> list[ArchStatus]:
    """Each backend with whether it works here and, if not, why. Does not touch the runtime."""
    global _cuda_probe
    if _cuda_probe is None:
        _cuda_probe = _probe_cuda()
    ok, reason, gpu = _cuda_probe
    cpu = cpu_name()
    return [
        ArchStatus("cpu-serial", True, "", cpu),
        ArchStatus("cpu-parallel", True, "", f"{cpu} ({cpu_count()} cores)"),
        ArchStatus("cuda", ok, reason, gpu),
    ]


def memory_available() -> tuple[int, str]:
    """Bytes that new buffers may take on the current backend, and where: the GPU's total memory on cuda, the
    host's available memory (MemAvailable) otherwise."""
    cur = _current
    if cur is not None and cur.arch == "cuda":
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            dev, total = ctypes.c_int(0), ctypes.c_size_t(0)
            lib.cuDeviceGet(ctypes.byref(dev), 0)
            if lib.cuDeviceTotalMem_v2(ctypes.byref(total), dev) == 0:
                return int(total.value), f"the GPU ({cur.device})"
        except (OSError, AttributeError):
            pass
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "host memory"
    except OSError:
        pass
    return 1 << 62, "memory"  # unknown: do not refuse


def check_memory(need: int, what: str) -> None:
    """Refuse, before allocating, buffers that would not fit (90% of what is available)."""
    avail, where = memory_available()
    if need > 0.9 * avail:
        raise ConfigError(f"{what} needs about {need / 2**30:.1f} GiB of buffers, more than the "
                          f"{0.9 * avail / 2**30:.1f} GiB {where} can give; use a smaller network or batch size")


def _check_thread() -> None:
    if _owner_thread is not None and threading.get_ident() != _owner_thread:
        raise RuntimeError("Taichi is bound to the thread that initialised it; call nncore from that thread")


def init(arch: str = "cpu-parallel", threads: int | None = None, pin: bool = True) -> RuntimeInfo:
    """(Re)initialise Taichi on ``arch``. Every ndarray made before this call becomes unusable. On
    cpu-parallel, Taichi's worker threads are pinned one to a core unless ``pin`` is False (nncore.pinning)."""
    global _current, _generation, _owner_thread, coarse_block, serial, stream_run
    if arch not in ARCHS:
        raise ConfigError(f"arch {arch!r} is unknown; choose one of {', '.join(ARCHS)}")
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise ConfigError(f"threads {threads!r} must be a positive integer")
    check_threads(threads)
    if arch == "cpu-serial" and threads not in (None, 1):
        raise ConfigError(f"threads {threads} does not fit cpu-serial, which runs one thread")
    status = require_available(arch)
    if arch == "cuda":
        n_threads = 0
        kwargs = dict(arch=ti.cuda)
        block = None
    else:
        n_threads = 1 if arch == "cpu-serial" else (threads or cpu_count())
        # Vector-typed locals stay LLVM vectors on the CPU (AVX/AVX-512 FMAs in the GEMM micro-kernels)
        # instead of being split into scalars.
        # Scheduling: by default Taichi cuts every parallel loop into one contiguous block per thread, each of
        # at least 512 iterations, so a loop of under 1,024 iterations (a GEMM's 16 tiles, a conv's 32 weight
        # gradient blocks, 256 rows of a batch) ran on one core whatever the thread count. Instead, loops are
        # cut into tasks of CPU_TASK iterations that free threads take in turn, and the kernels whose
        # iterations are long runs of work ask for one iteration per task (coarse_block).
        # Fast math off: with it, LLVM reassociates the GEMM micro-kernels' multiply-add chains across unrolled
        # iterations into trees that need more registers than AVX2 has, and spills (net-1h's step is 12% faster
        # without it). The kernels
        # vectorise by hand, so nothing relies on reassociation, and sums keep their written order.
        # opt_level 0: Taichi skips its whole-kernel common subexpression elimination (LLVM still runs its own),
        # whose time grows with the square of a kernel's size: CPU kernels compile several times faster, a
        # cooperative step (nncore.coop) most, and run as fast (docs/LOG.md, "opt_level 0 on the CPU").
        kwargs = dict(arch=ti.cpu, cpu_max_num_threads=n_threads, real_matrix_scalarize=False,
                      make_cpu_multithreading_loop=False, cpu_block_dim_adaptive=False,
                      default_cpu_block_dim=CPU_TASK, fast_math=False, opt_level=0)
        block = 1
    # Every option is passed again on each call: ti.init resets all of them to their defaults.
    # ti.init prints "[Taichi] Starting on arch=..." to stdout, which must stay clean for --jsonl -.
    before = pinning.thread_ids()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            ti.init(default_fp=ti.f32, default_ip=ti.i32, offline_cache=True, random_seed=0,
                    log_level=ti.ERROR, enable_fallback=False, **kwargs)
    except RuntimeError as exc:
        _current = None
        raise BackendUnavailable(f"{arch} is unavailable: {exc}") from None
    in_use = ti.lang.impl.current_cfg().arch
    if arch == "cuda" and in_use != ti.cuda:
        _current = None
        raise BackendUnavailable(f"cuda is unavailable: Taichi fell back to {in_use.name}")
    _generation += 1
    pinned = pinning.pin_workers(before, n_threads) if pin and n_threads > 1 else ()
    coarse_block, serial = block, n_threads == 1
    stream_run = 1 if block is None else STREAM_TASK
    _owner_thread = threading.get_ident()
    _current = RuntimeInfo(arch, n_threads, status.device, _generation, pinned)
    return _current


def current() -> RuntimeInfo | None:
    """The backend in use, or None before the first :func:`init`."""
    return _current


def ensure(arch: str = "cpu-parallel", threads: int | None = None) -> RuntimeInfo:
    """Initialise on ``arch`` unless the runtime already runs it with these threads."""
    cur = _current
    want = 1 if arch == "cpu-serial" else (0 if arch == "cuda" else (threads or cpu_count()))
    if cur is not None and cur.arch == arch and cur.threads == want:
        return cur
    return init(arch, threads)


def require() -> RuntimeInfo:
    """The runtime in use; initialises cpu-parallel if none is."""
    _check_thread()
    return _current if _current is not None else init()


def generation() -> int:
    """Increments with every :func:`init`; buffers remember the one they were made in."""
    return _generation


def sync() -> None:
    """Wait for every launched kernel to finish (needed before timing on cuda)."""
    ti.sync()
