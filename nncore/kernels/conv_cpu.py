"""CPU kernels for Conv2D -> ReLU -> MaxPool2D (the fused part of nncore.fusion), vectorised over channels.

The conv output lives channels-last in 16-wide vectors, ``conv[b, y*OW + x, oc // 16]``, and the weights are
repacked the same way, ``wv[tap, oc // 16]`` (tap = (c*KH + ky)*KW + kx; the last row holds the bias), with
zeros for the channels past OC. Both are vector-typed ndarrays, so every access is one vector load or store:
a conv output position costs one scalar input load and one 16-wide FMA per tap and channel block. The pooled
output is written in the usual channel-major layout that Flatten and Linear expect.
"""
import taichi as ti

from .. import runtime
from . import F1, F2, I2, kernel, n_elems, sized

L = 16
V = ti.types.vector(L, ti.f32)
VI = ti.types.vector(L, ti.i32)
VA2 = ti.types.ndarray(dtype=V, ndim=2)
VA3 = ti.types.ndarray(dtype=V, ndim=3)


@sized(lambda wv, *_: 16 * n_elems(wv))
def pack_weights(wv: VA2, params: F1, w_off: ti.i32, b_off: ti.i32, n_oc: ti.i32):
    # wv: (TAPS + 1, OCB) <- params[w_off:]: W (OC, TAPS) and params[b_off:]: b (OC,); zero past OC
    taps = wv.shape[0] - 1
    ti.loop_config(serialize=runtime.serial)
    for tap, ob in ti.ndrange(taps + 1, wv.shape[1]):
        v = V(0.0)
        for l in ti.static(range(L)):
            oc = ob * L + l
            if oc < n_oc:
                v[l] = params[w_off + oc * taps + tap] if tap < taps else params[b_off + oc]
        wv[tap, ob] = v


@kernel
def conv_forward_cl(conv: VA3, inp: F2, wv: VA2, n_c: ti.i32, h: ti.i32, w: ti.i32, kh: ti.i32, kw: ti.i32,
                    sh: ti.i32, sw: ti.i32, ph: ti.i32, pw: ti.i32, ow_n: ti.i32):
    # conv: (B, OH*OW, OCB) channels-last   inp: (B, C*H*W) f32   wv: (TAPS + 1, OCB) packed weights and bias
    taps = wv.shape[0] - 1
    oh_n = conv.shape[1] // ow_n
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for t in range(conv.shape[0] * oh_n):  # one output row per task
        b, y = t // oh_n, t % oh_n
        for x in range(ow_n):
            for ob in range(conv.shape[2]):
                acc = wv[taps, ob]
                for c in range(n_c):
                    for ky in range(kh):
                        iy = y * sh - ph + ky
                        if 0 <= iy < h:
                            for kx in range(kw):
                                ix = x * sw - pw + kx
                                if 0 <= ix < w:
                                    acc += inp[b, (c * h + iy) * w + ix] * wv[(c * kh + ky) * kw + kx, ob]
                conv[b, y * ow_n + x, ob] = acc


@kernel
def relu_pool_forward_cl(out: F2, argmax: I2, conv: VA3, n_oc: ti.i32, ow_n: ti.i32,
                         qh: ti.i32, qw: ti.i32, qsh: ti.i32, qsw: ti.i32):
    # out, argmax: (B, OC*PH*PW) channel-major; argmax = winning position y*OW + x in the channel, or -1 when the
    # whole window is <= 0 (ReLU passes no gradient)   conv: (B, OH*OW, OCB) channels-last
    oh_n = conv.shape[1] // ow_n
    py_n = (oh_n - qh) // qsh + 1
    px_n = (ow_n - qw) // qsw + 1
    # One task per sample: neighbouring pooled rows of a channel share cache lines, so tasks of single rows
    # would have threads writing the same lines.
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for b in range(out.shape[0]):
        for py, px in ti.ndrange(py_n, px_n):
            for ob in range(conv.shape[2]):
                best = V(0.0)
                arg = VI(-1)
                for dy in range(qh):
                    for dx in range(qw):
                        pos = (py * qsh + dy) * ow_n + px * qsw + dx
                        v = conv[b, pos, ob]
                        arg = ti.select(v > best, pos, arg)
                        best = ti.max(best, v)
                for l in ti.static(range(L)):
                    oc = ob * L + l
                    if oc < n_oc:
                        o = (oc * py_n + py) * px_n + px
                        out[b, o] = best[l]
                        argmax[b, o] = arg[l]


