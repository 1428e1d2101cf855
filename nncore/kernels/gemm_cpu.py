"""CPU matrix products for the Linear layer: register-tiled, with 16-wide vector accumulators.

Each kernel computes a (M, N) result as a sum over k of A[m, k] * B[k, n], with B contiguous along n: a tile
of TM rows x 16 columns lives in TM vector registers; every k broadcasts TM scalars of A and loads one
16-wide row segment of B (a vector gather: Taichi's index arithmetic hides the contiguity from LLVM), then
does TM 16-wide FMAs (runtime.init keeps vector types unscalarised on the CPU). Partial tiles at the edges
read clamped indices and store only what exists, so any shape works.

Linear's forward needs W^T (IN, OUT) contiguous along OUT: ``transpose_weight`` refreshes it before each
forward, into rows padded by ``PAD`` floats. The input gradient reads W (OUT, IN) and the weight gradient
reads the layer input, both already contiguous along the output columns.
"""
import taichi as ti

from .. import runtime
from . import F1, F2

TM, L = 16, 16
PAD = 16
V = ti.types.vector(L, ti.f32)


@ti.kernel
def transpose_weight(wt: F2, params: F1, w_off: ti.i32, n_out: ti.i32):
    # wt: (IN, OUT + pad) f32 <- params[w_off:]: W (OUT, IN), 16 rows at a time: one vector per row of W
    # read, so every strided store of a column of 16 hits lines that stay in cache. The padding keeps the
    # row stride of wt off multiples of 4 KiB, which would map every row to the same L1 cache set.
    n_in = wt.shape[0]
    bo = n_out // L
    ti.loop_config(block_dim=runtime.coarse_block)
    for t in range(bo * ((n_in + L - 1) // L)):
        o0, i0 = (t % bo) * L, (t // bo) * L
        if i0 + L <= n_in:
            rows = [V([params[w_off + (o0 + r) * n_in + i0 + j] for j in ti.static(range(L))])
                    for r in ti.static(range(L))]
            for j in ti.static(range(L)):
                for r in ti.static(range(L)):
                    wt[i0 + j, o0 + r] = rows[r][j]
        else:
            for i in range(i0, n_in):
                for r in ti.static(range(L)):
                    wt[i, o0 + r] = params[w_off + (o0 + r) * n_in + i]
    for o, i in ti.ndrange(n_out - bo * L, n_in):  # columns past the last block of 16
        wt[i, bo * L + o] = params[w_off + (bo * L + o) * n_in + i]


@ti.kernel
def linear_forward_cpu(out: F2, inp: F2, wt: F2, params: F1, b_off: ti.i32):
    # out: (B, OUT) f32 = inp: (B, IN) f32 @ wt: (IN, OUT + PAD) f32 + params[b_off:] (OUT,)
    m_n, n_n, k_n = out.shape[0], out.shape[1], inp.shape[1]
    mt, nt = (m_n + TM - 1) // TM, (n_n + L - 1) // L
    ti.loop_config(block_dim=runtime.coarse_block)
    for t in range(mt * nt):
        # Partial tiles read clamped rows (and wt's padding columns) and store only what exists.
        m0, n0 = (t // nt) * TM, (t % nt) * L
        acc = [V(0.0) for _ in ti.static(range(TM))]
        for k in range(k_n):
            bv = V([wt[k, n0 + j] for j in ti.static(range(L))])
            for i in ti.static(range(TM)):
                acc[i] += inp[ti.min(m0 + i, m_n - 1), k] * bv
        for i in ti.static(range(TM)):
            for j in ti.static(range(L)):
                if m0 + i < m_n and n0 + j < n_n:
                    out[m0 + i, n0 + j] = acc[i][j] + params[b_off + n0 + j]


@ti.kernel
def linear_dweight_cpu(dparams: F1, dout: F2, inp: F2, w_off: ti.i32, b_off: ti.i32):
    # dparams[w_off:]: dW (OUT, IN) = dout^T @ inp   dparams[b_off:]: db (OUT,) = column sums of dout
    # dout: (B, OUT) f32   inp: (B, IN) f32
    k_n, m_n, n_n = dout.shape[0], dout.shape[1], inp.shape[1]
    mt, nt = (m_n + TM - 1) // TM, (n_n + L - 1) // L
    ti.loop_config(block_dim=runtime.coarse_block)
    for t in range(mt * nt):
        m0, n0 = (t // nt) * TM, (t % nt) * L
        acc = [V(0.0) for _ in ti.static(range(TM))]
        for k in range(k_n):
            bv = V([inp[k, ti.min(n0 + j, n_n - 1)] for j in ti.static(range(L))])
            for i in ti.static(range(TM)):
                acc[i] += dout[k, ti.min(m0 + i, m_n - 1)] * bv
        for i in ti.static(range(TM)):
            for j in ti.static(range(L)):
                if m0 + i < m_n and n0 + j < n_n:
                    dparams[w_off + (m0 + i) * n_n + n0 + j] = acc[i][j]
    for m in range(m_n):
        acc = 0.0
        for k in range(k_n):
            acc += dout[k, m]
        dparams[b_off + m] = acc


@ti.kernel
def linear_dinput_cpu(dinp: F2, dout: F2, params: F1, w_off: ti.i32):
    # dinp: (B, IN) f32 = dout: (B, OUT) f32 @ params[w_off:]: W (OUT, IN)
    m_n, n_n, k_n = dinp.shape[0], dinp.shape[1], dout.shape[1]
    mt, nt = (m_n + TM - 1) // TM, (n_n + L - 1) // L
    ti.loop_config(block_dim=runtime.coarse_block)
    for t in range(mt * nt):
        m0, n0 = (t // nt) * TM, (t % nt) * L
        acc = [V(0.0) for _ in ti.static(range(TM))]
        for k in range(k_n):
            base = w_off + k * n_n
            bv = V([params[base + ti.min(n0 + j, n_n - 1)] for j in ti.static(range(L))])
            for i in ti.static(range(TM)):
                acc[i] += dout[ti.min(m0 + i, m_n - 1), k] * bv
        for i in ti.static(range(TM)):
            for j in ti.static(range(L)):
                if m0 + i < m_n and n0 + j < n_n:
                    dinp[m0 + i, n0 + j] = acc[i][j]
