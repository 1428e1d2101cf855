"""Sequential: shape inference, ConfigError messages, whole-network gradients, buffers, arch moves."""
import math

import numpy as np
import pytest

from nncore import runtime
from nncore.errors import ConfigError, StaleBufferError
from nncore.network import Sequential
from nncore.optim import SGD, Adam
from tests.conftest import rel_err
from tests.nncore import reference as R

CNN = [{"type": "Conv2D", "out_channels": 3, "kernel_size": 3, "padding": 1, "stride": 2},
       {"type": "Tanh"}, {"type": "MaxPool2D", "kernel_size": 2, "stride": 1}, {"type": "Flatten"},
       {"type": "Linear", "out_features": 6}, {"type": "ReLU"}, {"type": "Linear", "out_features": 4}]
CNN_INPUT = [2, 7, 9]


def test_shapes_params_and_flops(cpu):
    net = Sequential(CNN, CNN_INPUT, "cross_entropy")
    shapes = [layer.out_shape for layer in net.layers]
    assert shapes == [(3, 4, 5), (3, 4, 5), (3, 3, 4), (36,), (6,), (6,), (4,)]
    rows = net.summary(batch=10)
    assert [r["params"] for r in rows] == [3 * 2 * 9 + 3, 0, 0, 0, 36 * 6 + 6, 0, 6 * 4 + 4]
    assert net.n_params == sum(r["params"] for r in rows)
    conv_mac = 10 * 3 * 4 * 5 * 2 * 9  # outputs x (C * KH * KW)
    assert rows[0]["flops_fwd"] == 2 * conv_mac + 10 * 60
    assert rows[0]["flops_bwd"] == 2 * conv_mac + 10 * 60  # first layer: no input gradient
    assert rows[6]["flops_fwd"] == 2 * 10 * 6 * 4 + 10 * 4
    assert rows[6]["flops_bwd"] == 4 * 10 * 6 * 4 + 10 * 4
    assert list(net.param_names()) == ["0.weight", "0.bias", "4.weight", "4.bias", "6.weight", "6.bias"]


@pytest.mark.parametrize("layers,input_shape,loss,needle", [
    ([{"type": "Dense", "out_features": 3}], [4], None, "layer 0: unknown type 'Dense'"),
    ([{"type": "ReLU"}, {"type": "Linear", "out_features": 0}], [4], None, "layer 1 (Linear): out_features 0"),
    ([{"type": "Linear", "out_features": -2}], [4], None, "layer 0 (Linear): out_features -2"),
    ([{"type": "Linear", "out_features": 3, "in_features": 5}], [4], None, "layer 0 (Linear): in_features 5"),
    ([{"type": "Conv2D", "out_channels": 2, "kernel_size": 5}], [1, 3, 3], None, "layer 0 (Conv2D): kernel_size 5"),
    ([{"type": "Conv2D", "out_channels": 2, "kernel_size": 3}, {"type": "MaxPool2D", "kernel_size": 4}],
     [1, 5, 5], None, "layer 1 (MaxPool2D): kernel_size 4 is larger than the input height 3"),
    ([{"type": "Conv2D", "out_channels": 2, "kernel_size": 3}, {"type": "Linear", "out_features": 3}],
     [1, 5, 5], None, "layer 1 (Linear): input shape (2, 3, 3) is not flat"),
    ([{"type": "Linear", "out_features": 3}, {"type": "Conv2D", "out_channels": 1, "kernel_size": 1}],
     [4], None, "layer 1 (Conv2D): input shape (3,)"),
    ([{"type": "Conv2D", "out_channels": 2, "kernel_size": 3, "stride": 0}], [1, 5, 5], None,
     "layer 0 (Conv2D): stride 0"),
    ([{"type": "Conv2D", "out_channels": 2, "kernel_size": 3, "padding": -1}], [1, 5, 5], None,
     "layer 0 (Conv2D): padding -1"),
    ([{"type": "Conv2D", "out_channels": 2, "kernel": 3}], [1, 5, 5], None, "layer 0 (Conv2D): unknown parameter 'kernel'"),
    ([{"type": "Conv2D", "kernel_size": 3}], [1, 5, 5], None, "layer 0 (Conv2D): missing parameter 'out_channels'"),
    ([{"type": "Conv2D", "out_channels": 2, "kernel_size": "3x2"}], [1, 5, 5], None,  # (the app field's form)
     "layer 0 (Conv2D): kernel_size '3x2' must be an integer or a pair of integers, e.g. 3 or [3, 2]"),
    ([{"type": "Linear", "out_features": 2.5}], [4], None, "layer 0 (Linear): out_features 2.5"),
    ([{"type": "Linear", "out_features": 1}], [4], "cross_entropy", "loss cross_entropy needs at least 2 outputs"),
    ([{"type": "Conv2D", "out_channels": 2, "kernel_size": 1}], [1, 3, 3], "mse", "loss mse needs a flat output"),
    ([{"type": "Linear", "out_features": 2}], [4], "hinge", "loss 'hinge' is unknown"),
    ([{"type": "Linear", "out_features": 2}], [0], None, "input [0]"),
    ([], [4], None, "layers must be a non-empty list"),
    (["Linear"], [4], None, "layer 0: expected a table"),
])
def test_invalid_specs_name_the_culprit(cpu, layers, input_shape, loss, needle):
    with pytest.raises(ConfigError) as err:
        Sequential(layers, input_shape, loss)
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def _reference_loss(net, state, x, y):
    """The whole network in float64 NumPy, from the same weights."""
    a = x.reshape(len(x), *net.input_shape).astype(np.float64)
    for i, layer in enumerate(net.layers):
        w, b = state.get(f"{i}.weight"), state.get(f"{i}.bias")
        if layer.kind == "Conv2D":
            a = R.conv2d(a, w, b, layer.stride, layer.padding)
        elif layer.kind == "MaxPool2D":
            a = R.maxpool2d(a, layer.kernel, layer.stride)
        elif layer.kind == "Flatten":
            a = a.reshape(len(a), -1)
        elif layer.kind == "Linear":
            a = R.linear(a, w, b)
        else:
            a = {"ReLU": R.relu, "Tanh": np.tanh, "Sigmoid": R.sigmoid}[layer.kind](a)
    return {"cross_entropy": R.cross_entropy, "mse": R.mse, "bce": R.bce_logits}[net.loss.name](a, y)[0]


