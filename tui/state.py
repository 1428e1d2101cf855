"""The app's state, without widgets: the network being edited, its layers' parameters, and the table of runs.

Kept apart from the Textual code so that the rules (parameter kinds and parsing, validation against the
dataset, speedups, export) are plain functions and testable on their own.
"""
from __future__ import annotations

import copy
import inspect
import json
import re
from dataclasses import dataclass, field

from nncore.config import NAME_CHARS, fit_model
from nncore.errors import ConfigError
from nncore.layers import LAYER_TYPES
from nncore.limits import INT32_MAX
from nncore.losses import canonical
from nncore.network import build_layers, check_spec, summarize
from nncore.report import EDITED, data_label
from nncore.store import mean_epoch_s, mean_rate

LAYER_KINDS = [cls.kind for cls in LAYER_TYPES.values()]
NEW_LAYER = {"Linear": {"out_features": 16}, "Conv2D": {"out_channels": 8, "kernel_size": 3},
             "MaxPool2D": {"kernel_size": 2}}
PAIRS = ("kernel_size", "stride", "padding")  # an integer or a pair (height x width)
INITS = ("he", "xavier")


@dataclass(frozen=True)
class Param:
    """One parameter of a layer kind, as the editor shows it."""

    name: str
    kind: str  # "int", "pair" or "init"
    placeholder: str  # what an empty field means: the default, or "required"


def layer_params(kind: str) -> list[Param]:
    """The parameters of a layer kind, with what leaving each one empty means."""
    cls = next(c for c in LAYER_TYPES.values() if c.kind == kind)
    sig = inspect.signature(cls.__init__).parameters
    out = []
    for name in cls.keys:
        default = sig[name].default
        if default is inspect.Parameter.empty:
            hint = "required"
        elif default is None:
            hint = {"init": "default", "stride": "= kernel"}.get(name, "auto")
        else:
            hint = str(default)
        out.append(Param(name, "init" if name == "init" else "pair" if name in PAIRS else "int", hint))
    return out


_INT = re.compile(r"[0-9]+")
_SHAPE = re.compile(r"\s*[\[(]?\s*[0-9]+(?:\s*[x,]\s*[0-9]+)*\s*[\])]?\s*")
_PAIR = re.compile(r"[\[(]?\s*([0-9]+)\s*(?:[x,]|\s)\s*([0-9]+)\s*[\])]?")


def _in_range(param: Param, digits: str) -> int:
    """A number typed for ``param`` (ASCII digits) within the parameter's own range, whatever the network: at
    least 1 (0 for padding), at most what the kernels' 32-bit integers hold (nncore's layers refuse the same).
    Refused here, the field is marked and the layer keeps its last good value; the network's check would mark
    the whole layer instead, and no layer from it on would show its shapes."""
    low = 0 if param.name == "padding" else 1
    digits = digits.lstrip("0") or "0"
    if len(digits) > len(str(INT32_MAX)) or int(digits) > INT32_MAX:  # (no int() of 5000 digits: Python refuses)
        shown = digits if len(digits) <= 15 else f"{digits[:12]}…"  # the reason stays one line
        raise ValueError(f"{param.name} {shown} must be at most {INT32_MAX}")
    if int(digits) < low:
        raise ValueError(f"{param.name} {digits} must be >= {low}")
    return int(digits)


def parse_param(param: Param, text: str):
    """The value typed for ``param``: None for an empty field (the default); ValueError saying what is wrong."""
    text = text.strip()
    if not text or (param.placeholder == "auto" and text.lower() == "auto"):  # (the empty field's word, typed)
        return None
    if param.kind == "init":
        if text not in INITS:
            raise ValueError(f"init {text!r} must be one of {', '.join(INITS)}")
        return text
    if _INT.fullmatch(text):
        return _in_range(param, text)
    pair = _PAIR.fullmatch(text) if param.kind == "pair" else None
    if pair:
        return [_in_range(param, pair[1]), _in_range(param, pair[2])]
    if re.fullmatch(r"-[0-9]+", text):  # a whole number, but below every parameter's minimum
        raise ValueError(f"{param.name} {text} must be >= {0 if param.name == 'padding' else 1}")
    shape = "an integer or a pair like 3x2" if param.kind == "pair" else "a whole number"
    raise ValueError(f"{param.name} {text!r} must be {shape}")


