"""Wall time from launching `layerlab train` to its first finished training step, as a user waits for it.

    python scripts/time_to_first_step.py [CONFIG] [--runs N]

Each run starts a fresh process (`layerlab train CONFIG --epochs 1 --limit B --jsonl -`, one step of batch B)
and stops the clock when the step event arrives. The first run may compile kernels into Taichi's offline
cache; later runs load them from it.
"""
import argparse
import json
import subprocess
import sys
import time


def one(config: str, batch: int) -> float:
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "nncore.cli", "train", config, "--epochs", "1", "--limit",
                             str(batch), "--batch-size", str(batch), "--jsonl", "-"], stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if json.loads(line)["event"] == "step":
            elapsed = time.perf_counter() - t0
            proc.wait()
            return elapsed
    raise SystemExit(f"no step event (exit {proc.wait()})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("config", nargs="?", default="cnn")
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    for i in range(args.runs):
        print(f"run {i + 1}: {one(args.config, args.batch):.2f} s to the first step")


if __name__ == "__main__":
    main()
