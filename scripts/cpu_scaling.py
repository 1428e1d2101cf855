"""cpu-parallel over cpu-serial, both measured in the same run, next to PyTorch's own 2-threads-over-1.

    python scripts/cpu_scaling.py [--workloads net-1h,cnn64] [--batch 256] [--steps 5] [--rounds 5]

On a shared VM the second core's speed drifts from one minute to the next (scripts/cpu_ceilings.py), so two
separate `layerlab bench` runs can compare a good minute against a bad one. Here each round times cpu-serial
and cpu-parallel back to back (a runtime re-initialisation between them; compile time excluded by warm-up
steps right before the round), and PyTorch on 1 and on all threads the same way (each round after
bench.ROUND_WARMUP untimed steps), on the same network, weights and batches, each in a process of its own
(nncore.peer: layerlab's pinned workers once slowed an in-process PyTorch up to 12x).
Prints the medians over the rounds and the ratios: PyTorch's ratio is what this machine gives a mature
library for the same work.
"""
import argparse
import statistics

from nncore import bench, runtime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", default="net-1h,cnn64")
    ap.add_argument("--batch", default="256")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    use_torch = bench.torch_available()
    n = runtime.cpu_count()
    print(f"{'workload':<9} {'batch':>5} {'serial':>9} {'parallel':>9} {'speedup':>8}"
          + (f" {'torch 1t':>9} {f'torch {n}t':>9} {'speedup':>8}" if use_torch else ""))
    for name in args.workloads.split(","):
        for batch in (int(b) for b in args.batch.split(",")):
            ours = {"cpu-serial": [], "cpu-parallel": []}
            theirs = {"cpu-serial": [], "cpu-parallel": []}
            peers = {}
            try:
                for arch in theirs if use_torch else ():
                    peers[arch] = bench.torch_peer(arch, None)
                for r in range(args.rounds):
                    for arch in ours:
                        res, ctx = bench.bench_layerlab(name, arch, batch, args.steps, 1, 2)
                        ours[arch].append(res.samples_per_s)
                    for arch, peer in peers.items():
                        if r == 0:
                            peer.setup(ctx, batch, 2)
                        theirs[arch].append(peer.round(args.steps, 0.0, bench.ROUND_WARMUP)["eager"])
            finally:
                for peer in peers.values():
                    peer.close()
            s, p = (statistics.median(ours[a]) for a in ours)
            line = f"{name:<9} {batch:>5} {s:>9,.0f} {p:>9,.0f} {p / s:>7.2f}x"
            if use_torch:
                ts, tp = (statistics.median(theirs[a]) for a in theirs)
                line += f" {ts:>9,.0f} {tp:>9,.0f} {tp / ts:>7.2f}x"
            print(line, flush=True)


if __name__ == "__main__":
    main()
