"""Sequential networks built from a plain spec, with shape inference, buffers, weights I/O and one train step.

A spec is ``{"input": [C, H, W] or [N], "layers": [{"type": "Linear", "out_features": 10}, ...],
"loss": "cross_entropy"}`` -- as a dict, or the ``[model]`` table of a TOML file. Every mistake in it is a
:class:`ConfigError` naming the layer index, the parameter and the value.

Buffers: one flat f32 buffer holds every parameter, one the gradients (so the optimizer and, later, an
Allreduce each touch one buffer). Activations live in a :class:`Workspace` made once per batch size and
reused; a training step launches kernels on them and moves nothing between host and device.
"""
from __future__ import annotations

import inspect
import math
import time

import numpy as np

from . import runtime
from .errors import ConfigError, DataError, StaleBufferError
from .fileio import read_npz, write_npz_atomic
from .fusion import plan
from .graph import StepGraphs
from .layers import LAYER_TYPES, Flatten, Layer, MaxPool2D, ReLU, init_params
from .limits import check_index
from .kernels import gemm_cuda as K_tiled
from .kernels import on_cpu
from .losses import Loss
from .optim import SGD
from .runtime import ti

ALL = ("all",)  # ``_update``'s applied: the step's kernels already ran the optimizer on every parameter
# The most training steps one launch runs (``Sequential.train_steps``): the trainer's and the bench's loops
# cut their runs of plain steps to this, and to TOGETHER_S seconds of steps (a stop or pause waits for a
# launch to end). A launch's hand-off to the thread pool and the step's recording, about 0.2-0.45 ms on a
# 2-core VM, are then paid once for the run (docs/LOG.md, "several steps in one launch", "launches of 32").
STEPS_A_LAUNCH = 32
TOGETHER_S = 0.1


def launch_steps(step_s: float) -> int:
    """The most plain steps one launch runs, given a step's time in seconds."""
    return min(STEPS_A_LAUNCH, max(1, int(TOGETHER_S / max(step_s, 1e-9))))


def _weights_f32(value, where: str) -> np.ndarray:
    """A tensor of weights as flat float32; DataError for strings and the like, NaN, inf or values past f32's
    range (training from those fails later with a misleading "non-finite loss")."""
    arr = np.asarray(value)
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
            or arr.dtype == np.bool_):
        raise DataError(f"{where} holds {arr.dtype} values, not real numbers")
    with np.errstate(over="ignore", invalid="ignore"):
        out = arr.astype(np.float32).ravel()
    if not np.isfinite(out).all():
        beyond = np.isfinite(arr).all()
        raise DataError(f"{where} holds " + ("values beyond float32's range" if beyond else "NaN or inf"))
    return out


def _build_layer(index: int, raw, in_shape: tuple[int, ...]) -> Layer:
    if not isinstance(raw, dict):
        raise ConfigError(f"layer {index}: expected a table such as {{type = \"Linear\", out_features = 10}}, "
                          f"got {raw!r}", layer=index)
    kind = raw.get("type")
    if not isinstance(kind, str):
        raise ConfigError(f"layer {index}: missing 'type' (one of {', '.join(c.kind for c in LAYER_TYPES.values())})",
                          layer=index)
    cls = LAYER_TYPES.get(kind.lower())
    if cls is None:
        raise ConfigError(f"layer {index}: unknown type {kind!r}; choose one of "
                          f"{', '.join(c.kind for c in LAYER_TYPES.values())}", layer=index)
    args = {k: v for k, v in raw.items() if k != "type"}
    unknown = sorted(set(args) - set(cls.keys))
    if unknown:
        allowed = ", ".join(cls.keys) or "none"
        raise ConfigError(f"layer {index} ({cls.kind}): unknown parameter {unknown[0]!r} (allowed: {allowed})",
                          layer=index)
    params = inspect.signature(cls.__init__).parameters.values()
    missing = [p.name for p in params if p.default is inspect.Parameter.empty
               and p.name not in ("self", "index", "in_shape") and p.name not in args]
    if missing:
        raise ConfigError(f"layer {index} ({cls.kind}): missing parameter {missing[0]!r}", layer=index)
    return cls(index, in_shape, **args)


