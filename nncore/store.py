"""The run store: every run's config, status, per-epoch metrics, step losses, per-part timings and sweep or bench
points, in one SQLite database (WAL mode) that the app and several headless runs may write at once.

The process that trains writes its own run: the run row when it starts, then each epoch (its metrics, the step
losses logged during it and its timings) in one transaction, so a run killed at any moment keeps every finished
epoch. A run left "running" by a process that is gone is marked "died" the next time the store is opened.

The file is ``runs.sqlite`` under :func:`nncore.paths.home` (``LAYERLAB_HOME``, else the user data directory),
or the path given. The schema has a version; older stores are migrated forward, a store from a newer layerlab
is refused (:class:`StoreError`) and never written.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import time
from datetime import datetime
from pathlib import Path

from .errors import BackendUnavailable, DataError, LayerlabError

SCHEMA_VERSION = 1
STATUSES = ("running", "finished", "stopped", "failed", "refused", "died")  # refused: the backend was unavailable
MEMORY = ":memory:"

_SCHEMA = [
    """CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)""",
    """CREATE TABLE runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        kind TEXT NOT NULL,              -- train | sweep | bench
        name TEXT NOT NULL,              -- the config's name (quadrant, cnn, a file's stem)
        config TEXT NOT NULL,            -- JSON: the resolved model, data and train settings
        arch TEXT, threads INTEGER, ranks INTEGER NOT NULL DEFAULT 1,
        host TEXT NOT NULL, device TEXT, version TEXT NOT NULL,
        pid INTEGER NOT NULL, pid_start TEXT,  -- the writing process, to tell a dead run from a live one
        started REAL NOT NULL, ended REAL,
        status TEXT NOT NULL, error TEXT, exit_code INTEGER,
        n_params INTEGER, steps_per_epoch INTEGER, train_samples INTEGER, test_samples INTEGER,
        summary TEXT                     -- JSON: the final event (run_finished or run_failed)
    )""",
    """CREATE TABLE epochs (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        epoch INTEGER NOT NULL, steps INTEGER NOT NULL,
        train_loss REAL, test_loss REAL, test_acc REAL, val_loss REAL, val_acc REAL,
        samples_per_s REAL, epoch_s REAL, first_step_s REAL, comm_share REAL,
        event TEXT NOT NULL,             -- JSON: the epoch_end event as emitted
        PRIMARY KEY (run_id, epoch)
    )""",
    """CREATE TABLE steps (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        step INTEGER NOT NULL, epoch INTEGER NOT NULL, loss REAL, samples_per_s REAL,
        PRIMARY KEY (run_id, step)
    )""",
    """CREATE TABLE timings (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        epoch INTEGER NOT NULL, part INTEGER NOT NULL, name TEXT NOT NULL,
        fwd_ms REAL, bwd_ms REAL, share REAL, gflops REAL,
        PRIMARY KEY (run_id, epoch, name)
    )""",
    """CREATE TABLE points (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL, data TEXT NOT NULL,   -- JSON: one sweep or bench point
        PRIMARY KEY (run_id, seq)
    )""",
    "CREATE INDEX runs_started ON runs(started)",
]
# Forward migrations: MIGRATIONS[v] takes a store from version v to v + 1.
MIGRATIONS: dict[int, list[str]] = {}


class StoreError(LayerlabError):
    """The run store cannot be used (unreadable, damaged, from a newer layerlab); the message names the file.
    Callers go on without history and say so."""

    exit_code = 2

    def __init__(self, message: str, missing: bool = False):
        super().__init__(message)
        self.missing = missing  # no store at the path: nothing recorded yet


class DamagedRun(StoreError):
    """One run whose rows do not hold what layerlab writes (edited by hand, a bad sector): named with its id;
    the store's other runs still read."""

    def __init__(self, path, run_id, what: str):
        super().__init__(f"run {run_id} in {path}: damaged ({what})")
        self.run_id = run_id


# What each column of a runs row must hold to be read: float is any number; a tuple with None may be null.
_RUN_TYPES = {"id": int, "kind": str, "name": str, "config": str, "host": str, "version": str, "pid": int,
              "started": float, "status": str, "ranks": int, "arch": (str, None), "threads": (int, None),
              "device": (str, None), "pid_start": (str, None), "ended": (float, None), "error": (str, None),
              "exit_code": (int, None), "n_params": (int, None), "steps_per_epoch": (int, None),
              "train_samples": (int, None), "test_samples": (int, None), "summary": (str, None)}
