"""The first Linear of net-1h (784 -> 1024) on CUDA: layerlab's products against cuBLAS's (through PyTorch).

Usage: python scripts/first_linear.py [--batch 1000] [--rounds 3] [--json FILE]

For each batch: the forward product (with bias and sigmoid, as net-1h runs it) and the weight gradient
(dW = dz^T x and the bias gradient), each run 200 times as compute-graph dispatches (nncore.graph, 50 to a
graph), whose launches from C++ cost ~20 us each, under the product's GPU time from batch 256 up, so the wall
time per product is the GPU's (at batch 64 it is an upper bound); median of the rounds. In a PyTorch process of
its own, the same products (x @ W^T + b then sigmoid; dz^T @ x) timed with CUDA events around 200 back-to-back
launches, FP32 with TF32 off (at batch 64 and 256 PyTorch's launches, ~20 us each, set that pace too). Rounds
alternate between the two so drift hits both. Prints GFLOP/s of each (2·B·IN·OUT per product), and the wall time
per layerlab launch from Python, which below batch 1000 is mostly Taichi's launch cost (this script's measure
of the products until 2026-11-23). A product launched alone has run-time loop bounds; inside the fused
training step, with constant bounds, it runs somewhat faster.
"""
import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout too
IN, OUT, REPS = 784, 1024, 200

TORCH = r"""
import json, sys, torch
torch.backends.cuda.matmul.allow_tf32 = False
b, reps = int(sys.argv[1]), int(sys.argv[2])
x = torch.rand(b, 784, device="cuda"); w = torch.randn(1024, 784, device="cuda") * 0.03
bias = torch.zeros(1024, device="cuda"); dz = torch.randn(b, 1024, device="cuda")
def fwd(): torch.sigmoid(torch.addmm(bias, x, w.t()))
def dw(): dz.t() @ x; dz.sum(0)
out = {}
for name, f in (("forward", fwd), ("dweight", dw)):
    for _ in range(20): f()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(); s.record()
    for _ in range(reps): f()
    e.record(); torch.cuda.synchronize()
    out[name] = s.elapsed_time(e) / 1e3 / reps
print(json.dumps(out))
"""


def torch_round(batch: int) -> dict:
    done = subprocess.run([sys.executable, "-c", TORCH, str(batch), str(REPS)], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", default="1000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()

    try:
        import numpy as np

        from nncore import runtime
        from nncore.errors import BackendUnavailable
        from nncore.graph import StepGraphs
        from nncore.kernels import gemm_cuda as G
        from nncore.runtime import ti
    except ModuleNotFoundError as e:
        sys.exit(f"first_linear.py: {e.name} is not installed here: install layerlab first (pip install -e .)")

    try:
        runtime.init("cuda")
    except BackendUnavailable as e:
        sys.exit(f"first_linear.py measures the GPU: {e}")
    rng = np.random.default_rng(0)
    params = ti.ndarray(ti.f32, (OUT * IN + OUT,))
    params.from_numpy((rng.standard_normal(OUT * IN + OUT) * 0.03).astype(np.float32))
    dparams = ti.ndarray(ti.f32, (OUT * IN + OUT,))
    rows = []
    graphs = StepGraphs(enabled=True, fused=False)  # dispatches as recorded, not fused into one kernel
    for batch in [int(b) for b in args.batch.split(",")]:
        x, out, dout = (ti.ndarray(ti.f32, s) for s in ((batch, IN), (batch, OUT), (batch, OUT)))
        x.from_numpy(rng.random((batch, IN), dtype=np.float32))
        dout.from_numpy(rng.standard_normal((batch, OUT)).astype(np.float32))
        ours = {
            "forward": lambda: G.linear_forward_gpu(out, x, params, 0, OUT * IN, 2),  # noqa: B023
            "dweight": lambda: G.linear_dweight_tiled(dparams, dout, out, x, 0, OUT * IN, 2,  # noqa: B023
                                                      G.rows_per_thread(OUT, IN) or 4),
        }
        mine = {k: [] for k in ours}
        wall = {k: [] for k in ours}
        theirs = {k: [] for k in ours}
        for _ in range(args.rounds):
            for name, f in ours.items():
                for _ in range(20):
                    f()
                runtime.sync()
                t = time.perf_counter()
                for _ in range(REPS):
                    f()
                runtime.sync()
                wall[name].append((time.perf_counter() - t) / REPS)
                fifty = lambda: [f() for _ in range(50)]  # noqa: E731,B023
                graphs.run(fifty)  # (builds the graph)
                if graphs.fallbacks or graphs.unfused:  # launched one by one: not what this column says
                    sys.exit("first_linear.py: the products' compute graph could not be built")
                runtime.sync()
                t = time.perf_counter()
                for _ in range(REPS // 50):
                    graphs.run(fifty)
                runtime.sync()
                mine[name].append((time.perf_counter() - t) / (REPS // 50 * 50))
            for name, s in torch_round(batch).items():
                theirs[name].append(s)
        flops = 2 * batch * IN * OUT
        for name in ours:
            a, b = statistics.median(mine[name]), statistics.median(theirs[name])
            rows.append({"batch": batch, "product": name, "layerlab_us": a * 1e6, "cublas_us": b * 1e6,
                         "layerlab_gflops": flops / a / 1e9, "cublas_gflops": flops / b / 1e9,
                         "layerlab_launch_wall_us": statistics.median(wall[name]) * 1e6})
    print(f"{'batch':>5} {'product':>8} {'layerlab us':>12} {'GFLOP/s':>8} {'cuBLAS us':>10} {'GFLOP/s':>8} {'ratio':>6}"
          f" {'launch wall us':>15}")
    for r in rows:
        print(f"{r['batch']:>5} {r['product']:>8} {r['layerlab_us']:>12.1f} {r['layerlab_gflops']:>8.0f} "
              f"{r['cublas_us']:>10.1f} {r['cublas_gflops']:>8.0f} {r['layerlab_gflops'] / r['cublas_gflops']:>6.2f}"
              f" {r['layerlab_launch_wall_us']:>15.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": "cuda", "reps": REPS, "rounds": args.rounds, "layerlab_timing": "graph dispatches",
                       "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
