"""Whether a training step's loops would launch cheaper as one persistent task with grid barriers (CUDA only).

Usage: N=4096 P=12 python scripts/persistent_probe.py

Taichi 1.7 launches each top-level loop of a kernel as a driver launch of its own, so a fused step of a dozen
loops pays a dozen launches (docs/PERFORMANCE.md, "What limits each kernel now"). This probe runs P dependent
element-wise phases over N floats two ways and checks they give identical results:
- as P top-level loops of one kernel (P offloaded tasks: today's fused step);
- as one top-level loop of one block per multiprocessor, each phase a grid-stride loop, a grid barrier between
  phases (one task). The barrier is a counter and a generation in a 2-int ndarray: the last block to arrive
  resets the counter and bumps the generation, the others spin on it. Every block must be resident at once, so
  the grid is exactly one block of 256 threads per multiprocessor (a thread never holds more than one iteration).
Prints microseconds per call, launched from Python and dispatched from a compiled graph.
"""
import ctypes
import os
import sys
import time

import numpy as np
import taichi as ti

ti.init(arch=ti.cuda, offline_cache=False, log_level=ti.WARN)
if ti.lang.impl.current_cfg().arch != ti.cuda:
    sys.exit("no CUDA")
_cuda = ctypes.CDLL("libcuda.so.1")
_n, _dev = ctypes.c_int(), ctypes.c_int()
_cuda.cuDeviceGet(ctypes.byref(_dev), 0)
_cuda.cuDeviceGetAttribute(ctypes.byref(_n), 16, _dev)  # CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
NB = _n.value
N = int(os.environ.get("N", 4096))
P = int(os.environ.get("P", 12))
T = 256
F1 = ti.types.ndarray(ti.f32, ndim=1)


@ti.func
def grid_barrier(bar: ti.template(), tid):
    # bar: (2,) i32, [arrived, generation]; every block of the grid must call it
    ti.simt.block.sync()
    if tid == 0:
        gen = ti.atomic_add(bar[1], 0)
        ti.simt.grid.memfence()
        if ti.atomic_add(bar[0], 1) == NB - 1:
            bar[0] = 0
            ti.simt.grid.memfence()
            ti.atomic_add(bar[1], 1)
        else:
            while ti.atomic_add(bar[1], 0) == gen:
                pass
        ti.simt.grid.memfence()
    ti.simt.block.sync()


@ti.func
def phase(dst: ti.template(), src: ti.template(), i, p: ti.template()):
    dst[i] = src[i] * 0.5 + src[(i * 13 + p) % N] * 0.25 + 1.0


@ti.kernel
def loops(a: F1, b: F1):
    for p in ti.static(range(P)):
        for i in range(N):
            phase(ti.static(b if p % 2 == 0 else a), ti.static(a if p % 2 == 0 else b), i, p)


@ti.kernel
def persistent(a: F1, b: F1, bar: ti.types.ndarray(ti.i32, ndim=1)):
    ti.loop_config(block_dim=T)
    for g in range(NB * T):
        for p in ti.static(range(P)):
            for k in range((N - g + NB * T - 1) // (NB * T)):
                phase(ti.static(b if p % 2 == 0 else a), ti.static(a if p % 2 == 0 else b), g + k * NB * T, p)
            grid_barrier(bar, g % T)


def per_call_us(f, n=200) -> float:
    f()
    ti.sync()
    t0 = time.perf_counter()
    for _ in range(n):
        f()
    ti.sync()
    return (time.perf_counter() - t0) / n * 1e6


def graph_of(kern, names):
    gb = ti.graph.GraphBuilder()
    gb.dispatch(kern, *[ti.graph.Arg(ti.graph.ArgKind.NDARRAY, n, ti.i32 if n == "bar" else ti.f32, ndim=1)
                        for n in names])
    return gb.compile()


def main() -> None:
    x0 = np.random.default_rng(0).random(N, dtype=np.float32)
    arrs = [ti.ndarray(ti.f32, N) for _ in range(4)]
    bar = ti.ndarray(ti.i32, 2)
    arrs[0].from_numpy(x0)
    arrs[2].from_numpy(x0)
    bar.fill(0)
    for _ in range(3):
        loops(arrs[0], arrs[1])
        persistent(arrs[2], arrs[3], bar)
    same = np.array_equal(arrs[0].to_numpy(), arrs[2].to_numpy())
    print(f"{NB} multiprocessors; N={N}, P={P}; identical after 3 calls: {same}")
    g1, g2 = graph_of(loops, ("a", "b")), graph_of(persistent, ("a", "b", "bar"))
    for _ in range(3):
        print("us per call, from Python: %d loops %.1f, persistent %.1f;  from a graph: %.1f, %.1f" % (
            P, per_call_us(lambda: loops(arrs[0], arrs[1])), per_call_us(lambda: persistent(arrs[2], arrs[3], bar)),
            per_call_us(lambda: g1.run({"a": arrs[0], "b": arrs[1]})),
            per_call_us(lambda: g2.run({"a": arrs[2], "b": arrs[3], "bar": bar}))))


if __name__ == "__main__":
    main()