def _check_against_finite_differences(net, x, y):
    """One forward/backward on (x, y): loss and every parameter's gradient against the float64 reference."""
    state = {k: v.astype(np.float64) for k, v in net.state_dict().items()}
    ws = net.workspace(len(x))
    ws.load(x, y)
    net.forward(ws)
    net.loss_grad(ws)
    net.backward(ws)
    x32 = x.astype(np.float32)
    assert rel_err(ws.loss_value(), _reference_loss(net, state, x32, y)) < 1e-5
    grads = net.grads.to_numpy()
    for name, w in state.items():
        layer = net.layers[int(name.split(".")[0])]
        off = layer.offsets[name.split(".")[1]]
        fd = R.central_diff(lambda v, name=name: _reference_loss(net, {**state, name: v}, x32, y), w)
        assert rel_err(grads[off:off + w.size].reshape(w.shape), fd) < 2e-4, name


@pytest.mark.parametrize("loss", ["cross_entropy", "mse", "bce"])
def test_network_gradients_match_finite_differences(arch, rng, loss):
    net = Sequential(CNN, CNN_INPUT, loss, seed=3)
    _check_against_finite_differences(net, rng.normal(size=(5, math.prod(CNN_INPUT))), rng.integers(0, 4, size=5))


def test_wide_mlp_gradients_match_finite_differences(arch, rng):
    """Linear layers on both sides of the CPU's staging threshold (31 and 3 outputs read their activations
    directly, 32 and 33 stage them), batch 17 (a partial 16-row panel), each followed by an activation."""
    layers = [{"type": "Linear", "out_features": 33}, {"type": "Tanh"}, {"type": "Linear", "out_features": 31},
              {"type": "ReLU"}, {"type": "Linear", "out_features": 32}, {"type": "Sigmoid"},
              {"type": "Linear", "out_features": 3}]
    net = Sequential(layers, [19], "cross_entropy", seed=5)
    _check_against_finite_differences(net, rng.normal(size=(17, 19)), rng.integers(0, 3, size=17))


@pytest.mark.parametrize("arch", ["cpu-serial", "cpu-parallel"])
def test_narrow_linear_input_gradient_formed_where_used(arch, rng):
    """net-1h's shape, small and odd (a Linear of 37 outputs + Sigmoid, then one of 7 + Sigmoid, MSE): on the CPU
    the first part forms the gradient at its output from the narrow Linear's output gradient (the narrow part
    computes no input gradient); gradients match finite differences and the plan without fusion."""
    from nncore import fusion

    runtime.ensure(arch)
    layers = [{"type": "Flatten"}, {"type": "Linear", "out_features": 37}, {"type": "Sigmoid"},
              {"type": "Linear", "out_features": 7}, {"type": "Sigmoid"}]
    x, y = rng.normal(size=(21, 25)), rng.integers(0, 7, size=21)
    net = Sequential(layers, [1, 5, 5], "mse", seed=4)
    assert [(p.first, p.grad_from, p.dinp_elsewhere) for p in net.parts][1:3] == [(1, 4, False), (3, None, True)]
    _check_against_finite_differences(net, x, y)
    grads = net.grads.to_numpy().copy()
    plain = Sequential(layers, [1, 5, 5], "mse", seed=4)
    plain.parts = fusion.plan(plain.layers, plain.need_dinp, fuse=False)
    ws = plain.workspace(21)
    ws.load(x, y)
    plain.forward(ws)
    plain.loss_grad(ws)
    plain.backward(ws)
    assert rel_err(grads, plain.grads.to_numpy()) < 1e-5
    # The wide Linear's output, kept as strips of vectors between it and the narrow one: the same activations.
    fused_ws = net.workspace(21)
    fused_ws.load(x, y)
    net.forward(fused_ws)
    assert fused_ws.acts[3].shape == (3, 21)  # (ceil(37 / 16) strips, the batch)
    assert rel_err(net.parts[1].fused.to_rows(fused_ws.acts[3].to_numpy()), ws.acts[3].to_numpy()) < 1e-6


def _nbytes(arr) -> int:
    return int(np.prod(arr.shape)) * 4 * (arr.n if hasattr(arr, "n") else 1)


@pytest.mark.parametrize("layers,input_shape", [
    ([{"type": "Linear", "out_features": 4096}, {"type": "ReLU"}, {"type": "Linear", "out_features": 2}], [1]),
    ([{"type": "Linear", "out_features": 2}, {"type": "ReLU"}, {"type": "Linear", "out_features": 4096}], [1]),
    ([{"type": "Linear", "out_features": 33}, {"type": "ReLU"}, {"type": "Linear", "out_features": 1000}], [17]),
    (CNN, CNN_INPUT)])
