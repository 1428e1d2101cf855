"""The one event schema of a training run, shared by the headless CLI (JSON lines) and the terminal app.

Each event is a frozen dataclass; ``to_json`` gives one line with an ``"event"`` field naming its type and
``"schema"`` its version, and :func:`from_json` turns the line back into the dataclass.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields

SCHEMA = 1


@dataclass(frozen=True)
class LayerTiming:
    """Mean time of one part of a training step over the sampled (synced) steps of an epoch.

    ``name`` is "layer i (Kind)" for layers, or "data", "loss", "optimizer". ``share`` is the part's fraction
    of the timed step. GFLOP/s is forward+backward FLOPs over forward+backward time (0 for parts with no
    FLOPs counted).
    """

    index: int  # layer index, -1 for the non-layer parts
    name: str
    fwd_ms: float
    bwd_ms: float
    share: float
    gflops: float


@dataclass(frozen=True)
class Event:
    kind = "event"

    def to_dict(self) -> dict:
        return {"event": self.kind, "schema": SCHEMA, **_clean(asdict(self))}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True)
class RunStarted(Event):
    kind = "run_started"
    config: dict  # the resolved model, data and train settings
    arch: str  # the arch actually in use, checked after ti.init
    threads: int
    device: str
    n_params: int
    layers: list  # summary rows: index, type, repr, out_shape, params, flops_fwd, flops_bwd (per sample)
    train_samples: int
    test_samples: int
    steps_per_epoch: int
    setup_s: float  # runtime init, network build and data upload
    ranks: int = 1  # MPI ranks of a distributed run
    rank_devices: list = field(default_factory=list)  # "host: device" of each rank (distributed runs)


@dataclass(frozen=True)
class Step(Event):
    kind = "step"
    epoch: int  # 1-based
    step: int  # global step, 1-based
    loss: float
    samples_per_s: float
    comm_share: float | None = None  # distributed runs: rank 0's communication share of the epoch so far


@dataclass(frozen=True)
class EpochEnd(Event):
    kind = "epoch_end"
    epoch: int
    steps: int  # global step count at the end of this epoch
    train_loss: float
    test_loss: float
    test_acc: float
    samples_per_s: float
    epoch_s: float
    val_loss: float | None = None
    val_acc: float | None = None
    timings: list[LayerTiming] = field(default_factory=list)
    timed_steps: int = 0
    # Distributed runs: per rank {"rank", "host", "device", "samples", "epoch_s", "comm_s"}, and the share of
    # the ranks' time spent communicating (gradient all-reduce, staging and waiting for slower ranks).
    ranks: list = field(default_factory=list)
    comm_share: float | None = None
    first_step_s: float = 0.0  # wall time of step 1 when this epoch ran it (kernel compile included), else 0


@dataclass(frozen=True)
class RunFinished(Event):
    kind = "run_finished"
    epochs: int
    steps: int
    test_loss: float | None  # None: stopped before the first evaluation
    test_acc: float | None
    best_test_acc: float | None
    total_s: float  # wall time, paused time excluded
    samples_per_s: float | None  # training samples over training time, paused time excluded; None: no step ran
    stopped: bool  # True when a stop request ended the run early
    weights: str | None = None  # where the final weights were saved, if asked
    first_step_s: float = 0.0  # wall time of step 1, which includes compiling (or loading) the kernels


@dataclass(frozen=True)
class RunFailed(Event):
    kind = "run_failed"
    error: str  # one line
    exit_code: int  # 2 config/data, 3 diverged, 4 backend unavailable, 1 other
    epoch: int = 0
    step: int = 0


EVENT_TYPES = {cls.kind: cls for cls in (RunStarted, Step, EpochEnd, RunFinished, RunFailed)}


def _clean(value):
    """JSON has no NaN or infinity: write them as null (a diverged loss) rather than fail."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def from_dict(data: dict) -> Event:
    cls = EVENT_TYPES.get(data.get("event"))
    if cls is None:
        raise ValueError(f"unknown event {data.get('event')!r}")
    names = {f.name for f in fields(cls)}
    kwargs = {k: v for k, v in data.items() if k in names}
    if cls is EpochEnd:
        kwargs["timings"] = [LayerTiming(**t) for t in kwargs.get("timings", [])]
    return cls(**kwargs)


def from_json(line: str) -> Event:
    return from_dict(json.loads(line))