def editable(model) -> bool:
    """Whether the editor can hold this model spec as written: a list of layer tables of known types, each
    parameter a value its field accepts, an input shape of 1 or 3 sizes (or none: the data's), a known loss.
    Whether the layers build one after another and fit the data is what the editor then marks, as it does for
    a network built key by key (and saved half done with ctrl+s)."""
    def whole(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if not isinstance(model, dict) or not isinstance(model.get("layers"), list):
        return False
    inp = model.get("input")
    shape = [inp] if whole(inp) else inp
    if inp is not None and not (isinstance(shape, list) and len(shape) in (1, 3)
                                and all(whole(v) and 0 < v <= INT32_MAX for v in shape)):
        return False
    try:
        if model.get("loss") is not None:
            canonical(model["loss"])
        for raw in model["layers"]:
            kind = raw.get("type") if isinstance(raw, dict) else None
            cls = LAYER_TYPES.get(kind.lower()) if isinstance(kind, str) else None
            if cls is None:
                return False
            params = {p.name: p for p in layer_params(cls.kind)}
            for key, value in raw.items():
                plain = isinstance(value, str) or whole(value) or (isinstance(value, list) and all(map(whole, value)))
                if key != "type" and (key not in params or not plain
                                      or parse_param(params[key], format_value(value)) != value):
                    return False
    except (ConfigError, ValueError):
        return False
    return True


def format_value(value) -> str:
    return "x".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


SHORT = {"out_features": "out", "out_channels": "out", "in_features": "in", "in_channels": "in",
         "kernel_size": "k", "stride": "s", "padding": "p"}


def format_params(layer: dict) -> str:
    """A layer's parameters in the table's few columns (``out=64 k=3 s=1``); the editor has the full names."""
    return " ".join(f"{SHORT.get(k, k)}={format_value(v)}" for k, v in layer.items() if k != "type")


def parse_shape(text: str) -> list[int] | None:
    """``"1,28,28"``, ``"1x28x28"`` or ``"[2]"`` -> a list; empty -> None (the dataset's); ValueError else."""
    if not text.strip():
        return None
    if not _SHAPE.fullmatch(text) or len(parts := re.findall(r"[0-9]+", text)) not in (1, 3):
        raise ValueError(f"input {text.strip()!r} must be [features] or [channels, height, width], e.g. 1,28,28")
    return [int(p) for p in parts]




@dataclass
class Draft:
    """The network being edited: a model spec that may be invalid at any moment. ``input`` None means the
    dataset's input shape, as in a config file that leaves it out."""

    layers: list = field(default_factory=list)
    input: list | None = None
    loss: str = "bce"
    name: str = "untitled"
    description: str = ""  # the config's one-line description, written back when saved
    origin: tuple | None = None  # (layers, input, loss) as opened from a file or preset, or as last saved

    @classmethod
    def from_model(cls, model: dict, name: str, description: str = "") -> "Draft":
        """A draft of a checked model spec (nncore.config.check_run accepted it)."""
        loss = canonical(model["loss"]) if model.get("loss") is not None else "cross_entropy"
        inp = model.get("input")
        layers = [{**copy.deepcopy(raw), "type": LAYER_TYPES[raw["type"].lower()].kind} for raw in model["layers"]]
        draft = cls(layers, [inp] if isinstance(inp, int) else (list(inp) if inp else None), loss, name, description)
        draft.keep_origin()
        return draft

    def keep_origin(self) -> None:
        """The network as it is now is the one its name stands for (just opened, or saved under that name)."""
        self.origin = copy.deepcopy((self.layers, self.input, self.loss))

    def edited(self) -> bool:
        """Whether the network differs from the one opened or saved under its name."""
        return self.origin is not None and self.origin != (self.layers, self.input, self.loss)

    def run_name(self) -> str:
        """The name a run of this network records: its own, or with " (edited)" once it differs from the network
        opened under that name, so that a changed preset's runs do not pass for the preset's."""
        if not self.edited():
            return self.name
        return f"{self.name[:NAME_CHARS - len(EDITED)]}{EDITED}"

    def spec(self, data=None) -> dict:
        """The model spec; with ``data`` (a DatasetInfo) an empty input is the dataset's."""
        inp = self.input if self.input is not None else (list(data.input_shape) if data is not None else None)
        out = {"layers": copy.deepcopy(self.layers), "loss": self.loss}
        return {"input": inp, **out} if inp is not None else out

    def check(self, data=None) -> tuple[list[dict], ConfigError | None]:
        """Rows for every layer that builds, and the first error (with its layer index or field) if any;
        with ``data`` the network is also checked against that dataset, as a run would be."""
        spec = self.spec(data)
        try:
            layers, _ = check_spec(spec)
        except ConfigError as err:  # the rows of the layers before the one at fault
            upto = self.layers if err.layer is None else self.layers[:err.layer]
            try:
                rows = summarize(build_layers(upto, spec.get("input"))[1]) if upto else []
            except ConfigError:
                rows = []
            return rows, err
        rows = summarize(layers)
        if data is not None:
            try:
                fit_model(spec, data)
            except ConfigError as err:
                return rows, err
        return rows, None

    # -- edits ------------------------------------------------------------------------------------------
    def add(self, kind: str, at: int) -> int:
        """Insert a ``kind`` layer with default parameters at ``at``; returns its index."""
        at = max(0, min(at, len(self.layers)))
        self.layers.insert(at, {"type": kind, **copy.deepcopy(NEW_LAYER.get(kind, {}))})
        return at

    def remove(self, index: int) -> None:
        if 0 <= index < len(self.layers):
            del self.layers[index]

    def move(self, index: int, delta: int) -> int:
        j = index + delta
        if 0 <= index < len(self.layers) and 0 <= j < len(self.layers):
            self.layers[index], self.layers[j] = self.layers[j], self.layers[index]
            return j
        return index

    def set_type(self, index: int, kind: str) -> None:
        """A new layer of ``kind`` in place of layer ``index`` (a new dict: editors of the old one go stale)."""
        if self.layers[index].get("type") != kind:
            self.layers[index] = {"type": kind, **copy.deepcopy(NEW_LAYER.get(kind, {}))}

    def to_toml(self, data: dict, train: dict) -> str:
        """A run config that ``layerlab train`` and the app open again."""
        def val(v):
            if isinstance(v, bool):
                return "true" if v else "false"
            if isinstance(v, (list, tuple)):
                return "[" + ", ".join(val(x) for x in v) + "]"
            return json.dumps(v)

        lines = [f"name = {json.dumps(self.name)}"]
        if self.description:
            lines.append(f"description = {json.dumps(self.description)}")
        lines += ["", "[model]"]
        if self.input is not None:
            lines.append(f"input = {val(self.input)}")
        lines += [f"loss = {json.dumps(self.loss)}", "layers = ["]
        for layer in self.layers:
            inner = ", ".join(f"{k} = {val(v)}" for k, v in layer.items())
            lines.append(f"  {{ {inner} }},")
        lines.append("]")
        for title, table in (("data", data), ("train", train)):
            lines += ["", f"[{title}]"] + [f"{k} = {val(v)}" for k, v in table.items() if v is not None]
        return "\n".join(lines) + "\n"


@dataclass
class RunRecord:
    """One run of the session. ``samples_per_s`` and ``s_per_epoch`` are both over the run's training time once
    under way (nncore.store.mean_rate: the epochs after the first, which compiles the kernels, or within the
    first after step 1; paused time excluded): samples trained over that time, and that time per epoch."""

    network: str
    arch: str
    threads: int
    batch: int
    epochs: int = 0  # completed
    test_acc: float | None = None  # None: no evaluation yet
    s_per_epoch: float | None = None
    samples_per_s: float | None = None
    status: str = "running"  # running | finished | stopped | failed | refused | died (and paused, as shown)
    config: dict = field(default_factory=dict, repr=False)
    ranks: int = 1  # MPI ranks of a distributed run
    epoch_events: list = field(default_factory=list, repr=False)  # the completed epochs' epoch_end events

    def add_epoch(self, msg: dict) -> None:
        """Fold in an epoch_end event; the rates are the run store's (:func:`nncore.store.mean_rate`)."""
        self.epoch_events.append(msg)
        self.epochs, self.test_acc = msg["epoch"], msg["test_acc"]
        self.s_per_epoch = mean_epoch_s(self.epoch_events, self.batch)
        self.samples_per_s = mean_rate(self.epoch_events, self.batch)


def spec_key(model: dict, data: dict | None = None) -> str:
    """Runs of the same network on the same data compare only with each other (a run on a six-row table was the
    base of runs on the full set: 113x)."""
    return json.dumps({"model": model, "data": data or {}}, sort_keys=True, default=str)


# The Runs view's columns, most telling first (a narrow terminal shows the first ones), and what each means.
COLUMNS = ["network", "arch", "samples_per_s", "speedup", "test_acc", "status", "data", "batch", "epochs", "threads",
           "ranks", "s_per_epoch"]
HEADERS = {"samples_per_s": "samples/s", "test_acc": "test acc", "s_per_epoch": "s/epoch", "threads": "thr",
           "epochs": "ep"}
MEANING = {
    "samples_per_s": "training samples per second once under way: over the epochs after the first, which "
                     "compiles the kernels (within the first, after step 1); paused time excluded",
    "speedup": "samples/s over the latest cpu-serial run of the same network, data and batch size (that run: base)",
    "test_acc": "accuracy on the test set after the last completed epoch (— before the first)",
    "s_per_epoch": "mean training time of the completed epochs, measured as samples/s is",
    "epochs": "epochs completed", "threads": "CPU threads (cpu-parallel) of each rank", "ranks": "MPI ranks",
    "data": "what the run trained on: the dataset's name, or the file or directory it was read from",
}



# The Runs view reads the run store: a mark, the run's id, then the session table's columns, then when it started.
STORE_COLUMNS = ["mark", "id", *COLUMNS, "started", "kind"]
HEADERS.update({"mark": "✓", "id": "#", "started": "started"})


def store_rows(runs: list[dict], marked: list[int] = (), paused_pid: int | None = None) -> list[dict]:
    """The run store's rows (``Store.runs``, newest first) as the Runs view shows them, with each run's speedup
    over the latest cpu-serial training run of the same network, data and batch size: "base" for that run itself, None
    for older cpu-serial runs. ``paused_pid``: the process of this app's run while it is paused, whose running
    row then says paused (the store keeps running: a pause is not an outcome)."""
    import time

    out = []
    for r in runs:
        cfg = r.get("config") or {}
        train, data = cfg.get("train") or {}, cfg.get("data")
        out.append({"mark": "✓" if r["id"] in marked else "", "id": r["id"], "network": r["name"],
                    "arch": r["arch"], "samples_per_s": r["samples_per_s"], "speedup": None, "test_acc": r["test_acc"],
                    "status": "paused" if paused_pid is not None and r["status"] == "running"
                    and r.get("pid") == paused_pid else r["status"], "batch": train.get("batch_size"),
                    "epochs": r["epochs_done"] if r["kind"] == "train" else None,  # (a sweep has points, no epochs)
                    "threads": r["threads"], "ranks": r["ranks"], "s_per_epoch": r.get("s_per_epoch"),
                    "data": data_label(cfg) if r["kind"] == "train" else None,
                    "started": time.strftime("%m-%d %H:%M", time.localtime(r["started"])), "kind": r["kind"],
                    "config": cfg, "spec_key": spec_key(cfg["model"], data if isinstance(data, dict) else None)
                    if isinstance(cfg.get("model"), dict) else "",
                    # a sweep stopped part-way: {"points": n, "of": m}
                    "stopped": r["summary"].get("stopped") if isinstance(r.get("summary"), dict) else None})
    serial = lambda b: b["arch"] == "cpu-serial" and b["ranks"] == 1 and b["kind"] == "train"  # noqa: E731
    for row in out:
        base = next((b for b in out if serial(b) and b["spec_key"] == row["spec_key"] and b["batch"] == row["batch"]
                     and b["samples_per_s"]), None)
        # A cpu-serial run against another is run-to-run drift, not a backend's speedup: the base says "base",
        # the older ones nothing.
        if row is base:
            row["speedup"] = "base"
        elif row["kind"] == "train" and not serial(row) and base is not None and row["samples_per_s"]:
            row["speedup"] = row["samples_per_s"] / base["samples_per_s"]
    return out
