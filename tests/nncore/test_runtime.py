"""Backends: names, availability with reasons, no silent CUDA fallback, thread counts, worker pinning."""
import os

import pytest

from nncore import runtime
from nncore.errors import BackendUnavailable, ConfigError


def test_available_archs_lists_all_three_with_reasons():
    status = {s.name: s for s in runtime.available_archs()}
    assert list(status) == ["cpu-serial", "cpu-parallel", "cuda"]
    assert status["cpu-serial"].available and status["cpu-parallel"].available
    assert status["cuda"].available or status["cuda"].reason  # unavailable always says why


def test_cuda_is_refused_not_faked_where_none_works():
    if {s.name: s for s in runtime.available_archs()}["cuda"].available:
        pytest.skip("this machine has a working GPU; the refusal path cannot be exercised here")
    before = runtime.current()
    with pytest.raises(BackendUnavailable, match="cuda is unavailable: "):
        runtime.init("cuda")
    assert runtime.current() == before  # the old runtime is untouched


def test_thread_counts():
    assert runtime.init("cpu-serial").threads == 1
    assert runtime.init("cpu-parallel").threads == runtime.cpu_count()
    assert runtime.init("cpu-parallel", threads=3).threads == 3
    assert runtime.ti.lang.impl.current_cfg().cpu_max_num_threads == 3
    runtime.init("cpu-parallel")


@pytest.mark.parametrize("arch,threads,needle", [("gpu", None, "arch 'gpu' is unknown"),
                                                 ("cpu-parallel", 0, "threads 0"),
                                                 ("cpu-serial", 2, "threads 2 does not fit cpu-serial")])
def test_bad_arguments(arch, threads, needle):
    with pytest.raises(ConfigError, match=needle):
        runtime.init(arch, threads)


@pytest.mark.gpu
def test_cuda_runs_on_the_gpu():
    info = runtime.init("cuda")
    assert runtime.ti.lang.impl.current_cfg().arch == runtime.ti.cuda
    assert info.device
    runtime.init("cpu-parallel")


def test_collecting_an_old_runtimes_ndarrays_leaves_the_new_ones_alone():
    # Taichi deletes a collected ndarray through the current program by address; after a re-init those
    # addresses are reused by the new program's ndarrays, which were then freed under their owners
    # ("argument not found" at the next launch, an index error, or garbage). Address reuse is up to the
    # allocator, so the scenario runs a few times.
    import numpy as np

    ti = runtime.ti
    for _ in range(4):
        runtime.init("cpu-serial")
        old = [ti.ndarray(ti.f32, shape=(3, 5)) for _ in range(200)]
        runtime.init("cpu-serial")
        new = [ti.ndarray(ti.f32, shape=(3, 5)) for _ in range(200)]
        for i, arr in enumerate(new):
            arr.from_numpy(np.full((3, 5), i, np.float32))
        del old  # (a freed one's memory is soon reused: by these, for one)
        other = [ti.ndarray(ti.i32, shape=(7,)) for _ in range(200)]
        assert [(arr.to_numpy().shape, float(arr.to_numpy().sum())) for arr in new] == \
            [((3, 5), 15.0 * i) for i in range(200)]
        assert all(arr.shape == (7,) for arr in other)
    runtime.init("cpu-parallel")


def _cpu_ticks(tid: int) -> int:
    fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 if hasattr(os, "sched_getaffinity") else True,
                    reason="pinning needs Linux and at least 2 cores")
def test_cpu_parallel_pins_the_threads_that_run_parallel_loops_one_to_a_core(monkeypatch):
    # The pinned threads must be Taichi's pool workers: the threads that gain CPU time while a parallel loop
    # runs long tasks. Pinning the wrong threads would leave the workers free to pile onto one core.
    monkeypatch.delenv("LAYERLAB_PIN", raising=False)
    ti = runtime.ti
    before = set(int(t) for t in os.listdir("/proc/self/task"))
    info = runtime.init("cpu-parallel", threads=2)
    cores = sorted(os.sched_getaffinity(0))
    assert info.pinned == (cores[0], cores[1])
    new = sorted(int(t) for t in os.listdir("/proc/self/task") if int(t) not in before)
    pinned = [t for t in new if os.sched_getaffinity(t) in ({cores[0]}, {cores[1]})]
    assert len(pinned) == 2 and {frozenset(os.sched_getaffinity(t)) for t in pinned} == \
        {frozenset({cores[0]}), frozenset({cores[1]})}

    @ti.kernel
    def spin(out: ti.types.ndarray(dtype=ti.f32, ndim=1), n: ti.i32):
        ti.loop_config(block_dim=1)
        for t in range(out.shape[0]):
            x = 1.0 + t
            for _ in range(n):
                x = ti.sqrt(x + 1.0)
            out[t] = x

    out = ti.ndarray(ti.f32, shape=(8,))
    spin(out, 10)
    ti.sync()
    ticks = {t: _cpu_ticks(t) for t in new}
    spin(out, 20_000_000)  # eight tasks of ~0.1 s: both workers take some
    ti.sync()
    busy = {t for t in new if _cpu_ticks(t) - ticks[t] >= 2}
    assert busy == set(pinned)
    monkeypatch.setenv("LAYERLAB_PIN", "0")
    assert runtime.init("cpu-parallel", threads=2).pinned == ()
    monkeypatch.delenv("LAYERLAB_PIN")
    runtime.init("cpu-parallel")