# The same for the epochs columns a listing reads, an epoch_end event as stored, a step row and a sweep or bench
# point (the keys read from them).
_EPOCH_COLUMN_TYPES = {"epoch": int, "samples_per_s": float, "epoch_s": float, "test_acc": (float, None),
                       "first_step_s": (float, None)}
_EVENT_TYPES = {"epoch": int, "steps": int, "samples_per_s": float, "epoch_s": float, "train_loss": (float, None),
                "test_loss": (float, None), "test_acc": (float, None)}
_EVENT_OPTIONAL = {"first_step_s": float, "val_loss": (float, None), "val_acc": (float, None), "timings": list}
_TIMING_TYPES = {"name": str, "fwd_ms": float, "bwd_ms": float, "share": float}
_STEP_TYPES = {"step": int, "epoch": int, "loss": (float, None), "samples_per_s": (float, None)}
_POINT_OPTIONAL = {"batch": float, "samples_per_s": float, "threads": (int, None), "filters": (int, None),
                   "ms_per_step": (float, None), "gflops": (float, None), "speedup": (float, None),
                   "arch": (str, None), "workload": (str, None)}
_WORDS = {int: "a whole number", float: "a number", str: "text", list: "a list", dict: "an object"}


def _fits(value, want) -> bool:
    if isinstance(want, tuple):
        return any(value is None if w is None else _fits(value, w) for w in want)
    if isinstance(value, bool):
        return False
    return isinstance(value, (int, float)) if want is float else isinstance(value, want)


def _misfit(fields: dict, types: dict, optional: dict | None = None) -> str | None:
    """The first field that does not hold its type, in words ("started is 'x'"); None where all do."""
    for key, want in [*types.items(), *(optional or {}).items()]:
        if key not in fields:
            if key in types:
                return f"no {key}"
            continue
        if not _fits(fields[key], want):
            base = next(w for w in (want if isinstance(want, tuple) else (want,)) if w is not None)
            return f"{key} is {str(fields[key])[:30]!r}, not {_WORDS[base]}"
    return None


def _when_ok(t) -> bool:
    """A time that the CLI and the app can print (a finite number of seconds in a year datetime holds)."""
    try:
        datetime.fromtimestamp(t)
        time.localtime(t)
    except (OverflowError, OSError, ValueError):
        return False
    return True


def default_path() -> Path:
    from .paths import home

    return home() / "runs.sqlite"


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("layerlab")
    except Exception:  # noqa: BLE001 (not installed: a source tree)
        return "unknown"


def _process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), which tells a reused pid from the original."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _read_only(exc: sqlite3.Error) -> bool:
    """Whether SQLite refused a write because the file (or its directory) may only be read."""
    return getattr(exc, "sqlite_errorname", "").startswith("SQLITE_READONLY") or "readonly" in str(exc)


def _alive(pid: int, start: str | None) -> bool:
    if not isinstance(pid, int) or pid <= 0:  # a damaged row's pid: no process of ours (0, -1: process groups)
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return start is None or _process_start(pid) in (None, start)


