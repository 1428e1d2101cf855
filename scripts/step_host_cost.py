"""Where a training step's time goes on the host: the layers' Python (record), the graph's cache key (key), the
graph's arguments read from the recording (args) and Taichi's compiled graph launching them (launch), per step;
and the first 5 steps' time (compiling included).

Usage: [LAYERLAB_FUSED_STEP=0|1] [LAYERLAB_STATIC_BOUNDS=0|1] [PROF=1] [N=200] python scripts/step_host_cost.py ARCH WORKLOADS BATCHES
e.g. python scripts/step_host_cost.py cuda net-1h,cnn64 64,1000

N steps run without a sync; "host" is the time to issue them, "step" includes the final sync. Where the host
is the bottleneck the two are equal; where the GPU is, the host runs ahead until the driver's launch queue is
full and then waits, and finishes early by what is still queued. PROF=1 turns on Taichi's kernel profiler and prints each
offloaded task's GPU time (the profiler's events slow the step itself).
"""
import collections
import os
import sys
import time

from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout too
from nncore import runtime, graph as G, cudagraph
from nncore.bench import POOL, plain_steps
from nncore.runtime import ti

PROF = os.environ.get("PROF") == "1"
if PROF:
    _orig = ti.init
    ti.init = lambda **kw: _orig(kernel_profiler=True, **kw)
arch, names, batches = sys.argv[1], sys.argv[2].split(","), [int(b) for b in sys.argv[3].split(",")]
N = int(os.environ.get("N", "200"))
runtime.init(arch)
acc = collections.defaultdict(float)


def wrap(owner, name, label):
    """Time every call of owner.name into acc[label]."""
    f = getattr(owner, name)

    def timed(*a, **k):
        t = time.perf_counter()
        r = f(*a, **k)
        acc[label] += time.perf_counter() - t
        return r
    setattr(owner, name, timed)


for nm, lab in [("record", "record"), ("_key", "key"), ("_args", "args"), ("_run_graph", "launch")]:
    wrap(G, nm, lab)
wrap(cudagraph.Replay, "run", "replay")

for name in names:
    for batch in batches:
        net, step = plain_steps(name, batch)
        starts = [(i * batch) % (POOL - batch + 1) for i in range(N)]
        t0 = time.perf_counter()
        for s in starts[:5]:
            step(s)
        runtime.sync()
        first = time.perf_counter() - t0
        if PROF:
            ti.profiler.clear_kernel_profiler_info()
        acc.clear()
        t0 = time.perf_counter()
        for s in starts:
            step(s)
        th = time.perf_counter() - t0
        runtime.sync()
        tt = time.perf_counter() - t0
        rec, lau = net.graphs.launches
        print(f"{name} b{batch} fused={net.graphs.fused} static={net.graphs.static} launches {rec}->{lau} "
              f"replays {net.graphs.replays}/{net.graphs.unreplayed}: "
              f"step {1e6*tt/N:.1f} us, host {1e6*th/N:.1f} us, "
              + ", ".join(f"{k} {1e6*v/N:.1f}" for k, v in acc.items()) + f"; first 5 steps {first:.2f} s", flush=True)
        if PROF:
            ti.profiler.print_kernel_profiler_info("count")
