"""Data-parallel scaling: samples/s and communication share against the MPI rank count.

Runs `layerlab train CONFIG --ranks N` for each config, global batch and rank count, and reads rank 0's
events: the last epoch's samples/s (training steps only, evaluation excluded) and the ranks' communication
share (gradient all-reduce with its host staging, and waiting for slower ranks). The first epochs are
warm-up (kernel compilation), so use at least 2 epochs; figures are medians over the epochs after the first.

    python scripts/dist_scaling.py --arch cpu-serial --ranks 1,2 --configs net-1h,cnn --batch 256,1000
    python scripts/dist_scaling.py --arch cuda --ranks 1,2,4 --configs cnn --filters 256 --batch 1000
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def _with_filters(config: str, filters: int, tmp: str) -> str:
    """The config with every Conv2D's out_channels set to ``filters`` (the bench's cnn32/cnn64/cnn256), as a
    JSON config file."""
    from nncore.config import load_config

    cfg = load_config(config)
    model = dict(cfg.model)
    model["layers"] = [{**l, "out_channels": filters} if l.get("type") == "Conv2D" else l for l in model["layers"]]
    path = Path(tmp) / f"{Path(config).stem}{filters}.json"
    path.write_text(json.dumps({"model": model, "data": cfg.data, "train": cfg.train}))
    return str(path)


def run_one(config: str, arch: str, ranks: int, batch: int, epochs: int, extra: list[str],
            filters: int | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        events = Path(tmp) / "events.jsonl"
        name = config
        if filters:
            config, name = _with_filters(config, filters, tmp), f"{config}{filters}"
        cmd = [sys.executable, "-m", "nncore.cli", "train", config, "--arch", arch, "--batch-size", str(batch),
               "--epochs", str(epochs), "--jsonl", str(events), "--quiet", "--ranks", str(ranks), *extra]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.strip()[-400:]}")
        lines = [json.loads(line) for line in events.read_text().splitlines()]
    epochs_ = [e for e in lines if e["event"] == "epoch_end"][1:]  # the first compiles the kernels
    start = lines[0]
    rate = statistics.median(e["samples_per_s"] for e in epochs_)
    share = statistics.median(e["comm_share"] for e in epochs_)
    return {"config": name, "arch": arch, "ranks": ranks, "batch": batch, "samples_per_s": rate,
            "comm_share": share, "devices": start.get("rank_devices", []), "test_acc": epochs_[-1]["test_acc"],
            "epochs_measured": len(epochs_)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", default="cpu-serial")
    p.add_argument("--ranks", default="1,2")
    p.add_argument("--configs", default="net-1h,cnn")
    p.add_argument("--batch", default="256,1000")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--filters", type=int, help="set every Conv2D's out_channels (e.g. 256 for cnn256)")
    p.add_argument("--out", help="write the rows as JSON here")
    p.add_argument("extra", nargs="*", help="more `layerlab train` arguments (after --)")
    a = p.parse_args()
    rows = []
    print(f"{'config':<8} {'batch':>6} {'ranks':>5} {'samples/s':>11} {'speedup':>8} {'comm':>6}", flush=True)
    for config in a.configs.split(","):
        for batch in map(int, a.batch.split(",")):
            base = None
            for ranks in map(int, a.ranks.split(",")):
                row = run_one(config, a.arch, ranks, batch, a.epochs, a.extra, a.filters)
                base = base or row["samples_per_s"]
                row["speedup"] = row["samples_per_s"] / base
                rows.append(row)
                print(f"{row['config']:<8} {batch:>6} {ranks:>5} {row['samples_per_s']:>11,.0f} {row['speedup']:>7.2f}x "
                      f"{100 * row['comm_share']:>5.1f}%", flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
