"""Cooperative CPU steps (nncore.coop): a step's loops shared out inside one parallel loop of one task per thread,
with barriers between them. Each thread computes whole iterations of the very loops Taichi would have run, so
every result must equal Taichi's own loops, and the one-thread runtime's, to the bit."""
import numpy as np
import pytest

from nncore import coop, runtime
from nncore import graph as G
from nncore.bench import workload_model
from nncore.kernels import kernel
from nncore.network import Sequential
from nncore.optim import SGD
from nncore.runtime import ti
from tests.conftest import nd
from tests.nncore.test_graph import CNN as ODD_CNN, ODD_MLP, quadrant_off_and_on

V4 = ti.types.vector(4, ti.f32)


@ti.func
def _scale_rows(out: ti.template(), x: ti.template(), s):
    # a ti.func whose loop is at the kernel's top level where it is called
    ti.loop_config(block_dim=runtime.coarse_block)
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = x[i, j] * s + out[i, j]


@kernel
def forms(out: ti.types.ndarray(dtype=ti.f32, ndim=2), x: ti.types.ndarray(dtype=ti.f32, ndim=2),
          acc: ti.types.ndarray(dtype=ti.f32, ndim=1), v: ti.types.ndarray(dtype=V4, ndim=1), k: ti.i32,
          mode: ti.template()):
    # Every form the rewrite knows, each loop reading what the one before wrote (so a missing barrier shows).
    m, n = out.shape[0], out.shape[1]
    for i in range(1, m):  # range(a, b)
        out[i, 0] = x[i, 0] + x[i - 1, n - 1]
    for i, j in ti.ndrange(m, n - 1):  # ndrange, the last dimension fastest
        out[i, j + 1] = x[i, j] * 2.0 + out[(i + 1) % m, 0]
    if ti.static(mode == 1):
        for i, j in out:  # over an ndarray's indices
            x[i, j] = out[i, j] * 0.5 + out[m - 1 - i, n - 1 - j]
    else:
        for i in range(m * n):
            out[i // n, i % n] += 1.0
    for r in ti.static(range(2)):  # unrolled: each copy is a loop of its own
        _scale_rows(out, x, r + 1.5)
    for i in v:
        v[i] = v[i] * out[i % m, i % n] + V4(1.0, 2.0, 3.0, ti.cast(k, ti.f32))
    acc[0] = out[0, 0] + k  # a statement with effects: thread 0 alone
    ti.loop_config(serialize=True)  # an ordered sum: thread 0 alone
    for _ in range(1):
        s = 0.0
        for i in range(m):
            s += out[i, (i * 7) % n]
        acc[1] = s


def _run(coop_on: bool, args):
    """``forms`` on copies of args, through a fused graph (cooperative where coop_on) or launched."""
    out, x, acc, v, k, mode = args
    arrs = [nd(a) for a in (out, x, acc)] + [ti.Vector.ndarray(4, ti.f32, v.shape[0])]
    arrs[3].from_numpy(v)
    g = G.StepGraphs(enabled=coop_on, fused=coop_on, coop_on=coop_on, coop_after=0)
    g.run(lambda: forms(*arrs, k, mode))
    return [a.to_numpy() for a in arrs], g


@pytest.mark.parametrize("arch", ["cpu-serial", "cpu-parallel"])
@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("m,n,nv", [(1, 2, 1), (5, 3, 7), (33, 17, 101), (200, 61, 1000)])
def test_cooperative_kernel_equals_taichis_loops(arch, mode, m, n, nv, rng):
    runtime.ensure(arch)
    args = (rng.standard_normal((m, n), dtype=np.float32), rng.standard_normal((m, n), dtype=np.float32),
            np.zeros(2, np.float32), rng.standard_normal((nv, 4), dtype=np.float32), int(rng.integers(1, 9)), mode)
    want, _ = _run(False, args)
    got, g = _run(True, args)
    assert g.launches == (1, 1) and g.unfused == 0 and g.fallbacks == 0
    assert coop.threads() == runtime.current().threads
    for w, o in zip(want, got):
        np.testing.assert_array_equal(o, w)


@kernel
def _chain(a: ti.types.ndarray(dtype=ti.f32, ndim=1), b: ti.types.ndarray(dtype=ti.f32, ndim=1)):
    # Each loop reads the neighbours the other thread wrote in the loop before.
    n = a.shape[0]
    for r in ti.static(range(24)):
        if ti.static(r % 2 == 0):
            for i in range(n):
                b[i] = a[i] + 0.5 * a[(i + 1) % n] + 0.25 * a[(i + n - 1) % n]
        else:
            for i in range(n):
                a[i] = b[i] - 0.125 * b[(i + 7) % n]


def _chain_ref(a):
    a = a.astype(np.float32).copy()
    for r in range(24):
        if r % 2 == 0:
            b = (a + np.float32(0.5) * np.roll(a, -1)) + np.float32(0.25) * np.roll(a, 1)
        else:
            a = b - np.float32(0.125) * np.roll(b, -7)
    return a, b


@pytest.mark.parametrize("n", [3, 64, 1001])
def test_barriers_order_loops_that_read_each_others_writes(n, rng):
    """24 loops, each reading what the other thread wrote in the one before, 200 launches: any loop started
    before the last one finished (a barrier let through early, a claim handed out twice) shows against NumPy."""
    runtime.ensure("cpu-parallel")
    assert coop.threads() == 2 or runtime.current().threads != 2
    a0 = rng.standard_normal(n).astype(np.float32)
    want = _chain_ref(a0)
    a, b = nd(a0), nd(np.zeros(n, np.float32))
    g = G.StepGraphs(enabled=True, fused=True, coop_on=True, coop_after=0)
    for _ in range(200):
        a.from_numpy(a0)
        g.run(lambda: _chain(a, b))
        np.testing.assert_array_equal(a.to_numpy(), want[0])
        np.testing.assert_array_equal(b.to_numpy(), want[1])
    assert g.launches == (1, 1)


@pytest.mark.parametrize("src,why", [
    ("def k(a):\n    i = 0\n    while i < 3:\n        a[i] = 1.0\n        i += 1\n", "While"),
    ("def k(a):\n    for i in ti.grouped(a):\n        a[i] = 1.0\n", "a loop over ti.grouped"),
    ("def k(a):\n    for i in range(0, 9, 2):\n        a[i] = 1.0\n", "a loop over range"),
])
def test_forms_it_does_not_know_are_refused(src, why, tmp_path):
    path = tmp_path / "k.py"
    path.write_text("import taichi as ti\n" + src)
    ns: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), ns)
    with pytest.raises(coop.NotCooperative, match=why):
        coop.cooperative(ns["k"])


