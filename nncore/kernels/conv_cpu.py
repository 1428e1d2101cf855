"""CPU kernels for Conv2D -> ReLU -> MaxPool2D (the fused part of nncore.fusion), vectorised over channels.

The weights are repacked channels-last in 16-wide vectors, ``wv[tap, oc // 16]`` (tap = (c*KH + ky)*KW + kx;
the last row holds the bias), with zeros for the channels past OC, so a conv value for 16 channels costs one
scalar input load and one 16-wide FMA per tap. Neither the conv output nor its gradient is ever stored:
forward computes each pooling window's conv values in registers and keeps the ReLU'd winner; backward sums
the weight and bias gradients over the winners. The winners are kept channels-last as 16-wide integer
vectors, ``argmax[b, py*PW + px, oc // 16]``: the winner's position in its pooling window, dy*QW + dx, in 8 bits
(a quarter of the traffic of 32-bit flat indices; nncore.fusion fuses windows of at most 16 positions), or -1
where the pooled value is 0 and
ReLU passes no gradient. The pooled output is written in the usual channel-major layout that Flatten and
Linear expect, or channels-last for a Linear that maps it to W's columns, or, for a narrow Linear (under 32
outputs), as channels-last 16-wide vectors that ``linear_forward_pooled`` and ``linear_dweight_pooled`` read
as such, with W packed the same way (``pack_linear_weights``): their products then run along the channels
with no lane idle and no scalar stores of the pooled values.
"""
import taichi as ti

from .. import runtime
from . import F1, F2, kernel, n_elems, pool_threads, sized
from .fma import madd, vmadd
from .optim import sgd_element

L = 16
V = ti.types.vector(L, ti.f32)
VI = ti.types.vector(L, ti.i32)
VA2 = ti.types.ndarray(dtype=V, ndim=2)
VA3 = ti.types.ndarray(dtype=V, ndim=3)
VI8A3 = ti.types.ndarray(dtype=ti.types.vector(L, ti.i8), ndim=3)


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


@sized(lambda xp, *_: n_elems(xp))
def pad_input(xp: F2, inp: F2, n_c: ti.i32, h: ti.i32, w: ti.i32, ph: ti.i32, pw: ti.i32):
    # xp: (B, C*(H + 2PH)*(W + 2PW)) the input with its zero padding written out (for a padded conv only)
    # inp: (B, C*H*W)
    # The fused kernels then load pixels with no bounds to check (a clamp and a select per load made their
    # unrolled bodies slow to compile and to run).
    hp, wp = h + 2 * ph, w + 2 * pw
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for b in range(xp.shape[0]):
        for c, y in ti.ndrange(n_c, hp):
            for x in range(wp):
                iy, ix = y - ph, x - pw
                v = 0.0
                if 0 <= iy < h and 0 <= ix < w:
                    v = inp[b, (c * h + iy) * w + ix]
                xp[b, (c * hp + y) * wp + x] = v


@ti.func
def _pooled(oc, pos, n_oc, n_pos, cl_out: ti.template()):
    """Where pooled output (channel oc, position pos = py*PW + px) sits in a sample's row: channel-major, as
    Flatten and PyTorch order it, or channels-last when a Linear that reads it that way follows (nncore.fusion:
    a pooled position's 16 channels are then one contiguous run, where channel-major stores scatter each
    channel's value to its own region)."""
    i = oc * n_pos + pos
    if ti.static(cl_out):
        i = pos * n_oc + oc
    return i


# AVX-512 has 32 vector registers of 16 floats; AVX2 has 16 of 8, so a 16-wide vector takes two. The kernels
# size what they keep in registers by this: past the registers, accumulators spill (AVX-512's sizes on AVX2:
# docs/LOG.md, 2026-11-24). Read when a kernel is launched, so tests can flip it.
WIDE = "avx512f" in runtime.cpu_flags()


def budget() -> dict:
    """What the kernels below keep in registers: the conv forward's and weight gradient's 16-wide accumulators
    (``blocks_together``); the pooled Linear's forward (rows, outputs) and weight gradient (channel blocks,
    outputs) a task, outputs at most (``output_groups``)."""
    if WIDE:
        return {"forward": 16, "dweight": 20, "pooled_forward": (2, 12), "pooled_dweight": (2, 12)}
    return {"forward": 4, "dweight": 6, "pooled_forward": (3, 2), "pooled_dweight": (2, 2)}


