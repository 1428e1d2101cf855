"""2-D max pooling (no padding, PyTorch's MaxPool2d floor mode) with the argmax kept for backward.

Tensors are flat per sample, channel-major: inp (B, C*H*W), out and argmax (B, C*OH*OW). The argmax holds
the flat index of the winning input within its sample; ties go to the first element in row-major order. A NaN
wins its window (the last NaN, as PyTorch's CPU max pooling), so NaN propagates.
"""
import taichi as ti

from .. import runtime
from . import F2, I2, kernel
from .activation import is_nan


@kernel
def maxpool2d_forward(out: F2, argmax: I2, inp: F2, n_c: ti.i32, h: ti.i32, w: ti.i32,
                      kh: ti.i32, kw: ti.i32, sh: ti.i32, sw: ti.i32):
    # out: (B, C*OH*OW) f32   argmax: (B, C*OH*OW) i32   inp: (B, C*H*W) f32
    oh_n = (h - kh) // sh + 1
    ow_n = (w - kw) // sw + 1
    ti.loop_config(serialize=runtime.serial)
    for b, c, oy, ox in ti.ndrange(out.shape[0], n_c, oh_n, ow_n):
        best_i = (c * h + oy * sh) * w + ox * sw
        best = inp[b, best_i]
        for ky in range(kh):
            for kx in range(kw):
                i = (c * h + oy * sh + ky) * w + ox * sw + kx
                v = inp[b, i]
                if v > best or is_nan(v):
                    best = v
                    best_i = i
        o = (c * oh_n + oy) * ow_n + ox
        out[b, o] = best
        argmax[b, o] = best_i


@kernel
def maxpool2d_backward(dinp: F2, dout: F2, argmax: I2, n_c: ti.i32, h: ti.i32, w: ti.i32,
                       kh: ti.i32, kw: ti.i32, sh: ti.i32, sw: ti.i32):
    # dinp: (B, C*H*W) f32   dout: (B, C*OH*OW) f32   argmax: (B, C*OH*OW) i32 (from the forward pass)
    oh_n = (h - kh) // sh + 1
    ow_n = (w - kw) // sw + 1
    # Each input gathers from the windows that contain it (overlapping windows too): no atomics.
    ti.loop_config(serialize=runtime.serial)
    for b, c, iy, ix in ti.ndrange(dinp.shape[0], n_c, h, w):
        i = (c * h + iy) * w + ix
        oy0 = ti.max(0, (iy - kh) // sh + 1)
        ox0 = ti.max(0, (ix - kw) // sw + 1)
        oy1 = ti.min(oh_n - 1, iy // sh)
        ox1 = ti.min(ow_n - 1, ix // sw)
        acc = 0.0
        for oy in range(oy0, oy1 + 1):
            for ox in range(ox0, ox1 + 1):
                o = (c * oh_n + oy) * ow_n + ox
                if argmax[b, o] == i:
                    acc += dout[b, o]
        dinp[b, i] = acc
