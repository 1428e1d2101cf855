"""The help screen: every key of the app (from tui.keys, as the footer and the README), and how to close it."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

from tui.guard import Guarded
from tui.keys import key_table_markdown
from tui.widgets.keybar import KeyBar

HELP = f"""\
# layerlab keys

Close this help with **Escape**, **q**, **?** or **F12**.

A plain key (a letter, a digit, `?`) acts where nothing is typed; in a text field it is typed. The keys in
the second column act everywhere, text fields included, and the footer shows the one that works where you
are. **Escape** leaves a text field.

{key_table_markdown()}

**Model view.** Pick a layer in the table (Enter edits it) and change its type and parameters in the fields
below it; an empty field means the default shown in grey. A value that does not parse (or is out of its
parameter's range) is marked where it is typed and the layer keeps its last good value. The network is checked
against the dataset chosen in the Data & training view (input shape, output width against the classes); an
invalid network is marked at the layer at fault and training stays disabled until it is fixed.

**Numbers.** samples/s, the ETA and the Runs view leave paused time out; a run stopped before its first
epoch ends shows — for its accuracy. Per-part timings come from synced steps (each part launched and waited
for on its own), so they include per-launch costs the measured step does not pay: compare parts within a
backend, and backends by samples/s.
"""


class HelpScreen(Guarded, ModalScreen):
    BINDINGS = [Binding("escape,question_mark,f12,q", "dismiss", "Close", id="close_help")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Markdown(HELP)
        yield KeyBar()  # the help's own keys, not the view's, which do nothing here
