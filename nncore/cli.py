"""The headless command line: train, archs, bench, sweep, lockstep. `layerlab` alone opens the app (tui.launch).

Exit codes: 0 done (or stopped by a stop file); 2 bad config, argument or data; 3 diverged; 4 the backend
asked for is unavailable; 130 interrupted (Ctrl-C ends the current step, writes what was asked for, exits;
SIGTERM and SIGHUP do the same and exit 143 and 129).
Errors are one line on stderr naming the culprit, never a traceback.
"""
from __future__ import annotations

import argparse
import errno
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from contextlib import contextmanager
from pathlib import Path

from .errors import ConfigError, LayerlabError

EXIT_OK, EXIT_ERROR, EXIT_CONFIG, EXIT_DIVERGED, EXIT_BACKEND, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130


class _DefaultsShown(argparse.HelpFormatter):
    """--help says each option's default where it has one and its help does not already say it."""

    def _get_help_string(self, action):
        text = action.help or ""
        if (action.option_strings and action.default not in (None, False, argparse.SUPPRESS)
                and "default" not in text):
            text += " (default: %(default)s)"
        return text

    def _split_lines(self, text, width):
        # Lines break at spaces only: "cpu-serial" split at its hyphen reads as two words.
        return textwrap.wrap(self._whitespace_matcher.sub(" ", text).strip(), width, break_on_hyphens=False)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)  # --rank is not --ranks: options are spelled out
        kwargs.setdefault("formatter_class", _DefaultsShown)
        super().__init__(*args, **kwargs)

    def error(self, message):  # one line and exit 2, instead of usage + message
        # (one prefix for every error, a subcommand's too: tools, and the relay of a distributed run, look for it)
        # argparse says "argument --lr: ..."; the checks of the run's settings say "--lr: ...": one wording.
        message = re.sub(r"^argument ([^:]*): ", r"\1: ", message)
        message = re.sub(r"^runs_command: invalid choice", "runs: unknown command", message)
        # A value quoted back (an invalid choice) is clipped: it may be thousands of characters.
        message = re.sub(r"'([^']{40})[^']+'", r"'\1…'", message)
        self.exit(EXIT_CONFIG, f"layerlab: error: {message}\n")


def _int_arg(text: str) -> int:
    """ASCII digits with an optional sign, within 32 bits (the range a field then narrows: "--epochs 0" is
    refused by the run's settings, in their words)."""
    from nncore.limits import INT32_MAX, clip, signed_digits

    value = signed_digits(text)  # (the value as given is quoted clipped: it may be thousands of digits)
    if value is None:
        raise argparse.ArgumentTypeError(f"{clip(text)!r} must be a whole number written in digits 0-9")
    if abs(value) > INT32_MAX:
        raise argparse.ArgumentTypeError(f"{clip(text.strip())} is too {'small' if value < 0 else 'large'} "
                                         f"(beyond {'-' if value < 0 else ''}{INT32_MAX})")
    return value


def _float_arg(text: str) -> float:
    from nncore.limits import finite_float

    try:
        return finite_float(text, "value")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("value ", "", 1)) from None


def _tol_arg(text: str) -> float:
    """A tolerance: a finite number, zero or more (a negative one would call equal steps different)."""
    value = _float_arg(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} must be >= 0")
    return value


def _count_arg(text: str) -> int:
    """A count: a whole number, zero or more."""
    value = _int_arg(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} must be >= 0")
    return value


def signal_said(signum: int) -> str:
    """How a stop by this signal is said: "interrupted" for Ctrl-C, else "SIGTERM received" and the like."""
    return "interrupted" if signum == signal.SIGINT else f"{signal.Signals(signum).name} received"


@contextmanager
def stop_signals_interrupt():
    """Inside the block SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt, so that a sweep or a benchmark stops
    as Ctrl-C stops it, keeping what it measured (SIGTERM and SIGHUP ended it with nothing written); SIGINT is
    handled even where the shell started the command with it ignored (`... &`). Yields the list that gets the
    signals' numbers."""
    received: list[int] = []

    def on_signal(signum, frame):
        received.append(signum)
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("layerlab")
    except PackageNotFoundError:
        return "unknown (not installed)"


