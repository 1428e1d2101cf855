"""Run configuration: a TOML file's ``[model]``, ``[data]`` and ``[train]`` tables, validated, plus overrides.

Every bad value is a :class:`ConfigError` naming the field (``train.lr``) and the file. Defaults fill what a
file leaves out; ``model.input`` may be left out, and is then taken from the dataset.
"""
from __future__ import annotations

import copy
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ConfigError, DataError
from .limits import (BIG_DIGITS, CONFIG_BYTES, CONFIG_DEPTH, INT32_MAX, MAX_THREADS, clip, depth, printable,
                     regular_file)
from .runtime import ARCHS

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

CONFIG_DIR = Path(__file__).resolve().parent.parent / "assets" / "configs"

# name -> (default, type check, description of what is allowed)
_INT = (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "a positive integer")
_NONNEG_INT = (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "a non-negative integer")
_POS = (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0,
        "a finite number > 0")
_NONNEG = (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0,
           "a finite number >= 0")
_FRAC = (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1, "a number in [0, 1)")
_OPEN = (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1, "a number in (0, 1)")
_UNIT = (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1, "a number in [0, 1]")
_BOOL = (lambda v: isinstance(v, bool), "true or false")
_STR = (lambda v: isinstance(v, str) and v != "", "a non-empty string")
_THREADS = (lambda v: _INT[0](v) and v <= MAX_THREADS, f"a whole number from 1 to {MAX_THREADS:,}")
OPTIMIZER_NAMES = ("sgd", "adam")  # nncore.optim.OPTIMIZERS, named here so that checking a config loads no kernels
_OPTIMIZER = (lambda v: isinstance(v, str) and v.lower() in OPTIMIZER_NAMES, "one of " + ", ".join(OPTIMIZER_NAMES))

TRAIN_FIELDS = {
    "epochs": (5, _INT), "batch_size": (64, _INT), "lr": (0.1, _POS), "optimizer": ("sgd", _OPTIMIZER),
    "momentum": (0.0, _FRAC), "weight_decay": (0.0, _NONNEG),
    "seed": (0, _NONNEG_INT), "shuffle": (True, _BOOL), "arch": ("cpu-parallel", _STR),
    "threads": (None, _THREADS), "timing_every": (10, _INT), "log_every": (0, _NONNEG_INT),
    "ranks": (1, _INT),  # data-parallel MPI ranks (`layerlab train` starts mpiexec when above 1)
}
_COLUMN = (lambda v: (isinstance(v, str) and v != "") or (isinstance(v, int) and not isinstance(v, bool)),
           "a column name or index")
_HEADER = (lambda v: v == "auto" or isinstance(v, bool), '"auto", true or false')
_COLUMNS = (lambda v: isinstance(v, (list, tuple)) and all(_COLUMN[0](c) for c in v),
            "a list of column names or indices")
DATA_FIELDS = {
    "dataset": (None, _STR), "path": (None, _STR), "samples": (1000, _INT), "noise": (0.0, _UNIT),
    "test_ratio": (0.2, _OPEN), "val_ratio": (0.0, _FRAC), "limit": (None, _INT),
    # CSV files (path names a file): nncore.tabular
    "test_path": (None, _STR), "label": (None, _COLUMN), "header": ("auto", _HEADER), "categorical": (None, _COLUMNS),
}
CSV_FIELDS = ("test_path", "label", "header", "categorical")
NAME_CHARS = 64  # a config's ``name``: it heads the app's network pane and the run store's network column


