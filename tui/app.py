"""layerlab's terminal app: build a network, pick a backend, watch it train, compare runs.

Training runs in a child process (see :mod:`tui.child`); the app polls its pipe every 50 ms and never waits on
it, so the interface stays responsive whatever the kernels do. The app talks to nncore only through its public
API (configs, spec checks, datasets, backends) and the event stream.
"""
from __future__ import annotations

import time
from pathlib import Path

from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.widgets import Button, Footer, Header, TabbedContent, TabPane

from nncore.config import RunConfig, load_config, preset_configs
from nncore.errors import ConfigError
from nncore.runtime import available_archs
from tui.child import RunHandle, distributed_main, sweep_main
from tui.panes.analysis import AnalysisPane
from tui.panes.model import EMPTY, ModelPane
from tui.panes.runs import RunsPane
from tui.panes.settings import SettingsPane
from tui.panes.train import TrainPane
from tui.screens.help import HelpScreen
from tui.screens.path import PathScreen
from tui.state import Draft, RunRecord, export_runs, spec_key, update_speedups

DEFAULT_CONFIG = "quadrant"
TABS = ("model", "settings", "train", "runs", "analysis")


class LayerlabApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "layerlab"
    BINDINGS = [
        Binding("s", "start", "Start", id="start"),
        Binding("p", "pause", "Pause", id="pause"),
        Binding("n", "step", "Step", id="step", show=False),
        Binding("x", "stop", "Stop", id="stop"),
        Binding("b", "cycle_backend", "Backend", id="backend"),
        Binding("r", "rerun", "Rerun", id="rerun", show=False),
        Binding("e", "export", "Export", id="export", show=False),
        Binding("question_mark", "help", "Help", id="help"),
        Binding("ctrl+s", "save_config", "Save", id="save_config", show=False),
        Binding("ctrl+o", "open_config", "Open", id="open_config", show=False),
        Binding("w", "sweep", "Sweep", id="sweep", show=False),
        Binding("q", "quit", "Quit", id="quit"),
        *[Binding(str(i + 1), f"show_tab('{t}')", t.capitalize(), id=f"tab_{t}", show=False)
          for i, t in enumerate(TABS)],
    ]

    def __init__(self, config: str | None = None, export_dir: str | Path = "."):
        super().__init__()
        self.config_name = config or DEFAULT_CONFIG
        self.export_dir = Path(export_dir)
        self.draft = Draft()
        self.runs: list[RunRecord] = []
        self.handle: RunHandle | None = None
        self.retiring: list[tuple[RunHandle, float]] = []  # ended runs whose process may still be exiting
        self.sweeper: RunHandle | None = None  # a sweep's process (one child at a time: they share the CPU)
        self.current: RunRecord | None = None
        self.paused = False
        self.model_ok = self.settings_ok = False
        self.steps_total = 0
        self.started_at = 0.0
        self.archs = {s.name: s for s in available_archs()}

    def compose(self) -> ComposeResult:
        yield Header()
        with TabbedContent(id="tabs", initial="model"):
            with TabPane("Model [1]", id="model"):
                yield ModelPane(self.draft, id="model-pane")
            with TabPane("Data & training [2]", id="settings"):
                yield SettingsPane(id="settings-pane")
            with TabPane("Train [3]", id="train"):
                yield TrainPane(id="train-pane")
            with TabPane("Runs [4]", id="runs"):
                yield RunsPane(id="runs-pane")
            with TabPane("Analysis [5]", id="analysis"):
                yield AnalysisPane(id="analysis-pane")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(TrainPane).reset()
        self.open_config(self.config_name)
        self.query_one("#layers").focus()
        self.set_interval(0.05, self._poll)
        self._update_controls()

    # -- configs ----------------------------------------------------------------------------------------------
    def open_config(self, name: str) -> None:
        if name == EMPTY:
            self.draft = Draft([], [2], "bce", EMPTY)
            self.query_one(ModelPane).load_draft(self.draft, EMPTY)
            return
        try:
            cfg = load_config(name)
        except ConfigError as err:
            self.notify(str(err), severity="error", timeout=8)
            return
        self.draft = Draft.from_model(cfg.model, Path(cfg.source).stem)
        if "input" not in cfg.model:
            self.draft.input = [1, 28, 28] if cfg.data.get("dataset", "").startswith("fashion") else [2]
        presets = preset_configs()
        self.query_one(ModelPane).load_draft(self.draft, self.draft.name if self.draft.name in presets else None)
        self.query_one(SettingsPane).load({**cfg.data, "dataset": cfg.dataset_name()}, cfg.train)
        self.sub_title = self.draft.name

    def on_model_pane_preset_chosen(self, event: ModelPane.PresetChosen) -> None:
        self.open_config(event.name)

    def on_model_pane_changed(self, event: ModelPane.Changed) -> None:
        self.model_ok = event.valid
        self._update_controls()

    def on_settings_pane_changed(self, event: SettingsPane.Changed) -> None:
        self.settings_ok = event.valid
        self._update_controls()

    def action_save_config(self) -> None:
        def save(path: str | None) -> None:
            if not path:
                return
            try:
                data, train = self.query_one(SettingsPane).values()
                Path(path).write_text(self.draft.to_toml(data, train), encoding="utf-8")
                self.notify(f"saved {path}")
            except (ConfigError, OSError) as err:
                self.notify(f"not saved: {err}", severity="error", timeout=8)

        self.push_screen(PathScreen("Save the network and settings as", f"{self.draft.name}.toml"), save)

    def action_open_config(self) -> None:
        self.push_screen(PathScreen("Open a config file", "", must_exist=True), lambda p: p and self.open_config(p))

    # -- runs -------------------------------------------------------------------------------------------------
    def _run_config(self) -> dict:
        data, train = self.query_one(SettingsPane).values()
        cfg = RunConfig(self.draft.spec(), data, train, source=self.draft.name)
        return cfg.to_dict()

    def action_start(self) -> None:
        if self.handle is not None:
            return
        if self.sweeper is not None:
            self.notify("a sweep is running; start training when it is done", severity="warning")
            return
        if not (self.model_ok and self.settings_ok):
            self.notify("fix the network or the settings first", severity="warning")
            return
        try:
            cfg = self._run_config()
        except ConfigError as err:
            self.notify(str(err), severity="error")
            return
        self.start_run(cfg, self.draft.name)

    def start_run(self, cfg: dict, name: str) -> None:
        tr = cfg["train"]
        self.current = RunRecord(name, tr["arch"], tr["threads"] or 0, tr["batch_size"], 0, config=cfg,
                                 spec_key=spec_key(cfg["model"]), ranks=tr.get("ranks", 1))
        self.runs.append(self.current)
        self.handle = RunHandle(cfg, target=distributed_main if self.current.ranks > 1 else None)
        self.paused, self.steps_total, self.started_at = False, 0, time.monotonic()
        self._reset_train_pane()
        self.query_one(TabbedContent).active = "train"
        self._update_controls("starting a training process…")

    def _reset_train_pane(self, steps_total: int | None = None) -> None:
        self.query_one(TrainPane).reset(steps_total)
        if self.current is not None and self.current.ranks > 1:
            self.query_one("#boundary").clear("no decision boundary: a run over ranks")

    def action_pause(self) -> None:
        if self.handle is not None and self.current is not None and self.current.ranks > 1:
            self.notify("a distributed run cannot pause: its ranks step together; stop it instead",
                        severity="warning")
            return
        if self.handle is not None:
            self.paused = not self.paused
            self.handle.send("pause" if self.paused else "resume")
            self._update_controls()

    def action_step(self) -> None:
        if self.handle is not None and self.paused:
            self.handle.send("step")

    def action_stop(self) -> None:
        if self.handle is not None:
            self.handle.send("stop")
            if self.paused:
                self.paused = False
                self.handle.send("resume")
            self._update_controls("stopping after the current step…")

    def _poll(self) -> None:
        self._reap()
        self._poll_sweep()
        if self.handle is None:
            return
        for msg in self.handle.poll():
            self._run_message(msg)
        if self.handle is not None and self.handle.died:
            code = self.handle.exitcode()
            self._end_run("died", f"the training process died (exit code {code}); partial results kept")

    def _run_message(self, msg: dict) -> None:
        pane, run, kind = self.query_one(TrainPane), self.current, msg["event"]
        if kind == "run_started":
            self.steps_total = msg["steps_per_epoch"] * msg["config"]["train"]["epochs"]
            self.started_at = time.monotonic()
            run.arch, run.threads = msg["arch"], msg["threads"]
            self._reset_train_pane(self.steps_total)
            self._update_controls()
        elif kind == "step":
            pane.on_step(msg, self.steps_total, self.started_at, time.monotonic())
        elif kind == "epoch_end":
            pane.on_epoch(msg)
            run.epochs, run.test_acc = msg["epoch"], msg["test_acc"]
            run.s_per_epoch, run.samples_per_s = msg["epoch_s"], msg["samples_per_s"]
            self._show_runs()
        elif kind == "boundary":
            pane.query_one("#boundary").show(msg)
        elif kind == "run_finished":
            run.samples_per_s = msg["samples_per_s"] or run.samples_per_s
            self._end_run("stopped" if msg["stopped"] else "finished",
                          f"run {'stopped' if msg['stopped'] else 'finished'}: test accuracy {msg['test_acc']:.4f}")
        elif kind == "run_failed":
            self._end_run("failed", msg["error"], error=True)

    def _end_run(self, status: str, text: str, error: bool = False) -> None:
        if self.current is not None:
            self.current.status = status
        if self.handle is not None:
            self.handle.send("stop")
            self.retiring.append((self.handle, time.monotonic() + 5.0))
        self.handle, self.current, self.paused = None, None, False
        self.notify(text, severity="error" if error or status == "died" else "information", timeout=8)
        self._show_runs()
        self._update_controls(text)

    # -- sweeps -------------------------------------------------------------------------------------------------
    def action_sweep(self) -> None:
        if self.handle is not None or self.sweeper is not None:
            self.notify("wait for the current run or sweep to end", severity="warning")
            return
        if not self.model_ok:
            self.notify("fix the network first: the sweep runs the network in the editor", severity="warning")
            return
        pane = self.query_one(AnalysisPane)
        try:
            job = pane.job()
        except ConfigError as err:
            self.notify(str(err), severity="error")
            return
        unavailable = [a for a in job["archs"] if not self.archs[a].available]
        if unavailable:
            self.notify(f"{unavailable[0]} is unavailable: {self.archs[unavailable[0]].reason}", severity="error")
            return
        self.sweeper = RunHandle({**job, "model": self.draft.spec()}, target=sweep_main)
        self.query_one(TabbedContent).active = "analysis"
        pane.progress(0, 1, "starting…")

    def _poll_sweep(self) -> None:
        if self.sweeper is None:
            return
        pane = self.query_one(AnalysisPane)
        for msg in self.sweeper.poll():
            if msg["event"] == "sweep_progress":
                pane.progress(msg["i"], msg["n"], msg["what"])
            elif msg["event"] == "sweep_done":
                pane.show(msg["points"], msg["amdahl"])
                self.notify(f"sweep done: {len(msg['points'])} points")
            elif msg["event"] == "sweep_failed":
                self.notify(f"sweep failed: {msg['error']}", severity="error", timeout=8)
        if self.sweeper.finished or self.sweeper.died:
            if self.sweeper.died:
                self.notify(f"the sweep process died (exit code {self.sweeper.exitcode()})", severity="error")
            self.retiring.append((self.sweeper, time.monotonic() + 5.0))
            self.sweeper = None

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
        update_speedups(self.runs)
        self.query_one(RunsPane).show(self.runs)

    def action_rerun(self) -> None:
        i = self.query_one(RunsPane).selected()
        if self.handle is not None or not 0 <= i < len(self.runs):
            return
        old = self.runs[i]
        cfg = {**old.config, "train": {**old.config["train"], "arch": self._next_arch(old.arch)}}
        self.start_run(cfg, old.network)

    def _next_arch(self, arch: str) -> str:
        names = [n for n, s in self.archs.items() if s.available]
        return names[(names.index(arch) + 1) % len(names)] if arch in names else names[0]

    def action_cycle_backend(self) -> None:
        settings = self.query_one(SettingsPane)
        settings.set_arch(self._next_arch(settings.arch()))
        self.notify(f"backend: {settings.arch()}")

    def action_export(self) -> None:
        if not self.runs:
            self.notify("no runs to export yet", severity="warning")
            return
        stamp = time.strftime("%Y%m%d-%H%M%S")
        try:
            for fmt in ("csv", "json"):
                (self.export_dir / f"layerlab-runs-{stamp}.{fmt}").write_text(export_runs(self.runs, fmt))
        except OSError as err:
            self.notify(f"export failed: {err}", severity="error")
            return
        self.notify(f"exported {len(self.runs)} runs to {self.export_dir / f'layerlab-runs-{stamp}'}.csv/.json")

    # -- everything else ---------------------------------------------------------------------------------------
    def _update_controls(self, text: str | None = None) -> None:
        running = self.handle is not None
        can_start = self.model_ok and self.settings_ok
        if text is None:
            if running:
                text = f"{'paused' if self.paused else 'training'} on {self.current.arch}"
            elif not self.model_ok:
                text = "the network is invalid: see the Model view"
            elif not self.settings_ok:
                text = "a setting is invalid: see the Data & training view"
            else:
                text = "ready: press s to start"
        distributed = running and self.current is not None and self.current.ranks > 1
        if distributed and text.startswith("training on"):
            text += f" × {self.current.ranks} ranks"
        self.query_one(TrainPane).set_state(text, running, self.paused, can_start, pausable=not distributed)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        {"start": self.action_start, "pause": self.action_pause, "step": self.action_step,
         "stop": self.action_stop, "sweep-run": self.action_sweep}[event.button.id]()

    def action_show_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def get_system_commands(self, screen):
        yield from super().get_system_commands(screen)
        yield SystemCommand("Start training", "Train the network in the editor", self.action_start)
        yield SystemCommand("Stop training", "Stop after the current step", self.action_stop)
        yield SystemCommand("Export runs", "Write the Runs table as CSV and JSON", self.action_export)
        yield SystemCommand("Run a sweep", "Scaling sweep of the network in the editor (Analysis view)",
                            self.action_sweep)
        for name, status in self.archs.items():
            if status.available:
                yield SystemCommand(f"Backend: {name}", f"Train on {name}",
                                    lambda n=name: self.query_one(SettingsPane).set_arch(n))

    async def action_quit(self) -> None:
        if self.sweeper is not None:
            self.retiring.append((self.sweeper, 0.0))
            self.sweeper = None
        if self.handle is not None:
            if self.current is not None:
                self.current.status = "stopped"
            self.retiring.append((self.handle, 0.0))
            self.handle = None
        for handle, _ in self.retiring:  # quitting may wait: stop each run cleanly, kill what will not stop
            handle.shutdown(timeout=3.0)
        self.retiring = []
        self.exit()


def run_app(config: str | None = None) -> int:
    LayerlabApp(config).run()
    return 0
