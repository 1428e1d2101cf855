"""Where a CUDA (or CPU) training step's time goes: launch sequence, graph overheads, per-kernel device time.

Usage: python scripts/profile_step.py ARCH WORKLOAD BATCH   (e.g. cuda net-1h 64)
With PROF=1 TI_KERNEL_PROFILER=1 in the environment it also prints Taichi's kernel profiler table for 100
steps launched from Python (each offloaded task of a kernel on its own line; the profiler syncs after every
task, so its times are device times, not the step's wall time).

Prints microseconds per step, "issue/synced" (the time to issue 200 steps, and to the device sync after them):
recording the launches alone, recording plus the graph's arguments, replaying a fixed graph, the whole graph
step, and the same step launched kernel by kernel from Python.
"""
import sys, time, os
from nncore import runtime
from nncore.bench import workload_model, _data, device_pool
from nncore.network import Sequential
from nncore.optim import SGD
from nncore.kernels.data import gather_rows
from nncore import graph as G
from nncore.runtime import ti
arch, name, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
runtime.init(arch)
model = workload_model(name)
net = Sequential.from_spec(model); opt = SGD(net.n_params, lr=0.01)
net.graphs = G.StepGraphs(enabled=True)
ws = net.workspace(batch)
x, y = _data(model)
xs, ys, order = device_pool(x, y)
gather = lambda: gather_rows(ws.x, ws.labels, xs, ys, order, 0)
step = lambda: net.train_step(ws, opt, gather=gather)
def fn():  # the step's launches one by one (recorded, below: its launches, not its graph)
    enabled, net.graphs.enabled = net.graphs.enabled, False
    try:
        net.train_step(ws, opt, gather=gather)
    finally:
        net.graphs.enabled = enabled
for _ in range(5): step()
runtime.sync()
def t(f, n=200):
    best = []
    for _ in range(3):
        runtime.sync(); t0 = time.perf_counter()
        for _ in range(n): f()
        t1 = time.perf_counter(); runtime.sync(); t2 = time.perf_counter()
        best.append((1e6 * (t1 - t0) / n, 1e6 * (t2 - t0) / n))
    return " ".join(f"{a:.0f}/{b:.0f}" for a, b in best)
calls = G.record(fn)
print(f"{name} b{batch}: {len(calls)} kernels: " + ", ".join(k._primal.func.__name__ for k, _, _ in calls))
graph, plan, _ = net.graphs._graphs[G._key(calls, net.graphs.fused, net.graphs.static)]
vals = G._values(G.apply_plan(plan, calls) if plan else calls)
print(f"launched as {net.graphs.launches[1]} kernel(s){' (fused: graph.fuse_plan)' if plan else ''}")
print("us per step issue/synced:")
print("  record only          ", t(lambda: G.record(fn)))
print("  record+key+values    ", t(lambda: (lambda c: (G._key(c, net.graphs.fused, net.graphs.static), G._values(c)))(G.record(fn))))
print("  graph.run fixed args ", t(lambda: graph.run(vals)))
print("  full graph step      ", t(step))
net.graphs.enabled = False
print("  python launches      ", t(step))
if os.environ.get("PROF"):
    ti.profiler.clear_kernel_profiler_info()
    for _ in range(100): step()
    runtime.sync()
    ti.profiler.print_kernel_profiler_info("count")
