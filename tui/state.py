"""The app's state, without widgets: the network being edited, and the table of runs.

Kept apart from the Textual code so that the rules (layer defaults, parameter parsing, validation, speedups,
export) are plain functions and testable on their own.
"""
from __future__ import annotations

import copy
import csv
import io
import json
import re
from dataclasses import asdict, dataclass, field

from nncore.errors import ConfigError
from nncore.layers import LAYER_TYPES
from nncore.network import build_layers, check_spec, summarize

LAYER_KINDS = [cls.kind for cls in LAYER_TYPES.values()]
NEW_LAYER = {"Linear": {"out_features": 16}, "Conv2D": {"out_channels": 8, "kernel_size": 3},
             "MaxPool2D": {"kernel_size": 2}}


_PART = re.compile(r"\s*([^=,\s]*)\s*(=?)\s*(\[[^\]]*\]|\([^)]*\)|[^,;]*)\s*[,;]?")


def parse_params(text: str, index: int) -> dict:
    """``"out_channels=8, kernel_size=3x2, stride=[2,1]"`` -> ``{"out_channels": 8, "kernel_size": [3, 2], ...}``."""
    out = {}
    for key, sep, value in _PART.findall(text.strip()):
        if not key and not value:
            continue
        if not sep or not key or not value:
            raise ConfigError(f"layer {index}: write parameters as name=value, got {key}{sep}{value!r}",
                              layer=index)
        if key == "init":
            out[key] = value
            continue
        nums = value.strip("[]()").replace("x", " ").replace(",", " ").split()
        try:
            vals = [int(v) for v in nums]
        except ValueError:
            vals = []
        if len(vals) not in (1, 2):
            raise ConfigError(f"layer {index}: {key} {value!r} must be an integer or a pair like 3x2", layer=index)
        out[key] = vals[0] if len(vals) == 1 else vals
    return out


def format_params(layer: dict) -> str:
    def fmt(v):
        return "x".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)

    return ", ".join(f"{k}={fmt(v)}" for k, v in layer.items() if k != "type")


@dataclass
class Draft:
    """The network being edited: a model spec that may be invalid at any moment."""

    layers: list = field(default_factory=list)
    input: list = field(default_factory=lambda: [2])
    loss: str = "bce"
    name: str = "untitled"

    @classmethod
    def from_model(cls, model: dict, name: str) -> "Draft":
        return cls(copy.deepcopy(model.get("layers", [])), list(model.get("input", [2])), model.get("loss", "bce"),
                   name)

    def spec(self) -> dict:
        return {"input": list(self.input), "layers": copy.deepcopy(self.layers), "loss": self.loss}

    def check(self) -> tuple[list[dict], ConfigError | None]:
        """Rows for every layer that builds, and the first error (with its layer index) if any."""
        try:
            layers, _ = check_spec(self.spec())
            return summarize(layers), None
        except ConfigError as err:
            upto = self.layers if err.layer is None else self.layers[:err.layer]
            try:
                rows = summarize(build_layers(upto, self.input)[1]) if upto else []
            except ConfigError:
                rows = []
            return rows, err

    # -- edits ------------------------------------------------------------------------------------------
    def add(self, kind: str, at: int) -> int:
        """Insert a ``kind`` layer with default parameters at ``at``; returns its index."""
        at = max(0, min(at, len(self.layers)))
        self.layers.insert(at, {"type": kind, **NEW_LAYER.get(kind, {})})
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
        if self.layers[index].get("type") != kind:
            self.layers[index] = {"type": kind, **NEW_LAYER.get(kind, {})}

    def set_params(self, index: int, text: str) -> None:
        self.layers[index] = {"type": self.layers[index]["type"], **parse_params(text, index)}

    def to_toml(self, data: dict, train: dict) -> str:
        """A run config that ``layerlab train`` and the app open again."""
        def val(v):
            if isinstance(v, bool):
                return "true" if v else "false"
            if isinstance(v, (list, tuple)):
                return "[" + ", ".join(val(x) for x in v) + "]"
            return json.dumps(v)

        lines = [f"name = {json.dumps(self.name)}", "", "[model]", f"input = {val(self.input)}",
                 f"loss = {json.dumps(self.loss)}", "layers = ["]
        for layer in self.layers:
            inner = ", ".join(f"{k} = {val(v)}" for k, v in layer.items())
            lines.append(f"  {{ {inner} }},")
        lines.append("]")
        for title, table in (("data", data), ("train", train)):
            lines += ["", f"[{title}]"] + [f"{k} = {val(v)}" for k, v in table.items() if v is not None]
        return "\n".join(lines) + "\n"


@dataclass
class RunRecord:
    network: str
    arch: str
    threads: int
    batch: int
    epochs: int
    test_acc: float | None = None
    s_per_epoch: float | None = None
    samples_per_s: float | None = None
    status: str = "running"  # running | finished | stopped | failed | died
    speedup: float | None = None
    config: dict = field(default_factory=dict, repr=False)
    spec_key: str = field(default="", repr=False)
    ranks: int = 1  # MPI ranks of a distributed run

    def row(self) -> dict:
        d = asdict(self)
        d.pop("config")
        d.pop("spec_key")
        return d


def spec_key(model: dict) -> str:
    """Runs of the same network compare only with each other."""
    return json.dumps(model, sort_keys=True)


def update_speedups(runs: list[RunRecord]) -> None:
    """Speedup of each run over the latest cpu-serial run of the same network and batch size."""
    for run in runs:
        base = next((r for r in reversed(runs) if r.arch == "cpu-serial" and r.ranks == 1
                     and r.spec_key == run.spec_key and r.batch == run.batch and r.samples_per_s), None)
        run.speedup = run.samples_per_s / base.samples_per_s if base and run.samples_per_s else None


COLUMNS = ["network", "arch", "threads", "ranks", "batch", "epochs", "test_acc", "s_per_epoch", "samples_per_s", "speedup",
           "status"]


def export_runs(runs: list[RunRecord], fmt: str) -> str:
    rows = [{k: r.row()[k] for k in COLUMNS} for r in runs]
    if fmt == "json":
        return json.dumps(rows, indent=2) + "\n"
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()
