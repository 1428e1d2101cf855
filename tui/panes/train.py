"""The training view: controls, progress, loss and accuracy charts, per-layer timing bars, decision boundary.

Rates and the ETA leave paused time out. The decision boundary is shown for 2-D datasets only; the space is the
curves' otherwise.
"""
from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, ProgressBar, Static

from nncore.charts import Curves, draw_accuracy, draw_loss
from nncore.report import loss_text
from tui.guard import Guarded
from tui.keys import TRAIN_KEYS, bindings
from tui.widgets.boundary import BoundaryPlot
from tui.widgets.charts import Chart
from tui.widgets.timing import RankBars, TimingBars


class TrainBody(Horizontal):
    """The charts and timings, focusable: where the focus goes when a run starts or ends and the button that had
    it is disabled, so that a stray Enter neither starts another run nor pauses this one."""

    can_focus = True


def fmt_duration(seconds: float) -> str:
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"


def f4(value: float | None) -> str:
    """A loss as shown: four decimals (exponent form from 100,000 up), or — where it is not a number."""
    return "—" if value is None or value != value else loss_text(value)


def eta_text(left_s: float | None) -> str:
    return f"ETA {'—' if left_s is None else fmt_duration(left_s)}"


class TrainPane(Guarded, Vertical):
    """On a short terminal the body has room for the charts or the per-part table, not both: the charts show with
    a one-line summary of the parts, and ``t`` swaps them for the table (and back)."""

    BINDINGS = bindings(TRAIN_KEYS)
    progress_parts: tuple[str, ...] | list[str] = ()  # what the progress line last said, part by part
    tall = True  # the terminal has room for both
    table_first = False  # short terminal: the per-part table instead of the charts
    state_texts: tuple[str, str | None] = ("idle", None)  # the run state beside the buttons, and its short form
    def compose(self) -> ComposeResult:
        with Horizontal(id="controls"):
            yield Button("Start (s)", id="start", variant="success", compact=True)
            yield Button("Pause (p)", id="pause", compact=True)
            yield Button("Step (n)", id="step", compact=True)
            yield Button("Stop (x)", id="stop", variant="error", compact=True)
            yield Static("idle", id="run-state", markup=False)
        yield ProgressBar(id="progress", show_eta=False, show_percentage=True, total=1)
        yield Static("", id="progress-label", markup=False)
        yield Static("test acc —", id="accuracy", markup=False)
        with TrainBody(id="train-body"):
            with Vertical(id="curves"):
                with Horizontal(id="train-charts"):
                    yield Chart(draw_loss, "loss: the curves start with the first step", id="train-loss")
                    yield Chart(draw_accuracy, "test accuracy: after the first epoch", id="train-acc")
                yield TimingBars(id="timings")
                yield RankBars(id="rank-times")
            yield BoundaryPlot(id="boundary")

    def reset(self, steps_total: int | None = 1, boundary: bool = True) -> None:
        """A new run (``steps_total`` None: not known yet, the bar pulses); ``boundary``: a 2-D dataset."""
        self.curves = Curves("run", 1)  # the run's step losses and epoch metrics, as the charts draw them
        self.best_acc: float | None = None
        self.query_one("#train-loss", Chart).clear()
        self.query_one("#train-acc", Chart).clear()
        self.query_one("#accuracy", Static).update("test acc — (after the first epoch)")
        self.query_one("#progress", ProgressBar).update(total=steps_total, progress=0)
        self.query_one("#progress-label", Static).update("")
        self.progress_parts: list[str] = []
        self.query_one("#boundary", BoundaryPlot).clear()
        self.query_one("#boundary").display = boundary
        self.query_one("#timings", TimingBars).clear()
        self.query_one("#rank-times", RankBars).clear()

    def set_state(self, text: str, running: bool, paused: bool, can_start: bool, pausable: bool = True,
                  short: str | None = None) -> None:
        """``short``: what to say instead of ``text`` where ``text`` would take more than two lines."""
        self.state_texts = (text, short)
        self._show_state()
        off = {"start": running or not can_start, "pause": not (running and pausable), "step": not (running and paused),
               "stop": not running}
        # A focused control about to be disabled hands the focus to the charts first: Textual would move it to
        # a neighbour, Start among them, where a stray Enter began another run.
        focused = self.screen.focused if self.is_attached else None
        if isinstance(focused, Button) and off.get(focused.id) and not focused.disabled:
            self.query_one(TrainBody).focus()
        for name, disabled in off.items():
            self.query_one(f"#{name}", Button).disabled = disabled
        self.query_one("#pause", Button).label = "Resume (p)" if paused else "Pause (p)"

    def _show_state(self) -> None:
        text, short = self.state_texts
        state = self.query_one("#run-state", Static)
        # (a view not shown yet has no size: the buttons beside the state take about 46 columns)
        width = state.content_size.width or max(10, self.app.size.width - 46)
        state.update(short if short is not None and len(text) > 2 * width else text)

    def on_resize(self) -> None:
        self.call_after_refresh(self._show_state)

    def set_tall(self, tall: bool) -> None:
        self.tall = tall
        self._arrange()
        self.app.refresh_bindings()

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        return not self.tall if action == "toggle_parts" else True  # a tall terminal shows both: no key

    def action_toggle_parts(self) -> None:
        if self.tall:
            self.notify("the charts and the per-part table are both shown", timeout=4)
            return
        self.table_first = not self.table_first
        self._arrange()

    def _arrange(self) -> None:
        self.query_one("#train-charts").display = self.tall or not self.table_first
        self.query_one("#timings", TimingBars).set_compact(not self.tall and not self.table_first)

    def set_steps_per_epoch(self, n: int) -> None:
        """Known at run_started: the loss chart's x axis counts epochs."""
        self.curves.steps_per_epoch = max(1, n)

    def on_step(self, msg: dict, steps_total: int, epochs: int, left_s: float | None) -> None:
        """A step event; ``left_s``: the time the run has left (None while paused or not yet known)."""
        self.curves.steps.append((msg["step"], msg["loss"] if msg["loss"] is not None else float("nan")))
        self.query_one("#train-loss", Chart).show([self.curves])
        self.query_one("#progress", ProgressBar).update(total=steps_total, progress=msg["step"])
        comm = f" · comm {100 * msg['comm_share']:.0f}%" if msg.get("comm_share") is not None else ""
        parts = [f"epoch {msg['epoch']}/{epochs}", f"step {msg['step']:,}/{steps_total:,}",
                 f"{msg['samples_per_s']:,.0f} samples/s this epoch{comm}", eta_text(left_s)]
        self._show_parts(parts)

    def show_eta(self, left_s: float | None) -> None:
        """The progress line's ETA anew (at a pause or a resume, before the next step event)."""
        if any(p.startswith("ETA") for p in self.progress_parts):
            self._show_parts([eta_text(left_s) if p.startswith("ETA") else p for p in self.progress_parts])

    def on_epoch(self, msg: dict) -> None:
        self.curves.epochs.append((msg["epoch"], msg["test_loss"], msg["test_acc"]))
        self.query_one("#train-loss", Chart).show([self.curves])
        self.query_one("#train-acc", Chart).show([self.curves])
        acc = msg["test_acc"]
        self.best_acc = acc if self.best_acc is None else max(self.best_acc, acc)
        self._show_parts([f"epoch {msg['epoch']}: test acc {acc:.4f} (best {self.best_acc:.4f})",
                          f"train loss {f4(msg['train_loss'])}", f"test loss {f4(msg['test_loss'])}"], "#accuracy")
        if msg.get("timings"):
            self.query_one("#timings", TimingBars).show(msg["timings"])
        if msg.get("ranks"):
            self.query_one("#rank-times", RankBars).show(msg["ranks"], msg.get("comm_share"))
        self.query_one("#progress", ProgressBar).update(progress=msg["steps"])

    def _show_parts(self, parts: list[str], where: str = "#progress-label") -> None:
        """A line's parts (the progress line's, or the last epoch's figures) joined by " · ", broken between
        parts (never inside "ETA 1h 23m" or "test loss 0.0300") where the terminal is too narrow for one line."""
        if where == "#progress-label":
            self.progress_parts = parts
        label = self.query_one(where, Static)
        width = label.content_size.width or 78
        lines = [""]
        for part in parts:
            joined = f"{lines[-1]} · {part}" if lines[-1] else part
            if len(joined) > width and lines[-1]:
                lines.append(part)
            else:
                lines[-1] = joined
        label.update("\n".join(lines))

    def on_end(self, steps_done: int, outcome: str = "") -> None:
        """The run ended: the bar stops where it got to (never pulsing on after it), and the progress line says
        how it ended in full (the status beside the buttons may be cut short on a narrow terminal)."""
        parts = [p for p in self.progress_parts if not p.startswith("ETA")]
        if steps_done:  # the last step event shown may be a few steps short of the end (they are throttled)
            parts = [f"step {steps_done:,}/{p.split('/', 1)[1]}" if p.startswith("step ") and "/" in p else p
                     for p in parts]
        if outcome:  # the outcome, then where the run got to (no ETA: nothing is left to wait for)
            self._show_parts([outcome, *parts])
        bar = self.query_one("#progress", ProgressBar)
        if bar.total is None:
            bar.update(total=max(steps_done, 1), progress=steps_done)
        elif steps_done:
            bar.update(progress=steps_done)
