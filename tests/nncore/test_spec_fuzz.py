"""Random valid and invalid network specs: valid ones train one step to a finite loss, invalid ones raise a
ConfigError naming the first bad layer's index, as predicted by an independent shape oracle."""
import math
import os
import re

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from nncore import runtime
from nncore.errors import ConfigError
from nncore.network import Sequential
from nncore.optim import SGD

small = st.integers(-1, 6)

layer_st = st.one_of(
    st.builds(lambda n: {"type": "Linear", "out_features": n}, st.integers(-1, 24)),
    st.sampled_from([{"type": "ReLU"}, {"type": "Sigmoid"}, {"type": "Tanh"}, {"type": "Flatten"},
                     {"type": "Softmax"}]),
    st.builds(lambda oc, k, s, p: {"type": "Conv2D", "out_channels": oc, "kernel_size": k, "stride": s,
                                   "padding": p}, st.integers(0, 5), small, st.integers(0, 3), st.integers(-1, 2)),
    st.builds(lambda k, s: {"type": "MaxPool2D", "kernel_size": k, **({} if s is None else {"stride": s})},
              st.integers(0, 4), st.none() | st.integers(0, 3)),
)
input_st = st.one_of(st.tuples(st.integers(1, 12)), st.tuples(st.integers(1, 3), st.integers(1, 10), st.integers(1, 10)))


def first_bad_layer(layers, shape):
    """Index of the first invalid layer (None if all are valid), computed without nncore."""
    for i, l in enumerate(layers):
        t = l["type"]
        if t == "Linear":
            if l["out_features"] < 1 or len(shape) != 1:
                return i
            shape = (l["out_features"],)
        elif t == "Flatten":
            shape = (math.prod(shape),)
        elif t in ("Conv2D", "MaxPool2D"):
            k = l["kernel_size"]
            s = l.get("stride", k)
            p = l.get("padding", 0)
            oc = l.get("out_channels", shape[0] if len(shape) == 3 else 1)
            if len(shape) != 3 or min(k, s, oc) < 1 or p < 0:
                return i
            c, h, w = shape
            if h + 2 * p < k or w + 2 * p < k:
                return i
            shape = (oc, (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1)
        elif t not in ("ReLU", "Sigmoid", "Tanh"):
            return i
    return None


@settings(max_examples=150 * int(os.environ.get("LAYERLAB_FUZZ_SCALE", "1")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(layers=st.lists(layer_st, min_size=1, max_size=6), input_shape=input_st, seed=st.integers(0, 2**31))
def test_random_specs(layers, input_shape, seed):
    runtime.ensure("cpu-parallel")
    spec = layers + [{"type": "Flatten"}, {"type": "Linear", "out_features": 3}]
    bad = first_bad_layer(layers, input_shape)
    try:
        net = Sequential(spec, list(input_shape), "cross_entropy", seed=seed % 1000)
    except ConfigError as err:
        event("invalid")
        msg = str(err)
        assert bad is not None, f"valid spec refused: {msg}"
        assert re.match(rf"layer {bad}\b", msg), msg
        assert "\n" not in msg
        return
    event("valid")
    assert bad is None, f"layer {bad} should have been refused"
    rng = np.random.default_rng(seed)
    ws = net.workspace(3)
    ws.load(rng.normal(size=(3, math.prod(input_shape))), rng.integers(0, 3, size=3))
    net.train_step(ws, SGD(net.n_params, lr=0.01))
    assert math.isfinite(ws.loss_value())
    assert np.all(np.isfinite(net.params.to_numpy()))
