"""layerlab's terminal app: build a network, pick a backend, watch it train, compare runs.

Training runs in a child process (see :mod:`tui.child`); the app polls its pipe every 50 ms and never waits on
it, so the interface stays responsive whatever the kernels do. The app talks to nncore only through its public
API (configs and their checks, datasets, backends) and the event stream. Keys: :mod:`tui.keys`; errors that
escape a handler: :mod:`tui.guard`.
"""
from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from textual.app import ComposeResult, SystemCommand
from textual.widgets import Button, Header, Input, Select, TabbedContent, TabPane, Tabs

from nncore import paths
from tui import compat  # noqa: F401 (fixes to Textual, before anything is built)
from nncore.config import RunConfig, check_filters, check_run, load_config, network_name, preset_configs
from nncore.errors import ConfigError, DataError, LayerlabError
from nncore.fileio import write_atomic
from nncore.report import batch_note, cut, plural, threads_note
from nncore.runscli import export_text
from nncore.runtime import available_archs
from nncore.store import MEMORY, Recorder, Store, StoreError, failure_status
from tui.child import RunHandle, distributed_main, record_sweep, sweep_main
from tui.guard import GuardedApp
from tui.keys import ANALYSIS_KEYS, APP_KEYS, MODEL_KEYS, RUNS_KEYS, TAB_TITLES, TABS, TRAIN_KEYS, bindings
from tui.panes.analysis import AnalysisPane
from tui.panes.model import EMPTY, ModelPane
from tui.panes.runs import RunsPane
from tui.panes.settings import SettingsPane
from tui.panes.train import TrainPane
from tui.screens.help import HelpScreen
from tui.screens.path import PathScreen
from tui.screens.pick import ConfirmScreen
from tui.widgets.keybar import KeyBar
from tui.state import Draft, RunRecord, editable

DEFAULT_CONFIG = "quadrant"
HOME = {"model": "#layers", "settings": "#dataset", "train": "#start", "runs": "#runs-table",
        "analysis": "#sweep-run"}  # where focus goes when a view is shown
RUN_ACTIONS = ("start", "pause", "step", "stop")
QUIT_WAIT_S = 3.0  # quitting waits this long for a run or sweep to stop itself (then SIGTERM, then kill)
NO_PAUSE = "a distributed run cannot pause: its ranks step together; stop it instead"
STORE_WATCH_S = 2.0  # how often the shown Runs view checks the run store for runs recorded elsewhere


def _about_data(err) -> bool:
    """Whether a config's check failed on its data (the file, or the network's fit to it), not on itself."""
    return isinstance(err, DataError) or (getattr(err, "field", None) or "").startswith("data.") or \
        getattr(err, "about_data", False)


def _opens_anyway(err, model: dict) -> bool:
    """Whether a config that cannot train as it is (``err``, from check_run) opens in the editor all the same,
    with the reason marked where it is fixed: its data is missing or does not fit yet (a preset naming a file
    the user brings, an output width for another class count), or its network does not build (as one saved half
    done from the editor) while every layer is one the editor can hold. Any other fault is refused as the CLI
    would."""
    if _about_data(err):
        return _model_checks(model)
    network = getattr(err, "layer", None) is not None or (getattr(err, "field", None) or "").startswith("model")
    return network and editable(model)


def _model_checks(model: dict) -> bool:
    """Whether the network itself is valid (its input taken as one feature where the data would give it)."""
    from nncore.network import check_spec

    try:
        check_spec({**model, "input": model.get("input", [1])})
    except LayerlabError:
        return "input" not in model  # (a first layer that needs an image input is checked once data fits)
    except Exception:  # noqa: BLE001 -- a malformed table: not opened
        return False
    return True



# Each view's keys and the widget they are bound on (what gets the focus when one is pressed on the view tabs).
VIEW_KEY_OWNERS = {"model": ("#layers", MODEL_KEYS), "train": ("#train-body", TRAIN_KEYS),
                   "runs": ("#runs-table", RUNS_KEYS), "analysis": ("#sweep-run", ANALYSIS_KEYS)}

