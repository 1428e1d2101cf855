"""Every kernel pair against the float64 NumPy reference, on random non-zero inputs of odd shapes.

Forward: relative error < 1e-5. Backward: against the analytic float64 gradient (< 1e-5) and, on small
shapes, against central finite differences of the float64 forward (< 1e-4, f32 kernels vs f64 differences).
"""
import zlib

import numpy as np
import pytest

from nncore import runtime
from nncore.kernels import activation as KA
from nncore.kernels import conv as KC
from nncore.kernels import fma as KF
from nncore.kernels.fma import madd
from nncore.runtime import ti
from nncore.kernels import gemm_cpu as KG
from nncore.kernels import linear as KL
from nncore.kernels import loss as KLoss
from nncore.kernels import optim as KO
from nncore.kernels import pool as KP
from nncore.kernels.data import gather_rows
from tests.conftest import nd, rel_err
from tests.nncore import reference as R

FWD_TOL, BWD_TOL, FD_TOL = 1e-5, 1e-5, 1e-4


def f32(a):
    return a.astype(np.float32).astype(np.float64)  # what the kernel actually sees


def zeros(*shape):
    return nd(np.zeros(shape, np.float32))


def nans(*shape):
    """An output buffer whose every element a kernel must overwrite (a skipped one stays NaN)."""
    return nd(np.full(shape, np.nan, np.float32))


@pytest.mark.parametrize("b,n_in,n_out", [(1, 1, 1), (5, 37, 13), (3, 129, 67), (17, 5, 130)])
def test_linear(arch, rng, b, n_in, n_out):
    x, w, bias = f32(rng.normal(size=(b, n_in))), f32(rng.normal(size=(n_out, n_in))), f32(rng.normal(size=n_out))
    dout = f32(rng.normal(size=(b, n_out)))
    # Weight and bias sit behind 3 unrelated values, to test the offsets.
    params = np.concatenate([[7.0, -3.0, 2.0], w.ravel(), bias])
    w_off, b_off = 3, 3 + w.size
    out = zeros(b, n_out)
    KL.linear_forward(out, nd(x), nd(params), w_off, b_off)
    assert rel_err(out.to_numpy(), R.linear(x, w, bias)) < FWD_TOL

    dinp, dparams = zeros(b, n_in), nd(np.full(params.size, 9.0))
    KL.linear_backward(dinp, dparams, nd(dout), nd(x), nd(params), w_off, b_off, 1)
    dx, dw, db = R.linear_grads(x, w, dout)
    got = dparams.to_numpy()
    assert rel_err(dinp.to_numpy(), dx) < BWD_TOL
    assert rel_err(got[w_off:b_off].reshape(w.shape), dw) < BWD_TOL
    assert rel_err(got[b_off:], db) < BWD_TOL
    assert np.all(got[:3] == 9.0)  # nothing outside the layer's slice is touched


@pytest.fixture(scope="module", params=["avx512", "avx2", "avx2-unfused"])
def tile_rows(request):
    """The CPU products with each register-tile layout, and with the multiply-adds fused (llvm.fma, where this
    CPU has FMA) or not: the machine picks one of each; all must be right. avx512wide (asked for by the tests of
    it): AVX-512's wider tiles for long batches (gemm_cpu.tile_cols) and the forward's tasks by rows, here at
    every batch."""
    saved = KG.ROWS, KG.COLS, KF.FUSED, KG.WIDE_BATCH
    KG.ROWS, KG.COLS = KG.LAYOUT_AVX512 if request.param.startswith("avx512") else KG.LAYOUT_AVX2
    KG.WIDE_BATCH = 1 if request.param == "avx512wide" else saved[3]
    KF.FUSED = saved[2] and not request.param.endswith("unfused")
    runtime.init("cpu-parallel")  # the kernels compile again, reading them
    yield request.param
    KG.ROWS, KG.COLS, KF.FUSED, KG.WIDE_BATCH = saved
    runtime.init("cpu-parallel")


