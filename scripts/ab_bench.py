"""Two trees of layerlab benchmarked in alternated rounds: did a change make anything slower?

Usage: python scripts/ab_bench.py BEFORE_DIR AFTER_DIR [--rounds 3] [--json FILE] -- BENCH ARGS...
e.g.   git worktree add /tmp/before HEAD~5
       python scripts/ab_bench.py /tmp/before . --rounds 3 -- --arch cpu-parallel --workloads net-1h,cnn64 \\
           --batch 64,256 --no-torch --no-store

Each round runs `layerlab bench BENCH ARGS --json` once in each tree (a process each, the tree's own code: the
command runs with the tree as its working directory and first on PYTHONPATH), before then after, so drift on a
shared machine hits both alike. Prints each (workload, batch)'s median samples/s over the rounds of both trees
and after / before.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def bench(tree: str, args: list[str]) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
        subprocess.run([sys.executable, "-m", "nncore.cli", "bench", *args, "--json", out.name], cwd=tree, env=env,
                       check=True, stdout=subprocess.DEVNULL)
        rows = json.load(open(out.name))
    return {(r["workload"], r["batch"]): r["samples_per_s"] for r in rows}


def main() -> int:
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit("usage: ab_bench.py BEFORE_DIR AFTER_DIR [--rounds N] [--json FILE] -- BENCH ARGS...")
    cut = argv.index("--")
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    opts, bench_args = ap.parse_args(argv[:cut]), argv[cut + 1:]
    runs: dict = {"before": [], "after": []}
    for r in range(opts.rounds):
        for side in ("before", "after"):
            runs[side].append(bench(getattr(opts, side), bench_args))
            print(f"round {r + 1}/{opts.rounds}: {side} done", file=sys.stderr, flush=True)
    rows = []
    print(f"{'workload':<12} {'batch':>5} {'before':>12} {'after':>12} {'after/before':>13}")
    for key in runs["before"][0]:
        b = statistics.median(x[key] for x in runs["before"])
        a = statistics.median(x[key] for x in runs["after"])
        rows.append({"workload": key[0], "batch": key[1], "before": b, "after": a, "ratio": a / b,
                     "before_runs": [x[key] for x in runs["before"]], "after_runs": [x[key] for x in runs["after"]]})
        print(f"{key[0]:<12} {key[1]:>5} {b:>12,.0f} {a:>12,.0f} {a / b:>12.3f}x")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"before": opts.before, "after": opts.after, "bench": bench_args, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
