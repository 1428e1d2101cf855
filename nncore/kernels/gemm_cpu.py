"""CPU matrix products for the Linear layer: register-tiled, with 16-wide vector accumulators.

Each product C (M, N) = sum over k of A[m, k] * B[k, n] runs in tiles of 16 rows x 16 columns, computed in
register tiles of ``ROWS`` rows by ``COLS`` such 16-column strips (``_layout``): a register tile's rows live in
vector registers, and every k loads COLS 16-wide vectors of B and broadcasts one scalar of A per row into
fused multiply-adds (``fma.madd``; runtime.init keeps vector types unscalarised on the CPU). Both operands are
read from vector-typed ndarrays the kernels stage first, because Taichi's index arithmetic hides contiguity from LLVM: from plain f32
ndarrays, B's 16 neighbours compiled to 16 scalar loads and inserts, and each of A's 16 broadcasts to its own
address computation. Staged, B is one load and A's 16 scalars sit in one vector, so the broadcasts are loads at
fixed offsets from one address. Both staged operands are block-major, so a tile walks each of them
sequentially through memory:
- panels, ``a[mb, k]``: rows mb*16..mb*16+15 of A at column k (``panels_shape``);
- strips, ``b[nb, k]``: columns nb*16..nb*16+15 of B at row k (``strips_shape``).
(Row-major staging, ``b[k, nb]``, would have a tile step through B one 4 KiB-strided line per k.)

Staging per product (all O(size of an operand), against the product's O(M*N*K)):
- forward, out = act(inp @ W^T + b): A = inp as panels (``stage_panels``), B = W^T as strips, which are W's
  panels (packed from the parameters by the forward's own tasks, or by ``weight_panels`` for the direct one);
  where a narrow Linear follows, out itself is kept as strips (``vec_out``), which that Linear's forward and
  ``stage_dz_from`` read;
- weight gradient, formed as dW^T = inp^T @ dz with dz = dout * act'(out): A = inp^T, whose panels are inp's
  strips (``stage_strips``), B = dz as strips (``stage_dz``, which also sums the bias gradient; ``stage_dz_from``
  where a narrow Linear follows and leaves its input gradient, this layer's dout, and its own weight gradient
  to be formed here); dW^T's
  vectors run along the outputs, as W's panels do, so plain SGD can be applied to W right there, and to
  the panels, which the next step's forward then reads as they are;
- input gradient, dinp = dz @ W: A = dz as panels (``stage_panels`` with the activation), B = W as strips
  (``weight_strips``).
The activation after a Linear (ReLU, Sigmoid, Tanh; ``kind`` 1-3, 0 for none) runs in the forward's epilogue on
the tile's vectors, and its derivative in backward's staging: nncore.fusion fuses the pair on the CPU too.
Partial tiles compute on zeros or clamped copies (or skip register tiles past their last row) and store only
what exists, so any shape works. Layers of few
outputs (``staging_pays``) read their input in place: the forward in ``linear_forward_cpu_direct``, the weight
gradient in ``linear_dweight_cpu_narrow``, vectorised along the outputs. A Linear whose input arrives
channels-last from a fused conv part maps its features to W's columns where it packs W or stores dW
(``_column``).
"""
import taichi as ti

from .. import runtime
from . import F1, F2, n_elems, pool_threads, sized
from .fma import madd

L = 16  # lanes of the vectors: a panel holds 16 rows, a strip 16 columns, a tile is 16 x 16
V = ti.types.vector(L, ti.f32)
VI = ti.types.vector(L, ti.i32)
VA2 = ti.types.ndarray(dtype=V, ndim=2)


LAYOUT_AVX512 = (8, 2)  # (ROWS, COLS) of a register tile, by the CPU's vector registers: see _layout
LAYOUT_AVX2 = (4, 1)


def _layout() -> tuple[int, int]:
    """Rows and strips (16 columns each) of a register tile: ROWS x COLS accumulators of 16 lanes.

    Every k of a register tile loads COLS vectors of B and broadcasts ROWS scalars of A (loads too) into
    ROWS * COLS multiply-adds. AVX-512 has 32 registers of 16 floats: 8 rows x 2 strips keeps 16 accumulators
    and 10 loads per 16 fused multiply-adds, within the two loads a cycle that the two FMA units leave room
    for (16 rows x 1 strip needed 17 loads, and loads set the pace). AVX2 has 16 registers of 8 floats, so a
    16-wide row takes two: 4 rows x 1 strip (8 registers) keeps its accumulators in registers (16-row tiles,
    which cannot, ran well behind 6-row ones on AVX2). What counts is the code Taichi emits, not the CPU: on an
    AMD Zen 4 it emits AVX2 code, where the 8 x 2 tile's 32 half-registers of accumulators spill
    (``runtime.jit_avx512``).

    A kernel holds one register tile's code and loops over a tile's row groups at run time: unrolled groups
    gained little at run time, but the machine code that Taichi regenerates from its offline cache at every
    start took 2.5x as long. (Both measurements: docs/LOG.md, '2026-11-23: figures moved out of comments', CPU
    GEMM.)"""
    return LAYOUT_AVX512 if runtime.jit_avx512() else LAYOUT_AVX2


