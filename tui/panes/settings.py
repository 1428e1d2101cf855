"""Data and training settings: dataset, sizes, optimizer, learning rate, batch, epochs, seed, backend.

Every field is checked as it is typed; a bad value is marked in place with the reason under the form, and
training stays disabled until it is fixed.
"""
from __future__ import annotations

from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.containers import Grid, VerticalScroll
from textual.message import Message
from textual.widgets import Input, Label, RadioButton, RadioSet, Select, Static

from nncore.config import DATA_FIELDS, TRAIN_FIELDS, RunConfig
from nncore.data import available_datasets
from nncore.distributed import mpi_missing
from nncore.errors import ConfigError
from nncore.runtime import available_archs

IDX_DIR = "idx"  # the dataset choice that reads --data DIR
NUMERIC = {  # field id -> (section, key, type)
    "samples": ("data", "samples", int), "noise": ("data", "noise", float),
    "test_ratio": ("data", "test_ratio", float), "val_ratio": ("data", "val_ratio", float),
    "lr": ("train", "lr", float), "momentum": ("train", "momentum", float),
    "batch_size": ("train", "batch_size", int), "epochs": ("train", "epochs", int),
    "seed": ("train", "seed", int), "threads": ("train", "threads", int), "ranks": ("train", "ranks", int),
}



class SettingsPane(VerticalScroll):
    class Changed(Message):
        def __init__(self, valid: bool) -> None:
            super().__init__()
            self.valid = valid

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.archs = available_archs()
        self.error: str | None = None
        self._loading = False

    def compose(self) -> ComposeResult:
        datasets = [(n, n) for n in available_datasets()] + [("IDX directory…", IDX_DIR)]
        self.dataset_names = [v for _, v in datasets]
        with Grid(id="settings-grid"):
            yield Label("dataset")
            yield Select(datasets, id="dataset", allow_blank=False, value="quadrant")
            yield Label("IDX directory")
            yield Input(id="path", placeholder="a directory of MNIST-format IDX files")
            for key in ("samples", "noise", "test_ratio", "val_ratio"):
                yield Label(key.replace("_", " "))
                yield Input(id=key, classes="short")
            yield Label("optimizer")
            yield Select([("sgd", "sgd"), ("adam", "adam")], id="optimizer", allow_blank=False, value="sgd")
            for key in ("lr", "momentum", "batch_size", "epochs", "seed", "threads", "ranks"):
                yield Label(key.replace("_", " ") + (" (MPI)" if key == "ranks" else ""))
                hint = {"threads": "all cores", "ranks": "1"}.get(key, "")
                yield Input(id=key, classes="short", placeholder=hint)
        yield Label("backend")
        with RadioSet(id="backend"):
            for s in self.archs:
                label = s.name if s.available else f"{s.name} — unavailable: {s.reason}"
                yield RadioButton(label, value=s.name == "cpu-parallel", disabled=not s.available, name=s.name)
        yield Static(id="settings-status")

    def load(self, data: dict, train: dict) -> None:
        """Show a config's [data] and [train] tables."""
        self._loading = True
        dataset = data.get("dataset") or (IDX_DIR if data.get("path") else None)
        if dataset is not None:
            self.query_one("#dataset", Select).value = dataset if dataset in self.dataset_names else "quadrant"
        self.query_one("#path", Input).value = data.get("path") or ""
        for fid, (section, key, _) in NUMERIC.items():
            value = (data if section == "data" else train).get(key)
            self.query_one(f"#{fid}", Input).value = "" if value is None else str(value)
        self.query_one("#optimizer", Select).value = train.get("optimizer", "sgd")
        self.set_arch(train.get("arch", "cpu-parallel"))
        self._loading = False
        self.validate()

    def set_arch(self, arch: str) -> bool:
        for button in self.query(RadioButton):
            if button.name == arch and not button.disabled:
                button.value = True
                return True
        return False

    def arch(self) -> str:
        pressed = self.query_one("#backend", RadioSet).pressed_button
        return pressed.name if pressed is not None else "cpu-parallel"

    def values(self) -> tuple[dict, dict]:
        """The [data] and [train] tables; raises ConfigError naming the first bad field."""
        data, train = {}, {"arch": self.arch(), "optimizer": str(self.query_one("#optimizer", Select).value)}
        for fid, (section, key, kind) in NUMERIC.items():
            text = self.query_one(f"#{fid}", Input).value.strip()
            if not text:
                continue
            try:
                value = kind(text)
            except ValueError:
                raise ConfigError(f"{section}.{key} {text!r} must be {'an integer' if kind is int else 'a number'}") from None
            (data if section == "data" else train)[key] = value
        dataset = str(self.query_one("#dataset", Select).value)
        if dataset == IDX_DIR:
            path = self.query_one("#path", Input).value.strip()
            if not path or not Path(path).expanduser().is_dir():
                raise ConfigError(f"data.path {path!r} is not a directory" if path else "data.path: give a directory")
            data["path"] = str(Path(path).expanduser())
        else:
            data["dataset"] = dataset
        cfg = RunConfig({}, data, train, source="settings")  # the same checks as a config file
        if cfg.train["ranks"] > 1 and (why := mpi_missing()):
            raise ConfigError(f"train.ranks {cfg.train['ranks']}: {why}")
        return ({k: v for k, v in cfg.data.items() if v != DATA_FIELDS[k][0] or k in data},
                {k: v for k, v in cfg.train.items() if v != TRAIN_FIELDS[k][0] or k in train})

    def validate(self) -> bool:
        for widget in self.query(Input):
            widget.remove_class("error")
        status = self.query_one("#settings-status", Static)
        try:
            self.values()
        except ConfigError as err:
            self.error = str(err).replace("settings: ", "")
            field = self.error.split()[0].split(".")[-1]
            for widget in self.query(f"#{field}"):
                widget.add_class("error")
            status.update(f"✗ {self.error}")
            status.add_class("error")
            self.post_message(self.Changed(False))
            return False
        self.error = None
        status.update("✓ settings are valid")
        status.remove_class("error")
        self.post_message(self.Changed(True))
        return True

    @on(Input.Changed)
    @on(Select.Changed)
    @on(RadioSet.Changed)
    def _changed(self) -> None:
        if not self._loading:
            self.validate()