class Store:
    """One open run store. ``Store(path)`` opens (creating it if absent, in a directory that must exist), migrates,
    and marks dead runs."""

    def __init__(self, path=None, timeout: float = 30.0, create: bool = True):
        """``path`` ``":memory:"``: a store of this process only (the app's when the file cannot be used);
        ``create`` False: a store that does not exist yet is refused (a reading command makes no file)."""
        self.memory = path == MEMORY
        if not self.memory and path is not None and str(path).endswith(("/", os.sep)):
            raise StoreError(f"run store {path}: names a directory; give the store's file (e.g. {path}runs.sqlite)")
        self.path = Path(path) if path is not None else default_path()
        from .limits import kernel_file

        if not self.memory and not create and not self.path.exists():
            raise StoreError(f"run store {self.path}: none there yet (a run records one); nothing to read",
                             missing=True)
        if not self.memory and ((self.path.exists() and not self.path.is_file()) or kernel_file(self.path)):
            raise StoreError(f"run store {self.path}: not a regular file")  # a FIFO could block for ever
        # A path given names a store in a directory that exists: a typo must not make a new tree of directories
        # (the default location's are made on first use).
        if not self.memory and path is not None and not self.path.parent.is_dir():
            raise StoreError(f"run store {self.path}: no directory {self.path.parent} (make it first, or give "
                             "another path)", missing=True)
        self.created = not self.memory and not self.path.exists()  # a new store: the caller says where once
        try:
            if not self.memory:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(MEMORY if self.memory else self.path, timeout=timeout, isolation_level=None)
            self._check()  # before anything could write to a file that is not ours
            self.db.execute("PRAGMA foreign_keys = ON")
            self._journal_wal(timeout)
            self.db.execute("PRAGMA synchronous = NORMAL")  # WAL: a killed process loses no commit
            self._migrate()
            self.mark_dead()
        except sqlite3.OperationalError as exc:
            raise StoreError(f"run store {self.path}: {exc}") from None
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"run store {self.path}: {exc} (move it aside to start a new one)") from None
        except OSError as exc:
            raise StoreError(f"run store {self.path}: {exc.strerror or exc}") from None

    def _journal_wal(self, timeout: float) -> None:
        """Switch the file to WAL. While another process switches a new file at the same moment, SQLite answers
        "database is locked" at once instead of waiting its busy timeout, so the switch is retried (two runs
        starting together on a new store lost one run's record to this)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.db.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    # -- schema -------------------------------------------------------------------------------------------------
    def _check(self) -> int | None:
        """The store's schema version (None: an empty database, to be made a store), reading only; refuses a
        database that is not a run store or is from a newer layerlab."""
        tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "meta" not in tables:
            if tables - {"sqlite_sequence"}:
                raise StoreError(f"run store {self.path}: a database, but not a layerlab run store")
            return None
        row = self.db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            raise StoreError(f"run store {self.path}: no schema version; not a layerlab run store")
        text = str(row[0])
        # ASCII digits only: '²' passes isdigit() and int() refuses it.
        if not (text.isascii() and text.isdigit()):
            raise StoreError(f"run store {self.path}: schema version {text[:20]!r} is not a number; damaged, or "
                             "not a layerlab run store")
        version = int(text)
        if version > SCHEMA_VERSION:
            raise StoreError(f"run store {self.path}: schema version {version} is from a newer layerlab "
                             f"(this one reads up to {SCHEMA_VERSION}); it is left as it is")
        if version < 1 or any(v not in MIGRATIONS for v in range(version, SCHEMA_VERSION)):
            raise StoreError(f"run store {self.path}: schema version {version} was never written by layerlab "
                             f"(versions 1 to {SCHEMA_VERSION}); damaged, it is left as it is")
        return version

    def _migrate(self) -> None:
        with self._write():
            version = self._check()  # again, under the write lock: another process may have made it meanwhile
            if version is None:
                for statement in _SCHEMA:
                    self.db.execute(statement)
                self.db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                return
            for v in range(version, SCHEMA_VERSION):
                for statement in MIGRATIONS[v]:
                    self.db.execute(statement)
                self.db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(v + 1),))

    @contextlib.contextmanager
    def _write(self):
        """A write transaction, taken at once (BEGIN IMMEDIATE) so concurrent writers queue instead of failing."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def mark_dead(self) -> None:
        """Runs left "running" on this host by a process that is gone: died."""
        host = socket.gethostname()
        rows = self.db.execute("SELECT id, pid, pid_start FROM runs WHERE status = 'running' AND host = ?",
                               (host,)).fetchall()
        dead = [r[0] for r in rows if not _alive(r[1], r[2])]
        if dead:
            try:
                with self._write():
                    self.db.executemany("UPDATE runs SET status = 'died', error = COALESCE(error, "
                                        "'the process ended without finishing the run') WHERE id = ?",
                                        [(i,) for i in dead])
            except sqlite3.OperationalError as exc:
                if not _read_only(exc):
                    raise
                # A store this process may only read is still read: the next writer marks them.

    def _cannot_change(self, exc: sqlite3.Error) -> StoreError:
        """A write the store refused, in one line naming the file."""
        return StoreError(f"cannot change {self.path}: " + (f"read-only ({exc})" if _read_only(exc) else str(exc)))

    def close(self) -> None:
        self.db.close()

    # -- writing ------------------------------------------------------------------------------------------------
    def begin(self, kind: str, name: str, config: dict, **info) -> int:
        """A new run, status running; returns its id. ``info``: arch, threads, ranks, device, n_params, ..."""
        with self._write():
            return self._insert_run(kind, name, config, status="running", **info)

    def _insert_run(self, kind: str, name: str, config: dict, **info) -> int:
        config = _absolute_data_paths(config)
        cols = {"kind": kind, "name": name, "config": json.dumps(config, default=str), "host": socket.gethostname(),
                "version": _version(), "pid": os.getpid(), "pid_start": _process_start(os.getpid()),
                "started": time.time(), **info}
        return self.db.execute(f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                               list(cols.values())).lastrowid

    def add_finished(self, kind: str, name: str, config: dict, points: list[dict], summary: dict | None = None,
                     status: str = "finished", started: float | None = None, **info) -> int:
        """A sweep's or a benchmark's points as one ended run (``status`` "finished", or "stopped" for a sweep
        stopped part-way, with the points it measured), in one transaction; returns its id. ``started``: when
        the sweep or benchmark began (time.time(); default now, as it ends)."""
        ended = time.time()
        try:
            with self._write():
                run_id = self._insert_run(kind, name, config, status=status, ended=ended,
                                          started=ended if started is None else min(started, ended),
                                          summary=json.dumps(summary) if summary is not None else None, **info)
                self._insert_points(run_id, points)
        except sqlite3.Error as exc:
            raise StoreError(f"run store {self.path}: {exc}") from None
        return run_id

    def update(self, run_id: int, **cols) -> None:
        with self._write():
            self.db.execute(f"UPDATE runs SET {', '.join(f'{k} = ?' for k in cols)} WHERE id = ?",
                            [*cols.values(), run_id])

    def add_epoch(self, run_id: int, event: dict, steps: list[dict]) -> None:
        """One epoch_end event and the step events logged during it, in one transaction."""
        with self._write():
            self.db.execute(
                "INSERT OR REPLACE INTO epochs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, event["epoch"], event["steps"], event["train_loss"], event["test_loss"], event["test_acc"],
                 event.get("val_loss"), event.get("val_acc"), event["samples_per_s"], event["epoch_s"],
                 event.get("first_step_s", 0.0), event.get("comm_share"), json.dumps(event)))
            self._insert_steps(run_id, steps)
            self.db.executemany("INSERT OR REPLACE INTO timings VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                                [(run_id, event["epoch"], t["index"], t["name"], t["fwd_ms"], t["bwd_ms"], t["share"],
                                  t["gflops"]) for t in event.get("timings", [])])

    def add_steps(self, run_id: int, steps: list[dict]) -> None:
        """Step events of an epoch that did not finish (a stop, a failure)."""
        if steps:
            with self._write():
                self._insert_steps(run_id, steps)

    def _insert_steps(self, run_id: int, steps: list[dict]) -> None:
        self.db.executemany("INSERT OR REPLACE INTO steps VALUES (?, ?, ?, ?, ?)",
                            [(run_id, s["step"], s["epoch"], s["loss"], s["samples_per_s"]) for s in steps])

    def add_points(self, run_id: int, points: list[dict]) -> None:
        with self._write():
            self._insert_points(run_id, points)

    def _insert_points(self, run_id: int, points: list[dict]) -> None:
        start = self.db.execute("SELECT COUNT(*) FROM points WHERE run_id = ?", (run_id,)).fetchone()[0]
        self.db.executemany("INSERT INTO points VALUES (?, ?, ?)",
                            [(run_id, start + i, json.dumps(p, default=str)) for i, p in enumerate(points)])

    def mark_died(self, run_id: int, error: str) -> None:
        """A run whose process was seen to die (the app's child): died now, not at the next open."""
        with self._write():
            self.db.execute("UPDATE runs SET status = 'died', ended = ?, error = COALESCE(error, ?) "
                            "WHERE id = ? AND status = 'running'", (time.time(), error, run_id))

    def recording(self, run_ids: list[int]) -> dict[int, str]:
        """The runs of ``run_ids`` that a process is still recording (running or paused), each with where, in
        words. A run of this host whose process is gone is not (the next open marks it died); one of another
        host is, as its process cannot be checked from here."""
        marks = ", ".join("?" * len(run_ids))
        host = socket.gethostname()
        out = {}
        for run_id, run_host, pid, start in self.db.execute(
                f"SELECT id, host, pid, pid_start FROM runs WHERE status = 'running' AND id IN ({marks}) "
                "ORDER BY id", list(run_ids)):
            if run_host != host:
                out[run_id] = f"on host {run_host}, which cannot be checked from here"
            elif _alive(pid, start):
                out[run_id] = f"by process {pid}"
        return out

    def remove(self, run_ids: list[int]) -> int:
        """Runs out of the store with all they recorded. Refused (StoreError, nothing removed) where one is still
        being recorded (:meth:`recording`): its process would fail at its next epoch."""
        try:
            with self._write():  # (checked in the transaction: no run starts recording in between)
                live = self.recording(run_ids)
                if live:
                    run_id, where = next(iter(live.items()))
                    raise StoreError(f"run {run_id} in {self.path} is still being recorded ({where}): stop it "
                                     "before removing it")
                cur = self.db.executemany("DELETE FROM runs WHERE id = ?", [(i,) for i in run_ids])
        except sqlite3.Error as exc:
            raise self._cannot_change(exc) from None
        return cur.rowcount

    # -- reading ------------------------------------------------------------------------------------------------
    def runs(self, network: str | None = None, arch: str | None = None, status: str | None = None,
             since: float | None = None, limit: int | None = None, offset: int = 0,
             damaged: list | None = None) -> list[dict]:
        """Runs, newest first, with their last epoch's accuracy and the run's mean samples/s. A damaged run
        (:class:`DamagedRun`) is left out, and added to ``damaged`` where given."""
        where, args = [], []
        for col, value in (("name", network), ("arch", arch), ("status", status)):
            if value is not None:
                where.append(f"r.{col} = ?")
                args.append(value)
        if since is not None:
            where.append("r.started >= ?")
            args.append(since)
        sql = ("SELECT * FROM runs r" + (" WHERE " + " AND ".join(where) if where else "")
               + " ORDER BY r.started DESC, r.id DESC" + (f" LIMIT {int(limit)} OFFSET {int(offset)}" if limit else ""))
        rows, bad = [], []
        for r in self._query(sql, args):
            try:
                rows.append(self._row(r))
            except DamagedRun as exc:
                bad.append(exc)
        epochs: dict[int, list[dict]] = {row["id"]: [] for row in rows}
        if rows:  # every listed run's epochs in one query
            marks = ", ".join("?" * len(rows))
            for e in self._query(f"SELECT run_id, epoch, test_acc, samples_per_s, epoch_s, first_step_s FROM epochs "
                                 f"WHERE run_id IN ({marks}) ORDER BY run_id, epoch", list(epochs)):
                epochs[e["run_id"]].append(dict(e))
        for run_id, mine in epochs.items():
            wrong = next((w for e in mine if (w := _misfit(e, _EPOCH_COLUMN_TYPES))), None)
            if wrong:
                bad.append(DamagedRun(self.path, run_id, f"an epoch's {wrong}"))
        damaged_ids = {exc.run_id for exc in bad}
        rows = [row for row in rows if row["id"] not in damaged_ids]
        if damaged is not None:
            damaged.extend(sorted(bad, key=lambda exc: -exc.run_id))
        for row in rows:
            mine = epochs[row["id"]]
            row["epochs_done"] = len(mine)
            row["test_acc"] = mine[-1]["test_acc"] if mine else None
            batch = (row["config"] or {}).get("train", {}).get("batch_size", 0)
            row["samples_per_s"] = mean_rate(mine, batch)
            if row["samples_per_s"] is None and isinstance(row.get("summary"), dict):  # no epoch ended: the
                row["samples_per_s"] = row["summary"].get("samples_per_s")  # trainer's own rate is all there is
            row["s_per_epoch"] = mean_epoch_s(mine, batch)
        return rows

    def count(self) -> int:
        return self._query("SELECT COUNT(*) AS n FROM runs")[0]["n"]

    def exists(self, run_id: int) -> bool:
        """Whether the store holds run ``run_id``, damaged or not (reading none of it)."""
        return bool(self._query("SELECT 1 FROM runs WHERE id = ?", (run_id,)))

    def run(self, run_id: int) -> dict | None:
        """Run ``run_id`` whole (None: not in the store); :class:`DamagedRun` where any of it is damaged."""
        found = self._query("SELECT * FROM runs WHERE id = ?", (run_id,))
        if not found:
            return None
        out = self._row(found[0])
        out["epochs"] = [self._json(run_id, r["event"], f"epoch {r['epoch']}", _EVENT_TYPES, _EVENT_OPTIONAL)
                         for r in self._query("SELECT epoch, event FROM epochs WHERE run_id = ? ORDER BY epoch",
                                              (run_id,))]
        for e in out["epochs"]:
            wrong = next((w for t in e.get("timings", []) if (w := "not an object" if not isinstance(t, dict)
                                                              else _misfit(t, _TIMING_TYPES))), None)
            if wrong:
                raise DamagedRun(self.path, run_id, f"epoch {e['epoch']}'s timing: {wrong}")
        out["steps"] = [dict(r) for r in self._query(
            "SELECT step, epoch, loss, samples_per_s FROM steps WHERE run_id = ? ORDER BY step", (run_id,))]
        wrong = next((w for s in out["steps"] if (w := _misfit(s, _STEP_TYPES))), None)
        if wrong:
            raise DamagedRun(self.path, run_id, f"a step's {wrong}")
        out["points"] = [self._json(run_id, r["data"], f"point {r['seq']}", {}, _POINT_OPTIONAL) for r in
                         self._query("SELECT seq, data FROM points WHERE run_id = ? ORDER BY seq", (run_id,))]
        return out

    def _json(self, run_id: int, text, what: str, types: dict, optional: dict) -> dict:
        """A JSON object column of run ``run_id`` (``what``: which, in words) parsed and checked."""
        try:
            value = json.loads(text)
        except (TypeError, ValueError):
            raise DamagedRun(self.path, run_id, f"its {what} is not JSON") from None
        if not isinstance(value, dict):
            raise DamagedRun(self.path, run_id, f"its {what} is not a JSON object")
        wrong = _misfit(value, types, optional)
        if wrong:
            raise DamagedRun(self.path, run_id, f"its {what}: {wrong}")
        return value

    def data_version(self) -> int | None:
        """A number that changes whenever another connection (another process: `layerlab train` elsewhere, the
        app's training process) has committed to the store; None where it cannot be read."""
        try:
            return self._query("PRAGMA data_version")[0][0]
        except (StoreError, IndexError):
            return None

    def _query(self, sql: str, args=()) -> list[sqlite3.Row]:
        self.db.row_factory = sqlite3.Row
        try:
            return self.db.execute(sql, args).fetchall()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"run store {self.path}: {exc}") from None
        finally:
            self.db.row_factory = None

    def _row(self, row: sqlite3.Row) -> dict:
        """A runs row with its JSON parsed; :class:`DamagedRun` where a column does not hold what layerlab
        writes (the CLI and the app print and compute from every one)."""
        out = dict(row)
        run_id = out["id"]
        wrong = _misfit(out, _RUN_TYPES)
        if wrong:
            raise DamagedRun(self.path, run_id, f"its {wrong}")
        for key in ("started", "ended"):
            if out[key] is not None and not _when_ok(out[key]):
                raise DamagedRun(self.path, run_id, f"its {key} is {out[key]!r}, not a time")
        out["config"] = self._json(run_id, out["config"], "config", {}, {"train": dict})
        if not _fits(out["config"].get("train", {}).get("batch_size", 0), float):
            raise DamagedRun(self.path, run_id, "its config's batch_size is not a number")
        if out["summary"] is not None:
            out["summary"] = self._json(run_id, out["summary"], "summary", {}, {})
        return out