def _as_strips(x: np.ndarray) -> np.ndarray:
    """(B, N) as the strips of 16-wide vectors (ceil(N / 16), B, 16) the CPU kernels keep, zero past N."""
    b, n = x.shape
    padded = np.zeros((b, -(-n // KG.L) * KG.L), np.float32)
    padded[:, :n] = x
    return np.ascontiguousarray(padded.reshape(b, -1, KG.L).transpose(1, 0, 2))


def layout_rng(request, layout):
    """Both layouts see the same inputs: the random stream of the test's id without the layout."""
    runtime.ensure("cpu-parallel")
    return np.random.default_rng(zlib.crc32(request.node.nodeid.replace(f"{layout}-", "").encode()))


@pytest.mark.parametrize("b,n_in,n_out,cl_c", [(1, 1, 1, 0), (5, 37, 13, 0), (16, 16, 16, 0), (33, 48, 32, 0),
                                               (17, 5, 130, 0), (40, 129, 67, 0), (256, 784, 1024, 0),
                                               (9, 45, 10, 5), (21, 48, 35, 3), (3, 169, 17, 13)])
def test_linear_cpu_gemm(request, tile_rows, b, n_in, n_out, cl_c):
    """The register-tiled CPU kernels, on full tiles, partial tiles and sizes below one tile; with cl_c > 0, on
    an input that arrives channels-last (cl_c channels) while W keeps PyTorch's column order."""
    _check_linear_cpu_gemm(layout_rng(request, tile_rows), tile_rows, b, n_in, n_out, cl_c)


@pytest.mark.parametrize("tile_rows", ["avx512wide"], indirect=True)
@pytest.mark.parametrize("b,n_in,n_out,cl_c", [(5, 37, 13, 0), (33, 48, 32, 0), (17, 5, 130, 0), (40, 129, 67, 0),
                                               (9, 45, 10, 5), (21, 48, 35, 3)])
def test_linear_cpu_gemm_wide_tiles(request, tile_rows, b, n_in, n_out, cl_c):
    """The same with the long batch's 8 x 3 register tiles and the forward's tasks by the input's panels."""
    _check_linear_cpu_gemm(layout_rng(request, tile_rows), tile_rows, b, n_in, n_out, cl_c)


def _check_linear_cpu_gemm(rng, tile_rows, b, n_in, n_out, cl_c):
    x, w, bias = f32(rng.normal(size=(b, n_in))), f32(rng.normal(size=(n_out, n_in))), f32(rng.normal(size=n_out))
    dout = f32(rng.normal(size=(b, n_out)))
    # cols[i]: W's column for the kernel's input feature i; x_k: the input in the order the kernels receive it.
    i = np.arange(n_in)
    cols = i % cl_c * (n_in // cl_c) + i // cl_c if cl_c else i
    x_k = np.empty_like(x)
    x_k[:, :] = x[:, cols]
    w_k = w[:, cols]
    params = np.concatenate([[7.0, -3.0], w.ravel(), bias])
    w_off, b_off = 2, 2 + w.size
    vec = lambda shape: runtime.ti.Vector.ndarray(KG.L, runtime.ti.f32, shape=shape)  # noqa: E731
    wt = vec(KG.panels_shape(n_out, n_in))
    wt.from_numpy(np.full(wt.shape + (KG.L,), np.nan, np.float32))  # every lane the kernels read gets written
    KG.weight_panels(wt, nd(params), w_off, n_out, cl_c)
    got_wt = wt.to_numpy().transpose(0, 2, 1).reshape(-1, n_in)  # (16 * ceil(OUT / 16), IN): W, zero rows past OUT
    assert np.array_equal(got_wt[:n_out], w_k.astype(np.float32)) and np.all(got_wt[n_out:] == 0.0)
    xp = vec(KG.panels_shape(b, n_in))
    KG.stage_panels(xp, nd(x_k), nd(x_k), 0)
    panels = xp.to_numpy().transpose(0, 2, 1).reshape(-1, n_in)  # (16 * ceil(b / 16), IN)
    assert np.array_equal(panels[:b], x_k.astype(np.float32)) and np.all(panels[b:] == panels[b - 1])
    out = nans(b, n_out)
    wt.from_numpy(np.full(wt.shape + (KG.L,), np.nan, np.float32))  # the staged forward packs W's panels itself
    KG.linear_forward_cpu(out, xp, wt, nd(params), w_off, b_off, cl_c, 0)
    assert np.array_equal(wt.to_numpy().transpose(0, 2, 1).reshape(-1, n_in), got_wt)
    assert rel_err(out.to_numpy(), R.linear(x, w, bias)) < FWD_TOL
    # The output as strips of vectors (for a narrow Linear after it): the same values bit for bit, zero past OUT.
    out_s = vec(KG.strips_shape(b, n_out))
    out_s.from_numpy(np.full(out_s.shape + (KG.L,), np.nan, np.float32))
    KG.linear_forward_cpu(out_s, xp, wt, nd(params), w_off, b_off, cl_c, 0, packed=True, n_out=n_out)
    assert np.array_equal(out_s.to_numpy(), _as_strips(out.to_numpy()))
    xs, ds = vec(KG.strips_shape(b, n_in)), vec(KG.strips_shape(b, n_out))
    xs.from_numpy(np.full(xs.shape + (KG.L,), np.nan, np.float32))
    KG.stage_strips(xs, nd(x_k))
    strips = xs.to_numpy().transpose(1, 0, 2).reshape(b, -1)  # (b, 16 * ceil(IN / 16))
    assert np.array_equal(strips[:, :n_in], x_k.astype(np.float32)) and np.all(strips[:, n_in:] == 0.0)
    dparams, dinp = nd(np.full(params.size, 9.0)), nans(b, n_in)
    KG.stage_dz(ds, dparams, nd(dout), nd(dout), b_off, 0)
    # Tasks by rows and by columns of dW's tiles: the same sums, bit for bit.
    cols_dparams = nd(np.full(params.size, 9.0))
    KG.stage_dz(ds, cols_dparams, nd(dout), nd(dout), b_off, 0)
    tile_strips = KG.tile_cols(b)
    assert tile_strips == (KG.WIDE_COLS if tile_rows == "avx512wide" else KG.COLS)
    KG.linear_dweight_cpu(dparams, ds, xs, wt, w_off, n_out, n_in, cl_c, True, 0, dparams, dparams, 0.0, 0.0, 0.0,
                          tile_strips)
    KG.linear_dweight_cpu(cols_dparams, ds, xs, wt, w_off, n_out, n_in, cl_c, False, 0, cols_dparams, cols_dparams,
                          0.0, 0.0, 0.0, tile_strips)
    assert np.array_equal(dparams.to_numpy(), cols_dparams.to_numpy())
    dp, wv = vec(KG.panels_shape(b, n_out)), vec(KG.strips_shape(n_out, n_in))
    KG.stage_panels(dp, nd(dout), nd(dout), 0)
    KG.weight_strips(wv, nd(params), w_off, n_in, cl_c)
    assert np.array_equal(wv.to_numpy().transpose(1, 0, 2).reshape(n_out, -1)[:, :n_in], w_k.astype(np.float32))
    KG.linear_dinput_cpu(dinp, dp, wv)
    dx, dw, db = R.linear_grads(x, w, dout)
    # The direct kernels (layers of few outputs), outputs poisoned so that a skipped element shows.
    direct_out, direct_dparams = nans(b, n_out), nd(np.full(params.size, 9.0))
    KG.linear_forward_cpu_direct(direct_out, nd(x_k), wt, nd(params), b_off, 0)
    # The same from the input's strips (a forward's vec_out): the same sums in the same order, bit for bit.
    strips_out, x_s = nans(b, n_out), vec(KG.strips_shape(b, n_in))
    x_s.from_numpy(_as_strips(x_k.astype(np.float32)))
    KG.linear_forward_cpu_direct(strips_out, x_s, wt, nd(params), b_off, 1)
    assert np.array_equal(strips_out.to_numpy(), direct_out.to_numpy())
    KG.stage_dz(ds, direct_dparams, nd(dout), nd(dout), b_off, 0)
    KG.linear_dweight_cpu_narrow(direct_dparams, ds, nd(x_k), w_off, n_out, cl_c)
    assert rel_err(direct_out.to_numpy(), R.linear(x, w, bias)) < FWD_TOL
    got_direct = direct_dparams.to_numpy()
    assert rel_err(got_direct[w_off:b_off].reshape(w.shape), dw) < BWD_TOL
    assert rel_err(got_direct[b_off:], db) < BWD_TOL and np.all(got_direct[:2] == 9.0)
    got = dparams.to_numpy()
    assert rel_err(got[w_off:b_off].reshape(w.shape), dw) < BWD_TOL
    assert rel_err(got[b_off:], db) < BWD_TOL and np.all(got[:2] == 9.0)
    assert rel_err(dinp.to_numpy(), dx[:, cols]) < BWD_TOL  # in the input's own order


@pytest.mark.parametrize("kind,act,dact", [(1, R.relu, lambda y: (y > 0).astype(float)),
                                           (2, R.sigmoid, lambda y: y * (1 - y)), (3, np.tanh, lambda y: 1 - y * y)])
@pytest.mark.parametrize("b,n_in,n_out", [(5, 37, 33), (40, 129, 67), (17, 16, 48)])
def test_linear_cpu_gemm_fused_activation(request, tile_rows, kind, act, dact, b, n_in, n_out):
    """The CPU products with the activation in the forward's epilogue (vector exp for Sigmoid and Tanh) and its
    derivative in backward's staging, against float64: pre-activations spread over +-40, so the exp runs over
    its whole range, including where the sigmoid saturates."""
    _check_fused_activation(layout_rng(request, tile_rows), kind, act, dact, b, n_in, n_out)


@pytest.mark.parametrize("tile_rows", ["avx512wide"], indirect=True)
@pytest.mark.parametrize("kind,act,dact", [(1, R.relu, lambda y: (y > 0).astype(float)),
                                           (2, R.sigmoid, lambda y: y * (1 - y)), (3, np.tanh, lambda y: 1 - y * y)])
def test_linear_cpu_gemm_fused_activation_wide_tiles(request, tile_rows, kind, act, dact):
    _check_fused_activation(layout_rng(request, tile_rows), kind, act, dact, 40, 129, 67)


def _check_fused_activation(rng, kind, act, dact, b, n_in, n_out):
    x, w = f32(rng.normal(size=(b, n_in))), f32(rng.normal(size=(n_out, n_in)) * 8 / np.sqrt(n_in))
    bias, g = f32(rng.normal(size=n_out)), f32(rng.normal(size=(b, n_out)))
    params = np.concatenate([w.ravel(), bias])
    z = R.linear(x, w, bias)
    assert np.abs(z).max() > 15 and np.abs(z).min() > 1e-4  # saturated values; none on ReLU's kink
    vec = lambda shape: runtime.ti.Vector.ndarray(KG.L, runtime.ti.f32, shape=shape)  # noqa: E731
    wt, xp = vec(KG.panels_shape(n_out, n_in)), vec(KG.panels_shape(b, n_in))
    KG.stage_panels(xp, nd(x), nd(x), 0)
    out = nans(b, n_out)
    KG.linear_forward_cpu(out, xp, wt, nd(params), 0, w.size, 0, 0)
    z32 = out.to_numpy().astype(np.float64)  # the same sums, before the activation
    KG.linear_forward_cpu(out, xp, wt, nd(params), 0, w.size, 0, kind)
    y = out.to_numpy()
    assert rel_err(y, act(z)) < FWD_TOL
    # The activation alone, element by element, tiny and saturated values too: within 4e-6 (the argument
    # reduction of e^x rounds n * ln2 to float32: 1.5e-6 relative at x = -34; near 0 a few ulps).
    assert np.max(np.abs(y - act(z32)) / np.maximum(np.abs(act(z32)), 1e-30)) < 4e-6
    dz = g * dact(y.astype(np.float64))
    xs, ds, dp, wv = (vec(KG.strips_shape(b, n_in)), vec(KG.strips_shape(b, n_out)), vec(KG.panels_shape(b, n_out)),
                      vec(KG.strips_shape(n_out, n_in)))
    dparams, dinp = nans(params.size), nans(b, n_in)
    KG.stage_dz(ds, dparams, nd(g), out, w.size, kind)
    KG.stage_strips(xs, nd(x))
    KG.linear_dweight(dparams, ds, xs, ds, 0, n_out, n_in, 0)
    KG.stage_panels(dp, nd(g), out, kind)
    KG.weight_strips(wv, nd(params), 0, n_in, 0)
    KG.linear_dinput_cpu(dinp, dp, wv)
    dx, dw, db = R.linear_grads(x, w, dz)
    got = dparams.to_numpy()
    assert rel_err(got[:w.size].reshape(w.shape), dw) < BWD_TOL and rel_err(got[w.size:], db) < BWD_TOL
    assert rel_err(dinp.to_numpy(), dx) < BWD_TOL


_ACTS = {0: (lambda z: z, lambda y: np.ones_like(y)), 1: (R.relu, lambda y: (y > 0).astype(float)),
         2: (R.sigmoid, lambda y: y * (1 - y)), 3: (np.tanh, lambda y: 1 - y * y)}


# Every shape (partial strips, the narrow Linear's outputs in one, several or a partial group of the register
# tile) and every activation, each activation with two shapes: the activation only changes the per-element
# derivative, the shape the loops (each case compiles its own kernels, so not the full product).
@pytest.mark.parametrize("kind,b,n_out,n_next", [(0, 5, 33, 10), (1, 40, 67, 3), (2, 17, 16, 31), (3, 1, 1, 1),
                                                 (2, 3, 50, 17), (3, 5, 33, 10), (1, 17, 16, 31), (0, 3, 50, 17)])
def test_stage_dz_from_next_linear(request, tile_rows, kind, b, n_out, n_next):
    """stage_dz_from (a wide Linear + activation whose output feeds a narrow Linear): the gradient at its
    pre-activation formed from the gradient at the narrow Linear's output and that Linear's weights, staged as
    strips (zero past OUT), the bias gradient, and the narrow Linear's weight gradient (its outputs in groups of
    the register tile's size, the last partial), against float64, with each tile layout; nothing written outside
    the two gradients. The output read from its strips too (as a forward with vec_out writes it): the same bits."""
    act, dact = _ACTS[kind]
    rng = layout_rng(request, tile_rows)
    out = act(f32(rng.normal(size=(b, n_out)) * 3))
    out_s = runtime.ti.Vector.ndarray(KG.L, runtime.ti.f32, shape=KG.strips_shape(b, n_out))
    out_s.from_numpy(_as_strips(out))
    w_next, d_next = f32(rng.normal(size=(n_next, n_out))), f32(rng.normal(size=(b, n_next)))
    wn_off = 1 + n_out  # (params and dparams share the layout: the bias at 1, the narrow Linear's W after it)
    params = np.concatenate([np.full(wn_off, 5.0), w_next.ravel(), [5.0]])
    ds = runtime.ti.Vector.ndarray(KG.L, runtime.ti.f32, shape=KG.strips_shape(b, n_out))
    ds.from_numpy(np.full(ds.shape + (KG.L,), np.nan, np.float32))
    dparams = nd(np.full(params.size, 9.0))
    KG.stage_dz_from(ds, dparams, nd(d_next), nd(params), nd(out), 1, wn_off, n_out, kind, n_next, 0)
    if n_next <= 17:  # (31 outputs compile as two unrolled passes: slow to build twice, and read out the same way)
        ds_s = runtime.ti.Vector.ndarray(KG.L, runtime.ti.f32, shape=KG.strips_shape(b, n_out))
        ds_s.from_numpy(np.full(ds.shape + (KG.L,), np.nan, np.float32))
        dparams_s = nd(np.full(params.size, 9.0))
        KG.stage_dz_from(ds_s, dparams_s, nd(d_next), nd(params), out_s, 1, wn_off, n_out, kind, n_next, 1)
        assert np.array_equal(ds_s.to_numpy(), ds.to_numpy())
        assert np.array_equal(dparams_s.to_numpy(), dparams.to_numpy())
    out64 = out.astype(np.float32).astype(np.float64)
    dz = (d_next @ w_next) * dact(out64)
    strips = ds.to_numpy().transpose(1, 0, 2).reshape(b, -1)  # (b, 16 * ceil(OUT / 16))
    assert rel_err(strips[:, :n_out], dz) < BWD_TOL and np.all(strips[:, n_out:] == 0.0)
    got = dparams.to_numpy()
    assert rel_err(got[1:n_out + 1], dz.sum(axis=0)) < BWD_TOL and got[0] == 9.0 and got[-1] == 9.0
    dw_next = d_next.astype(np.float64).T @ out64
    assert rel_err(got[wn_off:wn_off + w_next.size].reshape(w_next.shape), dw_next) < BWD_TOL


@pytest.mark.parametrize("kind,act", [(1, R.relu), (2, R.sigmoid), (3, np.tanh)])
def test_linear_act_fused(arch, rng, kind, act):
    """Linear + activation in one kernel each way (the CUDA fusion), against the float64 composition; without
    the input gradient asked for, the same parameter gradients and no input gradient written."""
    b, n_in, n_out = 7, 29, 13
    x, w, bias = f32(rng.normal(size=(b, n_in))), f32(rng.normal(size=(n_out, n_in))), f32(rng.normal(size=n_out))
    g = f32(rng.normal(size=(b, n_out)))  # L = sum(act(linear(x)) * g)
    params = np.concatenate([w.ravel(), bias])
    out = zeros(b, n_out)
    KL.linear_act_forward(out, nd(x), nd(params), 0, w.size, kind)
    assert rel_err(out.to_numpy(), act(R.linear(x, w, bias))) < FWD_TOL
    dinp, dparams = zeros(b, n_in), zeros(params.size)
    KL.linear_act_backward(dinp, dparams, nd(g), nd(x), out, nd(params), 0, w.size, 1, kind)
    loss = lambda xv, p: np.sum(act(R.linear(xv, p[:w.size].reshape(w.shape), p[w.size:])) * g)  # noqa: E731
    assert np.abs(R.linear(x, w, bias)).min() > 1e-4  # no pre-activation on ReLU's kink
    assert rel_err(dinp.to_numpy(), R.central_diff(lambda v: loss(v, params), x)) < FD_TOL
    assert rel_err(dparams.to_numpy(), R.central_diff(lambda p: loss(x, p), params)) < FD_TOL
    untouched, again = nd(np.full((b, n_in), 5.0)), zeros(params.size)
    KL.linear_act_backward(untouched, again, nd(g), nd(x), out, nd(params), 0, w.size, 0, kind)
    assert np.array_equal(again.to_numpy(), dparams.to_numpy()) and np.all(untouched.to_numpy() == 5.0)


@pytest.mark.gpu
@pytest.mark.parametrize("kind,act", [(0, lambda v: v), (1, R.relu), (2, R.sigmoid), (3, np.tanh)])
@pytest.mark.parametrize("b,n_in,n_out,tm", [(1, 64, 64, 4), (37, 100, 70, 4), (64, 64, 128, 4),
                                             (130, 784, 1024, 4), (257, 203, 65, 4), (37, 100, 70, 2),
                                             (64, 784, 1024, 1), (19, 203, 65, 1), (50, 97, 130, 2)])
def test_linear_tiled_cuda(rng, b, n_in, n_out, tm, kind, act):
    """The shared-memory tiled CUDA products, with tiles of 64, 32 and 16 rows (tm 4, 2, 1), on full tiles,
    ragged edges in every dimension and a batch of one, against the float64 composition; nothing outside the
    layer's slice of the parameters is touched."""
    from nncore import runtime
    from nncore.kernels import gemm_cuda as KT

    runtime.ensure("cuda")
    # Weights scaled as initialised (variance 1 / n_in): pre-activations of order one, where the activations
    # bend, so that a wrong derivative shows.
    x, w = f32(rng.normal(size=(b, n_in))), f32(rng.normal(size=(n_out, n_in)) / np.sqrt(n_in))
    bias, g = f32(rng.normal(size=n_out)), f32(rng.normal(size=(b, n_out)))
    params = np.concatenate([[7.0, -3.0, 2.0], w.ravel(), bias])
    w_off, b_off = 3, 3 + w.size
    out = zeros(b, n_out)
    KT.linear_forward_tiled(out, nd(x), nd(params), w_off, b_off, kind, tm)
    y = act(R.linear(x, w, bias))
    assert rel_err(out.to_numpy(), y) < FWD_TOL
    dact = {0: np.ones_like(y), 1: (y > 0).astype(np.float64), 2: y * (1 - y), 3: 1 - y * y}[kind]
    dz = g * dact
    dparams, dinp = nd(np.full(params.size, 9.0)), zeros(b, n_in)
    KT.linear_dweight_tiled(dparams, nd(g), out, nd(x), w_off, b_off, kind, tm)
    KT.linear_dinput_tiled(dinp, nd(g), out, nd(params), w_off, kind, tm)
    got = dparams.to_numpy()
    assert rel_err(got[w_off:b_off].reshape(w.shape), dz.T @ x) < BWD_TOL
    assert rel_err(got[b_off:], dz.sum(0)) < BWD_TOL and np.all(got[:3] == 9.0)
    assert rel_err(dinp.to_numpy(), dz @ w) < BWD_TOL
    plain = zeros(b, n_in)  # the one-thread-per-output input gradient that small batches use instead
    KL.linear_act_dinput(plain, nd(g), out, nd(params), w_off, kind)
    assert rel_err(plain.to_numpy(), dz @ w) < BWD_TOL


@pytest.mark.gpu
@pytest.mark.parametrize("kind,act", [(0, lambda v: v), (1, R.relu), (2, R.sigmoid)])
@pytest.mark.parametrize("b,n_in,n_out,tm,split", [(64, 784, 1024, 1, 4), (256, 784, 1024, 4, 4),
                                                   (256, 1024, 1024, 4, 4), (37, 333, 70, 2, 3), (65, 150, 130, 1, 2),
                                                   (5, 64, 64, 4, 2)])
def test_linear_tiled_cuda_with_k_cut(rng, b, n_in, n_out, tm, split, kind, act, monkeypatch):
    """The forward and input gradient with K cut into ranges (``tiling`` does it where tiles are few): ranges
    that do not divide K or its slices of 16, ragged tiles, against float64; the partial sums' scratch is
    ``part_shape``'s size, written only where ranges and rows lie (its other rows keep their value)."""
    from nncore import runtime
    from nncore.kernels import gemm_cuda as KT

    runtime.ensure("cuda")
    x, w = f32(rng.normal(size=(b, n_in))), f32(rng.normal(size=(n_out, n_in)) / np.sqrt(n_in))
    bias, g = f32(rng.normal(size=n_out)), f32(rng.normal(size=(b, n_out)))
    params = np.concatenate([[7.0, -3.0, 2.0], w.ravel(), bias])
    w_off, b_off = 3, 3 + w.size
    part = nd(np.full((split * b + 1, max(n_in, n_out)), 4.0))
    out = zeros(b, n_out)
    KT.linear_forward_tiled(out, nd(x), nd(params), w_off, b_off, kind, tm, split, part)
    y = act(R.linear(x, w, bias))
    assert rel_err(out.to_numpy(), y) < FWD_TOL
    dz = g * {0: np.ones_like(y), 1: (y > 0).astype(np.float64), 2: y * (1 - y)}[kind]
    dinp = zeros(b, n_in)
    KT.linear_dinput_tiled(dinp, nd(g), out, nd(params), w_off, kind, tm, split, part)
    assert rel_err(dinp.to_numpy(), dz @ w) < BWD_TOL
    assert np.all(part.to_numpy()[split * b] == 4.0)
    monkeypatch.setenv("LAYERLAB_CUDA_K_SPLIT", "1")
    if (b, n_in, n_out) in ((64, 784, 1024), (256, 784, 1024)):  # the seed shapes take the cut this test makes
        assert KT.tiling(b, n_out, n_in) == (tm, split) and KT.part_shape(b, n_out, n_in) == (split * b, n_out)


@pytest.mark.gpu
@pytest.mark.parametrize("kind,act", [(0, lambda v: v), (2, R.sigmoid), (1, R.relu)])
@pytest.mark.parametrize("b,n_in,n_out", [(1, 2048, 1), (3, 2081, 10), (67, 10816, 10), (5, 4099, 16),
                                          (64, 1024, 10), (7, 1031, 3), (1000, 1024, 10)])
def test_linear_split_forward_cuda(rng, b, n_in, n_out, kind, act):
    """The split-input CUDA forward for few outputs, with and without an activation: input lengths that do
    not divide into the slices, against float64, and the same bits on a second run."""
    from nncore import runtime
    from nncore.kernels import gemm_cuda as KT

    runtime.ensure("cuda")
    x, w = f32(rng.normal(size=(b, n_in))), f32(rng.normal(size=(n_out, n_in)) / np.sqrt(n_in))
    bias = f32(rng.normal(size=n_out))
    params = np.concatenate([[7.0, -3.0], w.ravel(), bias])
    out = zeros(b, n_out)
    KT.linear_forward_split(out, nd(x), nd(params), 2, 2 + w.size, kind)
    assert rel_err(out.to_numpy(), act(R.linear(x, w, bias))) < FWD_TOL
    first = out.to_numpy()
    KT.linear_forward_split(out, nd(x), nd(params), 2, 2 + w.size, kind)
    assert np.array_equal(out.to_numpy(), first)


@pytest.mark.parametrize("kind,act", [(0, lambda v: v), (2, R.sigmoid), (1, R.relu)])
@pytest.mark.parametrize("b,n_in,n_out,n_s", [(3, 7, 3, 5), (37, 50, 10, 2), (67, 129, 10, 3), (100, 33, 5, 16),
                                              (1, 1, 1, 1)])
def test_linear_backward_split_over_the_batch(arch, rng, b, n_in, n_out, n_s, kind, act):
    """The weight and bias gradients summed by n_s threads a weight over interleaved samples (more threads than
    samples included), and the input gradient, against float64; the same bits on a second run; nothing outside
    the layer's slice of the parameters touched, and no input gradient where none is asked for."""
    from nncore.kernels import gemm_cuda as KT

    x, w = f32(rng.normal(size=(b, n_in))), f32(rng.normal(size=(n_out, n_in)) / np.sqrt(n_in))
    bias, g = f32(rng.normal(size=n_out)), f32(rng.normal(size=(b, n_out)))
    params = np.concatenate([[7.0, -3.0], w.ravel(), bias])
    w_off, b_off = 2, 2 + w.size
    y = act(R.linear(x, w, bias))
    dz = g * {0: np.ones_like(y), 1: (y > 0).astype(np.float64), 2: y * (1 - y)}[kind]
    out, dpartial = nd(y), nans(n_out * n_s, n_in + 1)
    dparams, dinp = nd(np.full(params.size, 9.0)), nans(b, n_in)
    KT.linear_act_backward_split(dinp, dparams, nd(g), nd(x), out, nd(params), dpartial, w_off, b_off, 1, kind)
    got = dparams.to_numpy()
    assert rel_err(got[w_off:b_off].reshape(w.shape), dz.T @ x) < BWD_TOL
    assert rel_err(got[b_off:], dz.sum(0)) < BWD_TOL and np.all(got[:2] == 9.0)
    assert rel_err(dinp.to_numpy(), dz @ w) < BWD_TOL
    again, untouched = nd(np.full(params.size, 9.0)), nd(np.full((b, n_in), 5.0))
    KT.linear_act_backward_split(untouched, again, nd(g), nd(x), out, nd(params), dpartial, w_off, b_off, 0, kind)
    assert np.array_equal(again.to_numpy(), got) and np.all(untouched.to_numpy() == 5.0)


def test_batch_split_bounds_its_scratch():
    from nncore.kernels import gemm_cuda as KT

    assert [KT.batch_split(b, 1024, 10) for b in (1, 64, 511, 512, 1000, 100000)] == [1, 1, 1, 16, 16, 16]
    assert KT.batch_split(1000, 60, 100000) == 1  # (16 threads a weight would need 390 MB of partial sums)
    assert KT.batch_split(1000, 10816, 10) == 1 and KT.batch_split(1000, 3276, 10) == 1  # enough weights alone
    assert KT.batch_split(1000, 3275, 10) == 16


def test_linear_skips_input_gradient_when_told(arch, rng):
    x, w = rng.normal(size=(4, 6)), rng.normal(size=(3, 6))
    params = np.concatenate([w.ravel(), np.zeros(3)])
    dinp = nd(np.full((4, 6), 5.0))
    KL.linear_backward(dinp, zeros(params.size), nd(rng.normal(size=(4, 3))), nd(x), nd(params), 0, 18, 0)
    assert np.all(dinp.to_numpy() == 5.0)


def test_linear_backward_matches_finite_differences(arch, rng):
    x, w, bias = f32(rng.normal(size=(3, 4))), f32(rng.normal(size=(5, 4))), f32(rng.normal(size=5))
    g = f32(rng.normal(size=(3, 5)))  # L = sum(out * g)
    params = np.concatenate([w.ravel(), bias])
    dinp, dparams = zeros(3, 4), zeros(params.size)
    KL.linear_backward(dinp, dparams, nd(g), nd(x), nd(params), 0, w.size, 1)
    fd_x = R.central_diff(lambda v: np.sum(R.linear(v, w, bias) * g), x)
    fd_p = R.central_diff(lambda p: np.sum(R.linear(x, p[:20].reshape(5, 4), p[20:]) * g), params)
    assert rel_err(dinp.to_numpy(), fd_x) < FD_TOL
    assert rel_err(dparams.to_numpy(), fd_p) < FD_TOL


ACTS = {
    "relu": (KA.relu_forward, KA.relu_backward, R.relu),
    "sigmoid": (KA.sigmoid_forward, KA.sigmoid_backward, R.sigmoid),
    "tanh": (KA.tanh_forward, KA.tanh_backward, np.tanh),
}


@pytest.mark.parametrize("name", sorted(ACTS))
@pytest.mark.parametrize("shape,chunk", [((1, 1), 1), ((7, 33), 5), ((3, 1001), 4096), ((3, 1001), 1),
                                         ((64, 10), 7), ((5, 10), 10)])
def test_activation(arch, rng, name, shape, chunk):
    fwd, bwd, ref = ACTS[name]
    x = f32(rng.normal(scale=3.0, size=shape))
    x = np.where(np.abs(x) < 1e-3, 1e-3, x)  # finite differences across ReLU's kink are meaningless
    dout = f32(rng.normal(size=shape))
    out, dinp = nans(*shape), nans(*shape)
    fwd(out, nd(x), chunk)
    assert rel_err(out.to_numpy(), ref(x)) < FWD_TOL
    bwd(dinp, nd(dout), out, chunk)
    fd = R.central_diff(lambda v: np.sum(ref(v) * dout), x)
    assert rel_err(dinp.to_numpy(), fd) < FD_TOL


def test_sigmoid_and_tanh_do_not_overflow(arch):
    x = np.array([[-1e4, -90.0, 0.0, 90.0, 1e4]])
    for name in ("sigmoid", "tanh"):
        out = zeros(1, 5)
        ACTS[name][0](out, nd(x), 1)
        assert np.all(np.isfinite(out.to_numpy()))
        assert rel_err(out.to_numpy(), ACTS[name][2](x)) < FWD_TOL


CONV_CASES = [
    # B, C, H, W, OC, kernel, stride, padding
    (2, 1, 5, 5, 1, (3, 3), (1, 1), (0, 0)),
    (3, 2, 9, 11, 5, (3, 2), (1, 2), (1, 0)),
    (2, 3, 8, 7, 4, (2, 3), (2, 1), (0, 2)),
    (1, 4, 13, 13, 3, (5, 5), (3, 3), (2, 2)),
    (5, 1, 28, 28, 7, (3, 3), (1, 1), (0, 0)),
]


def _conv_geom(c, h, w, oc, k, s, p):
    return (c, h, w, oc, k[0], k[1], s[0], s[1], p[0], p[1])


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d(arch, rng, case):
    b, c, h, w, oc, k, s, p = case
    x = f32(rng.normal(size=(b, c, h, w)))
    wt, bias = f32(rng.normal(size=(oc, c, *k))), f32(rng.normal(size=oc))
    ref = R.conv2d(x, wt, bias, s, p)
    dout = f32(rng.normal(size=ref.shape))
    params = np.concatenate([[1.0], wt.ravel(), bias])
    w_off, b_off = 1, 1 + wt.size
    geom = _conv_geom(c, h, w, oc, k, s, p)
    out = zeros(b, ref[0].size)
    KC.conv2d_forward(out, nd(x.reshape(b, -1)), nd(params), w_off, b_off, *geom)
    assert rel_err(out.to_numpy(), ref.reshape(b, -1)) < FWD_TOL

    dinp, dparams = zeros(b, c * h * w), zeros(params.size)
    KC.conv2d_backward(dinp, dparams, nd(dout.reshape(b, -1)), nd(x.reshape(b, -1)), nd(params), w_off, b_off,
                       *geom, 1, 1)
    dx, dw, db = R.conv2d_grads(x, wt, dout, s, p)
    got = dparams.to_numpy()
    assert rel_err(dinp.to_numpy(), dx.reshape(b, -1)) < BWD_TOL
    assert rel_err(got[w_off:b_off], dw.ravel()) < BWD_TOL
    assert rel_err(got[b_off:], db) < BWD_TOL
    atomic = nd(np.full(params.size, 5.0))  # the CUDA variant of the weight gradient, on every backend
    KC.conv2d_dweight_atomic(atomic, nd(dout.reshape(b, -1)), nd(x.reshape(b, -1)), w_off, b_off, *geom)
    assert rel_err(atomic.to_numpy()[w_off:b_off], dw.ravel()) < BWD_TOL
    assert rel_err(atomic.to_numpy()[b_off:], db) < BWD_TOL and atomic.to_numpy()[0] == 5.0


def test_conv2d_backward_matches_finite_differences(arch, rng):
    b, c, h, w, oc, k, s, p = 2, 2, 5, 4, 3, (3, 2), (2, 1), (1, 1)
    x = f32(rng.normal(size=(b, c, h, w)))
    wt, bias = f32(rng.normal(size=(oc, c, *k))), f32(rng.normal(size=oc))
    g = f32(rng.normal(size=R.conv2d(x, wt, bias, s, p).shape))
    params = np.concatenate([wt.ravel(), bias])
    dinp, dparams = zeros(b, c * h * w), zeros(params.size)
    KC.conv2d_backward(dinp, dparams, nd(g.reshape(b, -1)), nd(x.reshape(b, -1)), nd(params), 0, wt.size,
                       *_conv_geom(c, h, w, oc, k, s, p), 1, 1)
    fd_x = R.central_diff(lambda v: np.sum(R.conv2d(v, wt, bias, s, p) * g), x)
    fd_p = R.central_diff(
        lambda q: np.sum(R.conv2d(x, q[:wt.size].reshape(wt.shape), q[wt.size:], s, p) * g), params)
    assert rel_err(dinp.to_numpy(), fd_x.reshape(b, -1)) < FD_TOL
    assert rel_err(dparams.to_numpy(), fd_p) < FD_TOL


POOL_CASES = [(2, 3, 6, 6, (2, 2), (2, 2)), (3, 2, 7, 9, (3, 2), (2, 3)), (1, 4, 5, 5, (3, 3), (1, 1)),
              (2, 1, 11, 13, (2, 3), (3, 2))]


@pytest.mark.parametrize("case", POOL_CASES)
def test_maxpool2d(arch, rng, case):
    b, c, h, w, k, s = case
    x = f32(rng.normal(size=(b, c, h, w)))  # continuous values: no ties
    ref = R.maxpool2d(x, k, s)
    dout = f32(rng.normal(size=ref.shape))
    geom = (c, h, w, *k, *s)
    out, argmax = zeros(b, ref[0].size), nd(np.zeros((b, ref[0].size), np.int32))
    KP.maxpool2d_forward(out, argmax, nd(x.reshape(b, -1)), *geom)
    assert rel_err(out.to_numpy(), ref.reshape(b, -1)) < FWD_TOL
    dinp = nd(np.full((b, c * h * w), 3.0))
    KP.maxpool2d_backward(dinp, nd(dout.reshape(b, -1)), argmax, *geom)
    assert rel_err(dinp.to_numpy(), R.maxpool2d_grad(x, dout, k, s).reshape(b, -1)) < BWD_TOL
    fd = R.central_diff(lambda v: np.sum(R.maxpool2d(v, k, s) * dout), x)
    assert rel_err(dinp.to_numpy(), fd.reshape(b, -1)) < FD_TOL


def test_maxpool2d_ties_go_to_the_first_element(arch):
    x = np.ones((1, 1, 2, 2))
    out, argmax = zeros(1, 1), nd(np.zeros((1, 1), np.int32))
    KP.maxpool2d_forward(out, argmax, nd(x.reshape(1, -1)), 1, 2, 2, 2, 2, 2, 2)
    dinp = zeros(1, 4)
    KP.maxpool2d_backward(dinp, nd(np.array([[2.5]])), argmax, 1, 2, 2, 2, 2, 2, 2)
    assert argmax.to_numpy()[0, 0] == 0
    assert dinp.to_numpy().tolist() == [[2.5, 0.0, 0.0, 0.0]]


LOSSES = {
    "cross_entropy": (KLoss.softmax_xent_forward_backward, R.cross_entropy),
    "bce": (KLoss.bce_logits_forward_backward, R.bce_logits),
    "mse": (KLoss.mse_forward_backward, R.mse),
}


# cross_entropy needs at least 2 classes (the network builder refuses one output), the others take k=1 too.
@pytest.mark.parametrize("name,b,k", [(n, b, k) for n in sorted(LOSSES) for b, k in [(1, 1), (7, 1), (5, 3), (13, 10)]
                                      if not (n == "cross_entropy" and k == 1)])
def test_loss(arch, rng, name, b, k):
    kernel, ref = LOSSES[name]
    logits = f32(rng.normal(scale=4.0, size=(b, k)))
    labels = rng.integers(0, max(k, 2), size=b)
    losses, dlogits, total = zeros(b), zeros(b, k), zeros(1)
    kernel(losses, dlogits, nd(logits), nd(labels.astype(np.int32)))
    KLoss.loss_sum(total, losses)
    want, grad = ref(logits, labels)
    assert rel_err(total.to_numpy()[0], want) < FWD_TOL
    assert rel_err(dlogits.to_numpy(), grad) < BWD_TOL
    fd = R.central_diff(lambda v: ref(v, labels)[0], logits)
    assert rel_err(dlogits.to_numpy(), fd) < FD_TOL


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_loss_is_finite_on_huge_logits(arch, name):
    logits = np.array([[1e4, -1e4, 0.0], [-3e4, 2e4, 1e4]])
    kernel, ref = LOSSES[name]
    labels = np.array([1, 0], np.int32)
    losses, dlogits, total = zeros(2), zeros(2, 3), zeros(1)
    kernel(losses, dlogits, nd(logits), nd(labels))
    KLoss.loss_sum(total, losses)
    assert np.isfinite(total.to_numpy()[0]) and np.all(np.isfinite(dlogits.to_numpy()))
    assert rel_err(total.to_numpy()[0], ref(logits, labels)[0]) < FWD_TOL


@pytest.mark.parametrize("k", [1, 4])
def test_count_correct(arch, rng, k):
    logits = rng.normal(size=(37, k))
    labels = rng.integers(0, max(k, 2), size=37)
    pred = (logits[:, 0] > 0).astype(int) if k == 1 else logits.argmax(1)
    out = nd(np.zeros(1, np.int32))
    KLoss.count_correct(out, nd(logits), nd(labels.astype(np.int32)))
    assert out.to_numpy()[0] == int(np.sum(pred == labels))


def test_sgd_step(arch, rng):
    p, v, g = (f32(rng.normal(size=1013)) for _ in range(3))
    pa, va = nd(p), nd(v)
    KO.sgd_step(pa, va, nd(g), 0.05, 0.9, 0.01, True, 0, len(p))
    want_p, want_v = R.sgd(p, v, g, 0.05, 0.9, 0.01)
    assert rel_err(pa.to_numpy(), want_p) < FWD_TOL
    assert rel_err(va.to_numpy(), want_v) < FWD_TOL
    KO.sgd_step(pa, va, nd(g), 0.05, 0.0, 0.01, False, 0, len(p))  # no momentum: the velocity is left alone
    assert rel_err(pa.to_numpy(), R.sgd(want_p, want_v, g, 0.05, 0.0, 0.01)[0]) < FWD_TOL
    assert rel_err(va.to_numpy(), want_v) < FWD_TOL


def test_sgd_without_momentum_leaves_the_velocity_alone(arch, rng):
    from nncore.optim import SGD

    p, g = f32(rng.normal(size=1013)), f32(rng.normal(size=1013))
    opt = SGD(p.size, lr=0.05, momentum=0.0, weight_decay=0.01)
    pa = nd(p)
    opt.step(pa, nd(g))
    opt.step(pa, nd(g))
    want = R.sgd(R.sgd(p, 0.0, g, 0.05, 0.0, 0.01)[0], 0.0, g, 0.05, 0.0, 0.01)[0]
    assert rel_err(pa.to_numpy(), want) < FWD_TOL
    assert np.all(opt.state_dict()["velocity"] == 0.0)  # so a later momentum starts from clone(g), as PyTorch


def test_adam_steps(arch, rng):
    p = f32(rng.normal(size=777))
    m, v = np.zeros_like(p), np.zeros_like(p)
    pa, ma, va = nd(p), nd(m), nd(v)
    lr, b1, b2, eps, wd = 0.01, 0.8, 0.95, 1e-6, 0.02
    for t in range(1, 4):
        g = f32(rng.normal(size=p.size))
        KO.adam_step(pa, ma, va, nd(g), lr, b1, b2, eps, wd, 1 - b1 ** t, np.sqrt(1 - b2 ** t))
        p, m, v = R.adam(p, m, v, g, t, lr, b1, b2, eps, wd)
        assert rel_err(pa.to_numpy(), p) < FWD_TOL
    assert rel_err(ma.to_numpy(), m) < FWD_TOL
    assert rel_err(va.to_numpy(), v) < FWD_TOL


def test_gather_rows(arch, rng):
    src, labels = rng.normal(size=(50, 7)), rng.integers(0, 9, size=50)
    order = rng.permutation(50)
    out, lab = zeros(6, 7), nd(np.zeros(6, np.int32))
    gather_rows(out, lab, nd(src), nd(labels.astype(np.int32)), nd(order.astype(np.int32)), 11)
    assert rel_err(out.to_numpy(), src[order[11:17]]) < FWD_TOL
    assert lab.to_numpy().tolist() == labels[order[11:17]].tolist()


@ti.kernel
def _madd_probe(out: ti.types.ndarray(dtype=ti.types.vector(16, ti.f32), ndim=1), s: ti.f32, b: ti.f32, c: ti.f32):
    for t in range(1):
        acc = ti.Vector([c] * 16, ti.f32)
        madd(acc, s, ti.Vector([b] * 16, ti.f32))
        out[t] = acc


@pytest.mark.parametrize("fused", [True, False])
def test_madd_fuses_where_the_cpu_has_fma(fused):
    """madd rounds once where FMA is used, twice otherwise: (1 + 2^-12)^2 - 1 is 2^-11 + 2^-24 exactly, and
    2^-11 once the product is rounded to f32 first."""
    if fused and not KF._has_fma():
        pytest.skip("this CPU has no FMA instruction (or LAYERLAB_FMA=0): madd is a multiply and an add here")
    saved = KF.FUSED
    KF.FUSED = fused
    try:
        runtime.init("cpu-serial")
        out = ti.Vector.ndarray(16, ti.f32, shape=(1,))
        s = 1.0 + 2.0 ** -12
        _madd_probe(out, s, s, -1.0)
        got = out.to_numpy()[0]
    finally:
        KF.FUSED = saved
        runtime.init("cpu-parallel")
    want = s * s - 1.0 if fused else float(np.float32(s * s)) - 1.0
    assert np.all(got == np.float32(want)), (got[0], want)


def test_fma_bitcode_is_assembled_from_its_source(tmp_path):
    """fma.bc, which the kernels link, is what llvm-as makes of fma.ll (the source kept beside it)."""
    import shutil
    import subprocess

    tool = next((t for t in ("llvm-as-15", "llvm-as-14", "llvm-as") if shutil.which(t)), None)
    if tool is None:
        pytest.skip("llvm-as is not installed here: the check needs it to assemble fma.ll")
    out = tmp_path / "fma.bc"
    subprocess.run([tool, KF.BITCODE[:-3] + ".ll", "-o", str(out)], check=True)
    bc_ours = subprocess.run([tool.replace("-as", "-dis"), KF.BITCODE, "-o", "-"], capture_output=True, text=True)
    bc_new = subprocess.run([tool.replace("-as", "-dis"), str(out), "-o", "-"], capture_output=True, text=True)
    if bc_ours.returncode or bc_new.returncode:
        pytest.skip("llvm-dis is not installed beside llvm-as")
    strip = lambda t: [l for l in t.splitlines() if not l.startswith(("; ModuleID", "source_filename"))]  # noqa: E731
    assert strip(bc_ours.stdout) == strip(bc_new.stdout)


def test_conv_blocks_together_keep_within_the_register_budget(monkeypatch):
    """The CPU conv kernels compute 4 or 2 channel blocks per iteration only where they divide the block count,
    their accumulators fit the budget, and (for the weight gradient) two tasks a thread remain."""
    from nncore.kernels import conv_cpu

    monkeypatch.setattr(conv_cpu.runtime, "current", lambda: type("Info", (), {"threads": 2})())
    assert conv_cpu.blocks_together(4, 4, 16) == 4  # cnn64's forward: 2x2 windows
    assert conv_cpu.blocks_together(4, 10, 20, 8) == 2  # cnn64's weight gradient: 3x3 taps and the bias
    assert conv_cpu.blocks_together(4, 26, 20, 8) == 1  # 5x5 taps: one block already holds 26
    assert conv_cpu.blocks_together(4, 9, 16) == 1  # 3x3 windows
    assert conv_cpu.blocks_together(3, 4, 16) == 1 and conv_cpu.blocks_together(6, 4, 16) == 2
    assert conv_cpu.blocks_together(2, 10, 20, 1) == 1  # 2 tasks for 2 threads would be too few


@pytest.mark.parametrize("b,n_oc,n_pos,n_out,no,kv", [
    (1, 21, 9, 7, 4, 1),  # one sample: the first half of the batch empty; 7 outputs in groups of 4 (the last moved back)
    (33, 40, 19, 10, 10, 3),  # halves of 16 and 17; three channel blocks, the last partial; 19 positions: PB and 3 more
    (8, 16, 17, 25, 9, 1)])  # 25 outputs in three groups of 9
def test_pooled_linear_against_float64(rng, b, n_oc, n_pos, n_out, no, kv):
    """The narrow Linear after a fused conv part (nncore.kernels.conv_cpu): its forward and its weight and bias
    gradients, summed by halves of the batch, from the pooled output as 16-wide channel vectors, against
    float64; dW comes back in PyTorch's (C, H, W) columns."""
    from nncore.kernels import conv_cpu as CC

    runtime.ensure("cpu-parallel")
    n_ob = -(-n_oc // 16)
    n_ob += (kv - n_ob % kv) % kv  # (the kernels need kv to divide the blocks: zero vectors past OC)
    pooled = rng.normal(size=(b, n_pos, n_oc))  # channels-last
    w, bias, dz = rng.normal(size=(n_out, n_oc * n_pos)), rng.normal(size=n_out), rng.normal(size=(b, n_out))
    pv = np.zeros((b, n_pos, n_ob * 16), np.float32)
    pv[:, :, :n_oc] = pooled
    params = np.concatenate([w.ravel(), bias]).astype(np.float32)
    wc = ti.Vector.ndarray(16, ti.f32, shape=(n_pos, n_out, n_ob))
    pv_nd = ti.Vector.ndarray(16, ti.f32, shape=(b, n_pos, n_ob))
    pv_nd.from_numpy(pv.reshape(b, n_pos, n_ob, 16))
    CC.pack_linear_weights(wc, nd(params), 0, n_oc)
    out = nans(b, n_out)
    CC.linear_forward_pooled(out, pv_nd, wc, nd(params), n_out * n_oc * n_pos, no, 2)
    x = f32(pooled).transpose(0, 2, 1).reshape(b, -1)  # PyTorch's (C, H, W) order
    assert rel_err(out.to_numpy(), x @ f32(w).T + f32(bias)) < FWD_TOL
    dparams = nans(len(params))
    half = ti.Vector.ndarray(16, ti.f32, shape=(CC.HALVES, n_pos, n_out, n_ob))
    CC.linear_dweight_pooled(dparams, half, nd(dz.astype(np.float32)), pv_nd, 0, n_out * n_oc * n_pos, n_oc, no, kv,
                             0, dparams, dparams, 0.0, 0.0, 0.0)  # (no SGD: dW to dparams)
    got = dparams.to_numpy()
    assert rel_err(got[:w.size].reshape(w.shape), f32(dz).T @ x) < BWD_TOL
    assert rel_err(got[w.size:], f32(dz).sum(0)) < BWD_TOL


def test_k_ranges_are_cut_only_where_tiles_are_few(monkeypatch):
    """``tiling``: with the cut on, products of fewer tiles than SPLIT_BLOCKS get ranges of K (at most
    MAX_K_SPLIT, each at least MIN_K_RANGE long) and the tallest tiles that make SPLIT_BLOCKS blocks with them;
    the rest keep ``rows_per_thread``'s tiles; off (LAYERLAB_CUDA_K_SPLIT=0), every product keeps them; on is the
    default."""
    from nncore.kernels import gemm_cuda as KT

    shapes = [(64, 1024, 784), (256, 1024, 1024), (1000, 1024, 784), (33, 50, 37), (200, 64, 130), (40, 1024, 256)]
    monkeypatch.setenv("LAYERLAB_CUDA_K_SPLIT", "0")
    assert [KT.tiling(*s) for s in shapes] == [None if KT.rows_per_thread(m, n) is None else
                                                (KT.rows_per_thread(m, n), 1) for m, n, _ in shapes]
    monkeypatch.delenv("LAYERLAB_CUDA_K_SPLIT", raising=False)
    got = {s: KT.tiling(*s) for s in shapes}
    monkeypatch.setenv("LAYERLAB_CUDA_K_SPLIT", "1")
    assert {s: KT.tiling(*s) for s in shapes} == got
    assert got[(64, 1024, 784)] == (1, 4) and got[(256, 1024, 1024)] == (4, 4) and got[(1000, 1024, 784)] == (4, 1)
    assert got[(33, 50, 37)] is None  # (no tiles at all)
    for (m, n, k), t in got.items():
        if t is None or t[1] == 1:
            continue
        tiles = -(-m // (16 * t[0])) * -(-n // KT.BN)
        assert t[1] <= KT.MAX_K_SPLIT and k // t[1] >= KT.MIN_K_RANGE and tiles < KT.SPLIT_BLOCKS
        assert KT.part_shape(m, n, k) == (t[1] * m, n)
