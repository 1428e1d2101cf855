"""Train steps replayed as Taichi compute graphs (nncore.graph) against the same steps launched one by one.

Graphs are on by default only on CUDA; these tests switch them on for the CPU too, where the same recording,
building and replay run (and on CUDA under the gpu marker). A graph launches the very kernels the step would
have launched, in the same order, so on the CPU the weights must agree to the bit.
"""
import numpy as np
import pytest

from nncore import graph as G
from nncore import runtime
from nncore.config import load_config
from nncore.kernels import kernel
from nncore.network import Sequential
from nncore.optim import SGD, Adam
from nncore.runtime import ti
from nncore.train import Trainer
from tests.conftest import nd

MLP = {"input": [37], "layers": [{"type": "Linear", "out_features": 45}, {"type": "Sigmoid"},
                                 {"type": "Linear", "out_features": 70}, {"type": "ReLU"},
                                 {"type": "Linear", "out_features": 7}], "loss": "cross_entropy"}
CNN = {"input": [1, 13, 11], "layers": [{"type": "Conv2D", "out_channels": 5, "kernel_size": 3},
                                        {"type": "ReLU"}, {"type": "MaxPool2D", "kernel_size": 2},
                                        {"type": "Flatten"}, {"type": "Linear", "out_features": 6}],
       "loss": "cross_entropy"}


def _train(spec, make_opt, graphs: bool, batches):
    net = Sequential.from_spec(spec, seed=3)
    net.graphs = G.StepGraphs(enabled=graphs)
    opt = make_opt(net.n_params)
    for x, y in batches:
        ws = net.workspace(len(x))
        ws.load(x, y)
        net.train_step(ws, opt)
    return net


@pytest.mark.parametrize("spec", [MLP, CNN], ids=["mlp", "cnn"])
@pytest.mark.parametrize("make_opt", [lambda n: SGD(n, lr=0.1, momentum=0.9), lambda n: Adam(n, lr=0.01)],
                         ids=["sgd-momentum", "adam"])
def test_graph_steps_equal_launched_steps(arch, spec, make_opt, rng):
    """Five steps, the last on a smaller batch (another workspace), with Adam's bias corrections changing every
    step: the graph's arguments must follow each call's values."""
    n_out = 7 if spec is MLP else 6
    batches = [(rng.random((b, *spec["input"]), dtype=np.float32), rng.integers(0, n_out, b))
               for b in (9, 9, 9, 9, 4)]
    launched = _train(spec, make_opt, False, batches)
    replayed = _train(spec, make_opt, True, batches)
    assert replayed.graphs.built >= 1 and replayed.graphs.fallbacks == 0
    want, got = launched.params.to_numpy(), replayed.params.to_numpy()
    assert not np.array_equal(want, Sequential.from_spec(spec, seed=3).params.to_numpy())  # it trained
    if arch == "cuda":  # the conv weight gradient sums with atomics there: order varies between runs
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, want)


def test_recording_launches_nothing(cpu):
    out = nd(np.full((3, 5), 7.0, np.float32))
    src = nd(np.arange(15, dtype=np.float32).reshape(3, 5))

    @kernel
    def copy(dst: ti.types.ndarray(dtype=ti.f32, ndim=2), s: ti.types.ndarray(dtype=ti.f32, ndim=2)):
        for i, j in dst:
            dst[i, j] = s[i, j]

    calls = G.record(lambda: copy(out, src))
    assert len(calls) == 1 and np.all(out.to_numpy() == 7.0)
    G.launch(calls)
    np.testing.assert_array_equal(out.to_numpy(), src.to_numpy())
    with pytest.raises(RuntimeError, match="do not nest"):
        G.record(lambda: G.record(lambda: None))


def test_scalar_arguments_take_their_parameters_types(cpu):
    """An int given for an f32 parameter (and a float for an i32 one) reaches the kernel as Python's launch
    would convert it."""
    out = nd(np.zeros(4, np.float32))

    @kernel
    def fill(o: ti.types.ndarray(dtype=ti.f32, ndim=1), scale: ti.f32, shift: ti.i32):
        for i in o:
            o[i] = scale * i + shift

    graphs = G.StepGraphs(enabled=True, static=False)  # (a static graph fixes its integers: another test)
    graphs.run(lambda: fill(out, 3, 2.0))
    np.testing.assert_array_equal(out.to_numpy(), [2.0, 5.0, 8.0, 11.0])
    graphs.run(lambda: fill(out, 0.5, -1))  # same graph, new values
    np.testing.assert_array_equal(out.to_numpy(), [-1.0, -0.5, 0.0, 0.5])
    assert graphs.built == 1


