"""Every finished, stopped or failed run, with its speedup over the cpu-serial run of the same network."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from tui.state import COLUMNS, RunRecord


HEADERS = {"threads": "thr", "epochs": "ep", "test_acc": "test acc", "s_per_epoch": "s/epoch",
           "samples_per_s": "samples/s"}


def _cell(key: str, value) -> str:
    if value is None:
        return "—"
    if key == "test_acc":
        return f"{value:.4f}"
    if key == "s_per_epoch":
        return f"{value:.2f}"
    if key == "samples_per_s":
        return f"{value:,.0f}"
    if key == "speedup":
        return f"{value:.2f}x"
    return str(value)


class RunsPane(Vertical):
    def compose(self) -> ComposeResult:
        yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        yield Static("r: rerun the selected run on the next backend · e: export CSV and JSON", id="runs-hint")

    def on_mount(self) -> None:
        self.query_one(DataTable).add_columns(*[HEADERS.get(c, c) for c in COLUMNS])

    def show(self, runs: list[RunRecord]) -> None:
        table = self.query_one(DataTable)
        row = table.cursor_row
        table.clear()
        for i, run in enumerate(runs):
            rec = run.row()
            table.add_row(*[_cell(c, rec[c]) for c in COLUMNS], key=str(i))
        if runs:
            table.move_cursor(row=min(max(row, 0), len(runs) - 1))

    def selected(self) -> int:
        return self.query_one(DataTable).cursor_row
