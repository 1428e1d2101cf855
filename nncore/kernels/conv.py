"""2-D convolution (cross-correlation, as PyTorch's Conv2d) with stride and zero padding.

Tensors are flat per sample: inp (B, C*H*W), out (B, OC*OH*OW), both channel-major (NCHW).
Weights W (OC, C, KH, KW) and bias (OC,) sit in the flat parameter buffer at w_off and b_off.
"""
import taichi as ti

from .. import runtime
from . import F1, F2, kernel


@kernel
def conv2d_forward(out: F2, inp: F2, params: F1, w_off: ti.i32, b_off: ti.i32,
                   n_c: ti.i32, h: ti.i32, w: ti.i32, n_oc: ti.i32, kh: ti.i32, kw: ti.i32,
                   sh: ti.i32, sw: ti.i32, ph: ti.i32, pw: ti.i32):
    # out: (B, OC*OH*OW) f32   inp: (B, C*H*W) f32   params[w_off:]: W (OC, C, KH, KW)   params[b_off:]: b (OC,)
    oh_n = (h + 2 * ph - kh) // sh + 1
    ow_n = (w + 2 * pw - kw) // sw + 1
    ti.loop_config(serialize=runtime.serial)
    for b, oc, oy, ox in ti.ndrange(out.shape[0], n_oc, oh_n, ow_n):
        acc = params[b_off + oc]
        for c in range(n_c):
            for ky in range(kh):
                iy = oy * sh - ph + ky
                if 0 <= iy < h:
                    for kx in range(kw):
                        ix = ox * sw - pw + kx
                        if 0 <= ix < w:
                            acc += inp[b, (c * h + iy) * w + ix] * params[w_off + ((oc * n_c + c) * kh + ky) * kw + kx]
        out[b, (oc * oh_n + oy) * ow_n + ox] = acc


@kernel
def conv2d_backward(dinp: F2, dparams: F1, dout: F2, inp: F2, params: F1, w_off: ti.i32, b_off: ti.i32,
                    n_c: ti.i32, h: ti.i32, w: ti.i32, n_oc: ti.i32, kh: ti.i32, kw: ti.i32,
                    sh: ti.i32, sw: ti.i32, ph: ti.i32, pw: ti.i32, need_dinp: ti.i32, with_dweight: ti.i32):
    # dinp: (B, C*H*W) f32   dparams[w_off:]: dW (OC, C, KH, KW)   dparams[b_off:]: db (OC,)
    # dout: (B, OC*OH*OW) f32   inp: (B, C*H*W) f32   params[w_off:]: W (OC, C, KH, KW)
    # with_dweight = 0 leaves dW and db to conv2d_dweight_atomic (CUDA).
    n_b = dout.shape[0]
    oh_n = (h + 2 * ph - kh) // sh + 1
    ow_n = (w + 2 * pw - kw) // sw + 1
    # dinp[b, c, iy, ix] gathers every output that read it: no atomics.
    ti.loop_config(serialize=runtime.serial)
    for b, c, iy, ix in ti.ndrange(n_b * need_dinp, n_c, h, w):
        acc = 0.0
        for ky in range(kh):
            ty = iy + ph - ky
            if ty >= 0 and ty % sh == 0 and ty // sh < oh_n:
                oy = ty // sh
                for kx in range(kw):
                    tx = ix + pw - kx
                    if tx >= 0 and tx % sw == 0 and tx // sw < ow_n:
                        ox = tx // sw
                        for oc in range(n_oc):
                            acc += dout[b, (oc * oh_n + oy) * ow_n + ox] * params[w_off + ((oc * n_c + c) * kh + ky) * kw + kx]
        dinp[b, (c * h + iy) * w + ix] = acc
    ti.loop_config(serialize=runtime.serial)
    for oc, c, ky, kx in ti.ndrange(n_oc * with_dweight, n_c, kh, kw):
        acc = 0.0
        for b in range(n_b):
            for oy in range(oh_n):
                iy = oy * sh - ph + ky
                if 0 <= iy < h:
                    for ox in range(ow_n):
                        ix = ox * sw - pw + kx
                        if 0 <= ix < w:
                            acc += dout[b, (oc * oh_n + oy) * ow_n + ox] * inp[b, (c * h + iy) * w + ix]
        dparams[w_off + ((oc * n_c + c) * kh + ky) * kw + kx] = acc
    ti.loop_config(serialize=runtime.serial)
    for oc in range(n_oc * with_dweight):
        acc = 0.0
        for b in range(n_b):
            for p in range(oh_n * ow_n):
                acc += dout[b, oc * oh_n * ow_n + p]
        dparams[b_off + oc] = acc


@kernel
def conv2d_dweight_atomic(dparams: F1, dout: F2, inp: F2, w_off: ti.i32, b_off: ti.i32,
                          n_c: ti.i32, h: ti.i32, w: ti.i32, n_oc: ti.i32, kh: ti.i32, kw: ti.i32,
                          sh: ti.i32, sw: ti.i32, ph: ti.i32, pw: ti.i32):
    # For CUDA: dW and db with one thread per (sample, weight), summed with atomic adds. The serial reduction
    # over the batch that suits the CPU leaves a GPU with a few hundred busy threads.
    # dparams[w_off:]: dW (OC, C, KH, KW) and dparams[b_off:]: db (OC,), zeroed first by this kernel
    n_b = dout.shape[0]
    oh_n = (h + 2 * ph - kh) // sh + 1
    ow_n = (w + 2 * pw - kw) // sw + 1
    n_w = n_oc * n_c * kh * kw
    ti.loop_config(serialize=runtime.serial)
    for i in range(n_w + n_oc):
        dparams[w_off + i if i < n_w else b_off + i - n_w] = 0.0
    ti.loop_config(serialize=runtime.serial)
    for b, q in ti.ndrange(n_b, n_w + n_oc):
        acc = 0.0
        if q >= n_w:
            oc = q - n_w
            for p in range(oh_n * ow_n):
                acc += dout[b, oc * oh_n * ow_n + p]
            ti.atomic_add(dparams[b_off + oc], acc)
        else:
            kx = q % kw
            ky = (q // kw) % kh
            c = (q // (kw * kh)) % n_c
            oc = q // (kw * kh * n_c)
            for oy in range(oh_n):
                iy = oy * sh - ph + ky
                if 0 <= iy < h:
                    for ox in range(ow_n):
                        ix = ox * sw - pw + kx
                        if 0 <= ix < w:
                            acc += dout[b, (oc * oh_n + oy) * ow_n + ox] * inp[b, (c * h + iy) * w + ix]
            ti.atomic_add(dparams[w_off + q], acc)
