"""Shared-memory tiled matrix products for Linear on CUDA (forward, input gradient, weight gradient).

Each block of 256 threads computes a tile of C = A @ B, 64 columns wide and 16 x TM rows tall (TM = 4, 2 or
1 rows per thread), stepping through K in slices of 16: the threads copy a (16 TM)x16 slice of A and a 16x64
slice of B from registers into shared memory (each thread TM elements of A and 4 of B, neighbouring threads
reading neighbouring addresses), load the next slices from global memory into registers, then every thread
accumulates a TMx4 register tile, the TM adjacent rows from ``TM ty`` and the 4 adjacent columns from ``4 tx``
(each one vector load from shared memory), while those loads are in flight. The tallest tiles (64 rows) reuse
each loaded element most; shorter ones give a product with few rows (a batch of 64) enough tiles to fill the
GPU. Operands are read where they lie — the activation, the (OUT, IN) weight inside the flat parameter buffer,
the upstream gradient — through compile-time views, so nothing is transposed or copied; the activation's
derivative is applied as the gradient is loaded, and bias and activation are applied in the forward's epilogue.

``use_tiled`` says which layers may use tiles: those whose sides both reach a tile (a 10-wide output would waste
most of each tile); ``rows_per_thread`` picks, per product, the tallest tile that still gives enough tiles to
fill the GPU, or none. Elsewhere the plain one-thread-per-output kernels in ``linear.py`` run, or the split
forward below for few outputs.
``linear_forward_gpu`` and ``linear_backward_gpu`` make that choice for Linear, with or without a fused
activation.
"""
import functools
import os

import taichi as ti

from . import F1, F2, I1, kernel
from . import linear as K_lin
from .linear import _act, _dz
from .optim import sgd_element as _sgd

BM = BN = 64
BK = 16
THREADS = 256
# Index arithmetic by shifts and masks (powers of two): Python's floored // and % in Taichi keep LLVM from
# folding offsets into the loads' addresses (docs/LOG.md).
LOG_BK, LOG_BN, LOG_THREADS = BK.bit_length() - 1, BN.bit_length() - 1, THREADS.bit_length() - 1
assert (1 << LOG_BK, 1 << LOG_BN, 1 << LOG_THREADS) == (BK, BN, THREADS)
SH_PAD = 4  # floats after each row of a shared slice


MIN_TILES = 128  # about one per multiprocessor of an H100 (132) or H200 (132)
FEW_TILES = 64  # below this even 16-row tiles leave most of the chip idle


def use_tiled(in_features: int, out_features: int) -> bool:
    """Tiles for a Linear whose sides both fill a tile (the batch may be anything: edges are masked)."""
    return in_features >= BK * 4 and out_features >= BN


