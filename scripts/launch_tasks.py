"""What a launch costs by the number of top-level loops in the kernel (each an offloaded task Taichi launches
on its own), and by where the loops' bounds come from: an argument, the ndarray's shape, a template.

Usage: python scripts/launch_tasks.py [cuda|cpu]. Prints microseconds per launch from Python (500 launches of
a kernel over a 64x1024 ndarray): time to issue them, and total with the final sync. Back to back, the launches
can fill the driver's queue, so "host" may include waiting on the GPU: host and GPU time mixed.
"""
import sys
import time

import taichi as ti

ti.init(arch=ti.cuda if sys.argv[1:] == ["cuda"] else ti.cpu, log_level=ti.ERROR)
F = ti.types.ndarray(dtype=ti.f32, ndim=2)


@ti.kernel
def dyn(a: F, n: ti.i32):
    for r in ti.static(range(12)):
        for i in range(n):
            a[i // 1024, i % 1024] += 1.0


@ti.kernel
def nd(a: F):
    for r in ti.static(range(12)):
        for i, j in a:
            a[i, j] += 1.0


@ti.kernel
def const(a: F, n: ti.template()):
    for r in ti.static(range(12)):
        for i in range(n):
            a[i // 1024, i % 1024] += 1.0


@ti.kernel
def one(a: F, n: ti.template()):
    for i in range(n):
        a[i // 1024, i % 1024] += 1.0


a = ti.ndarray(ti.f32, (64, 1024))
for name, f, args in [("dyn", dyn, (a, 65536)), ("ndrange-shape", nd, (a,)), ("const", const, (a, 65536)), ("one-loop", one, (a, 65536))]:
    for _ in range(20):
        f(*args)
    ti.sync()
    t0 = time.perf_counter()
    for _ in range(500):
        f(*args)
    th = time.perf_counter() - t0
    ti.sync()
    tt = time.perf_counter() - t0
    print(f"{name}: host {th/500*1e6:.1f} us/launch, total {tt/500*1e6:.1f}")
