"""The network editor: preset, input shape and loss, the layer table, and one field per parameter of the
selected layer.

Typed text is never rewritten: a field that does not parse, is out of its parameter's own range or is required and
left empty is marked, the layer keeps its last good value and training stays disabled until it parses. Each field
belongs to one layer (the layer's dict itself, not a row number), so an edit can only ever change the layer it was
typed for. The network is checked against the dataset chosen in the Data & training view as well, as a run would
check it.
"""
from __future__ import annotations

from rich.cells import cell_len
from textual import on
from textual.app import ComposeResult
from textual.containers import Grid, Horizontal, Vertical
from textual.message import Message
from textual.widgets import DataTable, Input, Label, Select, Static

from nncore.config import preset_configs
from nncore.errors import ConfigError
from nncore.losses import LOSSES
from nncore.report import plural
from tui.guard import Guarded
from tui.keys import MODEL_KEYS, bindings
from tui.state import LAYER_KINDS, Draft, Param, format_params, format_value, layer_params, parse_param, \
    parse_shape

EMPTY = "(empty network)"
STALE: dict = {}  # what the editor's fields belong to after another draft is loaded: no layer, not None either,
# so the fields are rebuilt even for a draft without layers (whose editor shows a hint)


def fmt_flops(n: int) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return str(n)


class LayerTable(DataTable):
    """The layers, one row each; its keys add, remove, move and edit layers."""

    BINDINGS = bindings(MODEL_KEYS)

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """Remove, move and edit act on a layer: with none they are left out of the footer (and do nothing)."""
        if action in ("remove_layer", "move_layer", "edit_layer"):
            return bool(self.parent.draft.layers)
        return True

    def action_add_layer(self) -> None:
        self.parent.ask_layer_type()

    def action_remove_layer(self) -> None:
        self.parent.remove_layer()

    def action_move_layer(self, delta: int) -> None:
        self.parent.move_layer(delta)

    def action_edit_layer(self) -> None:
        self.parent.focus_editor()


class ParamInput(Input):
    """A number field of one layer's parameter."""

    def __init__(self, layer: dict, param: Param, text: str) -> None:
        super().__init__(text, placeholder=param.placeholder, compact=True,
                         classes="param", tooltip=f"{param.name}; empty: {param.placeholder}")
        self.of_layer, self.param = layer, param


class TypeSelect(Select):
    """The type of one layer; another type replaces the layer with one of that type."""

    def __init__(self, layer: dict) -> None:
        super().__init__([(k, k) for k in LAYER_KINDS], value=layer["type"], allow_blank=False, compact=True,
                         type_to_search=False, classes="layer-type")
        self.of_layer = layer


class InitSelect(Select):
    """The init scheme of one layer (empty: the layer's default)."""

    def __init__(self, layer: dict, param: Param) -> None:
        super().__init__([("he", "he"), ("xavier", "xavier")], prompt="default", allow_blank=True,
                         value=layer.get("init", Select.NULL), compact=True, type_to_search=False,
                         classes="param")
        self.of_layer, self.param = layer, param