def _input_shape(value) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if (not isinstance(value, (list, tuple)) or len(value) not in (1, 3)
            or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in value)):
        raise ConfigError(f"input {value!r} must be [features] or [channels, height, width] of positive integers",
                          field="model.input")
    return tuple(value)


def build_layers(layers, input_shape) -> tuple[tuple[int, ...], list[Layer]]:
    """Shape inference and validation only: no Taichi runtime, no buffers (the app calls this live)."""
    if not isinstance(layers, list) or not layers:
        raise ConfigError("layers must be a non-empty list of layer tables", field="model.layers")
    shape = _input_shape(input_shape)
    built = []
    for i, raw in enumerate(layers):
        built.append(_build_layer(i, raw, shape))
        shape = built[-1].out_shape
        check_index(math.prod(shape), f"layer {i} ({built[-1].kind}): its output per sample", layer=i)
        for name, pshape in built[-1].param_shapes().items():
            check_index(math.prod(pshape), f"layer {i} ({built[-1].kind}): its {name}", layer=i)
    return _input_shape(input_shape), built


def check_spec(spec: dict) -> tuple[list[Layer], Loss | None]:
    """Validate a model spec without allocating anything; raises ConfigError at the first problem."""
    if not isinstance(spec, dict):
        raise ConfigError(f"the model spec must be a table, got {type(spec).__name__}")
    unknown = sorted(set(spec) - {"input", "layers", "loss"})
    if unknown:
        raise ConfigError(f"model: unknown field {unknown[0]!r} (allowed: input, layers, loss)")
    if "input" not in spec:
        raise ConfigError("model: missing field 'input' (e.g. input = [1, 28, 28])", field="model.input")
    _, layers = build_layers(spec.get("layers"), spec["input"])
    loss = spec.get("loss")
    try:
        return layers, (Loss(loss, layers[-1].out_shape) if loss is not None else None)
    except ConfigError as exc:  # a loss that does not fit the output: the last layer is the one to change
        raise ConfigError(str(exc), layer=None if exc.field else len(layers) - 1, field=exc.field) from None


def _check_batch_index(input_shape, layers: list[Layer], batch: int) -> None:
    """The batch's widest buffer (the input or a layer's output, times the batch) within 32-bit indices."""
    widest = max(math.prod(s) for s in [tuple(input_shape)] + [l.out_shape for l in layers])
    check_index(batch * widest, f"batch size {batch} times the widest layer's {widest:,} values")


def check_batch(spec: dict, batch: int) -> None:
    """A batch size the network's buffers can be indexed at (32-bit indices), checked from the spec alone, so
    that a grid of runs refuses a bad one before it measures any."""
    layers, _ = check_spec(spec)
    _check_batch_index(spec["input"], layers, batch)


def needs_input_grad(layers: list[Layer]) -> list[bool]:
    """Whether each layer must compute its input gradient: only if some layer before it has parameters."""
    out, seen = [], False
    for layer in layers:
        out.append(seen)
        seen = seen or bool(layer.param_shapes())
    return out


def summarize(layers: list[Layer], batch: int = 1) -> list[dict]:
    """One row per layer: index, type, output shape, parameters, forward and backward FLOPs."""
    rows = []
    for i, (layer, need) in enumerate(zip(layers, needs_input_grad(layers))):
        fwd, bwd = layer.flops(batch, need_dinp=need)
        n = sum(int(math.prod(s)) for s in layer.param_shapes().values())
        rows.append({"index": i, "type": layer.kind, "repr": repr(layer), "out_shape": list(layer.out_shape),
                     "params": n, "flops_fwd": fwd, "flops_bwd": bwd})
    return rows


def _buffer(dtype: str, shape: tuple):
    """A scratch buffer: "f32", "i32", "v16" or "vi8" (16-wide f32 or i8 vectors, for the CPU's vectorised
    kernels)."""
    if dtype in ("v16", "vi8"):
        return ti.Vector.ndarray(16, ti.f32 if dtype == "v16" else ti.i8, shape=shape)
    return ti.ndarray({"f32": ti.f32, "i32": ti.i32}[dtype], shape=shape)