@pytest.mark.parametrize("batch", [1, 17, 256])
def test_workspace_estimate_bounds_what_is_allocated(cpu, layers, input_shape, batch):
    """The memory guard's estimate is an upper bound of every buffer a workspace allocates, and not a wild one."""
    net = Sequential(layers, input_shape, "mse" if len(input_shape) == 1 else "cross_entropy")
    ws = net.workspace(batch)
    arrays = ws.acts + ws.dacts + [a for d in ws.scratch for a in d.values()] + [ws.labels, ws.losses,
                                                                                 ws.loss_out, ws.correct]
    allocated = sum(_nbytes(a) for a in {id(a): a for a in arrays if a is not None}.values())
    assert allocated <= net.workspace_bytes(batch) <= 3 * allocated


def _one_step(arch, x, y, opt_cls, **opt_args):
    runtime.init(arch)
    net = Sequential(CNN, CNN_INPUT, "cross_entropy", seed=11)
    opt = opt_cls(net.n_params, **opt_args)
    ws = net.workspace(len(x))
    ws.load(x, y)
    net.train_step(ws, opt)
    return net.state_dict()


@pytest.mark.parametrize("opt_cls,args", [(SGD, {"lr": 0.1, "momentum": 0.9}), (Adam, {"lr": 0.01})])
def test_serial_and_parallel_steps_agree(rng, opt_cls, args):
    x, y = rng.normal(size=(33, math.prod(CNN_INPUT))), rng.integers(0, 4, size=33)
    serial = _one_step("cpu-serial", x, y, opt_cls, **args)
    parallel = _one_step("cpu-parallel", x, y, opt_cls, **args)
    assert runtime.current().threads == runtime.cpu_count()
    for k in serial:
        assert rel_err(parallel[k], serial[k]) < 1e-6, k


@pytest.mark.parametrize("wide", [False, True])
def test_serial_and_parallel_mlp_steps_agree_bit_for_bit(rng, wide, monkeypatch):
    """Three SGD steps with momentum of an MLP whose widths take partial tiles, on one thread and on all: the
    same weights bit for bit (each output of a product is summed by one register tile, in one order, whichever
    thread runs it). wide: the long batch's register tiles and the forward's tasks by rows
    (gemm_cpu.tile_cols), whose task count follows the threads."""
    if wide:
        monkeypatch.setattr("nncore.kernels.gemm_cpu.WIDE_BATCH", 1)
    batches = [(rng.normal(size=(37, 29)), rng.integers(0, 5, size=37)) for _ in range(3)]
    got = []
    for arch in ("cpu-serial", "cpu-parallel"):
        runtime.init(arch)
        net = Sequential(MLP_ODD, [29], "cross_entropy", seed=4)
        opt = SGD(net.n_params, lr=0.1, momentum=0.9)
        ws = net.workspace(37)
        for x, y in batches:
            ws.load(x, y)
            net.train_step(ws, opt)
        got.append(net.state_dict())
    assert all(np.array_equal(got[0][k], got[1][k]) for k in got[0])
    start = Sequential(MLP_ODD, [29], "cross_entropy", seed=4).state_dict()
    assert all(not np.array_equal(got[0][k], start[k]) for k in start if k.endswith("weight"))


def test_same_seed_same_weights_on_every_arch():
    runtime.init("cpu-serial")
    a = Sequential(CNN, CNN_INPUT, seed=5).state_dict()
    runtime.init("cpu-parallel")
    b = Sequential(CNN, CNN_INPUT, seed=5).state_dict()
    c = Sequential(CNN, CNN_INPUT, seed=6).state_dict()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["0.weight"], c["0.weight"])


def test_init_schemes(cpu):
    net = Sequential([{"type": "Linear", "out_features": 400}, {"type": "ReLU"},
                      {"type": "Linear", "out_features": 300}, {"type": "Sigmoid"}], [500], seed=0)
    s = net.state_dict()
    assert abs(s["0.weight"].std() - math.sqrt(2 / 500)) < 0.02 * math.sqrt(2 / 500)  # He before ReLU
    bound = math.sqrt(6 / (400 + 300))  # Xavier-uniform otherwise
    assert s["2.weight"].max() <= bound and s["2.weight"].max() > 0.95 * bound
    assert not s["0.bias"].any()


def test_move_between_archs_keeps_weights_and_optimizer_state(rng):
    runtime.init("cpu-serial")
    net = Sequential(CNN, CNN_INPUT, "cross_entropy", seed=2)
    opt = SGD(net.n_params, lr=0.05, momentum=0.9)
    x, y = rng.normal(size=(8, math.prod(CNN_INPUT))), rng.integers(0, 4, size=8)
    ws = net.workspace(8)
    ws.load(x, y)
    net.train_step(ws, opt)
    before, vel = net.state_dict(), opt.state_dict()
    net.to("cpu-parallel", optimizer=opt)
    assert runtime.current().arch == "cpu-parallel"
    after = net.state_dict()
    assert all(np.array_equal(before[k], after[k]) for k in before)
    assert np.array_equal(opt.state_dict()["velocity"], vel["velocity"])
    ws = net.workspace(8)
    ws.load(x, y)
    net.train_step(ws, opt)  # works on the new runtime
    assert np.isfinite(ws.loss_value())


def test_stale_network_is_refused_not_crashed():
    runtime.init("cpu-parallel")
    net = Sequential(CNN, CNN_INPUT, "cross_entropy")
    runtime.init("cpu-parallel")
    with pytest.raises(StaleBufferError, match="re-initialised"):
        net.workspace(4)


