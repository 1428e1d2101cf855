"""Fully connected layer: ``out = inp @ W.T + b`` with W stored (OUT, IN) row-major, as PyTorch does."""
import taichi as ti

from . import F1, F2, kernel
from .activation import relu, sigmoid


# Linear, optionally followed by an activation in the same kernel each way (CUDA: fewer launches per step).
# kind: 0 none, 1 ReLU, 2 Sigmoid, 3 Tanh (compile-time). Backward takes the activation's output to form
# dz = dout * act'(z) on the fly, so the pre-activation values are never stored.
@ti.func
def _act(x, kind: ti.template()):
    y = x
    if ti.static(kind == 1):
        y = relu(x)  # (keeps NaN)
    elif ti.static(kind == 2):
        y = sigmoid(x)
    elif ti.static(kind == 3):
        y = ti.tanh(x)
    return y


@ti.func
def _dact(y, kind: ti.template()):
    d = 1.0
    if ti.static(kind == 1):
        d = 0.0 if y <= 0.0 else 1.0  # NaN passes, as PyTorch's threshold_backward
    elif ti.static(kind == 2):
        d = y * (1.0 - y)
    elif ti.static(kind == 3):
        d = 1.0 - y * y
    return d


@ti.func
def _dz(dout: ti.template(), out: ti.template(), b, o, kind: ti.template()):
    """The gradient at the pre-activation: dout[b, o] * act'(out[b, o]) (``out`` is not read for kind 0)."""
    g = dout[b, o]
    if ti.static(kind != 0):
        g *= _dact(out[b, o], kind)
    return g


def linear_forward(out, inp, params, w_off: int, b_off: int) -> None:
    """out (B, OUT) = inp @ W.T + b; W (OUT, IN) at params[w_off:], b at params[b_off:]."""
    linear_act_forward(out, inp, params, w_off, b_off, 0)


def linear_backward(dinp, dparams, dout, inp, params, w_off: int, b_off: int, need_dinp: int) -> None:
    """dW, db into dparams[w_off:], dparams[b_off:]; dinp (B, IN) only if ``need_dinp`` (dout stands in for the
    output, which no activation reads)."""
    linear_act_backward(dinp, dparams, dout, inp, dout, params, w_off, b_off, need_dinp, 0)


@kernel
def linear_act_forward(out: F2, inp: F2, params: F1, w_off: ti.i32, b_off: ti.i32, kind: ti.template()):
    # out: (B, OUT) f32 = act(inp @ W.T + b)   inp: (B, IN) f32   params[w_off:]: W (OUT, IN)   params[b_off:]: b
    n_in = inp.shape[1]
    for b, o in ti.ndrange(out.shape[0], out.shape[1]):
        acc = params[b_off + o]
        w = w_off + o * n_in
        for i in range(n_in):
            acc += inp[b, i] * params[w + i]
        out[b, o] = _act(acc, kind)


@kernel
def linear_act_dinput(dinp: F2, dout: F2, out: F2, params: F1, w_off: ti.i32, kind: ti.template()):
    # dinp: (B, IN) = (dout * act'(out)) @ W; kind 0: no activation (out unused)
    n_out, n_in = dout.shape[1], dinp.shape[1]
    for b, i in ti.ndrange(dinp.shape[0], n_in):
        acc = 0.0
        for o in range(n_out):
            acc += _dz(dout, out, b, o, kind) * params[w_off + o * n_in + i]
        dinp[b, i] = acc


@kernel
def linear_act_backward(dinp: F2, dparams: F1, dout: F2, inp: F2, out: F2, params: F1, w_off: ti.i32,
                        b_off: ti.i32, need_dinp: ti.i32, kind: ti.template()):
    # dinp: (B, IN) f32   dparams[w_off:]: dW (OUT, IN)   dparams[b_off:]: db (OUT,)
    # dout: (B, OUT) f32 gradient of the activation's output   out: (B, OUT) f32 the activation's output
    # inp: (B, IN) f32   params[w_off:]: W (OUT, IN)
    # One loop for the three results, which do not depend on each other: on CUDA each loop is a task, and a
    # task costs a launch (the steps of narrow layers are launch-bound at small batches). The weights first,
    # whose sums over the batch are the longest.
    n_b, n_out, n_in = dout.shape[0], dout.shape[1], inp.shape[1]
    n_w = n_out * n_in
    for t in range(n_w + n_out + n_b * need_dinp * n_in):
        if t < n_w:
            o, i = t // n_in, t % n_in
            acc = 0.0
            for b in range(n_b):
                acc += _dz(dout, out, b, o, kind) * inp[b, i]
            dparams[w_off + t] = acc
        elif t < n_w + n_out:
            o = t - n_w
            acc = 0.0
            for b in range(n_b):
                acc += _dz(dout, out, b, o, kind)
            dparams[b_off + o] = acc
        else:
            b, i = (t - n_w - n_out) // n_in, (t - n_w - n_out) % n_in
            acc = 0.0
            for o in range(n_out):
                acc += _dz(dout, out, b, o, kind) * params[w_off + o * n_in + i]
            dinp[b, i] = acc
