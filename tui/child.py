"""Training in a child process that owns Taichi, streaming nncore events back over a pipe.

A running kernel holds the GIL and Taichi is bound to the thread that initialised it, so the app never
trains in one of its own threads: it spawns a process (multiprocessing, spawn) per run. The child sends one
JSON line per event; the parent polls the pipe without blocking. Commands go the other way: pause, resume,
step (one step while paused), stop. For 2-D datasets the child also sends the decision boundary, a grid of
predicted probabilities, at the start and after every epoch.

A distributed run (train.ranks > 1) is `layerlab train` under mpiexec instead: the child starts it, relays
rank 0's JSON lines and turns "stop" into the Ctrl-C that mpiexec passes to every rank. Pausing is not offered
there (the ranks step together through their collectives).
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import sys
import time
from multiprocessing.connection import Connection

BOUNDARY_RES = (48, 32)  # columns, rows of the probability grid
TERM_GRACE_S = 2.0  # a process still running this long after its SIGTERM is killed
STOP_GRACE_S = 30.0  # a distributed run not ended this long after a stop is killed


class _Controller:
    """The child's should_stop: applies commands between steps and blocks while paused."""

    def __init__(self, conn: Connection):
        self.conn, self.trainer = conn, None
        self.paused = self.stop = False
        self.steps = 0
        self.reported = False  # the step before this pause was sent (trainer.report_step)

    def _drain(self, timeout: float) -> None:
        while self.conn.poll(timeout):
            cmd = self.conn.recv()
            timeout = 0
            if cmd == "stop":
                self.stop = True
            elif cmd == "pause":
                self.paused = True
            elif cmd == "resume":
                self.paused = False
            elif cmd == "step":
                self.steps += 1

    def __call__(self) -> bool:
        self._drain(0)
        while self.paused and not self.stop:
            if not self.reported:  # step events are throttled: send the one the run is paused after
                self.reported = True
                if self.trainer is not None and self.trainer.report_step is not None:
                    self.trainer.report_step()
            if self.steps:
                self.steps -= 1
                self.trainer.log_next = True
                break
            self._drain(0.05)
        if not self.paused:
            self.reported = False
        return self.stop


def _boundary(trainer, points: bool) -> dict:
    import numpy as np

    ds = trainer.ds
    xy = np.concatenate([ds.x_train, ds.x_test])
    lo, hi = xy.min(0) - 0.1, xy.max(0) + 0.1
    cols, rows = BOUNDARY_RES
    gx, gy = np.meshgrid(np.linspace(lo[0], hi[0], cols), np.linspace(hi[1], lo[1], rows))
    logits = trainer.net.predict(np.stack([gx.ravel(), gy.ravel()], 1).astype(np.float32))
    if logits.shape[1] == 1:
        prob = 1 / (1 + np.exp(-logits[:, 0].astype(np.float64)))
    else:
        e = np.exp(logits - logits.max(1, keepdims=True))
        prob = e[:, 1] / e.sum(1)
    out = {"event": "boundary", "extent": [float(lo[0]), float(hi[0]), float(lo[1]), float(hi[1])],
           "res": [cols, rows], "prob": np.round(prob, 3).tolist()}
    if points:
        pick = np.random.default_rng(0).permutation(len(ds.x_test))[:300]
        out["points"] = [[float(x), float(y), int(c)] for (x, y), c in zip(ds.x_test[pick], ds.y_test[pick])]
    return out