EXIT_CODES = """exit codes:
  0    done
  1    lockstep: a step differs beyond --tol; else an unforeseen error (a bug)
  2    bad config, argument, data or output path, or the app started without a
       terminal (one line names the culprit)
  3    diverged (a non-finite loss or weight)
  4    the backend asked for is unavailable
  130  interrupted by Ctrl-C (143 SIGTERM, 129 SIGHUP); the current step
       finishes and the weights are written"""


def _alias(parser, name: str, dest: str, **kwargs) -> None:
    """Accept ``name`` as another spelling of the option stored in ``dest`` (one spelling per idea across the
    commands: --batch and --batch-size, --arch and --archs); --help shows only the canonical one."""
    parser.add_argument(name, dest=dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kwargs)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="layerlab", description="Train small networks on Taichi backends and see where the time goes.",
                epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    # (`layerlab --version` is answered by tui.launch before this parser; listed here for --help)
    p.add_argument("-V", "--version", action="store_true", help="print the version and exit")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    t = sub.add_parser("train", help="train a network headless")
    t.add_argument("config", help="a config .toml, or the name of one in assets/configs (quadrant, cnn, ...)")
    t.add_argument("--arch", choices=["cpu-serial", "cpu-parallel", "cuda"])
    t.add_argument("--threads", type=_int_arg)
    t.add_argument("--epochs", type=_int_arg)
    t.add_argument("--batch-size", type=_int_arg)
    _alias(t, "--batch", "batch_size", type=_int_arg)
    t.add_argument("--lr", type=_float_arg)
    t.add_argument("--optimizer", choices=["sgd", "adam"])
    t.add_argument("--momentum", type=_float_arg)
    t.add_argument("--seed", type=_int_arg)
    src = t.add_mutually_exclusive_group()
    src.add_argument("--dataset", help="quadrant, circle, xor, gauss, spiral, fashion-subset, fashion-mnist")
    src.add_argument("--data", metavar="DIR|FILE.csv",
                     help="a directory of IDX files (MNIST format, .gz or raw), or a CSV file (.csv or .csv.gz: "
                          "numbers standardised, words one-hot, label in the last column unless --label)")
    t.add_argument("--test-data", metavar="FILE.csv", help="with a CSV --data: the test rows (default: the config's "
                   "data.test_ratio of --data's rows, chosen by the seed)")
    t.add_argument("--label", metavar="COLUMN", help="with a CSV --data: the label column, by name or index "
                   "(default: the last)")
    t.add_argument("--limit", type=_int_arg, help="use at most N training and N test samples (a CSV file: read "
                   "at most N rows)")
    t.add_argument("--no-shuffle", action="store_true")
    t.add_argument("--timing-every", type=_int_arg, metavar="K", help="time each layer on every K-th step (default 10)")
    t.add_argument("--init-weights", metavar="F.npz")
    t.add_argument("--save-weights", metavar="F.npz")
    t.add_argument("--checkpoint", metavar="FILE", help="where checkpoints go (written atomically)")
    t.add_argument("--checkpoint-every", metavar="N|Ne", help="a checkpoint every N steps, or every N epochs (Ne); with --checkpoint alone, every epoch")
    t.add_argument("--resume", metavar="FILE", help="continue a run from its checkpoint, bit-identically")
    t.add_argument("--jsonl", metavar="FILE|-", help="write the events as JSON lines ('-': stdout, instead of text)")
    t.add_argument("--quiet", action="store_true", help="print only the final summary")
    _store_args(t)
    dist = t.add_mutually_exclusive_group()
    dist.add_argument("--distributed", action="store_true",
                      help="be one rank of a data-parallel run (start under mpiexec -n N)")
    dist.add_argument("--ranks", type=_int_arg, metavar="N",
                      help="run N data-parallel ranks (default: the config's train.ranks): starts mpiexec itself")
    sub.add_parser("archs", help="which backends work here, and why not")
    b = sub.add_parser("bench", help="benchmark the seed workloads, side by side with PyTorch where installed")
    b.add_argument("--workloads", default="net-1h,net-2h,cnn32,cnn64,cnn256",
                   help="comma-separated, from: net-1h, net-1h-relu, net-2h, cnn32, cnn64, cnn256 "
                        "(default: all but net-1h-relu)")
    b.add_argument("--batch", default="64,256,1000", help="comma-separated batch sizes")
    _alias(b, "--batch-size", "batch")
    b.add_argument("--arch", default="cpu-parallel", choices=["cpu-serial", "cpu-parallel", "cuda"],
                   help="the backend to measure")
    b.add_argument("--threads", type=_int_arg, help="threads for cpu-parallel (default: all cores)")
    b.add_argument("--steps", type=_int_arg, default=20, help="training steps per timed repeat")
    b.add_argument("--repeats", type=_int_arg, default=5, help="timed repeats (the median is kept)")
    b.add_argument("--warmup", type=_int_arg, default=3, help="steps before timing (the first compiles)")
    b.add_argument("--round-warmup", type=_int_arg, default=None, metavar="N",
                   help="untimed steps before each timed round, layerlab's and PyTorch's, after the quiet gap "
                        "between them (default: 8; none with --no-torch, whose rounds have no gap)")
    b.add_argument("--no-torch", action="store_true", help="skip the PyTorch comparison")
    b.add_argument("--torch-mode", default="eager", metavar="MODES",
                   help="comma-separated, how PyTorch runs its step: eager (as most people write it), graph (the "
                        "whole step captured in a CUDA graph; cuda only), compile (torch.compile, "
                        "mode='reduce-overhead'); a ratio column for each (default: eager)")
    b.add_argument("--json", metavar="FILE|-", help="write the results as JSON ('-': stdout, instead of text)")
    _store_args(b)
    sw = sub.add_parser("sweep", help="scaling sweep: archs x threads x batch sizes x filters, with Amdahl")
    sw.add_argument("config", help="a config .toml, or the name of one in assets/configs")
    sw.add_argument("--archs", default="cpu-serial,cpu-parallel", help="comma-separated backends to compare")
    sw.add_argument("--batch", default="64,256,1000", help="comma-separated batch sizes")
    _alias(sw, "--batch-size", "batch")
    _alias(sw, "--arch", "archs")
    sw.add_argument("--filters", help="comma-separated Conv2D filter counts (default: as configured)")
    sw.add_argument("--threads", help="comma-separated thread counts for cpu-parallel (default: all cores)")
    sw.add_argument("--steps", type=_int_arg, default=10, help="training steps per timed repeat")
    sw.add_argument("--repeats", type=_int_arg, default=5, help="timed repeats per point (the median is kept)")
    sw.add_argument("--warmup", type=_int_arg, default=3, help="steps before timing (the first compiles)")
    sw.add_argument("--out", metavar="DIR", default="sweep-results",
                    help="directory for sweep.csv and sweep.json, made if its parent exists (default: "
                         "./sweep-results)")
    _store_args(sw)
    ls = sub.add_parser("lockstep", help="train on two archs in lockstep and compare losses and weights",
                        epilog="exit code 1: some step differs beyond --tol (2: bad config or argument)")
    ls.add_argument("config", help="a config .toml, or the name of one in assets/configs")
    ls.add_argument("--archs", default="cpu-serial,cpu-parallel", help="the two backends to compare")
    ls.add_argument("--steps", type=_int_arg, default=20, help="training steps")
    ls.add_argument("--batch-size", type=_int_arg, default=64, help="samples a step")
    _alias(ls, "--batch", "batch_size", type=_int_arg)
    _alias(ls, "--arch", "archs")
    ls.add_argument("--tol", type=_tol_arg, default=1e-5,
                    help="the largest relative difference of loss or weights allowed between the two")
    r = sub.add_parser("runs", help="past runs from the run store: list, show, compare, export, rm")
    r.add_argument("--store", metavar="PATH", help="the run store (default: runs.sqlite in LAYERLAB_HOME or the "
                                                   "user data directory)")
    rsub = r.add_subparsers(dest="runs_command", parser_class=_Parser)
    rl = rsub.add_parser("list", help="runs, newest first")
    rl.add_argument("--network", help="only runs of this config name")
    rl.add_argument("--arch", choices=["cpu-serial", "cpu-parallel", "cuda"])
    statuses = ["running", "finished", "stopped", "failed", "refused", "died"]
    rl.add_argument("--status", choices=statuses, metavar="STATUS", help=f"only runs of this status: "
                    f"{', '.join(statuses)}")
    rl.add_argument("--since", metavar="YYYY-MM-DD", help="only runs started on or after this day")
    rl.add_argument("--limit", type=_count_arg, default=50, help="at most N runs (default 50; 0: all)")
    rl.add_argument("--json", action="store_true", help="JSON instead of a table")
    rs = rsub.add_parser("show", help="one run: config, metrics per epoch, timings, loss and accuracy charts")
    rs.add_argument("id", type=_int_arg)
    rs.add_argument("--json", action="store_true")
    rs.add_argument("--no-chart", action="store_true", help="leave out the loss and accuracy charts")
    rc = rsub.add_parser("compare", help="runs side by side, with speedups over the first and their curves overlaid")
    rc.add_argument("ids", type=_int_arg, nargs="+")
    rc.add_argument("--json", action="store_true")
    rc.add_argument("--no-chart", action="store_true", help="leave out the overlaid curves")
    rx = rsub.add_parser("export", help="runs with their epochs as CSV or JSON")
    rx.add_argument("ids", type=_int_arg, nargs="*")
    rx.add_argument("--all", action="store_true", help="every run in the store")
    fmt = rx.add_mutually_exclusive_group(required=True)
    fmt.add_argument("--csv", metavar="FILE|-")
    fmt.add_argument("--json", metavar="FILE|-")
    rm = rsub.add_parser("rm", help="delete runs")
    rm.add_argument("ids", type=_int_arg, nargs="+")
    for sp in (rl, rs, rc, rx, rm):  # `runs list --store P` as well as `runs --store P list`
        sp.add_argument("--store", metavar="PATH", default=argparse.SUPPRESS, help="the run store (as above)")
    ui = sub.add_parser("tui", help="the terminal app (the default with no arguments)")
    ui.add_argument("config", nargs="?", help="a config to open (default: quadrant)")
    return p


