"""The help screen: every key of the app, by view."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

KEYS = """\
# layerlab keys

| key | does |
|---|---|
| `1` … `5` | Model, Data & training, Train, Runs, Analysis |
| `s` | start training the network in the editor |
| `p` | pause / resume |
| `n` | one step, while paused |
| `x` | stop (the run is kept in the Runs table) |
| `b` | switch to the next available backend |
| `r` | rerun the selected run (Runs view) on the next backend |
| `e` | export the Runs table as CSV and JSON |
| `w` | run a scaling sweep of the network in the editor (Analysis view) |
| `a` / `d` | add a layer after the selected one / remove it (Model view) |
| `shift+up` / `shift+down` | move the selected layer |
| `ctrl+s` / `ctrl+o` | save the network and settings as a config / open one |
| `ctrl+p` | command palette (start, stop, export, backends) |
| `?` | this help · `q` quit (stops a run cleanly) |

In the Model view, pick a layer in the table and edit its type and parameters below it
(`out_channels=8, kernel_size=3`, pairs as `3x2`). An invalid network is marked at the layer at fault and
training stays disabled until it is fixed.
"""


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close", id="close_help")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Markdown(KEYS)
