"""Fixes for bugs in the Textual release layerlab pins (pyproject.toml), each with the failure it prevents.
Imported by the app before anything is built; each can go when Textual fixes it."""
from __future__ import annotations

from textual import work
from textual.command import CommandPalette
from textual.css.query import NoMatches
from textual.widgets import OptionList

_move_page = OptionList._move_page


def _move_page_when_laid_out(self: OptionList, direction) -> None:
    """Page up/down in an OptionList whose lines are not laid out yet (the command palette opened and paged at
    once) raised KeyError from Textual's own handler; do nothing instead, as scroll_to_highlight does."""
    try:
        _move_page(self, direction)
    except KeyError:
        pass


OptionList._move_page = _move_page_when_laid_out


_dismiss = CommandPalette.dismiss


def _dismiss_once(self: CommandPalette, result=None):
    """Enter pressed twice in the command palette reached it after its first dismiss, and the second popped the
    app's own screen (ScreenStackError); a palette that is no longer on top is left alone."""
    if self.app.screen is not self:
        return None
    return _dismiss(self, result)


CommandPalette.dismiss = _dismiss_once


_gather = CommandPalette._gather_commands.__wrapped__


@work(exclusive=True, group=CommandPalette._GATHER_COMMANDS_GROUP)
async def _gather_while_open(self: CommandPalette, search_value: str) -> None:
    """A search started by the last key typed into the palette ran after the palette closed, found none of its
    widgets (NoMatches) and failed its worker; a closed palette has nothing to search for."""
    try:
        await _gather(self, search_value)
    except NoMatches:
        if self.is_attached and self.app.screen is self:
            raise


CommandPalette._gather_commands = _gather_while_open
