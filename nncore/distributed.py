"""Data-parallel training across processes (and GPUs) over MPI, through mpi4py.

Every rank is a process with its own Taichi runtime: on the CPU with (cores / ranks on this host) threads
unless told otherwise; on CUDA with one GPU, picked from the rank's index on its host (round-robin where
ranks outnumber GPUs) through ``CUDA_VISIBLE_DEVICES`` before the runtime starts.

Each global batch of B samples is cut into contiguous shards of B // N or B // N + 1 samples, the larger ones
on the lower ranks. Every rank computes its shard's mean-loss gradient into the network's flat gradient
buffer, scales it by shard / B, and one ``Allreduce`` (sum) over that buffer, staged through host memory,
gives every rank the whole batch's gradient (the host copies are direct: see ``_Staging``): each then takes the identical optimizer step, so the weights
stay equal on all ranks without ever being sent. One extra element of the reduced buffer carries stop
requests, so a stop asked of any rank ends every rank after the same step. Divergence checks, the epoch's
loss sum and the per-rank timing are small collectives at points every rank reaches in the same order;
rank 0 evaluates and reports.

Communication time is measured around the host staging and the ``Allreduce`` after a device sync: it
includes waiting for slower ranks, which is what a step loses to them.
"""
from __future__ import annotations

import os
import shutil
import socket
import sys
import time

import numpy as np

from . import runtime
from .errors import ConfigError, LayerlabError

INSTALL_HINT = "pip install 'layerlab[mpi]' (mpi4py and MPICH, from PyPI)"


class RankFailed(LayerlabError):
    """A rank failed where every rank learns of it (set-up): each exits with that rank's code and message."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def load_mpi():
    """mpi4py's MPI module, or a ConfigError saying how to install it."""
    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError, OSError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"distributed training needs mpi4py and an MPI library ({reason}); {INSTALL_HINT}") \
            from None
    return MPI


def find_mpiexec() -> str | None:
    """$LAYERLAB_MPIEXEC, else the mpiexec beside this Python (a venv with the mpich wheel), else PATH's."""
    if os.environ.get("LAYERLAB_MPIEXEC"):
        return os.environ["LAYERLAB_MPIEXEC"]
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else shutil.which("mpiexec")


def mpi_missing() -> str | None:
    """Why ranks cannot be launched here (with the install hint), or None. Looks without starting MPI in this
    process, which only launches."""
    import importlib.util

    if importlib.util.find_spec("mpi4py") is None:
        return f"mpi4py is not installed; {INSTALL_HINT}"
    if find_mpiexec() is None:
        return f"no mpiexec beside {sys.executable} or on PATH; {INSTALL_HINT}"
    return None


def launch_command(ranks: int, train_args: list[str]) -> tuple[list[str], dict]:
    """mpiexec running ``layerlab train TRAIN_ARGS --distributed`` as ``ranks`` ranks, and its environment:
    LAYERLAB_RANKS lets the ranks check they are one job of that size (an mpiexec of another MPI than
    mpi4py's would start that many separate one-rank runs)."""
    cmd = [find_mpiexec() or "mpiexec", "-n", str(ranks), sys.executable, "-m", "nncore.cli", *train_args,
           "--distributed"]
    env = {**os.environ, "LAYERLAB_RANKS": str(ranks)}
    if os.geteuid() == 0:
        # Open MPI's mpiexec refuses to start as root (containers often run as root) unless told twice; the user
        # who asked for --ranks asked for the run. (Other MPIs ignore these variables.)
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return cmd, env


def shard(batch: int, rank: int, size: int) -> tuple[int, int]:
    """(offset, length) of ``rank``'s part of a batch: contiguous, lengths differing by at most one."""
    q, r = divmod(batch, size)
    return rank * q + min(rank, r), q + (rank < r)


