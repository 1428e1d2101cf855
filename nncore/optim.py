"""SGD (momentum, weight decay) and Adam over a network's flat parameter buffer, PyTorch's update rules.

An optimizer keeps its state (velocity, or Adam's moments) in device ndarrays the size of the parameter
buffer; ``state_dict`` copies it to the host for checkpoints and for moving between backends.
"""
from __future__ import annotations

import math

import numpy as np

from .errors import ConfigError
from .kernels import optim as K
from .runtime import ti


def _number(name: str, value, lo: float, hi: float = math.inf, lo_open: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} {value!r} must be a number") from None
    if isinstance(value, bool) or not math.isfinite(v) or v < lo or (lo_open and v == lo) or v >= hi:
        bound = f"({lo}, {hi})" if lo_open else f"[{lo}, {hi})"
        raise ConfigError(f"{name} {value!r} must be a finite number in {bound}")
    return v


class Optimizer:
    name = "optimizer"
    state_names: tuple[str, ...] = ()

    def __init__(self, n_params: int, lr: float, weight_decay: float = 0.0):
        self.lr = _number("lr", lr, 0.0, lo_open=True)
        self.weight_decay = _number("weight_decay", weight_decay, 0.0)
        self.n_params, self.steps = n_params, 0
        self._alloc()

    def _alloc(self) -> None:
        self.state = {k: ti.ndarray(ti.f32, shape=(max(self.n_params, 1),)) for k in self.state_names}
        for arr in self.state.values():
            arr.fill(0.0)

    def step(self, params, grads) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, np.ndarray]:
        out = {k: v.to_numpy() for k, v in self.state.items()}
        out["steps"] = np.array(self.steps, np.int64)
        return out

    def load_state_dict(self, state: dict) -> None:
        """Restore state; also re-creates buffers after the runtime was re-initialised."""
        self._alloc()
        for k, arr in self.state.items():
            arr.from_numpy(np.ascontiguousarray(state[k], np.float32))
        self.steps = int(state["steps"])


class SGD(Optimizer):
    name = "sgd"
    state_names = ("velocity",)

    def __init__(self, n_params, lr=0.01, momentum=0.0, weight_decay=0.0):
        self.momentum = _number("momentum", momentum, 0.0, 1.0)
        super().__init__(n_params, lr, weight_decay)

    def step(self, params, grads, applied=()):
        """One step on every parameter but those in ``applied``, (lo, hi) ranges that a kernel already stepped
        while forming their gradient (see ``fused``)."""
        lo = 0
        for a, b in sorted(applied) + [(self.n_params, self.n_params)]:
            if a > lo:
                K.sgd_step(params, self.state["velocity"], grads, self.lr, self.momentum, self.weight_decay,
                           self.momentum != 0.0, lo, a)
            lo = b
        self.steps += 1

    def fused(self) -> tuple:
        """What a weight-gradient kernel needs to apply this step itself (gemm_cpu.linear_dweight_cpu's sgd, and
        on CUDA gemm_cuda.linear_dweight_tiled's tail): (mode, velocity, lr, momentum, weight_decay)."""
        return 2 if self.momentum != 0.0 else 1, self.state["velocity"], self.lr, self.momentum, self.weight_decay

    def __repr__(self):
        return f"SGD(lr={self.lr}, momentum={self.momentum}, weight_decay={self.weight_decay})"


class Adam(Optimizer):
    name = "adam"
    state_names = ("m", "v")

    def __init__(self, n_params, lr=0.001, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        if not isinstance(betas, (list, tuple)) or len(betas) != 2:
            raise ConfigError(f"betas {betas!r} must be a pair of numbers")
        self.beta1 = _number("betas[0]", betas[0], 0.0, 1.0)
        self.beta2 = _number("betas[1]", betas[1], 0.0, 1.0)
        self.eps = _number("eps", eps, 0.0, lo_open=True)
        super().__init__(n_params, lr, weight_decay)

    def step(self, params, grads):
        self.steps += 1
        t = self.steps
        K.adam_step(params, self.state["m"], self.state["v"], grads, self.lr, self.beta1, self.beta2, self.eps,
                    self.weight_decay, 1.0 - self.beta1 ** t, math.sqrt(1.0 - self.beta2 ** t))

    def __repr__(self):
        return f"Adam(lr={self.lr}, betas=({self.beta1}, {self.beta2}), eps={self.eps}, " \
               f"weight_decay={self.weight_decay})"


OPTIMIZERS = {"sgd": SGD, "adam": Adam}


def make_optimizer(name: str, n_params: int, **kwargs) -> Optimizer:
    key = str(name).lower()
    if key not in OPTIMIZERS:
        raise ConfigError(f"optimizer {name!r} is unknown; choose one of {', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[key](n_params, **kwargs)