def test_a_kernel_a_graph_cannot_carry_runs_launched(cpu):
    """A vector parameter has no graph argument here: the recorded calls run one by one, and the next call of
    the same sequence does not try to build again."""
    out = nd(np.zeros(3, np.float32))

    @kernel
    def add(o: ti.types.ndarray(dtype=ti.f32, ndim=1), v: ti.types.vector(2, ti.f32)):
        for i in o:
            o[i] += v[0] + v[1]

    graphs = G.StepGraphs(enabled=True)
    for _ in range(2):
        graphs.run(lambda: add(out, ti.Vector([1.0, 2.0])))
    np.testing.assert_array_equal(out.to_numpy(), [6.0, 6.0, 6.0])
    assert graphs.fallbacks == 1 and graphs.built == 0


def quadrant_off_and_on(monkeypatch, variable: str, arch: str = "cpu-serial"):
    """Two quadrant training runs of 2 epochs, with the environment ``variable`` 0 and then 1: for each, the
    trainer's result, its weights and its StepGraphs; asserts both runs end with the same weights, losses and
    accuracy."""
    cfg = load_config("quadrant").override("train", arch=arch, epochs=2)
    ends = []
    for flag in ("0", "1"):
        monkeypatch.setenv(variable, flag)
        trainer = Trainer(cfg)
        ends.append((trainer.run(), trainer.net.params.to_numpy(), trainer.net.graphs))
    (off, w_off, _), (on, w_on, _) = ends
    np.testing.assert_array_equal(w_on, w_off)
    assert (on.test_acc, on.test_loss, on.steps) == (off.test_acc, off.test_loss, off.steps)
    return ends


def test_training_loop_with_graphs_equals_launched(monkeypatch):
    """The trainer's step (batch gather, step, loss sum) as one graph: same weights, losses and accuracy."""
    (_, _, g_off), (_, _, g_on) = quadrant_off_and_on(monkeypatch, "LAYERLAB_GRAPHS")
    assert g_off.built == 0 and g_on.built >= 1  # graphs built only when switched on


def test_graphs_are_on_unless_switched_off(monkeypatch):
    monkeypatch.delenv("LAYERLAB_GRAPHS", raising=False)
    runtime.ensure("cpu-parallel")
    assert G.StepGraphs().enabled
    monkeypatch.setenv("LAYERLAB_GRAPHS", "0")
    assert not G.StepGraphs().enabled


ODD_MLP = {"input": [50], "layers": [{"type": "Linear", "out_features": 37}, {"type": "Sigmoid"},
                                     {"type": "Linear", "out_features": 50}, {"type": "ReLU"},
                                     {"type": "Linear", "out_features": 7}], "loss": "mse"}
FUSED_NETS = {"odd-mlp": ODD_MLP, "odd-cnn": CNN, "net-1h": "net-1h", "net-1h-relu": "net-1h-relu",
              "net-2h": "net-2h", "cnn32": "cnn32", "cnn64": "cnn64", "cnn256": "cnn256"}


def _fused_against_parts(arch, spec, batch, steps, rng, max_launches, static=None):
    """Weights after ``steps`` SGD+momentum steps, launched kernel by kernel and fused (``fuse_plan``; ``static``
    as StepGraphs takes it, None: the backend's default)."""
    n_out = Sequential.from_spec(spec).out_shape[0]
    batches = [(rng.random((batch, *spec["input"]), dtype=np.float32), rng.integers(0, n_out, batch))
               for _ in range(steps)]
    ends = []
    for fused in (False, True):
        net = Sequential.from_spec(spec, seed=3)
        net.graphs = G.StepGraphs(enabled=fused, fused=fused, static=static)
        opt = SGD(net.n_params, lr=0.05, momentum=0.9)
        ws = net.workspace(batch)
        for x, y in batches:
            ws.load(x, y)
            net.train_step(ws, opt)
        ends.append(net.params.to_numpy())
        if fused:
            recorded, launched = net.graphs.launches
            # fused, not replayed as recorded (on the CPU, runs of in-place and pooled kernels fuse apart)
            assert net.graphs.unfused == 0 and launched < recorded, net.graphs.launches
            assert launched <= max_launches or arch != "cuda", net.graphs.launches
            # On CUDA a static step replays as a CUDA graph, though the part-by-part run compiled the library
            # kernels first, without the PTX a replay reads (a group of one in the plan is the plan's own kernel).
            g = net.graphs
            assert arch != "cuda" or not g.static or (g.replays == 1 and g.unreplayed == 0), vars(g)
    want, got = ends
    assert not np.array_equal(want, Sequential.from_spec(spec, seed=3).params.to_numpy())
    if arch == "cuda":
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("static", [False, True], ids=["runtime-shapes", "static-shapes"])
@pytest.mark.parametrize("name", list(FUSED_NETS))
def test_fused_step_equals_part_by_part(arch, name, static, rng):
    """The whole step as one kernel (nncore.graph.fuse_plan: every part's loops inlined, in order) against the same
    step launched kernel by kernel, 20 steps of an odd batch (33) with SGD and momentum, with the shapes and
    loop-bound integers as run-time values and as compile-time constants (``static``). The CPU runs the very
    same loops, so to the bit; on CUDA the conv weight gradient sums with atomics, whose order varies between
    runs, so within float32 rounding accumulated over 20 steps (rtol 1e-4, atol 1e-5)."""
    from nncore.bench import workload_model

    if arch != "cuda" and name in ("net-1h-relu", "net-2h", "cnn32", "cnn64", "cnn256"):
        pytest.skip("these seed networks run on the GPU only (CI's CPU time); the CPU has the odd ones and net-1h")
    spec = FUSED_NETS[name] if isinstance(FUSED_NETS[name], dict) else workload_model(FUSED_NETS[name])
    _fused_against_parts(arch, spec, 33, 20, rng, max_launches=3, static=static)


