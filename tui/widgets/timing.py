"""Per-layer timing bars (ms per step, share of the step, GFLOP/s, forward and backward bars) from an epoch's
timings, and per-rank bars (computing and communicating) for distributed runs. The numbers come first and the
bars take what width is left, so a narrow terminal loses bar length, never a figure."""
from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

NO_TIMINGS = "per-part timings arrive at the end of the first epoch (synced steps; see the help)"


def _bar(parts: list[tuple[float, str]], width: int) -> Text:
    """Segments of one bar, ``(fraction of width, style)`` each, padded with dots to ``width``."""
    out, used = Text(), 0
    for frac, style in parts:
        n = max(0, min(width - used, int(round(width * frac))))
        out += Text("█" * n, style=style)
        used += n
    return out + Text("·" * (width - used), style="dim")


class TimingBars(Static):
    """Fed the ``timings`` list of an epoch_end event (dicts); shows one row per part of the step."""

    DEFAULT_CSS = "TimingBars { height: auto; }"

    def __init__(self, **kwargs):
        super().__init__(NO_TIMINGS, markup=False, **kwargs)
        self.timings: list[dict] = []
        self.compact = False  # one line: the parts that take longest, with their ms (a short terminal)

    def clear(self) -> None:
        self.timings = []
        self.update(NO_TIMINGS)

    def show(self, timings: list[dict]) -> None:
        self.timings = list(timings)
        self._show()

    def set_compact(self, compact: bool) -> None:
        if compact != self.compact:
            self.compact = compact
            self._show()

    def _show(self) -> None:
        if self.timings:
            self.update(self._line() if self.compact else self._table())
        else:
            self.update(NO_TIMINGS)

    def on_resize(self) -> None:
        if self.timings:
            self._show()

    def _line(self) -> str:
        """The parts by time per step, longest first, as many as fit on one line."""
        parts = sorted(self.timings, key=lambda t: -(t["fwd_ms"] + t["bwd_ms"]))
        width = self.size.width or 50
        out = "ms/step"
        for i, t in enumerate(parts):
            item = f"{' ·' if i else ''} {t['name'].replace('layer ', '')} {t['fwd_ms'] + t['bwd_ms']:.3f}"
            if len(out) + len(item) + 2 > width:
                return out + " …"
            out += item
        return out

    def _table(self) -> Table:
        names = [t["name"].replace("layer ", "") for t in self.timings]
        fixed = max(map(len, names), default=4) + 9 + 7 + 8 + 5  # part, ms, share, GFLOP/s and the gaps
        width = max(4, min(30, self.size.width - fixed - 1)) if self.size.width else 18
        table = Table(box=None, padding=(0, 1), expand=False, show_edge=False)
        for col, justify in (("part", "left"), ("ms/step", "right"), ("share", "right"), ("GFLOP/s", "right"),
                             ("fwd|bwd", "left")):
            table.add_column(col, justify=justify, no_wrap=True)
        total = max(sum(t["fwd_ms"] + t["bwd_ms"] for t in self.timings), 1e-12)
        for name, t in zip(names, self.timings):
            bar = _bar([(t["fwd_ms"] / total, "green"), (t["bwd_ms"] / total, "magenta")], width)
            gf = f"{t['gflops']:.2f}" if t["gflops"] else ""
            table.add_row(name, f"{t['fwd_ms'] + t['bwd_ms']:.3f}", f"{100 * t['share']:.1f}%", gf, bar)
        return table


class RankBars(Static):
    """Fed the ``ranks`` list of a distributed run's epoch_end: each rank's epoch split into computing and
    communicating (the gradient all-reduce, its host copies and waiting for slower ranks). Empty otherwise."""

    DEFAULT_CSS = "RankBars { height: auto; }"

    def __init__(self, **kwargs):
        super().__init__("", markup=False, **kwargs)
        self.ranks: list[dict] = []
        self.share: float | None = None

    def clear(self) -> None:
        self.ranks, self.share = [], None
        self.update("")

    def show(self, ranks: list[dict], share: float | None) -> None:
        self.ranks, self.share = list(ranks), share
        width = 12
        table = Table(box=None, padding=(0, 1), expand=False, show_edge=False,
                      title=f"ranks: {100 * (share or 0):.1f}% of their time communicating", title_justify="left")
        for col, justify in (("rank", "left"), ("epoch s", "right"), ("comm", "right"), ("samples", "right"),
                             ("compute|comm", "left")):
            table.add_column(col, justify=justify, no_wrap=True, min_width=max(len(col), 6 if col == "comm" else 0))
        table.add_column("on", no_wrap=True, overflow="ellipsis", max_width=20)
        one_host = len({r["host"] for r in ranks}) == 1
        longest = max(max(r["epoch_s"] for r in ranks), 1e-12)
        for r in ranks:
            comm = r["comm_s"] / longest
            bar = _bar([(r["epoch_s"] / longest - comm, "green"), (comm, "red")], width)
            table.add_row(str(r["rank"]), f"{r['epoch_s']:.3f}", f"{100 * r['comm_s'] / max(r['epoch_s'], 1e-12):.1f}%",
                          f"{r['samples']:,}", bar, r["device"] if one_host else f"{r['host']}: {r['device']}")
        self.update(table)