def test_training_step_allocates_nothing_and_copies_nothing(cpu, rng, monkeypatch):
    net = Sequential(CNN, CNN_INPUT, "cross_entropy")
    opt = Adam(net.n_params, lr=0.01)
    ws = net.workspace(9)
    ws.load(rng.normal(size=(9, math.prod(CNN_INPUT))), rng.integers(0, 4, size=9))
    net.train_step(ws, opt)
    calls = []
    nd_cls = type(ws.x)
    monkeypatch.setattr(runtime.ti, "ndarray", lambda *a, **k: calls.append("ndarray"))
    for name in ("to_numpy", "from_numpy", "fill"):
        monkeypatch.setattr(nd_cls, name, lambda *a, _n=name, **k: calls.append(_n))
    for _ in range(3):
        net.train_step(ws, opt)
        assert net.workspace(9) is ws
    assert calls == []


def test_no_input_gradient_before_the_first_parameters(cpu, rng):
    layers = [{"type": "Flatten"}, {"type": "ReLU"}, {"type": "Linear", "out_features": 3}, {"type": "Tanh"},
              {"type": "Linear", "out_features": 2}]
    net = Sequential(layers, [1, 3, 4], "mse", seed=1)
    assert net.need_dinp == [False, False, False, True, True]
    rows = net.summary(batch=5)
    assert rows[2]["flops_bwd"] == 2 * 5 * 12 * 3 + 5 * 3  # weight and bias gradients only
    x, y = rng.normal(size=(5, 12)), rng.integers(0, 2, size=5)
    state = {k: v.astype(np.float64) for k, v in net.state_dict().items()}
    ws = net.workspace(5)
    ws.load(x, y)
    net.forward(ws)
    net.loss_grad(ws)
    net.backward(ws)
    fd = R.central_diff(lambda w: _reference_loss(net, {**state, "2.weight": w}, x.astype(np.float32), y),
                        state["2.weight"])
    off = net.layers[2].offsets["weight"]
    assert rel_err(net.grads.to_numpy()[off:off + 36].reshape(3, 12), fd) < 2e-4
    assert np.array_equal(ws.acts[0].to_numpy(), x.astype(np.float32))  # the input is never written


FUSED = [{"type": "Conv2D", "out_channels": 3, "kernel_size": 3, "padding": 1},
         {"type": "Tanh"},
         {"type": "Conv2D", "out_channels": 4, "kernel_size": [2, 3], "stride": [1, 2], "padding": [1, 0]},
         {"type": "ReLU"}, {"type": "MaxPool2D", "kernel_size": 3, "stride": 2},  # overlapping windows
         {"type": "Flatten"}, {"type": "Linear", "out_features": 5}]


@pytest.mark.parametrize("spec,fused", [(FUSED, []), (FUSED[2:], [(0, 2)]),
                                        ([dict(FUSED[0], out_channels=21)] + FUSED[3:], [(0, 2)])])
def test_fused_conv_relu_pool_matches_finite_differences(arch, rng, spec, fused):
    """Conv2D -> ReLU -> MaxPool2D runs fused where the conv gives no input gradient (a channel count that is
    not a multiple of 16 included); elsewhere the layers run one by one."""
    net = Sequential(spec, [2, 9, 11], "cross_entropy", seed=7)
    assert [(p.first, p.last) for p in net.parts if p.fused is not None] == fused
    _check_against_finite_differences(net, rng.normal(size=(6, 2 * 9 * 11)), rng.integers(0, 5, size=6))


@pytest.mark.parametrize("spec,shape", [
    ([{"type": "Conv2D", "out_channels": 3, "kernel_size": 2}, {"type": "ReLU"},
      {"type": "MaxPool2D", "kernel_size": 5, "stride": 2}, {"type": "Flatten"}, {"type": "Linear", "out_features": 4}],
     [2, 9, 8]),  # a window of 25 positions
    ([{"type": "Conv2D", "out_channels": 3, "kernel_size": [6, 7]}, {"type": "ReLU"},
      {"type": "MaxPool2D", "kernel_size": 2}, {"type": "Flatten"}, {"type": "Linear", "out_features": 4}],
     [1, 11, 12])])  # 42 taps in each of 4 window positions
def test_large_windows_and_kernels_run_unfused(arch, rng, spec, shape):
    """The fused part unrolls each pooling window's positions and their kernel taps at compile time, so windows
    of more than 16 positions, or more than 144 positions x taps, run as separate layers (still matching finite
    differences); one size smaller stays fused."""
    from nncore import fusion

    net = Sequential(spec, shape, "cross_entropy", seed=3)
    assert all(p.fused is None for p in net.parts)
    conv, pool = net.layers[0], net.layers[2]
    assert not fusion.fusable(conv, pool)
    smaller = [dict(spec[0], kernel_size=[5, 7]) if pool.kernel == (2, 2) else spec[0], spec[1],
               dict(spec[2], kernel_size=4) if pool.kernel != (2, 2) else spec[2]] + spec[3:]
    assert Sequential(smaller, shape, "cross_entropy").parts[0].fused is not None
    _check_against_finite_differences(net, rng.normal(size=(5, math.prod(shape))), rng.integers(0, 4, size=5))


def _pooled(net, ws) -> np.ndarray:
    """The pooled output in PyTorch's (C, H, W) order, whatever layout the network keeps it in."""
    out = ws.acts[3].to_numpy()
    fused = net.parts[0].fused
    return fused.to_channel_major(out) if hasattr(fused, "to_channel_major") else out


def _winners(net, ws, fused: bool) -> np.ndarray:
    """The pooling winners as MaxPool2D's own argmax, (B, OC*PH*PW), with -1 where the pooled value is 0 (no
    gradient passes there, whichever position is kept). The CPU's fused part keeps them channels-last in
    16-wide vectors, as positions in their windows, already -1 where the value is 0."""
    arg = ws.scratch[0 if fused else 2]["argmax"].to_numpy()
    out = _pooled(net, ws)
    if arg.ndim == 4:  # (B, PH*PW, OCB, 16)
        arg = net.parts[0].fused.winners(arg)
    return np.where(out > 0, arg, -1)


