"""A one-field prompt for a file path (open or save a config, export the runs). A bad path is answered in place;
saving over an existing file asks first. The path comes back absolute."""
from __future__ import annotations

import os
from pathlib import Path

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label

from nncore.errors import DataError
from nncore.limits import regular_file
from tui.guard import Guarded
from tui.widgets.keybar import KeyBar
from tui.screens.pick import ConfirmScreen


def problem_with(path: Path, must_exist: bool, suffixes: tuple[str, ...], make_dir: Path | None,
                 what: str = "file") -> str | None:
    """Why ``path`` cannot be opened (``must_exist``; ``what`` it should be) or written, or None. ``make_dir``
    may be created."""
    if path.is_dir():
        return f"{path} is a directory; give a file name"
    if must_exist:  # (missing, or a device or FIFO: in the command line's words)
        try:
            regular_file(path, what)
        except DataError as err:
            return str(err)
        return None
    if suffixes and path.suffix.lower() not in suffixes:
        return f"end the file name with {' or '.join(suffixes)}"
    parent = path.parent
    if not parent.is_dir() and parent != make_dir:
        return f"{parent}: no such directory"
    if parent.is_dir() and not os.access(parent, os.W_OK):
        return f"{parent}: not writable"
    return None


class PathScreen(Guarded, ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="cancel_path")]

    def __init__(self, title: str, value: str = "", must_exist: bool = False, suffixes: tuple[str, ...] = (),
                 make_dir: Path | None = None, check=None, names: dict[str, Path] | None = None,
                 what: str = "file") -> None:
        """``check(path)``: a further reason to refuse the path (a config that does not open), or None.
        ``names``: names taken as they are where no such file exists (the presets, as the CLI takes them),
        typed alone or after the directory the prompt starts in."""
        super().__init__()
        self.title_text, self.value, self.must_exist = title, value, must_exist
        self.suffixes, self.make_dir, self.check = suffixes, make_dir, check
        self.names, self.what = names or {}, what

    def compose(self) -> ComposeResult:
        with Vertical(id="path-box", classes="dialog"):
            yield Label(self.title_text, markup=False)
            yield Input(self.value, id="path-input", select_on_focus=False)
            yield Label("enter to confirm · escape to cancel", classes="hint", id="path-hint", markup=False)
        yield KeyBar()  # the dialog's own keys, over the view's (typed letters do not act here)

    def on_mount(self) -> None:
        field = self.query_one("#path-input", Input)
        field.cursor_position = len(field.value)  # the file name's end (its suffix) in view, ready to edit

    def on_key(self, event: events.Key) -> None:
        """A character typed before the field has focus goes into the field. Textual hands the dialog its keys
        as soon as it is pushed but focuses the field only once the dialog is shown, which a busy app (a run's
        events arriving) delays: a name typed right after ctrl+o lost its first letter."""
        field = self.query_one_optional("#path-input", Input)
        if field is not None and self.focused is None and event.is_printable and event.character:
            event.stop()
            event.prevent_default()
            field.focus()
            field.insert_text_at_cursor(event.character)

    def _say(self, text: str) -> None:
        hint = self.query_one("#path-hint", Label)
        hint.update(f"✗ {text}")
        hint.add_class("error")
        self.query_one("#path-input", Input).add_class("error")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            self._say("give a file name")
            return
        path = self._resolve(text)
        named = self._named(text, path)
        if named is not None:
            path = named
        problem = problem_with(path, self.must_exist, self.suffixes, self.make_dir, self.what)
        if problem is not None and self.names and not path.exists():
            problem += f", nor a preset ({', '.join(self.names)})"
        if problem is None and self.check is not None:
            problem = self.check(path)
        if problem:  # answered in place; the prompt stays open
            self._say(problem)
            return
        if self.must_exist or not path.exists():
            self.dismiss(str(path))
            return
        def answered(yes: bool) -> None:  # returns nothing: a returned dismiss() would be awaited here, an error
            if yes:
                self.dismiss(str(path))
            else:
                self._say("not overwritten; give another name")

        self.app.push_screen(ConfirmScreen(f"{path} exists. Overwrite it?"), answered)

    def _start(self) -> Path | None:
        """The directory the prompt started in."""
        start = Path(os.path.abspath(Path(self.value).expanduser())) if self.value else None
        if start is not None and not self.value.endswith(os.sep):
            start = start.parent  # the prompt started on a file: its directory
        return start

    def _resolve(self, text: str) -> Path:
        """The path typed: a relative one is taken in the directory the prompt started in (a bare name typed
        over the proposed path went to the app's working directory, unseen), or, to open a file that is not
        there, in the working directory, as a shell would take it. A path typed after the proposed one from / or
        ~/ (".../layerlab//dev/null", ".../layerlab/~/net.toml") is taken whole, as Emacs takes it."""
        at = max(text.rfind("//"), text.rfind("/~/"))
        if at >= 0:
            text = text[at + 1:]
        typed = Path(text).expanduser()
        start = self._start()
        if typed.is_absolute() or start is None:
            return Path(os.path.abspath(typed))
        there = Path(os.path.abspath(start / typed))
        here = Path(os.path.abspath(typed))
        return here if self.must_exist and not there.exists() and here.exists() else there

    def _named(self, text: str, path: Path) -> Path | None:
        """The file a name of ``names`` stands for, where ``text`` is such a name (alone, or after the directory
        the prompt started in) and no file of that path exists."""
        if path.exists():
            return None
        start = self._start()
        if text in self.names:
            return self.names[text]
        return self.names.get(path.name) if path.parent == start else None

    def action_cancel(self) -> None:
        self.dismiss(None)
