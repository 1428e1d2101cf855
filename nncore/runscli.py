"""`layerlab runs`: the run store from the command line (list, show, compare, export, rm), text or JSON."""
from __future__ import annotations

import csv
import io
import json
import shutil
import sys
import time
from datetime import datetime

from .errors import ConfigError, LayerlabError, OutputError
from .fileio import check_outputs, store_files, write_or_rescue
from .report import cut_name, data_label, loss_text, short_arch
from .store import Store, StoreError, mean_rate

EPOCH_COLUMNS = ["run_id", "name", "arch", "threads", "ranks", "status", "epoch", "steps", "train_loss", "test_loss",
                 "test_acc", "val_loss", "val_acc", "samples_per_s", "epoch_s"]


def _when(t: float | None) -> str:
    return "—" if t is None else datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M")


def _num(v, spec: str) -> str:
    return "—" if v is None else format(v, spec)


def _since(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%d"))
    except ValueError:
        raise ConfigError(f"--since {text!r} must be a day as YYYY-MM-DD") from None


def _damaged(found: list[StoreError], what: str) -> None:
    """A line on stderr per damaged run left out (the others are listed or exported)."""
    for exc in found:
        print(f"layerlab: warning: {exc}; {what}", file=sys.stderr)


def _list(store: Store, args) -> int:
    damaged = []
    runs = store.runs(args.network, args.arch, args.status, _since(args.since), limit=args.limit or None,
                      damaged=damaged)
    _damaged(damaged, "not listed (`layerlab runs rm` removes it)")
    if args.json:
        print(json.dumps(runs, indent=1))
        return 0
    if not runs:
        print(f"no runs in {store.path}")
        return 0
    aw = max([12, *(len(short_arch(r["arch"])) for r in runs)])  # the arch column fits its longest arch
    print(f"{'id':>5}  {'started':<16}  {'kind':<5}  {'network':<14} {'data':<14} {'arch':<{aw}} {'thr':>3} "
          f"{'ranks':>5} {'status':<9} {'epochs':>6} {'test acc':>8} {'samples/s':>11}")
    for r in runs:
        data = data_label(r["config"]) if r["kind"] == "train" else None
        print(f"{r['id']:>5}  {_when(r['started']):<16}  {r['kind']:<5}  {cut_name(r['name'], 14):<14} "
              f"{cut_name(data or '—', 14):<14} {short_arch(r['arch']):<{aw}} "
              f"{_num(r['threads'], ''):>3} {r['ranks']:>5} {r['status']:<9} {r['epochs_done']:>6} "
              f"{_num(r['test_acc'], '.4f'):>8} {_num(r['samples_per_s'], ',.0f'):>11}")
    return 0


def _get(store: Store, run_id: int) -> dict:
    run = store.run(run_id)
    if run is None:
        raise ConfigError(f"run {run_id}: not in {store.path} (see `layerlab runs list`)")
    return run


def _show(store: Store, args) -> int:
    run = _get(store, args.id)
    if args.json:
        print(json.dumps(run, indent=1))
        return 0
    threads = "" if run["threads"] is None else f", {run['threads']} thread(s)"
    print(f"run {run['id']}: {run['name']} ({run['kind']}) on {run['arch'] or '—'}{threads}, "
          f"{run['ranks']} rank(s); {run['device'] or 'device unknown'} on {run['host']}")
    print(f"started {_when(run['started'])}, ended {_when(run['ended'])}; status {run['status']}"
          + (f": {run['error']}" if run["error"] else ""))
    print("config: " + json.dumps(run["config"], separators=(", ", ": ")))
    if run["epochs"]:
        print(f"\n{'epoch':>5} {'steps':>7} {'train loss':>10} {'test loss':>10} {'test acc':>8} {'samples/s':>11} "
              f"{'s':>7}")
        for e in run["epochs"]:
            print(f"{e['epoch']:>5} {e['steps']:>7} {loss_text(e['train_loss']):>10} {loss_text(e['test_loss']):>10} "
                  f"{_num(e['test_acc'], '.4f'):>8} {_num(e['samples_per_s'], ',.0f'):>11} {e['epoch_s']:>7.2f}")
        last = run["epochs"][-1].get("timings") or []
        if last:
            print(f"\nper-part timings, epoch {run['epochs'][-1]['epoch']} (synced steps):")
            for t in last:
                print(f"  {t['name']:<24} fwd {t['fwd_ms']:8.3f} ms  bwd {t['bwd_ms']:8.3f} ms  {100 * t['share']:5.1f}%")
    if run["points"]:
        print(f"\n{'arch':<14} {'thr':>3} {'batch':>6} {'filters':>7} {'samples/s':>11} {'ms/step':>9} "
              f"{'GFLOP/s':>8} {'speedup':>8}")
        for p in run["points"]:  # a sweep's or a benchmark's points (--json has them whole)
            print(f"{str(p.get('arch') or p.get('workload') or '—')[:14]:<14} {_num(p.get('threads'), ''):>3} "
                  f"{_num(p.get('batch'), ''):>6} {_num(p.get('filters'), ''):>7} "
                  f"{_num(p.get('samples_per_s'), ',.0f'):>11} {_num(p.get('ms_per_step'), '.2f'):>9} "
                  f"{_num(p.get('gflops'), '.1f'):>8} {_num(p.get('speedup'), '.2f'):>8}")
    _charts(args, [run])
    return 0


def _charts(args, runs: list[dict]) -> None:
    """Loss and accuracy curves (training runs), or samples/s against batch size (a sweep or benchmark), drawn
    in the terminal; plain text where the output is not a terminal, none with --no-chart."""
    if getattr(args, "no_chart", False):
        return
    from . import charts

    width = max(40, min(shutil.get_terminal_size((100, 24)).columns, 120))
    color = sys.stdout.isatty()
    train = [r for r in runs if r["kind"] == "train" and (r["steps"] or r["epochs"])]
    if train:
        single = len(train) == 1
        curves = [charts.Curves.from_run(r, None if single else f"#{r['id']}") for r in train]
        print()
        print(charts.render(charts.draw_loss, curves, width=width, height=16, color=color))
        print(charts.render(charts.draw_accuracy, curves, width=width, height=12, color=color))
    points = [p for r in runs if r["kind"] != "train" for p in r["points"] if "batch" in p and "samples_per_s" in p]
    if points:
        print()
        print(charts.render(charts.draw_throughput, points, width=width, height=16, color=color))


def _mean_rate(run: dict) -> float | None:
    return mean_rate(run["epochs"], (run["config"] or {}).get("train", {}).get("batch_size", 0))


def _compare(store: Store, args) -> int:
    runs = [_get(store, i) for i in args.ids]
    rates = [_mean_rate(r) for r in runs]
    rows = [{"id": r["id"], "name": r["name"], "arch": r["arch"], "threads": r["threads"], "ranks": r["ranks"],
             "status": r["status"], "epochs": len(r["epochs"]),
             "test_acc": r["epochs"][-1]["test_acc"] if r["epochs"] else None,
             "samples_per_s": rate, "speedup": rate / rates[0] if rates[0] and rate else None}
            for r, rate in zip(runs, rates)]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    aw = max([12, *(len(short_arch(r["arch"])) for r in rows)])
    print(f"{'id':>5} {'network':<14} {'arch':<{aw}} {'thr':>3} {'ranks':>5} {'status':<9} {'epochs':>6} "
          f"{'test acc':>8} {'samples/s':>11} {'speedup':>8}")
    for r in rows:
        print(f"{r['id']:>5} {cut_name(r['name'], 14):<14} {short_arch(r['arch']):<{aw}} {_num(r['threads'], ''):>3} "
              f"{r['ranks']:>5} "
              f"{r['status']:<9} {r['epochs']:>6} {_num(r['test_acc'], '.4f'):>8} "
              f"{_num(r['samples_per_s'], ',.0f'):>11} {_num(r['speedup'], '.2f'):>8}")
    print(f"speedup: samples/s over run {runs[0]['id']}'s")
    _charts(args, runs)
    return 0


def export_rows(runs: list[dict]) -> list[dict]:
    """One row per run and epoch (a run with no epoch: one row with its fields only)."""
    rows = []
    for r in runs:
        head = {"run_id": r["id"], "name": r["name"], "arch": r["arch"], "threads": r["threads"], "ranks": r["ranks"],
                "status": r["status"]}
        for e in r["epochs"] or [{}]:
            rows.append({**head, **{k: e.get(k) for k in EPOCH_COLUMNS if k not in head}})
    return rows


def export_text(runs: list[dict], fmt: str) -> str:
    """Stored runs (``Store.run``) as CSV (a row per run and epoch) or JSON (each run whole)."""
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=EPOCH_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(export_rows(runs))
        return out.getvalue()
    return json.dumps(runs, indent=1) + "\n"


def _export(store: Store, args) -> int:
    if not args.ids and not args.all:
        raise ConfigError("runs export: give run ids, or --all")
    damaged = []
    ids = [r["id"] for r in store.runs(damaged=damaged)] if args.all else args.ids
    _damaged(damaged, "not exported")
    runs = [_get(store, i) for i in ids]
    text = export_text(runs, "csv" if args.csv is not None else "json")
    target = args.csv if args.csv is not None else args.json
    if target == "-":
        sys.stdout.write(text)
        return 0
    check_outputs([("--csv" if args.csv is not None else "--json", target)], store_files(store.path))
    write_or_rescue(target, lambda fh: fh.write(text.encode()), "the export")
    print(f"wrote {len(runs)} run(s) to {target}", file=sys.stderr)
    return 0


def _rm(store: Store, args) -> int:
    for i in args.ids:
        if not store.exists(i):  # (a damaged run can be removed: its rows are not read)
            raise ConfigError(f"run {i}: not in {store.path} (see `layerlab runs list`)")
    store.remove(args.ids)
    print(f"removed {len(args.ids)} run(s) from {store.path}", file=sys.stderr)
    return 0


def run_runs(args) -> int:
    if args.runs_command is None:  # `layerlab runs` alone: the list, with the list parser's own defaults
        from .cli import _parser

        args = _parser().parse_args(["runs", "list", *(["--store", args.store] if args.store else [])])
    try:
        try:
            store = Store(args.store, create=False)  # reading (or removing) never makes a store
        except StoreError as exc:
            if exc.missing and args.runs_command == "list":
                print(f"no runs: {exc}")
                return 0
            raise
        try:
            code = {"list": _list, "show": _show, "compare": _compare, "export": _export,
                    "rm": _rm}[args.runs_command](store, args)
            sys.stdout.flush()  # (a full disk shows here, not in Python's flush at exit)
            return code
        finally:
            store.close()
    except LayerlabError as exc:
        print(f"layerlab: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        raise  # (main: the reader has what it wanted)
    except OSError as exc:  # writing stdout: the store's and the files' failures are LayerlabErrors
        if exc.filename is not None:  # a path refused (a name too long): main names it
            raise
        from .cli import _silence_stdout

        _silence_stdout(sys.stdout)  # (what is left in its buffer is not written again at exit)
        print(f"layerlab: error: stdout: the output could not be written ({exc.strerror or exc})", file=sys.stderr)
        return OutputError.exit_code
