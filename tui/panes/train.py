"""The training view: controls, progress, loss sparklines, accuracy, per-layer timing bars, decision boundary."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Label, ProgressBar, Sparkline, Static

from tui.widgets.boundary import BoundaryPlot
from tui.widgets.timing import RankBars, TimingBars


class TrainPane(Vertical):
    def compose(self) -> ComposeResult:
        with Horizontal(id="controls"):
            yield Button("Start [s]", id="start", variant="success")
            yield Button("Pause [p]", id="pause")
            yield Button("Step [n]", id="step")
            yield Button("Stop [x]", id="stop", variant="error")
            yield Static("idle", id="run-state")
        with Horizontal(id="progress-row"):
            yield ProgressBar(id="progress", show_eta=False, show_percentage=True)
            yield Static("", id="progress-label")
        with Horizontal(id="train-body"):
            with Vertical(id="curves"):
                yield Label("train loss", classes="curve-label")
                yield Sparkline([], id="train-loss")
                yield Label("test loss", classes="curve-label")
                yield Sparkline([], id="test-loss")
                yield Static("accuracy —", id="accuracy")
                yield TimingBars(id="timings")
                yield RankBars(id="rank-times")
            yield BoundaryPlot(id="boundary")

    def reset(self, steps_total: int | None = None) -> None:
        self.train_losses: list[float] = []
        self.test_losses: list[float] = []
        self.best_acc = 0.0
        self.last_acc: float | None = None
        self.query_one("#train-loss", Sparkline).data = []
        self.query_one("#test-loss", Sparkline).data = []
        self.query_one("#accuracy", Static).update("accuracy —")
        self.query_one("#progress", ProgressBar).update(total=steps_total, progress=0)
        self.query_one("#progress-label", Static).update("")
        self.query_one("#boundary", BoundaryPlot).clear()
        self.query_one("#rank-times", RankBars).clear()

    def set_state(self, text: str, running: bool, paused: bool, can_start: bool, pausable: bool = True) -> None:
        self.query_one("#run-state", Static).update(text)
        self.query_one("#start", Button).disabled = running or not can_start
        self.query_one("#pause", Button).disabled = not (running and pausable)
        self.query_one("#pause", Button).label = "Resume [p]" if paused else "Pause [p]"
        self.query_one("#step", Button).disabled = not (running and paused)
        self.query_one("#stop", Button).disabled = not running

    def on_step(self, msg: dict, steps_total: int, started_at: float, now: float) -> None:
        self.train_losses = (self.train_losses + [msg["loss"] if msg["loss"] is not None else float("nan")])[-400:]
        self.query_one("#train-loss", Sparkline).data = list(self.train_losses)  # replaced, not mutated
        self.query_one("#progress", ProgressBar).update(total=steps_total, progress=msg["step"])
        left = (steps_total - msg["step"]) * (now - started_at) / max(msg["step"], 1)
        comm = f" · comm {100 * msg['comm_share']:.0f}%" if msg.get("comm_share") is not None else ""
        self.query_one("#progress-label", Static).update(
            f"epoch {msg['epoch']} · step {msg['step']}/{steps_total} · {msg['samples_per_s']:,.0f} samples/s{comm} · "
            f"ETA {left:.0f}s")

    def on_epoch(self, msg: dict) -> None:
        self.test_losses = self.test_losses + [msg["test_loss"]]
        self.query_one("#test-loss", Sparkline).data = list(self.test_losses)
        self.last_acc = msg["test_acc"]
        self.best_acc = max(self.best_acc, msg["test_acc"])
        self.query_one("#accuracy", Static).update(
            f"epoch {msg['epoch']}: test accuracy {msg['test_acc']:.4f} (best {self.best_acc:.4f}) · "
            f"train loss {msg['train_loss']:.4f} · test loss {msg['test_loss']:.4f}")
        if msg.get("timings"):
            self.query_one("#timings", TimingBars).show(msg["timings"])
        if msg.get("ranks"):
            self.query_one("#rank-times", RankBars).show(msg["ranks"], msg.get("comm_share"))
        self.query_one("#progress", ProgressBar).update(progress=msg["steps"])
