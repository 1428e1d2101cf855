"""Every run of the session, with its speedup over the cpu-serial run of the same network and batch size."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from tui.guard import Guarded
from tui.keys import RUNS_KEYS, bindings
from tui.state import COLUMNS, HEADERS, MEANING, RunRecord

LEGEND = " · ".join(f"{HEADERS.get(k, k)}: {v}" for k, v in MEANING.items() if k in
                    ("samples_per_s", "speedup", "test_acc", "s_per_epoch"))


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


class RunsTable(DataTable):
    BINDINGS = bindings(RUNS_KEYS)


class RunsPane(Guarded, Vertical):
    def compose(self) -> ComposeResult:
        yield RunsTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        yield Static("no runs yet: start one with s (F6)", id="runs-hint", markup=False)
        yield Static(LEGEND, id="runs-legend", markup=False)

    def on_mount(self) -> None:
        self.query_one(DataTable).add_columns(*[HEADERS.get(c, c) for c in COLUMNS])

    def show(self, runs: list[RunRecord]) -> None:
        """Bring the table up to date: new runs added, changed cells updated (a long session's table is not
        rebuilt at every epoch)."""
        table = self.query_one(DataTable)
        for i, run in enumerate(runs):
            rec = run.row()
            cells = [_cell(c, rec[c]) for c in COLUMNS]
            if i < table.row_count:
                for col, (old, new) in enumerate(zip(table.get_row_at(i), cells)):
                    if old != new:
                        table.update_cell_at((i, col), new, update_width=True)
            else:
                table.add_row(*cells, key=str(i))
        self.query_one("#runs-hint", Static).update(
            "r: rerun the selected run on the next backend · e: export as CSV or JSON" if runs else
            "no runs yet: start one with s (F6)")

    def selected(self) -> int:
        return self.query_one(DataTable).cursor_row