class Workspace:
    """Every buffer one batch size needs: activations, their gradients, part scratch, labels, losses.

    ``acts[i]`` is layer i's input (``acts[-1]`` the logits) and ``dacts[i]`` its gradient. Inside a fused part
    the intermediate activations are never stored: their entries are None.
    """

    def __init__(self, net: "Sequential", batch: int):
        self.batch = batch
        size = lambda shape: int(math.prod(shape))  # noqa: E731
        n = len(net.layers)
        inner = {k for part in net.parts for k in range(part.first + 1, part.last + 1)}
        special = {part.last + 1: buf for part in net.parts if (buf := part.out_buffer(batch))}
        self.acts: list = [ti.ndarray(ti.f32, shape=(batch, size(net.input_shape)))]
        for i, layer in enumerate(net.layers):
            if i + 1 in inner:
                self.acts.append(None)
            elif layer.aliases_input:
                self.acts.append(self.acts[i])
            else:
                self.acts.append(_buffer(*special[i + 1]) if i + 1 in special
                                 else ti.ndarray(ti.f32, shape=(batch, size(layer.out_shape))))
        self.dacts: list = [None] * (n + 1)
        self.dacts[n] = ti.ndarray(ti.f32, shape=(batch, size(net.out_shape)))
        for i in range(n - 1, -1, -1):
            if i in inner:
                continue
            if not net.need_dinp[i]:
                # No input gradient here (no parameters before this layer): the kernel gets the activation
                # itself as a placeholder it never writes.
                self.dacts[i] = self.acts[i]
            elif net.layers[i].aliases_input:
                self.dacts[i] = self.dacts[i + 1]
            else:
                self.dacts[i] = ti.ndarray(ti.f32, shape=(batch, size(net.layers[i].in_shape)))
        self.scratch: list = [{} for _ in range(n)]
        for part in net.parts:
            self.scratch[part.first] = {k: _buffer(dt, s) for k, (dt, s)
                                        in part.scratch_shapes(batch, net.need_dinp[part.first]).items()}
        self.labels = ti.ndarray(ti.i32, shape=(batch,))
        self.loss = net.loss  # to check labels that come in through ``load``
        self.losses = ti.ndarray(ti.f32, shape=(batch,))
        self.loss_out = ti.ndarray(ti.f32, shape=(1,))
        self.correct = ti.ndarray(ti.i32, shape=(1,))

    @property
    def x(self):
        return self.acts[0]

    @property
    def logits(self):
        return self.acts[-1]

    def load(self, x: np.ndarray, y: np.ndarray | None = None) -> None:
        """Copy a host batch in (tests, interop); training gathers batches on the device instead."""
        self.acts[0].from_numpy(np.ascontiguousarray(x, np.float32).reshape(self.batch, -1))
        if y is not None:
            if self.loss is not None:
                self.loss.check_labels(y)  # out-of-range labels would make the loss kernels read out of bounds
            self.labels.from_numpy(np.ascontiguousarray(y, np.int32))

    def loss_value(self) -> float:
        """The last batch's mean loss (one reduce launch and one scalar to the host)."""
        from .kernels.loss import loss_sum

        loss_sum(self.loss_out, self.losses)
        return float(self.loss_out.to_numpy()[0])


