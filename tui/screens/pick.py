"""Small modal questions: pick one of a few choices (a layer's type), or confirm (overwrite a file)."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label, OptionList

from tui.guard import Guarded
from tui.widgets.keybar import KeyBar


class PickScreen(Guarded, ModalScreen[str | None]):
    """A list of choices; Enter picks the highlighted one, Escape picks none."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="cancel_pick")]

    def __init__(self, title: str, choices: list[str]) -> None:
        super().__init__()
        self.title_text, self.choices = title, choices

    def compose(self) -> ComposeResult:
        with Vertical(id="pick-box", classes="dialog"):
            yield Label(self.title_text, markup=False)
            yield OptionList(*self.choices, id="pick-list")
            yield Label("enter to choose · escape to cancel", classes="hint")
        yield KeyBar()  # the dialog's own keys, over the view's (typed letters do not act here)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.choices[event.option_index])

    def action_cancel(self) -> None:
        self.dismiss(None)


class ConfirmScreen(Guarded, ModalScreen[bool]):
    """A yes/no question: y or Enter on Yes confirms; n, Escape or No declines."""

    BINDINGS = [Binding("y", "answer(True)", "Yes", id="yes"), Binding("n,escape", "answer(False)", "No", id="no")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box", classes="dialog"):
            yield Label(self.question, markup=False, id="confirm-question")
            with Horizontal(id="confirm-buttons"):
                yield Button("Yes (y)", id="yes", variant="warning", compact=True)
                yield Button("No (n)", id="no", compact=True)
        yield KeyBar()  # the dialog's own keys, over the view's (typed letters do not act here)

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