def _silence_stdio() -> None:
    """Taichi's C++ side writes to fds 1 and 2, which are the app's terminal: send them nowhere."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)


def child_main(cfg: dict, conn: Connection, boundary: bool, store: str | None = None) -> None:
    """Entry point of the training process; it records the run in the run store at ``store`` (None: not at
    all, the app keeps it)."""
    _silence_stdio()
    from nncore.config import RunConfig
    from nncore.events import EpochEnd, RunFailed, RunStarted
    from nncore.train import Trainer

    ctl = _Controller(conn)
    recorder = _recorder(cfg, conn, store) if store is not None else None
    _loading_progress(conn)

    def emit(event) -> None:
        if recorder is not None:  # this process trains, so it records (each epoch in one transaction)
            recorder(event)
        conn.send(event.to_json())
        # Only these events come after a successful set-up (a failed one has no dataset to draw).
        if boundary and isinstance(event, (RunStarted, EpochEnd)) and trainer.ds.input_shape == (2,):
            conn.send(json.dumps(_boundary(trainer, isinstance(event, RunStarted))))

    try:
        trainer = Trainer(RunConfig(**cfg), emit, should_stop=ctl)
        ctl.trainer = trainer
        trainer.run()
    except Exception as exc:  # anything the trainer did not turn into RunFailed
        conn.send(RunFailed(f"{type(exc).__name__}: {exc}".splitlines()[0], 1).to_json())
    finally:
        conn.close()


def _loading_progress(conn: Connection) -> None:
    """While a CSV file loads (nncore.tabular reports twice a second), "loading" lines to the app, which shows
    them in place of "starting a training process…": this process reads the file again, which takes seconds
    for a large one."""
    from pathlib import Path

    from nncore import tabular

    def send(path, rows, done, size, last) -> None:  # short: it shares a line with the buttons at 80 columns
        pct = f" {100 * done // size}%" if size else f" {rows:,} rows"
        conn.send(json.dumps({"event": "loading", "message": f"reading {Path(path).name}{pct}"}))

    tabular.progress = send


def _open_store(path: str, conn: Connection):
    """The run store at ``path``, or None with a warning to the app (the work goes on without history)."""
    from nncore.store import Store, StoreError

    try:
        return Store(path)
    except StoreError as exc:
        conn.send(json.dumps({"event": "store_warning", "message": f"{exc}; not recorded"}))
        return None


def _recorder(cfg: dict, conn: Connection, path: str):
    from nncore.store import Recorder

    store = _open_store(path, conn)
    if store is None:
        return None
    return Recorder(store, str(cfg.get("source") or "run"), cfg, warn=lambda message: conn.send(
        json.dumps({"event": "store_warning", "message": message})))


def _die_with_parent() -> None:
    """In mpiexec, before it starts: if the relay is killed, mpiexec gets SIGTERM and ends its ranks."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _rank_error(lines: list[str], code: int | None) -> str:
    """The line that says why a distributed run failed: a rank's own error rather than MPI's notes."""
    said = [e.strip() for e in lines if e.strip()]
    ours = [e for e in said if e.startswith("layerlab: error:")]
    if ours:
        return ours[-1].removeprefix("layerlab: error:").strip()
    theirs = [e for e in said if not e.startswith(("[mpiexec", "Abort("))]
    return theirs[-1] if theirs else f"mpiexec exited with code {code}"


def distributed_main(cfg: dict, conn: Connection, store: str | None = None) -> None:
    """Entry point of a distributed run's relay process: mpiexec runs the ranks, rank 0's JSON lines come
    back. A stop is a Ctrl-C to mpiexec (every rank finishes the same step); a second stop, or one not obeyed
    within STOP_GRACE_S, is mpiexec's forced abort; and mpiexec never outlives this process."""
    import signal
    import subprocess
    import tempfile
    import threading

    _silence_stdio()
    from nncore.config import network_name
    from nncore.distributed import launch_command
    from nncore.events import RunFailed

    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))  # so that `finally` cleans up
    ranks = cfg["train"]["ranks"]
    final, lock, proc = threading.Event(), threading.Lock(), None

    def send(line: str) -> None:
        with lock:
            conn.send(line)

    try:
        with tempfile.TemporaryDirectory(prefix="layerlab-") as tmp:
            path = os.path.join(tmp, "run.json")
            with open(path, "w", encoding="utf-8") as fh:
                # (named as in the app: the ranks' run is recorded under the network's name, not "run")
                json.dump({"name": network_name(str(cfg.get("source") or "")),
                           **{k: cfg[k] for k in ("model", "data", "train")}}, fh)
            where = ["--store", store] if store is not None else ["--no-store"]  # rank 0 records
            cmd, env = launch_command(ranks, ["train", path, "--jsonl", "-", "--quiet", *where])
            proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, preexec_fn=_die_with_parent)
            errors: list[str] = []
            err_reader = threading.Thread(target=lambda: errors.extend(proc.stderr), daemon=True)
            err_reader.start()

            def relay():
                for line in proc.stdout:
                    try:
                        kind = json.loads(line).get("event")
                    except (ValueError, AttributeError):
                        continue  # mpiexec's own notes
                    send(line.strip())
                    if kind in ("run_finished", "run_failed"):
                        final.set()

            reader = threading.Thread(target=relay, daemon=True)
            reader.start()
            stop_at = None
            while proc.poll() is None:
                if conn.poll(0.1) and conn.recv() == "stop":
                    if stop_at is None:
                        stop_at = time.monotonic()
                        proc.send_signal(signal.SIGINT)  # mpiexec hands it to every rank: they stop together
                    elif time.monotonic() - stop_at > 2:
                        proc.send_signal(signal.SIGINT)  # the second Ctrl-C: mpiexec aborts the ranks
                if stop_at is not None and time.monotonic() - stop_at > STOP_GRACE_S:
                    proc.kill()
            reader.join(5)
            err_reader.join(1)
            if not final.is_set():
                send(RunFailed(f"distributed run over {ranks} ranks failed: {_rank_error(errors, proc.returncode)}",
                               proc.returncode or 1).to_json())
    except Exception as exc:  # mpiexec missing, a pipe gone: one line back to the app
        if not final.is_set():
            try:
                send(RunFailed(f"{type(exc).__name__}: {exc}".splitlines()[0], 1).to_json())
            except OSError:
                pass
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(3)
            except subprocess.TimeoutExpired:
                proc.kill()
        conn.close()


