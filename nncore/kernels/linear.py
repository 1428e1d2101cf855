"""Fully connected layer: ``out = inp @ W.T + b`` with W stored (OUT, IN) row-major, as PyTorch does."""
import taichi as ti

from . import F1, F2
from .activation import sigmoid


@ti.kernel
def linear_forward(out: F2, inp: F2, params: F1, w_off: ti.i32, b_off: ti.i32):
    # out: (B, OUT) f32   inp: (B, IN) f32   params[w_off:]: W (OUT, IN)   params[b_off:]: b (OUT,)
    n_in = inp.shape[1]
    for b, o in ti.ndrange(out.shape[0], out.shape[1]):
        acc = params[b_off + o]
        w = w_off + o * n_in
        for i in range(n_in):
            acc += inp[b, i] * params[w + i]
        out[b, o] = acc


@ti.kernel
def linear_backward(dinp: F2, dparams: F1, dout: F2, inp: F2, params: F1, w_off: ti.i32, b_off: ti.i32,
                    need_dinp: ti.i32):
    # dinp: (B, IN) f32   dparams[w_off:]: dW (OUT, IN)   dparams[b_off:]: db (OUT,)
    # dout: (B, OUT) f32  inp: (B, IN) f32                params[w_off:]: W (OUT, IN)
    n_b, n_out, n_in = dout.shape[0], dout.shape[1], inp.shape[1]
    for b, i in ti.ndrange(n_b * need_dinp, n_in):  # an empty range when the input needs no gradient
        acc = 0.0
        for o in range(n_out):
            acc += dout[b, o] * params[w_off + o * n_in + i]
        dinp[b, i] = acc
    for o, i in ti.ndrange(n_out, n_in):
        acc = 0.0
        for b in range(n_b):
            acc += dout[b, o] * inp[b, i]
        dparams[w_off + o * n_in + i] = acc
    for o in range(n_out):
        acc = 0.0
        for b in range(n_b):
            acc += dout[b, o]
        dparams[b_off + o] = acc


# Linear followed by an activation, as one kernel each way (CUDA: fewer launches per step).
# kind: 1 ReLU, 2 Sigmoid, 3 Tanh (compile-time). Backward takes the activation's output to form
# dz = dout * act'(z) on the fly, so the pre-activation values are never stored.
@ti.func
def _act(x, kind: ti.template()):
    y = x
    if ti.static(kind == 1):
        y = ti.max(x, 0.0)
    elif ti.static(kind == 2):
        y = sigmoid(x)
    else:
        y = ti.tanh(x)
    return y


@ti.func
def _dact(y, kind: ti.template()):
    d = 0.0
    if ti.static(kind == 1):
        d = 1.0 if y > 0.0 else 0.0
    elif ti.static(kind == 2):
        d = y * (1.0 - y)
    else:
        d = 1.0 - y * y
    return d


@ti.kernel
def linear_act_forward(out: F2, inp: F2, params: F1, w_off: ti.i32, b_off: ti.i32, kind: ti.template()):
    # out: (B, OUT) f32 = act(inp @ W.T + b)   inp: (B, IN) f32   params[w_off:]: W (OUT, IN)   params[b_off:]: b
    n_in = inp.shape[1]
    for b, o in ti.ndrange(out.shape[0], out.shape[1]):
        acc = params[b_off + o]
        w = w_off + o * n_in
        for i in range(n_in):
            acc += inp[b, i] * params[w + i]
        out[b, o] = _act(acc, kind)


@ti.kernel
def linear_act_dinput(dinp: F2, dout: F2, out: F2, params: F1, w_off: ti.i32, kind: ti.template()):
    # dinp: (B, IN) = (dout * act'(out)) @ W; kind 0: no activation (out unused)
    n_out, n_in = dout.shape[1], dinp.shape[1]
    for b, i in ti.ndrange(dinp.shape[0], n_in):
        acc = 0.0
        for o in range(n_out):
            g = dout[b, o]
            if ti.static(kind != 0):
                g *= _dact(out[b, o], kind)
            acc += g * params[w_off + o * n_in + i]
        dinp[b, i] = acc


@ti.kernel
def linear_act_backward(dinp: F2, dparams: F1, dout: F2, inp: F2, out: F2, params: F1, w_off: ti.i32,
                        b_off: ti.i32, need_dinp: ti.i32, kind: ti.template()):
    # dinp: (B, IN) f32   dparams[w_off:]: dW (OUT, IN)   dparams[b_off:]: db (OUT,)
    # dout: (B, OUT) f32 gradient of the activation's output   out: (B, OUT) f32 the activation's output
    # inp: (B, IN) f32   params[w_off:]: W (OUT, IN)
    n_b, n_out, n_in = dout.shape[0], dout.shape[1], inp.shape[1]
    for b, i in ti.ndrange(n_b * need_dinp, n_in):
        acc = 0.0
        for o in range(n_out):
            acc += dout[b, o] * _dact(out[b, o], kind) * params[w_off + o * n_in + i]
        dinp[b, i] = acc
    for o, i in ti.ndrange(n_out, n_in):
        acc = 0.0
        for b in range(n_b):
            acc += dout[b, o] * _dact(out[b, o], kind) * inp[b, i]
        dparams[w_off + o * n_in + i] = acc
    for o in range(n_out):
        acc = 0.0
        for b in range(n_b):
            acc += dout[b, o] * _dact(out[b, o], kind)
        dparams[b_off + o] = acc