def blocks_together(n_ob: int, per_block: int, budget: int, tasks_per_block: int = 0) -> int:
    """How many 16-channel blocks of output channels one iteration of the fused conv kernels computes: 4 or 2
    where they divide ``n_ob`` and their ``per_block`` accumulators each stay within ``budget`` vector registers
    (beyond it they spill: the weight gradient's 4 x 10 ran 1.5x slower than 2 x 10), and, where a kernel's tasks
    are counted by block (``tasks_per_block`` tasks a block), while that leaves two tasks a thread; else 1.
    Each input pixel loaded then feeds that many FMAs."""
    threads = pool_threads()
    for n in (4, 2):
        if (n_ob % n == 0 and n * per_block <= budget
                and (not tasks_per_block or tasks_per_block * (n_ob // n) >= 2 * threads)):
            return n
    return 1


@kernel
def conv_relu_pool_forward_cl(out: ti.types.ndarray(), argmax: VI8A3, xp: F2, wv: VA2, n_oc: ti.i32, n_c: ti.i32,
                              hp: ti.i32, wp: ti.i32, kh: ti.template(), kw: ti.template(), sh: ti.i32, sw: ti.i32,
                              oh_n: ti.i32, ow_n: ti.i32, qh: ti.template(), qw: ti.template(), qsh: ti.i32,
                              qsw: ti.i32, cl_out: ti.template(), nob: ti.template()):
    # out: (B, OC*PH*PW) f32 channel-major, or channels-last (B, PH*PW*OC) if cl_out (see _pooled); with cl_out
    # 2, channels-last 16-wide vectors (B, PH*PW, OCB), zero past OC, for linear_forward_pooled
    # argmax: (B, PH*PW, OCB) winners (see the module's docstring)
    # xp: (B, C*HP*WP) the padded input (pad_input)   wv: (TAPS + 1, OCB) packed weights and bias
    # nob: channel blocks per iteration (``blocks_together``), a divisor of OCB
    # The kernel and window sizes are compile-time constants: a channel's taps and the window's positions
    # unroll into independent chains of FMAs, and the window's conv values never leave registers. (Unrolling
    # the channels too made compile times grow to minutes for 3 channels.)
    taps = wv.shape[0] - 1
    py_n = (oh_n - qh) // qsh + 1
    px_n = (ow_n - qw) // qsw + 1
    nw = ti.static(qh * qw)
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    # One task per sample: neighbouring pooled rows of a channel share cache lines, so tasks of single rows
    # would have threads writing the same lines.
    for b in range(out.shape[0]):
        for py, px in ti.ndrange(py_n, px_n):
            for og in range(argmax.shape[2] // nob):
                ob0 = og * nob
                acc = [wv[taps, ob0 + j] for j in ti.static(range(nob)) for _ in ti.static(range(nw))]
                for c in range(n_c):
                    for dy, dx in ti.static(ti.ndrange(qh, qw)):  # (nested: Taichi warns past 32 iterations)
                        for ky, kx in ti.static(ti.ndrange(kh, kw)):
                            iy, ix = (py * qsh + dy) * sh + ky, (px * qsw + dx) * sw + kx
                            v = xp[b, (c * hp + iy) * wp + ix]
                            for j in ti.static(range(nob)):
                                madd(acc[j * nw + dy * qw + dx], v, wv[(c * kh + ky) * kw + kx, ob0 + j])
                for j in ti.static(range(nob)):
                    ob = ob0 + j
                    # ReLU, then the first strictly larger value wins, as in maxpool2d_forward; a window whose
                    # best is 0 keeps -1. A NaN wins too (the last one, as maxpool2d_forward), so NaN propagates.
                    best, win = V(0.0), VI(-1)
                    for dy, dx in ti.static(ti.ndrange(qh, qw)):
                        v = acc[j * nw + dy * qw + dx]
                        # NaN test on the bits: Taichi folds v != v to false.
                        bits = VI([ti.bit_cast(v[l], ti.i32) & 0x7FFFFFFF for l in ti.static(range(L))])
                        take = (v > best) | (bits > 0x7F800000)
                        win = ti.select(take, dy * qw + dx, win)
                        best = ti.select(take, v, best)
                    argmax[b, py * px_n + px, ob] = ti.cast(win, ti.i8)
                    if ti.static(cl_out == 2):
                        out[b, py * px_n + px, ob] = best  # (lanes past OC: 0, their weights and bias are 0)
                    else:
                        for l in ti.static(range(L)):
                            oc = ob * L + l
                            if oc < n_oc:
                                out[b, _pooled(oc, py * px_n + px, n_oc, py_n * px_n, cl_out)] = best[l]


PB = 16  # pooled positions a task of pack_linear_weights and linear_dweight_pooled takes (see there)


@sized(lambda wc, *_: 16 * wc.shape[0] * wc.shape[1] * wc.shape[2])
def pack_linear_weights(wc: VA3, params: F1, w_off: ti.i32, n_oc: ti.i32):
    # wc: (PH*PW, OUT, OCB) 16-wide vectors, wc[pos, o, ob][l] = W[o, (ob*16 + l)*PH*PW + pos], zero past OC:
    # the weights of the Linear after the fused part (params[w_off:]: W (OUT, OC*PH*PW), PyTorch's columns),
    # by pooled position and output, 16 channels a vector (for ``from_dz`` below)
    # A task takes PB positions of one output's 16 channels: the 16 x PB floats it reads share their lines.
    n_pos, n_out, n_ob = wc.shape[0], wc.shape[1], wc.shape[2]
    n_pb = (n_pos + PB - 1) // PB
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for t in range(n_out * n_ob * n_pb):
        o, ob, pb = t // (n_ob * n_pb), t // n_pb % n_ob, t % n_pb
        for pos in range(pb * PB, ti.min(pb * PB + PB, n_pos)):
            v = V(0.0)
            for l in ti.static(range(L)):
                oc = ob * L + l
                if oc < n_oc:
                    v[l] = params[w_off + (o * n_oc + oc) * n_pos + pos]
            wc[pos, o, ob] = v


@kernel
def conv_relu_pool_dweight_cl(part: VA3, dout: F2, wc: VA3, argmax: VI8A3, xp: F2, n_oc: ti.i32, n_c: ti.i32,
                              hp: ti.i32, wp: ti.i32, kh: ti.template(), kw: ti.template(), sh: ti.i32, sw: ti.i32,
                              oh_n: ti.i32, ow_n: ti.i32, qh: ti.template(), qw: ti.template(), qsh: ti.i32,
                              qsw: ti.i32, cl_out: ti.template(), from_dz: ti.template(), nob: ti.template()):
    # part: (NBB, TAPS + 1, OCB) partial sums over blocks of samples: for every tap, the winners' gradients
    # times the tap's input, and (last row) the gradients themselves for the bias
    # dout: the pooled gradient, laid out as forward's out; or, if from_dz, the gradient (B, OUT) at the output
    # of the narrow Linear after the part, whose weights wc holds (pack_linear_weights; unread otherwise): a
    # pooled position's gradient for 16 channels is then OUT multiply-adds of 16-wide vectors, computed where it
    # is used instead of written out by the Linear as its input gradient and read back here
    # argmax: (B, PH*PW, OCB) winners   xp: (B, C*HP*WP) padded input
    # nob: channel blocks per task (``blocks_together``), a divisor of OCB
    # A task sums one block of samples for one input channel's KH*KW taps and nob blocks of 16 output channels,
    # in registers (each input pixel loaded once for them all). A window's gradient reaches its winner only (a
    # select per window position, branch-free).
    n_bb, n_og = part.shape[0], argmax.shape[2] // nob
    n_b = argmax.shape[0]
    py_n = (oh_n - qh) // qsh + 1
    px_n = (ow_n - qw) // qsw + 1
    nt = ti.static(kh * kw + 1)  # accumulators per channel block: the taps, then the bias
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for t in range(n_bb * n_c * n_og):
        bb, c, og = t // (n_c * n_og), t // n_og % n_c, t % n_og
        ob0 = og * nob
        acc = [V(0.0) for _ in ti.static(range(nob * nt))]
        for b in range(bb * n_b // n_bb, (bb + 1) * n_b // n_bb):
            for py, px in ti.ndrange(py_n, px_n):
                pos = py * px_n + px
                win = [ti.cast(argmax[b, pos, ob0 + j], ti.i32) for j in ti.static(range(nob))]
                g = [V(0.0) for _ in ti.static(range(nob))]
                if ti.static(from_dz):
                    for o in range(wc.shape[1]):
                        s = dout[b, o]
                        for j in ti.static(range(nob)):
                            madd(g[j], s, wc[pos, o, ob0 + j])
                else:
                    for j in ti.static(range(nob)):
                        for l in ti.static(range(L)):
                            # past OC: a clamped load, zeroed below (those lanes never win: their weights are 0)
                            oc = ti.min((ob0 + j) * L + l, n_oc - 1)
                            g[j][l] = dout[b, _pooled(oc, pos, n_oc, py_n * px_n, cl_out)]
                for j in ti.static(range(nob)):
                    g[j] = ti.select(win[j] >= 0, g[j], 0.0)
                    acc[j * nt + nt - 1] += g[j]
                for dy, dx in ti.static(ti.ndrange(qh, qw)):
                    oy, ox = py * qsh + dy, px * qsw + dx
                    d = [ti.select(win[j] == dy * qw + dx, g[j], 0.0) for j in ti.static(range(nob))]
                    for ky, kx in ti.static(ti.ndrange(kh, kw)):
                        v = xp[b, (c * hp + oy * sh + ky) * wp + ox * sw + kx]
                        for j in ti.static(range(nob)):
                            madd(acc[j * nt + ky * kw + kx], v, d[j])
        for j in ti.static(range(nob)):
            for q in ti.static(range(kh * kw)):
                part[bb, c * kh * kw + q, ob0 + j] = acc[j * nt + q]
            if c == 0:
                part[bb, part.shape[1] - 1, ob0 + j] = acc[j * nt + nt - 1]


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


def output_groups(n_out: int, most: int) -> int:
    """Outputs per task in the pooled Linear's kernels: all of a narrow layer's, or an even share of them
    within ``most`` (``budget``), so a task's accumulators stay in registers. A last group that would run past
    the outputs starts earlier instead and stores only its own: every task then reads its outputs at fixed
    offsets from one index (a clamp per output kept ten index computations in the inner loop)."""
    groups = -(-n_out // most)
    return -(-n_out // groups)


@sized(lambda out, pv, *_: n_elems(out) * pv.shape[1] * pv.shape[2] * L // 20)
def linear_forward_pooled(out: F2, pv: VA3, wc: VA3, params: F1, b_off: ti.i32, no: ti.template(),
                          nr: ti.template()):
    # out: (B, OUT) = pooled @ W^T + b, for the narrow Linear after a fused part (nncore.fusion)
    # pv: (B, PH*PW, OCB) the part's pooled output as vectors (cl_out 2)   wc: W (pack_linear_weights)
    # no, nr: outputs and rows per task (``budget``)
    # Vectorised along the pooled channels: for nr rows and no outputs, vector products of pv and wc summed
    # lane by lane, then across the lanes (no lane idle, where vectors of outputs would leave 6 of 16 so).
    m_n, n_out = out.shape[0], out.shape[1]
    n_pos, n_ob = pv.shape[1], pv.shape[2]
    mt, ng = (m_n + nr - 1) // nr, (n_out + no - 1) // no
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for t in range(mt * ng):
        m0, g0 = t // ng * nr, t % ng * no
        o0 = ti.min(g0, n_out - no)  # (see ``output_groups``)
        acc = [V(0.0) for _ in ti.static(range(nr * no))]
        for pos in range(n_pos):
            for ob in range(n_ob):
                w = [wc[pos, o0 + o, ob] for o in ti.static(range(no))]
                for i in ti.static(range(nr)):
                    x = pv[ti.min(m0 + i, m_n - 1), pos, ob]
                    for o in ti.static(range(no)):
                        vmadd(acc[i * no + o], x, w[o])
        for i, o in ti.static(ti.ndrange(nr, no)):
            if m0 + i < m_n and o0 + o >= g0:
                out[m0 + i, o0 + o] = acc[i * no + o].sum() + params[b_off + o0 + o]


HALVES = 2  # blocks of samples linear_dweight_pooled sums apart, then adds (see there)
VA4 = ti.types.ndarray(dtype=V, ndim=4)


@sized(lambda dparams, half, dout, pv, *_: n_elems(dout) * pv.shape[1] * pv.shape[2] * L // 20)
def linear_dweight_pooled(dparams: F1, half: VA4, dout: F2, pv: VA3, w_off: ti.i32, b_off: ti.i32, n_oc: ti.i32,
                          no: ti.template(), kv: ti.template(), sgd: ti.template(), params: F1, velocity: F1,
                          lr: ti.f32, momentum: ti.f32, weight_decay: ti.f32):
    # dparams[w_off:]: dW (OUT, OC*PH*PW), PyTorch's columns, = dz^T @ pooled; dparams[b_off:]: db
    # half: (HALVES, PH*PW, OUT, OCB) the sums over each half of the batch, W's vectors' layout (as wc)
    # dout: dz (B, OUT)   pv: as linear_forward_pooled's   no: outputs per task   kv: channel blocks per task
    # Two loops. The first sums each half of the batch on its own, a task a half's PB positions, kv channel
    # blocks and no outputs: for each position, a scalar of dz times a vector of pv, summed over the half's
    # samples. On two threads each thread then reads the pooled rows it wrote in the conv forward (the
    # cooperative step gives the halves of both loops to the same threads: nncore.coop), where a sum over the
    # whole batch read half its rows from the other core's cache. The second adds the two halves and stores
    # dW in PyTorch's columns, a task PB positions of one output's 16 channels (whole lines of dW); one more
    # task sums the bias gradient. The halves are fixed, whatever the threads: results do not depend on them.
    # sgd 1 or 2 (optim.SGD.fused()'s mode): W in params gets SGD's step (velocity, lr, momentum, weight_decay)
    # there instead of its gradient in dparams, as sgd_step would give it; 0: dW to dparams.
    m_n, n_out = dout.shape[0], dout.shape[1]
    n_pos, n_ob = pv.shape[1], pv.shape[2]
    nk, ng, n_pb = n_ob // kv, (n_out + no - 1) // no, (n_pos + PB - 1) // PB
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for t in range(HALVES * n_pb * nk * ng):
        h, pb, ob0, g0 = t // (n_pb * nk * ng), t // (nk * ng) % n_pb, t // ng % nk * kv, t % ng * no
        o0 = ti.min(g0, n_out - no)  # (see ``output_groups``)
        for pos in range(pb * PB, ti.min(pb * PB + PB, n_pos)):
            acc = [V(0.0) for _ in ti.static(range(kv * no))]
            for m in range(h * m_n // HALVES, (h + 1) * m_n // HALVES):
                x = [pv[m, pos, ob0 + j] for j in ti.static(range(kv))]
                for o in ti.static(range(no)):
                    s = dout[m, o0 + o]
                    for j in ti.static(range(kv)):
                        madd(acc[j * no + o], s, x[j])
            for j, o in ti.static(ti.ndrange(kv, no)):
                if o0 + o >= g0:
                    half[h, pos, o0 + o, ob0 + j] = acc[j * no + o]
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for t in range(n_out * n_ob * n_pb + 1):
        if t == n_out * n_ob * n_pb:
            for o in range(n_out):
                s = 0.0
                for m in range(m_n):
                    s += dout[m, o]
                dparams[b_off + o] = s
        else:
            o, ob, pb = t // (n_ob * n_pb), t // n_pb % n_ob, t % n_pb
            at = w_off + (o * n_oc + ob * L) * n_pos
            for pos in range(pb * PB, ti.min(pb * PB + PB, n_pos)):
                v = half[0, pos, o, ob]
                for hh in ti.static(range(1, HALVES)):
                    v += half[hh, pos, o, ob]
                for l in range(ti.min(L, n_oc - ob * L)):
                    if ti.static(sgd):
                        sgd_element(params, velocity, at + l * n_pos + pos, v[l], sgd, (lr, momentum, weight_decay))
                    else:
                        dparams[at + l * n_pos + pos] = v[l]