def sweep_main(job: dict, conn: Connection, store: str | None = None) -> None:
    """Entry point of a sweep process: progress messages, then the points and the Amdahl view; the points are
    recorded as one run in the run store at ``store`` (None: not recorded here). A "stop" from the app ends the
    sweep before its next point, a SIGTERM (the app quitting) during the current one; either way the points
    measured so far are sent and recorded, as a stopped sweep."""
    _silence_stdio()

    state = {"measuring": True, "term": False}

    def on_term(signum, frame):  # (between two of Python's instructions: never inside a Taichi kernel)
        state["term"] = True
        if state["measuring"]:  # the point under way is dropped; what follows records the others
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    asked = []

    def should_stop() -> bool:
        try:
            while not asked and conn.poll(0):
                if conn.recv() == "stop":
                    asked.append(True)
        except (EOFError, OSError):  # the app is gone
            asked.append(True)
        return bool(asked)

    try:
        from nncore import analysis, runtime, sweep

        def progress(i, n, what):
            conn.send(json.dumps({"event": "sweep_progress", "i": i, "n": n, "what": what}))

        try:
            points = sweep.run_sweep(job["model"], job["archs"], job["batches"], job["filters"], job["threads"],
                                     job["steps"], job["repeats"], job["warmup"], progress=progress,
                                     should_stop=should_stop)
        except KeyboardInterrupt:  # during the first point: nothing measured
            points = sweep.Stopped([], 0)
        state["measuring"] = False
        stopped = ({"points": len(points), "of": points.of, **({"error": str(points.error)} if points.error else {})}
                   if isinstance(points, sweep.Stopped) else None)
        serial = next((p for p in points if p.arch == "cpu-serial"), None)
        amdahl = None
        if serial is not None and not state["term"]:  # (not when the app is quitting: it would be cut short)
            runtime.init("cpu-serial")
            measured = {p.arch: p.speedup for p in points if p.arch != "cpu-serial"
                        and p.batch == serial.batch and p.filters == serial.filters}
            amdahl = analysis.amdahl_view(serial, analysis.measure_launch_ms(), max(job["threads"]), measured).__dict__
        points = [p.to_dict() for p in points]
        if store is not None and points:
            _record_sweep(job, points, amdahl, store, conn, stopped)
        conn.send(json.dumps({"event": "sweep_done", "points": points, "amdahl": amdahl, "stopped": stopped}))
    except Exception as exc:  # a LayerlabError or anything else: one line back to the app
        try:
            conn.send(json.dumps({"event": "sweep_failed", "error": f"{exc}".splitlines()[0] if str(exc) else
                                  type(exc).__name__}))
        except OSError:
            pass
    except KeyboardInterrupt:  # a SIGTERM after the points were in: they are recorded or being sent
        pass
    finally:
        conn.close()


