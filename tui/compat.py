"""Fixes for bugs in the Textual release layerlab pins (pyproject.toml), each with the failure it prevents.
Imported by the app before anything is built; each can go when Textual fixes it."""
from __future__ import annotations

from textual import events, work
from textual.command import CommandPalette
from textual.css.query import NoMatches
from textual.widget import Widget
from textual.widgets import Input, OptionList

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


# -- keys typed faster than the app handles them -------------------------------------------------------------------
# Textual hands each key to the focused widget's queue as it arrives. A text field inserts a printable key there
# and then, but resolves a key with a binding (backspace, ctrl+u, Enter, Tab, Escape) only once the key has bubbled
# up every ancestor's queue to the app. Keys that come in one burst (typed fast, or a clear followed by a paste)
# were then applied out of order: backspace x 4 then "5000" left "500", ctrl+u then a paste left the field empty.
# And keys handed to a widget that an earlier key of the burst moved the focus away from went to the old widget;
# Tab, the screen's binding, moved the focus only once it reached the app, after the keys typed behind it.

_dispatch_message = Widget._dispatch_message
_FOCUS_KEYS = {"tab": "focus_next", "shift+tab": "focus_previous"}


def _moves_focus_here(widget: Widget, key: str) -> bool:
    """Whether Tab (or shift+tab) at this widget would do nothing but the screen's focus move: no widget from it
    up to the screen binds the key to anything else, and the app holds no priority binding for it."""
    want = f"app.{_FOCUS_KEYS[key]}"
    for node in widget.ancestors_with_self:
        if node is widget.app:
            return not any(b.priority for b in node._bindings.key_to_bindings.get(key, ()))
        if any(b.action != want for b in node._bindings.key_to_bindings.get(key, ())):
            return False
    return False


async def _dispatch_to_focus(self: Widget, message) -> None:
    """A key handed to this widget as the focus, handled where the focus is now: an earlier key of the same burst
    (Tab, Enter, Escape) may have moved it since. Tab itself moves the focus here, before the next key is handed
    on, where the screen's binding is all it would do."""
    if isinstance(message, events.Key) and message.is_forwarded and getattr(message, "_to_focus", None) is self:
        focused = self.app.focused
        if focused is self and message.key in _FOCUS_KEYS and self.screen is self.app.screen \
                and _moves_focus_here(self, message.key):
            getattr(self.screen, _FOCUS_KEYS[message.key])()
            return
        if focused is not self and self.is_attached:
            again = events.Key(message.key, message.character)
            again._to_focus = focused
            (focused or self.app.screen)._forward_event(again)
            return
    await _dispatch_message(self, message)


_forward_event = Widget._forward_event


def _forward_marked(self: Widget, event) -> None:
    if isinstance(event, events.Key) and self.app.focused is self:
        event._to_focus = self  # (see _dispatch_to_focus)
    _forward_event(self, event)


Widget._dispatch_message = _dispatch_to_focus
Widget._forward_event = _forward_marked

_input_key = Input._on_key


async def _input_key_in_order(self: Input, event: events.Key) -> None:
    """A key bound by the text field itself (backspace, ctrl+u, the cursor keys, Enter), resolved here, in the order
    keys were typed, as the app would resolve it after the key's bubbling; other keys as before. (Only the field's
    own actions: an app's action run from inside the field's handler could wait on the field's own queue.)"""
    if not event.is_printable and self.app.focused is self:
        for binding in self._bindings.key_to_bindings.get(event.key, ()):
            if not binding.priority and await self.app.run_action(binding.action, self):
                event.stop()
                event.prevent_default()
                return
    await _input_key(self, event)


Input._on_key = _input_key_in_order
