"""Element-wise activations. Backward uses the forward output (ReLU: out > 0; sigmoid: s(1-s); tanh: 1-t^2).

Every kernel walks its (B, N) arrays in runs of ``chunk`` elements per thread (see ``kernels.chunk``).
"""
import taichi as ti

from . import F2


@ti.func
def _runs(n_b: ti.i32, n: ti.i32, chunk: ti.i32) -> ti.i32:
    return n_b * ((n + chunk - 1) // chunk)


@ti.kernel
def relu_forward(out: F2, inp: F2, chunk: ti.i32):
    # out: (B, N) f32   inp: (B, N) f32
    n = out.shape[1]
    per = (n + chunk - 1) // chunk
    for t in range(_runs(out.shape[0], n, chunk)):
        b, j0 = t // per, (t % per) * chunk
        for j in range(j0, ti.min(j0 + chunk, n)):
            out[b, j] = ti.max(inp[b, j], 0.0)


@ti.kernel
def relu_backward(dinp: F2, dout: F2, out: F2, chunk: ti.i32):
    # dinp: (B, N) f32   dout: (B, N) f32   out: (B, N) f32 (forward output)
    n = dinp.shape[1]
    per = (n + chunk - 1) // chunk
    for t in range(_runs(dinp.shape[0], n, chunk)):
        b, j0 = t // per, (t % per) * chunk
        for j in range(j0, ti.min(j0 + chunk, n)):
            dinp[b, j] = dout[b, j] if out[b, j] > 0.0 else 0.0


@ti.func
def sigmoid(x):
    # Two branches so that exp never overflows.
    s = 0.0
    if x >= 0.0:
        s = 1.0 / (1.0 + ti.exp(-x))
    else:
        e = ti.exp(x)
        s = e / (1.0 + e)
    return s


@ti.kernel
def sigmoid_forward(out: F2, inp: F2, chunk: ti.i32):
    # out: (B, N) f32   inp: (B, N) f32
    n = out.shape[1]
    per = (n + chunk - 1) // chunk
    for t in range(_runs(out.shape[0], n, chunk)):
        b, j0 = t // per, (t % per) * chunk
        for j in range(j0, ti.min(j0 + chunk, n)):
            out[b, j] = sigmoid(inp[b, j])


@ti.kernel
def sigmoid_backward(dinp: F2, dout: F2, out: F2, chunk: ti.i32):
    # dinp: (B, N) f32   dout: (B, N) f32   out: (B, N) f32 (forward output)
    n = dinp.shape[1]
    per = (n + chunk - 1) // chunk
    for t in range(_runs(dinp.shape[0], n, chunk)):
        b, j0 = t // per, (t % per) * chunk
        for j in range(j0, ti.min(j0 + chunk, n)):
            s = out[b, j]
            dinp[b, j] = dout[b, j] * s * (1.0 - s)


@ti.kernel
def tanh_forward(out: F2, inp: F2, chunk: ti.i32):
    # out: (B, N) f32   inp: (B, N) f32
    n = out.shape[1]
    per = (n + chunk - 1) // chunk
    for t in range(_runs(out.shape[0], n, chunk)):
        b, j0 = t // per, (t % per) * chunk
        for j in range(j0, ti.min(j0 + chunk, n)):
            out[b, j] = ti.tanh(inp[b, j])


@ti.kernel
def tanh_backward(dinp: F2, dout: F2, out: F2, chunk: ti.i32):
    # dinp: (B, N) f32   dout: (B, N) f32   out: (B, N) f32 (forward output)
    n = dinp.shape[1]
    per = (n + chunk - 1) // chunk
    for t in range(_runs(dinp.shape[0], n, chunk)):
        b, j0 = t // per, (t % per) * chunk
        for j in range(j0, ti.min(j0 + chunk, n)):
            tv = out[b, j]
            dinp[b, j] = dout[b, j] * (1.0 - tv * tv)
