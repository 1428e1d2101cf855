"""CPU matrix products for the Linear layer: register-tiled, with 16-wide vector accumulators.

Each product C (M, N) = sum over k of A[m, k] * B[k, n] runs one task per tile of 16 rows x 16 columns: the tile
lives in 16 vector registers, and every k loads one 16-wide vector of B and broadcasts 16 scalars of A into 16
FMAs (runtime.init keeps vector types unscalarised on the CPU). Both operands are read from vector-typed
ndarrays the kernels stage first, because Taichi's index arithmetic hides contiguity from LLVM: from plain f32
ndarrays, B's 16 neighbours compiled to 16 scalar loads and inserts, and each of A's 16 broadcasts to its own
address computation. Staged, B is one load and A's 16 scalars sit in one vector, ``panel[mb, k]`` (rows
mb*16..mb*16+15 of A at column k), so the broadcasts are loads at fixed offsets from one address. Forward at
256x784x1024 on this machine's one core: 33 GFLOP/s from plain arrays, 84 staged.

Staging per product (all O(size of an operand), against the product's O(M*N*K)):
- forward, out = inp @ W^T + b: A = inp as panels (``stage_panels``), B = W^T as vectors along OUT
  (``transpose_weight``, refreshed from the parameters before each forward);
- weight gradient, dW = dout^T @ inp: A = dout^T, whose panels are dout's rows as vectors (``stage_rows``),
  B = inp as vectors along IN (``stage_rows``);
- input gradient, dinp = dout @ W: A = dout as panels, B = W's rows as vectors along IN (``stage_rows_of``).
Partial tiles compute on zeros or clamped copies and store only what exists, so any shape works. Layers of few
outputs skip the activations' staging (``staging_pays``).
"""
import taichi as ti

from .. import runtime
from . import F1, F2, n_elems, sized

TM, L = 16, 16
V = ti.types.vector(L, ti.f32)
VI = ti.types.vector(L, ti.i32)
VA2 = ti.types.ndarray(dtype=V, ndim=2)


