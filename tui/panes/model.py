"""The network editor: preset, input shape and loss, the layer table, and an in-place editor for one layer."""
from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import DataTable, Input, Label, Select, Static

from nncore.config import preset_configs
from nncore.errors import ConfigError
from nncore.losses import LOSSES
from tui.state import LAYER_KINDS, Draft, format_params

EMPTY = "(empty network)"


def _fmt_flops(n: int) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return str(n)


class ModelPane(Vertical):
    BINDINGS = [
        Binding("a", "add_layer", "Add layer", id="add_layer"),
        Binding("d", "remove_layer", "Remove layer", id="remove_layer"),
        Binding("shift+up", "move_layer(-1)", "Move up", id="move_up"),
        Binding("shift+down", "move_layer(1)", "Move down", id="move_down"),
    ]

    class Changed(Message):
        """The draft changed; ``valid`` says whether it builds."""

        def __init__(self, valid: bool) -> None:
            super().__init__()
            self.valid = valid

    class PresetChosen(Message):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

    def __init__(self, draft: Draft, **kwargs):
        super().__init__(**kwargs)
        self.draft = draft
        self._syncing = False
        self.error: ConfigError | None = None

    def compose(self) -> ComposeResult:
        presets = [(name, name) for name in preset_configs()] + [(EMPTY, EMPTY)]
        with Horizontal(id="model-top"):
            yield Select(presets, prompt="preset", id="preset", allow_blank=True)
            yield Label("input", classes="field-label")
            yield Input(id="input-shape", classes="short")
            yield Label("loss", classes="field-label")
            yield Select([(n, n) for n in LOSSES], id="loss", allow_blank=False, value="bce")
        yield DataTable(id="layers", cursor_type="row", zebra_stripes=True)
        with Horizontal(id="layer-editor"):
            yield Select([(k, k) for k in LAYER_KINDS], id="layer-type", allow_blank=False, value="Linear")
            yield Input(id="layer-params", placeholder="name=value, ...  e.g. out_channels=8, kernel_size=3")
        yield Static(id="model-status")

    def on_mount(self) -> None:
        self.load_draft(self.draft)

    # -- showing the draft --------------------------------------------------------------------------------
    def load_draft(self, draft: Draft, preset: str | None = None) -> None:
        self.draft = draft
        self._syncing = True
        if preset is not None:
            self.query_one("#preset", Select).value = preset
        self.query_one("#input-shape", Input).value = ",".join(map(str, draft.input))
        self.query_one("#loss", Select).value = draft.loss if draft.loss in LOSSES else "cross_entropy"
        self._syncing = False
        self.refresh_table(0)

    def refresh_table(self, cursor: int | None = None) -> None:
        table = self.query_one("#layers", DataTable)
        row = table.cursor_row if cursor is None else cursor
        rows, self.error = self.draft.check()
        self._syncing = True
        table.clear(columns=True)  # column widths from the current rows only, not from earlier ones
        table.add_columns("#", "layer", "parameters", "output", "params", "fwd FLOPs")
        for i, layer in enumerate(self.draft.layers):
            bad = self.error is not None and self.error.layer == i
            if i < len(rows):
                r = rows[i]
                cells = ("x".join(map(str, r["out_shape"])), f"{r['params']:,}", _fmt_flops(r["flops_fwd"]))
            else:
                cells = ("✗ invalid" if bad else "—", "", "")
            mark = "✗ " if bad else ""
            table.add_row(f"{mark}{i}", layer.get("type", "?"), format_params(layer), *cells, key=str(i))
        if self.draft.layers:
            table.move_cursor(row=max(0, min(row, len(self.draft.layers) - 1)))
        self._syncing = False
        self._sync_editor()
        status = self.query_one("#model-status", Static)
        if self.error is not None:
            status.update(f"✗ {self.error}")
            status.add_class("error")
        else:
            total = sum(r["params"] for r in rows)
            flops = sum(r["flops_fwd"] for r in rows)
            status.update(f"✓ valid: {len(rows)} layers, {total:,} parameters, {_fmt_flops(flops)} forward FLOPs "
                          "per sample")
            status.remove_class("error")
        self.post_message(self.Changed(self.error is None))

    def _sync_editor(self) -> None:
        table = self.query_one("#layers", DataTable)
        i = table.cursor_row
        editor = self.query_one("#layer-editor")
        editor.disabled = not (0 <= i < len(self.draft.layers))
        if editor.disabled:
            return
        self._syncing = True
        layer = self.draft.layers[i]
        self.query_one("#layer-type", Select).value = layer.get("type", "Linear")
        params = self.query_one("#layer-params", Input)
        if params.value != format_params(layer):
            params.value = format_params(layer)
        self._syncing = False

    # -- edits --------------------------------------------------------------------------------------------
    @on(DataTable.RowHighlighted, "#layers")
    def _row_moved(self) -> None:
        if not self._syncing:
            self._sync_editor()

    @on(Select.Changed, "#layer-type")
    def _type_changed(self, event: Select.Changed) -> None:
        i = self.query_one("#layers", DataTable).cursor_row
        if self._syncing or not 0 <= i < len(self.draft.layers):
            return
        self.draft.set_type(i, str(event.value))
        self.refresh_table(i)

    @on(Input.Changed, "#layer-params")
    def _params_changed(self, event: Input.Changed) -> None:
        i = self.query_one("#layers", DataTable).cursor_row
        if self._syncing or not 0 <= i < len(self.draft.layers):
            return
        try:
            self.draft.set_params(i, event.value)
        except ConfigError as err:  # not parseable yet: say so, keep the last good parameters
            status = self.query_one("#model-status", Static)
            status.update(f"✗ {err}")
            status.add_class("error")
            self.post_message(self.Changed(False))
            return
        self.refresh_table(i)

    @on(Input.Changed, "#input-shape")
    def _input_changed(self, event: Input.Changed) -> None:
        if self._syncing:
            return
        try:
            self.draft.input = [int(v) for v in event.value.replace("x", ",").split(",") if v.strip()]
        except ValueError:
            self.draft.input = [event.value]  # refused by the check, which names it
        self.refresh_table()

    @on(Select.Changed, "#loss")
    def _loss_changed(self, event: Select.Changed) -> None:
        if not self._syncing:
            self.draft.loss = str(event.value)
            self.refresh_table()

    @on(Select.Changed, "#preset")
    def _preset_changed(self, event: Select.Changed) -> None:
        if not self._syncing and event.value is not Select.BLANK and event.value != self.draft.name:
            self.post_message(self.PresetChosen(str(event.value)))

    def action_add_layer(self) -> None:
        table = self.query_one("#layers", DataTable)
        at = table.cursor_row + 1 if self.draft.layers else 0
        self.refresh_table(self.draft.add("Linear", at))

    def action_remove_layer(self) -> None:
        i = self.query_one("#layers", DataTable).cursor_row
        self.draft.remove(i)
        self.refresh_table(max(0, i - 1))

    def action_move_layer(self, delta: int) -> None:
        i = self.query_one("#layers", DataTable).cursor_row
        self.refresh_table(self.draft.move(i, delta))
