"""Training checkpoints: everything a run needs to continue bit-identically, in one atomically written .npz.

A checkpoint holds the weights, the optimizer state, the position (epoch, samples done in it, global step),
this epoch's sample order, the shuffle RNG's state, the epoch's running loss sum and the run's totals, plus the
config it was made with. It is written with :func:`nncore.fileio.write_npz_atomic` (temporary file, fsync,
rename), so a process killed while writing leaves the previous checkpoint whole.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from .errors import ConfigError, DataError
from .fileio import read_npz, write_or_rescue
from .limits import INT32_MAX, clip

FORMAT = 1


@dataclass
class Position:
    epoch: int  # the epoch in progress (1-based)
    offset: int  # samples of that epoch already trained (the epoch's size: finished)
    step: int  # global steps done
    loss_sum: float  # the epoch's accumulated batch-size-weighted loss
    best_acc: float
    samples_done: int
    train_s: float


def parse_every(text) -> tuple[int, str]:
    """``"500"`` -> (500, "steps"); ``"2e"``, ``"2epoch"`` or ``"2epochs"`` -> (2, "epochs")."""
    s = str(text).strip().lower()
    unit = "steps"
    for suffix in ("epochs", "epoch", "e"):
        if s.endswith(suffix):
            s, unit = s[: -len(suffix)], "epochs"
            break
    else:
        for suffix in ("steps", "step", "s"):
            if s.endswith(suffix):
                s = s[: -len(suffix)]
                break
    # (the length first: int() raises ValueError past 4,300 digits; the text is quoted clipped)
    if not (s.isascii() and s.isdigit()) or len(s.lstrip("0")) > 10 or not 1 <= int(s) <= INT32_MAX:
        raise ConfigError(f"--checkpoint-every: {clip(str(text))!r} must be N (steps) or Ne (epochs), N >= 1")
    return int(s), unit


def save(path, net, opt, pos: Position, order: np.ndarray | None, rng: np.random.Generator, config: dict) -> None:
    arrays = {f"weights/{k}": v for k, v in net.state_dict().items()}
    arrays.update({f"opt/{k}": np.asarray(v) for k, v in opt.state_dict().items()})
    arrays["order"] = np.asarray(order if order is not None else np.zeros(0), np.int32)
    meta = {"format": FORMAT, "position": pos.__dict__, "rng": rng.bit_generator.state, "config": config,
            "optimizer": opt.name}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    write_or_rescue(path, lambda fh: np.savez(fh, **arrays), "the checkpoint")


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= INT32_MAX


def _real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# Position's fields and what each must hold: a checkpoint's numbers steer kernels, so none is taken on trust.
_POSITION = {"epoch": (lambda v: _int(v) and v >= 1, "an integer >= 1"),
             "offset": (_int, "a non-negative 32-bit integer"), "step": (_int, "a non-negative 32-bit integer"),
             "loss_sum": (_real, "a finite number"), "best_acc": (lambda v: _real(v) and 0 <= v <= 1, "in [0, 1]"),
             "samples_done": (lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 2**53,
                              "a non-negative integer below 2**53"),
             "train_s": (lambda v: _real(v) and v >= 0, "a finite number >= 0")}


def load(path) -> dict:
    """Read and check a checkpoint's structure (each field's type and range); what it must match in the run
    (the network, the dataset's size) is checked by :func:`check_against`."""
    data = read_npz(path)
    try:
        meta = json.loads(bytes(data["meta"]).decode())
    except (KeyError, ValueError, UnicodeDecodeError, TypeError, RecursionError):
        raise DataError(f"{path}: not a layerlab checkpoint (no readable meta record)") from None
    if not isinstance(meta, dict):
        raise DataError(f"{path}: not a layerlab checkpoint (its meta record is not an object)")
    if meta.get("format") != FORMAT:
        raise DataError(f"{path}: checkpoint format {meta.get('format')!r}, this layerlab reads {FORMAT}")
    pos = meta.get("position")
    if not isinstance(pos, dict) or set(pos) != set(_POSITION):
        raise DataError(f"{path}: position must hold exactly {', '.join(_POSITION)}")
    for name, (ok, allowed) in _POSITION.items():
        if not ok(pos[name]):
            raise DataError(f"{path}: position.{name} = {pos[name]!r} must be {allowed}")
    for name, kind in (("rng", dict), ("config", dict), ("optimizer", str)):
        if not isinstance(meta.get(name), kind):
            raise DataError(f"{path}: {name} is missing or not {'an object' if kind is dict else 'a string'}")
    for section in ("model", "data", "train"):
        if not isinstance(meta["config"].get(section, {}), dict):
            raise DataError(f"{path}: config.{section} must be an object")
    order = data.get("order")
    if order is None or order.ndim != 1 or order.dtype.kind not in "iu":
        raise DataError(f"{path}: order must be a 1-D integer array")
    return {"weights": {k[8:]: v for k, v in data.items() if k.startswith("weights/")},
            "opt": {k[4:]: v for k, v in data.items() if k.startswith("opt/")},
            "order": order, "position": Position(**pos), "rng": meta["rng"],
            "config": meta["config"], "optimizer": meta["optimizer"]}


def check_against(ckpt: dict, path, n_samples: int, opt, epochs: int, batch: int = 1) -> None:
    """The checkpoint's indices against this run: the sample order must be a permutation of the dataset's
    ``n_samples`` (or empty: unshuffled), the position inside it, the optimizer state the optimizer's size."""
    pos, order = ckpt["position"], ckpt["order"]
    if pos.offset > n_samples:
        raise DataError(f"{path}: position.offset {pos.offset} is past the dataset's {n_samples} training samples")
    if pos.epoch > epochs + 1:
        raise DataError(f"{path}: position.epoch {pos.epoch} is past this run's {epochs} epochs")
    to_run = max(epochs - pos.epoch + 1, 0) * -(-n_samples // batch)
    if pos.step + to_run > INT32_MAX:  # the step count reaches the kernels as a 32-bit integer
        raise DataError(f"{path}: position.step {pos.step} and the {to_run} steps still to run pass the "
                        f"kernels' 32-bit range")
    if len(order) not in (0, n_samples):
        raise DataError(f"{path}: order has {len(order)} entries, the dataset {n_samples} training samples")
    if len(order) and not np.array_equal(np.sort(order), np.arange(n_samples)):
        raise DataError(f"{path}: order is not a permutation of the {n_samples} training samples")
    if ckpt["optimizer"] != opt.name:
        raise DataError(f"{path}: made with optimizer {ckpt['optimizer']!r}, this run uses {opt.name!r}")
    want = set(opt.state_names) | {"steps"}
    if set(ckpt["opt"]) != want:
        raise DataError(f"{path}: optimizer state must hold exactly {', '.join(sorted(want))}")
    for name in opt.state_names:
        arr = ckpt["opt"][name]
        if arr.shape != (max(opt.n_params, 1),) or arr.dtype.kind != "f" or not np.isfinite(arr).all():
            raise DataError(f"{path}: optimizer state {name} must be {max(opt.n_params, 1)} finite floats, "
                            f"got shape {arr.shape} of {arr.dtype}")
    steps = ckpt["opt"]["steps"]
    if steps.shape != () or steps.dtype.kind not in "iu" or not 0 <= int(steps) <= INT32_MAX:
        raise DataError(f"{path}: optimizer state steps must be one non-negative integer")


def check_compatible(ckpt: dict, config: dict, path) -> None:
    """The run being resumed must train the same network on the same data in the same order."""
    old = ckpt["config"]
    for section, keys in (("model", None), ("data", None), ("train", ("batch_size", "seed", "shuffle", "optimizer",
                                                                       "lr", "momentum", "weight_decay"))):
        a, b = old.get(section, {}), config.get(section, {})
        for key in (keys or sorted(set(a) | set(b))):
            if a.get(key) != b.get(key):
                raise ConfigError(f"{path}: made with {section}.{key} = {a.get(key)!r}, this run has {b.get(key)!r}")