def test_closures_are_refused():
    scale = 2.0

    def k(a):
        for i in range(3):
            a[i] = scale

    with pytest.raises(coop.NotCooperative, match="closure"):
        coop.cooperative(k)


def _steps(spec, batch, steps, rng, coop_on, trainer=False):
    n_out = Sequential.from_spec(spec).out_shape[0]
    data = [(rng.random((batch, *spec["input"]), dtype=np.float32), rng.integers(0, n_out, batch))
            for _ in range(steps)]
    net = Sequential.from_spec(spec, seed=3)
    net.graphs = G.StepGraphs(coop_on=coop_on, coop_after=0)
    opt = SGD(net.n_params, lr=0.05, momentum=0.9)
    ws = net.workspace(batch)
    for x, y in data:
        ws.load(x, y)
        net.train_step(ws, opt)
    return net


@pytest.mark.parametrize("name", ["odd-mlp", "odd-cnn", "net-1h"])
def test_cooperative_steps_equal_taichis_loops_on_both_cpu_backends(name):
    """20 SGD+momentum steps at batch 33: cooperative on two threads, on one, and Taichi's own loops (pool and
    in-place kernels) on two: the same weights to the bit."""
    spec = {"odd-mlp": ODD_MLP, "odd-cnn": ODD_CNN}.get(name) or workload_model(name)
    ends = {}
    for arch, coop_on in (("cpu-parallel", False), ("cpu-parallel", True), ("cpu-serial", True)):
        runtime.ensure(arch)
        net = _steps(spec, 33, 20, np.random.default_rng(7), coop_on)
        if coop_on:  # (one kernel, or a few where a kernel would take more than graph.MAX_ARGS arguments)
            recorded, launched = net.graphs.launches
            assert launched <= 2 and launched < recorded and net.graphs.unfused == 0, net.graphs.launches
        ends[(arch, coop_on)] = net.params.to_numpy()
    want = ends[("cpu-parallel", False)]
    assert not np.array_equal(want, Sequential.from_spec(spec, seed=3).params.to_numpy())
    for key, got in ends.items():
        np.testing.assert_array_equal(got, want, err_msg=str(key))