def _store_args(parser) -> None:
    g = parser.add_mutually_exclusive_group()
    g.add_argument("--store", metavar="PATH", help="record the run in this run store (default: runs.sqlite in "
                                                   "LAYERLAB_HOME or the user data directory)")
    g.add_argument("--no-store", action="store_true", help="do not record the run")


def record_points(args, kind: str, name: str, points: list[dict], config: dict, summary: dict | None = None,
                  **info) -> None:
    """A sweep's or a benchmark's points as one ended run in the store (unless --no-store); ``info`` may set its
    status (a sweep stopped part-way: "stopped")."""
    store = open_store(args)
    if store is None:
        return
    from nncore.store import StoreError

    try:
        run_id = store.add_finished(kind, name, config, points, summary, started=_STARTED[0], **info)
        print(f"recorded as run {run_id} in {store.path}", file=sys.stderr)
    except (StoreError, OSError) as exc:
        print(f"layerlab: warning: run store {store.path}: not recorded ({exc})", file=sys.stderr)
    finally:
        store.close()


def _recorder(args, cfg):
    """A Recorder of this run into the run store, or None (--no-store, or a store that cannot be used)."""
    store = open_store(args)
    if store is None:
        return None
    from nncore.store import Recorder

    return Recorder(store, cfg.label, cfg.to_dict(), input_refusals=False,
                    warn=lambda msg: _stderr(f"layerlab: warning: {msg}"))