ONE_BY_ONE = [
    (FUSED[2:], [2, 9, 11]),  # stride, padding, overlapping 3x3 windows of stride 2; 8 pooled outputs a channel
    ([{"type": "Conv2D", "out_channels": 7, "kernel_size": 3}, {"type": "ReLU"},
      {"type": "MaxPool2D", "kernel_size": 2}, {"type": "Flatten"}, {"type": "Linear", "out_features": 5}],
     [1, 12, 13]),  # the seed cnn's pattern; 25 pooled outputs a channel: six steps of four and one left over
    ([{"type": "Conv2D", "out_channels": 19, "kernel_size": 3, "padding": 1}, {"type": "ReLU"},
      {"type": "MaxPool2D", "kernel_size": 2, "stride": 3}, {"type": "Flatten"},
      {"type": "Linear", "out_features": 3}],
     [3, 8, 7]),  # two blocks of 16 channels, the second partial; windows that skip conv positions
    ([{"type": "Conv2D", "out_channels": 50, "kernel_size": 3}, {"type": "ReLU"},
      {"type": "MaxPool2D", "kernel_size": 2}, {"type": "Flatten"}, {"type": "Linear", "out_features": 3}],
     [2, 8, 9]),  # four blocks of 16 channels (the last partial), computed together; two input channels
    ([{"type": "Conv2D", "out_channels": 40, "kernel_size": 2, "padding": 1}, {"type": "ReLU"},
      {"type": "MaxPool2D", "kernel_size": 2}, {"type": "Flatten"}, {"type": "Linear", "out_features": 4}],
     [1, 7, 6]),  # three blocks: one at a time
    ([{"type": "Conv2D", "out_channels": 33, "kernel_size": 3}, {"type": "ReLU"},
      {"type": "MaxPool2D", "kernel_size": 2}, {"type": "Flatten"}, {"type": "Linear", "out_features": 25}],
     [1, 12, 13]),  # the narrow Linear's 25 outputs in three tasks' groups (the last partial), 25 positions
    ([{"type": "Conv2D", "out_channels": 32, "kernel_size": 3}, {"type": "ReLU"},
      {"type": "MaxPool2D", "kernel_size": 2}, {"type": "Flatten"}, {"type": "Linear", "out_features": 14}],
     [2, 9, 8]),  # two channel blocks a weight-gradient task, 14 outputs in two groups
    ([{"type": "Conv2D", "out_channels": 7, "kernel_size": 3}, {"type": "ReLU"},
      {"type": "MaxPool2D", "kernel_size": 2}, {"type": "Flatten"}, {"type": "Linear", "out_features": 40},
      {"type": "ReLU"}, {"type": "Linear", "out_features": 3}],
     [1, 12, 13])]  # a wide Linear after the part: staged, its input channels-last, its own input gradient