@kernel
def pool_grad_scatter_cl(dconv: VA3, dout: F2, argmax: I2, n_oc: ti.i32, ow_n: ti.i32,
                         qh: ti.i32, qw: ti.i32, qsh: ti.i32, qsw: ti.i32):
    # dconv: (B, OH*OW, OCB) channels-last <- zero, then += dout at each window's winner
    # dout, argmax: (B, OC*PH*PW). One task per sample, so overlapping windows never race; each window adds a
    # 16-channel vector (zero in the lanes that did not win there) to every position it covers. The sample's
    # slice is zeroed inside its task, so the additions hit cache rather than memory (zeroing the whole
    # buffer first was a pass of its own over tens of MB).
    oh_n = dconv.shape[1] // ow_n
    py_n = (oh_n - qh) // qsh + 1
    px_n = (ow_n - qw) // qsw + 1
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for b in range(dout.shape[0]):
        for pos, ob in ti.ndrange(dconv.shape[1], dconv.shape[2]):
            dconv[b, pos, ob] = V(0.0)
        for ob in range(dconv.shape[2]):
            for py in range(py_n):
                for px in range(px_n):
                    g, arg = V(0.0), VI(-1)
                    for l in ti.static(range(L)):
                        oc = ob * L + l
                        if oc < n_oc:
                            o = (oc * py_n + py) * px_n + px
                            g[l] = dout[b, o]
                            arg[l] = argmax[b, o]
                    for dy in range(qh):
                        for dx in range(qw):
                            pos = (py * qsh + dy) * ow_n + px * qsw + dx
                            dconv[b, pos, ob] += ti.select(arg == pos, g, 0.0)


@kernel
def conv_dweight_cl(part: VA3, dconv: VA3, inp: F2, n_c: ti.template(), h: ti.i32, w: ti.i32,
                    kh: ti.template(), kw: ti.template(), sh: ti.i32, sw: ti.i32, ph: ti.i32, pw: ti.i32,
                    ow_n: ti.i32):
    # part: (NBB, TAPS + 1, OCB) partial sums over blocks of samples: for every tap, dconv times the tap's
    # input, and (last row) dconv itself for the bias   dconv: (B, OH*OW, OCB)   inp: (B, C*H*W)
    # The channel count and kernel size are compile-time constants, so the taps unroll into registers.
    n_bb, n_ob = part.shape[0], dconv.shape[2]
    n_b = dconv.shape[0]
    oh_n = dconv.shape[1] // ow_n
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for t in range(n_bb * n_ob):
        bb, ob = t // n_ob, t % n_ob
        acc = [V(0.0) for _ in ti.static(range(n_c * kh * kw + 1))]
        for b in range(bb * n_b // n_bb, (bb + 1) * n_b // n_bb):
            for y in range(oh_n):
                for x in range(ow_n):
                    d = dconv[b, y * ow_n + x, ob]
                    acc[n_c * kh * kw] += d
                    for c in ti.static(range(n_c)):
                        for ky in ti.static(range(kh)):
                            iy = y * sh - ph + ky
                            for kx in ti.static(range(kw)):
                                ix = x * sw - pw + kx
                                if 0 <= iy < h and 0 <= ix < w:
                                    acc[(c * kh + ky) * kw + kx] += inp[b, (c * h + iy) * w + ix] * d
        for q in ti.static(range(n_c * kh * kw + 1)):
            part[bb, q, ob] = acc[q]


@sized(lambda dparams, part, *_: 16 * part.shape[0] * part.shape[1] * part.shape[2])
def dweight_reduce(dparams: F1, part: VA3, w_off: ti.i32, b_off: ti.i32, n_oc: ti.i32):
    # dparams[w_off:]: dW (OC, TAPS), dparams[b_off:]: db (OC,) <- the sum of part: (NBB, TAPS + 1, OCB)
    taps = part.shape[1] - 1
    ti.loop_config(serialize=runtime.serial)
    for q, ob in ti.ndrange(taps + 1, part.shape[2]):
        acc = V(0.0)
        for bb in range(part.shape[0]):
            acc += part[bb, q, ob]
        for l in ti.static(range(L)):
            oc = ob * L + l
            if oc < n_oc:
                if q == taps:
                    dparams[b_off + oc] = acc[l]
                else:
                    dparams[w_off + oc * taps + q] = acc[l]