def store_inputs(store: str | None) -> list:
    """The run store (--store, or the default one) as an input no output may overwrite: its history, also
    under --no-store."""
    from nncore.fileio import store_files
    from nncore.store import default_path

    return store_files(store or default_path())


def run_inputs(cfg, store: str | None) -> list:
    """What a run of ``cfg`` reads, which none of its outputs may overwrite: the config file, the data, the store."""
    from nncore.fileio import input_files

    found = input_files("the config", cfg.source) if Path(cfg.source).is_file() else []
    found += input_files("the data", cfg.data.get("path")) + input_files("the test data", cfg.data.get("test_path"))
    return found + store_inputs(store)


def _train_inputs(cfg, args) -> list:
    """What a training run reads: its config, data and store, and the weights or checkpoint it starts from."""
    from nncore.fileio import input_files

    return (run_inputs(cfg, args.store) + input_files("--resume", args.resume)
            + input_files("--init-weights", args.init_weights))


def open_store(args, quiet: bool = False):
    """The run store the command records into, or None (--no-store, or a store that cannot be used: said once
    on stderr, and the command goes on without history)."""
    if getattr(args, "no_store", False):
        return None
    from nncore.store import Store, StoreError

    try:
        store = Store(args.store)
    except StoreError as exc:
        if not quiet:
            print(f"layerlab: warning: {exc}; going on without recording the run", file=sys.stderr)
        return None
    if store.created and args.store is not None:  # a store named on the command line: a typo shows here
        print(f"layerlab: new run store created: {os.path.abspath(store.path)}", file=sys.stderr)
    return store