def _visible_gpus() -> list[str]:
    """The GPUs this process may use, without initialising CUDA (which would fix the choice)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d for d in env.split(",") if d.strip()]
    try:  # device nodes keep the host's numbers in a container; CUDA numbers what it sees from 0
        count = sum(1 for n in os.listdir("/dev") if n.startswith("nvidia") and n[6:].isdigit())
    except OSError:
        return []
    return [str(i) for i in range(count)]


class _Staging:
    """Copies a flat f32 ndarray to and from a host buffer directly: a memcpy on the CPU, the CUDA driver's
    synchronous copies (with the host buffer page-locked) on a GPU. Taichi's own ``to_numpy``/``from_numpy``
    run a kernel over a temporary device copy of the host array, copied both ways, each time; they remain the
    fallback where the direct route is not available."""

    def __init__(self, arr, host: np.ndarray):
        import ctypes

        from .runtime import ti

        self.arr, self.host, self.nbytes = arr, host, arr.shape[0] * 4
        self.direct, self._cuda = False, None
        try:
            self.ptr = int(ti.lang.impl.get_runtime().prog.get_ndarray_data_ptr_as_int(arr.arr))
        except Exception:  # an internal Taichi entry point: fall back if it ever goes
            return
        if runtime.current().arch == "cuda":
            try:
                cuda = ctypes.CDLL("libcuda.so.1")
                for name, args in (("cuMemcpyDtoH_v2", (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t)),
                                   ("cuMemcpyHtoD_v2", (ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t)),
                                   ("cuMemHostRegister_v2", (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint)),
                                   ("cuMemHostUnregister", (ctypes.c_void_p,))):
                    getattr(cuda, name).argtypes = args
            except (OSError, AttributeError):
                return
            self._cuda = cuda
            # Page-locked if it can be (faster copies); undone when this goes.
            self._pinned = cuda.cuMemHostRegister_v2(host.ctypes.data, host.nbytes, 0) == 0
        else:
            self._memmove = ctypes.memmove
        self.direct = self._proven()

    def _proven(self) -> bool:
        """Try the direct route once on a known pattern (a current CUDA context, a real data pointer) before
        trusting it; the ndarray's contents are put back either way."""
        n = self.arr.shape[0]
        saved = self.arr.to_numpy()
        pattern = (np.arange(n, dtype=np.float32) % 251.0) - 125.5
        self.arr.from_numpy(pattern)
        self.direct = True
        self.down()
        ok = self.direct and np.array_equal(self.host[:n], pattern)
        if ok:
            self.host[:n] = saved
            self.up()
            ok = self.direct and np.array_equal(self.arr.to_numpy(), saved)
        if not ok:
            self.direct = False
            self.arr.from_numpy(saved)
        self.host[:n] = 0
        return ok

    def __del__(self):
        if self._cuda is not None and getattr(self, "_pinned", False):
            self._cuda.cuMemHostUnregister(self.host.ctypes.data)

    def down(self) -> None:
        n = self.arr.shape[0]
        if not self.direct:
            self.host[:n] = self.arr.to_numpy()
        elif self._cuda is not None:
            if self._cuda.cuMemcpyDtoH_v2(self.host.ctypes.data, self.ptr, self.nbytes) != 0:
                self.direct = False
                self.down()
        else:
            self._memmove(self.host.ctypes.data, self.ptr, self.nbytes)

    def up(self) -> None:
        n = self.arr.shape[0]
        if not self.direct:
            self.arr.from_numpy(self.host[:n])
        elif self._cuda is not None:
            if self._cuda.cuMemcpyHtoD_v2(self.ptr, self.host.ctypes.data, self.nbytes) != 0:
                self.direct = False
                self.up()
        else:
            self._memmove(self.ptr, self.host.ctypes.data, self.nbytes)


class Cluster:
    """This process's place among the ranks, and the collectives training needs."""

    def __init__(self, comm=None):
        self.MPI = MPI = load_mpi()
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        node = self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
        self.local_rank, self.local_size = node.Get_rank(), node.Get_size()
        node.Free()
        self.host = socket.gethostname()
        self.gpu: str | None = None
        self.comm_s = 0.0  # communication seconds, reset by the trainer every epoch
        self._staging: _Staging | None = None

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    def shard(self, batch: int) -> tuple[int, int]:
        return shard(batch, self.rank, self.size)

    def threads_for(self, arch: str, threads: int | None) -> int | None:
        """cpu-parallel ranks on one host share its cores unless a thread count was given."""
        if arch == "cpu-parallel" and threads is None:
            return max(1, runtime.cpu_count() // self.local_size)
        return threads

    def pick_gpu(self) -> str | None:
        """Restrict this process to its GPU; call before the CUDA runtime starts."""
        gpus = _visible_gpus()
        if gpus:
            self.gpu = gpus[self.local_rank % len(gpus)]
            os.environ["CUDA_VISIBLE_DEVICES"] = self.gpu
        return self.gpu

    # -- collectives -----------------------------------------------------------------------------------------
    def allreduce_grads(self, grads, scale: float, stop: bool) -> bool:
        """Sum ``scale * grads`` over the ranks into ``grads`` (a flat f32 ndarray); True if any rank asked to
        stop. Times itself from after a device sync, so the time is communication (and waiting) only."""
        if self.size == 1:  # nothing to sum: no host round trip either
            return stop
        n = grads.shape[0]
        if self._staging is None or self._staging.arr is not grads:  # once per run, outside the timing
            self._staging = _Staging(grads, np.zeros(n + 1, np.float32))
        runtime.sync()
        t0 = time.perf_counter()
        buf = self._staging.host
        self._staging.down()
        buf[:n] *= np.float32(scale)
        buf[n] = 1.0 if stop else 0.0
        self.comm.Allreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)
        self._staging.up()
        self.comm_s += time.perf_counter() - t0
        return bool(buf[n] > 0)

    def first_steps(self, values: list[int]) -> list[int]:
        """Per entry, the smallest non-zero step any rank reported (0 where none did)."""
        none = np.iinfo(np.int64).max
        out = np.array([v if v else none for v in values], np.int64)
        self.comm.Allreduce(self.MPI.IN_PLACE, out, op=self.MPI.MIN)
        return [0 if v == none else int(v) for v in out]

    def sum_floats(self, values: list[float]) -> list[float]:
        out = np.array(values, np.float64)
        self.comm.Allreduce(self.MPI.IN_PLACE, out, op=self.MPI.SUM)
        return [float(v) for v in out]

    def gather(self, obj):
        """Every rank's ``obj`` on rank 0 (a list in rank order); None elsewhere."""
        return self.comm.gather(obj, root=0)

    def allgather(self, obj) -> list:
        return self.comm.allgather(obj)

    def barrier(self) -> None:
        self.comm.Barrier()

    def abort(self, code: int) -> None:
        """End every rank now (for a failure only this rank saw: the others would wait for it forever)."""
        self.comm.Abort(code)