@dataclass
class RunConfig:
    model: dict
    data: dict = field(default_factory=dict)
    train: dict = field(default_factory=dict)
    source: str = "<config>"
    name: str = ""  # the file's top-level ``name``; empty: the file's own name stands for it (``label``)
    description: str = ""

    @property
    def label(self) -> str:
        """What the network is called in the run store and the app: the config's ``name``, else its file's name
        without the suffix (its characters that are not printable, such as escape sequences and newlines a file's
        name may hold, as '?'; at most NAME_CHARS of them, as a ``name`` is held to)."""
        return self.name or printable(Path(self.source).stem)[:NAME_CHARS]

    def __post_init__(self):
        self.data = _fill("data", self.data, DATA_FIELDS, self.source)
        self.train = _fill("train", self.train, TRAIN_FIELDS, self.source)
        if self.train["optimizer"] != "sgd" and self.train["momentum"]:  # it would be silently ignored
            raise ConfigError(f"{self.source}: train.momentum = {self.train['momentum']} applies to sgd only; "
                              f"{self.train['optimizer']} has no momentum setting", field="train.momentum")
        if self.train["arch"] not in ARCHS:
            raise ConfigError(f"{self.source}: train.arch {self.train['arch']!r} is unknown; choose one of "
                              f"{', '.join(ARCHS)}", field="train.arch")

    def override(self, section: str, **values) -> "RunConfig":
        """A copy with the given fields replaced (None values are ignored)."""
        cfg = copy.deepcopy(self)
        target = getattr(cfg, section)
        target.update({k: v for k, v in values.items() if v is not None})
        if section == "train" and isinstance(values.get("optimizer"), str) and values["optimizer"].lower() != "sgd" \
                and values.get("momentum") is None:
            target.pop("momentum", None)  # the file's momentum was sgd's; switching optimizer drops it
        cfg.source = self.source
        cfg.__post_init__()
        return cfg

    def dataset_name(self) -> str | None:
        """The dataset named, or the default: the embedded image subset for image models, else quadrant."""
        if self.data["path"]:
            return None
        inp = self.model.get("input")
        image = isinstance(inp, (list, tuple)) and len(inp) == 3
        return self.data["dataset"] or ("fashion-subset" if image else "quadrant")

    def to_dict(self) -> dict:
        return {"model": self.model, "data": self.data, "train": self.train, "source": self.source}