def failure_status(exit_code: int | None, started: bool) -> str:
    """A failed run's status: "refused" where it failed before it started because the backend asked for is
    unavailable (nothing ran), else "failed"."""
    return "refused" if not started and exit_code == BackendUnavailable.exit_code else "failed"


def _absolute_data_paths(config: dict) -> dict:
    """The config with its data files (data.path, data.test_path) made absolute from the current directory, where
    the run read them: a run stored with a path as typed ('good') could not run again from another directory."""
    data = config.get("data") if isinstance(config, dict) else None
    if not isinstance(data, dict):
        return config
    fixed = {k: str(Path(v).expanduser().absolute()) for k in ("path", "test_path")
             if isinstance(v := data.get(k), str) and v and not Path(v).expanduser().is_absolute()}
    return {**config, "data": {**data, **fixed}} if fixed else config


def _training_time(epochs: list[dict], batch: int) -> tuple[float, float, int]:
    """Seconds, samples and epochs of training once under way: the epochs after the first where there are
    more (the first compiles or loads the kernels: step 1's above all, but also those first met later in it,
    such as the part-by-part kernels of the first timed step), else the first with step 1 left out where it
    says how long that took and holds more than that step."""
    counted = epochs[1:] if len(epochs) > 1 else epochs
    seconds = sum(e["epoch_s"] for e in counted)
    samples = sum(e["samples_per_s"] * e["epoch_s"] for e in counted)
    first = (epochs[0].get("first_step_s") or 0.0) if len(epochs) == 1 else 0.0
    if first and seconds > first and samples > batch:
        seconds, samples = seconds - first, samples - batch
    return seconds, samples, len(counted)


