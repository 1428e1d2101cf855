"""``layerlab bench``: argument checks, progress, the text table and the JSON output of nncore.bench."""
from __future__ import annotations

import json
import sys

from . import bench, runtime
from .cli import _silence_stdout, record_points, signal_said, stop_signals_interrupt, store_inputs
from .errors import ConfigError, LayerlabError, OutputError
from .fileio import check_outputs, rescue, write_or_rescue
from .limits import ascii_int, check_threads
from .network import check_batch
from .peer import PeerError


def _ints(text: str, name: str) -> list[int]:
    vals = [ascii_int(v, f"--{name} entry", minimum=1) for v in text.split(",") if v.strip()]
    if not vals:
        raise ConfigError(f"--{name} {text!r} needs at least one whole number from 1 up")
    return list(dict.fromkeys(vals))  # (each once: a batch given twice was measured twice)


def _modes(args) -> tuple[str, ...]:
    from .peer import MODES

    modes = tuple(dict.fromkeys(m.strip() for m in args.torch_mode.split(",") if m.strip()))
    bad = [m for m in modes if m not in MODES]
    if not modes:
        raise ConfigError(f"--torch-mode {args.torch_mode!r} names no mode; choose from {', '.join(MODES)}")
    if bad:
        raise ConfigError(f"--torch-mode: unknown {bad[0]!r}; choose from {', '.join(MODES)}")
    if "graph" in modes and args.arch != "cuda":
        raise ConfigError("--torch-mode graph captures PyTorch's step in a CUDA graph: it needs --arch cuda")
    return modes


def _check(args) -> tuple[list[str], list[int]]:
    _modes(args)
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in names if w not in bench.WORKLOADS]
    if not names:
        raise ConfigError(f"--workloads {args.workloads!r} names no workload; choose from {', '.join(bench.WORKLOADS)}")
    if unknown:
        raise ConfigError(f"--workloads: unknown {unknown[0]!r}; choose from {', '.join(bench.WORKLOADS)}")
    for name in ("steps", "repeats", "warmup"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name} {getattr(args, name)} must be >= 1")
    if getattr(args, "round_warmup", None) is None:
        args.round_warmup = bench.ROUND_WARMUP
    if args.round_warmup < 0:
        raise ConfigError(f"--round-warmup {args.round_warmup} must be >= 0")
    bench.check_step_counts(args, ("steps", "warmup", "round_warmup"))
    if args.json not in (None, "-"):
        # Before the benchmark, not found unwritable after it; never over the run store.
        check_outputs([("--json", args.json)], store_inputs(args.store))
    batches = _ints(args.batch, "batch")
    check_threads(args.threads, "--threads")  # (before the table's header, not under it)
    for name in names:  # a batch size the buffers cannot index is refused before any point is measured
        for batch in batches:
            check_batch(bench.workload_model(name), batch)
    return names, batches


def _line(r: bench.BenchResult, modes, width: int = 8) -> str:
    torch = "".join(f"{r.torch_modes[m]['samples_per_s']:>12,.0f} {r.torch_modes[m]['ratio']:>6.2f}x"
                    if m in r.torch_modes else f"{'—':>12} {'—':>7}" for m in modes)
    return (f"{r.workload:<{width}} {r.batch:>6} {r.samples_per_s:>12,.0f} {r.ms_per_step:>9.2f} {r.gflops:>8.2f} "
            f"{r.compile_s:>9.2f} {torch}")


def _peer_failed(exc: Exception) -> None:
    print(f"layerlab: warning: {exc}; going on without PyTorch", file=sys.stderr)


def _peer(make):
    """The PyTorch peer, or None (with a warning) where its process cannot start: a broken PyTorch install,
    or a CPU-only one asked for cuda."""
    try:
        return make()
    except PeerError as exc:
        _peer_failed(exc)
        return None