def _as_written(value) -> str:
    """A config value as TOML and JSON write it (true, "sgd", [1, 2]), not as Python does (True, 'sgd'), cut to
    a line's part."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):  # (a TOML date or time)
        text = str(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _fill(section: str, given: dict, spec: dict, source: str) -> dict:
    if not isinstance(given, dict):
        raise ConfigError(f"{source}: [{section}] must be a table")
    unknown = sorted(set(given) - set(spec))
    if unknown:
        raise ConfigError(f"{source}: unknown field {section}.{unknown[0]} (allowed: {', '.join(spec)})",
                          field=f"{section}.{unknown[0]}")
    out = {}
    for name, (default, (check, allowed)) in spec.items():
        value = given.get(name, default)
        if value is None and default is not None:  # null (JSON) is not "the default": say what is wanted
            raise ConfigError(f"{source}: {section}.{name} = null must be {allowed}", field=f"{section}.{name}")
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT32_MAX:
            raise ConfigError(f"{source}: {section}.{name} = {value} is beyond the 32-bit range the engine uses",
                              field=f"{section}.{name}")
        if value is not None and not check(value):
            raise ConfigError(f"{source}: {section}.{name} = {_as_written(value)} must be {allowed}",
                              field=f"{section}.{name}")
        out[name] = value.lower() if name == "optimizer" else value
    return out


INT_STR_DIGITS = 4300  # int() refuses a longer decimal string with a ValueError (sys.get_int_max_str_digits)


class _Refused:
    """A JSON value refused where it stands (its text is not converted); said with its key path once the whole
    document is read (json's hooks do not know where they are)."""

    __slots__ = ("why",)

    def __init__(self, why: str):
        self.why = why


def _huge(text: str) -> str:
    digits = len(text.lstrip("+-"))
    return f"= {clip(text)} ({digits:,} digits) is far beyond the 32-bit range the engine uses"


def _json_int(text: str):
    """json's parse_int: past BIG_DIGITS digits, no int() (it raises ValueError past 4,300 of them)."""
    return int(text) if len(text.lstrip("-")) <= BIG_DIGITS else _Refused(_huge(text))


def _json_float(text: str):
    """json's parse_float: a number past float's range (1e400) is refused, as NaN and Infinity are, not read as
    infinity."""
    value = float(text)
    return value if math.isfinite(value) else _Refused(f"= {clip(text)} is beyond float's range, not a number "
                                                       "a config may hold")


def _json_constant(name: str) -> _Refused:
    """json's parse_constant (NaN, Infinity, -Infinity)."""
    return _Refused(f"= {name} is not a number a config may hold")


def _json_object(pairs: list) -> dict:
    """json's object_pairs_hook: a key given twice is refused (json keeps the last silently; TOML refuses it)."""
    out = {}
    for key, value in pairs:
        out[key] = _Refused("is given twice in its object (a key may be given once)") if key in out else value
    return out


def _key_path(path: str, key) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    part = key if key.isidentifier() else clip(json.dumps(key), 40)  # (a key may hold newlines or escapes)
    return f"{path}.{part}" if path else part


def _refused_value(doc: dict) -> tuple[str, str] | None:
    """The first value of a parsed config, in the file's order, refused where it stands: a _Refused JSON value
    or an integer of more than BIG_DIGITS digits (no field takes one, and quoting it whole would make a message
    of thousands of characters). Returns its key path (``train.epochs``) and the message. Iterative: the
    nesting is checked already, but a stack costs nothing."""
    stack = [(_key_path("", k), v) for k, v in reversed(list(doc.items()))]
    while stack:
        path, item = stack.pop()
        if isinstance(item, _Refused):
            return path, f"{path} {item.why}"
        if isinstance(item, int) and not isinstance(item, bool) and abs(item) >= 10**BIG_DIGITS:
            return path, f"{path} {_huge(str(item))}"
        if isinstance(item, dict):
            stack.extend((_key_path(path, k), v) for k, v in reversed(list(item.items())))
        elif isinstance(item, list):
            stack.extend((_key_path(path, i), v) for i, v in reversed(list(enumerate(item))))
    return None


def _toml_value_error(p, text: str, exc: ValueError) -> ConfigError:
    """tomllib's ValueError other than TOMLDecodeError: int() of an integer past 4,300 digits. Its line is
    found in the text (tomllib does not say it)."""
    if "Exceeds the limit" not in str(exc):
        return ConfigError(f"{p}: invalid TOML ({clip(str(exc), 80)})")
    m = re.search("[+-]?[0-9_]{%d,}" % (INT_STR_DIGITS + 1), text)
    if not m:
        return ConfigError(f"{p}: an integer of more than {INT_STR_DIGITS:,} digits, far beyond the 32-bit range "
                           "the engine uses")
    start = text.rfind("\n", 0, m.start()) + 1
    key = re.search(r"([\w\"'.-]+)\s*=\s*$", text[start:m.start()])  # the key the number is given to
    return ConfigError(f"{p}:{text.count(chr(10), 0, m.start()) + 1}: {clip(key.group(1), 40) + ' ' if key else ''}"
                       f"{_huge(m.group())}")


def network_name(text: str) -> str:
    """A name a config accepts, made from any text (a file's name when the app saves one): its printable
    characters, at most NAME_CHARS of them."""
    return "".join(c for c in text if c.isprintable()).strip()[:NAME_CHARS]


def load_config(path) -> RunConfig:
    """Read a run config; a bare name like ``cnn`` means ``assets/configs/cnn.toml``."""
    if not str(path).strip():  # (Path("") is ".", the current directory)
        names = ", ".join(sorted(c.stem for c in CONFIG_DIR.glob("*.toml")))
        raise ConfigError(f"the config's name is empty: give a config file or a preset ({names})")
    p = Path(path)
    here = os.path.lexists(p)  # (a symbolic link loop is there, though exists() says no: regular_file names it)
    if not here and not p.suffix and (CONFIG_DIR / f"{p}.toml").exists():
        p = CONFIG_DIR / f"{p}.toml"
    try:
        size = regular_file(p, "config file")
    except DataError as exc:
        if not here and not p.suffix and len(p.parts) == 1:  # a bare name: say which names there are
            names = ", ".join(sorted(c.stem for c in CONFIG_DIR.glob("*.toml")))
            raise ConfigError(f"{p}: no such file, nor a preset ({names})") from None
        raise ConfigError(str(exc)) from None
    if size > CONFIG_BYTES:
        raise ConfigError(f"{p}: {size:,} bytes is too large for a config file (at most {CONFIG_BYTES:,})")
    try:
        with open(p, "rb") as fh:
            # A byte-order mark (Windows editors write one) is not part of the document, as for CSV files.
            text = fh.read(CONFIG_BYTES + 1).decode("utf-8").removeprefix("\ufeff")
        if len(text) > CONFIG_BYTES:
            raise ConfigError(f"{p}: too large for a config file (at most {CONFIG_BYTES:,} bytes)")
        if p.suffix == ".json":  # what the app hands to `layerlab train` for a distributed run
            doc = json.loads(text, parse_constant=_json_constant, parse_int=_json_int, parse_float=_json_float,
                             object_pairs_hook=_json_object)
            if not isinstance(doc, dict):
                raise ConfigError(f"{p}: a config must be a JSON object")
        else:
            doc = tomllib.loads(text)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not UTF-8 text (byte {exc.start:,}); a config is a TOML or JSON file") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: invalid TOML ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{p}: invalid JSON ({exc})") from None
    except ConfigError:
        raise
    except ValueError as exc:  # (after the decode errors, which are ValueErrors too)
        raise _toml_value_error(p, text, exc) from None
    except RecursionError:
        raise ConfigError(f"{p}: nested too deeply (at most {CONFIG_DEPTH} levels)") from None
    if depth(doc) > CONFIG_DEPTH:
        raise ConfigError(f"{p}: nested too deeply (at most {CONFIG_DEPTH} levels)")
    refused = _refused_value(doc)
    if refused:
        raise ConfigError(f"{p}: {refused[1]}", field=refused[0])
    unknown = sorted(set(doc) - {"model", "data", "train", "name", "description"})
    if unknown:
        raise ConfigError(f"{p}: unknown table or field {unknown[0]!r} (allowed: model, data, train)")
    if "model" not in doc:
        raise ConfigError(f"{p}: missing [model] table")
    if not isinstance(doc["model"], dict):
        raise ConfigError(f"{p}: model = {_as_written(doc['model'])} must be a table ([model])", field="model")
    for key in ("name", "description"):
        value = doc.get(key, "")
        if not isinstance(value, str) or (key == "name" and len(value) > NAME_CHARS) \
                or not all(c.isprintable() for c in value):
            limit = f" of at most {NAME_CHARS} characters" if key == "name" else ""
            shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:36] + "…" + repr(value)[-1]
            raise ConfigError(f"{p}: {key} = {shown} must be one line of text{limit}", field=key)
    return RunConfig(doc["model"], doc.get("data", {}), doc.get("train", {}), source=str(p),
                     name=doc.get("name", "").strip(), description=doc.get("description", "").strip())