@pytest.mark.gpu
@pytest.mark.parametrize("name,batch", [("net-1h", 64), ("net-2h", 64), ("net-2h", 256), ("cnn64", 256)])
def test_fused_step_with_tiled_products(name, batch, rng):
    """Batches where the shared-memory tiled products run (at 33 most products use the plain kernels): net-2h at
    batch 64 has four of them in its step, which fused into one kernel read out of bounds; fused at most
    MAX_SHARED a kernel, the weights equal the part-by-part step's."""
    from nncore.bench import workload_model

    runtime.ensure("cuda")
    _fused_against_parts("cuda", workload_model(name), batch, 5, rng, max_launches=3)


@pytest.mark.gpu
@pytest.mark.parametrize("name,batch", [("odd-mlp", 33), ("odd-cnn", 33), ("net-1h", 33), ("net-1h-relu", 64),
                                        ("net-2h", 256), ("cnn32", 1000), ("cnn64", 64), ("cnn256", 33)])
def test_cuda_graph_replay_equals_taichis_graph(name, batch, rng):
    """The fused step replayed as a CUDA graph of its own PTX (nncore.cudagraph) against the same fused kernel
    launched from Taichi's compute graph, 20 steps of SGD with momentum through the trainer's gather (the batch's
    start changes every step), then 3 on a batch of 5 (another workspace, another graph).
    The same code with the same grid and block: the same bits, but where the conv weight gradient sums with
    atomics (its order varies between runs: within float32 rounding over 20 steps, rtol 1e-4, atol 1e-5)."""
    from nncore.bench import workload_model, device_pool, POOL
    from nncore.kernels.data import gather_rows

    runtime.ensure("cuda")
    spec = FUSED_NETS.get(name, name)
    spec = spec if isinstance(spec, dict) else workload_model(spec)
    net0 = Sequential.from_spec(spec, seed=3)
    n_out = net0.out_shape[0]
    pool = max(POOL // 8, 2 * batch)
    x = rng.random((pool, *spec["input"]), dtype=np.float32)
    y = rng.integers(0, n_out, pool)
    xs, ys, order = device_pool(x, y)
    ends = []
    # The replay first: a kernel compiled before its traced launch has no PTX to replay (it would run as
    # Taichi's graph, counted in ``unreplayed``), and both runs share the fused kernel (graph._fused).
    for replay in (True, False):
        net = Sequential.from_spec(spec, seed=3)
        net.graphs = G.StepGraphs(enabled=True, fused=True)
        net.graphs.cuda_graphs = replay
        opt = SGD(net.n_params, lr=0.05, momentum=0.9)
        for b, steps in ((batch, 20), (5, 3)):
            ws = net.workspace(b)
            for s in range(steps):
                start = (s * 7 * b + 5) % (pool - b + 1)
                net.train_step(ws, opt, gather=lambda: gather_rows(ws.x, ws.labels, xs, ys, order, start))
        g = net.graphs
        assert g.unfused == 0 and g.replays == (2 if replay else 0) and g.unreplayed == 0, vars(g)
        ends.append(net.params.to_numpy())
    got, want = ends
    assert not np.array_equal(want, net0.params.to_numpy())  # it trained
    if "cnn" in name:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, want)


