"""The parts of nncore.cudagraph that need no GPU: the argument buffer's layout and the PTX check of the runtime
pointer. The replay itself runs under the gpu marker (tests/nncore/test_graph.py)."""
import ctypes

import numpy as np
import pytest

from nncore import cudagraph as CG
from nncore.kernels import kernel
from nncore.runtime import ti
from tests.conftest import nd


def test_argument_layout_matches_c_structs(cpu):
    """Taichi lays a kernel's parameters out as a C struct (an ndarray: its int32 shape, then its data pointer);
    ctypes lays out the same struct independently, with the same values the bytes must agree."""
    @kernel
    def k(a: ti.f32, x: ti.types.ndarray(dtype=ti.f32, ndim=1), n: ti.i32, m: ti.types.ndarray(dtype=ti.f32, ndim=3),
          d: ti.f64, t: ti.template(), q: ti.i64, y: ti.types.ndarray(dtype=ti.i32, ndim=2), z: ti.i32):
        pass

    x, m, y = nd(np.zeros(5, np.float32)), nd(np.zeros((2, 3, 4), np.float32)), nd(np.zeros((3, 7), np.int32))
    args = (1.5, x, -7, m, 2.25, 3, 1 << 40, y, 9)
    st, slots = CG._layout(k.ti, args)
    assert [i for i, _ in slots] == [0, 1, 2, 3, 4, 6, 7, 8]  # the template is not a parameter

    def arr(ndim):
        return type(f"A{ndim}", (ctypes.Structure,), {"_fields_": [("shape", ctypes.c_int32 * ndim),
                                                                   ("ptr", ctypes.c_uint64)]})

    fields = [("a", ctypes.c_float), ("x", arr(1)), ("n", ctypes.c_int32), ("m", arr(3)), ("d", ctypes.c_double),
              ("q", ctypes.c_int64), ("y", arr(2)), ("z", ctypes.c_int32)]
    ref = type("Args", (ctypes.Structure,), {"_fields_": fields})()
    ref.a, ref.n, ref.d, ref.q, ref.z = 1.5, -7, 2.25, 1 << 40, 9
    values = [1.5, 5, 0x1111, -7, 2, 3, 4, 0x2222, 2.25, 1 << 40, 3, 7, 0x3333, 9]
    for name, shape, ptr in (("x", (5,), 0x1111), ("m", (2, 3, 4), 0x2222), ("y", (3, 7), 0x3333)):
        field = getattr(ref, name)
        field.shape[:] = list(shape)
        field.ptr = ptr
    assert st.size == ctypes.sizeof(ref)
    assert st.pack(*values) == bytes(ref)


def test_vector_ndarrays_are_refused(cpu):
    @kernel
    def k(v: ti.types.ndarray(dtype=ti.types.vector(2, ti.f32), ndim=1)):
        pass

    v = ti.Vector.ndarray(2, ti.f32, 4)
    with pytest.raises(TypeError, match="plain ndarray"):
        CG._layout(k.ti, (v,))


_PTX = """.visible .entry k_0(
\t.param .align 8 .b8 k_0_param_0[32]
)
.maxntid 128, 1, 1
{
\tmov.b64 \t%rd72, k_0_param_0;
\tmov.u64 \t%rd1, %rd72;
\tld.param.u64 \t%rd73, [%rd1];
\tld.param.u64 \t%rd10, [%rd1+24];
\tadd.s64 \t%rd11, %rd10, 4;
\tld.global.u64 \t%rd12, [%rd73+8];
}
"""