SWEEP_FIELDS = ("archs", "batches", "filters", "threads", "steps", "repeats", "warmup")


def record_sweep(store, job: dict, points: list[dict], amdahl: dict | None, stopped: dict | None = None) -> int:
    """An app sweep as one ended run: its network, what was swept, the points and the Amdahl view; ``stopped``
    ({"points": n, "of": m}) for one stopped part-way, recorded as "stopped"."""
    from nncore.sweep import threads_used

    summary = {"amdahl": amdahl, **({"stopped": stopped} if stopped else {})}
    return store.add_finished("sweep", str(job.get("name") or "sweep"),
                              {"model": job["model"], "sweep": {k: job[k] for k in SWEEP_FIELDS}}, points,
                              summary, status="stopped" if stopped else "finished", arch=",".join(job["archs"]),
                              threads=threads_used(points), started=job.get("started"))


def _record_sweep(job: dict, points: list[dict], amdahl: dict | None, path: str, conn: Connection,
                  stopped: dict | None = None) -> None:
    from nncore.store import StoreError

    store = _open_store(path, conn)
    if store is None:
        return
    try:
        record_sweep(store, job, points, amdahl, stopped)
    except (StoreError, OSError) as exc:
        conn.send(json.dumps({"event": "store_warning", "message": f"run store {path}: sweep not recorded ({exc})"}))
    finally:
        store.close()


class RunHandle:
    """The parent's side of one training (or sweep) process."""

    def __init__(self, cfg: dict, boundary: bool = True, target=None, store: str | None = None):
        """``store``: the run store's path, where the child records the run (None: it does not)."""
        ctx = mp.get_context("spawn")
        self.conn, child_conn = ctx.Pipe()
        args = (cfg, child_conn, store) if target is not None else (cfg, child_conn, boundary, store)
        self.proc = ctx.Process(target=target or child_main, args=args, daemon=True)
        # multiprocessing hands sys.stderr's descriptor to its helper; under the app that may be a stand-in.
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
        try:
            self.proc.start()
        finally:
            sys.stdout, sys.stderr = saved
        child_conn.close()
        self.finished = False  # the child sent run_finished or run_failed
        self.closed = False  # the pipe reached EOF
        self.deaf = False  # a command could not be written: the child has ended (what it sent is still read)

    def poll(self, limit: int = 500) -> list[dict]:
        """Messages that have arrived, without blocking (at most ``limit`` per call)."""
        out = []
        while not self.closed and len(out) < limit:
            try:
                if not self.conn.poll(0):
                    break
                msg = json.loads(self.conn.recv())
            except ValueError:
                continue
            except (EOFError, OSError):
                self.closed = True
                break
            if msg.get("event") in ("run_finished", "run_failed", "sweep_done", "sweep_failed"):
                self.finished = True
            out.append(msg)
        return out

    def send(self, cmd: str) -> None:
        # A stop that comes after the run ended finds the child's end closed; its last messages (run_finished)
        # are still in the pipe, so this side stays open for reading.
        if not self.closed and not self.deaf:
            try:
                self.conn.send(cmd)
            except (BrokenPipeError, OSError):
                self.deaf = True

    @property
    def died(self) -> bool:
        """The process ended without sending its final event."""
        return not self.finished and not self.proc.is_alive() and self.closed

    def exitcode(self) -> int | None:
        return self.proc.exitcode

    def shutdown(self, timeout: float = 3.0) -> None:
        """Ask the run to stop, then make sure the process is gone. Its messages are read (and dropped) while it
        winds down: a child blocked writing into a full pipe would never see the stop, and be killed as "died"
        with its run half recorded."""
        self.send("stop")
        self._wait(timeout)
        if self.proc.is_alive():  # a SIGTERM next: a sweep ends its current point there and keeps the rest
            self.proc.terminate()
            self._wait(TERM_GRACE_S)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(1.0)

    def _wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.proc.is_alive() and time.monotonic() < deadline:
            self.poll()
            self.proc.join(0.02)
