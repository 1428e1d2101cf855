"""Data and training settings: dataset, sizes, optimizer, learning rate, batch, epochs, seed, backend.

Every field is checked as it is typed, with the same rules as a config file: a bad value is marked in place,
the reason shown under the form, and training stays disabled until it is fixed. The dataset is described
(its input shape and classes, from IDX headers at most) so the Model view can check the network against it.
"""
from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Grid, VerticalScroll
from textual.message import Message
from textual.widgets import Input, Label, RadioButton, RadioSet, Select, Static

from nncore.config import DATA_FIELDS, TRAIN_FIELDS, RunConfig
from nncore import tabular
from nncore.data import SYNTHETIC, available_datasets, describe, is_table
from nncore.distributed import mpi_missing
from nncore.errors import ConfigError, LayerlabError
from nncore.runtime import available_archs
from tui.guard import Guarded
from tui.widgets.scroll import ScrollStop

IDX_DIR = "idx"  # the dataset choice that reads a path: an IDX directory or a CSV file
NUMERIC = {  # field id -> (section, key, type)
    "samples": ("data", "samples", int), "noise": ("data", "noise", float),
    "test_ratio": ("data", "test_ratio", float), "val_ratio": ("data", "val_ratio", float),
    "lr": ("train", "lr", float), "momentum": ("train", "momentum", float),
    "batch_size": ("train", "batch_size", int), "epochs": ("train", "epochs", int),
    "seed": ("train", "seed", int), "threads": ("train", "threads", int), "ranks": ("train", "ranks", int),
}
SYNTHETIC_ONLY = ("samples", "noise")
HINTS = {"threads": "all cores", "ranks": "1", "path": "IDX dir or CSV file",
         "label": "the last column"}
LABELS = {"ranks": "MPI ranks", "path": "path", "label": "label column"}


def _hint(key: str, table: dict) -> str:
    """What an emptied field stands for: its own hint, or the default value a run then gets."""
    return HINTS.get(key) or f"default {table[key][0]:g}"


def _number(text: str, kind: type, section: str, key: str):
    """A typed number; ASCII digits only (``int("５")`` would take a full-width 5)."""
    try:
        if not text.isascii():
            raise ValueError
        return kind(text)
    except ValueError:
        what = "a whole number" if kind is int else "a finite number"  # (as the command line says it)
        raise ConfigError(f"{section}.{key} {text!r} must be {what}", field=f"{section}.{key}") from None


