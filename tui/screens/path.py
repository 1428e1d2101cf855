"""A one-field prompt for a file path (save or open a config); a bad path is answered in place."""
from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label


class PathScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="cancel_path")]

    def __init__(self, title: str, value: str = "", must_exist: bool = False) -> None:
        super().__init__()
        self.title_text, self.value, self.must_exist = title, value, must_exist

    def compose(self) -> ComposeResult:
        with Vertical(id="path-box"):
            yield Label(self.title_text)
            yield Input(self.value, id="path-input")
            yield Label("enter to confirm · escape to cancel", classes="hint", id="path-hint")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        path = Path(event.value.strip()).expanduser()
        problem = None
        if not event.value.strip():
            problem = "give a file name"
        elif self.must_exist and not path.is_file():
            problem = f"{path}: no such file"
        elif not self.must_exist and not path.resolve().parent.is_dir():
            problem = f"{path.parent}: no such directory"
        if problem:  # answered in place; the prompt stays open
            hint = self.query_one("#path-hint", Label)
            hint.update(f"✗ {problem}")
            hint.add_class("error")
            event.input.add_class("error")
            return
        self.dismiss(str(path))

    def action_cancel(self) -> None:
        self.dismiss(None)