@pytest.mark.parametrize("arch", ["cpu-serial", "cpu-parallel"])
def test_a_training_run_in_cooperative_steps(arch, monkeypatch):
    """The trainer's step (the batch's gather, the step, the loss into its running sum: a serialised kernel) as
    cooperative kernels: the same weights, losses and accuracy as with Taichi's loops."""
    monkeypatch.setattr(G, "COOP_AFTER", 0)
    monkeypatch.setattr(coop, "pays", lambda calls: True)  # (quadrant's small step would not be, by default)
    (_, _, g_off), (_, _, g_on) = quadrant_off_and_on(monkeypatch, "LAYERLAB_COOP", arch)
    l_off, l_on = g_off.launches, g_on.launches
    assert l_on[1] <= 2 < l_off[1], (l_on, l_off)  # (two where one would take over graph.MAX_ARGS arguments)


def test_unpinned_workers_keep_taichis_loops(monkeypatch):
    """Two spinning workers on one core would wait for each other a scheduler tick at every barrier: with the
    pinning off there is no cooperative step."""
    monkeypatch.setenv("LAYERLAB_PIN", "0")
    runtime.init("cpu-parallel", pin=False)
    try:
        assert coop.threads() == 0
        net = _steps(ODD_MLP, 33, 2, np.random.default_rng(1), True)
        assert net.graphs.launches[1] > 1
    finally:
        monkeypatch.delenv("LAYERLAB_PIN")
        runtime.init("cpu-parallel")
    assert coop.threads() == runtime.current().threads


def test_on_unless_switched_off_by_the_environment(monkeypatch):
    runtime.ensure("cpu-parallel")
    monkeypatch.delenv("LAYERLAB_COOP", raising=False)
    assert G.StepGraphs().coop
    monkeypatch.setenv("LAYERLAB_COOP", "0")
    assert not G.StepGraphs().coop
    monkeypatch.setenv("LAYERLAB_COOP", "1")
    assert G.StepGraphs().coop


@pytest.mark.parametrize("name,batch,pays", [("quadrant", 32, False), ("quadrant", 1000, False),
                                             ("net-1h", 8, True), ("net-1h", 64, True), ("cnn64", 64, True)])
def test_cooperative_only_where_a_kernel_is_large_enough_for_the_pool(monkeypatch, name, batch, pays):
    """By default a step is cooperative only where one of its kernels would run on the pool (a hand-off to
    save): quadrant's small kernels all run in place on one thread, and stay Taichi's loops."""
    from nncore.config import load_config
    from nncore import kernels as K

    runtime.ensure("cpu-parallel")
    spec = load_config("quadrant").model if name == "quadrant" else workload_model(name)
    net = Sequential.from_spec(spec, seed=0)
    net.graphs = G.StepGraphs(enabled=False)  # (the step's launches recorded here, not by its graphs)
    opt = SGD(net.n_params, lr=0.01)
    ws = net.workspace(batch)
    calls = G.record(lambda: net.train_step(ws, opt))
    assert coop.pays(calls) == pays
    assert max(K.work_of(c) for c in calls) > 0  # (the estimates are there)
    if not pays and batch == 32:  # the default StepGraphs keeps Taichi's loops for it
        monkeypatch.setattr(G, "COOP_AFTER", 0)
        net.graphs = G.StepGraphs()
        rng = np.random.default_rng(0)
        ws.load(rng.random((batch, 2), dtype=np.float32), rng.integers(0, 2, batch))
        net.train_step(ws, opt)
        assert net.graphs.coop and net.graphs.launches[1] == net.graphs.launches[0] > 2