def test_fused_kernels_hold_few_shared_memory_parts(cpu, rng):
    """fuse_plan splits a step so that each fused kernel has at most MAX_SHARED kernels flagged shared_memory and
    its ndarrays before its scalars; the split step computes what the kernels launched one by one compute."""
    @kernel
    def axpy(y: ti.types.ndarray(dtype=ti.f32, ndim=1), x: ti.types.ndarray(dtype=ti.f32, ndim=1), a: ti.f32):
        for i in range(y.shape[0]):
            y[i] = y[i] * 0.5 + a * x[i]

    @kernel
    def tiled_like(y: ti.types.ndarray(dtype=ti.f32, ndim=1), x: ti.types.ndarray(dtype=ti.f32, ndim=1), a: ti.f32):
        for i in range(y.shape[0]):
            y[i] = y[i] - a * x[(i + 1) % x.shape[0]]

    tiled_like.ti.shared_memory = True
    arrs = [nd(rng.random(13, dtype=np.float32)) for _ in range(4)]
    start = [a.to_numpy() for a in arrs]

    def step():
        for k in range(7):
            (tiled_like if k % 2 else axpy)(arrs[k % 4], arrs[(k + 1) % 4], 0.25 + k)

    step()
    want = [a.to_numpy() for a in arrs]
    calls = G.record(step)
    plan = G.fuse_plan(calls)
    for kern, sources, _ in plan:
        shared = [c for c, i in {(c, 0) for c, _ in sources} if getattr(calls[c][0], "shared_memory", False)]
        assert len(shared) <= G.MAX_SHARED
        kinds = ["nd" if isinstance(calls[c][1][i], ti.Ndarray) else "s" for c, i in sources]
        assert kinds == sorted(kinds)  # "nd" before "s"
    assert len(plan) == 2  # three shared-memory kernels: two in the first fused kernel, one in the second
    for a, s0 in zip(arrs, start):
        a.from_numpy(s0)
    G.launch(G.apply_plan(plan, calls))
    for a, w in zip(arrs, want):
        np.testing.assert_allclose(a.to_numpy(), w, rtol=1e-6)


def test_a_step_that_does_not_fuse_runs_as_recorded(cpu, monkeypatch, rng):
    """If the fused kernel cannot be made (compiled), the step runs as the recorded launches' graph, with the
    same weights as a step launched kernel by kernel."""
    def broken(calls, static=False, threads=0):
        raise RuntimeError("cannot compile")

    monkeypatch.setattr(G, "_make_fused", broken)
    batches = [(rng.random((9, 37), dtype=np.float32), rng.integers(0, 7, 9)) for _ in range(3)]
    want = _train(MLP, lambda n: SGD(n, lr=0.1), False, batches).params.to_numpy()
    net = Sequential.from_spec(MLP, seed=3)
    net.graphs = G.StepGraphs(enabled=True, fused=True)
    opt = SGD(net.n_params, lr=0.1)
    for x, y in batches:
        ws = net.workspace(len(x))
        ws.load(x, y)
        net.train_step(ws, opt)
    # (one graph for every step: on the CPU, W's panels are packed before the step, outside its graph)
    assert net.graphs.unfused == net.graphs.built == 1 and net.graphs.fallbacks == 0
    assert net.graphs.launches[0] == net.graphs.launches[1]
    np.testing.assert_array_equal(net.params.to_numpy(), want)


def test_a_static_kernel_fixes_every_integer_but_the_varying_ones(cpu):
    """The integers a static fused kernel fixes (``_Slots.consts``): every integer parameter, loop bound or
    index, but those named in ``VARYING`` (the batch's first sample, the step's number); no float."""
    @kernel
    def k(o: ti.types.ndarray(dtype=ti.f32, ndim=1), lo: ti.i32, hi: ti.i32, start: ti.i32, off: ti.i32,
          step: ti.i32, a: ti.f32):
        for i in range(hi - lo):
            o[lo + i] = o[start + i + off] * a + step

    slots = G._slots(k.ti)
    assert [k.ti._primal.arguments[i].name for i in slots.consts] == ["lo", "hi", "off"]
    assert {"start", "step"} <= G.VARYING


