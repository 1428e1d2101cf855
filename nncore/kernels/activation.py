"""Element-wise activations. Backward uses the forward output (ReLU: out > 0; sigmoid: s(1-s); tanh: 1-t^2)."""
import taichi as ti

from . import F2


@ti.kernel
def relu_forward(out: F2, inp: F2):
    # out: (B, N) f32   inp: (B, N) f32
    for b, j in out:
        out[b, j] = ti.max(inp[b, j], 0.0)


@ti.kernel
def relu_backward(dinp: F2, dout: F2, out: F2):
    # dinp: (B, N) f32   dout: (B, N) f32   out: (B, N) f32 (forward output)
    for b, j in dinp:
        dinp[b, j] = dout[b, j] if out[b, j] > 0.0 else 0.0


@ti.kernel
def sigmoid_forward(out: F2, inp: F2):
    # out: (B, N) f32   inp: (B, N) f32
    for b, j in out:
        x = inp[b, j]
        # Two branches so that exp never overflows.
        if x >= 0.0:
            out[b, j] = 1.0 / (1.0 + ti.exp(-x))
        else:
            e = ti.exp(x)
            out[b, j] = e / (1.0 + e)


@ti.kernel
def sigmoid_backward(dinp: F2, dout: F2, out: F2):
    # dinp: (B, N) f32   dout: (B, N) f32   out: (B, N) f32 (forward output)
    for b, j in dinp:
        s = out[b, j]
        dinp[b, j] = dout[b, j] * s * (1.0 - s)


@ti.kernel
def tanh_forward(out: F2, inp: F2):
    # out: (B, N) f32   inp: (B, N) f32
    for b, j in out:
        out[b, j] = ti.tanh(inp[b, j])


@ti.kernel
def tanh_backward(dinp: F2, dout: F2, out: F2):
    # dinp: (B, N) f32   dout: (B, N) f32   out: (B, N) f32 (forward output)
    for b, j in dinp:
        t = out[b, j]
        dinp[b, j] = dout[b, j] * (1.0 - t * t)