def test_a_step_runs_taichis_loops_until_it_recurs(rng):
    """A launch sequence's cooperative kernel is built at its ``coop_after``-th step (short runs never pay its
    compile); the steps before run Taichi's loops, and the weights equal those of a run cooperative throughout."""
    runtime.ensure("cpu-parallel")
    batches = [(rng.random((33, 50), dtype=np.float32), rng.integers(0, 7, 33)) for _ in range(6)]
    ends = []
    for after in (4, 0):
        net = Sequential.from_spec(ODD_MLP, seed=3)
        net.graphs = G.StepGraphs(coop_on=True, coop_after=after)
        opt = SGD(net.n_params, lr=0.05, momentum=0.9)
        ws = net.workspace(33)
        launched = []
        for x, y in batches:
            ws.load(x, y)
            net.train_step(ws, opt)
            launched.append(net.graphs.launches[1])
        ends.append(net.params.to_numpy())
        if after:
            assert min(launched[:3]) > 2 and max(launched[3:]) <= 2, launched  # (built at step 4)
        else:
            assert max(launched) <= 2, launched
    np.testing.assert_array_equal(ends[0], ends[1])


@pytest.mark.parametrize("coop_faster", [True, False])
def test_the_faster_of_the_two_runs_as_timed(rng, monkeypatch, coop_faster):
    """Once built, the cooperative kernel and Taichi's loops are timed against each other in alternating blocks
    (graph._Duel) and the faster runs until the next trial; the weights equal a run on Taichi's loops alone.
    The clock is a stand-in that makes one of the two take twice as long."""
    runtime.ensure("cpu-parallel")
    monkeypatch.setattr(G._Duel, "BLOCK", 2)
    monkeypatch.setattr(G._Duel, "BLOCKS", 4)
    monkeypatch.setattr(G._Duel, "RUN", 5)
    batches = [(rng.random((33, 50), dtype=np.float32), rng.integers(0, 7, 33)) for _ in range(22)]
    ends, launched = [], []
    for coop_on in (True, False):
        net = Sequential.from_spec(ODD_MLP, seed=3)
        net.graphs = G.StepGraphs(coop_on=coop_on, coop_after=2)
        clock = {"t": 0.0}

        def fake_clock():  # called before and after a timed step's launch: the step's cost between the two
            cooperative = net.graphs.launches[1] <= 2  # noqa: B023 (this run's net)
            clock["t"] += 1.0 if cooperative == coop_faster else 2.0
            return clock["t"]

        monkeypatch.setattr(G, "_clock", fake_clock)
        opt = SGD(net.n_params, lr=0.05, momentum=0.9)
        ws = net.workspace(33)
        for x, y in batches:
            ws.load(x, y)
            net.train_step(ws, opt)
            if coop_on:
                launched.append(net.graphs.launches[1] <= 2)
        ends.append(net.params.to_numpy())
    # step 1 Taichi's loops; at step 2 (coop_after) the kernel is built and the trial starts: 2 cooperative, 2
    # loops, 2, 2 (steps 2-9); then the winner for 5 steps (10-14), and a new trial (15-22)
    assert launched[:1] == [False]
    assert launched[1:9] == [True, True, False, False] * 2
    assert launched[9:14] == [coop_faster] * 5 and launched[14:22] == [True, True, False, False] * 2
    np.testing.assert_array_equal(ends[0], ends[1])


def test_generated_kernels_compile_after_linecache_is_emptied(rng):
    """Taichi reads a kernel's source whenever it compiles it (again on every runtime), and PyTorch's inductor
    empties linecache, where the generated sources live: a step built again after both must still fuse."""
    import linecache

    args = (rng.standard_normal((9, 5), dtype=np.float32), rng.standard_normal((9, 5), dtype=np.float32),
            np.zeros(2, np.float32), rng.standard_normal((6, 4), dtype=np.float32), 3, 1)
    runtime.ensure("cpu-parallel")
    want, _ = _run(False, args)
    _run(True, args)
    linecache.clearcache()
    runtime.init("cpu-parallel")  # (a new runtime: every kernel compiles again)
    got, g = _run(True, args)
    assert g.unfused == 0 and g.launches == (1, 1)
    for w, o in zip(want, got):
        np.testing.assert_array_equal(o, w)


