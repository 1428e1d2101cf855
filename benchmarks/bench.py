"""The seed-workload benchmark as a script: the same as ``layerlab bench``, with the same options.

    python benchmarks/bench.py [--arch cpu-parallel|cpu-serial|cuda] [--workloads net-1h,cnn64] [--batch 256]
                               [--steps N] [--repeats N] [--warmup N] [--round-warmup N] [--threads N]
                               [--no-torch] [--json FILE|-]

Trains net-1h, net-2h and the cnn with 32/64/256 filters for a fixed number of steps after warm-up (compile
time reported on its own), prints samples/s, ms/step, GFLOP/s and the per-layer breakdown, and runs the same
network on the same batches in PyTorch where it is installed (the `bench` extra), with the ratio. Method and
results: docs/PERFORMANCE.md.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

from nncore.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
