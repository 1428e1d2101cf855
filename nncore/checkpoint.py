"""Training checkpoints: everything a run needs to continue bit-identically, in one atomically written .npz.

A checkpoint holds the weights, the optimizer state, the position (epoch, samples done in it, global step),
this epoch's sample order, the shuffle RNG's state, the epoch's running loss sum and the run's totals, plus the
config it was made with. It is written with :func:`nncore.fileio.write_npz_atomic` (temporary file, fsync,
rename), so a process killed while writing leaves the previous checkpoint whole.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from .errors import ConfigError, DataError
from .fileio import read_npz, write_npz_atomic

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
    if not s.isdigit() or int(s) < 1:
        raise ConfigError(f"--checkpoint-every {text!r} must be N (steps) or Ne (epochs), N >= 1")
    return int(s), unit


def save(path, net, opt, pos: Position, order: np.ndarray | None, rng: np.random.Generator, config: dict) -> None:
    arrays = {f"weights/{k}": v for k, v in net.state_dict().items()}
    arrays.update({f"opt/{k}": np.asarray(v) for k, v in opt.state_dict().items()})
    arrays["order"] = np.asarray(order if order is not None else np.zeros(0), np.int32)
    meta = {"format": FORMAT, "position": pos.__dict__, "rng": rng.bit_generator.state, "config": config,
            "optimizer": opt.name}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    write_npz_atomic(path, arrays)


def load(path) -> dict:
    data = read_npz(path)
    try:
        meta = json.loads(bytes(data["meta"]).decode())
    except (KeyError, ValueError, UnicodeDecodeError):
        raise DataError(f"{path}: not a layerlab checkpoint (no readable meta record)") from None
    if meta.get("format") != FORMAT:
        raise DataError(f"{path}: checkpoint format {meta.get('format')!r}, this layerlab reads {FORMAT}")
    return {"weights": {k[8:]: v for k, v in data.items() if k.startswith("weights/")},
            "opt": {k[4:]: v for k, v in data.items() if k.startswith("opt/")},
            "order": data.get("order"), "position": Position(**meta["position"]), "rng": meta["rng"],
            "config": meta["config"], "optimizer": meta["optimizer"]}


def check_compatible(ckpt: dict, config: dict, path) -> None:
    """The run being resumed must train the same network on the same data in the same order."""
    old = ckpt["config"]
    for section, keys in (("model", None), ("data", None), ("train", ("batch_size", "seed", "shuffle", "optimizer",
                                                                       "lr", "momentum", "weight_decay"))):
        a, b = old.get(section, {}), config.get(section, {})
        for key in (keys or sorted(set(a) | set(b))):
            if a.get(key) != b.get(key):
                raise ConfigError(f"{path}: made with {section}.{key} = {a.get(key)!r}, this run has {b.get(key)!r}")