@pytest.mark.parametrize("arch", ["cpu-serial", "cpu-parallel", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("spec,shape", ONE_BY_ONE)
def test_fused_conv_relu_pool_equals_the_layers_one_by_one(arch, rng, spec, shape):
    """The fused part against Conv2D, ReLU and MaxPool2D run as separate layers (the fusion turned off), with
    a batch of 9 (one group of eight in the final sums and one left over): the same pooled output, the same
    winners, and weight and bias gradients equal to float32 rounding; twice the same bits."""
    _fused_against_one_by_one(arch, rng, spec, shape)


@pytest.mark.parametrize("spec,shape", ONE_BY_ONE)
def test_fused_part_with_the_other_cpus_register_budget(rng, spec, shape, monkeypatch):
    """The same on the CPU with the register budget of the other vector width (AVX-512's on an AVX2 machine
    and the reverse: more or fewer channel blocks, rows and outputs a task), so both are checked anywhere."""
    from nncore.kernels import conv_cpu

    monkeypatch.setattr(conv_cpu, "WIDE", not conv_cpu.WIDE)
    _fused_against_one_by_one("cpu-parallel", rng, spec, shape)


def _fused_against_one_by_one(arch, rng, spec, shape):
    from nncore import fusion

    runtime.ensure(arch)
    n_in = math.prod(shape)
    # Inputs and conv weights on a grid of eighths: every conv value is exact in float32, so both paths see the
    # same values and pick the same winners, exact ties (ReLU's zeros) included.
    x, y = rng.integers(-8, 9, size=(9, n_in)) / 8, rng.integers(0, 3, size=9)
    state = Sequential(spec, shape, "cross_entropy", seed=5).state_dict()
    state["0.weight"] = rng.integers(-4, 5, size=state["0.weight"].shape) / 8
    state["0.bias"] = rng.integers(-4, 5, size=state["0.bias"].shape) / 8
    results = []
    for fuse in (True, True, False):
        net = Sequential(spec, shape, "cross_entropy", seed=5)
        net.load_state_dict(state)
        if fuse:
            assert net.parts[0].fused is not None
        else:
            net.parts = fusion.plan(net.layers, net.need_dinp, fuse=False)
            net._workspaces.clear()
        ws = net.workspace(9)
        ws.load(x, y)
        net.forward(ws)
        net.loss_grad(ws)
        net.backward(ws)
        results.append((_pooled(net, ws), _winners(net, ws, fuse), net.grads.to_numpy()))
    (out1, arg1, g1), (out2, arg2, g2), (out0, arg0, g0) = results
    assert np.array_equal(out1, out2) and np.array_equal(g1, g2)  # no atomics: the same bits every run
    assert (out1 > 0).any()
    assert rel_err(out1, out0) < 1e-6 and np.array_equal(arg1, arg0)
    assert rel_err(g1, g0) < 1e-5


MLP_ODD = [{"type": "Linear", "out_features": 50}, {"type": "Sigmoid"}, {"type": "Linear", "out_features": 37},
           {"type": "ReLU"}, {"type": "Linear", "out_features": 45}, {"type": "Linear", "out_features": 5}]
# A wide Linear after a fused conv part: its input arrives channels-last (Linear.cl_c).
CNN_WIDE = [{"type": "Conv2D", "out_channels": 5, "kernel_size": 3}, {"type": "ReLU"},
            {"type": "MaxPool2D", "kernel_size": 2}, {"type": "Flatten"}, {"type": "Linear", "out_features": 40},
            {"type": "Tanh"}, {"type": "Linear", "out_features": 5}]


# Each kernel variant (one thread, the pool, in place, the long batch's tiles) with momentum and weight decay
# and without, though not every pairing: the first and the last variant take both.
_PLAIN, _MOMENTUM = (0.0, 0.0), (0.9, 0.01)


@pytest.mark.parametrize("arch,pool,wide,momentum,weight_decay", [
    ("cpu-serial", False, False, *_PLAIN), ("cpu-serial", False, False, *_MOMENTUM),
    ("cpu-parallel", False, False, *_MOMENTUM), ("cpu-parallel", True, False, *_PLAIN),
    ("cpu-serial", False, True, *_MOMENTUM), ("cpu-parallel", True, True, *_PLAIN),
    ("cpu-parallel", True, True, *_MOMENTUM)])
@pytest.mark.parametrize("layers,shape,applied", [(MLP_ODD, [29], [True, True, True, False]),
                                                  (CNN_WIDE, [2, 9, 11], [False, False, True, False])])
def test_sgd_applied_in_backward_equals_the_optimizer_step(arch, pool, rng, momentum, weight_decay, layers, shape,
                                                           applied, wide, monkeypatch):
    # train_step applies SGD to the CPU's wide Linears as it forms their weight gradient (Part.sgd_range); the
    # weights and velocity after 3 steps must equal backward then SGD.step bit for bit. Widths 50 and 37 take
    # partial tiles; the MLP's second Linear needs its input gradient (read from W before W is stepped), the
    # last Linear is narrow (its gradient goes through the optimizer); the CNN's wide Linear reads its input
    # channels-last. pool: every kernel in its thread-pool variant (small calls otherwise run in place). wide:
    # the long batch's register tiles and forward by rows (gemm_cpu.tile_cols) at this batch of 33.
    if pool:
        monkeypatch.setattr("nncore.kernels.IN_PLACE_NS", 0)
    if wide:
        monkeypatch.setattr("nncore.kernels.gemm_cpu.WIDE_BATCH", 1)
    runtime.init(arch)
    net = Sequential(layers, shape, "cross_entropy", seed=3)
    assert [p.sgd_range() is not None for p in net.parts] == applied
    if layers is CNN_WIDE:
        assert net.layers[4].cl_c == 5
    _fused_sgd_equals_backward_then_step(layers, shape, 5, momentum, weight_decay, rng)


def _fused_sgd_equals_backward_then_step(layers, shape, n_classes, momentum, weight_decay, rng):
    """3 steps at batch 33 of train_step (SGD fused where it applies) and of forward, backward and SGD.step, from
    the same weights: the same weights and velocity, bit for bit, and every weight moved."""
    nets = [Sequential(layers, shape, "cross_entropy", seed=3) for _ in range(2)]
    opts = [SGD(n.n_params, lr=0.2, momentum=momentum, weight_decay=weight_decay) for n in nets]
    for _ in range(3):
        x, y = rng.normal(size=(33, math.prod(shape))), rng.integers(0, n_classes, size=33)
        for net, opt, fused in zip(nets, opts, (True, False)):
            ws = net.workspace(33)
            ws.load(x, y)
            if fused:
                net.train_step(ws, opt)
            else:
                net.forward(ws)
                net.loss_grad(ws)
                net.backward(ws)
                opt.step(net.params, net.grads)
    a, b = nets[0].state_dict(), nets[1].state_dict()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    start = Sequential(layers, shape, "cross_entropy", seed=3).state_dict()
    assert all(not np.array_equal(a[k], start[k]) for k in a if k.endswith("weight"))
    assert np.array_equal(opts[0].state_dict()["velocity"], opts[1].state_dict()["velocity"])


@pytest.mark.parametrize("arch", ["cpu-serial", "cpu-parallel"])
@pytest.mark.parametrize("layers,shape,kept,wide", [(MLP_ODD, [29], {0}, False), (CNN_WIDE, [2, 9, 11], set(), False),
                                                    (MLP_ODD, [29], {0}, True)])
def test_packed_weights_kept_between_steps(arch, rng, layers, shape, kept, wide, monkeypatch):
    # After a fused SGD step the wide Linears' W panels in that step's workspace hold the new W, and the next
    # forward on that workspace reads them without packing (Sequential._packed); a wide Linear that forms no
    # input gradient (``kept``: the MLP's first) leaves W there alone, and params' copy is brought up to date
    # only when read. Steps alternate between two batch sizes (two workspaces, so each sees W changed by the
    # other's step), an evaluation forward on a third comes between two steps, and W is overwritten through
    # ``params`` between two steps on one workspace; the reference network has every step's forward pack W
    # from params. Weights, velocity and the evaluation's logits must agree bit for bit. wide: as above.
    if wide:
        monkeypatch.setattr("nncore.kernels.gemm_cpu.WIDE_BATCH", 1)
    runtime.init(arch)
    nets = [Sequential(layers, shape, "cross_entropy", seed=5) for _ in range(2)]
    opts = [SGD(n.n_params, lr=0.1, momentum=0.9, weight_decay=0.01) for n in nets]
    used, stale = 0, set()
    for step, batch in enumerate([33, 33, 17, 33, 17, 17, 17, 33]):
        x, y = rng.normal(size=(batch, math.prod(shape))), rng.integers(0, 5, size=batch)
        if step == 6:  # a write from outside, between two steps on one workspace: W of the first wide
            # Linear scaled, in both networks
            for net in nets:
                w = net.params.to_numpy()
                w[: w.size // 3] *= 0.5
                net.params.from_numpy(w)
        if step == 2:  # an evaluation between two steps of one workspace
            xe = rng.normal(size=(5, math.prod(shape)))
            logits = [net.predict(xe) for net in nets]
            assert np.array_equal(*logits)
        for net, opt, keep in zip(nets, opts, (True, False)):
            if not keep:
                net.params  # (counts as a write: the next forward packs W again)
            ws = net.workspace(batch)
            ws.load(x, y)
            used += keep and net._packed is not None and net._packed[0] is ws
            net.train_step(ws, opt)
            if keep:
                stale |= set(net._packed[2])
        if step in (3, 7):
            a, b = nets[0].state_dict(), nets[1].state_dict()  # (state_dict reads W without counting as a write)
            assert all(np.array_equal(a[k], b[k]) for k in a), f"step {step}"
            assert np.array_equal(opts[0].state_dict()["velocity"], opts[1].state_dict()["velocity"])
    assert used == 2  # steps 1 and 5 followed a step on their workspace with nothing written in between
    assert stale == kept
    assert nets[0].graphs.built == 1  # W packed outside the step's graph: one graph for both workspaces


@pytest.mark.gpu
@pytest.mark.parametrize("loss,act", [("mse", "Sigmoid"), ("cross_entropy", "ReLU")])
def test_cuda_gradients_split_over_the_batch_equal_the_cpus(rng, loss, act):
    """An MLP whose 10-output layer's gradients are summed over the batch by several threads a weight on CUDA
    (a batch of 601: sixteen), against cpu-serial's one-chain sums: the same gradients to float32 rounding."""
    spec = [{"type": "Linear", "out_features": 37}, {"type": act}, {"type": "Linear", "out_features": 10}]
    x, y = rng.normal(size=(601, 50)), rng.integers(0, 10, size=601)
    grads = {}
    for arch in ("cpu-serial", "cuda"):
        runtime.ensure(arch)
        net = Sequential(spec, [50], loss, seed=3)
        ws = net.workspace(601)
        assert ("dpartial" in ws.scratch[net.parts[-1].first]) == (arch == "cuda")
        ws.load(x, y)
        net.forward(ws)
        net.loss_grad(ws)
        net.backward(ws)
        grads[arch] = net.grads.to_numpy()
    assert rel_err(grads["cuda"], grads["cpu-serial"]) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("batch,flat", [(33, False), (64, True), (257, False)])
@pytest.mark.parametrize("opt_kw", [{"lr": 0.05}, {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}],
                         ids=["sgd", "momentum-decay"])
def test_cuda_sgd_in_the_last_kernel_equals_the_optimizers_step(rng, batch, flat, opt_kw):
    """On CUDA the first part's tiled weight gradient, the step's last kernel, also runs SGD's step on every
    parameter (``_sgd_tail``): its own W and b as they form, the rest from their gradients; after a leading
    Flatten (no kernel) too, as the seed networks have. After 20 steps, graph and part-by-part, weights,
    velocity and gradients equal those of the same steps with the optimizer's own kernel, and cpu-serial's to
    float32 rounding; the step holds a kernel fewer."""
    spec = [{"type": "Linear", "out_features": 70}, {"type": "Sigmoid"}, {"type": "Linear", "out_features": 65},
            {"type": "ReLU"}, {"type": "Linear", "out_features": 7}]
    shape = [1, 1, 97] if flat else [97]
    spec = [{"type": "Flatten"}] * flat + spec
    data = [(rng.normal(size=(batch, *shape)), rng.integers(0, 7, size=batch)) for _ in range(20)]
    ends = {}
    for arch, tail, timed in (("cuda", True, False), ("cuda", True, True), ("cuda", False, False),
                              ("cpu-serial", False, False)):
        runtime.ensure(arch)
        net = Sequential(spec, shape, "cross_entropy", seed=3)
        if not tail:
            net._sgd_tail = lambda *a: None
        opt = SGD(net.n_params, **opt_kw)
        ws, launches = net.workspace(batch), None
        for x, y in data:
            ws.load(x, y)
            if timed:
                net.timed_step(ws, opt, gather=lambda: None)
            else:
                net.train_step(ws, opt)
        if arch == "cuda" and not timed:
            assert (net._sgd_tail(opt, None) is not None) == tail
            launches = net.graphs.launches[0]
        ends[arch, tail, timed] = (net.params.to_numpy(), opt.state_dict()["velocity"], net.grads.to_numpy(),
                                   launches, opt.steps)
    got, timed, want, cpu = (ends[k] for k in (("cuda", True, False), ("cuda", True, True), ("cuda", False, False),
                                                ("cpu-serial", False, False)))
    for a in got[:3]:
        assert np.all(np.isfinite(a))
    for ours in (got, timed):
        for a, b in zip(ours[:3], want[:3]):
            np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(got[0], cpu[0], rtol=1e-4, atol=1e-5)
    assert got[3] == want[3] - 1 and got[4] == want[4] == timed[4] == 20
    assert not np.array_equal(got[0], Sequential(spec, shape, "cross_entropy", seed=3).params.to_numpy())


@pytest.mark.gpu
@pytest.mark.parametrize("loss,act,n_out", [("cross_entropy", None, 10), ("mse", "Sigmoid", 10), ("bce", None, 1),
                                            ("bce", "Sigmoid", 16), ("cross_entropy", "ReLU", 3)])
def test_cuda_loss_in_the_last_forward_equals_the_loss_kernel(rng, loss, act, n_out):
    """On CUDA a last Linear of few outputs forms the loss in its forward's kernel (``_loss_in_forward``): after
    20 steps (batch 37, input 1,031: odd sizes), graph and part-by-part, weights and per-sample losses equal
    those of the same steps with the loss's own kernel, and cpu-serial's to float32 rounding; the step holds a
    kernel fewer."""
    spec = [{"type": "Flatten"}, {"type": "Linear", "out_features": n_out}] + ([{"type": act}] if act else [])
    data = [(rng.normal(size=(37, 1, 1, 1031)), rng.integers(0, max(n_out, 2), size=37)) for _ in range(20)]
    ends = {}
    for arch, fused, timed in (("cuda", True, False), ("cuda", True, True), ("cuda", False, False),
                               ("cpu-serial", False, False)):
        runtime.ensure(arch)
        net = Sequential(spec, [1, 1, 1031], loss, seed=3)
        if not fused:
            net._loss_in_forward = lambda batch: False
        opt = SGD(net.n_params, lr=0.1)
        ws, launches = net.workspace(37), None
        for x, y in data:
            ws.load(x, y)
            if timed:
                net.timed_step(ws, opt, gather=lambda: None)
            else:
                net.train_step(ws, opt)
        if arch == "cuda" and not timed:
            assert net._loss_in_forward(37) == fused
            launches = net.graphs.launches[0]
        ends[arch, fused, timed] = (net.params.to_numpy(), ws.losses.to_numpy(), launches)
    got, timed, want, cpu = (ends[k] for k in (("cuda", True, False), ("cuda", True, True), ("cuda", False, False),
                                                ("cpu-serial", False, False)))
    assert np.all(np.isfinite(got[0])) and np.all(got[1] != 0)
    for ours in (got, timed):
        np.testing.assert_allclose(ours[0], want[0], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(ours[1], want[1], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(got[0], cpu[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[1], cpu[1], rtol=1e-4, atol=1e-7)
    assert got[2] == want[2] - 1


def test_the_step_joins_kernels_only_where_it_pays(monkeypatch):
    """Where the GPU bounds the step, the joined kernels cost more than the task they save: SGD's tail only with
    at most SGD_TAIL_MAX_REST other parameters, the loss in the forward only up to LOSS_JOIN_MAX_BATCH samples.
    (The CUDA conditions before those, seen from the CPU: the parts are asked as on CUDA.)"""
    from nncore import fusion
    from nncore.kernels import gemm_cuda as KT

    monkeypatch.setattr(fusion, "on_cpu", lambda: False)
    small = Sequential([{"type": "Flatten"}, {"type": "Linear", "out_features": 64}, {"type": "Sigmoid"},
                        {"type": "Linear", "out_features": 10}], [1, 1, 1024], "mse", seed=0)
    wide = Sequential([{"type": "Linear", "out_features": 64}, {"type": "ReLU"},
                       {"type": "Linear", "out_features": 1100}, {"type": "ReLU"},
                       {"type": "Linear", "out_features": 10}], [1024], "cross_entropy", seed=0)
    rest = lambda net: net.n_params - 64 * 1025  # noqa: E731
    assert rest(small) <= KT.SGD_TAIL_MAX_REST < rest(wide)
    opt = SGD(small.n_params)
    assert small._sgd_tail(opt, None)[0] == 1  # past the Flatten
    assert small._sgd_tail(opt, reduce=lambda: None) is None and small._sgd_tail(Adam(small.n_params), None) is None
    assert wide._sgd_tail(SGD(wide.n_params), None) is None
    narrow = Sequential([{"type": "Linear", "out_features": 10}, {"type": "Sigmoid"}], [1100], "mse", seed=0)
    assert narrow._loss_in_forward(KT.LOSS_JOIN_MAX_BATCH)
    assert not narrow._loss_in_forward(KT.LOSS_JOIN_MAX_BATCH + 1)
    assert not small._loss_in_forward(64)  # (its last Linear has 64 inputs: no split forward)


CNN_POOLED = [{"type": "Conv2D", "out_channels": 21, "kernel_size": 3}, {"type": "ReLU"},
              {"type": "MaxPool2D", "kernel_size": 2}, {"type": "Flatten"}, {"type": "Linear", "out_features": 7}]


@pytest.mark.parametrize("arch", ["cpu-serial", "cpu-parallel"])
@pytest.mark.parametrize("momentum,weight_decay", [(0.0, 0.0), (0.9, 0.01)])
def test_sgd_applied_in_the_pooled_linears_weight_gradient(arch, rng, momentum, weight_decay):
    """The narrow Linear after a fused conv part (its input as channel vectors, kernels.conv_cpu) steps its W
    with SGD as it adds its gradient's halves; the conv part's gradient reads the W packed in the forward. After
    3 steps at batch 33 (halves of 16 and 17), weights and velocity equal backward then SGD.step bit for bit."""
    runtime.init(arch)
    net = Sequential(CNN_POOLED, [1, 12, 13], "cross_entropy", seed=3)
    assert net.layers[4].pooled_in and net.parts[-1].sgd_range() is not None
    _fused_sgd_equals_backward_then_step(CNN_POOLED, [1, 12, 13], 7, momentum, weight_decay, rng)