@pytest.mark.parametrize("change,reads", [
    (None, False),  # the argument buffer (0) and the result buffer (24); other +8 loads are not the context's
    (("[%rd1+24]", "[%rd1+8]"), True),  # the runtime pointer
    (("ld.param.u64 \t%rd10, [%rd1+24]", "ld.param.v2.u64 \t{%rd10, %rd13}, [%rd1]"), True),  # bytes 0-15
    (("add.s64 \t%rd11, %rd10", "add.s64 \t%rd11, %rd1"), True),  # the address used otherwise
    (("mov.u64 \t%rd1, %rd72;", "mov.u64 \t%rd1, %rd72;\n\tcvta.param.u64 \t%rd5, %rd72;"), True),
    (("[%rd1+24]", "[k_0_param_0+12]"), True),  # a direct load of bytes 12-19
    (("[%rd1+24]", "[k_0_param_0+16]"), False),  # the CPU thread id's bytes
])
def test_a_task_that_may_read_the_runtime_is_refused(change, reads):
    ptx = _PTX if change is None else _PTX.replace(*change)
    assert ptx != _PTX or change is None
    assert CG._reads_runtime(ptx, "k_0") is reads
    assert CG._reads_runtime(ptx, "k_1")  # a task not in the module: refused


def test_replays_switch_off(monkeypatch):
    """Off by the environment, and off under another Taichi than the one whose internals the replay reads."""
    monkeypatch.delenv("LAYERLAB_CUDA_GRAPHS", raising=False)
    assert CG.enabled()
    monkeypatch.setenv("LAYERLAB_CUDA_GRAPHS", "0")
    assert not CG.enabled()
    monkeypatch.delenv("LAYERLAB_CUDA_GRAPHS")
    monkeypatch.setattr(ti, "__version__", (1, 7, 5))
    assert not CG.enabled()


def test_zero_dimensional_and_gradient_ndarrays_are_refused(cpu):
    """Taichi pads a 0-d ndarray's shape to one int32 and gives an ndarray with a gradient a second pointer: the
    replay's layout has neither, so it refuses them (the step then runs as Taichi's graph)."""
    @kernel
    def k(x: ti.types.ndarray(dtype=ti.f32, ndim=0), a: ti.f32):
        pass

    with pytest.raises(TypeError, match="one dimension"):
        CG._layout(k.ti, (ti.ndarray(ti.f32, ()), 1.0))

    @kernel
    def g(x: ti.types.ndarray(dtype=ti.f32, ndim=1, needs_grad=True), a: ti.f32):
        pass

    with pytest.raises(TypeError, match="gradient"):
        CG._layout(g.ti, (ti.ndarray(ti.f32, 3, needs_grad=True), 1.0))


@pytest.mark.parametrize("how", ["not-traced", "no-ptx", "capture-fails", "launch-fails"])
def test_a_step_whose_replay_cannot_be_built_runs_once(cpu, monkeypatch, how):
    """The replay's failure paths, forced on the CPU (which takes the CUDA route here): a trace that cannot be set
    up launches nothing and the step runs as Taichi's graph; a trace without PTX, or a capture that fails, has
    run the step, which must not run again; a launch that fails while traced raises, and is not run again."""
    from nncore import graph as G

    out = nd(np.zeros(6, np.float32))

    @kernel
    def add(o: ti.types.ndarray(dtype=ti.f32, ndim=1), v: ti.f32):
        for i in range(o.shape[0]):
            o[i] += v

    @kernel
    def twice(o: ti.types.ndarray(dtype=ti.f32, ndim=1)):
        for i in range(o.shape[0]):
            o[i] *= 2.0

    mode = [how]

    def fake_traced(launches):
        if mode[0] == "not-traced":
            raise CG.NotTraced("no temporary directory")
        G.launch(launches)
        if mode[0] == "launch-fails":
            raise RuntimeError("a launch failed")
        return None if mode[0] == "no-ptx" else [([("task", 1, 1)], "ptx")] * len(launches)

    def failing_replay(*a, **k):
        raise CG.CudaError("capture failed")

    monkeypatch.setattr(G._k, "on_cpu", lambda: False)
    monkeypatch.setattr(CG, "traced", fake_traced)
    monkeypatch.setattr(CG, "Replay", failing_replay)
    graphs = G.StepGraphs(enabled=True, fused=True, static=False)
    graphs.cuda_graphs = True
    want = np.zeros(6)
    for step in range(3):
        v = 0.5 + step
        if how == "launch-fails" and step == 0:
            with pytest.raises(RuntimeError, match="a launch failed"):
                graphs.run(lambda: (add(out, v), twice(out)))
            mode[0] = "not-traced"  # (the next step builds its entry again)
        else:
            graphs.run(lambda: (add(out, v), twice(out)))
        want = (want + v) * 2
        np.testing.assert_array_equal(out.to_numpy(), want.astype(np.float32))
    assert graphs.replays == 0 and graphs.unreplayed == 1 and graphs.unfused == 0


