"""Argument checks and output of ``layerlab sweep`` and ``layerlab lockstep``."""
from __future__ import annotations

import signal
import sys
from pathlib import Path

from . import analysis, bench, runtime, sweep
from .benchcli import _ints
from .cli import record_points, run_inputs, signal_said, stop_signals_interrupt
from .config import check_filters, check_run, load_config
from .errors import ConfigError, LayerlabError
from .fileio import check_outputs
from .limits import check_threads
from .network import check_spec


def _archs(text: str, unique: bool = True) -> list[str]:
    """The backends of --archs, each once where ``unique`` (a sweep: a backend twice was measured twice and
    given a speedup over itself); lockstep may pair a backend with itself."""
    archs = [a.strip() for a in text.split(",") if a.strip()]
    bad = [a for a in archs if a not in runtime.ARCHS]
    if not archs:
        raise ConfigError(f"--archs: give one or more of {', '.join(runtime.ARCHS)}")
    if bad:
        raise ConfigError(f"--archs: unknown arch {bad[0]!r}; choose from {', '.join(runtime.ARCHS)}")
    archs = list(dict.fromkeys(archs)) if unique else archs
    for a in archs:
        runtime.require_available(a)
    return archs


def _with_input(cfg) -> dict:
    """The config's network with its input shape, taken from its data where model.input names none (a CSV
    table's width is known once it is read): sweeps and lockstep run the network on made-up batches of it."""
    if "input" in cfg.model:
        return cfg.model
    return {**cfg.model, "input": list(check_run(cfg).input_shape)}


def run_sweep_cli(args) -> int:
    try:
        cfg = load_config(args.config)
        archs = _archs(args.archs)
        batches = _ints(args.batch, "batch")
        filters = _ints(args.filters, "filters") if args.filters else [None]
        threads = _ints(args.threads, "threads") if args.threads else [runtime.cpu_count()]
        check_threads(max(threads), "--threads")
        for name in ("steps", "repeats", "warmup"):
            if getattr(args, name) < 1:
                raise ConfigError(f"--{name} {getattr(args, name)} must be >= 1")
        bench.check_step_counts(args, ("steps", "warmup"))
        model = _with_input(cfg)
        check_spec(model)  # (a bad layer is named before the sweep starts, not under its progress bar)
        check_filters(model, filters)
        sweep.check_grid(model, batches, filters)
        if not str(args.out).strip():
            raise ConfigError("--out '': give a directory")
        out = Path(args.out).expanduser()
        try:
            out.exists()
        except OSError as exc:  # a name too long, a loop of links
            raise ConfigError(f"--out {args.out}: {exc.strerror or exc}") from None
        if not out.parent.is_dir():  # as --store: a typo makes no tree of directories
            raise ConfigError(f"--out {args.out}: no directory {out.parent} (make it first, or give another path)")
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--out {args.out}: not a directory (the sweep writes sweep.csv and sweep.json into "
                              "a directory; give one)")
        try:  # the output directory made (or found writable) before the sweep, not after it
            out.mkdir(exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--out {args.out}: cannot make the directory ({exc.strerror or exc})") from None
        check_outputs([("--out", out / "sweep.csv"), ("--out", out / "sweep.json")], run_inputs(cfg, args.store))
        with stop_signals_interrupt() as received:
            try:
                points = sweep.run_sweep(model, archs, batches, filters, threads, args.steps, args.repeats,
                                         args.warmup, progress=sweep._progress)
            except KeyboardInterrupt:  # (before the first point ended: nothing to keep; "interrupted" on a line
                if sys.stderr.isatty():  # of its own, not after the open progress line)
                    sys.stderr.write("\n")
                if not received:
                    raise
                print(f"layerlab: {signal_said(received[0])}", file=sys.stderr)
                return 128 + received[0]  # (130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP)
        stopped = isinstance(points, sweep.Stopped)
        amdahl = None
        serial = next((p for p in points if p.arch == "cpu-serial"), None)
        if serial is not None and not stopped:  # (interrupted: what was measured is kept, nothing more is run)
            runtime.init("cpu-serial")
            launch_ms = analysis.measure_launch_ms()
            measured = {f"{p.arch} x{p.threads}" if p.arch != "cuda" else "cuda": p.speedup for p in points
                        if p.arch != "cpu-serial" and p.batch == serial.batch and p.filters == serial.filters}
            amdahl = analysis.amdahl_view(serial, launch_ms, max(threads), measured)
    except LayerlabError as exc:
        print(f"layerlab: error: {exc}", file=sys.stderr)
        return exc.exit_code
    if stopped and sys.stderr.isatty():
        sys.stderr.write("\n")  # (the progress line was left open)
    extra = {"config": str(cfg.source), "args": {k: v for k, v in vars(args).items() if k != "command"},
             "amdahl": None if amdahl is None else amdahl.__dict__}
    if stopped:
        extra["stopped"] = {"points": len(points), "of": points.of,
                            **({"error": str(points.error)} if points.error is not None else {})}
    rows = [p.to_dict() for p in points]
    record_points(args, "sweep", cfg.label, rows, {**extra, "model": model}, arch=",".join(archs),
                  threads=sweep.threads_used(rows), status="stopped" if stopped else "finished")
    try:
        sweep.write_results(points, out, extra)
    except LayerlabError as exc:
        print(f"layerlab: error: {exc}", file=sys.stderr)
        return exc.exit_code
    sweep.report(points, amdahl)  # (after the files: a stdout that fails loses none of the points)
    print(f"\nwrote {out / 'sweep.csv'} and {out / 'sweep.json'}")
    if stopped and points.error is not None:
        print(f"layerlab: error: {points.error} (the sweep stopped there, after {len(points)} of {points.of} "
              "points; those are kept)", file=sys.stderr)
        return points.error.exit_code
    if stopped:
        signum = received[0] if received else signal.SIGINT
        print(f"layerlab: {signal_said(signum)}: the sweep stopped after {len(points)} of {points.of} points "
              "(those are kept)", file=sys.stderr)
        return 128 + signum
    return 0


def run_lockstep(args) -> int:
    try:
        cfg = load_config(args.config)
        if len([a for a in args.archs.split(",") if a.strip()]) != 2:  # (before any is found unavailable)
            raise ConfigError(f"--archs {args.archs!r}: give exactly two archs")
        archs = _archs(args.archs, unique=False)
        if args.steps < 1 or args.batch_size < 1:
            raise ConfigError("--steps and --batch-size must be >= 1")
        rows = analysis.lockstep(_with_input(cfg), archs[0], archs[1], args.steps, args.batch_size, tol=args.tol)
    except LayerlabError as exc:
        print(f"layerlab: error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"{'step':>4} {'loss ' + archs[0]:>20} {'loss ' + archs[1]:>20} {'loss diff':>10} {'weight diff':>12}")
    for r in rows:
        flag = "" if r.ok else f"  beyond {args.tol:g}"
        print(f"{r.step:>4} {r.loss_a:>20.8f} {r.loss_b:>20.8f} {r.loss_diff:>10.2e} {r.weight_diff:>12.2e}{flag}")
    worst = max(r.weight_diff for r in rows)
    bad = sum(not r.ok for r in rows)
    print(f"largest relative weight difference {worst:.2e}; {bad} of {len(rows)} steps beyond {args.tol:g}")
    return 0 if bad == 0 else 1
