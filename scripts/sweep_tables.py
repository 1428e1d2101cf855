"""Markdown tables from `layerlab sweep` results (sweep.json), for docs/ANALYSIS.md.

    python scripts/sweep_tables.py DIR [DIR ...]
"""
import json
import sys
from pathlib import Path


def fmt(v, spec):
    return "—" if v is None else format(v, spec)


def table(path: Path) -> str:
    doc = json.loads((path / "sweep.json").read_text())
    rows = ["| arch | threads | batch | filters | samples/s | s/epoch | GFLOP/s | speedup | efficiency | Karp-Flatt e "
            "| launches/step |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in doc["points"]:
        rows.append(f"| {p['arch']} | {p['threads']} | {p['batch']} | {fmt(p['filters'], '')} | "
                    f"{p['samples_per_s']:,.0f} | {p['epoch_s']:.2f} | {p['gflops']:.1f} | {fmt(p['speedup'], '.2f')} | "
                    f"{fmt(p['efficiency'], '.2f')} | {fmt(p['karp_flatt'], '.3f')} | {p['launches']} |")
    a = doc.get("amdahl")
    if a:
        rows.append("")
        rows.append(f"Amdahl, from the cpu-serial profile at batch {doc['points'][0]['batch']}: kernels "
                    f"{a['kernel_ms']:.2f} ms and host/launches {a['host_ms']:.2f} ms per step, p = {a['p']:.3f}; "
                    f"bound {a['bound_threads']:.2f}x for {a['threads']} threads, {a['bound_gpu']:.1f}x for a GPU; "
                    "measured " + ", ".join(f"{k} {v:.2f}x" for k, v in a["measured"].items()) + ".")
    return "\n".join(rows)


if __name__ == "__main__":
    for d in sys.argv[1:]:
        print(f"### {d}\n\n{table(Path(d))}\n")
