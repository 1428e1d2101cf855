"""The footer: the keys that act where the focus is, one line of text.

It shows what Textual's Footer shows (the first active binding of each action, a disabled one dimmed, the
command palette's key on the right) but draws it as one Text instead of a widget per key, which Textual's
Footer rebuilds at every focus change (a large share of a view switch's time). A click on a key presses it.
"""
from __future__ import annotations

from rich.text import Text
from textual import events
from textual.widgets import Static


class KeyBar(Static):
    COMPONENT_CLASSES = {"keybar--key"}
    DEFAULT_CSS = """
    KeyBar {
        dock: bottom;
        height: 1;
        background: $footer-background;
        color: $footer-description-foreground;
        & > .keybar--key {
            color: $footer-key-foreground;
            text-style: bold;
        }
    }
    """

    def __init__(self, **kwargs):
        super().__init__("", markup=False, **kwargs)
        self.spans: list[tuple[int, int, str]] = []  # (start, end, key) of each key shown, for clicks

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)
        self.call_after_refresh(self._show)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen) -> None:
        if self.is_attached and screen is self.screen:
            self.call_after_refresh(self._show)

    def _show(self) -> None:
        if not self.is_attached:
            return
        app = self.app
        active = self.screen.active_bindings
        first: dict[str, tuple] = {}  # action -> (binding, enabled), the first active binding of each
        for _, binding, enabled, _tooltip in active.values():
            if binding.show and binding.action not in first:
                first[binding.action] = (binding, enabled)
        if "quit" in first:  # last, where people look for it
            first["quit"] = first.pop("quit")
        palette = active.get(app.COMMAND_PALETTE_BINDING)
        palette = palette[1] if palette is not None else None
        label = getattr(app, "key_label", None) or (lambda _action, text: text)  # the app may reword a key
        key_style = self.get_component_rich_style("keybar--key")
        text, self.spans = Text(), []
        for binding, enabled in first.values():
            start = len(text)
            text.append(f" {app.get_key_display(binding)} ", style=key_style if enabled else "dim")
            text.append(f"{label(binding.action, binding.description)} ", style="" if enabled else "dim")
            self.spans.append((start, len(text), binding.key))
        if palette is not None and app.ENABLE_COMMAND_PALETTE:
            tail = f"{app.get_key_display(palette)} palette "
            width = self.size.width or 80
            text.append(" " * max(1, width - len(text) - len(tail)))
            self.spans.append((len(text), len(text) + len(tail), palette.key))
            text.append(tail)
        self.update(text)

    def on_click(self, event: events.Click) -> None:
        for start, end, key in self.spans:
            if start <= event.x < end:
                self.app.simulate_key(key)
                return

    def on_resize(self) -> None:
        self._show()