def wt_shape(n_in: int, n_out: int) -> tuple:
    """Shape of the transposed weights for ``transpose_weight``, in 16-wide vectors."""
    return (n_in, (n_out + L - 1) // L + 1)


def rows_shape(rows: int, n: int) -> tuple:
    """Shape of a (rows, n) matrix staged as 16-wide vectors along n (``stage_rows``, ``stage_rows_of``), with a
    spare vector per row: a row of 1,024 floats is 4 KiB, and the kernels walk such a buffer down a column,
    where a 4 KiB stride puts every load in one L1 set."""
    return (rows, (n + L - 1) // L + 1)


def staging_pays(n_out: int) -> bool:
    """Whether Linear's forward and weight gradient stage their activation operands: each staged element is
    then read once per 16 outputs, so for a layer of under 32 outputs (the cnn's 10,816 -> 10) staging is two
    more passes over the input for no reuse, and the direct kernels run instead."""
    return n_out >= 2 * L


def panels_shape(rows: int, n: int) -> tuple:
    """Shape of a (rows, n) matrix staged as panels of 16 rows (``stage_panels``)."""
    return ((rows + L - 1) // L, n)


@sized(lambda wt, params, w_off, n_out: 2 * wt.shape[0] * n_out)
def transpose_weight(wt: VA2, params: F1, w_off: ti.i32, n_out: ti.i32):
    # wt: (IN, OUTB + 1) 16-wide vectors, wt[i, ob][l] = W[ob*16 + l, i] (zero past OUT) <- params[w_off:]: W (OUT, IN)
    # A task fills 16 rows of wt for one block of 16 outputs: it walks 16 rows of W side by side, so each cache
    # line of W it loads serves 16 consecutive rows of wt. The spare column of vectors keeps wt's row stride off
    # multiples of 4 KiB, which would put every row in one L1 set.
    n_in = wt.shape[0]
    n_ob = (n_out + L - 1) // L
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for t in range(n_ob * ((n_in + L - 1) // L)):
        ob, i0 = t % n_ob, (t // n_ob) * L
        live = VI([ob * L + l for l in ti.static(range(L))]) < n_out
        for i in range(i0, ti.min(i0 + L, n_in)):
            col = V([params[w_off + ti.min(ob * L + l, n_out - 1) * n_in + i] for l in ti.static(range(L))])
            wt[i, ob] = ti.select(live, col, 0.0)


@sized(lambda xv, x: 2 * n_elems(x))
def stage_rows(xv: VA2, x: F2):
    # xv: (B, ceil(N / 16) + 1) 16-wide vectors <- x: (B, N) f32, zero past N (rows_shape)
    n = x.shape[1]
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for b in range(x.shape[0]):
        for jb in range(xv.shape[1]):
            v = V(0.0)
            for l in ti.static(range(L)):
                if jb * L + l < n:
                    v[l] = x[b, jb * L + l]
            xv[b, jb] = v


@sized(lambda wv, params, w_off, n: 2 * wv.shape[0] * n)
def stage_rows_of(wv: VA2, params: F1, w_off: ti.i32, n: ti.i32):
    # wv: (R, ceil(N / 16) + 1) 16-wide vectors <- params[w_off:]: a (R, N) f32 matrix, zero past N
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for r in range(wv.shape[0]):
        for jb in range(wv.shape[1]):
            v = V(0.0)
            for l in ti.static(range(L)):
                if jb * L + l < n:
                    v[l] = params[w_off + r * n + jb * L + l]
            wv[r, jb] = v


@sized(lambda xp, x: 2 * n_elems(x))
def stage_panels(xp: VA2, x: F2):
    # xp: (ceil(B / 16), N) 16-wide vectors, xp[mb, k][l] = x[mb*16 + l, k] (the last row repeated past B)
    m_n = x.shape[0]
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for mb in range(xp.shape[0]):
        for k in range(xp.shape[1]):
            xp[mb, k] = V([x[ti.min(mb * L + l, m_n - 1), k] for l in ti.static(range(L))])


@ti.func
def _tile(a: ti.template(), a_rows: ti.template(), b: ti.template(), mb, nb, k_n):
    """The 16x16 tile (mb, nb) of A @ B, summed over k < k_n: A's 16 rows at column k are ``a[mb, k]`` (or
    ``a[k, mb]`` where ``a_rows``: dout's rows serve as the panels of dout^T), B's 16 columns ``b[k, nb]``."""
    acc = [V(0.0) for _ in ti.static(range(TM))]
    for k in range(k_n):
        av = a[k, mb] if ti.static(a_rows) else a[mb, k]
        bv = b[k, nb]
        for i in ti.static(range(TM)):
            acc[i] += av[i] * bv
    return acc


@sized(lambda out, xp, *_: n_elems(out) * xp.shape[1] // 40)
def linear_forward_cpu(out: F2, xp: VA2, wt: VA2, params: F1, b_off: ti.i32):
    # out: (B, OUT) f32 = inp @ W^T + b   xp: inp as panels (stage_panels)   wt: (IN, OUTB + 1) transposed W
    # params[b_off:]: b (OUT,)
    m_n, n_n, k_n = out.shape[0], out.shape[1], xp.shape[1]
    mt, nt = xp.shape[0], (n_n + L - 1) // L
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for nb in range(nt):
        # A task takes 16 columns of wt for every row of the batch: the strip is read from memory once, into
        # one core's cache (tasks of single tiles had both cores fetch each strip: no speed-up at batch 64).
        for mb in range(mt):
            acc = _tile(xp, False, wt, mb, nb, k_n)
            m0, n0 = mb * TM, nb * L
            for i in ti.static(range(TM)):  # (loops over j, not unrolled stores: a quarter of the machine code)
                if m0 + i < m_n:
                    for j in range(ti.min(L, n_n - n0)):
                        out[m0 + i, n0 + j] = acc[i][j] + params[b_off + n0 + j]


@ti.func
def _store_dweight(dparams: ti.template(), acc: ti.template(), w_off, m0, n0, m_n, n_n):
    """A weight-gradient tile into dparams[w_off:] (OUT, IN), rows m0.., columns n0.., only what exists."""
    for i in ti.static(range(TM)):
        if m0 + i < m_n:
            for j in range(ti.min(L, n_n - n0)):
                dparams[w_off + (m0 + i) * n_n + n0 + j] = acc[i][j]


@ti.func
def _bias_grad(dparams: ti.template(), dout: ti.template(), b_off):
    """db (OUT,) into dparams[b_off:]: column sums of dout (B, OUT), one output per iteration of a top-level loop."""
    ti.loop_config(serialize=runtime.serial)
    for m in range(dout.shape[1]):
        acc = 0.0
        for k in range(dout.shape[0]):
            acc += dout[k, m]
        dparams[b_off + m] = acc


@sized(lambda dparams, dout, dv, xv, w_off, b_off, n_n: n_elems(dout) * n_n // 40)
def linear_dweight_cpu(dparams: F1, dout: F2, dv: VA2, xv: VA2, w_off: ti.i32, b_off: ti.i32, n_n: ti.i32):
    # dparams[w_off:]: dW (OUT, IN) = dout^T @ inp   dparams[b_off:]: db (OUT,) = column sums of dout
    # dout: (B, OUT) f32   dv: dout's rows as vectors, xv: the layer input's (stage_rows); n_n = IN
    k_n, m_n = dout.shape[0], dout.shape[1]
    mt, nt = (m_n + L - 1) // L, (n_n + L - 1) // L
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for t in range(mt * nt):
        mb, nb = t % mt, t // mt
        acc = _tile(dv, True, xv, mb, nb, k_n)
        m0, n0 = mb * TM, nb * L
        _store_dweight(dparams, acc, w_off, m0, n0, m_n, n_n)
    _bias_grad(dparams, dout, b_off)


@sized(lambda out, inp, *_: n_elems(out) * inp.shape[1] // 20)
def linear_forward_cpu_direct(out: F2, inp: F2, wt: VA2, params: F1, b_off: ti.i32):
    # As linear_forward_cpu, with A's scalars read from inp itself (see ``staging_pays``)
    m_n, n_n, k_n = out.shape[0], out.shape[1], inp.shape[1]
    mt, nt = (m_n + TM - 1) // TM, (n_n + L - 1) // L
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for t in range(mt * nt):
        mb, nb = t % mt, t // mt
        m0, n0 = mb * TM, nb * L
        acc = [V(0.0) for _ in ti.static(range(TM))]
        for k in range(k_n):
            bv = wt[k, nb]
            for i in ti.static(range(TM)):
                acc[i] += inp[ti.min(m0 + i, m_n - 1), k] * bv
        for i in ti.static(range(TM)):
            if m0 + i < m_n:
                for j in range(ti.min(L, n_n - n0)):
                    out[m0 + i, n0 + j] = acc[i][j] + params[b_off + n0 + j]


@sized(lambda dparams, dout, inp, *_: n_elems(dout) * inp.shape[1] // 20)
def linear_dweight_cpu_direct(dparams: F1, dout: F2, inp: F2, w_off: ti.i32, b_off: ti.i32):
    # As linear_dweight_cpu, with both operands read from dout and inp themselves (see ``staging_pays``)
    k_n, m_n, n_n = dout.shape[0], dout.shape[1], inp.shape[1]
    mt, nt = (m_n + TM - 1) // TM, (n_n + L - 1) // L
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for t in range(mt * nt):
        m0, n0 = (t // nt) * TM, (t % nt) * L
        acc = [V(0.0) for _ in ti.static(range(TM))]
        for k in range(k_n):
            bv = V([inp[k, ti.min(n0 + j, n_n - 1)] for j in ti.static(range(L))])
            for i in ti.static(range(TM)):
                acc[i] += dout[k, ti.min(m0 + i, m_n - 1)] * bv
        _store_dweight(dparams, acc, w_off, m0, n0, m_n, n_n)
    _bias_grad(dparams, dout, b_off)


@sized(lambda dinp, dp, wv: n_elems(dinp) * dp.shape[1] // 40)
def linear_dinput_cpu(dinp: F2, dp: VA2, wv: VA2):
    # dinp: (B, IN) f32 = dout @ W   dp: dout as panels (stage_panels)   wv: W's rows as vectors (stage_rows_of)
    m_n, n_n, k_n = dinp.shape[0], dinp.shape[1], dp.shape[1]
    mt, nt = dp.shape[0], (n_n + L - 1) // L
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for t in range(mt * nt):
        mb, nb = t // nt, t % nt  # along the rows of dinp: its writes are most of the traffic when OUT is small
        acc = _tile(dp, False, wv, mb, nb, k_n)
        m0, n0 = mb * TM, nb * L
        for i in ti.static(range(TM)):
            if m0 + i < m_n:
                for j in range(ti.min(L, n_n - n0)):
                    dinp[m0 + i, n0 + j] = acc[i][j]