def check_store_name(path: str | None) -> None:
    """A --store PATH the system can look up (not a name too long, not a loop of links)."""
    try:
        if path is not None:
            Path(path).expanduser().exists()
    except OSError as exc:
        raise ConfigError(f"--store {path}: {exc.strerror or exc}") from None


def check_store_arg(path: str | None) -> None:
    """A --store PATH must be in a directory that exists (checked before anything runs: a typo would otherwise
    start a store of its own, or, with the directory made, a new tree)."""
    if path is None:
        return
    check_store_name(path)
    parent = Path(path).expanduser().parent
    if not parent.is_dir():
        raise ConfigError(f"--store {path}: no directory {parent} (make it first, or give another path)")


def _archs() -> int:
    from nncore.runtime import available_archs

    for s in available_archs():
        state = "available" if s.available else f"unavailable: {s.reason}"
        print(f"{s.name:<13} {state}" + (f"  ({s.device})" if s.device and s.available else ""))
    return EXIT_OK


_FLAG_OF = {"path": "--data", "test_path": "--test-data", "shuffle": "--no-shuffle"}  # field -> its flag
_SPELLINGS = {"--batch-size": ("--batch",)}  # a flag -> its other spellings (_alias), blamed as the user typed it
_ARGV: list[str] = []  # main's arguments
_STARTED = [time.time()]  # when main began: a sweep's or a benchmark's start, recorded with its points


def _typed(flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in _ARGV)


def _override(cfg, section: str, **values):
    """cfg.override, with a value the check refuses blamed on its command-line flag, not on the config file."""
    try:
        return cfg.override(section, **values)
    except ConfigError as exc:
        prefix, _, name = (exc.field or "").partition(".")
        if prefix != section or values.get(name) is None:
            raise
        flag = _FLAG_OF.get(name, "--" + name.replace("_", "-"))
        flag = next((f for f in _SPELLINGS.get(flag, ()) if _typed(f)), flag)
        reason = str(exc).removeprefix(f"{cfg.source}: ")
        raise ConfigError(f"{flag}: {reason}", layer=exc.layer, field=exc.field) from None


def _config(args):
    from nncore.config import load_config
    from nncore.data import is_table

    cfg = load_config(args.config)
    cfg = _override(cfg, "train", arch=args.arch, threads=args.threads, epochs=args.epochs, batch_size=args.batch_size,
                       lr=args.lr, optimizer=args.optimizer, momentum=args.momentum, seed=args.seed,
                       shuffle=False if args.no_shuffle else None, timing_every=args.timing_every)
    if args.dataset or args.data:
        cfg = _override(cfg, "data", dataset=args.dataset, path=args.data)
        if args.dataset:
            cfg.data["path"] = None
        else:
            cfg.data["dataset"] = None
    if (args.test_data or args.label is not None) and not is_table(cfg.data["path"]):
        raise ConfigError(f"{'--test-data' if args.test_data else '--label'} applies to a CSV file given with --data "
                          "(or a config's data.path)")
    return _override(cfg, "data", limit=args.limit, test_path=args.test_data, label=args.label)


def _note_threads(threads, arch) -> None:
    """Say once (stderr) when more threads are asked for than this process has cores (``report.threads_note``)."""
    from nncore.report import threads_note

    note = threads_note(threads, arch)
    if note:
        print(f"layerlab: note: {note}", file=sys.stderr)


def _data_progress() -> None:
    """Progress on stderr while a CSV file loads (nncore.tabular), twice a second, on one line on a terminal."""
    from nncore import tabular

    tty = sys.stderr.isatty()

    def show(path, rows, done, size, last):
        print(f"layerlab: reading {path}: {rows:,} rows, {done / 2**20:,.0f} of {size / 2**20:,.0f} MiB",
              end="\n" if last or not tty else "\r", file=sys.stderr, flush=True)

    tabular.progress = show