class SettingsPane(Guarded, ScrollStop, VerticalScroll):
    class Changed(Message):
        """The settings changed: ``valid``, and the dataset they name (a DatasetInfo) or why it cannot be used."""

        def __init__(self, valid: bool, data=None, data_error: str | None = None) -> None:
            super().__init__()
            self.valid, self.data, self.data_error = valid, data, data_error

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.archs = available_archs()
        self.error: str | None = None
        self._reasons: dict[str, str] = {}  # each bad field's reason (validate), the first one's as self.error
        self.data = None  # the DatasetInfo of the dataset chosen, when it can be described
        self.misfit: str | None = None  # why the network cannot train on that dataset (set_misfit)
        self.model_problem: str | None = None  # what else is wrong with the network (set_misfit)
        self._want, self._reading, self._read_timer = None, False, None  # a CSV file to read (_read_table)

    def compose(self) -> ComposeResult:
        datasets = [(n, n) for n in available_datasets()] + [("IDX dir or CSV file…", IDX_DIR)]
        self.dataset_names = [v for _, v in datasets]
        with Grid(id="settings-grid"):
            yield Label("dataset")
            yield Select(datasets, id="dataset", allow_blank=False, value="quadrant", compact=True,
                         type_to_search=False)
            yield Label(LABELS["path"])
            yield Input(id="path", placeholder=HINTS["path"], compact=True, disabled=True)
            yield Label(LABELS["label"])
            yield Input(id="label", placeholder=HINTS["label"], compact=True, disabled=True)
            for key in ("samples", "noise", "test_ratio", "val_ratio"):
                yield Label(key.replace("_", " "))
                yield Input(id=key, compact=True, placeholder=_hint(key, DATA_FIELDS))
            yield Label("optimizer")
            yield Select([("sgd", "sgd"), ("adam", "adam")], id="optimizer", allow_blank=False, value="sgd",
                         compact=True, type_to_search=False)
            for key in ("lr", "momentum", "batch_size", "epochs", "seed", "threads", "ranks"):
                yield Label(LABELS.get(key, key.replace("_", " ")))
                yield Input(id=key, compact=True, placeholder=_hint(key, TRAIN_FIELDS))
        yield Label("backend", id="backend-label")
        with RadioSet(id="backend", compact=True):
            for s in self.archs:
                label = s.name if s.available else f"{s.name} — unavailable: {s.reason}"
                yield RadioButton(Text(label), value=s.name == "cpu-parallel", disabled=not s.available, name=s.name)
        yield Static(id="settings-status", markup=False)

    def on_mount(self) -> None:
        self.validate()

    def load(self, data: dict, train: dict) -> None:
        """Show a checked config's [data] and [train] tables (nncore.config.check_run accepted them)."""
        dataset = IDX_DIR if data.get("path") else data.get("dataset") or "quadrant"
        self.query_one("#dataset", Select).value = dataset if dataset in self.dataset_names else "quadrant"
        self.query_one("#path", Input).value = data.get("path") or ""
        self.query_one("#label", Input).value = "" if data.get("label") is None else str(data["label"])
        for fid, (section, key, _) in NUMERIC.items():
            value = (data if section == "data" else train).get(key)
            self.query_one(f"#{fid}", Input).value = "" if value is None else str(value)
        self.query_one("#optimizer", Select).value = train.get("optimizer", "sgd")
        self.set_arch(train.get("arch", "cpu-parallel"))
        self.validate()

    def set_arch(self, arch: str) -> str | None:
        """Choose ``arch`` if it is available here; returns it, or None."""
        for button in self.query(RadioButton):
            if button.name == arch and not button.disabled:
                button.value = True
                self._arch = arch
                return arch
        return None

    def arch(self) -> str:
        chosen = getattr(self, "_arch", None)
        if chosen is None:
            pressed = self.query_one("#backend", RadioSet).pressed_button
            chosen = pressed.name if pressed is not None else "cpu-parallel"
        return chosen

    def values(self, skip: frozenset = frozenset()) -> tuple[dict, dict]:
        """The [data] and [train] tables; raises ConfigError naming the first bad field (``.field``). The number
        fields in ``skip`` are taken as empty (their defaults), so that the fields after a bad one can be checked."""
        data, train = {}, {"arch": self.arch(), "optimizer": str(self.query_one("#optimizer", Select).value)}
        dataset = str(self.query_one("#dataset", Select).value)
        for fid, (section, key, kind) in NUMERIC.items():
            text = self.query_one(f"#{fid}", Input).value.strip()
            if fid in skip or fid == "momentum" and train["optimizer"] != "sgd":  # adam has no momentum setting
                continue
            if fid == "test_ratio" and dataset not in SYNTHETIC and dataset != IDX_DIR:
                continue  # (a named image set comes split; a CSV file is split by it)
            if text and not (fid in SYNTHETIC_ONLY and dataset not in SYNTHETIC):
                (data if section == "data" else train)[key] = _number(text, kind, section, key)
        if dataset == IDX_DIR:
            path = self.query_one("#path", Input).value.strip()
            if not path:
                raise ConfigError("data.path: give a directory of IDX files or a CSV file", field="data.path")
            data["path"] = str(Path(path).expanduser().absolute())
            label = self.query_one("#label", Input).value.strip()
            if label:
                data["label"] = label
        else:
            data["dataset"] = dataset
        cfg = RunConfig({}, data, train, source="settings")  # the same checks as a config file
        if cfg.train["ranks"] > 1 and (why := mpi_missing()):
            raise ConfigError(f"train.ranks {cfg.train['ranks']}: {why}", field="train.ranks")
        return ({k: v for k, v in cfg.data.items() if v != DATA_FIELDS[k][0] or k in data},
                {k: v for k, v in cfg.train.items() if v != TRAIN_FIELDS[k][0] or k in train})

    def _describe(self, data: dict, train: dict):
        """The dataset's DatasetInfo; a LayerlabError (field data.path or data.dataset) if it cannot be used;
        None while a CSV file is read in the background (``_read_table``), after which the form is checked again."""
        try:
            path, options = data.get("path"), {"test_ratio": data.get("test_ratio", 0.2), "seed": train.get("seed", 0),
                                                "label": data.get("label")}
            if is_table(path) and not tabular.is_loaded(path, **options):
                self._read_table(path, options)
                return None
            return describe(data.get("dataset"), path, samples=data.get("samples", 1000),
                            noise=data.get("noise", 0.0), test_ratio=options["test_ratio"], seed=options["seed"],
                            csv={"label": options["label"]})
        except LayerlabError as exc:
            if getattr(exc, "field", None) is None:
                exc.field = "data.path" if data.get("path") else "data.dataset"
            raise

    def _read_table(self, path: str, options: dict) -> None:
        """Read a CSV file in a thread (a large one takes seconds; the form stays live), once the path and label
        have stood still for a moment, one read at a time; then check the form again."""
        self._want = (path, options)
        if self._reading:
            return  # the read under way checks again when it ends
        if self._read_timer is not None:
            self._read_timer.stop()
        self._read_timer = self.set_timer(0.4, self._start_read)

    def _start_read(self) -> None:
        self._read_timer = None
        if self._want is None or self._reading:
            return
        path, options = self._want
        self._reading = True

        def read() -> None:
            try:
                tabular.load_csv(path, **options)
            except LayerlabError:
                pass  # kept with the load: the check that follows shows it
            self.app.call_from_thread(self._read_done)

        self.run_worker(read, thread=True, group="read-table")

    def _read_done(self) -> None:
        self._reading = False
        self.validate()

    def _bad_fields(self, first: str, why: str) -> dict[str, str]:
        """Every field that is bad on its own, with its reason, ``first`` (the one values() named, for ``why``)
        included: the form is checked again with the bad number fields left at their defaults until it passes or
        names no new one."""
        bad = {first: why}
        while first in NUMERIC:
            try:
                self.values(skip=frozenset(bad))
                break
            except ConfigError as err:
                first = (getattr(err, "field", None) or "").split(".")[-1]
                if not first.isidentifier() or first in bad:
                    break
                bad[first] = str(err).removeprefix("settings: ")
        return bad

    def _show_reason(self) -> None:
        """Each bad field's reason, a line each: the focused field's first where it is one of them, then the
        others in the form's order; past three, how many more are marked."""
        focused = getattr(self.app.focused, "id", None)
        first = self._reasons.get(focused, self.error)
        whys = [first, *(w for w in self._reasons.values() if w != first)]
        more = f"\n({len(whys) - 3} more marked)" if len(whys) > 3 else ""
        self.query_one("#settings-status", Static).update("\n".join(f"✗ {w}" for w in whys[:3]) + more)

    def on_descendant_focus(self) -> None:
        if self.error is not None and len(self._reasons) > 1:  # (moving to another bad field shows its reason)
            self._show_reason()

    def validate(self) -> bool:
        dataset = str(self.query_one("#dataset", Select).value)
        self.query_one("#path", Input).disabled = self.query_one("#label", Input).disabled = dataset != IDX_DIR
        for fid in SYNTHETIC_ONLY:
            self.query_one(f"#{fid}", Input).disabled = dataset not in SYNTHETIC
        self.query_one("#test_ratio", Input).disabled = dataset not in SYNTHETIC and dataset != IDX_DIR
        self.query_one("#momentum", Input).disabled = self.query_one("#optimizer", Select).value != "sgd"
        for widget in self.query(".error"):
            if widget.id != "settings-status":
                widget.remove_class("error")
        status = self.query_one("#settings-status", Static)
        data_error = None
        try:
            data, train = self.values()
            try:
                self.data = self._describe(data, train)
            except LayerlabError as exc:
                self.data, data_error = None, str(exc)
                raise
            if self.data is None:  # a CSV file being read
                self.error = f"reading {Path(data['path']).name}…"
                status.update(f"… {self.error}")
                status.remove_class("error")
                self.post_message(self.Changed(False, None, self.error))
                return False
        except LayerlabError as err:
            self.error = str(err).removeprefix("settings: ")
            field = (getattr(err, "field", None) or "").split(".")[-1]
            self._reasons = self._bad_fields(field, self.error) if field.isidentifier() else {}
            for name in self._reasons:  # every bad field, not only the first
                for widget in self.query(f"#{name}"):
                    widget.add_class("error")
            self._show_reason()
            status.add_class("error")
            self.post_message(self.Changed(False, None, data_error))
            return False
        self.error = None
        self._show_valid()
        self.post_message(self.Changed(True, self.data))
        return True

    def _show_valid(self) -> None:
        """The status of valid settings: the dataset, or why the network in the editor cannot train on it."""
        status = self.query_one("#settings-status", Static)
        shape = f"{self.data.name}: input {'x'.join(map(str, self.data.input_shape))}, {self.data.n_classes} classes"
        if self.misfit is not None:
            status.update(f"✗ the network does not fit {shape}: {self.misfit}")
            status.add_class("error")
        elif self.model_problem is not None:
            status.update(f"✓ settings are valid; {shape}\n✗ but the network is not (Model view, F1): "
                          f"{self.model_problem}")
            status.add_class("error")
        else:
            status.update(f"✓ settings are valid; {shape}")
            status.remove_class("error")

    def set_misfit(self, why: str | None, problem: str | None = None) -> None:
        """Why the network in the Model view cannot train on this dataset (its input or output width), or None,
        and what else is wrong with it (``problem``): the settings are valid, but this view should not say the
        run can go ahead."""
        self.misfit, self.model_problem = why, problem
        if self.error is None and self.data is not None:
            self._show_valid()

    @on(Input.Changed)
    @on(Select.Changed)
    def _changed(self) -> None:
        self.validate()

    @on(Select.Changed, "#dataset")
    def _path_next(self, event: Select.Changed) -> None:
        """Choosing "IDX dir or CSV file…" in the list moves the focus to the path, so what is typed next is the
        path (on the list, letters would be the app's shortcut keys). A config that sets it moves nothing."""
        if event.value == IDX_DIR and event.select.has_focus_within:
            self.call_after_refresh(self.query_one("#path", Input).focus)

    @on(RadioSet.Changed)
    def _arch_changed(self, event: RadioSet.Changed) -> None:
        self._arch = event.pressed.name
        self.validate()