class ModelPane(Guarded, Vertical):
    class Changed(Message):
        """The draft changed; ``valid`` says whether it builds and fits the dataset, ``misfit`` why it does not fit
        the dataset (its input or output width against the data), if that is what is wrong, else ``problem`` what
        is (an invalid layer)."""

        def __init__(self, valid: bool, misfit: str | None = None, problem: str | None = None) -> None:
            super().__init__()
            self.valid, self.misfit, self.problem = valid, misfit, problem

    class PresetChosen(Message):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

    def __init__(self, draft: Draft, **kwargs):
        super().__init__(**kwargs)
        self.draft = draft
        self.data = None  # the dataset's DatasetInfo, from the Data & training view
        self.data_error: str | None = None  # why the dataset cannot be described, if it cannot
        self.error: ConfigError | None = None  # the draft's first error
        self.pending: dict[tuple[int, str], tuple[str, str]] = {}  # (id(layer) or 0, field) -> (text, why)
        self.editing: dict | None = STALE  # the layer the editor's fields belong to (None: the no-layers hint)
        self.fields: list = []  # the editor's type select and parameter fields
        self.had_layers: bool | None = None  # whether the footer was last drawn with layers to act on
        self.preset: str | None = None  # the preset the shown network came from (``load_draft``)

    def compose(self) -> ComposeResult:
        presets = [(name, name) for name in preset_configs()] + [(EMPTY, EMPTY)]
        with Horizontal(id="model-top"):
            yield Label("preset", classes="field-label")
            yield Select(presets, prompt="(none)", id="preset", allow_blank=True, compact=True,  # (not a preset)
                         type_to_search=False)
            yield Label("input", classes="field-label")
            yield Input(id="input-shape", placeholder="from data", compact=True,
                        tooltip="[features] or channels,height,width; empty: the dataset's")
            yield Label("loss", classes="field-label")
            yield Select([(n, n) for n in LOSSES], id="loss", allow_blank=False, value="bce", compact=True,
                         type_to_search=False)
        yield LayerTable(id="layers", cursor_type="row", zebra_stripes=True)
        yield Grid(id="layer-editor")
        yield Static(id="model-status", markup=False)

    def on_mount(self) -> None:
        self.load_draft(self.draft)

    # -- showing the draft --------------------------------------------------------------------------------
    def load_draft(self, draft: Draft, preset: str | None = None) -> None:
        """Show ``draft``; ``preset``: the preset it came from (None: blank the preset)."""
        self.draft, self.pending, self.editing = draft, {}, STALE
        self.show_preset(preset)
        shape = self.query_one("#input-shape", Input)
        shape.value = ",".join(map(str, draft.input)) if draft.input is not None else ""
        shape.remove_class("error")
        self.query_one("#loss", Select).value = draft.loss
        self.refresh_table(0)

    def set_data(self, info, error: str | None = None) -> None:
        """The dataset the network must fit (a DatasetInfo), or why there is none."""
        self.data, self.data_error = info, error
        shape = self.query_one("#input-shape", Input)  # an empty input takes the data's: say which
        shape.placeholder = f"data: {','.join(map(str, info.input_shape))}" if info is not None else "from data"
        self.refresh_table()

    @property
    def table(self) -> LayerTable:
        return self.query_one(LayerTable)

    def selected(self) -> int:
        return self.table.cursor_row if self.draft.layers else -1

    def refresh_table(self, cursor: int | None = None) -> None:
        table = self.table
        row = table.cursor_row if cursor is None else cursor
        present = {id(layer) for layer in self.draft.layers}
        self.pending = {k: v for k, v in self.pending.items() if k[0] in present or k[0] == 0}
        rows, self.error = self.draft.check(self.data)
        bad_layers = {k[0] for k in self.pending}
        lines = []
        for i, layer in enumerate(self.draft.layers):
            bad = (self.error is not None and self.error.layer == i) or id(layer) in bad_layers
            if i < len(rows):
                r = rows[i]
                cells = ("x".join(map(str, r["out_shape"])), f"{r['params']:,}", fmt_flops(r["flops_fwd"]))
            else:
                cells = ("✗ invalid" if bad else "—", "", "")
            lines.append((f"{'✗ ' if bad else ''}{i}", layer.get("type", "?"), format_params(layer), *cells))
        # Columns made anew, each as wide as its widest cell now: kept columns would keep the width of the widest
        # value they ever held, and widths left to the table came out as the headers' after keys in a burst.
        table.clear(columns=True)
        heads = ("#", "layer", "parameters", "output", "params", "fwd FLOPs")
        for k, head in enumerate(heads):
            table.add_column(head, width=max(cell_len(c) for c in (head, *(line[k] for line in lines))))
        for line in lines:
            table.add_row(*line)
        if self.draft.layers:
            table.move_cursor(row=max(0, min(row, len(self.draft.layers) - 1)), animate=False)
        self._sync_editor()
        self._show_status(rows)
        if bool(self.draft.layers) != self.had_layers:  # the layer keys come or go
            self.had_layers = bool(self.draft.layers)
            self.app.refresh_bindings()

    def problems(self) -> list[str]:
        """What keeps the network from training, in the layers' order: each refused value (the input shape's
        first), then what the network's check finds with the last good values, or the dataset's problem."""
        order = {id(layer): i for i, layer in enumerate(self.draft.layers)}
        out = []
        for key in sorted(self.pending, key=lambda k: order.get(k[0], -1)):
            why = self.pending[key][1]
            if key[0] not in order:  # the input shape's field
                out.append(f"model.{why}")
            else:
                i = order[key[0]]  # named by where the layer is now: it may have moved since the value was typed
                out.append(f"layer {i} ({self.draft.layers[i].get('type', '?')}): {why}")
        if not self.draft.layers:  # (the check's own words are the config file's: "layers must be a non-empty list")
            out.append("the network has no layers: press a to add one")
        elif self.error is not None:
            out.append(str(self.error))
        elif self.data_error is not None and not out:
            out.append(f"the dataset: {self.data_error}")
        return out

    def problem(self) -> str | None:
        """The first thing that keeps the network from training, or None."""
        return next(iter(self.problems()), None)

    def _show_status(self, rows: list[dict]) -> None:
        status = self.query_one("#model-status", Static)
        self.query_one("#input-shape", Input).set_class(
            (0, "input") in self.pending or (self.error is not None and self.error.field == "model.input"), "error")
        problems = self.problems()
        problem = problems[0] if problems else None
        if problem is not None:
            # Up to three reasons, a line each; past them, how many more (each layer at fault is marked ✗).
            more = f"\n(and {plural(len(problems) - 3, 'more problem')}, marked ✗)" if len(problems) > 3 else ""
            status.update("\n".join(f"✗ {p}" for p in problems[:3]) + more)
            status.add_class("error")
        else:
            total = sum(r["params"] for r in rows)
            # Two lines, so that a narrow terminal never wraps the line in the middle of a phrase.
            fits = f"; fits {self.data.name}\n" if self.data is not None else ": "
            status.update(f"✓ valid{fits}{plural(len(rows), 'layer')}, {plural(total, 'parameter')}, "
                          f"{fmt_flops(sum(r['flops_fwd'] for r in rows))} forward FLOPs per sample")
            status.remove_class("error")
        misfit = str(self.error) if self.error is not None and self.error.about_data else None
        self.post_message(self.Changed(problem is None, misfit, problem if misfit is None else None))

    def _sync_editor(self) -> None:
        """Rebuild the parameter fields when the selected layer is another one (or another type)."""
        i = self.selected()
        layer = self.draft.layers[i] if i >= 0 else None
        if layer is self.editing and (layer is None or getattr(self, "_editing_type", None) == layer["type"]):
            for label in self.query("#layer-editor .layer-index").results(Label):  # the layer moved: renumber
                label.update(f"layer {i}")
            return
        self.editing, self._editing_type = layer, layer["type"] if layer else None
        editor = self.query_one("#layer-editor", Grid)
        editor.remove_children()  # finishes later: the new fields carry no ids that could clash with the old
        if layer is None:
            self.fields = []
            editor.mount(Label("no layers: press a to add one", classes="hint"))
            return
        widgets = [Label(f"layer {i}", classes="field-label layer-index"), TypeSelect(layer)]
        for param in layer_params(layer["type"]):
            widgets.append(Label(param.name, classes="field-label"))
            if param.kind == "init":
                widgets.append(InitSelect(layer, param))
            else:
                pending = self.pending.get((id(layer), param.name))
                text = pending[0] if pending else format_value(layer[param.name]) if param.name in layer else ""
                field = ParamInput(layer, param, text)
                field.set_class(pending is not None, "error")
                widgets.append(field)
        self.fields = widgets[1::2]  # the type, then each parameter
        editor.mount(*widgets)

    def focus_editor(self) -> None:
        """Focus the selected layer's first parameter (its type, where it has none)."""
        if self.fields:
            self.fields[min(1, len(self.fields) - 1)].focus()

    # -- edits --------------------------------------------------------------------------------------------
    def _index(self, layer: dict) -> int | None:
        return next((i for i, x in enumerate(self.draft.layers) if x is layer), None)

    @on(DataTable.RowHighlighted, "#layers")
    def _row_moved(self) -> None:
        self._sync_editor()

    @on(DataTable.RowSelected, "#layers")
    def _row_chosen(self) -> None:
        self.focus_editor()

    @on(Select.Changed, ".layer-type")
    def _type_changed(self, event: Select.Changed) -> None:
        layer = event.select.of_layer
        i = self._index(layer)
        if i is None or event.value == layer["type"] or event.value is Select.NULL:
            return
        self.draft.set_type(i, str(event.value))
        self.refresh_table(i)

    @on(Input.Changed, ".param")
    def _param_typed(self, event: Input.Changed) -> None:
        field: ParamInput = event.input
        i = self._index(field.of_layer)
        if i is None:  # a field of a layer that is gone
            return
        key = (id(field.of_layer), field.param.name)
        try:
            value = parse_param(field.param, event.value)
            if value is None and field.param.placeholder == "required":  # cleared on the way to a new value
                raise ValueError(f"missing parameter '{field.param.name}'")
        except ValueError as exc:
            self.pending[key] = (event.value, str(exc))
            field.add_class("error")
            self.refresh_table()
            return
        self.pending.pop(key, None)
        field.remove_class("error")
        if value is None:
            field.of_layer.pop(field.param.name, None)
        else:
            field.of_layer[field.param.name] = value
        self.refresh_table()

    @on(Select.Changed, ".param")
    def _init_chosen(self, event: Select.Changed) -> None:
        field: InitSelect = event.select
        if self._index(field.of_layer) is None:
            return
        if event.value is Select.NULL:
            field.of_layer.pop("init", None)
        else:
            field.of_layer["init"] = str(event.value)
        self.refresh_table()

    @on(Input.Changed, "#input-shape")
    def _input_changed(self, event: Input.Changed) -> None:
        try:
            shape = parse_shape(event.value)
        except ValueError as exc:
            self.pending[(0, "input")] = (event.value, str(exc))
            self.refresh_table()
            return
        self.pending.pop((0, "input"), None)
        self.draft.input = shape
        self.refresh_table()

    @on(Select.Changed, "#loss")
    def _loss_changed(self, event: Select.Changed) -> None:
        if event.value != self.draft.loss:
            self.draft.loss = str(event.value)
            self.refresh_table()

    def show_preset(self, preset: str | None) -> None:
        """The preset list names the preset the network came from, or "(none)" (a file, a saved network)."""
        self.preset = preset  # (what "(none)" chosen by hand puts back)
        self.query_one("#preset", Select).value = preset if preset is not None else Select.NULL

    @on(Select.Changed, "#preset")
    def _preset_changed(self, event: Select.Changed) -> None:
        if event.value is Select.NULL:
            if self.preset is not None:  # "(none)" chosen: no network to open; the list names the shown one again
                event.select.value = self.preset
                self.notify(f"(none) opens nothing: pick a preset, or {EMPTY} to start from no layers", timeout=4)
        elif event.value != self.draft.name:
            self.post_message(self.PresetChosen(str(event.value)))

    def ask_layer_type(self) -> None:
        from tui.screens.pick import PickScreen

        def add(kind: str | None) -> None:
            if kind is not None:
                at = self.selected() + 1
                self.refresh_table(self.draft.add(kind, at))
                self.call_after_refresh(self.focus_editor)

        self.app.open_dialog(PickScreen("Add which layer?", LAYER_KINDS), add)

    def remove_layer(self) -> None:
        i = self.selected()
        if i >= 0:
            self.draft.remove(i)
            self.refresh_table(max(0, i - 1))

    def move_layer(self, delta: int) -> None:
        i = self.selected()
        if i >= 0:
            self.refresh_table(self.draft.move(i, delta))
