"""Human-readable output of a run for the headless CLI: a progress line per epoch, one line per finished
epoch, and a per-layer timing table with the test accuracy at the end. Consumes the same events as the app.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TextIO

from .events import EpochEnd, Event, RunFailed, RunFinished, RunStarted, Step
from .limits import printable
from .store import mean_rate, rate_basis


def short_arch(arch: str | None) -> str:
    """An arch for a narrow column: a sweep's list of archs as ``serial+parallel`` (the ``cpu-`` prefixes and
    commas of ``cpu-serial,cpu-parallel`` dropped); a single arch, or none (—), as it is."""
    if not arch:
        return "—"
    parts = [a.strip() for a in arch.split(",") if a.strip()]
    return "+".join(a.removeprefix("cpu-") for a in parts) if len(parts) > 1 else arch


def timing_table(timings) -> list[str]:
    """The per-part table, its name column as wide as the longest part's name (a fused part's names are long)."""
    width = max([22, *(len(t.name) for t in timings)])
    rows = [f"{'part':<{width}} {'fwd ms':>9} {'bwd ms':>9} {'share':>7} {'GFLOP/s':>9}"]
    for t in timings:
        gf = f"{t.gflops:9.2f}" if t.gflops else f"{'':>9}"
        rows.append(f"{t.name:<{width}} {t.fwd_ms:9.3f} {t.bwd_ms:9.3f} {100 * t.share:6.1f}% {gf}")
    return rows


def rank_table(ranks: list[dict]) -> list[str]:
    """Per-rank samples, epoch time and communication (all-reduce, staging and waiting) of a distributed run."""
    rows = [f"{'rank':<5} {'device':<34} {'samples':>8} {'epoch s':>8} {'comm s':>8} {'comm':>6}"]
    for r in ranks:
        share = r["comm_s"] / r["epoch_s"] if r["epoch_s"] > 0 else 0.0
        where = f"{r['host']}: {r['device']}"[:34]
        rows.append(f"{r['rank']:<5} {where:<34} {r['samples']:>8,} {r['epoch_s']:8.3f} {r['comm_s']:8.3f} "
                    f"{100 * share:5.1f}%")
    return rows


def loss_text(value: float | None) -> str:
    """A loss as printed: four decimals, in exponent form from 100,000 up (a diverging run's 1e30 is not 31 digits
    wide); — where there is none."""
    if value is None:
        return "—"
    return f"{value:.4f}" if abs(value) < 1e5 else f"{value:.4g}"


def plural(n: int, noun: str) -> str:
    """``n`` (with thousands separators) and the noun, plural unless n is 1: "1 step", "1,000 steps"."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def batch_note(config: dict, train_samples: int) -> str | None:
    """What to tell a user whose batch size exceeds the training set: each epoch is then one step on the whole
    set (full-batch gradient descent), which is allowed but rarely what a typo meant."""
    batch = config.get("train", {}).get("batch_size")
    if isinstance(batch, int) and batch > train_samples > 0:
        return (f"train.batch_size {batch:,} exceeds the {train_samples:,} training samples: each epoch is one "
                f"step on all {train_samples:,}")
    return None


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, an ellipsis where it was cut (names in tables and status lines)."""
    return text if len(text) <= width else text[:width - 1] + "…"


EDITED = " (edited)"  # after a network's name, in the runs of it changed since it was opened or saved


def data_label(cfg: dict) -> str | None:
    """What a recorded run trained on, short: the data file's or directory's name, else the dataset's (None where
    the config names no data)."""
    data = cfg.get("data") if isinstance(cfg, dict) else None
    if not isinstance(data, dict):
        return None
    label = (Path(str(data["path"])).name or str(data["path"])) if data.get("path") else data.get("dataset")
    return printable(str(label)) if label else None


def cut_name(name: str, width: int) -> str:
    """A network's name as cut() gives it, but with " (edited)" kept whole where it ends the name ("quadrant
    (edi…" read as another network), or, with room for only a few characters of the name, as "*"."""
    if len(name) <= width or not name.endswith(EDITED) or width < 2:
        return cut(name, width)
    base = name[:-len(EDITED)]
    return cut(base, width - len(EDITED)) + EDITED if width >= len(EDITED) + 6 else cut(base, width - 1) + "*"


def threads_note(threads, arch: str | None) -> str | None:
    """What to tell a user who asked for more threads than this process has cores: allowed (a sweep over thread
    counts may want it), but they then share the cores and a run is slower, not faster."""
    from .runtime import cpu_count

    cores = cpu_count()
    if isinstance(threads, int) and threads > cores and arch in (None, "cpu-parallel"):  # (cpu-serial refuses it)
        return (f"{threads} threads on the {cores} core{'s' * (cores != 1)} this process may use: they will share "
                "them (slower, not faster)")
    return None


class TextReporter:
    def __init__(self, out: TextIO = sys.stdout, quiet: bool = False, progress: bool | None = None):
        self.out, self.quiet = out, quiet
        self.epochs: list[dict] = []  # the run's epoch_end events, for its training rate
        self.progress = (not quiet and sys.stderr.isatty()) if progress is None else progress
        self.last_epoch: EpochEnd | None = None
        self.started: RunStarted | None = None
        self._t_epoch = time.perf_counter()

    def _line(self, text: str) -> None:
        if self.progress:
            sys.stderr.write("\r\x1b[K")
        print(text, file=self.out, flush=True)

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self.started = event
            self._t_epoch = time.perf_counter()
            if not self.quiet:
                name = event.config.get("data", {}).get("dataset") or event.config["data"].get("path")
                threads = plural(event.threads, "thread")
                steps = plural(event.steps_per_epoch, "step")
                self._line(f"layerlab: {event.arch} ({threads}) on {event.device}; "
                           f"{event.n_params:,} parameters; {name}: {event.train_samples:,} train / "
                           f"{event.test_samples:,} test; {steps} per epoch")
                note = batch_note(event.config, event.train_samples)
                if note:
                    self._line(f"note: {note}")
                if event.ranks > 1:
                    self._line(f"data parallel over {event.ranks} MPI ranks: " + "; ".join(
                        f"rank {r} on {d}" for r, d in enumerate(event.rank_devices)))
        elif isinstance(event, Step) and self.progress and self.started:
            self._bar(event)
        elif isinstance(event, EpochEnd):
            self.last_epoch = event
            # An epoch that ran step 1 counts its compile in its rate; the closing line's rate leaves it out.
            compiling = " incl. compile" if event.first_step_s > 0 else ""
            self.epochs.append(event.to_dict())
            self._t_epoch = time.perf_counter()
            if not self.quiet:
                val = f"  val loss {loss_text(event.val_loss)} acc {event.val_acc:.4f}" if event.val_acc is not None else ""
                if event.comm_share is not None:
                    val += f"  comm {100 * event.comm_share:.1f}%"
                self._line(f"epoch {event.epoch:>3}  train loss {loss_text(event.train_loss)}  test loss "
                           f"{loss_text(event.test_loss)}  test acc {event.test_acc:.4f}{val}  "
                           f"{event.samples_per_s:,.0f} samples/s{compiling}  {event.epoch_s:.2f} s")
        elif isinstance(event, RunFinished):
            self._finish(event)
        elif isinstance(event, RunFailed) and self.progress:
            sys.stderr.write("\r\x1b[K")

    def _bar(self, event: Step) -> None:
        per = self.started.steps_per_epoch
        done = (event.step - 1) % per + 1
        frac = done / per
        width = 30
        left = (per - done) * (time.perf_counter() - self._t_epoch) / max(done, 1)
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        sys.stderr.write(f"\repoch {event.epoch} [{bar}] {done}/{per}  loss {loss_text(event.loss)}  "
                         f"{event.samples_per_s:,.0f} samples/s  ETA {left:.0f}s")
        sys.stderr.flush()

    def _finish(self, event: RunFinished) -> None:
        if self.last_epoch is not None and self.last_epoch.timings and not self.quiet:
            self._line(f"per-layer time, epoch {self.last_epoch.epoch} ({self.last_epoch.timed_steps} synced steps):")
            for row in timing_table(self.last_epoch.timings):
                self._line("  " + row)
        if self.last_epoch is not None and self.last_epoch.ranks and not self.quiet:
            self._line(f"per-rank time, epoch {self.last_epoch.epoch}:")
            for row in rank_table(self.last_epoch.ranks):
                self._line("  " + row)
        state = "stopped" if event.stopped else "done"
        saved = f"; weights saved to {event.weights}" if event.weights else ""
        acc = ("no evaluation yet" if event.test_acc is None else
               f"test acc {event.test_acc:.4f} (best {event.best_test_acc:.4f})")
        batch = self.started.config["train"]["batch_size"] if self.started else 0
        per_s = mean_rate(self.epochs, batch) if self.epochs else event.samples_per_s  # step 1 (compiling)
        # Epoch 1 (or within it step 1: compiling) left out, as the run store and the app leave it; the line says so.
        rate = "" if per_s is None else f"{per_s:,.0f} samples/s {rate_basis(len(self.epochs))}, "
        counts = f"{plural(event.epochs, 'epoch')}, {plural(event.steps, 'step')}"
        self._line(f"{state}: {counts}, {acc}, {rate}{event.total_s:.1f} s{saved}")
