"""What one kernel launch costs on the current arch: Python launches against one compute-graph run.

Usage: python scripts/launch_cost.py [cpu|cuda]. Prints microseconds per launch for a kernel of 5 ndarray
and 3 scalar arguments doing almost nothing, launched from Python, and dispatched 10 times in a ti.graph.
"""
import sys
import time

import numpy as np
import taichi as ti

arch = sys.argv[1] if len(sys.argv) > 1 else "cpu"
ti.init(arch=ti.cuda if arch == "cuda" else ti.cpu, offline_cache=False, log_level=ti.WARN)
if arch == "cuda" and ti.lang.impl.current_cfg().arch != ti.cuda:
    sys.exit("no CUDA")
F1 = ti.types.ndarray(dtype=ti.f32, ndim=1)
F2 = ti.types.ndarray(dtype=ti.f32, ndim=2)


@ti.kernel
def k(a: F1, b: F1, c: F2, d: F2, e: F2, x: ti.i32, y: ti.i32, z: ti.f32):
    for i in range(32):
        a[i] = b[i] + c[0, i] * z + d[0, i] + e[0, i] + x + y


arrs = [ti.ndarray(ti.f32, (1024,)) for _ in range(2)] + [ti.ndarray(ti.f32, (4, 1024)) for _ in range(3)]
args = [*arrs, 1, 2, 0.5]
sync = ti.sync


def per_launch_python(n=2000):
    for _ in range(50):
        k(*args)
    sync()
    t = time.perf_counter()
    for _ in range(n):
        k(*args)
    sync()
    return (time.perf_counter() - t) / n * 1e6


sym = [ti.graph.Arg(ti.graph.ArgKind.NDARRAY, n, ti.f32, ndim=1) for n in "ab"]
sym += [ti.graph.Arg(ti.graph.ArgKind.NDARRAY, n, ti.f32, ndim=2) for n in "cde"]
sym += [ti.graph.Arg(ti.graph.ArgKind.SCALAR, "x", ti.i32), ti.graph.Arg(ti.graph.ArgKind.SCALAR, "y", ti.i32),
        ti.graph.Arg(ti.graph.ArgKind.SCALAR, "z", ti.f32)]
g = ti.graph.GraphBuilder()
for _ in range(10):
    g.dispatch(k, *sym)
graph = g.compile()
gargs = dict(zip("abcdexyz", args))


def per_launch_graph(n=200):
    for _ in range(10):
        graph.run(gargs)
    sync()
    t = time.perf_counter()
    for _ in range(n):
        graph.run(gargs)
    sync()
    return (time.perf_counter() - t) / n / 10 * 1e6


for rep in range(3):
    print(f"{arch} rep {rep}: python launch {per_launch_python():.1f} us, graph dispatch {per_launch_graph():.1f} us")
a = arrs[0].to_numpy()
assert np.allclose(a[:32], 0.0 + 0 + 3), a[:4]
print("ok")