def _ranks_wanted(args) -> int | None:
    """How many ranks to launch: --ranks, else the config's train.ranks when above 1, else None (train here)."""
    if args.distributed:
        return None
    if args.ranks is not None:
        return args.ranks
    try:
        ranks = _config(args).train["ranks"]
    except LayerlabError:
        return None  # _train reports it
    return ranks if ranks > 1 else None


def _launch_ranks(args, argv: list[str], ranks: int) -> int:
    """``--ranks N`` (or train.ranks = N): run this same command as N ranks under mpiexec and pass its exit
    code on."""
    from nncore.distributed import launch_command, mpi_missing

    if ranks < 1:
        print(f"layerlab: error: --ranks: {ranks} must be at least 1", file=sys.stderr)
        return EXIT_CONFIG
    missing = mpi_missing()
    if missing:
        print(f"layerlab: error: --ranks {ranks}: {missing}", file=sys.stderr)
        return EXIT_CONFIG
    rest, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--ranks":
            skip = True
        elif not a.startswith("--ranks="):
            rest.append(a)
    cmd, env = launch_command(ranks, rest)
    # Ctrl-C reaches mpiexec, which passes it to the ranks; this process only waits for their verdict. (A
    # handler, not SIG_IGN: an ignored signal would stay ignored in mpiexec too.) A SIGTERM is passed on, and
    # mpiexec is told to end with this process however it dies, so no rank outlives the launcher.
    proc = None

    def on_term(signum, frame):
        if proc is not None and proc.poll() is None:
            proc.terminate()

    previous = signal.signal(signal.SIGINT, lambda signum, frame: None), signal.signal(signal.SIGTERM, on_term)
    try:
        pure = args.jsonl == "-"  # JSON lines on stdout stay pure: mpiexec's own notes go to stderr
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE if pure else None, text=True,
                                preexec_fn=_end_with_parent)
        with proc:
            if pure:
                for line in proc.stdout:
                    out = sys.stdout if line.startswith("{") else sys.stderr
                    out.write(line)
                    out.flush()
            proc.wait()
        return proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])


def _end_with_parent() -> None:
    """In mpiexec before it starts (Linux): SIGTERM when the launcher dies, even by SIGKILL."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _abort_ranks(code: int) -> None:
    """In a rank of a distributed run, end the whole job (the other ranks may wait in a collective)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.Get_size() > 1:
        sys.stderr.flush()
        mpi.COMM_WORLD.Abort(code)