def _pool_steps(spec, arch, batch, runs, optimizer="sgd"):
    """SGD+momentum (or Adam) steps at ``batch`` from a device pool, the loss summed as the trainer sums it:
    ``runs`` lists how many steps each ``train_steps`` call is asked for (1: ``train_step``). Returns the
    weights, the loss sum, the net and the steps each call ran."""
    from nncore.bench import device_pool
    from nncore.kernels.data import gather_rows
    from nncore.kernels.loss import loss_accumulate
    from nncore.optim import Adam

    runtime.ensure(arch)
    rng = np.random.default_rng(11)
    n_out = Sequential.from_spec(spec).out_shape[0]
    x = rng.random((batch * 16 + 5, *spec["input"]), dtype=np.float32)  # (the same pool whatever the runs)
    y = rng.integers(0, n_out, len(x)).astype(np.int32)
    xs, ys, order = device_pool(x.reshape(len(x), -1), y)
    net = Sequential.from_spec(spec, seed=3)
    net.graphs = G.StepGraphs(coop_on=True, coop_after=0)
    opt = SGD(net.n_params, lr=0.05, momentum=0.9) if optimizer == "sgd" else Adam(net.n_params, lr=0.01)
    ws = net.workspace(batch)
    acc, bad = nd(np.zeros(1, np.float32)), nd(np.zeros(1, np.int32))
    step, ran = 0, []
    for k in runs:
        s0, step0 = step * batch, step + 1
        if k == 1:
            net.train_step(ws, opt, gather=lambda: gather_rows(ws.x, ws.labels, xs, ys, order, s0),
                           after=lambda: loss_accumulate(acc, bad, ws.losses, float(batch), step0))
            ran.append(1)
        else:
            ran.append(net.train_steps(
                ws, opt, k, deltas={"start": batch, "step": 1},
                gather=lambda i: lambda: gather_rows(ws.x, ws.labels, xs, ys, order, s0 + i * batch),
                after=lambda i: lambda: loss_accumulate(acc, bad, ws.losses, float(batch), step0 + i)))
        step += ran[-1]
    return net.state_dict(), float(acc.to_numpy()[0]), net, ran


ODD_1H = {"input": [50], "layers": [{"type": "Linear", "out_features": 37}, {"type": "ReLU"},
                                    {"type": "Linear", "out_features": 7}], "loss": "cross_entropy"}


@pytest.mark.parametrize("arch", ["cpu-serial", "cpu-parallel"])
@pytest.mark.parametrize("name", ["odd-1h", "net-1h"])
def test_steps_in_one_launch_equal_steps_one_by_one(arch, name):
    """``train_steps``: k steps as one cooperative launch (the batch start and the step number advanced inside
    the kernel) give the weights and the summed loss of k ``train_step`` calls, to the bit, on one thread and
    on two; the launches did run several steps each."""
    spec = {"odd-1h": ODD_1H}.get(name) or workload_model(name)
    w1, l1, _, _ = _pool_steps(spec, arch, 33, [1] * 12)
    wk, lk, net, ran = _pool_steps(spec, arch, 33, [1, 5, 4, 2])
    assert ran == [1, 5, 4, 2] and net.graphs.multi_steps == 11, (ran, net.graphs.multi_steps)
    assert net.graphs.trying()  # (three calls of the trial's first block so far)
    assert l1 == lk and l1 > 0
    for key in w1:
        np.testing.assert_array_equal(wk[key], w1[key], err_msg=key)
    assert not np.array_equal(w1[next(iter(w1))], Sequential.from_spec(spec, seed=3).state_dict()[next(iter(w1))])