def _replayed_and_not(fn_of_step, steps):
    """The same recorded steps through a CUDA-graph replay and through Taichi's graph: the two StepGraphs."""
    from nncore import graph as G

    pair = []
    for replay in (True, False):
        graphs = G.StepGraphs(enabled=True, fused=True, static=True)
        graphs.cuda_graphs = replay
        outs = fn_of_step(graphs, steps)
        pair.append((graphs, outs))
    return pair


@pytest.mark.gpu
def test_replay_of_every_parameter_kind_equals_taichis_launch():
    """ndarrays of 1 and 2 dimensions and f32 / f64 / i32 / i64 scalars changing every step (the integers named
    as nncore.graph.VARYING, so that the static fused kernel keeps them as arguments): the replay packs them
    where Taichi does, or the results differ. (Two kernels, so that the step fuses into a static kernel: a loop
    over run-time shapes reads its bounds through the runtime, which the replay refuses.)"""
    from nncore import runtime

    runtime.ensure("cuda")

    @kernel
    def k(o: ti.types.ndarray(dtype=ti.f32, ndim=2), x: ti.types.ndarray(dtype=ti.f32, ndim=1), a: ti.f64,
          step: ti.i64, idx: ti.types.ndarray(dtype=ti.i32, ndim=1), start: ti.i32, f: ti.f32):
        for i, j in ti.ndrange(o.shape[0], o.shape[1]):
            o[i, j] += x[(i + j + start) % x.shape[0]] * f + ti.cast(a, ti.f32) + ti.cast(step % 7, ti.f32) \
                + ti.cast(idx[j % idx.shape[0]], ti.f32)

    rng = np.random.default_rng(11)
    x = nd(rng.normal(size=29).astype(np.float32))
    idx = nd(rng.integers(-5, 5, 6).astype(np.int32))

    @kernel
    def half(o: ti.types.ndarray(dtype=ti.f32, ndim=2)):
        for i, j in ti.ndrange(o.shape[0], o.shape[1]):
            o[i, j] *= 0.5

    def run(graphs, steps):
        o = nd(np.zeros((7, 13), np.float32))
        for s in range(steps):
            graphs.run(lambda: (k(o, x, 0.25 * s - 1.0, (1 << 33) + 3 * s, idx, 5 * s + 1, 1.5 - 0.1 * s), half(o)))
        return o.to_numpy()

    (g_on, got), (_, want) = _replayed_and_not(run, 5)
    assert g_on.replays == 1 and g_on.unreplayed == 0
    np.testing.assert_array_equal(got, want)
    assert np.abs(want).sum() > 0


@pytest.mark.gpu
def test_a_kernel_that_reads_the_runtime_is_not_replayed():
    """ti.random reads its state through the Taichi runtime pointer, which a replay cannot give: the PTX check
    refuses the kernel, and the steps run as Taichi's graph, right."""
    from nncore import runtime

    runtime.ensure("cuda")

    @kernel
    def noisy(o: ti.types.ndarray(dtype=ti.f32, ndim=1), start: ti.i32):
        for i in range(o.shape[0]):
            o[i] += ti.cast(start, ti.f32) + ti.min(ti.random(), 0.0)

    @kernel
    def double(o: ti.types.ndarray(dtype=ti.f32, ndim=1)):
        for i in range(o.shape[0]):
            o[i] *= 2.0

    def run(graphs, steps):
        o = nd(np.zeros(40, np.float32))
        for s in range(steps):
            graphs.run(lambda: (noisy(o, s + 1), double(o)))
        return o.to_numpy()

    (g_on, got), (_, want) = _replayed_and_not(run, 4)
    assert g_on.replays == 0 and g_on.unreplayed == 1
    np.testing.assert_array_equal(got, np.full(40, (((1 * 2 + 2) * 2 + 3) * 2 + 4) * 2, np.float32))
    np.testing.assert_array_equal(want, got)