ROWS, COLS = _layout()  # read when the kernels compile (tests swap them, then re-initialise the runtime)
assert L % ROWS == 0  # a panel's 16 rows split into whole register tiles (``a[mb, k][r0 + i]``)

# Long products on AVX-512 take register tiles of 8 rows x 3 strips: 24 accumulators and 11 loads per 24
# multiply-adds, fewer instructions per multiply-add than 8 x 2, which gains where the k loop is long; at a batch
# of 64 its larger epilogue (SGD with momentum) loses more than that (docs/LOG.md, "the CPU products' register
# tile, again"). A forward or weight gradient over at least WIDE_BATCH rows of the batch takes them.
WIDE_COLS = 3
WIDE_BATCH = 512


def tile_cols(batch: int) -> int:
    """Strips of the register tile for a forward or weight gradient over ``batch`` rows (see WIDE_COLS)."""
    return WIDE_COLS if (ROWS, COLS) == LAYOUT_AVX512 and batch >= WIDE_BATCH else COLS


def panels_shape(rows: int, n: int) -> tuple:
    """Shape of a (rows, n) matrix staged as panels of 16 rows: ``p[mb, k][l] = x[mb*16 + l, k]``."""
    return ((rows + L - 1) // L, n)


def strips_shape(rows: int, n: int) -> tuple:
    """Shape of a (rows, n) matrix staged as strips of 16 columns: ``s[nb, k][l] = x[k, nb*16 + l]``."""
    return ((n + L - 1) // L, rows)


def staging_pays(n_out: int) -> bool:
    """Whether Linear's forward and weight gradient stage their activation operands: each staged element is
    then read once per 16 outputs, so for a layer of under 32 outputs (the cnn's 10,816 -> 10) staging is two
    more passes over the input for no reuse, and the direct kernels run instead (with no fused activation)."""
    return n_out >= 2 * L


@ti.func
def _exp_neg(x):
    """e^x = scale * (1 + q) for x <= 0, on a 16-wide vector, in vector arithmetic (libm's expf runs one lane at
    a time, 2.4x slower for a sigmoid); returns
    (scale, q). x = n ln2 + r with n the nearest integer to x / ln2 (read from the bits of x / ln2 + 1.5 * 2^23,
    as integers: in floating point, fast math would fold the rounding away), scale = 2^n built in the exponent
    bits, q = e^r - 1 by its Taylor polynomial to r^6 (|r| <= ln2 / 2: relative error below 2e-7). Keeping q
    apart gives e^x - 1 without cancellation near 0 (for tanh). Below -87, where e^x leaves f32's normal
    range, it gives e^-87, at most 2e-38 from the truth. NaN gives NaN."""
    x = ti.select(x < -87.0, -87.0, x)  # (not ti.max, which turns NaN into -87: NaN must come out NaN)
    big = x * 1.4426950408889634 + 12582912.0
    n_i = VI([ti.bit_cast(big[l], ti.i32) - 0x4B400000 for l in ti.static(range(L))])
    n = V([ti.cast(n_i[l], ti.f32) for l in ti.static(range(L))])
    r = x - n * 0.693145751953125 - n * 1.428606765330187e-06
    q = r * (1.0 + r * (0.5 + r * (0.16666667 + r * (0.041666668 + r * (0.008333334 + r * 0.0013888889)))))
    return V([ti.bit_cast((n_i[l] + 127) << 23, ti.f32) for l in ti.static(range(L))]), q


@ti.func
def act_v(x, kind: ti.template()):
    """The activation (kind 0 none, 1 ReLU, 2 Sigmoid, 3 Tanh) of a 16-wide vector."""
    y = x
    if ti.static(kind == 1):
        y = ti.select(x < 0.0, 0.0, x)  # keeps NaN, unlike ti.max (CPU only: no fast math)
    elif ti.static(kind == 2):
        scale, q = _exp_neg(ti.min(x, 0.0 - x))  # (0 - x: Taichi 1.7 cannot negate an unscalarised vector here)
        e = scale + scale * q  # e^-|x|
        s = 1.0 / (1.0 + e)
        y = ti.select(x >= 0.0, s, e * s)
    elif ti.static(kind == 3):
        scale, q = _exp_neg(2.0 * ti.min(x, 0.0 - x))
        em1 = scale * q + (scale - 1.0)  # e^-2|x| - 1, exact near 0 (2^n - 1 is exact for the n that matter)
        t = (0.0 - em1) / (2.0 + em1)  # tanh |x|
        y = ti.select(x >= 0.0, t, 0.0 - t)
    return y


@ti.func
def dz_v(d, y, kind: ti.template()):
    """The gradient at the pre-activation, d * act'(.), from the activation's output y (16-wide vectors)."""
    g = d
    if ti.static(kind == 1):
        g = ti.select(y <= 0.0, 0.0, d)  # NaN passes, as PyTorch's threshold_backward
    elif ti.static(kind == 2):
        g = d * y * (1.0 - y)
    elif ti.static(kind == 3):
        g = d * (1.0 - y * y)
    return g


@ti.func
def _row(x: ti.template(), k, n0, n):
    """x[k, n0:n0+16] as a vector, zero past column n."""
    v = V(0.0)
    if n0 + L <= n:
        v = V([x[k, n0 + l] for l in ti.static(range(L))])
    else:
        for l in ti.static(range(L)):
            if n0 + l < n:
                v[l] = x[k, n0 + l]
    return v


@ti.func
def _column(i, n_in, cl_c):
    """W's column for input feature i, in the order the layer receives its input: i itself, or, for an input
    that arrives channels-last from a fused conv part (``cl_c`` = its C channels; nncore.fusion), the column of
    that feature in PyTorch's (C, H, W) flattening."""
    j = i
    if cl_c > 0:
        c = ti.max(cl_c, 1)  # (cl_c may be a constant 0 in a static fused kernel: Taichi folds the dead division)
        j = i % c * (n_in // c) + i // c
    return j


@ti.func
def _pack_weight_panel(wt: ti.template(), params: ti.template(), w_off, ob, n_out, cl_c):
    """wt[ob, :] = W's rows ob*16..ob*16+15 side by side (zero past OUT): one panel of ``weight_panels``."""
    n_in = wt.shape[1]
    live = VI([ob * L + l for l in ti.static(range(L))]) < n_out
    for i in range(n_in):
        c = _column(i, n_in, cl_c)
        col = V([params[w_off + ti.min(ob * L + l, n_out - 1) * n_in + c] for l in ti.static(range(L))])
        wt[ob, i] = ti.select(live, col, 0.0)


@sized(lambda wt, params, *_: 2 * n_elems(wt) * L)
def weight_panels(wt: VA2, params: F1, w_off: ti.i32, n_out: ti.i32, cl_c: ti.i32):
    # wt: (ceil(OUT / 16), IN) 16-wide vectors, wt[ob, i][l] = W[ob*16 + l, i] (zero past OUT): W^T's strips
    # params[w_off:]: W (OUT, IN); cl_c: see _column. (For the direct forward; the staged one packs its own.)
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for ob in range(wt.shape[0]):
        _pack_weight_panel(wt, params, w_off, ob, n_out, cl_c)


@sized(lambda wv, params, *_: 2 * n_elems(wv) * L)
def weight_strips(wv: VA2, params: F1, w_off: ti.i32, n: ti.i32, cl_c: ti.i32):
    # wv: (ceil(N / 16), R) 16-wide vectors, wv[nb, r][l] = W[r, nb*16 + l] (zero past N)
    # params[w_off:]: W, an (R, N) f32 matrix; cl_c: see _column
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for nb in range(wv.shape[0]):
        cols = VI([_column(ti.min(nb * L + l, n - 1), n, cl_c) for l in ti.static(range(L))])
        live = VI([nb * L + l for l in ti.static(range(L))]) < n
        for r in range(wv.shape[1]):
            v = V([params[w_off + r * n + cols[l]] for l in ti.static(range(L))])
            wv[nb, r] = ti.select(live, v, 0.0)


# The two staging kernels below read whole rows (a task per 16 rows of the batch) and write each row's 16-wide
# pieces into every strip. Tasks per strip would walk down a column of x: rows of 1,024 floats are 4 KiB apart,
# and the hardware prefetcher does not follow a stream across pages.
@sized(lambda xs, x: 2 * n_elems(x))
def stage_strips(xs: VA2, x: F2):
    # xs: (ceil(N / 16), B) 16-wide vectors <- x: (B, N) f32, xs[nb, b][l] = x[b, nb*16 + l], zero past N
    n, n_b = x.shape[1], x.shape[0]
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for t in range((n_b + L - 1) // L):
        for b in range(t * L, ti.min(t * L + L, n_b)):
            for nb in range(xs.shape[0]):
                xs[nb, b] = _row(x, b, nb * L, n)


@ti.func
def _bias_grad(ds: ti.template(), dparams: ti.template(), b_off, n, n_b):
    """dparams[b_off:b_off+n] = the bias gradient, each of ds's strips summed along itself (in cache from the
    staging loop before it)."""
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for ob in range(ds.shape[0]):
        db = V(0.0)
        for b in range(n_b):
            db += ds[ob, b]
        for l in ti.static(range(L)):  # (unrolled: a run-time loop over l here compiles several times slower)
            if ob * L + l < n:
                dparams[b_off + ob * L + l] = db[l]


@sized(lambda ds, dparams, dout, *_: 3 * n_elems(dout))
def stage_dz(ds: VA2, dparams: F1, dout: F2, out: F2, b_off: ti.i32, kind: ti.template()):
    # ds: (ceil(OUT / 16), B) 16-wide vectors, ds[ob, b] = dz[b, ob*16:ob*16+16], dz = dout * act'(out), zero past
    # OUT   dparams[b_off:]: db (OUT,) = column sums of dz   dout, out: (B, OUT) f32 (out unread for kind 0)
    n, n_b = dout.shape[1], dout.shape[0]
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for t in range((n_b + L - 1) // L):
        for b in range(t * L, ti.min(t * L + L, n_b)):
            for ob in range(ds.shape[0]):
                g = _row(dout, b, ob * L, n)
                if ti.static(kind != 0):
                    g = dz_v(g, _row(out, b, ob * L, n), kind)
                ds[ob, b] = g
    _bias_grad(ds, dparams, b_off, n, n_b)


@sized(lambda ds, dparams, dnext, *_: n_elems(ds) * L * (2 * dnext.shape[1] + 4) // 16)
def stage_dz_from(ds: VA2, dparams: F1, dnext: F2, params: F1, out: ti.types.ndarray(), b_off: ti.i32,
                  wn_off: ti.i32, n: ti.i32, kind: ti.template(), nk: ti.template(), vec_in: ti.template()):
    # As stage_dz, for a layer whose output feeds a narrow Linear (see ``staging_pays``) that leaves its input
    # gradient and its weight gradient to this kernel: dout = dnext @ Wn is formed here, strip by strip, and
    # never stored, and dWn = dnext^T @ out is summed from the same strips of out.
    # dnext: (B, NN) f32, the gradient at the narrow Linear's output, NN = nk   params[wn_off:]: its W (NN, OUT),
    # dparams[wn_off:]: dW   out: this layer's output (the narrow Linear's input), (B, OUT) f32, or with vec_in
    # its strips (ceil(OUT / 16), B) as the forward writes them for a narrow Linear (``vec_out``)   n: OUT
    # A task per strip of 16 outputs: Wn's NN pieces of the strip held in registers (one load each), it walks
    # down the batch once per group of ROWS * COLS of the NN outputs (the register tile's accumulator budget);
    # the first pass also forms the strip's dz and bias gradient. A row of out is read once a pass (a row's 16
    # floats cost 16 loads; doc at the top), a strip's vector one load and the strip a sequential walk.
    n_b = dnext.shape[0]
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for ob in range(ds.shape[0]):
        n0 = ob * L
        w = [_row1(params, wn_off + k * n, n0, n) for k in ti.static(range(nk))]
        for k0 in ti.static(range(0, nk, ROWS * COLS)):
            kn = ti.static(min(ROWS * COLS, nk - k0))
            acc = [V(0.0) for _ in ti.static(range(kn))]
            db = V(0.0)
            for b in range(n_b):
                h = V(0.0)
                if ti.static(vec_in):
                    h = out[ob, b]
                else:
                    h = _row(out, b, n0, n)
                if ti.static(k0 == 0):
                    g = V(0.0)
                    for k in ti.static(range(nk)):
                        madd(g, dnext[b, k], w[k])
                    if ti.static(kind != 0):
                        g = dz_v(g, h, kind)
                    ds[ob, b] = g
                    db += g
                for j in ti.static(range(kn)):
                    madd(acc[j], dnext[b, k0 + j], h)
            if ti.static(k0 == 0):
                _store16(dparams, b_off + n0, db, n - n0)
            for j in ti.static(range(kn)):
                _store16(dparams, wn_off + (k0 + j) * n + n0, acc[j], n - n0)


@ti.func
def _row1(x: ti.template(), at, n0, n):
    """x[at + n0 : at + n0 + 16] (a 1-D array) as a vector, zero past n0 + 16 > n."""
    v = V(0.0)
    if n0 + L <= n:
        v = V([x[at + n0 + l] for l in ti.static(range(L))])
    else:
        for l in ti.static(range(L)):
            if n0 + l < n:
                v[l] = x[at + n0 + l]
    return v


@ti.func
def _store16(x: ti.template(), at, v, left):
    """x[at:at+16] = v, only its first ``left`` lanes where fewer than 16 are left."""
    if left >= L:
        for l in ti.static(range(L)):
            x[at + l] = v[l]
    else:
        for l in ti.static(range(L)):
            if l < left:
                x[at + l] = v[l]


@sized(lambda xp, x, *_: 2 * n_elems(x))
def stage_panels(xp: VA2, x: F2, y: F2, kind: ti.template()):
    # xp: (ceil(B / 16), N) 16-wide vectors, xp[mb, k][l] = g[mb*16 + l, k] (the last row repeated past B)
    # g = x for kind 0 (y unread), else the pre-activation gradient x * act'(y): x = dout, y = the forward output
    m_n = x.shape[0]
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for mb in range(xp.shape[0]):
        for k in range(xp.shape[1]):
            g = V([x[ti.min(mb * L + l, m_n - 1), k] for l in ti.static(range(L))])
            if ti.static(kind != 0):
                g = dz_v(g, V([y[ti.min(mb * L + l, m_n - 1), k] for l in ti.static(range(L))]), kind)
            xp[mb, k] = g


@ti.func
def _tile(a: ti.template(), b: ti.template(), mb, nb, k_n, r0, cols: ti.template()):
    """Rows r0..r0+ROWS-1 of the 16-row tile mb of A @ B, at B's strips nb..nb+cols-1 (a strip past B's last
    repeats the last: the stores skip columns that do not exist), summed over k < k_n: A's 16 rows at column k
    are the panel vector ``a[mb, k]``, B's 16 columns at row k the strip vector ``b[nb, k]``; both walks are
    sequential. Returns ROWS * cols accumulators, row i of strip j at i * cols + j (see ``_layout``; cols is
    COLS or WIDE_COLS)."""
    acc = [V(0.0) for _ in ti.static(range(ROWS * cols))]
    last = b.shape[0] - 1
    for k in range(k_n):
        bv = [b[ti.min(nb + j, last), k] for j in ti.static(range(cols))]
        for i in ti.static(range(ROWS)):
            s = a[mb, k][r0 + i]
            for j in ti.static(range(cols)):
                madd(acc[i * cols + j], s, bv[j])
    return acc


@ti.func
def _groups(rows_left):
    """Register tiles to run in a 16-row tile of which ``rows_left`` rows exist (a partial tile skips the groups
    past its last row)."""
    return (ti.min(rows_left, L) + ROWS - 1) // ROWS


@ti.func
def _store_act(out: ti.template(), acc: ti.template(), bias, m0, n0, kind: ti.template(), cj: ti.template() = 0):
    """Rows of a forward tile into out (rows m0.., columns n0..), act(acc + bias) on whole vectors, only what
    exists; of the strips in acc (ROWS accumulators each, see ``_tile``), strip ``cj``."""
    m_n, n_n = out.shape[0], out.shape[1]
    cols = ti.static(len(acc) // ROWS)
    for i in ti.static(range(ROWS)):  # (loops over j, not unrolled stores: a quarter of the machine code)
        if m0 + i < m_n:
            y = act_v(acc[i * cols + cj] + bias, kind)
            for j in range(ti.min(L, n_n - n0)):
                out[m0 + i, n0 + j] = y[j]


@ti.func
def _batch(out: ti.template(), vec_out: ti.template()):
    """The rows of a forward's output: (B, OUT) floats, or its strips (ceil(OUT / 16), B) with vec_out."""
    return out.shape[1] if ti.static(vec_out) else out.shape[0]


@ti.func
def _store_out(out: ti.template(), acc: ti.template(), bias, m0, nb, n_n, kind: ti.template(), cj: ti.template(),
               vec_out: ti.template()):
    """Strip ``cj`` of a forward register tile (see ``_tile``) into out at rows m0.. and strip nb: as _store_act,
    or with vec_out as whole vectors into the strips (zero past OUT), only what exists."""
    if ti.static(vec_out):
        if nb < out.shape[0]:
            live = VI([nb * L + l for l in ti.static(range(L))]) < n_n
            cols = ti.static(len(acc) // ROWS)
            for i in ti.static(range(ROWS)):
                if m0 + i < out.shape[1]:
                    out[nb, m0 + i] = ti.select(live, act_v(acc[i * cols + cj] + bias, kind), 0.0)
    else:
        _store_act(out, acc, bias, m0, nb * L, kind, cj)


@ti.func
def _forward_panel(out: ti.template(), xp: ti.template(), wt: ti.template(), bias: ti.template(), mb, nb, n_n,
                   kind: ti.template(), cols: ti.template(), vec_out: ti.template()):
    """The forward's tiles of the input's panel mb at W's strips nb..nb+cols-1 (``bias``: their biases), stored
    through _store_out."""
    for g in range(_groups(_batch(out, vec_out) - mb * L)):
        r0 = g * ROWS
        acc = _tile(xp, wt, mb, nb, xp.shape[1], r0, cols)
        for j in ti.static(range(cols)):
            _store_out(out, acc, bias[j], mb * L + r0, nb + j, n_n, kind, j, vec_out)


@ti.func
def _bias(params: ti.template(), b_off, n0, n_n):
    return V([params[b_off + ti.min(n0 + l, n_n - 1)] for l in ti.static(range(L))])


@sized(lambda out, xp, wt, params, w_off, b_off, n_n, *_: xp.shape[0] * L * n_n * xp.shape[1] // 40)
def linear_forward_tiles(out: ti.types.ndarray(), xp: VA2, wt: VA2, params: F1, w_off: ti.i32, b_off: ti.i32,
                         n_n: ti.i32, cl_c: ti.i32, groups: ti.i32, kind: ti.template(), pack: ti.template(),
                         cols: ti.template(), by_rows: ti.template(), vec_out: ti.template()):
    # out: (B, OUT) f32 = act(inp @ W^T + b), or with vec_out its strips (ceil(OUT / 16), B) of 16-wide vectors,
    # zero past OUT, for a narrow Linear after this one (one vector store where a row's 16 floats take 16)
    # xp: inp as panels (stage_panels)   wt: W's panels (weight_panels' layout), packed here where ``pack`` is 1,
    # else already holding this W   params[w_off:]: W (OUT, IN)   params[b_off:]: b (OUT,)   n_n: OUT
    # cl_c: see _column   cols: the register tile's strips (tile_cols)   groups: groups of cols strips per
    # task, or with by_rows (only where pack is 0) the input's panels per task (linear_forward_cpu)
    mt, nt = xp.shape[0], wt.shape[0]
    if ti.static(by_rows):
        # A task takes ``groups`` of the input's panels (kept in its core's cache) for every column, W's strips a
        # register tile at a time (each read once a task and kept for all of its panels): tasks of equal work
        # whatever ``cols`` divides, where column groups of 3 strips split 64 strips unevenly.
        ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
        for t in range((mt + groups - 1) // groups):
            for c in range((nt + cols - 1) // cols):
                nb = c * cols
                bias = [_bias(params, b_off, (nb + j) * L, n_n) for j in ti.static(range(cols))]
                for mb in range(t * groups, ti.min(t * groups + groups, mt)):
                    _forward_panel(out, xp, wt, bias, mb, nb, n_n, kind, cols, vec_out)
    else:
        ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
        for t in range((nt + groups * cols - 1) // (groups * cols)):
            # A task takes ``groups`` * cols * 16 columns of W^T for every row of the batch. It packs them itself,
            # so the panels (50 KiB each at IN = 784) are still in its core's cache for the tiles that read them (a
            # separate packing kernel would write all of W's panels out to memory first), and it reads each of the
            # input's panels once from memory for all of its columns: with one group per task, a batch of 1,000
            # streamed the whole input (3.1 MB, beyond L2) once per 32 columns.
            n0 = t * groups * cols
            if ti.static(pack):
                for ob in range(n0, ti.min(n0 + groups * cols, nt)):
                    _pack_weight_panel(wt, params, w_off, ob, n_n, cl_c)
            for mb in range(mt):
                for s in range(groups):
                    nb = n0 + s * cols
                    if nb < nt:
                        bias = [_bias(params, b_off, (nb + j) * L, n_n) for j in ti.static(range(cols))]
                        _forward_panel(out, xp, wt, bias, mb, nb, n_n, kind, cols, vec_out)


def forward_groups(n_out: int) -> int:
    """Groups of COLS strips per task of the staged forward: up to 4 (each input panel read from memory once for
    4x the columns), while the tasks still number at least four per thread."""
    return max(1, min(4, -(-n_out // L) // COLS // (4 * pool_threads())))


def forward_panels(batch: int) -> int:
    """The input's panels per task of the staged forward by rows: four tasks a thread (the cooperative step's
    share of fixed blocks and claimed chunks, nncore.coop, then evens them out)."""
    mt = -(-batch // L)
    return -(-mt // (4 * pool_threads()))


def linear_forward_cpu(out, xp, wt, params, w_off: int, b_off: int, cl_c: int, kind: int, packed: bool = False,
                       n_out: int = 0):
    """The staged forward, act(inp @ W^T + b) into out (``linear_forward_tiles``). ``packed``: wt already holds
    this W's panels (the fused SGD step of the weight gradient keeps them; nncore.network says when), so the
    forward skips packing them. A long batch (``tile_cols``) runs the wider register tiles in tasks by rows,
    after packing W's panels first where they are not. ``n_out``: OUT, given where out is strips of vectors
    (``vec_out``; out is (B, OUT) otherwise)."""
    vec_out = 1 if n_out else 0
    batch, n_out = (out.shape[1], n_out) if vec_out else out.shape
    cols = tile_cols(batch)
    if cols != COLS:
        if not packed:
            weight_panels(wt, params, w_off, n_out, cl_c)
        linear_forward_tiles(out, xp, wt, params, w_off, b_off, n_out, cl_c, forward_panels(batch), kind, 0, cols, 1,
                             vec_out)
    else:
        linear_forward_tiles(out, xp, wt, params, w_off, b_off, n_out, cl_c, forward_groups(n_out), kind,
                             0 if packed else 1, cols, 0, vec_out)


@ti.func
def _store_dweight(dparams: ti.template(), wt: ti.template(), acc: ti.template(), w_off, f0, ob0, n_out, n_in, cl_c,
                   sgd: ti.template(), params: ti.template(), velocity: ti.template(), hyper):
    """A tile of dW^T (see ``_tile``: rows are input features f0.., strips the outputs of strips ob0..) into
    dparams[w_off:], dW (OUT, IN) (columns in the input's order: see _column), only what exists. With ``sgd`` > 0
    the gradient is not stored but applied to W in params: nncore.kernels.optim.sgd_step's arithmetic on whole
    vectors, W read from the forward's panels ``wt`` (whose vectors are dW^T's) and written back to them as well,
    ``hyper`` = (lr, momentum, weight decay); ``sgd`` 2 and 4 keep the velocity; 3 and 4 (``SGD_PANELS``) write W
    to the panels alone, leaving params' copy out of date (nncore.network says when, and copies it back with
    ``weight_from_panels``)."""
    n_ob = wt.shape[0]
    cols = ti.static(len(acc) // ROWS)
    for i in ti.static(range(ROWS)):
        if f0 + i < n_in:
            c = _column(f0 + i, n_in, cl_c)
            for j in ti.static(range(cols)):
                ob = ob0 + j
                if ob < n_ob:
                    at = VI([w_off + ti.min(ob * L + l, n_out - 1) * n_in + c for l in ti.static(range(L))])
                    g = acc[i * cols + j]
                    if ti.static(sgd == 0):
                        for l in ti.static(range(L)):
                            if ob * L + l < n_out:
                                dparams[at[l]] = g[l]
                    else:
                        w = wt[ob, f0 + i]
                        g = g + hyper[2] * w
                        if ti.static(sgd % 2 == 0):
                            g = hyper[1] * V([velocity[at[l]] for l in ti.static(range(L))]) + g
                        w = w - hyper[0] * g
                        # The new W into the panels too, so the next forward need not pack them again.
                        wt[ob, f0 + i] = ti.select(VI([ob * L + l for l in ti.static(range(L))]) < n_out, w, 0.0)
                        for l in ti.static(range(L)):
                            if ob * L + l < n_out:
                                if ti.static(sgd < SGD_PANELS):
                                    params[at[l]] = w[l]
                                if ti.static(sgd % 2 == 0):
                                    velocity[at[l]] = g[l]


@ti.func
def _dweight_tile(dparams: ti.template(), wt: ti.template(), ds: ti.template(), xs: ti.template(), mb, nb, w_off, m_n,
                  n_n, cl_c, sgd: ti.template(), params: ti.template(), velocity: ti.template(), lr, momentum,
                  weight_decay, cols: ti.template()):
    # (hyper is formed here, inside the parallel loop: a vector local made before it crashes the CPU's
    # parallel variant when vectors stay unscalarised)
    hyper = ti.Vector([lr, momentum, weight_decay])
    for g in range(_groups(n_n - mb * L)):
        r0 = g * ROWS
        acc = _tile(xs, ds, mb, nb * cols, xs.shape[1], r0, cols)
        _store_dweight(dparams, wt, acc, w_off, mb * L + r0, nb * cols, m_n, n_n, cl_c, sgd, params, velocity, hyper)


@sized(lambda dparams, ds, xs, wt, w_off, m_n, n_n, *_: ds.shape[1] * m_n * n_n // 40)
def linear_dweight_cpu(dparams: F1, ds: VA2, xs: VA2, wt: VA2, w_off: ti.i32, m_n: ti.i32, n_n: ti.i32,
                       cl_c: ti.i32, by_rows: ti.template(), sgd: ti.template(), params: F1, velocity: F1,
                       lr: ti.f32, momentum: ti.f32, weight_decay: ti.f32, cols: ti.template()):
    # dparams[w_off:]: dW (OUT, IN), formed as dW^T = inp^T @ dz: A = xs, the input's strips (stage_strips),
    # which are inp^T's panels; B = ds, dz's strips (stage_dz). m_n = OUT, n_n = IN; cl_c: see _column. (The
    # bias gradient comes with stage_dz.) dW^T's 16-wide vectors run along the outputs, as the forward's W
    # panels ``wt`` do: with sgd 1 or 2, dW is not stored but SGD's step applied to W in params (and velocity),
    # vector by vector from wt, with sgd_step's arithmetic; the optimizer then skips W, and two passes over
    # buffers the size of W are saved. (With sgd 0, wt is not read; dparams unused with sgd > 0.)
    # A task takes a row of tiles (by_rows) or a column, along dW^T's longer side (``dweight_by_rows``), and
    # holds one strip of the other side in its core's cache for all of its tiles (about 8% faster than tasks of
    # single tiles; docs/LOG.md). by_rows is a template argument: choosing at run time in the loop cost more.
    # cols: the register tile's strips (tile_cols)
    mt, nt = xs.shape[0], (ds.shape[0] + cols - 1) // cols  # (nt: groups of cols strips, see _tile)
    if ti.static(by_rows):
        ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
        for mb in range(mt):
            for nb in range(nt):
                _dweight_tile(dparams, wt, ds, xs, mb, nb, w_off, m_n, n_n, cl_c, sgd, params, velocity, lr, momentum,
                              weight_decay, cols)
    else:
        ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
        for nb in range(nt):
            for mb in range(mt):
                _dweight_tile(dparams, wt, ds, xs, mb, nb, w_off, m_n, n_n, cl_c, sgd, params, velocity, lr, momentum,
                              weight_decay, cols)


SGD_PANELS = 3  # linear_dweight_cpu's sgd modes from here on write the new W to the panels alone


def linear_dweight(dparams, ds, xs, wt, w_off: int, n_out: int, n_in: int, cl_c: int, params=None,
                   sgd=None, panels_only: bool = False) -> None:
    """dW into dparams with linear_dweight_cpu, or, given ``params`` and ``sgd`` (optim.SGD.fused()), SGD's step
    applied to W in params instead, read from ``wt``, W's panels as this step's forward used them, which then
    hold the new W; with ``panels_only``, only they do (params' copy of W is left as it was)."""
    by_rows, cols = dweight_by_rows(n_out, n_in), tile_cols(xs.shape[1])
    if sgd is None:
        linear_dweight_cpu(dparams, ds, xs, wt, w_off, n_out, n_in, cl_c, by_rows, 0, dparams, dparams, 0.0, 0.0, 0.0,
                           cols)
    else:
        mode = sgd[0] + (SGD_PANELS - 1 if panels_only else 0)
        linear_dweight_cpu(dparams, ds, xs, wt, w_off, n_out, n_in, cl_c, by_rows, mode, params, *sgd[1:], cols)


@sized(lambda params, wt, *_: 2 * n_elems(wt) * L)
def weight_from_panels(params: F1, wt: VA2, w_off: ti.i32, n_out: ti.i32, cl_c: ti.i32):
    # params[w_off:]: W (OUT, IN) <- wt, its panels (weight_panels' layout), where W lives after a step of
    # linear_dweight_cpu that wrote it to the panels alone; cl_c: see _column
    n_in = wt.shape[1]
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for ob in range(wt.shape[0]):
        for i in range(n_in):
            at = w_off + _column(i, n_in, cl_c)
            v = wt[ob, i]
            for l in ti.static(range(L)):
                if ob * L + l < n_out:
                    params[at + (ob * L + l) * n_in] = v[l]


def dweight_by_rows(n_out: int, n_in: int) -> bool:
    """Whether linear_dweight_cpu's tasks take rows of dW^T's tiles (more 16-row blocks of inputs than
    16-column blocks of outputs), else columns."""
    return (n_in + L - 1) // L > (n_out + L - 1) // L


KB = 256  # the direct forward sums its long inner products in blocks of this many terms (see below)


@sized(lambda out, inp, wt, *_: out.shape[0] * wt.shape[1] * wt.shape[0])
def linear_forward_cpu_direct(out: F2, inp: ti.types.ndarray(), wt: VA2, params: F1, b_off: ti.i32,
                              vec_in: ti.template()):
    # As linear_forward_cpu with no activation, A's scalars read from inp itself (see ``staging_pays``): inp is
    # (B, IN) f32, or with vec_in the strips of vectors (ceil(IN / 16), B) a forward wrote for it (``vec_out``),
    # zero past IN, read a vector a row and 16 k at a time   wt: W^T's strips (weight_panels), (ceil(OUT/16), IN)
    # Each row's sum is taken in blocks of KB terms, each block summed on its own and then added: the cnn's
    # 10,816-term sums in one running total lost several times more to float32 rounding than PyTorch's logits.
    m_n, n_n, k_n = out.shape[0], out.shape[1], wt.shape[1]
    mt, nt = (m_n + L - 1) // L, wt.shape[0]
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for t in range(mt * nt):
        mb, nb = t % mt, t // mt
        n0 = nb * L
        bias = _bias(params, b_off, n0, n_n)
        for g in range(_groups(m_n - mb * L)):
            m0 = mb * L + g * ROWS
            acc = [V(0.0) for _ in ti.static(range(ROWS))]
            for kb in range((k_n + KB - 1) // KB):
                blk = [V(0.0) for _ in ti.static(range(ROWS))]
                if ti.static(vec_in):
                    for s in range(kb * KB // L, ti.min(kb * KB + KB, k_n + L - 1) // L):
                        rows = [inp[s, ti.min(m0 + i, m_n - 1)] for i in ti.static(range(ROWS))]
                        for l in ti.static(range(L)):
                            bv = wt[nb, ti.min(s * L + l, k_n - 1)]  # (past IN: the lanes of inp are 0)
                            for i in ti.static(range(ROWS)):
                                madd(blk[i], rows[i][l], bv)
                else:
                    for k in range(kb * KB, ti.min(kb * KB + KB, k_n)):
                        bv = wt[nb, k]
                        for i in ti.static(range(ROWS)):
                            madd(blk[i], inp[ti.min(m0 + i, m_n - 1), k], bv)
                for i in ti.static(range(ROWS)):
                    acc[i] += blk[i]
            _store_act(out, acc, bias, m0, n0, 0)


@sized(lambda dparams, ds, inp, *_: ds.shape[0] * n_elems(inp) * 11 // 10)
def linear_dweight_cpu_narrow(dparams: F1, ds: VA2, inp: F2, w_off: ti.i32, m_n: ti.i32, cl_c: ti.i32):
    # dparams[w_off:]: dW (OUT, IN) = dz^T @ inp for a layer of few outputs (see ``staging_pays``)
    # ds: dz's strips (stage_dz, which also sums the bias gradient)   inp: (B, IN) f32, read in place
    # cl_c: see _column
    # Vectorised along the outputs: dW^T's rows, one 16-wide vector of outputs per input feature, each a sum
    # over the batch of a feature's value (a scalar of inp) times dz's row (one vector load). A task takes
    # 16 input features, ROWS at a time.
    k_n, n_n = inp.shape[0], inp.shape[1]
    nt = (n_n + L - 1) // L
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for t in range(ds.shape[0] * nt):
        ob, nb = t // nt, t % nt
        for g in range(_groups(n_n - nb * L)):
            f0 = nb * L + g * ROWS
            acc = [V(0.0) for _ in ti.static(range(ROWS))]
            for k in range(k_n):
                dv = ds[ob, k]
                for i in ti.static(range(ROWS)):
                    madd(acc[i], inp[k, ti.min(f0 + i, n_n - 1)], dv)
            for i in ti.static(range(ROWS)):
                if f0 + i < n_n:
                    col = w_off + _column(f0 + i, n_n, cl_c)
                    for l in range(ti.min(L, m_n - ob * L)):
                        dparams[col + (ob * L + l) * n_n] = acc[i][l]


@sized(lambda dinp, dp, wv: n_elems(dinp) * (40 + dp.shape[1]) // 30)  # (stores dominate at small K)
def linear_dinput_cpu(dinp: F2, dp: VA2, wv: VA2):
    # dinp: (B, IN) f32 = dz @ W   dp: dz as panels (stage_panels)   wv: W's strips (weight_strips)
    m_n, n_n, k_n = dinp.shape[0], dinp.shape[1], dp.shape[1]
    mt, nt = dp.shape[0], (wv.shape[0] + COLS - 1) // COLS  # (nt: groups of COLS strips, see _tile)
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for t in range(mt * nt):
        mb, nb = t // nt, t % nt * COLS  # along the rows of dinp: its writes are most of the traffic at small OUT
        for g in range(_groups(m_n - mb * L)):
            r0 = g * ROWS
            acc = _tile(dp, wv, mb, nb, k_n, r0, COLS)
            m0 = mb * L + r0
            for c in ti.static(range(COLS)):
                n0 = (nb + c) * L
                for i in ti.static(range(ROWS)):
                    if m0 + i < m_n:
                        for j in range(ti.min(L, n_n - n0)):
                            dinp[m0 + i, n0 + j] = acc[i * COLS + c][j]
