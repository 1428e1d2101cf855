"""The Runs view: every run in the run store, newest first (this session's and earlier ones, from the app and
the command line), loaded a page at a time as the cursor goes down. The selected run's curves show below;
runs marked with space are overlaid instead. Rerun, delete and export act on the marked runs or the selected one.
"""
from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Static

from nncore.charts import Curves, draw_accuracy, draw_loss
from nncore.report import short_arch
from nncore.store import StoreError
from tui.guard import Guarded
from tui.keys import RUNS_KEYS, bindings
from tui.state import HEADERS, MEANING, STORE_COLUMNS, store_rows
from tui.widgets.charts import Chart

PAGE = 100  # runs read from the store at a time
LEGEND = " · ".join(f"{HEADERS.get(k, k)}: {v}" for k, v in MEANING.items() if k in
                    ("samples_per_s", "speedup", "test_acc"))
NO_CURVES = "select a run to see its curves; mark two or more with space to overlay them"


def _cell(key: str, value) -> str:
    if value is None:
        return "—"
    if key == "test_acc":
        return f"{value:.4f}"
    if key == "s_per_epoch":
        return f"{value:.2f}"
    if key == "samples_per_s":
        return f"{value:,.0f}"
    if key == "arch":  # a sweep's list of archs, short enough to leave the columns after it in view
        return short_arch(value)
    if key == "speedup":
        return f"{value:.2f}x" if isinstance(value, float) else str(value)  # (the base run: "base")
    return str(value)


class RunsTable(DataTable):
    BINDINGS = bindings(RUNS_KEYS)


class RunsPane(Guarded, Vertical):
    store = None
    rows: list[dict] = []
    total = 0
    note = ""  # why there is no history, where the store cannot be used

    def compose(self) -> ComposeResult:
        yield RunsTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        yield Static("no runs yet: start one with s (F6)", id="runs-hint", markup=False)
        with Horizontal(id="runs-charts"):
            yield Chart(draw_loss, NO_CURVES, id="runs-loss")
            yield Chart(draw_accuracy, "", id="runs-acc")
        yield Static(LEGEND, id="runs-legend", markup=False)

    def on_mount(self) -> None:
        self.marked: list[int] = []  # run ids, in the order marked (the overlay's colours follow it)
        self.rows = []
        self.query_one(DataTable).add_columns(*[HEADERS.get(c, c) for c in STORE_COLUMNS])

    # -- reading the store ----------------------------------------------------------------------------------------
    def load(self, store, note: str = "") -> None:
        """Read the runs again (after a run's epoch, a delete): as many as were shown, at least a page."""
        self.store, self.note = store, note
        self._read(max(PAGE, len(self.rows)))

    def _read(self, limit: int) -> None:
        try:
            rows, total = self.store.runs(limit=limit), self.store.count()
        except StoreError as exc:
            self.query_one("#runs-hint", Static).update(f"✗ {exc}")
            return
        table = self.query_one(DataTable)
        keep = self.selected_id()
        # At the top row the view follows the newest run (a run just started goes in above it); elsewhere the
        # selected run stays selected.
        at_top = table.row_count == 0 or table.cursor_row <= 0
        self.rows, self.total = store_rows(rows, self.marked), total
        cells = [[_cell(c, r[c]) for c in STORE_COLUMNS] for r in self.rows]
        if table.row_count == len(cells) and all(
                str(table.get_row_at(i)[1]) == row[1] for i, row in enumerate(cells)):
            for i, row in enumerate(cells):  # the same runs: only changed cells are written
                for col, (old, new) in enumerate(zip(table.get_row_at(i), row)):
                    if str(old) != new:
                        table.update_cell_at((i, col), new, update_width=True)
        else:
            table.clear()
            for row in cells:
                table.add_row(*row, key=row[1])
            ids = [r["id"] for r in self.rows]
            if keep in ids and not at_top:
                table.move_cursor(row=ids.index(keep), animate=False)
            else:
                table.move_cursor(row=0, animate=False)
                table.scroll_home(animate=False)
        self._hint()
        self.show_curves()

    def _hint(self) -> None:
        if not self.rows:
            text = "no runs yet: start one with s (F6)"
        else:
            more = " (more load as you go down)" if len(self.rows) < self.total else ""
            marked = f" · {len(self.marked)} marked" if self.marked else ""
            text = (f"runs 1–{len(self.rows)} of {self.total:,}{more}{marked} · space: mark · r: rerun · "
                    f"d: delete · e: export")
        if self.note:
            text = f"{self.note}\n{text}"
        self.query_one("#runs-hint", Static).update(text)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.cursor_row >= len(self.rows) - 1 and len(self.rows) < self.total:
            self._read(len(self.rows) + PAGE)  # (which shows the curves)
        elif not self.marked:
            self.show_curves()

    # -- selection and marks ----------------------------------------------------------------------------------------
    def selected_id(self) -> int | None:
        table = self.query_one(DataTable)
        if not self.rows or not 0 <= table.cursor_row < len(self.rows):
            return None
        return self.rows[table.cursor_row]["id"]

    def chosen(self) -> list[dict]:
        """The marked runs (those still listed), or else the selected one."""
        by_id = {r["id"]: r for r in self.rows}
        if self.marked:
            return [by_id[i] for i in self.marked if i in by_id]
        sel = self.selected_id()
        return [by_id[sel]] if sel is not None else []

    def toggle_mark(self) -> None:
        run_id = self.selected_id()
        if run_id is None:
            return
        if run_id in self.marked:
            self.marked.remove(run_id)
        else:
            self.marked.append(run_id)
        table = self.query_one(DataTable)
        table.update_cell_at((table.cursor_row, 0), "✓" if run_id in self.marked else "")
        self._hint()
        self.show_curves()

    def forget(self, ids: list[int]) -> None:
        self.marked = [i for i in self.marked if i not in ids]

    def show_curves(self) -> None:
        """The chosen runs' loss and accuracy curves (training runs only: a sweep has points, no curves)."""
        loss, acc = self.query_one("#runs-loss", Chart), self.query_one("#runs-acc", Chart)
        chosen = [r for r in self.chosen() if r["kind"] == "train"]
        if not chosen:
            what = self.chosen()
            loss.clear(f"run #{what[0]['id']} is a {what[0]['kind']}: its points are in `layerlab runs show "
                       f"{what[0]['id']}`" if what else NO_CURVES)
            acc.clear()
            return
        try:
            runs = [self.store.run(r["id"]) for r in chosen]
        except StoreError as exc:
            loss.clear(f"✗ {exc}")
            acc.clear()
            return
        single = len(runs) == 1
        curves = [Curves.from_run(r, f"#{r['id']}" if not single else None) for r in runs if r is not None]
        if not any(c.steps or c.epochs for c in curves):
            loss.clear(f"run #{chosen[0]['id']}: no curves yet (steps are recorded with each finished epoch)")
            acc.clear()
            return
        loss.show(curves, now=True)
        acc.show(curves, now=True)
