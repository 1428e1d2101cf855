"""The decision boundary of a 2-D classifier: predicted probability as cell colour, test points on top."""
from __future__ import annotations

import textwrap

from rich.color import Color
from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widget import Widget

LOW, HIGH = Color.from_rgb(40, 90, 170), Color.from_rgb(230, 130, 40)  # p(class 1) = 0 and 1
WHITE, BLACK = Color.from_rgb(255, 255, 255), Color.from_rgb(0, 0, 0)


def _blend(p: float) -> Color:
    p = min(max(p, 0.0), 1.0)
    a, b = LOW.get_truecolor(), HIGH.get_truecolor()
    mix = lambda x, y: int(x + (y - x) * p)  # noqa: E731
    return Color.from_rgb(mix(a.red, b.red), mix(a.green, b.green), mix(a.blue, b.blue))


class BoundaryPlot(Widget):
    """Fed ``boundary`` messages from the training process; draws the latest one at the widget's size."""

    DEFAULT_CSS = "BoundaryPlot { width: 1fr; height: 1fr; min-height: 8; }"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.grid: dict | None = None
        self.points: list = []
        self.note = "decision boundary: 2-D datasets, after the run starts"

    def show(self, msg: dict) -> None:
        self.grid = msg
        if msg.get("points"):
            self.points = msg["points"]
        # What the colours and the axes are, on the border: p(class 1) from blue (0) to orange (1) over the inputs'
        # plane, the first input across, the second up (test points as dots, white for class 1).
        x0, x1, y0, y1 = msg["extent"]
        self.border_title = "p(1): blue→orange"
        ends = [round(v, 1) for v in (x0, x1, y0, y1)]  # (a data set's extent: 1.13, not 1.12924)
        span = (f"±{ends[1]:g}" if ends[0] == -ends[1] == ends[2] == -ends[3]
                else f"{ends[0]:g}…{ends[1]:g}, {ends[2]:g}…{ends[3]:g}")
        self.border_subtitle = f"x₁ → x₂ ↑ {span}"
        self.refresh()

    def clear(self, note: str = "decision boundary: 2-D datasets, after the run starts") -> None:
        self.grid, self.points, self.note = None, [], note
        self.border_title = self.border_subtitle = None
        self.refresh()

    def render_line(self, y: int) -> Strip:
        w, h = self.size.width, self.size.height
        if not self.grid or w < 2 or h < 2:
            lines = textwrap.wrap(self.note, max(w, 1)) if not self.grid else []  # the note, wrapped to the width
            text = lines[y] if y < len(lines) else ""
            return Strip([Segment(text[:w].ljust(w))])
        cols, rows = self.grid["res"]
        prob = self.grid["prob"]
        x0, x1, y0, y1 = self.grid["extent"]
        marks = {}
        for px, py, c in self.points:
            cx = int((px - x0) / (x1 - x0) * (w - 1) + 0.5)
            cy = int((y1 - py) / (y1 - y0) * (h - 1) + 0.5)
            marks[(cx, cy)] = c
        segs = []
        gy = min(rows - 1, int(y / max(h - 1, 1) * (rows - 1) + 0.5))
        for x in range(w):
            gx = min(cols - 1, int(x / max(w - 1, 1) * (cols - 1) + 0.5))
            bg = _blend(prob[gy * cols + gx])
            if (x, y) in marks:  # class 1 white, class 0 black, over the predicted colour
                fg = WHITE if marks[(x, y)] else BLACK
                segs.append(Segment("●", Style(color=fg, bgcolor=bg, bold=True)))
            else:
                segs.append(Segment(" ", Style(bgcolor=bg)))
        return Strip(segs)
