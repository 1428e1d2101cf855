"""Thin layer classes: shape inference and validation at build time, parameter shapes, FLOPs, kernel calls.

A layer holds no buffers of its own. The :class:`~nncore.network.Sequential` that builds it owns the flat
parameter and gradient buffers (a layer finds its weight and bias at ``self.offsets``) and the activation
buffers per batch size; a layer's ``forward``/``backward`` only launch kernels on what they are handed.

FLOPs count a multiply-add as 2; ReLU as 1 per element each way, sigmoid and tanh as 4 forward and 3
backward, max-pool as one comparison per window element. Backward FLOPs leave out the input gradient of
the first layer, which is never computed.
"""
from __future__ import annotations

import math

import numpy as np

from .errors import ConfigError
from .limits import INT32_MAX
from .kernels import activation as K_act
from .kernels import chunk, on_cpu
from .kernels import gemm_cpu as K_gemm
from .kernels import conv as K_conv
from .kernels import conv_cpu as K_conv_cpu
from .kernels import gemm_cuda as K_tiled
from .kernels import pool as K_pool


def _size(shape: tuple[int, ...]) -> int:
    return int(math.prod(shape))


class Layer:
    kind = "Layer"
    keys: tuple[str, ...] = ()  # spec keys besides "type"
    aliases_input = False  # True: the output is the input buffer itself (Flatten)

    def __init__(self, index: int, in_shape: tuple[int, ...]):
        self.index, self.in_shape = index, tuple(in_shape)
        self.out_shape: tuple[int, ...] = self.in_shape
        self.offsets: dict[str, int] = {}

    def fail(self, msg: str) -> ConfigError:
        return ConfigError(f"layer {self.index} ({self.kind}): {msg}", layer=self.index)

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return {}

    def scratch_shapes(self, batch: int, need_dinp: bool = True) -> dict[str, tuple[str, tuple[int, ...]]]:
        """Extra buffers this layer needs per batch size (and whether its input gradient is computed):
        name -> ("f32", "i32" or "v16", shape)."""
        return {}

    def flops(self, batch: int, need_dinp: bool = True) -> tuple[int, int]:
        return 0, 0

    def fan(self) -> tuple[int, int]:
        return 0, 0

    def spec(self) -> dict:
        return {"type": self.kind}

    def forward(self, out, inp, params, scratch) -> None:
        raise NotImplementedError

    def backward(self, dinp, dparams, dout, inp, out, params, scratch, need_dinp: bool) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.spec().items() if k != "type")
        return f"{self.kind}({args})"


