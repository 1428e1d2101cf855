"""The Runs view: every run in the run store, newest first (this session's and earlier ones, from the app and
the command line), loaded a page at a time as the cursor goes down. The selected run's curves show below;
runs marked with space are overlaid instead. Rerun, delete and export act on the marked runs or the selected one.

The table fits the terminal's width: a narrow one hides the least useful columns and cuts long network names,
and a line under the table gives the selected run's hidden values in full; w shows every column whole instead,
the table scrolled sideways.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from rich.cells import cell_len
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import DataTable, Static
from textual.widgets.data_table import Column

from nncore.charts import Curves, draw_accuracy, draw_loss
from nncore.report import cut_name, short_arch
from nncore.store import StoreError
from tui.guard import Guarded
from tui.keys import RUNS_KEYS, bindings
from tui.state import HEADERS, MEANING, STORE_COLUMNS, store_rows
from tui.widgets.charts import Chart

PAGE = 100  # runs read from the store at a time
LEGEND = " · ".join(f"{HEADERS.get(k, k)}: {v}" for k, v in MEANING.items() if k in
                    ("samples_per_s", "speedup", "test_acc"))
NO_CURVES = "select a run to see its curves; mark two or more with space to overlay them"
NO_RUNS_CURVES = "a training run's loss and accuracy curves appear here"  # (the hint above says there are none)


class _NameCell(Text):
    """A network's name in its cell, cut to the cell's width as cut_name cuts it (" (edited)" kept whole)."""

    def __rich_console__(self, console, options):
        if cell_len(self.plain) > options.max_width:
            yield from Text(cut_name(self.plain, options.max_width), no_wrap=True).__rich_console__(console, options)
        else:
            yield from super().__rich_console__(console, options)


def _cell(key: str, value) -> str:
    if value is None:
        return "—"
    if key == "test_acc":
        return f"{value:.4f}"
    if key == "s_per_epoch":  # (two significant digits under 0.1 s: a fast run's epochs are not "0.00")
        return f"{value:.2f}" if value >= 0.1 else f"{value:.2g}"
    if key == "samples_per_s":
        return f"{value:,.0f}"
    if key == "arch":  # a sweep's list of archs, short enough to leave the columns after it in view
        return short_arch(value)
    if key == "speedup":
        return f"{value:.2f}x" if isinstance(value, float) else str(value)  # (the base run: "base")
    return str(value)


def _detail(row: dict, hidden: set[str], cut: dict[str, int], width: int = 0) -> str:
    """A run's values that the table hides (``hidden`` columns) or cuts (``cut``: column widths), for the line
    under the table; "" where the table shows the run whole. With a ``width``, broken into lines of at most that
    many cells between values, never inside one ("0.01 s/epoch" stays on one line)."""
    said = {"network": lambda v: v, "arch": lambda v: v, "kind": lambda v: v, "data": lambda v: f"data {v}",
            "started": lambda v: f"started {v}",
            "batch": lambda v: f"batch {v}", "epochs": lambda v: f"{v} ep", "threads": lambda v: f"{v} thr",
            "ranks": lambda v: f"{v} rank" + ("s" if v != 1 else ""),
            "s_per_epoch": lambda v: f"{_cell('s_per_epoch', v)} s/epoch"}
    keys = {*hidden, *(k for k, width in cut.items() if cell_len(_cell(k, row[k])) > width)}
    parts = [said[k](row[k]) if k in said else f"{HEADERS.get(k, k)} {_cell(k, row[k])}"
             for k in dict.fromkeys([*said, *STORE_COLUMNS]) if k in keys and row.get(k) is not None]
    if not parts:
        return ""
    lines = [f"#{row['id']}: {parts[0]}"]
    for i, part in enumerate(parts[1:], 2):
        comma = int(i < len(parts))  # (the "," after it, where a value follows)
        if width and cell_len(lines[-1]) + 2 + cell_len(part) + comma > width:
            lines[-1] += ","
            lines.append(part)
        else:
            lines[-1] += f", {part}"
    return "\n".join(lines)


# Hidden where the terminal is too narrow for every column, the least useful first (ranks is 1 but for MPI runs,
# s/epoch follows from samples/s and the batch), when the run started last.
HIDE_ORDER = ["ranks", "threads", "s_per_epoch", "kind", "epochs", "data", "batch", "started"]
NET_CUT = 16  # a long network name is cut to this width (or more, where there is room) before columns are hidden
NARROWEST = {"network": 8, "arch": 12}  # cut to at most, all columns hidden: "quadrant", "cpu-parallel" stay whole


def _no_curves(row: dict) -> str:
    """Why a sweep or benchmark shows no curves, where its points are, and for one stopped part-way how many it
    kept (the command on a line of its own: split across lines, it read as two words)."""
    stopped = row.get("stopped")  # (tui.state.store_rows)
    kept = f" stopped after {stopped['points']} of {stopped['of']} points" if isinstance(stopped, dict) else ""
    return f"run #{row['id']} is a {row['kind']}{kept}: its points are in\n`layerlab runs show {row['id']}`"


@dataclass
class _Column(Column):
    """A column the table can hide: it then takes no width, its padding included."""
    hidden: bool = False

    def get_render_width(self, data_table) -> int:
        return 0 if self.hidden else super().get_render_width(data_table)


def fit_columns(natural: dict[str, int], budget: int, pad: int) -> tuple[set[str], dict[str, int]]:
    """The columns to hide and the cut widths of the others (``natural``: each column's widest cell or header),
    so that the table fits ``budget`` cells: long network names are cut to NET_CUT, then columns are hidden in
    HIDE_ORDER, then the network and arch columns are cut down to NARROWEST; past that the table scrolls."""
    hidden: set[str] = set()
    for key in [None, *HIDE_ORDER]:
        if key in natural:
            hidden.add(key)
        room = budget - sum(w + 2 * pad for k, w in natural.items() if k not in hidden and k != "network") - 2 * pad
        if room >= natural["network"]:
            return hidden, {}
        if room >= NET_CUT:
            return hidden, {"network": room}
    net = max(room, min(NARROWEST["network"], natural["network"]))
    short = net - room  # what the arch column has to give up
    arch = max(natural["arch"] - short, min(NARROWEST["arch"], natural["arch"]))
    return hidden, {"network": net, **({"arch": arch} if arch < natural["arch"] else {})}


class RunsTable(DataTable):
    BINDINGS = bindings(RUNS_KEYS)

    class Fitted(Message):
        """The columns shown changed (the terminal was resized, runs came in)."""

    hidden: set[str] = set()
    cut: dict[str, int] = {}
    every = False  # every column at its width, the table scrolled sideways (w), instead of fitted to the width

    def add_column(self, label, *, width=None, key=None, default=None):
        """DataTable.add_column, the column made one that can be hidden."""
        column_key = super().add_column(label, width=width, key=key, default=default)
        column = self.columns[column_key]
        self.columns[column_key] = _Column(**{f.name: getattr(column, f.name) for f in fields(Column)})
        return column_key

    def on_resize(self, event: events.Resize) -> None:
        self.fit()

    def fit(self) -> None:
        """Hide and cut columns so that the table fits its width (a vertical scrollbar's included, so that one
        showing up with more runs never brings in a horizontal one)."""
        budget = self.size.width - self.styles.scrollbar_size_vertical
        if budget <= 0:  # not laid out yet (another view is showing): fitted when it is
            return
        natural = {c.key.value: max([cell_len(c.label.plain), *(cell_len(str(v)) for v in self.get_column(c.key))])
                   for c in self.ordered_columns}
        hidden, cut = (set(), {}) if self.every else fit_columns(natural, budget, self.cell_padding)
        changed = hidden != self.hidden or cut != self.cut
        for column in self.ordered_columns:
            key = column.key.value
            width = cut.get(key, natural[key])
            if column.hidden != (key in hidden) or column.auto_width or column.width != width:
                column.hidden, column.auto_width, column.width = key in hidden, False, width
                changed = True
        if changed:
            self.hidden, self.cut = hidden, cut
            # What DataTable.add_column does after a change of width: its caches and scrollable size go stale.
            self._update_count += 1
            self._require_update_dimensions = True
            self.check_idle()
            self.refresh()
            self.post_message(self.Fitted())

    def action_cursor_right(self) -> None:
        self._by_column(1)

    def action_cursor_left(self) -> None:
        self._by_column(-1)

    def _by_column(self, step: int) -> None:
        """← and → scroll the rows sideways a column at a time (a row table scrolled a cell per key)."""
        edges, x = [0], 0
        for column in self.ordered_columns:
            x += column.get_render_width(self)
            edges.append(x)
        at = round(self.scroll_x)
        to = next((e for e in edges if e > at), at) if step > 0 else next((e for e in reversed(edges) if e < at), 0)
        self.scroll_to(x=to, animate=False)

    def action_toggle_columns(self) -> None:
        if not self.every and not self.hidden and not self.cut:
            self.notify("every column is shown whole already", timeout=4)
            return
        self.every = not self.every
        if not self.every:
            self.scroll_to(x=0, animate=False)
        self.fit()


class RunsPane(Guarded, Vertical):
    store = None
    rows: list[dict] = []
    total = 0
    note = ""  # why there is no history, where the store cannot be used
    damaged: list = []  # the runs left out as damaged (nncore.store.DamagedRun), newest first
    paused_pid: int | None = None  # the process recording this app's run while it is paused (tui.state.store_rows)

    def compose(self) -> ComposeResult:
        yield RunsTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        yield Static("", id="runs-detail", markup=False)
        yield Static("no runs yet: start one with s (F6)", id="runs-hint", markup=False)
        with Horizontal(id="runs-charts"):
            yield Chart(draw_loss, NO_CURVES, id="runs-loss")
            yield Chart(draw_accuracy, "", id="runs-acc")
        yield Static(LEGEND, id="runs-legend", markup=False)

    def on_mount(self) -> None:
        self.marked: list[int] = []  # run ids, in the order marked (the overlay's colours follow it)
        self.rows = []
        table = self.query_one(DataTable)
        for c in STORE_COLUMNS:
            table.add_column(HEADERS.get(c, c), key=c)

    # -- reading the store ----------------------------------------------------------------------------------------
    def load(self, store, note: str = "") -> None:
        """Read the runs again (after a run's epoch, a delete): as many as were shown, at least a page."""
        self.store, self.note = store, note
        self._read(max(PAGE, len(self.rows)))

    def _read(self, limit: int) -> None:
        damaged = []
        try:
            rows, total = self.store.runs(limit=limit, damaged=damaged), self.store.count()
        except StoreError as exc:
            self.query_one("#runs-hint", Static).update(f"✗ {exc}")
            return
        self.damaged = damaged
        table = self.query_one(DataTable)
        keep = self.selected_id()
        # At the top row the view follows the newest run (a run just started goes in above it); elsewhere the
        # selected run stays selected.
        at_top = table.row_count == 0 or table.cursor_row <= 0
        # (the damaged runs read so far are not counted: "more load as you go down" would never end)
        self.rows, self.total = store_rows(rows, self.marked, self.paused_pid), total - len(damaged)
        # Text, not markup (a network's name is shown as written), cut with an ellipsis where the column is cut.
        cells = [[(_NameCell if c == "network" else Text)(_cell(c, r[c]), no_wrap=True, overflow="ellipsis")
                  for c in STORE_COLUMNS] for r in self.rows]
        if table.row_count == len(cells) and all(
                str(table.get_row_at(i)[1]) == str(row[1]) for i, row in enumerate(cells)):
            for i, row in enumerate(cells):  # the same runs: only changed cells are written
                for col, (old, new) in enumerate(zip(table.get_row_at(i), row)):
                    if str(old) != str(new):
                        table.update_cell_at((i, col), new, update_width=True)
        else:
            table.clear()
            for row in cells:
                table.add_row(*row, key=str(row[1]))
            ids = [r["id"] for r in self.rows]
            if keep in ids and not at_top:
                table.move_cursor(row=ids.index(keep), animate=False)
            else:
                table.move_cursor(row=0, animate=False)
                table.scroll_home(animate=False)
        table.fit()
        self._hint()
        self._detail()
        self.show_curves()

    def _hint(self) -> None:
        if not self.rows:
            text = "no runs yet: start one with s (F6)"
        else:
            more = " (more load as you go down)" if len(self.rows) < self.total else ""
            marked = f" · {len(self.marked)} marked" if self.marked else ""
            table = self.query_one(RunsTable)
            # (short: at 80 columns the line fits with them)
            columns = " · w: columns" if table.hidden or table.cut else " · w: fit" if table.every else ""
            text = (f"runs 1–{len(self.rows)} of {self.total:,}{more}{marked} · space: mark · r: rerun · "
                    f"d: delete · e: export{columns}")
        if self.damaged:
            more = f" (and {len(self.damaged) - 1} more)" if len(self.damaged) > 1 else ""
            text = f"✗ {self.damaged[0]}; not shown{more}\n{text}"
        if self.note:
            text = f"{self.note}\n{text}"
        self.query_one("#runs-hint", Static).update(text)

    def _detail(self) -> None:
        """The selected run's values that the table does not show whole, on the line under it (no line where it
        shows the run whole)."""
        table, line = self.query_one(RunsTable), self.query_one("#runs-detail", Static)
        row = next((r for r in self.rows if r["id"] == self.selected_id()), None)
        text = _detail(row, table.hidden, table.cut, line.size.width or table.size.width) if row else ""
        line.display = bool(text)
        line.update(text)

    def on_runs_table_fitted(self, event: RunsTable.Fitted) -> None:
        self._hint()
        self._detail()

    def on_resize(self, event: events.Resize) -> None:
        self._detail()  # (its lines are broken to the width)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._detail()
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
            loss.clear(_no_curves(what[0]) if what else NO_CURVES if self.rows else NO_RUNS_CURVES)
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
            run = runs[0] if single else None
            # A run that ended before its first epoch (refused, failed, stopped early): why, not "yet".
            if run is not None and run.get("error"):
                text = f"run #{run['id']} {run['status']} before its first epoch: {run['error']}"
            elif run is not None and run.get("status") != "running":  # (stopped by hand: no reason recorded)
                text = (f"run #{run['id']} {run['status']} before its first epoch ended: no curves (steps are "
                        "recorded with each finished epoch)")
            else:
                text = f"run #{chosen[0]['id']}: no curves yet (steps are recorded with each finished epoch)"
            loss.clear(text)
            acc.clear()
            return
        loss.show(curves, now=True)
        acc.show(curves, now=True)
