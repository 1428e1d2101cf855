"""The Analysis view: run a scaling sweep of the network in the editor and see samples/s against batch size
per arch, per-layer time per arch, and the Amdahl view (see nncore.analysis for the definitions)."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, DataTable, Input, Label, ProgressBar, Static

from nncore.analysis import KF_ABOVE_1
from nncore.charts import draw_parts, draw_speedup, draw_throughput
from nncore.errors import ConfigError
from nncore.limits import ascii_int
from nncore.runtime import ARCHS, cpu_count
from tui.guard import Guarded
from tui.keys import ANALYSIS_KEYS, bindings
from tui.widgets.charts import Chart
from tui.widgets.scroll import CellScroll


def _ints(text: str, name: str) -> list[int]:
    """Comma-separated whole numbers from 1 up, as the CLI takes them (ASCII digits, 32 bits), each once."""
    parts = [v for v in text.replace(" ", "").split(",") if v]
    if not parts:
        raise ConfigError(f"{name}: give one or more whole numbers from 1 up", field=f"sweep-{name}")
    try:
        return list(dict.fromkeys(ascii_int(v, name, minimum=1) for v in parts))
    except ConfigError as err:
        raise ConfigError(str(err), field=f"sweep-{name}") from None


# The table's short headers, spelled out: "K-F" keeps the table within 80 columns.
TABLE_LEGEND = ("speedup: samples/s over cpu-serial's at the same batch · eff.: speedup per thread · "
                "K-F: Karp–Flatt serial fraction")

SYNCED_NOTE = ("Per-part times come from synced steps: each part is launched on its own and waited for, so each "
               "pays a launch and a sync (on cpu-parallel, a wake-up of the worker threads) that the measured step, "
               "one compute graph with no waits between parts, does not. Their sum can exceed the step time, and "
               "more so where launches cost more: compare parts within an arch, and archs by samples/s.")


def amdahl_text(a: dict | None) -> str:
    if not a:
        return "Amdahl: sweep cpu-serial to get the serial profile it is computed from."
    text = (f"Amdahl, from the cpu-serial profile: kernels {a['kernel_ms']:.2f} ms and host {a['host_ms']:.2f} ms "
            f"(Python and launches) per step, so p = {a['p']:.3f} of it can run in parallel. If only the kernels ran "
            f"{a['threads']}x faster, the step could be at most {a['bound_threads']:.2f}x faster on {a['threads']} "
            f"threads, and {a['bound_gpu']:.1f}x with infinitely fast kernels (a GPU).")
    measured = {k: v for k, v in a["measured"].items() if v is not None}
    if measured:
        at = (f" at batch {a['batch']}" if a.get("batch") else "") + (
            f" with {a['filters']} filters" if a.get("filters") else "")
        text += f" Measured{at}: " + ", ".join(f"{k} {v:.2f}x" for k, v in measured.items()) + "."
    over = [k for k, v in measured.items() if v > (a["bound_gpu"] if k == "cuda" else a["bound_threads"]) * 1.001]
    if over:
        text += (f" {', '.join(over)} beat the bound: it assumes the other backend does cpu-serial's work with "
                 "only the kernels sped up and the host time unchanged. A backend that spends less host time per "
                 "step (fewer or cheaper launches) or whose kernels use two cores' caches better passes it; so "
                 "does a cpu-serial measurement slowed by other load on the machine (sweep again to tell).")
    return text


class AnalysisPane(Guarded, Vertical):
    BINDINGS = bindings(ANALYSIS_KEYS)

    def compose(self) -> ComposeResult:
        with Horizontal(id="sweep-form"):
            yield Label("archs", classes="field-label")
            yield Input("cpu-serial,cpu-parallel", id="sweep-archs", compact=True)
            yield Label("batch", classes="field-label")
            yield Input("64,256", id="sweep-batch", compact=True)
            yield Label("filters", classes="field-label")
            yield Input("", id="sweep-filters", placeholder="as set", compact=True)
            yield Label("steps", classes="field-label")
            yield Input("5", id="sweep-steps", compact=True)
        with Horizontal(id="sweep-progress-row"):
            yield Button("Sweep (w)", id="sweep-run", variant="primary", compact=True)
            yield ProgressBar(id="sweep-progress", show_eta=False, total=1)
            yield Static("enter in a field or w runs the sweep", id="sweep-status", markup=False)
        with CellScroll(id="sweep-results"):  # (its one-column scrollbar flush against the charts: whole cells)
            yield DataTable(id="sweep-table", zebra_stripes=True)
            yield Static(TABLE_LEGEND, id="sweep-legend", markup=False)
            with Horizontal(id="sweep-charts"):
                yield Chart(draw_throughput, "samples/s against batch size: after a sweep", id="sweep-throughput")
                yield Chart(draw_speedup, "speedup and its Amdahl bound: sweep cpu-serial and another backend",
                            id="sweep-speedup")
            yield Chart(draw_parts, "", id="sweep-layers")
            yield Static(amdahl_text(None), id="sweep-amdahl", markup=False)
            yield Static(SYNCED_NOTE, id="sweep-note", markup=False)

    def action_scroll_results(self, pages: int) -> None:
        results = self.query_one("#sweep-results", CellScroll)
        (results.scroll_page_down if pages > 0 else results.scroll_page_up)(animate=False)

    def on_input_submitted(self) -> None:
        self.app.action_sweep()

    def on_input_changed(self) -> None:
        """Every field is checked as it is typed: each bad one marked, the first reason beside the bar."""
        errors = self.problems()
        for field in self.query(Input):
            field.set_class(any(err.field == field.id for err in errors), "error")
        if getattr(self.app, "sweeper", None) is not None:  # a sweep's progress keeps the line; the field is marked
            return
        status = self.query_one("#sweep-status", Static)
        if errors:
            status.update(f"✗ {errors[0]}")
        elif str(status.render()).startswith("✗"):  # (a sweep's progress stays)
            status.update("enter in a field or w runs the sweep")

    def on_mount(self) -> None:
        for which in ("#sweep-charts", "#sweep-table", "#sweep-legend"):  # until a sweep has points
            self.query_one(which).display = False

    def _archs(self) -> list[str]:
        # (each backend once: one given twice was measured twice, with a speedup over itself)
        archs = list(dict.fromkeys(a.strip() for a in self.query_one("#sweep-archs", Input).value.split(",")
                                   if a.strip()))
        bad = [a for a in archs if a not in ARCHS]
        if not archs:
            raise ConfigError(f"archs: give one or more of {', '.join(ARCHS)}", field="sweep-archs")
        if bad:
            raise ConfigError(f"archs: {bad[0]!r} is not one of {', '.join(ARCHS)}", field="sweep-archs")
        status = getattr(self.app, "archs", {})  # the backends found at start: an unavailable one cannot sweep
        for a in archs:
            if a in status and not status[a].available:
                raise ConfigError(f"{a} is unavailable: {status[a].reason}", field="sweep-archs")
        return archs

    def _filters(self) -> list[int | None]:
        text = self.query_one("#sweep-filters", Input).value.strip()
        return _ints(text, "filters") if text else [None]

    def problems(self) -> list[ConfigError]:
        """What is wrong with each field, in the form's order (empty: the sweep can run)."""
        errors = []
        for check in (self._archs, lambda: _ints(self.query_one("#sweep-batch", Input).value, "batch"),
                      self._filters, lambda: _ints(self.query_one("#sweep-steps", Input).value, "steps")):
            try:
                check()
            except ConfigError as err:
                errors.append(err)
        return errors

    def job(self) -> dict:
        """The sweep asked for; raises ConfigError naming the first field at fault (in the form's order)."""
        return {"archs": self._archs(), "batches": _ints(self.query_one("#sweep-batch", Input).value, "batch"),
                "filters": self._filters(), "threads": [cpu_count()],
                "steps": _ints(self.query_one("#sweep-steps", Input).value, "steps")[0], "repeats": 3, "warmup": 2}

    def progress(self, i: int, n: int | None, what: str, count: bool = True) -> None:
        """``n`` None: the sweep's size is not known yet (the bar pulses). ``count``: "i/n" before ``what`` (not
        for the end of a sweep, which says so itself)."""
        self.query_one("#sweep-progress", ProgressBar).update(total=n, progress=i)
        self.query_one("#sweep-status", Static).update(what if n is None or not count else f"{i}/{n} {what}")

    def set_status(self, text: str) -> None:
        """The line beside the bar alone (the bar as it is)."""
        self.query_one("#sweep-status", Static).update(text)

    def refuse(self, err: ConfigError) -> None:
        """A sweep that cannot run: the field at fault marked (with any other bad one), the reason beside the bar."""
        bad = {err.field} | {e.field for e in self.problems()}
        for field in self.query(Input):
            field.set_class(field.id in bad, "error")
        self.query_one("#sweep-status", Static).update(f"✗ {err}")

    def show(self, points: list[dict], amdahl: dict | None) -> None:
        self.points = points
        for field in self.query(Input):
            field.remove_class("error")
        table = self.query_one("#sweep-table", DataTable)
        table.clear(columns=True)
        # A filters column only where the sweep set filter counts, and then no ms/step column (the batch over
        # samples/s gives it): either way the table fits 80 columns.
        filters = any(p["filters"] is not None for p in points)
        table.add_columns("arch", "thr", "batch", *(["filters"] if filters else []), "samples/s",
                          *([] if filters else ["ms/step"]), "GFLOP/s", "speedup", "eff.", "K-F")
        # Two decimals everywhere: a negative Karp–Flatt fraction (a superlinear speedup, "-0.07") still fits.
        fmt = lambda v, spec: "—" if v is None else format(v, spec)  # noqa: E731
        for p in points:
            table.add_row(p["arch"], str(p["threads"]), str(p["batch"]), *([fmt(p["filters"], "")] if filters else []),
                          f"{p['samples_per_s']:,.0f}", *([] if filters else [f"{p['ms_per_step']:.2f}"]),
                          f"{p['gflops']:.1f}", fmt(p["speedup"], ".2f"), fmt(p["efficiency"], ".2f"),
                          fmt(p["karp_flatt"], ".2f"))
        table.display = self.query_one("#sweep-charts").display = bool(points)
        legend = self.query_one("#sweep-legend", Static)
        legend.display = bool(points)
        slower = any(p["karp_flatt"] is not None and p["karp_flatt"] > 1 for p in points)
        legend.update(TABLE_LEGEND + (f"\n{KF_ABOVE_1}" if slower else ""))
        self.query_one("#sweep-throughput", Chart).show(points, now=True)
        self.query_one("#sweep-speedup", Chart).show(amdahl, now=True)
        layers = self.query_one("#sweep-layers", Chart)
        layers.show(points, now=True)
        # A row per bar (each part of each arch and filter count at the largest batch) and the frame around them:
        # a shorter chart would squeeze several bars into a row, under one part's label.
        bars = sum(len(names) for names, _ in layers.series.values())
        layers.styles.height = max(12, bars + 7) if layers.series else 1
        self.query_one("#sweep-amdahl", Static).update(amdahl_text(amdahl))
