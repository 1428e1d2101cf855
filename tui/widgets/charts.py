"""A chart widget: one of nncore.charts' draw functions rendered by textual-plotext, with axes, ticks and a
legend. ``series`` holds what was last plotted (label -> xs, ys), for tests and for the numbers shown beside.

Live data may arrive at every poll (20 a second); a chart is redrawn at most ``RATE_HZ`` times a second, so a
fast run does not spend its frames drawing curves.
"""
from __future__ import annotations

from rich.text import Text
from textual_plotext import PlotextPlot

RATE_HZ = 4
COMPACT_BELOW = 10  # rows: a shorter chart folds its x axis label into its title ("loss against epoch")
BARE_BELOW = 7  # rows: a shorter one drops the title too


class Chart(PlotextPlot):
    DEFAULT_CSS = "Chart { width: 1fr; height: 1fr; min-height: 5; }"

    def __init__(self, draw, empty: str = "", **kwargs):
        """``draw(plt, *args) -> series``; ``empty``: what shows while there is nothing to plot."""
        super().__init__(**kwargs)
        self.draw, self.empty = draw, empty
        self.args: tuple | None = None
        self._series: dict | None = {}
        self._dirty = False

    @property
    def series(self) -> dict:
        """What the current data plots (label -> xs, ys), worked out when first asked for after new data."""
        if self._series is None:
            self._series = self._draw_into(_Recorder())
        return self._series

    def on_mount(self) -> None:
        super().on_mount()
        self.set_interval(1 / RATE_HZ, self._tick)

    def show(self, *args, now: bool = False) -> None:
        """New data; drawn at the next tick (``now``: at the next frame)."""
        self.args = args
        self._series = None
        self._dirty = True
        if now:
            self._tick()

    def clear(self, empty: str | None = None) -> None:
        self.args, self._series = None, {}
        if empty is not None:
            self.empty = empty
        self.refresh()

    def _tick(self) -> None:
        if self._dirty:
            self._dirty = False
            self.refresh()

    def _draw_into(self, plt, rows: int | None = None, width: int | None = None) -> dict:
        return self.draw(plt, *self.args, rows=rows, width=width) if self.args is not None else {}

    def render(self):
        if not self.series:
            return Text(self.empty, style="dim")
        plt = self.plt
        plt.clear_figure()
        labels = _Labels(plt)
        self._draw_into(labels, self.size.height, self.size.width)
        if self.size.height < COMPACT_BELOW:  # the plot keeps the rows, and the title still says what is drawn
            plt.xlabel("")
            title, x = labels.title_text, labels.xlabel_text
            if x and x.split()[0] not in title and len(f"{title} against {x}") <= self.size.width - 4:
                title = f"{title} against {x}"
            plt.title("" if self.size.height < BARE_BELOW else title)
        return super().render()


class _Labels:
    """A figure passed through, the title and x axis label it was given kept."""

    def __init__(self, plt):
        self._plt, self.title_text, self.xlabel_text = plt, "", ""

    def title(self, text: str = "") -> None:
        self.title_text = text
        self._plt.title(text)

    def xlabel(self, text: str = "") -> None:
        self.xlabel_text = text
        self._plt.xlabel(text)

    def __getattr__(self, name):
        return getattr(self._plt, name)


class _Recorder:
    """A figure that draws nothing: running a draw function on it yields the series at no rendering cost."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: None
