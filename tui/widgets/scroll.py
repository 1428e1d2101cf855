"""A vertical scroll whose scrollbar's thumb starts and ends on whole cells.

Textual draws a thumb's ends in eighths of a cell with block glyphs (▁ … ▇), half in the thumb's colour and
half in the track's. In a one-column scrollbar flush against a chart's frame, such an end reads as a stray
character at the chart's corner ("┘▇" in the Analysis view at 140x45). Whole cells leave the thumb a plain bar:
it moves a cell at a time instead of an eighth, which a scrollbar one column wide cannot show anyway.
"""
from __future__ import annotations

from textual.containers import VerticalScroll
from textual.scrollbar import ScrollBar, ScrollBarRender


class CellScrollBarRender(ScrollBarRender):
    """Textual's scrollbar, the partial-cell glyphs of the thumb's ends left out (a blank end glyph is skipped)."""

    VERTICAL_BARS = [" "] * len(ScrollBarRender.VERTICAL_BARS)
    HORIZONTAL_BARS = [" "] * len(ScrollBarRender.HORIZONTAL_BARS)


class ScrollStop:
    """A scroll container that is a Tab stop only where there is something to scroll (an empty stop showed
    nothing focused); a field inside that takes the focus is scrolled into view anyway."""

    def allow_focus(self) -> bool:
        return super().allow_focus() and (self.max_scroll_y > 0 or self.max_scroll_x > 0)


class CellScroll(ScrollStop, VerticalScroll):
    """VerticalScroll drawing its vertical scrollbar with :class:`CellScrollBarRender`."""

    @property
    def vertical_scrollbar(self) -> ScrollBar:
        bar = super().vertical_scrollbar  # (made on first use, as Textual makes it)
        bar.renderer = CellScrollBarRender  # (an instance's renderer, as Textual's ScrollBar documents)
        return bar
