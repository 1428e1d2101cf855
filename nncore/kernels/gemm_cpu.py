"""CPU matrix products for the Linear layer: register-tiled, with 16-wide vector accumulators.

Each kernel computes a (M, N) result as a sum over k of A[m, k] * B[k, n]: a tile of TM rows x 16 columns
lives in TM vector registers; every k broadcasts TM scalars of A and loads one 16-wide row segment of B, then
does TM 16-wide FMAs (runtime.init keeps vector types unscalarised on the CPU). B is read from a vector-typed
ndarray, so that segment is one vector load: from a plain f32 ndarray it would be 16 scalar loads and 16
inserts, as Taichi's index arithmetic hides the contiguity from LLVM (that cost half the forward's time).
Partial tiles at the edges read clamped indices and store only what exists, so any shape works.

Linear's forward needs W^T (IN, OUT) as vectors along OUT: ``transpose_weight`` refreshes it before each
forward. The weight gradient needs the layer input as vectors along IN: ``stage_rows`` copies it. The input
gradient reads W (OUT, IN) from the parameters directly (scalar loads; it is the smallest of the three products
in the networks here, or absent for a first layer).
"""
import taichi as ti

from .. import runtime
from . import F1, F2

TM, L = 16, 16
V = ti.types.vector(L, ti.f32)
VI = ti.types.vector(L, ti.i32)
VA2 = ti.types.ndarray(dtype=V, ndim=2)


def wt_shape(n_in: int, n_out: int) -> tuple:
    """Shape of the transposed weights for ``transpose_weight``, in 16-wide vectors."""
    return (n_in, (n_out + L - 1) // L + 1)


def staged_shape(batch: int, n: int) -> tuple:
    """Shape of a (batch, n) activation staged as 16-wide vectors by ``stage_rows``."""
    return (batch, (n + L - 1) // L)


@ti.kernel
def transpose_weight(wt: VA2, params: F1, w_off: ti.i32, n_out: ti.i32):
    # wt: (IN, OUTB + 1) 16-wide vectors, wt[i, ob][l] = W[ob*16 + l, i] (zero past OUT) <- params[w_off:]: W (OUT, IN)
    # A task fills 16 rows of wt for one block of 16 outputs: it walks 16 rows of W side by side, so each cache
    # line of W it loads serves 16 consecutive rows of wt. The spare column of vectors keeps wt's row stride off
    # multiples of 4 KiB, which would put every row in one L1 set.
    n_in = wt.shape[0]
    n_ob = (n_out + L - 1) // L
    ti.loop_config(block_dim=runtime.coarse_block)
    for t in range(n_ob * ((n_in + L - 1) // L)):
        ob, i0 = t % n_ob, (t // n_ob) * L
        live = VI([ob * L + l for l in ti.static(range(L))]) < n_out
        for i in range(i0, ti.min(i0 + L, n_in)):
            col = V([params[w_off + ti.min(ob * L + l, n_out - 1) * n_in + i] for l in ti.static(range(L))])
            wt[i, ob] = ti.select(live, col, 0.0)


@ti.kernel
def stage_rows(xv: VA2, x: F2):
    # xv: (B, ceil(N / 16)) 16-wide vectors <- x: (B, N) f32, zero past N
    n = x.shape[1]
    ti.loop_config(block_dim=runtime.coarse_block)
    for b in range(x.shape[0]):
        for jb in range(xv.shape[1]):
            v = V(0.0)
            for l in ti.static(range(L)):
                if jb * L + l < n:
                    v[l] = x[b, jb * L + l]
            xv[b, jb] = v


@ti.kernel
def linear_forward_cpu(out: F2, inp: F2, wt: VA2, params: F1, b_off: ti.i32):
    # out: (B, OUT) f32 = inp: (B, IN) f32 @ wt: (IN, OUTB + 1) transposed weights + params[b_off:] (OUT,)
    m_n, n_n, k_n = out.shape[0], out.shape[1], inp.shape[1]
    mt, nt = (m_n + TM - 1) // TM, (n_n + L - 1) // L
    ti.loop_config(block_dim=runtime.coarse_block)
    for t in range(mt * nt):
        # Consecutive tasks take the same 16 columns of wt (while it is in cache) for the next 16 rows.
        # Partial tiles read clamped rows and store only what exists.
        m0, nb = (t % mt) * TM, t // mt
        acc = [V(0.0) for _ in ti.static(range(TM))]
        for k in range(k_n):
            bv = wt[k, nb]
            for i in ti.static(range(TM)):
                acc[i] += inp[ti.min(m0 + i, m_n - 1), k] * bv
        n0 = nb * L
        for i in ti.static(range(TM)):  # (loops over j, not unrolled stores: a quarter of the machine code)
            if m0 + i < m_n:
                for j in range(ti.min(L, n_n - n0)):
                    out[m0 + i, n0 + j] = acc[i][j] + params[b_off + n0 + j]


@ti.kernel
def linear_dweight_cpu(dparams: F1, dout: F2, xv: VA2, w_off: ti.i32, b_off: ti.i32, n_n: ti.i32):
    # dparams[w_off:]: dW (OUT, IN) = dout^T @ inp   dparams[b_off:]: db (OUT,) = column sums of dout
    # dout: (B, OUT) f32   xv: (B, ceil(IN / 16)) the layer input staged as vectors (stage_rows); n_n = IN
    k_n, m_n = dout.shape[0], dout.shape[1]
    mt, nt = (m_n + TM - 1) // TM, xv.shape[1]
    ti.loop_config(block_dim=runtime.coarse_block)
    for t in range(mt * nt):
        m0, nb = (t % mt) * TM, t // mt
        acc = [V(0.0) for _ in ti.static(range(TM))]
        for k in range(k_n):
            bv = xv[k, nb]
            for i in ti.static(range(TM)):
                acc[i] += dout[k, ti.min(m0 + i, m_n - 1)] * bv
        n0 = nb * L
        for i in ti.static(range(TM)):
            if m0 + i < m_n:
                for j in range(ti.min(L, n_n - n0)):
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
            if m0 + i < m_n:
                for j in range(ti.min(L, n_n - n0)):
                    dinp[m0 + i, n0 + j] = acc[i][j]