def test_a_step_of_two_kernels_runs_one_at_a_time():
    """A step whose arguments take two cooperative kernels (over graph.MAX_ARGS) cannot loop inside one:
    ``train_steps`` runs one step at a time, with ``train_step``'s result."""
    w1, l1, _, _ = _pool_steps(ODD_MLP, "cpu-parallel", 33, [1, 1, 1])
    wk, lk, net, ran = _pool_steps(ODD_MLP, "cpu-parallel", 33, [3, 3, 3])
    assert ran == [1, 1, 1] and net.graphs.multi_steps == 0 and net.graphs.launches[1] == 2
    assert l1 == lk
    for key in w1:
        np.testing.assert_array_equal(wk[key], w1[key], err_msg=key)


def test_steps_whose_numbers_change_run_one_at_a_time():
    """Adam's step takes new bias corrections every step, so ``train_steps`` runs one step and says so; the
    result is ``train_step``'s."""
    w1, l1, _, _ = _pool_steps(ODD_1H, "cpu-parallel", 33, [1, 1], optimizer="adam")
    wk, lk, net, ran = _pool_steps(ODD_1H, "cpu-parallel", 33, [2, 2], optimizer="adam")
    assert ran == [1, 1] and net.graphs.multi_steps == 0
    for key in w1:
        np.testing.assert_array_equal(wk[key], w1[key], err_msg=key)


@pytest.mark.parametrize("arch", ["cpu-serial", "cpu-parallel"])
def test_a_training_run_with_steps_in_one_launch(arch, monkeypatch):
    """The trainer runs its plain steps between loss reads and timed steps as runs in one launch: net-1h's
    epoch ends with the weights, losses, accuracy and Step events of the run that launches every step alone."""
    from nncore import network as N
    from nncore import train as T
    from nncore.config import load_config

    monkeypatch.setattr(G, "COOP_AFTER", 0)
    cfg = load_config("net-1h").override("train", arch=arch, epochs=1)
    ends = []
    for most in (1, N.STEPS_A_LAUNCH):
        monkeypatch.setattr(N, "STEPS_A_LAUNCH", most)
        events = []
        trainer = T.Trainer(cfg, emit=events.append)
        end = trainer.run()
        steps = [(e.step, e.loss) for e in events if type(e).__name__ == "Step"]
        ends.append((end, trainer.net.params_to_read().to_numpy(), steps, trainer.net.graphs.multi_steps))
    (one, w_one, s_one, m_one), (many, w_many, s_many, m_many) = ends
    assert m_one == 0 and m_many >= 20, (m_one, m_many, one.steps)  # (a trial runs single steps too)
    np.testing.assert_array_equal(w_many, w_one)
    assert (many.test_acc, many.test_loss, many.steps) == (one.test_acc, one.test_loss, one.steps)
    assert s_many == s_one and len(s_one) >= 10


@pytest.mark.parametrize("several_faster", [True, False])
def test_the_faster_of_single_steps_and_steps_in_one_launch_runs(several_faster):
    """``graph._MultiTrial``: alternating blocks, then the lower mean time a step wins for RUN steps, then a new
    trial; a slow outlier (a step that met a page fault) does not decide it."""
    t = G._MultiTrial()
    fast, slow = 1.0e-3, 1.2e-3
    picks = []
    for _ in range(t.BLOCK * t.BLOCKS):
        multi = t.use_multi()
        picks.append(multi)
        per = (fast if multi == several_faster else slow) * (50.0 if len(picks) == 3 else 1.0)
        t.took(multi, per, 4 if multi else 1)
    assert picks[:t.BLOCK] == [True] * t.BLOCK and picks[t.BLOCK:2 * t.BLOCK] == [False] * t.BLOCK
    assert sum(picks) == len(picks) // 2
    assert t.multi is several_faster and t.trials == 1 and t.wins == int(several_faster)
    steps = 0
    while steps < t.RUN:
        assert t.use_multi() is several_faster
        n = 4 if several_faster else 1
        t.took(several_faster, 1e-3, n)
        steps += n
    t.use_multi()
    assert t.calls == 0  # a new trial