def run_bench(args) -> int:
    try:
        names, batches = _check(args)
        runtime.require_available(args.arch)  # refused before any of the table is printed
    except LayerlabError as exc:
        print(f"layerlab: error: {exc}", file=sys.stderr)
        return exc.exit_code
    use_torch = not args.no_torch and bench.torch_available()
    modes = _modes(args)
    text = args.json != "-"
    results = []
    width = max(8, *map(len, names))  # (the workload column fits net-1h-relu)
    unwritten = []  # why stdout could not be written (a full disk): measuring goes on, the results are rescued

    def say(line: str) -> None:
        if unwritten:
            return
        try:
            print(line, flush=True)
        except BrokenPipeError:
            raise  # (main: the reader has what it wanted)
        except OSError as exc:
            unwritten.append(exc.strerror or str(exc))
            _silence_stdout(sys.stdout)

    if text:
        untimed = f", each repeat after {args.round_warmup} untimed" if use_torch else ""
        say(f"layerlab bench: {args.arch}, {args.steps} steps x {args.repeats} repeats after {args.warmup} "
            f"warm-up steps{untimed}; PyTorch: "
            f"{'in its own process, rounds alternated' if use_torch else 'not installed' if not args.no_torch else 'off'}"
            + (f" ({', '.join(modes)})" if use_torch else ""))
        say(f"{'workload':<{width}} {'batch':>6} {'samples/s':>12} {'ms/step':>9} {'GFLOP/s':>8} {'compile s':>9} "
            + "".join(f"{m[:8] + ' s/s':>12} {'ratio':>7}" for m in (modes if use_torch else ("torch",))))
    peer, stopped, failed = None, None, None
    with stop_signals_interrupt() as received:
        try:
            if use_torch:
                peer = _peer(lambda: bench.torch_peer(args.arch, args.threads, modes))
            for name in names:
                for batch in batches:
                    try:
                        res, _ = bench.bench_layerlab(name, args.arch, batch, args.steps, args.repeats, args.warmup,
                                                      args.threads, peer=peer, round_warmup=args.round_warmup)
                    except PeerError as exc:  # layerlab's figures still count: the rest runs without PyTorch
                        _peer_failed(exc)
                        peer.close()
                        peer = None
                        res, _ = bench.bench_layerlab(name, args.arch, batch, args.steps, args.repeats,
                                                      args.warmup, args.threads, round_warmup=args.round_warmup)
                    results.append(res)
                    if text:
                        say(_line(res, modes if use_torch else ("torch",), width))
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM or SIGHUP: the points measured are kept, written and recorded
            if not received:
                raise
            stopped = received[0]
            sys.stderr.write("\n")  # (not after the terminal's ^C)
        except LayerlabError as exc:
            if not results:
                print(f"layerlab: error: {exc}", file=sys.stderr)
                return exc.exit_code
            failed = exc  # a later point refused (its memory, say): the points measured are written and recorded
        finally:
            if peer is not None:
                peer.close(wait_s=1.0 if received else 10.0)  # (stopped: its round is not waited for)
    if stopped is not None and not results:
        print(f"layerlab: {signal_said(stopped)}", file=sys.stderr)
        return 128 + stopped
    if text and results:
        # (per part: from steps launched part by part with a sync after each, so the parts add up to more than a
        # step of the table, which runs as one graph)
        say("the largest parts, timed in steps synced part by part:")
        for r in results:
            top = sorted(r.layers, key=lambda t: -t["share"])[:3]
            say(f"  {r.workload} batch {r.batch}: " + ", ".join(
                f"{t['name']} {100 * t['share']:.0f}% ({t['fwd_ms']:.2f}+{t['bwd_ms']:.2f} ms"
                + (f", {t['gflops']:.1f} GFLOP/s)" if t["gflops"] else ")") for t in top))
    info = runtime.current()
    # The threads and device that ran (not only what was asked), and the rate where one point makes the run.
    record_points(args, "bench", ",".join(names), [r.to_dict() for r in results],
                  {k: v for k, v in vars(args).items() if k not in ("command", "store", "no_store", "version")},
                  arch=args.arch, threads=results[0].threads if results else args.threads,
                  device=info.device if info is not None else None,
                  summary={"samples_per_s": results[0].samples_per_s} if len(results) == 1 else None,
                  status="finished" if stopped is None and failed is None else "stopped")
    doc = json.dumps([r.to_dict() for r in results], indent=1)
    if args.json:
        if args.json == "-":
            say(doc)
        else:
            try:
                write_or_rescue(args.json, lambda fh: fh.write((doc + "\n").encode()), "the results")
            except LayerlabError as exc:
                print(f"layerlab: error: {exc}", file=sys.stderr)
                return exc.exit_code
    if unwritten:
        if args.json in (None, "-"):  # (else they are in the --json file, written above)
            error = rescue(lambda fh: fh.write((doc + "\n").encode()), "the results", "to stdout", unwritten[0],
                           "layerlab-bench.json")
        else:
            error = f"stdout: the table could not be written ({unwritten[0]}); the results are in {args.json}"
        print(f"layerlab: error: {error}", file=sys.stderr)
        if stopped is None and failed is None:
            return OutputError.exit_code
    if failed is not None:
        print(f"layerlab: error: {failed} (the benchmark stopped there, after {len(results)} of "
              f"{len(names) * len(batches)} points; those are kept)", file=sys.stderr)
        return failed.exit_code
    if stopped is not None:
        print(f"layerlab: {signal_said(stopped)}: the benchmark stopped after {len(results)} of "
              f"{len(names) * len(batches)} points (those are kept)", file=sys.stderr)
        return 128 + stopped
    return 0
