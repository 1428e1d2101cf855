"""The GPU time of each kernel inside one CUDA training step: layerlab's step (its CUDA graph replayed, as the
bench runs it) and PyTorch's whole step captured in a CUDA graph (the bench's ``--torch-mode graph``), each in a
process of its own, both timed by CUPTI through ``torch.profiler``. Where ``scripts/step_host_cost.py`` (PROF=1)
times each task launched one by one, this times them as they run in the replayed graph.

Usage: python scripts/step_kernels.py WORKLOAD BATCH [STEPS]   (e.g. net-1h 1000; needs PyTorch with CUDA)

Prints, for each side, the wall time a step (200 steps after 30 of warm-up), the kernels' summed time a step,
and each kernel's time a step (STEPS profiled steps, default 50), largest first. layerlab's kernels are named
after the fused step's tasks (``fused_step_<graph>_..._kernel_<task>``), in the order the step runs them.
"""
import collections
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout too


def _profile(step, sync, steps: int) -> tuple[float, dict, collections.Counter]:
    from torch.profiler import ProfilerActivity, profile

    for i in range(30):
        step(i)
    sync()
    t0 = time.perf_counter()
    for i in range(200):
        step(i)
    sync()
    wall = (time.perf_counter() - t0) / 200 * 1e6
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(steps):
            step(i)
        sync()
    total, count = collections.defaultdict(float), collections.Counter()
    for e in prof.events():
        if e.device_type.name == "CUDA":
            total[e.name] += getattr(e, "device_time", None) or e.cuda_time
            count[e.name] += 1
    return wall, total, count


def _ours(name: str, batch: int, spec_file: str):
    import torch  # (CUDA's profiler interface first)

    torch.cuda.init()
    from nncore import runtime
    from nncore.bench import POOL, plain_steps, workload_model
    from nncore.peer import layer_specs

    runtime.init("cuda")
    model = workload_model(name)
    net, step = plain_steps(name, batch)
    with open(spec_file, "wb") as f:
        pickle.dump({"specs": layer_specs(net), "loss": model["loss"], "shape": tuple(model["input"]),
                     "n_out": int(net.out_shape[0])}, f)
    return (lambda i: step((i * batch) % (POOL - batch + 1))), runtime.sync


def _torch(batch: int, spec_file: str):
    import torch

    from nncore.interop import torch_from_specs, torch_loss

    with open(spec_file, "rb") as f:
        p = pickle.load(f)
    torch.manual_seed(0)
    model = torch_from_specs(p["specs"]).cuda()
    crit, targets = torch_loss(p["loss"])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    sx = torch.rand((batch, *p["shape"]), device="cuda")
    sy = targets(torch.randint(0, p["n_out"], (batch,)).numpy(), p["n_out"]).cuda()

    def train() -> None:
        crit(model(sx), sy).backward()
        opt.step()
    side = torch.cuda.Stream()  # warm-up on a side stream, then capture, as the bench's peer does
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            train()
    torch.cuda.current_stream().wait_stream(side)
    opt.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        train()
    return (lambda i: graph.replay()), torch.cuda.synchronize


def _child(who: str, name: str, batch: int, steps: int, spec_file: str) -> None:
    step, sync = _ours(name, batch, spec_file) if who == "layerlab" else _torch(batch, spec_file)
    wall, total, count = _profile(step, sync, steps)
    print(f"{who} {name} batch {batch}: {wall:.1f} us a step (wall), kernels {sum(total.values()) / steps:.1f} us "
          f"a step, {sum(count.values()) / steps:.0f} kernels a step")
    for k, v in sorted(total.items(), key=lambda kv: -kv[1]):
        print(f"  {v / steps:8.1f} us  x{count[k] / steps:.0f}  {k[:140]}")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
        return 0
    if len(sys.argv) < 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    name, batch = sys.argv[1], int(sys.argv[2])
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 50
    with tempfile.TemporaryDirectory() as tmp:
        spec_file = os.path.join(tmp, "specs.pkl")
        for who in ("layerlab", "pytorch"):  # (PyTorch's side reads the network the first side wrote)
            rc = subprocess.call([sys.executable, __file__, "--child", who, name, str(batch), str(steps), spec_file])
            if rc:
                return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