def is_conv2d(layer) -> bool:
    """Whether a layer of a model spec is a Conv2D (the layers whose filter count a sweep sets)."""
    return isinstance(layer, dict) and str(layer.get("type", "")).lower() == "conv2d"


def check_filters(model: dict, filters: list, what: str = "--filters") -> None:
    """ConfigError where filter counts are asked of a network with no Conv2D to set them on (each point would
    measure the same network)."""
    if any(f is not None for f in filters) and not any(map(is_conv2d, model.get("layers") or ())):
        raise ConfigError(f"{what} {','.join(str(f) for f in filters)}: the network has no Conv2D layer to set "
                          "them on (leave it out)")


def fit_model(model: dict, info) -> tuple[dict, list, object]:
    """The model spec with its input taken from the dataset where it names none, checked against the dataset
    (``info``: a :class:`nncore.data.DatasetInfo` or a loaded Dataset): input shape, loss, class count.
    Returns the spec, its layers and its loss; raises ConfigError naming the culprit."""
    from .network import _input_shape, check_spec

    model = dict(model)
    model.setdefault("input", list(info.input_shape))
    shape = _input_shape(model["input"])
    layers, loss = check_spec(model)
    if shape != tuple(info.input_shape):
        raise ConfigError(f"model.input {list(shape)} does not match dataset {info.name}'s {list(info.input_shape)}",
                          field="model.input", about_data=True)
    if loss is None:
        raise ConfigError("model.loss is missing (cross_entropy, bce or mse)", field="model.loss")
    try:
        only = getattr(info, "test_only", "")  # (a class the training rows lack is counted, and named)
        loss.check_classes(info.n_classes, f"dataset {info.name}", f" ({only})" if only else "")
    except ConfigError as exc:  # the output layer is the one to change
        raise ConfigError(str(exc), layer=len(layers) - 1, about_data=True) from None
    return model, layers, loss


def check_run(cfg: RunConfig):
    """Everything about a run that can be known without a backend or the data itself: the dataset exists and
    the network fits it. The CLI checks this before it starts a backend, the app before it opens a config or
    starts a run, so both refuse the same configs with the same message. Returns the DatasetInfo."""
    from .data import describe

    d = cfg.data
    try:
        info = describe(cfg.dataset_name(), d["path"], samples=d["samples"], noise=d["noise"],
                        test_ratio=d["test_ratio"], seed=cfg.train["seed"], limit=d["limit"],
                        csv={k: d[k] for k in CSV_FIELDS})
    except ConfigError as exc:  # a synthetic set's size or noise, which only the file sets: it is named too
        if exc.field in _FILE_ONLY_FIELDS:
            raise _from_file(cfg, exc) from None
        raise
    try:
        fit_model(cfg.model, info)
    except ConfigError as exc:  # a network read from a file: its error names the file too
        raise _from_file(cfg, exc) from None
    return info


_FILE_ONLY_FIELDS = ("data.samples", "data.noise", "data.test_ratio")  # (no command-line option sets them)


def _from_file(cfg: RunConfig, exc: ConfigError) -> ConfigError:
    """``exc`` with the config file named first, where the config was read from one that it does not name yet."""
    if Path(cfg.source).is_file() and not str(exc).startswith(cfg.source):
        return ConfigError(f"{cfg.source}: {exc}", exc.layer, exc.field, exc.about_data)
    return exc


def preset_configs() -> dict[str, Path]:
    """The configs shipped in assets/configs, by name."""
    return {p.stem: p for p in sorted(CONFIG_DIR.glob("*.toml"))}