class Sequential:
    """Layers in order, built and shape-checked from a spec; owns parameter, gradient and batch buffers."""

    def __init__(self, layers: list, input_shape, loss: str | None = None, seed: int = 0):
        self.input_shape, self.layers = build_layers(layers, input_shape)
        self.need_dinp = needs_input_grad(self.layers)
        self.out_shape = shape = self.layers[-1].out_shape
        self.loss = Loss(loss, shape) if loss is not None else None
        self.n_params = 0
        for layer in self.layers:
            for name, pshape in layer.param_shapes().items():
                layer.offsets[name] = self.n_params
                self.n_params += int(math.prod(pshape))
        check_index(self.n_params, "the network's parameter count")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"seed {seed!r} must be a non-negative integer")
        self.seed = seed
        runtime.require()
        # Parameters, gradients, two optimizer slots (Adam) and a host copy while initialising: 5 x P floats.
        runtime.check_memory(5 * 4 * self.n_params, f"a network of {self.n_params:,} parameters")
        self._alloc(self.initial_state(seed))

    # -- construction -----------------------------------------------------------------------------------
    @classmethod
    def from_spec(cls, spec: dict, seed: int = 0) -> "Sequential":
        check_spec(spec)
        return cls(spec.get("layers"), spec["input"], spec.get("loss"), seed=seed)

    @classmethod
    def from_toml(cls, path, seed: int = 0) -> "Sequential":
        """The ``[model]`` table of a run config (see :mod:`nncore.config`)."""
        from .config import load_config

        return cls.from_spec(load_config(path).model, seed=seed)

    def spec(self) -> dict:
        out = {"input": list(self.input_shape), "layers": [layer.spec() for layer in self.layers]}
        if self.loss is not None:
            out["loss"] = self.loss.name
        return out

    def initial_state(self, seed: int) -> dict[str, np.ndarray]:
        """Seeded initial weights, computed on the host (bit-identical on every arch)."""
        rng = np.random.Generator(np.random.PCG64(seed))
        state = {}
        for i, layer in enumerate(self.layers):
            # He init when the next layer that changes values is a ReLU (Flatten and pooling pass through).
            nxt = next((l for l in self.layers[i + 1:] if not isinstance(l, (Flatten, MaxPool2D))), None)
            for name, arr in init_params(layer, rng, isinstance(nxt, ReLU)).items():
                state[f"{i}.{name}"] = arr
        return state

    def _alloc(self, state: dict[str, np.ndarray]) -> None:
        runtime.require()
        self._gen = runtime.generation()
        self.parts = plan(self.layers, self.need_dinp)  # which layers run fused depends on the backend
        self.graphs = StepGraphs()  # on unless LAYERLAB_GRAPHS=0
        n = max(self.n_params, 1)
        self._params = ti.ndarray(ti.f32, shape=(n,))
        # (workspace, parts, stale): the parts whose W panels in that workspace hold W as it is now, and of
        # them those whose W in params is out of date (``_sync``); None: no panels are known to be current.
        self._packed = None
        self.grads = ti.ndarray(ti.f32, shape=(n,))
        self.grads.fill(0.0)
        self._workspaces: dict[int, Workspace] = {}
        self.load_state_dict(state)

    @property
    def params(self):
        """The flat parameter buffer (PyTorch's order), brought up to date. Handing it out counts as a write:
        the CPU's fused SGD step keeps the wide Linears' W as panels for the next forward (``_packed``), and
        after anyone else may have changed W, the next forward packs them again."""
        self._sync()
        self._packed = None
        return self._params

    def params_to_read(self):
        """The flat parameter buffer brought up to date, for reading only: unlike ``params`` it keeps W packed
        for the next step, so a write through it would go unseen."""
        self._sync()
        return self._params

    def _sync(self) -> None:
        """Copy back to params every W that a step left in its workspace's panels alone."""
        if self._packed is not None and self._packed[2]:
            ws, parts, stale = self._packed
            for k in sorted(stale):
                self.parts[k].sync_weight(ws, self._params)
            self._packed = (ws, parts, frozenset())

    def _panels_for(self, ws: Workspace) -> frozenset:
        """The parts whose W panels in ``ws`` hold W as it is now (after bringing params up to date where another
        workspace's panels hold it)."""
        if self._packed is None:
            return frozenset()
        if self._packed[0] is not ws:
            self._sync()
            return frozenset()
        return self._packed[1]

    def _begin_step(self, ws: Workspace, applied: list) -> tuple[frozenset, frozenset]:
        """Before a step on ``ws`` that applies SGD to the W ranges ``applied``: returns those parts, and of them
        the ones that leave their new W in the panels alone (those that form no input gradient, which would read
        W from params). params is brought up to date where this step will not keep W in the panels, and the
        parts' panels in ``ws`` are packed now, outside the step's graph: every step then runs the same graph,
        whose forward reads the panels as they are (a step that packed them itself would be another graph to
        build, at step 1 and again after each change of workspace)."""
        parts = frozenset(k for k, p in enumerate(self.parts) if p.sgd_range() in applied and p.has_panels())
        keep = frozenset(k for k in parts if not self.need_dinp[self.parts[k].first])
        current = self._packed is not None and self._packed[0] is ws and parts <= self._packed[1]
        if not current or not self._packed[2] <= keep:
            self._sync()
        if parts and not current:
            for k in sorted(parts):
                self.parts[k].pack_weight(ws, self._params)
            self._packed = (ws, parts, frozenset())
        return parts, keep

    def _check_live(self) -> None:
        if self._gen != runtime.generation():
            raise StaleBufferError("the network's buffers belong to a Taichi runtime that was re-initialised; "
                                   "move it with net.to(arch) instead of calling runtime.init directly")

    def to(self, arch: str, threads: int | None = None, optimizer=None) -> "Sequential":
        """Re-initialise Taichi on ``arch`` and move the weights (and optimizer state) through host copies."""
        self._check_live()
        state = self.state_dict()
        opt_state = optimizer.state_dict() if optimizer is not None else None
        runtime.init(arch, threads)
        self._alloc(state)
        if optimizer is not None:
            optimizer.load_state_dict(opt_state)
        return self

    # -- shapes and cost ----------------------------------------------------------------------------------
    def param_names(self) -> dict[str, tuple[int, ...]]:
        """PyTorch nn.Sequential state_dict names -> shapes, in order."""
        return {f"{i}.{n}": s for i, layer in enumerate(self.layers) for n, s in layer.param_shapes().items()}

    def summary(self, batch: int = 1) -> list[dict]:
        return summarize(self.layers, batch)

    # -- buffers and the training step ---------------------------------------------------------------------
    def workspace(self, batch: int) -> Workspace:
        """The buffers for ``batch``, made on first use and reused after."""
        self._check_live()
        if batch not in self._workspaces:
            if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
                raise ConfigError(f"batch size {batch!r} must be a positive integer")
            _check_batch_index(self.input_shape, self.layers, batch)
            for part in self.parts:
                for name, (_, shape) in part.scratch_shapes(batch, self.need_dinp[part.first]).items():
                    check_index(math.prod(shape), f"batch size {batch}: layer {part.first}'s {name} buffer")
            runtime.check_memory(self.workspace_bytes(batch), f"batch size {batch} with this network")
            self._workspaces[batch] = Workspace(self, batch)
        return self._workspaces[batch]

    def workspace_bytes(self, batch: int) -> int:
        """An upper bound of what :meth:`workspace` allocates for ``batch``: every layer's output and input
        gradient (counted even where they are shared), labels and losses, and every part's scratch buffers as the
        part declares them for the current backend (f32/i32 4 bytes, v16 64 bytes, vi8 16 bytes an element)."""
        per_sample = math.prod(self.input_shape) + sum(2 * math.prod(l.out_shape) + 2 * math.prod(l.in_shape)
                                                        for l in self.layers)
        scratch = sum(math.prod(shape) * {"v16": 64, "vi8": 16}.get(dtype, 4)
                      for part in self.parts
                      for dtype, shape in part.scratch_shapes(batch, self.need_dinp[part.first]).values())
        return 4 * batch * (per_sample + 8) + scratch

    def forward(self, ws: Workspace, with_loss: bool = False):
        """The logits of the batch in ``ws``; ``with_loss`` (where ``_loss_in_forward``): the last part's kernel
        also forms the loss and its gradient, as ``loss_grad`` would."""
        self._check_live()
        packed = self._panels_for(ws)
        last = len(self.parts) - 1
        for k, part in enumerate(self.parts):
            part.forward(ws, self._params, k in packed, self.loss if with_loss and k == last else None)
        return ws.logits

    def _loss_in_forward(self, batch: int) -> bool:
        """Whether a step on ``batch`` samples forms the loss in the last part's forward kernel (CUDA: a last
        Linear of few outputs, nncore.fusion.Part.forms_loss, on at most gemm_cuda.LOSS_JOIN_MAX_BATCH samples):
        one kernel fewer a step."""
        return (self.loss is not None and batch <= K_tiled.LOSS_JOIN_MAX_BATCH and bool(self.parts)
                and self.parts[-1].forms_loss())

    def _stepped(self, ws: Workspace, parts: frozenset, keep: frozenset) -> None:
        """After a step on ``ws`` whose backward applied SGD to the W of ``parts`` (``_begin_step``): their panels
        in ``ws`` now hold the new W (gemm_cpu.linear_dweight), those of ``keep`` there alone, and every other
        workspace's panels are out of date."""
        self._packed = (ws, parts, keep) if parts else None

    def loss_grad(self, ws: Workspace) -> None:
        """Per-sample losses and d(loss)/d(logits) into ``ws``."""
        if self.loss is None:
            raise ConfigError("the network has no loss; give one in the spec (loss = \"cross_entropy\")")
        self.loss.forward_backward(ws.losses, ws.dacts[-1], ws.logits, ws.labels)

    def backward(self, ws: Workspace, sgd=None, keep: frozenset = frozenset(), tail=None) -> None:
        """Gradients of every parameter into ``self.grads`` (overwritten, not accumulated); with ``sgd``
        (optim.SGD.fused()), SGD's step applied instead to the W ranges of ``_sgd_applied``; the parts in ``keep``
        (``_begin_step``) leave their new W in the panels alone. ``tail`` (``_sgd_tail``: (k, SGD's fused())): part
        k's backward, the step's last kernel, also runs SGD's step on every parameter."""
        for k in range(len(self.parts) - 1, -1, -1):
            part = self.parts[k]
            part.backward(ws, self._params, self.grads, self.need_dinp[part.first], sgd, k in keep,
                          tail[1] if tail is not None and k == tail[0] else None)

    def timed_step(self, ws: Workspace, optimizer, gather, reduce=None) -> dict[str, np.ndarray | float]:
        """One training step with a device sync after each part: seconds for ``gather()`` (the batch), each
        part's forward and backward, the loss, ``reduce()`` (the gradient all-reduce of a distributed run, if
        given) and the optimizer. For per-layer timing on sampled steps."""
        sync, now, n = runtime.sync, time.perf_counter, len(self.parts)
        fwd, bwd = np.zeros(n), np.zeros(n)
        sync()
        t0 = now()
        gather()
        sync()
        t = {"data": (t1 := now()) - t0}
        applied = self._sgd_applied(optimizer, reduce)  # as train_step: the same kernels, timed part by part
        parts, keep = self._begin_step(ws, applied)
        packed = self._panels_for(ws)
        for k, part in enumerate(self.parts):
            part.forward(ws, self._params, k in packed)
            sync()
            fwd[k] = (t2 := now()) - t1
            t1 = t2
        self.loss_grad(ws)
        sync()
        t["loss"] = (t2 := now()) - t1
        t1 = t2
        sgd = optimizer.fused() if applied else None
        tail = self._sgd_tail(optimizer, reduce)
        for k in range(n - 1, -1, -1):
            part = self.parts[k]
            part.backward(ws, self._params, self.grads, self.need_dinp[part.first], sgd, k in keep,
                          tail[1] if tail is not None and k == tail[0] else None)
            sync()
            bwd[k] = (t2 := now()) - t1
            t1 = t2
        if reduce is not None:
            reduce()
            sync()
            t["allreduce"] = (t2 := now()) - t1
            t1 = t2
        self._update(optimizer, ALL if tail is not None else applied)
        self._stepped(ws, parts, keep)
        sync()
        t["optimizer"] = now() - t1
        return {"fwd": fwd, "bwd": bwd, **t}

    def part_flops(self, batch: int) -> np.ndarray:
        """Training FLOPs of each part for one step of ``batch`` (the unfused count of its layers)."""
        rows = summarize(self.layers, batch)
        return np.array([sum(rows[i]["flops_fwd"] + rows[i]["flops_bwd"] for i in range(p.first, p.last + 1))
                         for p in self.parts], dtype=np.float64)

    def _sgd_applied(self, optimizer, reduce) -> list[tuple[int, int]]:
        """The parameter ranges to which backward applies the optimizer's step (Part.sgd_range): plain SGD on the
        CPU's wide Linears, where no all-reduce comes between backward and update. One pass over W instead of
        three over W and its gradient; the optimizer then steps the rest."""
        if reduce is not None or not isinstance(optimizer, SGD) or not on_cpu():
            return []
        return [r for p in self.parts if (r := p.sgd_range()) is not None]

    def _sgd_tail(self, optimizer, reduce):
        """(k, optim.SGD.fused()) where the step's last kernel, part k's backward, runs SGD's whole step (CUDA: the
        first part with kernels, after leading Flattens, a tiled Linear's weight gradient,
        nncore.fusion.Part.takes_sgd_tail, with at most gemm_cuda.SGD_TAIL_MAX_REST other parameters; plain SGD,
        no all-reduce between backward and update): one kernel fewer a step, and one pass fewer over the
        parameters. None elsewhere."""
        if reduce is not None or not isinstance(optimizer, SGD):
            return None
        for k, part in enumerate(self.parts):
            if part.fused is None and all(isinstance(layer, Flatten) for layer in part.layers):
                continue  # (a Flatten launches nothing)
            if not part.takes_sgd_tail():
                return None
            lin = part._linear()
            rest = self.n_params - lin.out_features * (lin.in_features + 1)
            return (k, optimizer.fused()) if rest <= K_tiled.SGD_TAIL_MAX_REST else None
        return None

    def _update(self, optimizer, applied: list) -> None:
        """The optimizer's step on every parameter outside ``applied`` (``_sgd_applied``); with ``ALL``
        (``_sgd_tail``: the step's kernels ran it) only the optimizer's count of steps."""
        if applied is ALL:
            optimizer.step(self._params, self.grads, [(0, self.n_params)])  # (counts the step; nothing to launch)
        elif applied:
            optimizer.step(self._params, self.grads, applied)
        else:
            optimizer.step(self._params, self.grads)

    def train_step(self, ws: Workspace, optimizer, reduce=None, gather=None, after=None) -> None:
        """Forward, loss, backward and update on the batch in ``ws``; all on the device except ``reduce()``,
        which a distributed run calls between backward and update to sum the gradients. ``gather()`` (the
        batch in) and ``after()`` (e.g. the loss into a running sum) are more kernel launches that run before
        and after the step. Where compute graphs are on (by default, see nncore.graph), the launches run as
        one graph (two around a ``reduce``). For plain SGD on the CPU, backward updates the wide Linears' W
        itself (``_sgd_applied``), and ``self.grads`` then holds no gradient for those weights. On CUDA the last
        backward kernel may run SGD's whole step (``_sgd_tail``; the gradients are still written) and the last
        forward kernel may form the loss (``_loss_in_forward``)."""
        self._step(ws, optimizer, reduce, gather, after, self.graphs.run)

    def _step(self, ws: Workspace, optimizer, reduce, gather, after, run):
        """``train_step``'s work, its launches (those before a ``reduce``, or all) handed to ``run(launches)``;
        returns what that returns."""
        applied = self._sgd_applied(optimizer, reduce)
        parts, keep = self._begin_step(ws, applied)
        tail = self._sgd_tail(optimizer, reduce)
        with_loss = self._loss_in_forward(ws.batch)

        def launches():
            if gather is not None:
                gather()
            self.forward(ws, with_loss)
            if not with_loss:
                self.loss_grad(ws)
            self.backward(ws, optimizer.fused() if applied else None, keep, tail)
            if reduce is None:
                update()

        def update():
            self._update(optimizer, ALL if tail is not None else applied)
            if after is not None:
                after()

        ran = run(launches)
        if reduce is not None:
            reduce()
            self.graphs.run(update)
        self._stepped(ws, parts, keep)
        return ran

    def train_steps(self, ws: Workspace, optimizer, k: int, gather, after=None, deltas=None) -> int:
        """``k`` training steps on ``ws``, step i's batch in by ``gather(i)()`` and ``after(i)()`` after it (as
        ``train_step``'s ``gather`` and ``after``), steps that differ only in integers that grow by ``deltas``
        ({parameter name: growth a step}, of ``nncore.graph.VARYING``'s: a batch's first sample, the step's
        number). Where the step is one cooperative CPU kernel (and the optimizer plain SGD, whose step takes the
        same numbers every time), the k steps run as one launch of a kernel that loops over them
        (``StepGraphs.run_steps``); else only the first runs, as ``train_step`` runs it. Returns the steps run:
        k or 1."""
        at = lambda f, i: None if f is None else f(i)  # noqa: E731
        if k > 1 and deltas and optimizer.name == "sgd" and self.graphs.enabled:
            ran = self._step(ws, optimizer, None, at(gather, 0), at(after, 0),
                             lambda launches: self.graphs.run_steps(launches, k, deltas))
            optimizer.steps += ran - 1  # (the recording counted one)
            return ran
        self.train_step(ws, optimizer, gather=at(gather, 0), after=at(after, 0))
        return 1

    def predict(self, x: np.ndarray, batch: int = 256) -> np.ndarray:
        """Logits for host inputs (tests, interop): copies in and out, so not for the training loop."""
        x = np.asarray(x, np.float32).reshape(len(x), -1)
        out = []
        for s in range(0, len(x), batch):
            chunk = x[s:s + batch]
            ws = self.workspace(len(chunk))
            ws.load(chunk)
            out.append(self.forward(ws).to_numpy())
        return np.concatenate(out) if out else np.zeros((0, *self.out_shape), np.float32)

    # -- weights -----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """Host copies of the weights with PyTorch nn.Sequential names and shapes."""
        self._check_live()
        self._sync()
        flat = self._params.to_numpy()
        out = {}
        for i, layer in enumerate(self.layers):
            for name, shape in layer.param_shapes().items():
                off = layer.offsets[name]
                out[f"{i}.{name}"] = flat[off:off + int(math.prod(shape))].reshape(shape).copy()
        return out

    def load_state_dict(self, state: dict, source: str = "state") -> None:
        """Copy weights in; raises DataError at the first name or shape that does not match."""
        expected = self.param_names()
        for name, shape in expected.items():
            if name not in state:
                raise DataError(f"{source}: missing {name} (shape {shape}) that the network needs")
            got = tuple(np.shape(state[name]))
            if got != shape:
                raise DataError(f"{source}: {name} has shape {got}, the network expects {shape}")
        extra = sorted(set(state) - set(expected))
        if extra:
            raise DataError(f"{source}: {extra[0]} does not belong to this network")
        flat = np.zeros(max(self.n_params, 1), np.float32)
        for i, layer in enumerate(self.layers):
            for name, shape in layer.param_shapes().items():
                off = layer.offsets[name]
                flat[off:off + int(math.prod(shape))] = _weights_f32(state[f"{i}.{name}"], f"{source}: {i}.{name}")
        self._params.from_numpy(flat)
        self._packed = None

    def save_weights(self, path) -> None:
        """Write an .npz loadable by ``torch.nn.Sequential.load_state_dict`` (via torch.from_numpy); atomic."""
        write_npz_atomic(path, self.state_dict())

    def load_weights(self, path) -> None:
        self.load_state_dict(read_npz(path), source=str(path))

    def __repr__(self) -> str:
        inner = ",\n".join(f"  ({i}): {layer!r}" for i, layer in enumerate(self.layers))
        return f"Sequential(input={self.input_shape},\n{inner}\n)  loss={self.loss.name if self.loss else None}"
