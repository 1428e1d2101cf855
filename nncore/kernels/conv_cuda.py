"""Conv2D -> ReLU -> MaxPool2D fused for CUDA, for a conv that needs no input gradient (the first layer).

Forward: one thread per pooled output computes the conv values of its window, applies ReLU, keeps the first
largest (MaxPool2D's tie rule) and stores it with its position: the conv and ReLU outputs are never written.
Backward: a pooled output's gradient reaches its winner only, and only where the winner is positive (ReLU's
derivative), so the weight and bias gradients are sums over pooled outputs, a quarter of the conv's positions
for 2x2 pooling. They are summed without atomics: each thread adds up one sample's terms for one channel's
taps, and a second loop adds the samples in a fixed order, so a run gives the same bits every time.

Layouts as in conv.py and pool.py: inp (B, C*H*W), out and argmax (B, OC*PH*PW) channel-major; argmax holds
the winner's flat index in the conv output of its sample, (oc * OH + oy) * OW + ox.
"""
import taichi as ti

from . import F1, F2, I2, kernel
from .activation import is_nan, relu

@ti.func
def _pixel(inp: ti.template(), b, c, h, w, iy, ix):
    """inp[b, c, iy, ix], or 0 outside the image (zero padding): the load is clamped inside instead of
    branched around, so a thread's loads do not wait on one another."""
    v = inp[b, (c * h + ti.min(ti.max(iy, 0), h - 1)) * w + ti.min(ti.max(ix, 0), w - 1)]
    return ti.select((iy >= 0) & (iy < h) & (ix >= 0) & (ix < w), v, 0.0)


UNROLL = 4  # pooled outputs per step of the weight gradient's loop


def chunks(batch: int) -> int:
    """Rows of the weight gradient's partial sums: one per sample."""
    return batch


@kernel
def conv_relu_pool_forward(out: F2, argmax: I2, inp: F2, params: F1, w_off: ti.i32, b_off: ti.i32,
                           n_c: ti.i32, h: ti.i32, w: ti.i32, n_oc: ti.i32, kh: ti.template(),
                           kw: ti.template(), sh: ti.i32, sw: ti.i32, ph: ti.i32, pw: ti.i32,
                           pkh: ti.template(), pkw: ti.template(), psh: ti.i32, psw: ti.i32):
    # out, argmax: (B, OC*PH*PW)   inp: (B, C*H*W)   params[w_off:]: W (OC, C, KH, KW)   params[b_off:]: b (OC,)
    # The kernel and window sizes are compile-time: every loop over them unrolls, and a channel's KH*KW
    # weights are read once into registers for the whole window.
    oh_n = (h + 2 * ph - kh) // sh + 1
    ow_n = (w + 2 * pw - kw) // sw + 1
    poh_n = (oh_n - pkh) // psh + 1
    pow_n = (ow_n - pkw) // psw + 1
    for b, oc, py, px in ti.ndrange(out.shape[0], n_oc, poh_n, pow_n):
        acc = ti.Vector([params[b_off + oc]] * (pkh * pkw), ti.f32)  # the window's conv values
        for c in range(n_c):
            wv = ti.Vector([params[w_off + (oc * n_c + c) * kh * kw + t] for t in ti.static(range(kh * kw))],
                           ti.f32)
            for wy, wx in ti.static(ti.ndrange(pkh, pkw)):
                y0, x0 = (py * psh + wy) * sh - ph, (px * psw + wx) * sw - pw
                for ky, kx in ti.static(ti.ndrange(kh, kw)):
                    acc[wy * pkw + wx] += _pixel(inp, b, c, h, w, y0 + ky, x0 + kx) * wv[ky * kw + kx]
        best, best_i = -1.0, 0
        for wy, wx in ti.static(ti.ndrange(pkh, pkw)):
            v = relu(acc[wy * pkw + wx])
            if v > best or is_nan(v):  # strictly greater: the first of equal values wins; NaN as maxpool2d_forward
                best, best_i = v, (oc * oh_n + py * psh + wy) * ow_n + px * psw + wx
        o = (oc * poh_n + py) * pow_n + px
        out[b, o] = best
        argmax[b, o] = best_i


@kernel
def conv_relu_pool_dweight(dparams: F1, part: F2, dout: F2, out: F2, argmax: I2, inp: F2, w_off: ti.i32,
                           b_off: ti.i32, n_c: ti.i32, h: ti.i32, w: ti.i32, n_oc: ti.i32, kh: ti.template(),
                           kw: ti.template(), sh: ti.i32, sw: ti.i32, ph: ti.i32, pw: ti.i32):
    # dparams[w_off:]: dW (OC, C, KH, KW), dparams[b_off:]: db (OC,)   part: (B, OC*C*KH*KW + OC) scratch
    # dout, out, argmax: (B, OC*PH*PW) the pooled gradient, output and winners   inp: (B, C*H*W)
    n_b, n_p = dout.shape[0], dout.shape[1]
    per_oc = n_p // n_oc  # pooled outputs per channel
    ow_n = (w + 2 * pw - kw) // sw + 1
    oh_n = (h + 2 * ph - kh) // sh + 1
    n_w = n_oc * n_c * kh * kw
    # One thread per (sample, out channel, in channel) sums all KH*KW taps (and the bias, for channel 0).
    for b, oc, c in ti.ndrange(n_b, n_oc, n_c):
        acc = ti.Vector.zero(ti.f32, kh * kw)
        acc_b = 0.0
        q0, q1 = oc * per_oc, (oc + 1) * per_oc
        for step in range((per_oc + UNROLL - 1) // UNROLL):
            for u in ti.static(range(UNROLL)):
                q = ti.min(q0 + step * UNROLL + u, q1 - 1)  # past the end: a repeat, weighted 0 below
                # ReLU passes the gradient only where the winner was positive (or NaN, as PyTorch).
                g = ti.select((out[b, q] <= 0.0) | (q0 + step * UNROLL + u >= q1), 0.0, dout[b, q])
                acc_b += g
                p = argmax[b, q] - oc * oh_n * ow_n
                y0, x0 = (p // ow_n) * sh - ph, (p % ow_n) * sw - pw
                for ky, kx in ti.static(ti.ndrange(kh, kw)):
                    acc[ky * kw + kx] += g * _pixel(inp, b, c, h, w, y0 + ky, x0 + kx)
        for t in ti.static(range(kh * kw)):
            part[b, (oc * n_c + c) * kh * kw + t] = acc[t]
        if c == 0:
            part[b, n_w + oc] = acc_b
    # Sum the samples for each gradient entry in a fixed order: eight interleaved running sums (eight loads in
    # flight per thread), added at the end.
    for j in range(n_w + n_oc):
        s = ti.Vector.zero(ti.f32, 8)
        for r8 in range(n_b // 8):
            for u in ti.static(range(8)):
                s[u] += part[r8 * 8 + u, j]
        for r in range(n_b // 8 * 8, n_b):
            s[0] += part[r, j]
        dparams[w_off + j if j < n_w else b_off + j - n_w] = s.sum()