def _train(args) -> int:
    interrupted, cluster = [], None

    def on_signal(signum, frame):
        # SIGINT (Ctrl-C), SIGTERM (timeout, docker stop, systemd) and SIGHUP end the run after the current
        # step, with what was asked for written. A second Ctrl-C a second or more after the first abandons the
        # step; one that follows at once (a double press) is the same request.
        if interrupted:
            if signum == signal.SIGINT and time.monotonic() - interrupted[0][1] >= 1.0:
                raise KeyboardInterrupt
            return
        interrupted.append((signum, time.monotonic()))
        if cluster is None or cluster.is_root:
            _stderr(f"\nlayerlab: {signal_said(signum)}; finishing the current step")

    # First of all: a rank interrupted inside MPI's start-up must not leave the others waiting in it.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    from nncore.config import check_run
    from nncore.events import RunFailed
    from nncore.fileio import check_outputs
    from nncore.report import TextReporter
    from nncore.train import Trainer

    status, jsonl, root = None, None, True
    try:
        if args.distributed:
            from nncore.distributed import INSTALL_HINT, Cluster, find_mpiexec

            cluster = Cluster()
            root = cluster.is_root
            want = os.environ.get("LAYERLAB_RANKS")
            if want and want.isdigit() and int(want) != cluster.size:
                raise ConfigError(f"mpiexec ({find_mpiexec()}) started {want} separate one-rank runs, not one run "
                                  f"of {want} ranks: it belongs to another MPI than mpi4py's; {INSTALL_HINT}, or "
                                  "name the right one in LAYERLAB_MPIEXEC")
        cfg = _config(args)
        if args.resume and args.init_weights:  # (the checkpoint's weights would replace those asked for)
            raise ConfigError("--resume and --init-weights: give one; a checkpoint holds its own weights")
        # Every output checked before the data is read and training starts, not found unwritable after it.
        check_outputs([("--save-weights", args.save_weights), ("--checkpoint", args.checkpoint),
                       ("--jsonl", None if args.jsonl in (None, "-") else args.jsonl)],
                      _train_inputs(cfg, args), replaces=(("--checkpoint", "--resume"),
                                                          ("--save-weights", "--init-weights")))
        if root and not args.quiet and args.jsonl != "-":
            _data_progress()
        info = check_run(cfg)  # the dataset and the network's fit to it, before a backend starts (the app alike)
        for note in info.notes if root and not args.quiet else ():
            print(f"layerlab: {note}", file=sys.stderr)
        if root and not args.quiet:
            _note_threads(cfg.train.get("threads"), cfg.train.get("arch"))
        trainer = Trainer(cfg, init_weights=args.init_weights, save_weights=args.save_weights,
                          checkpoint=args.checkpoint, checkpoint_every=args.checkpoint_every, resume=args.resume,
                          cluster=cluster)
        if args.jsonl and args.jsonl != "-" and root:
            try:
                jsonl = open(args.jsonl, "w", encoding="utf-8")
            except OSError as exc:
                raise ConfigError(f"--jsonl {args.jsonl}: cannot write ({exc.strerror or exc})") from None
    except LayerlabError as exc:
        status = (exc.exit_code, str(exc))
    if cluster is not None and cluster.size > 1:
        # One rank's failure here (its filesystem, its files) must end every rank, not leave them in a collective.
        report = cluster.allgather(status)
        failed = next(((rank, st) for rank, st in enumerate(report) if st is not None), None)
        if failed is not None:
            if cluster.is_root:
                rank, (_, message) = failed
                print(f"layerlab: error: {'' if rank == 0 else f'rank {rank}: '}{message}", file=sys.stderr)
            if jsonl is not None:
                jsonl.close()
            return failed[1][0]
    elif status is not None:
        print(f"layerlab: error: {status[1]}", file=sys.stderr)
        return status[0]
    if args.jsonl == "-" and root:
        jsonl = sys.stdout
    text = None if args.jsonl == "-" or not root else TextReporter(sys.stdout, quiet=args.quiet)
    lost = []  # where the events could not be written (a full disk mid-run): the run goes on, the exit says so
    unread = []  # where the text report could not be written (`layerlab train ... | head`): the same
    count = [0]  # events emitted so far, to say from which one on the output is missing

    def emit(event):
        nonlocal text
        count[0] += 1
        where = f"event {count[0]:,} ({'an' if event.kind[:1] in 'aeiou' else 'a'} {event.kind} event)"
        if jsonl is not None and not lost:
            try:
                jsonl.write(event.to_json() + "\n")
                jsonl.flush()
            except OSError as exc:
                lost.append((where, exc.strerror or str(exc)))
                _silence_stdout(jsonl)
                _stderr(f"layerlab: warning: --jsonl {args.jsonl}: writing the events failed ({lost[0][1]}) at "
                        f"{where}; the run goes on")
        if text is not None:
            try:
                text(event)
            except OSError as exc:
                unread.append((where, exc.strerror or str(exc)))
                text = None
                _silence_stdout(sys.stdout)
                _stderr(f"layerlab: warning: stdout: writing the report failed ({unread[0][1]}) at {where}; "
                        "the run goes on")

    recorder = _recorder(args, cfg) if root else None  # rank 0 records a distributed run

    def emit_and_record(event):
        if recorder is not None:
            recorder(event)
        emit(event)

    trainer.emit, trainer.should_stop = emit_and_record, (lambda: bool(interrupted))
    try:
        end = trainer.run()
    except Exception as exc:
        if cluster is None or cluster.size == 1:
            raise
        # Anything unforeseen on one rank would leave the others waiting in a collective: end them all.
        print(f"layerlab: error: rank {cluster.rank}: {type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr)
        sys.stderr.flush()
        cluster.abort(EXIT_ERROR)
        raise
    finally:
        if jsonl is not None and jsonl is not sys.stdout:
            try:
                jsonl.close()
            except OSError:
                pass
    if isinstance(end, RunFailed):
        alone = trainer.failed_alone and cluster.size > 1
        if root or alone:
            prefix = f"rank {cluster.rank}: " if alone and not root else ""
            _stderr(f"layerlab: error: {prefix}{end.error}")
        if alone:
            sys.stderr.flush()
            cluster.abort(end.exit_code)
        return end.exit_code
    if lost:
        _stderr(f"layerlab: error: --jsonl {args.jsonl}: the events from {lost[0][0]} on are missing "
                f"({lost[0][1]}); the run itself finished")
        return EXIT_CONFIG
    if unread:
        _stderr(f"layerlab: error: stdout: the report from {unread[0][0]} on is missing ({unread[0][1]}); "
                "the run itself finished")
        return EXIT_CONFIG
    if interrupted:  # 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP: the shell's convention
        return 128 + interrupted[0][0]
    return EXIT_OK


def _to_devnull(stream) -> None:
    """Point a standard stream whose reader is gone (a closed pipe) at /dev/null, so that nothing written later,
    nor Python's flush at exit, raises again."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stream.fileno())
        os.close(null)
    except (OSError, ValueError):
        pass


def _stderr(line: str) -> None:
    """A line on stderr; where its reader is gone too (`train ... 2>&1 | head`), stderr goes to /dev/null and
    the run goes on (the exit code still says what was lost)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        _to_devnull(sys.stderr)


def _silence_stdout(stream) -> None:
    """Point stdout at /dev/null where ``stream`` is stdout and its reader is gone."""
    if stream is sys.stdout:
        _to_devnull(sys.stdout)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Started with stdout or stderr closed (`2>&-`), Python has None there: what would be said goes nowhere,
    # rather than failing the run.
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))
    _ARGV[:] = argv
    _STARTED[0] = time.time()
    args = _parser().parse_args(argv)
    if args.version:
        print(f"layerlab {package_version()}")
        return EXIT_OK
    try:
        if args.command in ("train", "sweep", "bench", "runs") and not getattr(args, "no_store", False):
            try:
                (check_store_name if args.command == "runs" else check_store_arg)(getattr(args, "store", None))
            except ConfigError as exc:
                print(f"layerlab: error: {exc}", file=sys.stderr)
                return exc.exit_code
        if args.command == "tui":
            # The engine never imports the app: `layerlab` (tui.launch) opens it.
            print("layerlab: error: the app is opened by the `layerlab` command, not by nncore.cli",
                  file=sys.stderr)
            return EXIT_CONFIG
        if args.command == "bench":
            from nncore.benchcli import run_bench

            return run_bench(args)
        if args.command in ("sweep", "lockstep"):
            from nncore.sweepcli import run_lockstep, run_sweep_cli

            return run_sweep_cli(args) if args.command == "sweep" else run_lockstep(args)
        if args.command == "archs":
            return _archs()
        if args.command == "runs":
            from nncore.runscli import run_runs

            return run_runs(args)
        if args.command == "train":
            ranks = _ranks_wanted(args)
            return _launch_ranks(args, argv, ranks) if ranks is not None else _train(args)
    except BrokenPipeError:  # `layerlab runs show 3 | head`, `layerlab bench | head`: the reader has what it wanted
        _silence_stdout(sys.stdout)
        return EXIT_OK
    except KeyboardInterrupt:
        print("layerlab: interrupted", file=sys.stderr)
        if getattr(args, "distributed", False):
            _abort_ranks(EXIT_INTERRUPTED)
        return EXIT_INTERRUPTED
    except OSError as exc:
        if exc.filename is None and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG):
            # stdout on a full disk (`> /dev/full`): said in one line; the run store holds what was recorded
            print(f"layerlab: error: the output could not be written ({exc.strerror or exc})", file=sys.stderr)
            return EXIT_CONFIG
        if exc.filename is None:  # not a path given: an unforeseen failure, reported as such
            raise
        # A path the system refused where no check named it (a name too long, a loop of links): the path and the
        # system's reason, as bad input.
        print(f"layerlab: error: {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_CONFIG
    _parser().print_help()
    return EXIT_CONFIG


if __name__ == "__main__":
    sys.exit(main())
