"""Per-layer timing bars (forward and backward ms, share of the step, GFLOP/s) from an epoch's timings, and
per-rank bars (computing and communicating) for distributed runs."""
from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.widgets import Static


class TimingBars(Static):
    """Fed the ``timings`` list of an epoch_end event (dicts); shows one bar per part of the step."""

    DEFAULT_CSS = "TimingBars { height: auto; }"

    def __init__(self, **kwargs):
        super().__init__("no timings yet: they arrive at the end of the first epoch", **kwargs)
        self.timings: list[dict] = []

    def show(self, timings: list[dict]) -> None:
        self.timings = list(timings)
        self.update(self._table())

    def _table(self) -> Table:
        width = 18
        table = Table(box=None, padding=(0, 1), expand=False, show_edge=False)
        for col, justify in (("part", "left"), ("fwd|bwd", "left"), ("ms", "right"), ("share", "right"),
                             ("GFLOP/s", "right")):
            table.add_column(col, justify=justify, no_wrap=True)
        total = max(sum(t["fwd_ms"] + t["bwd_ms"] for t in self.timings), 1e-12)
        for t in self.timings:
            f = int(round(width * t["fwd_ms"] / total))
            b = int(round(width * t["bwd_ms"] / total))
            bar = Text("█" * f, style="green") + Text("█" * b, style="magenta") + Text("·" * max(0, width - f - b),
                                                                                     style="dim")
            name = t["name"].replace("layer ", "")
            gf = f"{t['gflops']:.2f}" if t["gflops"] else ""
            table.add_row(name, bar, f"{t['fwd_ms'] + t['bwd_ms']:.3f}", f"{100 * t['share']:.1f}%", gf)
        return table


class RankBars(Static):
    """Fed the ``ranks`` list of a distributed run's epoch_end: each rank's epoch split into computing and
    communicating (the gradient all-reduce, its host copies and waiting for slower ranks). Empty otherwise."""

    DEFAULT_CSS = "RankBars { height: auto; }"

    def __init__(self, **kwargs):
        super().__init__("", **kwargs)
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
        for col, justify in (("rank", "left"), ("compute|comm", "left"), ("epoch s", "right"), ("comm", "right"),
                             ("samples", "right")):
            table.add_column(col, justify=justify, no_wrap=True, min_width=max(len(col), 6 if col == "comm" else 0))
        table.add_column("on", no_wrap=True, overflow="ellipsis", max_width=20)
        one_host = len({r["host"] for r in ranks}) == 1
        longest = max(max(r["epoch_s"] for r in ranks), 1e-12)
        for r in ranks:
            c = min(width, int(round(width * r["comm_s"] / longest)))
            w = max(0, min(width, int(round(width * r["epoch_s"] / longest))) - c)
            bar = Text("█" * w, style="green") + Text("█" * c, style="red") + Text("·" * max(0, width - w - c),
                                                                                  style="dim")
            table.add_row(str(r["rank"]), bar, f"{r['epoch_s']:.3f}",
                          f"{100 * r['comm_s'] / max(r['epoch_s'], 1e-12):.1f}%", f"{r['samples']:,}",
                          r["device"] if one_host else f"{r['host']}: {r['device']}")
        self.update(table)