class LayerlabApp(GuardedApp):
    CSS_PATH = "app.tcss"
    TITLE = "layerlab"
    BINDINGS = bindings(APP_KEYS)
    NOTIFICATION_TIMEOUT = 4  # an information notice is a short line, and most say what a view shows as well

    def notify(self, message, *, title="", severity="information", timeout=None, markup=True) -> None:
        """Notices stay up for as long as they matter: a warning or an error without a timeout of its own
        stays long enough to read, an information notice goes after a few seconds."""
        if timeout is None:
            timeout = {"warning": 8, "error": 12}.get(severity, self.NOTIFICATION_TIMEOUT)
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    def __init__(self, config: str | None = None, save_dir: str | Path | None = None, store: str | bool | None = None):
        """``store``: the run store's path (None: the default one; False: none, as ``--no-store``)."""
        super().__init__()
        self.store_arg = store
        self.store = self.recorder = None
        self.store_note = ""
        self.config_name = config or DEFAULT_CONFIG
        self.save_dir = Path(save_dir) if save_dir is not None else paths.default_save_dir()
        self.draft = Draft()
        self.runs: list[RunRecord] = []
        self.handle: RunHandle | None = None
        self.retiring: list[tuple[RunHandle, float]] = []  # ended runs whose process may still be exiting
        self._quit_asked = False  # a quit with unsaved changes is being asked about (action_quit)
        self.sweeper: RunHandle | None = None  # a sweep's process (one child at a time: they share the CPU)
        self.sweep_job: dict = {}  # what it sweeps, recorded with its points
        self.current: RunRecord | None = None
        self.paused = False
        self.model_ok = self.settings_ok = False
        self.steps_total = self.epochs_total = 0
        self.started_at = self.paused_at = self.paused_s = 0.0
        # Steps run while paused (single steps): left out of the rate the ETA is worked out from, as paused time is.
        self.last_step = self.paused_steps = 0
        self.archs = {s.name: s for s in available_archs()}
        self.clock = time.monotonic  # what the ETA's clock reads (tests replace it)

    def compose(self) -> ComposeResult:
        yield Header()
        panes = (ModelPane(self.draft, id="model-pane"), SettingsPane(id="settings-pane"), TrainPane(id="train-pane"),
                 RunsPane(id="runs-pane"), AnalysisPane(id="analysis-pane"))
        with TabbedContent(id="tabs", initial="model"):
            for i, (tab, title, pane) in enumerate(zip(TABS, TAB_TITLES, panes)):
                with TabPane(f"{i + 1} {title}", id=tab):
                    yield pane
        yield KeyBar(id="keys")

    def on_mount(self) -> None:
        self._open_store()
        self.query_one(TrainPane).reset()
        if not self.open_config(self.config_name) and self.config_name != DEFAULT_CONFIG:
            self.open_config(DEFAULT_CONFIG)
        self.query_one("#layers").focus()
        self._show_runs()  # the runs of earlier sessions and of the command line
        self.set_interval(0.05, self._poll)
        self.set_interval(STORE_WATCH_S, self._watch_store)
        self._update_controls()

    @property
    def child_store(self) -> str | None:
        """Where the training and sweep processes record their runs (None: in memory, the app records them)."""
        return None if self.store is None or self.store.memory else str(self.store.path)

    def _open_store(self) -> None:
        """The run store the Runs view reads and the runs are recorded in. One that cannot be used (damaged, from
        a newer layerlab, --no-store) leaves the app without history: it says so, and keeps this session's runs
        in a store in memory that the app records itself."""
        if self.store_arg is not False:
            try:
                self.store = Store(self.store_arg)
                if self.store.created and self.store_arg is not None:  # --store named a file not there: say so
                    self.notify(f"new run store created: {os.path.abspath(self.store.path)}", timeout=10,
                                markup=False)
                return
            except StoreError as exc:
                self.store_note = f"✗ {exc}; no history: this session's runs are kept until you quit"
                self.notify(self.store_note, severity="error", markup=False)  # the Runs view keeps saying it
        else:
            self.store_note = "no run store (--no-store): this session's runs are kept until you quit"
        self.store = Store(MEMORY)

    def on_resize(self, event) -> None:
        """A tall terminal gives the curves more rows, a wide one the sweep's steps field its whole width
        (Textual's CSS has no media queries)."""
        self.screen.set_class(event.size.height >= 36, "-tall")
        self.screen.set_class(event.size.width >= 100, "-wide")
        self.query_one(TrainPane).set_tall(event.size.height >= 36)

    # -- configs ----------------------------------------------------------------------------------------------
    def open_config(self, name: str) -> bool:
        """Open a config file (or preset) as the headless CLI would; one it refuses is refused here with the same
        message, and what is open stays."""
        if name == EMPTY:  # named as a new document is: the title and a save's file name are "untitled"
            self.draft = Draft([], [2], "bce")
            self.query_one(ModelPane).load_draft(self.draft, EMPTY)
            self._opened()
            if self.query_one(TabbedContent).active == "model":  # its hint says "press a": a acts in the table
                self.call_after_refresh(self._focus_home, "model")
            return True
        try:
            cfg = load_config(name)
        except LayerlabError as err:
            self.notify(f"not opened: {err}", severity="error", timeout=20, markup=False)
            return False
        try:
            check_run(cfg)
        except LayerlabError as err:
            if not _opens_anyway(err, cfg.model):
                self.notify(f"not opened: {err}", severity="error", timeout=20, markup=False)
                return False
            self.notify(f"opened; it cannot train yet: {err}", severity="warning", timeout=12, markup=False)
        self.draft = Draft.from_model(cfg.model, cfg.label, cfg.description)
        self.query_one(ModelPane).load_draft(self.draft, self.draft.name if self.draft.name in preset_configs()
                                             else None)
        self.query_one(SettingsPane).load({**cfg.data, "dataset": cfg.dataset_name()}, cfg.train)
        self._opened()
        return True

    def _opened(self) -> None:
        """Another network is in the editor: the Train view no longer shows the last run's results, which were
        another network's (the Runs view keeps them). A run still going keeps the view: it shows that run."""
        if self.handle is None:
            self.query_one(TrainPane).reset()
        self._show_title()

    def _show_title(self) -> None:
        """The header names the network in the editor, or while a run lasts the network it trains: a rerun from
        the Runs view may train another one, which is then named with the editor's beside it."""
        run = self.current if self.handle is not None else None
        if run is None:
            self.sub_title = self.draft.run_name()  # ("quadrant (edited)" once changed: what a run would record)
            return
        doing = f"{'paused' if self.paused else 'training'} on {run.arch}"
        editing = f" · editing {self.draft.run_name()}" if run.network != self.draft.run_name() else ""
        self.sub_title = f"{run.network} ({doing}){editing}"

    def on_model_pane_preset_chosen(self, event: ModelPane.PresetChosen) -> None:
        self._open_asking(event.name)

    def _open_asking(self, name: str) -> None:
        """Open ``name`` (``open_config``); where the network in the editor has changes that were not saved,
        ask first (they were dropped without a word). No keeps the network, and the preset list shows it again."""
        if not self.draft.edited():
            self.open_config(name)
            return

        def answered(yes: bool) -> None:
            if yes:
                self.open_config(name)
            else:
                pane = self.query_one(ModelPane)
                pane.show_preset(pane.preset)

        self.open_dialog(ConfirmScreen(f"Discard the changes to {self.draft.name} and open {name}?"), answered)

    def on_model_pane_changed(self, event: ModelPane.Changed) -> None:
        self.model_ok = event.valid
        for pane in self.query(SettingsPane):  # (none while the app is closing)
            pane.set_misfit(event.misfit, event.problem)
        self._update_controls()
        self._show_title()  # ("(edited)" comes and goes with the changes)

    def on_settings_pane_changed(self, event: SettingsPane.Changed) -> None:
        self.settings_ok = event.valid
        self.query_one(ModelPane).set_data(event.data, event.data_error)
        self._update_controls()

    def _ask_path(self, title: str, name: str, suffixes: tuple[str, ...], then, must_exist: bool = False,
                  check=None, names: dict[str, Path] | None = None, what: str = "file") -> None:
        value = str(self.save_dir / name) if name else str(self.save_dir) + os.sep
        self.open_dialog(PathScreen(title, value, must_exist, suffixes, make_dir=self.save_dir, check=check,
                                    names=names, what=what), lambda path: path and then(Path(path)))

    def _write(self, path: Path, text: str, what: str) -> bool:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, lambda fh: fh.write(text.encode("utf-8")))
        except OSError as err:
            self.notify(f"{what} not written to {path}: {err.strerror or err}", severity="error", timeout=12,
                        markup=False)
            return False
        self.save_dir = path.parent
        self.notify(f"{what} written to {path}", timeout=10, markup=False)
        return True

    def action_save_config(self) -> None:
        try:
            data, train = self.query_one(SettingsPane).values()
        except ConfigError as err:
            self.notify(f"not saved: {err}", severity="error", markup=False)
            return

        def save(path: Path) -> None:
            # The file's name becomes the network's (its ``name`` line, the header, the runs it records), as
            # `layerlab train` then calls it.
            before, self.draft.name = self.draft.name, network_name(path.stem)
            if not self._write(path, self.draft.to_toml(data, train), "config"):
                self.draft.name = before
            else:
                self.draft.keep_origin()
                self.query_one(ModelPane).show_preset(None)  # (it is the file's network now, not the preset)
            self._show_title()

        self._ask_path("Save the network and settings as", f"{self.draft.name}.toml", (".toml",), save)

    def action_open_config(self) -> None:
        def refused(path: Path) -> str | None:  # answered in the prompt, which stays open
            try:
                cfg = load_config(path)
            except LayerlabError as err:
                return str(err)
            try:
                check_run(cfg)
            except LayerlabError as err:
                return None if _opens_anyway(err, cfg.model) else str(err)
            return None

        # A preset's name opens it, as `layerlab train NAME` does.
        # (asked after the prompt has closed: one dialog at a time)
        self._ask_path("Open a config file, or a preset by name", "", (),
                       lambda p: self.call_after_refresh(self._open_asking, str(p)),
                       must_exist=True, check=refused, names=preset_configs(), what="config file")

    def action_export(self) -> None:
        """The marked runs, or every run in the store, as CSV (a row per epoch) or JSON (each run whole)."""
        pane = self.query_one(RunsPane)
        if not pane.rows:
            self.notify("no runs to export yet", severity="warning")
            return
        marked = pane.marked and pane.chosen()
        what = f"{len(marked)} marked run(s)" if marked else f"all {pane.total:,} run(s)"

        def write(path: Path) -> None:
            try:
                ids = [r["id"] for r in marked] if marked else [r["id"] for r in self.store.runs()]
                runs = [r for r in (self.store.run(i) for i in ids) if r is not None]
            except StoreError as exc:
                self.notify(f"not exported: {exc}", severity="error", markup=False)
                return
            self._write(path, export_text(runs, "json" if path.suffix.lower() == ".json" else "csv"),
                        f"{len(runs)} run(s)" if len(runs) != 1 else "1 run")

        name = f"layerlab-runs-{time.strftime('%Y%m%d-%H%M%S')}.csv"
        self._ask_path(f"Export {what} (.csv or .json)", name, (".csv", ".json"), write)

    # -- runs -------------------------------------------------------------------------------------------------
    def _run_config(self) -> dict:
        data, train = self.query_one(SettingsPane).values()
        spec = self.draft.spec(self.query_one(SettingsPane).data)
        return RunConfig(spec, data, train, source=self.draft.run_name()).to_dict()

    def _why_not_ready(self) -> str | None:
        if self.handle is not None:
            return "a run is going on"
        if self.sweeper is not None:
            return "a sweep is running; start training when it is done"
        # (the panes are queried, not assumed: a pane's message can arrive while the app is closing, after them)
        if not self.settings_ok:
            pane = self.query_one_optional(SettingsPane)
            return f"a setting is invalid: {pane.error if pane else 'see the Data & training view'}"
        if not self.model_ok:
            pane = self.query_one_optional(ModelPane)
            return f"the network cannot train: {(pane.problem() if pane else None) or 'see the Model view'}"
        return None

    def action_start(self) -> None:
        why = self._why_not_ready()
        if why is not None:
            if self.handle is None:
                self.notify(why, severity="warning", markup=False)
            return
        try:
            cfg = self._run_config()
        except ConfigError as err:
            self.notify(str(err), severity="error", markup=False)
            return
        self.start_run(cfg, self.draft.run_name())

    def start_run(self, cfg: dict, name: str) -> None:
        tr = cfg["train"]
        self.current = RunRecord(name, tr["arch"], tr["threads"] or 0, tr["batch_size"], config=cfg,
                                 ranks=tr.get("ranks", 1))
        self.runs.append(self.current)
        self.handle = RunHandle(cfg, target=distributed_main if self.current.ranks > 1 else None,
                                store=self.child_store)
        self.recorder = Recorder(self.store, name, cfg) if self.child_store is None else None
        self.paused, self.steps_total, self.epochs_total = False, 0, tr["epochs"]
        self.started_at, self.paused_s = self.clock(), 0.0
        self.last_step = self.paused_steps = 0
        self.query_one(TrainPane).reset(None, boundary=cfg["model"].get("input") == [2] and self.current.ranks == 1)
        if self.current.ranks > 1:
            self.query_one("#boundary").clear("no decision boundary: a run over ranks")
        self._show_runs()
        self.action_show_tab("train")
        self._update_controls("starting a training process…")

    def _active_s(self) -> float:
        """Seconds since the run started, paused time excluded."""
        now = self.clock()
        return now - self.started_at - self.paused_s - (now - self.paused_at if self.paused else 0.0)

    def _eta_s(self) -> float | None:
        """Seconds left at the rate of the steps run unpaused; None while paused (the run waits for a key)."""
        if self.paused:
            return None
        active_steps, active_s = self.last_step - self.paused_steps, self._active_s()
        if active_steps <= 0 or active_s <= 0:
            return None
        return (self.steps_total - self.last_step) * active_s / active_steps

    def action_pause(self) -> None:
        if self.handle is None:
            return
        if self.current is not None and self.current.ranks > 1:
            self.notify(NO_PAUSE, severity="warning")
            return
        self.paused = not self.paused
        if self.paused:
            self.paused_at = self.clock()
        else:
            self.paused_s += self.clock() - self.paused_at
        self.handle.send("pause" if self.paused else "resume")
        self.query_one(TrainPane).show_eta(self._eta_s())
        self._update_controls()
        self._show_runs()

    def action_step(self) -> None:
        if self.handle is not None and self.paused:
            self.handle.send("step")
            self.paused_steps += 1  # (left out of the ETA's rate, as the paused time is)

    def action_stop(self) -> None:
        if self.handle is not None:
            self.handle.send("stop")
            if self.paused:
                self.action_pause()
            self._update_controls("stopping after the current step…")
        elif self.sweeper is not None:
            self.sweeper.send("stop")
            self.query_one(AnalysisPane).set_status("stopping after the current point…")
            if self.query_one(TabbedContent).active != "analysis":  # (its status line is out of sight)
                self.notify("stopping the sweep after its current point…", markup=False)

    def _poll(self) -> None:
        if not self.is_running:  # the views are being taken down
            return
        self._reap()
        self._poll_sweep()
        if self.handle is None:
            return
        handle = self.handle
        for msg in handle.poll():
            if self.handle is not handle:  # the run ended with an earlier message: the rest are stale
                break
            self._run_message(msg)
        if self.handle is handle and handle.died:
            code = handle.exitcode()
            self._end_run("died", f"the training process died (exit code {code}); partial results kept")

    def _run_message(self, msg: dict) -> None:
        pane, run, kind = self.query_one(TrainPane), self.current, msg["event"]
        if self.recorder is not None:  # no store for the child: the app keeps the session's runs itself
            self.recorder(msg)
        if kind == "run_started":
            self.steps_total = msg["steps_per_epoch"] * msg["config"]["train"]["epochs"]
            self.epochs_total = msg["config"]["train"]["epochs"]
            self.started_at, self.paused_s = self.clock(), 0.0
            self.last_step = self.paused_steps = 0
            if self.paused:
                self.paused_at = self.started_at
            run.arch, run.threads = msg["arch"], msg["threads"]
            pane.set_steps_per_epoch(msg["steps_per_epoch"])
            pane.query_one("#progress").update(total=self.steps_total, progress=0)
            for note in (batch_note(msg["config"], msg["train_samples"]), threads_note(msg["threads"], msg["arch"])):
                if note:
                    self.notify(note, severity="warning", timeout=12, markup=False)
            self._show_runs()
            self._update_controls()
        elif kind == "step":
            self.last_step = msg["step"]
            pane.on_step(msg, self.steps_total, self.epochs_total, self._eta_s())
        elif kind == "epoch_end":
            pane.on_epoch(msg)
            run.add_epoch(msg)
            # Only where the Runs view is shown (showing it reads the store again): reading the whole store at
            # every epoch took the app a core and slowed a long run's epochs threefold.
            if self.query_one(TabbedContent).active == "runs":
                self._show_runs()
        elif kind == "boundary":
            pane.query_one("#boundary").show(msg)
        elif kind == "run_finished":
            if run.samples_per_s is None and msg["samples_per_s"] is not None:  # no epoch completed: the
                run.samples_per_s = msg["samples_per_s"]  # trainer's own rate is all there is
            status = "stopped" if msg["stopped"] else "finished"
            acc = "no evaluation" if msg["test_acc"] is None else f"test acc {msg['test_acc']:.4f}"
            short = "" if msg["test_acc"] is None else f" · acc {msg['test_acc']:.4f}"
            self._end_run(status, f"{status}: {acc}", steps=msg["steps"], notice=f"{status}{short}")
        elif kind == "store_warning":
            self.notify(msg["message"], severity="warning", timeout=12, markup=False)
        elif kind == "loading":  # the training process reading its data, before run_started
            self._update_controls(msg["message"])
        elif kind == "run_failed":
            # Before run_started with the backend unavailable nothing ran: refused, as the run store records it.
            status = failure_status(msg.get("exit_code"), started=self.steps_total > 0)
            self._end_run(status, f"{status}: {msg['error']}", error=True, steps=msg.get("step", 0))

    def _end_run(self, status: str, text: str, error: bool = False, steps: int = 0, notice: str = "") -> None:
        """``text``: how the run ended, in the Train view; ``notice``: a shorter form for the notification,
        which sits over the end of the tab row (at 80 columns "finished · acc 0.9700" leaves every tab whole)."""
        notice = notice or text
        if self.current is not None:
            self.current.status = status
            if self.current.network != self.draft.run_name():  # another network was opened meanwhile (or a rerun
                whose = cut(self.current.network, 20)  # trained another one): the results left say whose, in a
                # short form (at 80 columns a 64-character name wrapped the status line)
                text, notice = f"{whose} {text}", f"{whose} {notice}"
        if status == "died":
            self._store_died(text)
        if self.handle is not None:
            self.handle.send("stop")
            self.retiring.append((self.handle, time.monotonic() + 5.0))
        self.handle, self.current, self.paused = None, None, False
        self.query_one(TrainPane).on_end(steps, text)
        failed = error or status == "died"  # a finished run says so in the Train view: a short notice is enough
        self.notify(notice, severity="error" if failed else "information", timeout=10 if failed else None,
                    markup=False)
        self._show_runs()
        self._update_controls(text)

    def _store_died(self, text: str) -> None:
        """The training process died: its run in the store is marked so now (its finished epochs stay)."""
        try:
            if self.recorder is not None and self.recorder.run_id is not None:
                self.store.mark_died(self.recorder.run_id, text)
            elif self.handle is not None:
                self.handle.proc.join(1.0)  # reaped: its pid no longer answers
                self.store.mark_dead()
        except (StoreError, sqlite3.Error) as exc:
            self.notify(f"run store: {exc}", severity="warning", markup=False)

    # -- sweeps -------------------------------------------------------------------------------------------------
    def action_sweep(self) -> None:
        pane = self.query_one(AnalysisPane)
        if self.handle is not None or self.sweeper is not None:
            self.notify("wait for the current run or sweep to end", severity="warning")
            return
        if not self.model_ok:
            self.notify("fix the network first: the sweep runs the network in the editor", severity="warning")
            return
        try:
            job = pane.job()
        except ConfigError as err:
            pane.refuse(err)
            return
        unavailable = [a for a in job["archs"] if not self.archs[a].available]
        if unavailable:
            pane.refuse(ConfigError(f"{unavailable[0]} is unavailable: {self.archs[unavailable[0]].reason}",
                                    field="sweep-archs"))
            return
        model = self.draft.spec(self.query_one(SettingsPane).data)
        try:
            check_filters(model, job["filters"], "filters")
        except ConfigError as err:  # (the field to mark)
            pane.refuse(ConfigError(str(err), field="sweep-filters"))
            return
        self.sweep_job = {**job, "model": model, "name": self.draft.run_name(), "started": time.time()}
        self.sweeper = RunHandle(self.sweep_job, target=sweep_main, store=self.child_store)
        self.action_show_tab("analysis")
        pane.show([], None)  # (the last sweep's table and charts would pass for this one's)
        pane.progress(0, None, "starting…")
        self.refresh_bindings()  # (x stops the sweep)

    def _poll_sweep(self) -> None:
        if self.sweeper is None:
            return
        pane = self.query_one(AnalysisPane)
        for msg in self.sweeper.poll():
            if msg["event"] == "sweep_progress":
                pane.progress(msg["i"], msg["n"], msg["what"])
            elif msg["event"] == "sweep_done":
                n, stopped = len(msg["points"]), msg.get("stopped")
                if n:
                    pane.show(msg["points"], msg["amdahl"])
                if stopped is None:
                    pane.progress(n, n, f"done: {plural(n, 'point')}", count=False)
                elif n and stopped.get("error"):  # the next point was refused
                    pane.progress(n, stopped["of"], f"✗ {stopped['error']} ({n} of "
                                  f"{plural(stopped['of'], 'point')} measured before it, kept)", count=False)
                elif n:
                    pane.progress(n, stopped["of"], f"stopped: {n} of {plural(stopped['of'], 'point')} measured "
                                  "(kept)", count=False)
                else:
                    pane.progress(0, 1, "stopped before its first point was measured", count=False)
                if self.child_store is None and n:
                    self._record_sweep(msg)
                self._show_runs()
            elif msg["event"] == "store_warning":
                self.notify(msg["message"], severity="warning", timeout=12, markup=False)
            elif msg["event"] == "sweep_failed":
                pane.progress(0, 1, f"✗ sweep failed: {msg['error']}", count=False)
                self.notify(f"sweep failed: {msg['error']}", severity="error", timeout=10, markup=False)
        if self.sweeper.finished or self.sweeper.died:
            if self.sweeper.died:
                pane.progress(0, 1, f"✗ the sweep process died (exit code {self.sweeper.exitcode()})", count=False)
            self.retiring.append((self.sweeper, time.monotonic() + 5.0))
            self.sweeper = None
            self.refresh_bindings()

    def _record_sweep(self, msg: dict) -> None:
        try:
            record_sweep(self.store, self.sweep_job, msg["points"], msg["amdahl"], msg.get("stopped"))
        except StoreError as exc:
            self.notify(f"run store: sweep not kept ({exc})", severity="warning", markup=False)

    def _reap(self) -> None:
        """Join finished processes without waiting; kill one that outlives its grace period."""
        keep = []
        for handle, deadline in self.retiring:
            handle.proc.join(0)
            if handle.proc.is_alive():
                if time.monotonic() > deadline:
                    handle.proc.kill()
                keep.append((handle, deadline))
        self.retiring = keep

    def _show_runs(self) -> None:
        self._store_version = self.store.data_version() if self.store is not None else None
        pane = self.query_one(RunsPane)
        # A paused run's row says paused: it is recorded by the training process, or by this one (in memory).
        pane.paused_pid = None if not (self.paused and self.handle) else (
            os.getpid() if self.recorder is not None else self.handle.proc.pid)
        pane.load(self.store, self.store_note)

    def _watch_store(self) -> None:
        """While the Runs view is shown, runs that another process records (a `layerlab train` in another
        terminal) appear in it within a few seconds: the store is read again when it has changed."""
        if self.store is None or self.query_one(TabbedContent).active != "runs":
            return
        if self.store.data_version() != self._store_version:
            self._show_runs()

    def action_toggle_mark(self) -> None:
        self.query_one(RunsPane).toggle_mark()

    def action_rerun(self) -> None:
        """The selected run's config again, on the next backend."""
        pane = self.query_one(RunsPane)
        run_id = pane.selected_id()
        row = next((r for r in pane.rows if r["id"] == run_id), None)
        if row is None:
            self.notify("no run selected to rerun", severity="warning")
            return
        if row["kind"] != "train" or not {"model", "data", "train"} <= set(row["config"]):
            self.notify(f"run #{row['id']} is a {row['kind']}: run sweeps from the Analysis view and benchmarks "
                        "with `layerlab bench`", severity="warning")
            return
        if self.handle is not None or self.sweeper is not None:
            self.notify("wait for the current run or sweep to end", severity="warning")
            return
        cfg = {k: row["config"][k] for k in ("model", "data", "train") if k in row["config"]}
        cfg["train"] = {**cfg["train"], "arch": self._next_arch(row["arch"])}
        cfg["source"] = row["network"]  # recorded under the run's name, not its config file's path
        try:
            check_run(RunConfig(**cfg))
        except (LayerlabError, TypeError) as exc:
            self.notify(f"run #{row['id']} cannot run again: {exc}", severity="error", markup=False)
            return
        self.start_run(cfg, row["network"])

    def action_delete_runs(self) -> None:
        """The marked runs, or the selected one, out of the store (asked first; a run still being recorded,
        running or paused, is refused)."""
        pane = self.query_one(RunsPane)
        chosen = pane.chosen()
        if not chosen:
            self.notify("no run selected to delete", severity="warning")
            return
        ids = [r["id"] for r in chosen]
        try:
            live = self.store.recording(ids)  # (the store's rule: running or paused, its process alive)
        except sqlite3.Error as exc:
            self.notify(f"not deleted: run store {self.store.path}: {exc}", severity="error", markup=False)
            return
        if live:
            row = next(r for r in chosen if r["id"] in live)
            self.notify(f"run #{row['id']} is {row['status']}: stop it before deleting it", severity="warning")
            return
        names = ", ".join(f"#{i}" for i in ids[:6]) + (" …" if len(ids) > 6 else "")

        def delete(yes: bool | None) -> None:
            if not yes:
                return
            try:
                self.store.remove(ids)
            except (StoreError, sqlite3.Error) as exc:
                self.notify(f"not deleted: {exc}", severity="error", markup=False)
                return
            pane.forget(ids)
            self._show_runs()
            self.notify(f"deleted run{'s' if len(ids) > 1 else ''} {names}", markup=False)

        where = "memory" if self.store.memory else str(self.store.path)
        self.open_dialog(ConfirmScreen(f"Delete run{'s' if len(ids) > 1 else ''} {names} from {where}? "
                                       "This cannot be undone."), delete)

    def _next_arch(self, arch: str) -> str:
        names = [n for n, s in self.archs.items() if s.available]
        return names[(names.index(arch) + 1) % len(names)] if arch in names else names[0]

    def action_cycle_backend(self) -> None:
        settings = self.query_one(SettingsPane)
        chosen = settings.set_arch(self._next_arch(settings.arch()))
        self.notify(f"backend{' for the next run' if self.handle is not None else ''}: {chosen}", markup=False)

    # -- keys, focus and the controls ---------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """Run controls that cannot act now are left out of the footer. Start stays in while no run is going,
        valid or not: pressed on an invalid network it says what is wrong."""
        running = self.handle is not None
        if action == "start":
            return not running
        if action == "stop":
            return running or self.sweeper is not None
        if action == "pause":  # (a distributed run's ranks step together: no pausing, so no key in the footer)
            return running and not (self.current is not None and self.current.ranks > 1)
        if action == "step":
            return running and self.paused
        return True

    def on_key(self, event) -> None:
        """A run control pressed where it cannot act (its key is out of the footer then) says why, where it did
        nothing at all. (Keys typed into a text field never get here.)"""
        if isinstance(self.focused, Tabs) and self.screen is self.screen_stack[0]:
            # The view tabs focused (Tab stops there): the view's keys are bound on widgets inside it, outside the
            # tabs' focus chain, so the focus moves into the view and the key is pressed again there.
            target, keys = VIEW_KEY_OWNERS.get(self.query_one(TabbedContent).active, (None, ()))
            # (not enter or space: on the tabs they read as choosing a tab, not as acting on the selected row)
            if target is not None and event.key not in ("enter", "space") and any(event.key == k.plain for k in keys):
                owner = self.query_one(target)
                if owner.focusable:  # (else the key would come back here, to the tabs, again)
                    event.stop()
                    owner.focus()
                    self.simulate_key(event.key)
                    return
        action = next((k.action for k in APP_KEYS if event.key in (k.plain, k.anywhere)), None)
        if action not in RUN_ACTIONS or self.screen is not self.screen_stack[0]:
            return
        if self.check_action(action, ()):
            return
        running = self.handle is not None
        if action == "start":
            why = "a run is going on: x (F9) stops it, then s (F6) starts the next"
        elif action == "stop":
            why = "nothing to stop: no run or sweep is going on"
        elif not running:
            why = f"no run to {'pause' if action == 'pause' else 'step'}: s (F6) starts one"
        elif action == "pause":
            why = NO_PAUSE
        else:
            why = "n (F8) trains one step of a paused run: p (F7) pauses it first"
        self.notify(why, markup=False)

    def key_label(self, action: str, label: str) -> str:
        """The footer's word for a key where it depends on the state: p resumes a paused run."""
        return "Resume" if action == "pause" and self.paused else label

    def _update_controls(self, text: str | None = None) -> None:
        running = self.handle is not None
        why = self._why_not_ready()
        if text is None:
            if running:
                text = f"{'paused' if self.paused else 'training'} on {self.current.arch}"
            else:
                text = why or "ready: press s (F6) to start"
        distributed = running and self.current is not None and self.current.ranks > 1
        if distributed and text.startswith("training on"):
            text += f" × {self.current.ranks} ranks"
        panes = self.query(TrainPane)
        if not panes:  # the app is closing: a message that arrives then has no pane left to update
            return
        # Beside the buttons a long reason would wrap over several lines and push the charts down: where it
        # does not fit in two, it is shortened to where to look (s says it in full).
        short = None
        if not running and why is not None and text == why:
            short = ("a setting is invalid: see the Data & training view (2 or F2)" if not self.settings_ok
                     else "the network cannot train: see the Model view (1 or F1)" if not self.model_ok else None)
        panes.first().set_state(text, running, self.paused, not running and why is None, pausable=not distributed,
                                short=short)
        self._show_title()
        self.refresh_bindings()
        self.call_after_refresh(self._keep_focus)

    def _keep_focus(self) -> None:
        """A control that had the focus was disabled (Start when a run starts, Pause or Stop when it ends): in
        the Train view focus its charts, where Enter does nothing (on Start or Pause a stray Enter started
        another run or paused this one); elsewhere the view's main widget."""
        if self.focused is None and self.screen is self.screen_stack[0]:
            tab = self.query_one(TabbedContent).active
            if tab == "train":
                self.set_focus(self.query_one("#train-body"))
            else:
                self._focus_home(tab)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        actions = {"start": self.action_start, "pause": self.action_pause, "step": self.action_step,
                   "stop": self.action_stop, "sweep-run": self.action_sweep}
        if event.button.id in actions:
            actions[event.button.id]()

    def action_show_tab(self, tab: str) -> None:
        """Show a view with the focus on its main widget. Focus moves first: a focused widget that is hidden
        makes Textual move the focus to a neighbour in the old view, which would bring that view back."""
        self._focus_home(tab)
        self.query_one(TabbedContent).active = tab

    def _focus_home(self, tab: str) -> None:
        """Focus the view's main widget, or else its first widget that can take focus, or else nothing. Not
        while a dialog is open: the focus would go to the dialog's screen, which does not hold the widget."""
        if self.screen is not self.screen_stack[0]:
            return
        target = self.query_one(HOME[tab])
        if not target.focusable:
            target = next((w for w in self.query_one(f"#{tab}", TabPane).query("*") if w.focusable), None)
        self.set_focus(target)

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        """A view shown by a click on its tab: the focus follows unless it is on the tabs. The Runs view reads
        the store again whenever it is shown, so that runs recorded meanwhile by ``layerlab train`` elsewhere
        are there."""
        if event.pane.id == "runs" and self.store is not None:
            self._show_runs()
        focused = self.focused
        if focused is None or not (event.pane in focused.ancestors or isinstance(focused, Tabs)):
            self._focus_home(event.pane.id)

    def action_leave_field(self) -> None:
        """Escape in a field (text or dropdown): focus the view's main widget, where the plain keys act."""
        tab = self.query_one(TabbedContent).active
        if isinstance(self.focused, (Input, Select)) and self.focused is not self.query_one(HOME[tab]):
            self._focus_home(tab)

    def open_dialog(self, screen, callback=None) -> None:
        """Push a dialog unless one is open: keys typed fast can reach the app before the first is shown."""
        if len(self.screen_stack) == 1:
            self.push_screen(screen, callback)

    def action_help(self) -> None:
        self.open_dialog(HelpScreen())

    def get_system_commands(self, screen):
        # Textual's own Keys panel (the help screen shows every key), and its Quit and Screenshot, are replaced:
        # quitting stops a run cleanly first; screenshots go where saves go.
        for command in super().get_system_commands(screen):
            if command.title not in ("Keys", "Quit", "Screenshot"):
                yield command
        yield SystemCommand("Quit", "Quit the app (a run is stopped cleanly first)", self.action_quit)
        yield SystemCommand("Screenshot", f"Save an SVG of the screen in {self.save_dir}", self._screenshot)
        for key in APP_KEYS:
            if key.action in ("leave_field", "quit"):
                continue
            if key.action.startswith("show_tab"):
                tab = key.action.split("'")[1]
                yield SystemCommand(f"Show {key.label}", key.does, lambda t=tab: self.action_show_tab(t))
            else:
                yield SystemCommand(key.label if key.action != "start" else "Start training", key.does,
                                    getattr(self, f"action_{key.action}"))
        yield SystemCommand("Export runs", "Write the marked runs (or all) as CSV or JSON", self.action_export)
        yield SystemCommand("Delete runs", "Delete the marked runs (or the selected one) from the store",
                            self.action_delete_runs)
        yield SystemCommand("Rerun", "Rerun the selected run on the next backend", self.action_rerun)
        yield SystemCommand("Run a sweep", "Scaling sweep of the network in the editor (Analysis view)",
                            self.action_sweep)
        for name, status in self.archs.items():
            if status.available:
                yield SystemCommand(f"Backend: {name}", f"Train on {name}",
                                    lambda n=name: self.query_one(SettingsPane).set_arch(n))

    def _screenshot(self) -> None:
        try:
            self.save_dir.mkdir(parents=True, exist_ok=True)
            path = self.save_screenshot(path=str(self.save_dir))
        except OSError as err:
            self.notify(f"screenshot not saved in {self.save_dir}: {err.strerror or err}", severity="error",
                        markup=False)
            return
        self.notify(f"screenshot written to {path}", timeout=10, markup=False)

    async def action_quit(self) -> None:
        # Changes to the network not saved: asked first, so they are not lost without a word. A second quit while
        # the question is open (ctrl+q again) is a yes.
        if self.draft.edited() and not self._quit_asked:
            self._quit_asked = True

            def answered(yes: bool) -> None:
                if yes:
                    self.call_later(self.action_quit)
                else:
                    self._quit_asked = False

            self.open_dialog(ConfirmScreen(f"Quit and lose the changes to {self.draft.name}? (n, then ctrl+s, "
                                           "saves them)"), answered)
            return
        if self.sweeper is not None:
            self.retiring.append((self.sweeper, 0.0))
            self.sweeper = None
        if self.handle is not None:
            if self.current is not None:
                self.current.status = "stopped"
            self.retiring.append((self.handle, 0.0))
            self.handle = None
        for handle, _ in self.retiring:  # quitting may wait: stop each run cleanly, kill what will not stop
            handle.shutdown(timeout=QUIT_WAIT_S)
        self.retiring = []
        if self.store is not None:
            try:
                self.store.mark_dead()  # a run that would not stop was killed: it died
            except (StoreError, sqlite3.Error):
                pass
            self.store.close()
        self.exit()


def run_app(config: str | None = None, store: str | bool | None = None) -> int:
    LayerlabApp(config, store=store).run()
    return 0