def test_a_step_on_other_arrays_finds_its_own_graph(arch, monkeypatch):
    """The fast cache (``_fast_key``) keys on the recorded ndarrays themselves: a step on other arrays of the
    same shapes reuses the graph built for those shapes, with the new arrays' values; a repeated step finds its
    graph without forming the full key; the cache empties itself when full and stays right. On CUDA the graph is
    a CUDA-graph replay (nncore.cudagraph), whose argument buffer must follow the arrays and the start."""
    @kernel
    def axpy(o: ti.types.ndarray(dtype=ti.f32, ndim=1), x: ti.types.ndarray(dtype=ti.f32, ndim=1), n: ti.i32,
             start: ti.i32, a: ti.f32):
        for i in range(n):
            o[i] = o[i] + a * x[start + i]

    full = []
    key = G._key
    monkeypatch.setattr(G, "_key", lambda *a, **k: full.append(1) or key(*a, **k))
    graphs = G.StepGraphs(enabled=True, fused=True, static=True)
    rng = np.random.default_rng(5)
    pairs = [(nd(np.zeros(7, np.float32)), nd(rng.normal(size=11).astype(np.float32))) for _ in range(3)]
    want = [np.zeros(7) for _ in pairs]
    for step in range(2 * G.MAX_FAST + 3):
        j, start = step % 3, step % 4
        o, x = pairs[j]
        graphs.run(lambda: (axpy(o, x, 7, start, 0.5), axpy(o, x, 7, 4 - start, -0.25)))
        xv = x.to_numpy().astype(np.float64)
        want[j] += 0.5 * xv[start:start + 7] - 0.25 * xv[4 - start:11 - start]
        np.testing.assert_allclose(o.to_numpy(), want[j], rtol=1e-5, atol=1e-6)
    assert graphs.built == 1 and graphs.unfused == 0
    assert graphs.replays == (arch == "cuda") and graphs.unreplayed == 0
    # Once for each pair of arrays, and once as the first pair's fused kernel is made (``fuse_plan``): the
    # start of the batch is in neither key.
    assert len(full) == 4
    G.MAX_FAST, was = 2, G.MAX_FAST
    graphs._fast.clear()
    try:
        for step in range(9):
            o, x = pairs[step % 3]
            graphs.run(lambda: (axpy(o, x, 7, 1, 1.0), axpy(o, x, 7, 2, -1.0)))
            assert len(graphs._fast) <= 2
    finally:
        G.MAX_FAST = was
    for j, (o, x) in enumerate(pairs):
        xv = x.to_numpy().astype(np.float64)
        want[j] += 3 * (xv[1:8] - xv[2:9])
        np.testing.assert_allclose(o.to_numpy(), want[j], rtol=1e-5, atol=1e-6)
    assert graphs.built == 1


def test_a_loop_bound_that_changes_every_step_stops_specialising(cpu):
    """A loop bound with a new value at every step would compile a static kernel per step: past MAX_VARIANTS
    the step runs as the generic fused kernel (run-time bounds), with the same results."""
    out = nd(np.zeros(40, np.float32))

    @kernel
    def fill(o: ti.types.ndarray(dtype=ti.f32, ndim=1), n: ti.i32, v: ti.f32):
        for i in range(n):
            o[i] = v

    @kernel
    def scale(o: ti.types.ndarray(dtype=ti.f32, ndim=1), a: ti.f32):
        for i in range(o.shape[0]):
            o[i] = o[i] * a

    graphs = G.StepGraphs(enabled=True, fused=True, static=True)
    for n in range(1, G.MAX_VARIANTS + 5):
        graphs.run(lambda: (fill(out, n, float(n)), scale(out, 2.0)))
        assert graphs.launches == (2, 1)
        want = np.zeros(40, np.float32)
        want[:n] = 2.0 * n
        np.testing.assert_array_equal(out.to_numpy(), want)
        out.fill(0.0)
    assert graphs.built == G.MAX_VARIANTS + 1 and graphs.unfused == 0


def test_a_step_with_an_unhashable_argument_runs_by_its_full_key(cpu):
    """A NumPy array given for an ndarray parameter cannot be part of the fast cache's key: the step finds its
    graph by the full key every time, with the right results, and the cache stays empty."""
    @kernel
    def add(o: ti.types.ndarray(dtype=ti.f32, ndim=1), x: ti.types.ndarray(dtype=ti.f32, ndim=1)):
        for i in range(o.shape[0]):
            o[i] = o[i] + x[i]

    out, graphs = nd(np.zeros(5, np.float32)), G.StepGraphs(enabled=True)
    for k in range(3):
        graphs.run(lambda: add(out, np.full(5, k + 1, np.float32)))
    np.testing.assert_array_equal(out.to_numpy(), np.full(5, 6.0))
    assert not graphs._fast