def rate_basis(n_epochs: int) -> str:
    """What :func:`mean_rate` leaves out, for a run of ``n_epochs`` completed epochs, in words."""
    return "after epoch 1" if n_epochs > 1 else "after step 1"


def mean_rate(epochs: list[dict], batch: int) -> float | None:
    """A run's training samples per second once under way (``_training_time``), as the app's Runs view shows
    it; None without a timed epoch."""
    seconds, samples, _ = _training_time(epochs, batch)
    return samples / seconds if seconds > 0 else None


def mean_epoch_s(epochs: list[dict], batch: int) -> float | None:
    """Mean training time of an epoch, over the epochs :func:`mean_rate` counts; None without an epoch."""
    seconds, _, n = _training_time(epochs, batch)
    return seconds / n if n else None


class Recorder:
    """Writes one training run's events into a store as they come (the trainer's ``emit``): the run row at
    run_started, each epoch with its steps in one transaction, the outcome at the end. A store that fails
    mid-run is reported once (``warn``) and recording stops; training never does."""

    def __init__(self, store: Store, name: str, config: dict | None = None, warn=None, kind: str = "train",
                 input_refusals: bool = True):
        """``config``: recorded for a run that fails before it starts (no run_started carries it then).
        ``input_refusals`` False: a run refused for its input before it started (exit 2: its data or config) is
        not recorded, as the CLI's own checks before training record nothing (the app keeps every attempt)."""
        self.store, self.name, self.kind, self.warn, self.config = store, name, kind, warn, config or {}
        self.input_refusals = input_refusals
        self.run_id: int | None = None
        self.steps: list[dict] = []
        self.failed = False

    def __call__(self, event) -> None:
        if self.failed:
            return
        e = event.to_dict() if hasattr(event, "to_dict") else event
        try:
            self._record(e)
        except (StoreError, sqlite3.Error, OSError) as exc:
            self.failed = True
            if self.warn is not None:
                self.warn(f"run store {self.store.path}: recording stopped ({exc}); the run goes on")

    def _record(self, e: dict) -> None:
        kind = e["event"]
        if kind == "run_started":
            self.run_id = self.store.begin(
                self.kind, self.name, e["config"], arch=e["arch"], threads=e["threads"], ranks=e.get("ranks", 1),
                device=e["device"], n_params=e["n_params"], steps_per_epoch=e["steps_per_epoch"],
                train_samples=e["train_samples"], test_samples=e["test_samples"])
            return
        started = self.run_id is not None
        if not started:
            if kind != "run_failed" or (not self.input_refusals and e.get("exit_code") == DataError.exit_code):
                return
            # Failed before it started: recorded with its error, as "refused" where nothing ran
            # (``failure_status``).
            self.run_id = self.store.begin(self.kind, self.name, self.config, arch=self.config.get("train", {})
                                           .get("arch"))
        if kind == "step":
            self.steps.append(e)
        elif kind == "epoch_end":
            self.store.add_epoch(self.run_id, e, self.steps)
            self.steps = []
        elif kind in ("run_finished", "run_failed"):
            self.store.add_steps(self.run_id, self.steps)
            self.steps = []
            status = failure_status(e.get("exit_code"), started) if kind == "run_failed" else \
                ("stopped" if e["stopped"] else "finished")
            self.store.update(self.run_id, status=status, ended=time.time(), summary=json.dumps(e),
                              error=e.get("error"), exit_code=e.get("exit_code"))
