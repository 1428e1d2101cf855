"""Every key of the app in one table: the bindings, the footer, the help screen and the README's key table all
come from it (a test holds the README to it).

The rule that keeps keys and typing apart: a plain key (a letter, a digit, ``?``) acts only where nothing is
typed; in a text field it is typed, as the user meant. So every action with a plain key also has a function
key or a ctrl+ chord that works everywhere, text fields included, and the footer shows whichever of the two
works where the focus is. Escape leaves a text field.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from textual.binding import Binding

TABS = ("model", "settings", "train", "runs", "analysis")
TAB_TITLES = ("Model", "Data & training", "Train", "Runs", "Analysis")


@dataclass(frozen=True)
class Key:
    plain: str | None  # acts outside text fields ("s"); None: no plain key
    anywhere: str | None  # acts everywhere, text fields too ("f6"); None: no such key
    action: str
    label: str  # the footer's word
    does: str  # the help screen's and the README's description
    show: bool = True  # in the footer
    where: str = "anywhere"  # the view whose widgets the key belongs to (help and README group by it)
    in_dialogs: bool = False  # the ``anywhere`` key acts in a dialog too (a priority binding; the plain key not)

    def bindings(self) -> list[Binding]:
        name = re.sub(r"\W+", "_", self.action).strip("_")
        if not self.in_dialogs:
            keys = ",".join(k for k in (self.plain, self.anywhere) if k)
            return [Binding(keys, self.action, self.label, show=self.show, id=name)]
        # A dialog (a modal screen) hides the app's bindings but for priority ones; a priority binding also acts
        # before a text field sees the key, so the plain key, which a field must receive, stays ordinary.
        plain = [Binding(self.plain, self.action, self.label, show=False, id=f"{name}_plain")] if self.plain else []
        return [*plain, Binding(self.anywhere, self.action, self.label, show=self.show, priority=True, id=name)]


APP_KEYS = [
    *[Key(str(i + 1), f"f{i + 1}", f"show_tab('{tab}')", title, f"the {title} view", show=False)
      for i, (tab, title) in enumerate(zip(TABS, TAB_TITLES))],
    Key("s", "f6", "start", "Start", "start training the network in the editor"),
    Key("p", "f7", "pause", "Pause", "pause or resume the run"),
    Key("n", "f8", "step", "Step", "train one step while paused"),
    Key("x", "f9", "stop", "Stop",
        "stop the run after the current step (it stays in the Runs view), or a sweep after its current point"),
    Key("b", "ctrl+b", "cycle_backend", "Backend", "switch to the next available backend"),
    Key(None, "ctrl+s", "save_config", "Save", "save the network and settings as a config file", show=False),
    Key(None, "ctrl+o", "open_config", "Open", "open a config file", show=False),
    Key("question_mark", "f12", "help", "Help", "the help screen: every key, and how the numbers are measured"),
    Key("q", "ctrl+q", "quit", "Quit", "quit (asks about unsaved network changes; a run or a sweep is stopped "
        "cleanly first; ctrl+q in a dialog too)",
        in_dialogs=True),
    Key(None, "escape", "leave_field", "Leave field", "leave a text field (or close a dialog)", show=False),
]
# Keys of one view's table or list (where nothing is typed), bound by that view.
MODEL_KEYS = [
    Key("a", None, "add_layer", "Add", "add a layer after the selected one (asks for its type)", where="Model"),
    Key("d", None, "remove_layer", "Remove", "remove the selected layer", where="Model"),
    Key("shift+up", None, "move_layer(-1)", "Up", "move the selected layer up", show=False, where="Model"),
    Key("shift+down", None, "move_layer(1)", "Down", "move the selected layer down", show=False, where="Model"),
    Key("enter", None, "edit_layer", "Edit", "edit the selected layer's parameters", show=False, where="Model"),
    Key("home", None, "scroll_top", "First", "select the first layer", show=False, where="Model"),
    Key("end", None, "scroll_bottom", "Last", "select the last layer", show=False, where="Model"),
]
TRAIN_KEYS = [
    Key("t", None, "toggle_parts", "Parts", "a short terminal: the per-part timing table in place of the charts, and "
        "back", where="Train"),
]
# Rerun, delete and export stay out of the footer: the line under the runs table names them (with mark), and the
# footer with them and a run's controls was wider than 80 columns, which cut off Quit.
RUNS_KEYS = [
    Key("space", None, "app.toggle_mark", "Mark", "mark or unmark the selected run: marked runs' curves are overlaid",
        where="Runs"),
    Key("r", None, "app.rerun", "Rerun", "rerun the selected run on the next backend", show=False, where="Runs"),
    Key("d", None, "app.delete_runs", "Delete", "delete the marked runs, or the selected one, from the run store "
        "(asks first)", show=False, where="Runs"),
    Key("e", None, "app.export", "Export", "export the marked runs (or all) as CSV or JSON (asks where)",
        show=False, where="Runs"),
    Key("w", None, "toggle_columns", "Columns", "every column whole, scrolled sideways with ← and → (w again fits the "
        "table to the width: a narrow terminal hides the least useful columns)", show=False, where="Runs"),
    # (a row table: DataTable's own home and end scroll sideways, which moved nothing here)
    Key("home", None, "scroll_top", "Newest", "select the newest run (the first row)", show=False, where="Runs"),
    Key("end", None, "scroll_bottom", "Oldest", "select the last run listed (the next runs load from there)",
        show=False, where="Runs"),
]
ANALYSIS_KEYS = [
    Key("w", None, "app.sweep", "Sweep", "run a scaling sweep of the network in the editor (enter in a field does "
        "too)", where="Analysis"),
    # (a text field leaves these keys to the view, so the results below the fold scroll from the form too)
    Key("pagedown", None, "scroll_results(1)", "", "scroll the results below the form down a page",
        show=False, where="Analysis"),
    Key("pageup", None, "scroll_results(-1)", "", "scroll the results up a page", show=False, where="Analysis"),
]
ALL_KEYS = APP_KEYS + MODEL_KEYS + TRAIN_KEYS + RUNS_KEYS + ANALYSIS_KEYS
OTHER_KEYS = [("ctrl+p", "command palette: every action by name"),
              ("tab / shift+tab", "next / previous field")]


def bindings(keys: list[Key]) -> list[Binding]:
    return [b for k in keys for b in k.bindings()]


def show_key(key: str | None) -> str:
    """A key as the help and README write it: ``F6``, ``ctrl+b``, ``?``."""
    if not key:
        return ""
    names = {"question_mark": "?", "escape": "Escape", "space": "space", "enter": "Enter", "shift+up": "shift+↑",
             "shift+down": "shift+↓", "home": "Home", "end": "End",
             "pagedown": "PageDown", "pageup": "PageUp"}
    if key in names:
        return names[key]
    return key.upper() if key[0] == "f" and key[1:].isdigit() else key


def key_rows() -> list[tuple[str, str, str]]:
    """(plain key, key that works everywhere, what it does) for the help screen and the README; the five view
    keys fold into one row."""
    views = APP_KEYS[:len(TABS)]
    rows = [(f"{views[0].plain} … {views[-1].plain}", f"{show_key(views[0].anywhere)} … "
             f"{show_key(views[-1].anywhere)}", "the views: " + ", ".join(TAB_TITLES))]
    for k in APP_KEYS[len(TABS):]:
        rows.append((show_key(k.plain), show_key(k.anywhere), k.does))
    for key, does in OTHER_KEYS:
        rows.append(("", key, does))
    for k in MODEL_KEYS + TRAIN_KEYS + RUNS_KEYS + ANALYSIS_KEYS:
        rows.append((show_key(k.plain), "", f"{k.where} view: {k.does}"))
    return rows


def key_table_markdown() -> str:
    """The key table as Markdown, as the README and the help screen show it."""
    lines = ["| key | anywhere | does |", "|---|---|---|"]
    for plain, anywhere, does in key_rows():
        cell = lambda k: f"`{k}`" if k else ""  # noqa: E731
        lines.append(f"| {cell(plain)} | {cell(anywhere)} | {does} |")
    return "\n".join(lines)