def _pos_int(layer: Layer, name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise layer.fail(f"{name} {value!r} must be an integer")
    if value < minimum:
        raise layer.fail(f"{name} {value} must be >= {minimum}")
    if value > INT32_MAX:
        raise layer.fail(f"{name} {value} is beyond the kernels' 32-bit range (at most {INT32_MAX})")
    return value


def _pair(layer: Layer, name: str, value, minimum: int = 1) -> tuple[int, int]:
    if isinstance(value, (list, tuple)):
        if len(value) != 2:
            raise layer.fail(f"{name} {list(value)!r} must be an integer or a pair of integers")
        return _pos_int(layer, name, value[0], minimum), _pos_int(layer, name, value[1], minimum)
    if isinstance(value, bool) or not isinstance(value, int):  # ("3x2" is the app field's way, not a config's)
        raise layer.fail(f"{name} {value!r} must be an integer or a pair of integers, e.g. 3 or [3, 2]")
    v = _pos_int(layer, name, value, minimum)
    return v, v


def _init_scheme(layer: Layer, init):
    if init not in (None, "he", "xavier"):
        raise layer.fail(f"init {init!r} is unknown; choose he or xavier")
    return init


def _short(pair: tuple[int, int]):
    return pair[0] if pair[0] == pair[1] else list(pair)


class Linear(Layer):
    kind = "Linear"
    keys = ("out_features", "in_features", "init")

    def __init__(self, index, in_shape, out_features, in_features=None, init=None):
        super().__init__(index, in_shape)
        self.out_features = _pos_int(self, "out_features", out_features)
        if len(self.in_shape) != 1:
            raise self.fail(f"input shape {self.in_shape} is not flat; add a Flatten layer before it")
        self.in_features = self.in_shape[0]
        if in_features is not None and in_features != self.in_features:
            raise self.fail(f"in_features {in_features!r} does not match the input size {self.in_features}")
        self.init = _init_scheme(self, init)
        self.out_shape = (self.out_features,)
        # > 0: the CPU input arrives channels-last, (H, W, C) with C = cl_c, from a fused conv part; W keeps
        # PyTorch's (C, H, W) columns and the CPU kernels map between the two. Set by nncore.fusion.plan.
        self.cl_c = 0
        # True where that input comes as the fused part's 16-wide vectors, (B, PH*PW, OCB) (a narrow Linear; see
        # nncore.fusion.ConvReluPool), read with W packed likewise (kernels.conv_cpu.linear_forward_pooled).
        self.pooled_in = False
        # True where the Linear before it (its activation between) forms this one's weight gradient on the CPU,
        # with its input gradient (nncore.fusion.LinearAct's ``nxt``, kernels.gemm_cpu.stage_dz_from).
        self.dweight_elsewhere = False
        # On the CPU, where this Linear is such a narrow one (strips_in) or the wide one before it (strips_out):
        # the output between them is kept as strips of 16-wide vectors, (ceil(features / 16), B), which the wide
        # Linear's forward writes a vector at a time and stage_dz_from reads sequentially (a row's 16 floats took
        # 16 stores; rows of 4 KiB apart, one cache line each, took a trip to memory each). Set by
        # nncore.fusion.plan.
        self.strips_in = self.strips_out = False

    def param_shapes(self):
        return {"weight": (self.out_features, self.in_features), "bias": (self.out_features,)}

    def fan(self):
        return self.in_features, self.out_features

    def flops(self, batch, need_dinp=True):
        mac = 2 * batch * self.in_features * self.out_features
        return mac + batch * self.out_features, mac * (2 if need_dinp else 1) + batch * self.out_features

    def spec(self):
        return {"type": self.kind, "out_features": self.out_features}

    def scratch_shapes(self, batch, need_dinp=True):
        # The CPU kernels read both operands of each product staged as 16-wide vectors (nncore.kernels.gemm_cpu).
        if on_cpu() and self.pooled_in:
            return {}  # (W's vectors live in the fused part's scratch: nncore.fusion.Part.scratch_from)
        if on_cpu():
            n_in, n_out = self.in_features, self.out_features
            shapes = {"wt": ("v16", K_gemm.panels_shape(n_out, n_in)), "ds": ("v16", K_gemm.strips_shape(batch, n_out))}
            if need_dinp:
                shapes.update(dp=("v16", K_gemm.panels_shape(batch, n_out)), wv=("v16", K_gemm.strips_shape(n_out, n_in)))
            if K_gemm.staging_pays(n_out):
                shapes.update(xp=("v16", K_gemm.panels_shape(batch, n_in)), xs=("v16", K_gemm.strips_shape(batch, n_in)))
            return shapes
        shapes = {}
        n_in, n_out = self.in_features, self.out_features
        n_s = K_tiled.batch_split(batch, n_in, n_out)
        if n_s > 1 and not K_tiled.use_tiled(n_in, n_out):  # (gradients split over the batch)
            shapes["dpartial"] = ("f32", (n_out * n_s, n_in + 1))
        if K_tiled.use_tiled(n_in, n_out):  # the partial sums of a forward or input gradient cut over K
            parts = [K_tiled.part_shape(batch, n_out, n_in)] + ([K_tiled.part_shape(batch, n_in, n_out)]
                                                                if need_dinp else [])
            parts = [p for p in parts if p is not None]
            if parts:
                shapes["kpart"] = ("f32", (max(p[0] for p in parts), max(p[1] for p in parts)))
        return shapes

    def forward(self, out, inp, params, scratch, kind=0, packed=False, loss=None):
        """``kind``: the activation fused after it on the CPU (nncore.fusion.LinearAct; 0 none), which needs the
        staged kernels (``K_gemm.staging_pays``). ``packed`` (CPU): scratch's W panels already hold this W.
        ``loss`` (CUDA, nncore.fusion.Part.forms_loss): (losses, dlogits, labels, the loss's row function), formed
        in the same kernel."""
        w_off, b_off = self.offsets["weight"], self.offsets["bias"]
        if self.pooled_in:
            K_conv_cpu.pack_linear_weights(scratch["wc"], params, w_off, self.cl_c)
            rows, most = K_conv_cpu.budget()["pooled_forward"]
            K_conv_cpu.linear_forward_pooled(out, inp, scratch["wc"], params, b_off,
                                             K_conv_cpu.output_groups(self.out_features, most), rows)
        elif "wt" in scratch:
            if "xp" in scratch:
                K_gemm.stage_panels(scratch["xp"], inp, inp, 0)
                K_gemm.linear_forward_cpu(out, scratch["xp"], scratch["wt"], params, w_off, b_off, self.cl_c, kind,
                                          packed, self.out_features if self.strips_out else 0)
            else:
                K_gemm.weight_panels(scratch["wt"], params, w_off, self.out_features, self.cl_c)
                K_gemm.linear_forward_cpu_direct(out, inp, scratch["wt"], params, b_off, 1 if self.strips_in else 0)
        else:
            K_tiled.linear_forward_gpu(out, inp, params, w_off, b_off, 0, loss, scratch.get("kpart"))

    def backward(self, dinp, dparams, dout, inp, out, params, scratch, need_dinp, kind=0, wn_off=None, sgd=None,
                 panels_only=False, tail=None):
        """``out``: the output of the fused activation (``kind`` > 0, CPU), whose derivative it takes. ``wn_off``
        (CPU, nncore.fusion.LinearAct): the offset of the next Linear's W, a narrow one; ``dout`` is then the
        gradient at that Linear's output, from which the gradient at this layer's output is formed (no input
        gradient then), and that Linear's weight gradient is summed here too.
        ``sgd`` (CPU, where ``applies_sgd``: optim.SGD.fused()): W gets SGD's step instead of its gradient, after
        the input gradient has read it; with ``panels_only`` (no input gradient), the new W goes to scratch's W
        panels alone and params' copy is left out of date (nncore.network keeps track). ``tail`` (CUDA,
        nncore.fusion.Part.takes_sgd_tail): SGD's step on every parameter in the weight gradient's kernel."""
        w_off, b_off = self.offsets["weight"], self.offsets["bias"]
        assert not (panels_only and need_dinp)  # (the input gradient reads W from params)
        if self.pooled_in:  # (its input gradient: the fused part's, from dout)
            kv, most = K_conv_cpu.budget()["pooled_dweight"]
            kv = kv if inp.shape[2] % kv == 0 else 1  # channel blocks a task
            step = (0, dparams, dparams, 0.0, 0.0, 0.0) if sgd is None else (sgd[0], params, *sgd[1:])
            K_conv_cpu.linear_dweight_pooled(dparams, scratch["half"], dout, inp, w_off, b_off, self.cl_c,
                                             K_conv_cpu.output_groups(self.out_features, most), kv, *step)
        elif "wt" in scratch:
            if need_dinp:
                K_gemm.stage_panels(scratch["dp"], dout, out, kind)
                K_gemm.weight_strips(scratch["wv"], params, w_off, self.in_features, self.cl_c)
                K_gemm.linear_dinput_cpu(dinp, scratch["dp"], scratch["wv"])
            if wn_off is not None:
                K_gemm.stage_dz_from(scratch["ds"], dparams, dout, params, out, b_off, wn_off, self.out_features, kind,
                                     dout.shape[1], 1 if self.strips_out else 0)
            else:
                K_gemm.stage_dz(scratch["ds"], dparams, dout, out, b_off, kind)
            if "xs" in scratch:
                K_gemm.stage_strips(scratch["xs"], inp)
                K_gemm.linear_dweight(dparams, scratch["ds"], scratch["xs"], scratch["wt"], w_off, self.out_features,
                                      self.in_features, self.cl_c, params, sgd, panels_only)
            elif not self.dweight_elsewhere:
                K_gemm.linear_dweight_cpu_narrow(dparams, scratch["ds"], inp, w_off, self.out_features, self.cl_c)
        else:  # (no activation: the output is never read, dout stands in for it)
            K_tiled.linear_backward_gpu(dinp, dparams, dout, inp, dout, params, w_off, b_off, need_dinp,
                                        dpartial=scratch.get("dpartial"), tail=tail, part=scratch.get("kpart"))

    def applies_sgd(self) -> bool:
        """Whether backward can apply SGD's step to W itself (the CPU's staged weight gradient, and the narrow
        Linear after a fused conv part, whose input gradient that part forms from W's vectors packed in the
        forward, not from params)."""
        return on_cpu() and (self.pooled_in or K_gemm.staging_pays(self.out_features))


class _Activation(Layer):
    keys = ()
    fwd_flops, bwd_flops = 1, 1
    _forward = _backward = None

    def flops(self, batch, need_dinp=True):
        n = batch * _size(self.in_shape)
        return self.fwd_flops * n, self.bwd_flops * n if need_dinp else 0

    def forward(self, out, inp, params, scratch):
        type(self)._forward(out, inp, chunk())

    def backward(self, dinp, dparams, dout, inp, out, params, scratch, need_dinp):
        if need_dinp:
            type(self)._backward(dinp, dout, out, chunk())


class ReLU(_Activation):
    kind = "ReLU"
    _forward, _backward = K_act.relu_forward, K_act.relu_backward


class Sigmoid(_Activation):
    kind = "Sigmoid"
    fwd_flops, bwd_flops = 4, 3
    _forward, _backward = K_act.sigmoid_forward, K_act.sigmoid_backward


class Tanh(_Activation):
    kind = "Tanh"
    fwd_flops, bwd_flops = 4, 3
    _forward, _backward = K_act.tanh_forward, K_act.tanh_backward


def _spatial(layer: Layer) -> tuple[int, int, int]:
    if len(layer.in_shape) != 3:
        raise layer.fail(f"input shape {layer.in_shape} is not (channels, height, width)")
    return layer.in_shape  # type: ignore[return-value]


def _out_size(layer, size, k, s, p, axis) -> int:
    if size + 2 * p > INT32_MAX:  # the kernels index the padded input with 32-bit integers
        raise layer.fail(f"padding {p} makes the input {axis} {size + 2 * p:,}, beyond the kernels' 32-bit range")
    n = (size + 2 * p - k) // s + 1
    if size + 2 * p < k or n < 1:
        raise layer.fail(f"kernel_size {k} is larger than the input {axis} {size}"
                         + (f" with padding {p}" if p else "") + "; the output would be smaller than 1x1")
    return n


class Conv2D(Layer):
    kind = "Conv2D"
    keys = ("out_channels", "kernel_size", "stride", "padding", "in_channels", "init")

    def __init__(self, index, in_shape, out_channels, kernel_size, stride=1, padding=0, in_channels=None,
                 init=None):
        super().__init__(index, in_shape)
        self.out_channels = _pos_int(self, "out_channels", out_channels)
        self.kernel, self.stride = _pair(self, "kernel_size", kernel_size), _pair(self, "stride", stride)
        self.padding = _pair(self, "padding", padding, minimum=0)
        self.c, self.h, self.w = _spatial(self)
        if in_channels is not None and in_channels != self.c:
            raise self.fail(f"in_channels {in_channels!r} does not match the input's {self.c} channels")
        self.init = _init_scheme(self, init)
        oh = _out_size(self, self.h, self.kernel[0], self.stride[0], self.padding[0], "height")
        ow = _out_size(self, self.w, self.kernel[1], self.stride[1], self.padding[1], "width")
        self.out_shape = (self.out_channels, oh, ow)

    def param_shapes(self):
        return {"weight": (self.out_channels, self.c, *self.kernel), "bias": (self.out_channels,)}

    def fan(self):
        k = self.kernel[0] * self.kernel[1]
        return self.c * k, self.out_channels * k

    def flops(self, batch, need_dinp=True):
        outs = batch * _size(self.out_shape)
        mac = 2 * outs * self.c * self.kernel[0] * self.kernel[1]
        return mac + outs, mac * (2 if need_dinp else 1) + outs

    def spec(self):
        return {"type": self.kind, "out_channels": self.out_channels, "kernel_size": _short(self.kernel),
                "stride": _short(self.stride), "padding": _short(self.padding)}

    def _geometry(self):
        return (self.c, self.h, self.w, self.out_channels, *self.kernel, *self.stride, *self.padding)

    def forward(self, out, inp, params, scratch):
        K_conv.conv2d_forward(out, inp, params, self.offsets["weight"], self.offsets["bias"], *self._geometry())

    def backward(self, dinp, dparams, dout, inp, out, params, scratch, need_dinp):
        w_off, b_off = self.offsets["weight"], self.offsets["bias"]
        cpu = on_cpu()  # the GPU sums the weight gradient with atomics, the CPU without
        K_conv.conv2d_backward(dinp, dparams, dout, inp, params, w_off, b_off, *self._geometry(), int(need_dinp),
                               int(cpu))
        if not cpu:
            K_conv.conv2d_dweight_atomic(dparams, dout, inp, w_off, b_off, *self._geometry())


class MaxPool2D(Layer):
    kind = "MaxPool2D"
    keys = ("kernel_size", "stride")

    def __init__(self, index, in_shape, kernel_size, stride=None):
        super().__init__(index, in_shape)
        self.kernel = _pair(self, "kernel_size", kernel_size)
        self.stride = self.kernel if stride is None else _pair(self, "stride", stride)
        self.c, self.h, self.w = _spatial(self)
        oh = _out_size(self, self.h, self.kernel[0], self.stride[0], 0, "height")
        ow = _out_size(self, self.w, self.kernel[1], self.stride[1], 0, "width")
        self.out_shape = (self.c, oh, ow)

    def scratch_shapes(self, batch, need_dinp=True):
        return {"argmax": ("i32", (batch, _size(self.out_shape)))}

    def flops(self, batch, need_dinp=True):
        fwd = batch * _size(self.out_shape) * self.kernel[0] * self.kernel[1]
        return fwd, batch * _size(self.in_shape) if need_dinp else 0

    def spec(self):
        return {"type": self.kind, "kernel_size": _short(self.kernel), "stride": _short(self.stride)}

    def _geometry(self):
        return (self.c, self.h, self.w, *self.kernel, *self.stride)

    def forward(self, out, inp, params, scratch):
        K_pool.maxpool2d_forward(out, scratch["argmax"], inp, *self._geometry())

    def backward(self, dinp, dparams, dout, inp, out, params, scratch, need_dinp):
        if need_dinp:
            K_pool.maxpool2d_backward(dinp, dout, scratch["argmax"], *self._geometry())


class Flatten(Layer):
    """Free: activations are already stored flat, so the output is the input buffer."""

    kind = "Flatten"
    aliases_input = True

    def __init__(self, index, in_shape):
        super().__init__(index, in_shape)
        self.out_shape = (_size(self.in_shape),)

    def forward(self, out, inp, params, scratch):
        pass

    def backward(self, dinp, dparams, dout, inp, out, params, scratch, need_dinp):
        pass


LAYER_TYPES: dict[str, type[Layer]] = {
    cls.kind.lower(): cls for cls in (Linear, ReLU, Sigmoid, Tanh, Conv2D, MaxPool2D, Flatten)
}


def init_params(layer: Layer, rng: np.random.Generator, relu_follows: bool) -> dict[str, np.ndarray]:
    """He-normal weights before a ReLU, Xavier-uniform otherwise (or the layer's ``init``); zero biases.

    Drawn on the host in float64 from the seeded generator, then rounded to f32: the same seed gives
    bit-identical weights on every arch.
    """
    shapes = layer.param_shapes()
    if not shapes:
        return {}
    fan_in, fan_out = layer.fan()
    scheme = getattr(layer, "init", None) or ("he" if relu_follows else "xavier")
    if scheme == "he":
        w = rng.normal(0.0, math.sqrt(2.0 / fan_in), size=shapes["weight"])
    else:
        a = math.sqrt(6.0 / (fan_in + fan_out))
        w = rng.uniform(-a, a, size=shapes["weight"])
    return {"weight": w.astype(np.float32), "bias": np.zeros(shapes["bias"], np.float32)}