def test_compile_errors_still_point_at_their_own_line():
    # nncore memoises the source-position text Taichi builds for every AST node (runtime._cache_source_positions):
    # two kernels with the same mistake at different places must each be reported where theirs is.
    ti = runtime.ti
    runtime.ensure("cpu-serial")

    @ti.kernel
    def first(a: ti.types.ndarray(dtype=ti.f32, ndim=1)):
        for i in range(2):
            a[i] = undefined_one  # noqa: F821

    @ti.kernel
    def second(a: ti.types.ndarray(dtype=ti.f32, ndim=1)):  # the same place within its function as first's
        for i in range(2):
            a[i] = undefined_two  # noqa: F821

    arr = ti.ndarray(ti.f32, shape=(2,))
    for kern, name in ((first, "undefined_one"), (second, "undefined_two")):
        with pytest.raises(ti.TaichiNameError) as err:
            kern(arr)
        lines = str(err.value).splitlines()
        where = next(line for line in lines if line.strip().startswith("File "))
        assert f"in {kern.__name__}:" in where
        line_no = int(where.split("line ")[1].split(",")[0])
        assert name in open(__file__).read().splitlines()[line_no - 1]
    runtime.init("cpu-parallel")


def test_whether_taichi_emits_avx512_is_probed_once_and_kept(monkeypatch, tmp_path):
    """jit_avx512: no probe on a CPU without AVX-512; otherwise one probe process whose answer is kept per
    machine (a second call starts none), a damaged cache file probed again, and a probe that fails leaves the
    decision to the CPU's flags."""
    import subprocess

    monkeypatch.setattr("platformdirs.user_cache_dir", lambda *a, **k: str(tmp_path))
    calls = []
    real_run = subprocess.run

    def run(*args, **kwargs):
        calls.append(args)
        return real_run(*args, **kwargs)

    monkeypatch.setattr(subprocess, "run", run)
    flags = runtime.cpu_flags()
    monkeypatch.setattr(runtime, "cpu_flags", lambda: frozenset({"fma", "avx2"}))
    assert runtime.jit_avx512() is False and calls == []
    monkeypatch.setattr(runtime, "cpu_flags", lambda: flags | {"avx512f"})
    first = runtime.jit_avx512()
    assert len(calls) == 1 and isinstance(first, bool)
    assert runtime.jit_avx512() is first and len(calls) == 1  # (kept)
    cache = tmp_path / "jit-avx512.json"
    cache.write_text("{not json")
    assert runtime.jit_avx512() is first and len(calls) == 2  # (probed again, and kept again)
    assert runtime.jit_avx512() is first and len(calls) == 2
    cache.unlink()
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(subprocess.TimeoutExpired("x", 1)))
    assert runtime.jit_avx512() is True  # (no answer: the flags say AVX-512)
    assert not cache.exists()


def test_the_probe_finds_the_registers_taichi_uses(monkeypatch, tmp_path):
    """The probe's kernel, compiled by Taichi here, uses AVX-512's zmm registers exactly where jit_avx512 says
    so, and otherwise 256-bit ymm ones (every CPU this runs on has AVX2): read from the machine code directly."""
    import subprocess
    import sys

    (tmp_path / "probe.py").write_text(runtime._JIT_PROBE)
    subprocess.run([sys.executable, "probe.py"], cwd=tmp_path, capture_output=True, check=True, timeout=120)
    code = "".join(p.read_text() for p in tmp_path.glob("taichi_kernel_cpu*.s"))
    assert "vfmadd" in code or "vmulps" in code
    monkeypatch.setattr("platformdirs.user_cache_dir", lambda *a, **k: str(tmp_path / "cache"))
    assert runtime.jit_avx512() == ("zmm" in code)
    assert ("zmm" in code) or ("ymm" in code)