def rows_per_thread(m: int, n: int) -> int | None:
    """4, 2 or 1: the tallest tiles (64, 32 or 16 rows) of which an m x n product has MIN_TILES, else 16-row
    tiles where there are FEW_TILES of them; None where even those are fewer (the one-thread-per-output kernels,
    with m * n threads, finish sooner there). A batch of 64 through 784 -> 1024 makes 16 tiles of 64 rows, 64 of
    16; a batch of 256, 128 tiles of 32 rows (faster there than 64 tiles of 64 rows; docs/LOG.md)."""
    for tm in (4, 2, 1):
        if -(-m // (16 * tm)) * -(-n // BN) >= MIN_TILES:
            return tm
    return 1 if -(-m // 16) * -(-n // BN) >= FEW_TILES else None


def tiles_pay(m: int, n: int) -> bool:
    return rows_per_thread(m, n) is not None


SPLIT_BLOCKS = 256  # blocks a product cut over K aims at: two for each multiprocessor
MAX_K_SPLIT = 4
MIN_K_RANGE = 128  # the shortest range of K a block sums


def k_split_enabled() -> bool:
    """Whether ``tiling`` may cut K into ranges: yes, unless LAYERLAB_CUDA_K_SPLIT=0."""
    return os.environ.get("LAYERLAB_CUDA_K_SPLIT", "").strip() != "0"


def tiling(m: int, n: int, k: int) -> tuple[int, int] | None:
    """(rows per thread, ranges of K) for an m x n product over k, or None (no tiles: ``rows_per_thread``).
    Ranges only where ``k_split_enabled`` (LAYERLAB_CUDA_K_SPLIT=0 turns them off).
    Where the product has fewer tiles than SPLIT_BLOCKS, K is cut into up to MAX_K_SPLIT ranges of at least
    MIN_K_RANGE, and the tallest tiles are taken of which the ranges make SPLIT_BLOCKS blocks: with one tile or
    less a multiprocessor, a block's warps alone cannot hide its loads' latency."""
    return _tiling(m, n, k, k_split_enabled())


@functools.lru_cache(maxsize=256)  # (asked at every recorded step, by each tiled Linear)
def _tiling(m: int, n: int, k: int, cut: bool) -> tuple[int, int] | None:
    tm = rows_per_thread(m, n)
    if tm is None or not cut:
        return None if tm is None else (tm, 1)
    for t in (4, 2, 1):
        tiles = -(-m // (16 * t)) * -(-n // BN)
        if tiles >= SPLIT_BLOCKS:
            return t, 1
        split = min(MAX_K_SPLIT, -(-SPLIT_BLOCKS // tiles), max(1, k // MIN_K_RANGE))
        if tiles * split >= SPLIT_BLOCKS:
            return t, split
    return tm, 1


def part_shape(m: int, n: int, k: int) -> tuple[int, int] | None:
    """The partial sums' scratch of an m x n product over k, where ``tiling`` cuts K; else None."""
    t = tiling(m, n, k)
    return None if t is None or t[1] == 1 else (t[1] * m, n)


@ti.func
def _a(mode: ti.template(), x: ti.template(), dout: ti.template(), out: ti.template(), kind: ti.template(),
       m, k):
    """Element (m, k) of the left operand.
    mode 0 (forward):     x[m, k]                        (the layer input, batch x IN)
    mode 1 (input grad):  dz[m, k] = dout[m, k] act'(out[m, k])  (batch x OUT)
    mode 2 (weight grad): dz[k, m]                       (OUT x batch, read from batch x OUT)
    """
    v = 0.0
    if ti.static(mode == 0):
        v = x[m, k]
    elif ti.static(mode == 1):
        v = _dz(dout, out, m, k, kind)
    else:
        v = _dz(dout, out, k, m, kind)
    return v


@ti.func
def _b(mode: ti.template(), x: ti.template(), params: ti.template(), w_off, n_in, k, n):
    """Element (k, n) of the right operand.
    mode 0: W[n, k]  (IN x OUT view of the (OUT, IN) weight)
    mode 1: W[k, n]  (OUT x IN)
    mode 2: x[k, n]  (batch x IN)
    """
    v = 0.0
    if ti.static(mode == 0):
        v = params[w_off + n * n_in + k]
    elif ti.static(mode == 1):
        v = params[w_off + k * n_in + n]
    else:
        v = x[k, n]
    return v


def _load_at(mode: int) -> int:
    """After which k of a slice the next slice's loads are issued: the forward's (a branch around each load)
    before any; the gradients' (unconditional loads) after a quarter of the slice, so that their wait on the
    arrays' addresses overlaps the multiply-adds instead of following the barrier, where every warp of the block
    would wait at once."""
    return 0 if mode == 0 else BK // 4


@ti.func
def _load_a(mode: ti.template(), kind: ti.template(), tm: ti.template(), x: ti.template(), dout: ti.template(),
            out: ti.template(), m0, k0, M, K, tid):
    """This thread's TM elements of the left operand's (16 TM)x16 slice at (m0, k0); zero past the edges. In the
    gradients' products the loads are unconditional (indices clamped to the edge, the value then dropped), so
    that they share one read of each array's address from the argument buffer, where a branch around each load
    made each wait for its own; the forward product kept its branches, which measured faster there (LOG.md)."""
    v = ti.Vector.zero(ti.f32, tm)
    for r in ti.static(range(tm)):
        mm, kk = _a_slot(mode, tm, tid + THREADS * r)
        m, k = m0 + mm, k0 + kk
        if ti.static(mode == 0):
            if m < M and k < K:
                v[r] = _a(mode, x, dout, out, kind, m, k)
        else:
            v[r] = ti.select(m < M and k < K, _a(mode, x, dout, out, kind, ti.min(m, M - 1), ti.min(k, K - 1)),
                             0.0)
    return v


@ti.func
def _a_slot(mode: ti.template(), tm: ti.template(), e):
    """(row, k) within the slice of the left operand for element e of the block's copy: k fastest where k is
    contiguous in memory (modes 0, 1), m fastest in mode 2."""
    mm, kk = e >> LOG_BK, e & (BK - 1)
    if ti.static(mode == 2):
        mm, kk = e & (16 * tm - 1), e >> ti.static((16 * tm).bit_length() - 1)
    return mm, kk


@ti.func
def _load_b(mode: ti.template(), x: ti.template(), params: ti.template(), w_off, n_in, n0, k0, N, K, tid):
    """This thread's 4 elements of the right operand's 16x64 slice at (k0, n0); zero past the edges."""
    v = ti.Vector.zero(ti.f32, 4)
    for r in ti.static(range(4)):
        kb, nb = _b_slot(mode, tid + THREADS * r)
        k, n = k0 + kb, n0 + nb
        if ti.static(mode == 0):
            if k < K and n < N:
                v[r] = _b(mode, x, params, w_off, n_in, k, n)
        else:
            v[r] = ti.select(k < K and n < N, _b(mode, x, params, w_off, n_in, ti.min(k, K - 1), ti.min(n, N - 1)),
                             0.0)
    return v


@ti.func
def _b_slot(mode: ti.template(), e):
    """(k, column) within the slice of the right operand for element e: k fastest in mode 0 (the weight's rows),
    n fastest otherwise."""
    kb, nb = e >> LOG_BN, e & (BN - 1)
    if ti.static(mode == 0):
        kb, nb = e & (BK - 1), e >> LOG_BK
    return kb, nb


@ti.func
def _tile(mode: ti.template(), kind: ti.template(), tm: ti.template(), c: ti.template(), x: ti.template(),
          dout: ti.template(), out: ti.template(), params: ti.template(), dparams: ti.template(), w_off, b_off,
          n_in, M, N, K, tile, tid, tiles_n, sgd: ti.template(), velocity: ti.template(), hyper: ti.template(),
          split: ti.template() = 1, part: ti.template() = 0, s=0, ks=0):
    """One block's (16 TM)x64 tile of C. The next K slice is read from global memory into registers while the
    block multiplies the slice in shared memory, so the loads' latency overlaps the arithmetic. With ``split``
    above 1, only K's range [s ks, (s + 1) ks) is summed, into part[s M + m, n] (``_tiled_split``)."""
    bm = ti.static(16 * tm)
    k_lo = 0
    if ti.static(split > 1):
        k_lo = s * ks
        K = ti.min(K, k_lo + ks)
    m0, n0 = (tile // tiles_n) * bm, (tile % tiles_n) * BN
    ty, tx = tid >> 4, tid & 15  # (bit operations: index arithmetic the compiler can fold into load offsets)
    # Every shared array of every tile the same size, (BK, 64 + 4) floats, whatever TM: Taichi 1.7 names a
    # shared array after its statement id, and arrays of two loops of one kernel can end up under one name.
    # The 4 extra columns keep each row 16-byte aligned, so that a thread's 4 adjacent columns (and TM adjacent
    # rows) are one vector load; and where neighbouring threads copy neighbouring k (the forward's operands),
    # their stores, a row apart, spread over 8 memory banks instead of falling into one.
    a_sh = ti.simt.block.SharedArray((BK, BN + SH_PAD), ti.f32)
    b_sh = ti.simt.block.SharedArray((BK, BN + SH_PAD), ti.f32)
    acc = ti.Matrix.zero(ti.f32, tm, 4)
    ra = _load_a(mode, kind, tm, x, dout, out, m0, k_lo, M, K, tid)
    rb = _load_b(mode, x, params, w_off, n_in, n0, k_lo, N, K, tid)
    for kt in range((K - k_lo + BK - 1) // BK):
        for r in ti.static(range(tm)):
            mm, kk = _a_slot(mode, tm, tid + THREADS * r)
            a_sh[kk, mm] = ra[r]
        for r in ti.static(range(4)):
            kb, nb = _b_slot(mode, tid + THREADS * r)
            b_sh[kb, nb] = rb[r]
        ti.simt.block.sync()
        for kk in ti.static(range(BK)):
            if ti.static(kk == _load_at(mode)):
                k1 = k_lo + (kt + 1) * BK  # the next slice (all zero past K: no loads)
                ra = _load_a(mode, kind, tm, x, dout, out, m0, k1, M, K, tid)
                rb = _load_b(mode, x, params, w_off, n_in, n0, k1, N, K, tid)
            for r, q in ti.static(ti.ndrange(tm, 4)):
                acc[r, q] += a_sh[kk, ty * tm + r] * b_sh[kk, tx * 4 + q]
        ti.simt.block.sync()
    for r, q in ti.static(ti.ndrange(tm, 4)):
        m, n = m0 + ty * tm + r, n0 + tx * 4 + q
        if m < M and n < N:
            if ti.static(split > 1):
                part[s * M + m, n] = acc[r, q]
            elif ti.static(mode == 0):
                c[m, n] = _act(acc[r, q] + params[b_off + n], kind)
            elif ti.static(mode == 1):
                c[m, n] = acc[r, q]
            else:
                dparams[w_off + m * n_in + n] = acc[r, q]
                if ti.static(sgd > 0):
                    _sgd(params, velocity, w_off + m * n_in + n, acc[r, q], sgd, hyper)


@ti.func
def _tiled_loop(mode: ti.template(), kind: ti.template(), tm: ti.template(), c: ti.template(), x: ti.template(),
                dout: ti.template(), out: ti.template(), params: ti.template(), dparams: ti.template(), w_off, b_off,
                n_in, M, N, K, sgd: ti.template(), velocity: ti.template(), hyper: ti.template(), lo1, hi1, lo2,
                hi2):
    tiles_n = (N + BN - 1) // BN
    tiles = ((M + 16 * tm - 1) // (16 * tm)) * tiles_n
    # Mode 2 also sums the bias gradient, in blocks of its own (a thread per output, over the batch in order):
    # one loop fewer in the step. With ``sgd`` it is the step's last kernel and also runs SGD's step: on W and b
    # as their gradients form, and, in blocks after the bias's, on parameters [lo1, hi1) and [lo2, hi2), whose
    # gradients earlier kernels formed. Those blocks come first in the grid: a bias thread's sum is a long chain
    # that would otherwise start after the last tile's block and finish alone.
    bias_blocks = ((M + THREADS - 1) // THREADS) * ti.static(int(mode == 2))
    rest_blocks = ((hi1 - lo1 + hi2 - lo2 + THREADS - 1) // THREADS) * ti.static(int(sgd > 0))
    ti.loop_config(block_dim=THREADS)
    for g in range((tiles + bias_blocks + rest_blocks) * THREADS):
        block, tid = g >> LOG_THREADS, g & (THREADS - 1)
        if ti.static(mode == 2):
            if block < bias_blocks:  # (the same branch for a whole block: its syncs stay together)
                o = block * THREADS + tid
                if o < M:
                    acc = _column_sum(dout, out, o, K, kind)
                    dparams[b_off + o] = acc
                    if ti.static(sgd > 0):
                        _sgd(params, velocity, b_off + o, acc, sgd, hyper)
            elif block < bias_blocks + rest_blocks:
                if ti.static(sgd > 0):  # (no such blocks without SGD: rest_blocks is 0)
                    u = (block - bias_blocks) * THREADS + tid
                    i = ti.select(u < hi1 - lo1, lo1 + u, lo2 + u - (hi1 - lo1))
                    if i < hi2:
                        _sgd(params, velocity, i, dparams[i], sgd, hyper)
            else:
                _tile(mode, kind, tm, c, x, dout, out, params, dparams, w_off, b_off, n_in, M, N, K,
                      block - bias_blocks - rest_blocks, tid, tiles_n, sgd, velocity, hyper)
        else:
            _tile(mode, kind, tm, c, x, dout, out, params, dparams, w_off, b_off, n_in, M, N, K, block, tid, tiles_n,
                  sgd, velocity, hyper)


@ti.func
def _column_sum(dout: ti.template(), out: ti.template(), o, K, kind: ti.template()):
    """The bias gradient of output o: dz[b, o] summed over b = 0, 1, ..., K - 1, in that order. Four rows are
    read before they are added, so four loads are in flight instead of one (the additions keep their order, and
    so the result its bits)."""
    acc = 0.0
    for b4 in range(K // 4):
        b = 4 * b4
        v0, v1 = _dz(dout, out, b, o, kind), _dz(dout, out, b + 1, o, kind)
        v2, v3 = _dz(dout, out, b + 2, o, kind), _dz(dout, out, b + 3, o, kind)
        acc += v0
        acc += v1
        acc += v2
        acc += v3
    for b in range(K - K % 4, K):
        acc += _dz(dout, out, b, o, kind)
    return acc


@kernel
def _tiled(mode: ti.template(), kind: ti.template(), tm: ti.template(), c: F2, x: F2, dout: F2, out: F2, params: F1, dparams: F1,
           w_off: ti.i32, b_off: ti.i32, n_in: ti.i32, M: ti.i32, N: ti.i32, K: ti.i32):
    _tiled_loop(mode, kind, tm, c, x, dout, out, params, dparams, w_off, b_off, n_in, M, N, K, 0, params,
                (0.0, 0.0, 0.0), 0, 0, 0, 0)


@kernel
def _tiled_sgd(kind: ti.template(), tm: ti.template(), sgd: ti.template(), x: F2, dout: F2, out: F2, params: F1,
               dparams: F1, velocity: F1, lr: ti.f32, momentum: ti.f32, weight_decay: ti.f32, w_off: ti.i32,
               b_off: ti.i32, n_in: ti.i32, M: ti.i32, N: ti.i32, K: ti.i32, lo1: ti.i32, hi1: ti.i32, lo2: ti.i32,
               hi2: ti.i32):
    # The weight gradient (mode 2) as a step's last kernel, with SGD's whole step (``linear_dweight_tiled``).
    _tiled_loop(2, kind, tm, x, x, dout, out, params, dparams, w_off, b_off, n_in, M, N, K, sgd, velocity,
                (lr, momentum, weight_decay), lo1, hi1, lo2, hi2)


@kernel
def _tiled_split(mode: ti.template(), kind: ti.template(), tm: ti.template(), split: ti.template(), c: F2, x: F2,
                 dout: F2, out: F2, params: F1, part: F2, w_off: ti.i32, b_off: ti.i32, n_in: ti.i32, M: ti.i32,
                 N: ti.i32, K: ti.i32):
    # The forward (mode 0) or input gradient (1) with K cut into ``split`` ranges: a block per tile and range,
    # its sums into part, then a loop adding each element's partial sums in order (with the forward's epilogue).
    # For products with fewer tiles than the GPU has multiprocessors to fill twice (``tiling``).
    tiles_n = (N + BN - 1) // BN
    tiles = ((M + 16 * tm - 1) // (16 * tm)) * tiles_n
    ks = ((K + split - 1) // split + BK - 1) // BK * BK
    ti.loop_config(block_dim=THREADS)
    for g in range(tiles * split * THREADS):
        block, tid = g >> LOG_THREADS, g & (THREADS - 1)
        _tile(mode, kind, tm, c, x, dout, out, params, params, w_off, b_off, n_in, M, N, K, block // split, tid,
              tiles_n, 0, params, (0.0, 0.0, 0.0), split, part, block % split, ks)
    for m, n in ti.ndrange(M, N):
        v = part[m, n]
        for r in ti.static(range(1, split)):
            v += part[r * M + m, n]
        if ti.static(mode == 0):
            c[m, n] = _act(v + params[b_off + n], kind)
        else:
            c[m, n] = v


_tiled.ti.shared_memory = True  # nncore.graph fuses few of these into one kernel (MAX_SHARED)
_tiled_sgd.ti.shared_memory = True
_tiled_split.ti.shared_memory = True


def linear_forward_tiled(out, inp, params, w_off: int, b_off: int, kind: int = 0, tm: int = 4, split: int = 1,
                        part=None) -> None:
    """out (B, OUT) = act(inp @ W.T + b); kind 0: no activation, 1 ReLU, 2 Sigmoid, 3 Tanh; tm rows per
    thread (4, 2 or 1); K cut into ``split`` ranges, summed in ``part`` (``part_shape``), where above 1."""
    if split > 1:
        _tiled_split(0, kind, tm, split, out, inp, out, out, params, part, w_off, b_off, inp.shape[1], out.shape[0],
                     out.shape[1], inp.shape[1])
        return
    _tiled(0, kind, tm, out, inp, out, out, params, params, w_off, b_off, inp.shape[1], out.shape[0], out.shape[1],
           inp.shape[1])


def linear_dinput_tiled(dinp, dout, out, params, w_off: int, kind: int = 0, tm: int = 4, split: int = 1,
                        part=None) -> None:
    """dinp (B, IN) = (dout * act'(out)) @ W, with dout and out (B, OUT)."""
    if split > 1:
        _tiled_split(1, kind, tm, split, dinp, dinp, dout, out, params, part, w_off, 0, dinp.shape[1],
                     dinp.shape[0], dinp.shape[1], dout.shape[1])
        return
    _tiled(1, kind, tm, dinp, dinp, dout, out, params, params, w_off, 0, dinp.shape[1], dinp.shape[0], dinp.shape[1],
           dout.shape[1])


def linear_dweight_tiled(dparams, dout, out, inp, w_off: int, b_off: int, kind: int = 0, tm: int = 4,
                         tail=None) -> None:
    """dW (OUT, IN) = (dout * act'(out)).T @ inp into dparams[w_off:], and db (OUT,) into dparams[b_off:].
    ``tail`` = (params, optim.SGD.fused()): this is the step's last kernel, and it also runs SGD's step on every
    parameter, W and b as their gradients form, the rest from dparams (``sgd_tail_ranges``)."""
    if tail is None:
        _tiled(2, kind, tm, inp, inp, dout, out, dparams, dparams, w_off, b_off, inp.shape[1], dout.shape[1],
               inp.shape[1], dout.shape[0])
        return
    params, (sgd, velocity, lr, momentum, weight_decay) = tail
    (lo1, hi1), (lo2, hi2) = sgd_tail_ranges(params.shape[0], w_off, b_off, dout.shape[1] * inp.shape[1],
                                             dout.shape[1])
    velocity = velocity if sgd == 2 else params  # (unread without momentum: no ndarray more for the launch)
    _tiled_sgd(kind, tm, sgd, inp, dout, out, params, dparams, velocity, lr, momentum, weight_decay, w_off, b_off,
               inp.shape[1], dout.shape[1], inp.shape[1], dout.shape[0], lo1, hi1, lo2, hi2)


# The most parameters outside its own W and b that a weight-gradient kernel steps in SGD's tail (its extra
# blocks, one parameter a thread, are scheduled with the tile kernel's registers): with net-2h's 1.06 million its
# step at batch 1000 ran slower than with the optimizer's own kernel (docs/LOG.md, 2026-11-26, afternoon).
SGD_TAIL_MAX_REST = 65536


def sgd_tail_ranges(n_params: int, w_off: int, b_off: int, n_w: int, n_b: int) -> tuple:
    """The parameters outside a Linear's W and b (which must lie side by side): two ranges, either may be empty."""
    lo, hi = min(w_off, b_off), max(w_off + n_w, b_off + n_b)
    if hi - lo != n_w + n_b:
        raise ValueError("the Linear's weight and bias are not side by side in the parameter buffer")
    return (0, lo), (hi, n_params)



# Few outputs from a long input (the cnn's 10,816 -> 10): a thread per output holds a chain of 10,816
# dependent multiply-adds and only B x OUT threads run, so the layer is latency-bound. Here the 32 threads of a
# warp share each output's sum, interleaved: lane s reads elements s, s + 32, s + 64, ... (the warp reads 32
# neighbouring elements of the input and of the weight row at a time), then the warp adds its 32 partial sums by
# shuffles, a fixed tree (halves, quarters, ...): the same result on every run, in one loop (one task: on CUDA
# each loop is a launch of its own).
SPLIT = 32  # the warp's size
MAX_SPLIT_OUT = 16


def use_split_k(in_features: int, out_features: int) -> bool:
    """Few outputs from an input long enough that each of the 32 threads of a sample gets 32 elements or more
    (net-1h's 1024 -> 10 too: one thread per output leaves 640 threads with 1,024 multiply-adds each)."""
    return out_features <= MAX_SPLIT_OUT and in_features >= 32 * SPLIT


@kernel
def linear_forward_split(out: F2, inp: F2, params: F1, w_off: ti.i32, b_off: ti.i32, kind: ti.template()):
    # out: (B, OUT) = act(inp @ W.T + b); kind as in linear_forward_tiled. CUDA only (warp shuffles).
    n_b, n_in, n_out = inp.shape[0], inp.shape[1], out.shape[1]
    ti.loop_config(block_dim=128)  # (a multiple of 32, and 32 threads an output: each warp is whole outputs)
    for b, o, s in ti.ndrange(n_b, n_out, SPLIT):
        acc = 0.0
        w = w_off + o * n_in
        for k in range((n_in - s + SPLIT - 1) // SPLIT):
            i = s + k * SPLIT
            acc += inp[b, i] * params[w + i]
        for d in ti.static((16, 8, 4, 2, 1)):
            acc += ti.simt.warp.shfl_down_f32(ti.u32(0xFFFFFFFF), acc, d)
        if s == 0:
            out[b, o] = _act(acc + params[b_off + o], kind)


LOSS_BLOCK = 32 * MAX_SPLIT_OUT  # a block a sample: a warp for each of up to MAX_SPLIT_OUT outputs
# The loss joins the forward only for batches up to this: there the host bounds the step and a task fewer is
# what counts; at batch 1000, where the GPU bounds it, the joined kernel slowed cnn32's step (its 16-warp blocks
# wait on their first thread's loss row; docs/LOG.md, 2026-11-26, afternoon).
LOSS_JOIN_MAX_BATCH = 512


@kernel
def linear_forward_split_loss(out: F2, inp: F2, params: F1, w_off: ti.i32, b_off: ti.i32, losses: F1,
                              dlogits: F2, labels: I1, kind: ti.template(), row: ti.template()):
    # ``linear_forward_split`` of the network's last Linear (out: the logits, (B, OUT), OUT <= MAX_SPLIT_OUT) and
    # the loss in the same loop: a block a sample, warp o forms output o as linear_forward_split does (the same
    # sums, the same bits), then the block's first thread forms the sample's loss share and gradient row with
    # the loss's row function (nncore.kernels.loss.ROWS). One task instead of two.
    n_b, n_in, n_out = inp.shape[0], inp.shape[1], out.shape[1]
    ti.loop_config(block_dim=LOSS_BLOCK)
    for t in range(n_b * LOSS_BLOCK):
        b, o, s = t // LOSS_BLOCK, t % LOSS_BLOCK // SPLIT, t % SPLIT
        if o < n_out:  # (whole warps)
            acc = 0.0
            w = w_off + o * n_in
            for k in range((n_in - s + SPLIT - 1) // SPLIT):
                i = s + k * SPLIT
                acc += inp[b, i] * params[w + i]
            for d in ti.static((16, 8, 4, 2, 1)):
                acc += ti.simt.warp.shfl_down_f32(ti.u32(0xFFFFFFFF), acc, d)
            if s == 0:
                out[b, o] = _act(acc + params[b_off + o], kind)
        ti.simt.block.sync()  # (the sample's outputs, written to global memory, seen by the whole block)
        if o == 0 and s == 0:
            row(losses, dlogits, out, labels, b)



# The weight and bias gradients of a Linear that gets no tiles (few outputs, like the 10-output layers) over a
# large batch: a thread per weight holds a chain of B multiply-adds and only OUT x IN threads run (10,240 for
# net-1h's 1,024 -> 10), and the bias's OUT threads run chains of B alone. Here S threads per weight share the
# batch, interleaved (thread s takes samples s, s + S, ...; neighbouring threads read neighbouring inputs of one
# sample), the bias as an input column of ones, and a second loop adds each weight's S partial sums in order:
# a fixed order, the same result on every run.
MAX_SPLIT_B = 16
# Only layers of fewer weights than this split: with more, a thread per weight already fills the GPU, and the
# partial sums' extra pass costs more than it saves (the cnn's 10,816 -> 10 ran slower split; docs/LOG.md).
SPLIT_B_WEIGHTS = 32768
# Nor batches under this: their chains are short, and the extra loop (a task of its own) slowed net-1h's step at
# batch 64 and 256, where at 1000 the split gained (docs/LOG.md, 2026-11-26).
SPLIT_B_BATCH = 512


def batch_split(batch: int, in_features: int, out_features: int) -> int:
    """Threads per weight (and bias): about 32 samples each, at most MAX_SPLIT_B; 1 (no split: the
    one-thread-per-weight kernel) for batches under SPLIT_B_BATCH and layers of SPLIT_B_WEIGHTS weights or more."""
    if batch < SPLIT_B_BATCH or out_features * (in_features + 1) >= SPLIT_B_WEIGHTS:
        return 1
    return min(MAX_SPLIT_B, batch // 32)


@kernel
def linear_act_backward_split(dinp: F2, dparams: F1, dout: F2, inp: F2, out: F2, params: F1, dpartial: F2,
                              w_off: ti.i32, b_off: ti.i32, need_dinp: ti.i32, kind: ti.template()):
    # dinp: (B, IN) f32   dparams[w_off:]: dW (OUT, IN), dparams[b_off:]: db (OUT,)   dout, out: (B, OUT) f32
    # inp: (B, IN) f32   params[w_off:]: W (OUT, IN)   dpartial: (OUT * S, IN + 1) scratch, S: batch_split
    # The input gradient and the partial sums share one loop (a task fewer: see linear.linear_act_backward).
    n_b, n_out, n_in = dout.shape[0], dout.shape[1], inp.shape[1]
    n_s = dpartial.shape[0] // n_out
    n_p = n_out * n_s * (n_in + 1)
    for t in range(n_p + n_b * need_dinp * n_in):
        if t < n_p:
            r, i = t // (n_in + 1), t % (n_in + 1)
            o, s = r // n_s, r % n_s
            acc = 0.0
            for k in range((n_b - s + n_s - 1) // n_s):
                b = s + k * n_s
                x = 1.0
                if i < n_in:
                    x = inp[b, i]
                acc += _dz(dout, out, b, o, kind) * x
            dpartial[r, i] = acc
        else:
            b, i = (t - n_p) // n_in, (t - n_p) % n_in
            acc = 0.0
            for o in range(n_out):
                acc += _dz(dout, out, b, o, kind) * params[w_off + o * n_in + i]
            dinp[b, i] = acc
    for o, i in ti.ndrange(n_out, n_in + 1):
        acc = 0.0
        for s in range(n_s):
            acc += dpartial[o * n_s + s, i]
        if i < n_in:
            dparams[w_off + o * n_in + i] = acc
        else:
            dparams[b_off + o] = acc


def linear_forward_gpu(out, inp, params, w_off: int, b_off: int, kind: int = 0, loss=None, part=None) -> None:
    """out (B, OUT) = act(inp @ W.T + b) on CUDA, by the fastest kernel for the shape; kind 0: no activation.
    ``loss`` = (losses, dlogits, labels, row function): out are the logits, and the loss is formed with them
    (``linear_forward_split_loss``; only where ``use_split_k`` holds). ``part``: the scratch of partial sums
    where ``tiling`` cuts K (``part_shape``); without it K is not cut."""
    n_in, n_out = inp.shape[1], out.shape[1]
    tm = rows_per_thread(out.shape[0], n_out)
    t = tiling(out.shape[0], n_out, n_in) if part is not None else None
    if t is not None and t[1] > 1:
        linear_forward_tiled(out, inp, params, w_off, b_off, kind, t[0], t[1], part)
        return
    if loss is not None:
        if not use_split_k(n_in, n_out):
            raise ValueError("only the split forward of few outputs forms the loss (Part.forms_loss)")
        losses, dlogits, labels, row = loss
        linear_forward_split_loss(out, inp, params, w_off, b_off, losses, dlogits, labels, kind, row)
    elif use_split_k(n_in, n_out):
        linear_forward_split(out, inp, params, w_off, b_off, kind)
    elif use_tiled(n_in, n_out) and tm is not None:
        linear_forward_tiled(out, inp, params, w_off, b_off, kind, tm)
    else:
        K_lin.linear_act_forward(out, inp, params, w_off, b_off, kind)


def linear_backward_gpu(dinp, dparams, dout, inp, out, params, w_off: int, b_off: int, need_dinp: bool,
                        kind: int = 0, dpartial=None, tail=None, part=None) -> None:
    """Weight, bias and (if ``need_dinp``) input gradients of Linear (+ activation ``kind``) on CUDA.
    ``dpartial``: the batch-split gradients' scratch (``linear_act_backward_split``), for a layer without tiles.
    ``tail`` (optim.SGD.fused(), for a tiled layer only): the weight gradient's kernel also runs SGD's step on
    every parameter (``linear_dweight_tiled``)."""
    n_in, n_out = inp.shape[1], dout.shape[1]
    if use_tiled(n_in, n_out):  # dW: OUT x IN tiles, whatever the batch
        tm = rows_per_thread(dinp.shape[0], n_in)
        t = tiling(dinp.shape[0], n_in, n_out) if need_dinp and part is not None else None
        if t is not None and t[1] > 1:  # (``part``: as the forward's)
            linear_dinput_tiled(dinp, dout, out, params, w_off, kind, t[0], t[1], part)
        elif need_dinp and tm is not None:  # (before dW: with a ``tail``, that kernel changes W)
            linear_dinput_tiled(dinp, dout, out, params, w_off, kind, tm)
        elif need_dinp:
            K_lin.linear_act_dinput(dinp, dout, out, params, w_off, kind)
        linear_dweight_tiled(dparams, dout, out, inp, w_off, b_off, kind, rows_per_thread(n_out, n_in) or 4,
                             None if tail is None else (params, tail))
        return
    if tail is not None:
        raise ValueError("only a tiled Linear's weight gradient runs SGD's step (takes_sgd_tail)")
    if dpartial is not None:
        linear_act_backward_split(dinp, dparams, dout, inp, out, params, dpartial, w_off, b_off, int(need_dinp),
                                  kind)
    else:
        K_lin.linear_act_backward(dinp, dparams, dout, inp, out, params, w_off, b_off, int(need_dinp), kind)
