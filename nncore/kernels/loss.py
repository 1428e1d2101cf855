"""Losses fused with their gradient: one launch writes each sample's loss share and d(loss)/d(logits).

Targets are integer labels. Softmax cross-entropy uses them as class indices. Binary cross-entropy and MSE
use them as the target value when the output has one column, and as a one-hot row otherwise. The
reduction is PyTorch's default ``mean``: over samples for cross-entropy, over all elements for the others.
``losses[b]`` holds sample b's share of the mean, so the batch loss is their sum (see ``loss_sum``).
"""
import taichi as ti

from .. import runtime
from . import F1, F2, I1, kernel, n_elems, sized
from .activation import sigmoid


@ti.func
def _target(y: ti.i32, j: ti.i32, k: ti.i32) -> ti.f32:
    t = 0.0
    if k == 1:
        t = ti.cast(y, ti.f32)
    elif y == j:
        t = 1.0
    return t


@ti.func
def _log1p(z: ti.f32) -> ti.f32:
    # log(1 + z) for z >= 0, to a few ulps, never through log near 1 (CUDA's fast-math log is off by ~2^-22
    # absolute there, a large relative error for small z): 2 atanh(s), s = z / (2 + z) <= 1/3, by its series
    # to s^13 for z <= 1; log(1 + z) above. NaN gives NaN.
    s = z / (2.0 + z)
    s2 = s * s
    series = 2.0 * s * (1.0 + s2 * (1.0 / 3.0 + s2 * (0.2 + s2 * (1.0 / 7.0 + s2 * (1.0 / 9.0 + s2 * (
        1.0 / 11.0 + s2 * (1.0 / 13.0)))))))
    return ti.select(z <= 1.0, series, ti.log(1.0 + z))


# Each loss is a row function (one sample: its loss share and its gradient row) and a kernel looping it over the
# batch; nncore.kernels.gemm_cuda.linear_forward_split_loss calls the row functions where the last Linear's
# forward forms the loss in the same loop.
@ti.func
def xent_row(losses: ti.template(), dlogits: ti.template(), logits: ti.template(), labels: ti.template(), b):
    # Relative to the max m, never through m + log(s): that sum rounds to ulp(m), which swamps log(s) and the
    # probabilities once logits are large (1e7). x - m is <= 0 or -inf, so exp gives no inf or NaN. e = s - 1
    # is summed without the max's own term, so log(s) = log1p(e) keeps the loss's precision when one class
    # dominates. A NaN first logit stays the max (nothing is > NaN), so NaN anywhere gives a NaN loss.
    n_b, k = logits.shape[0], logits.shape[1]
    m, jm = logits[b, 0], 0
    for j in range(1, k):
        take = logits[b, j] > m
        m = ti.select(take, logits[b, j], m)
        jm = ti.select(take, j, jm)
    e = 0.0
    for j in range(k):
        e += ti.select(j == jm, 0.0, ti.exp(logits[b, j] - m))
    y = labels[b]
    losses[b] = ((m - logits[b, y]) + _log1p(e)) / n_b
    for j in range(k):
        p = ti.exp(logits[b, j] - m) / (1.0 + e)
        dlogits[b, j] = (p - (1.0 if j == y else 0.0)) / n_b


@ti.func
def bce_row(losses: ti.template(), dlogits: ti.template(), logits: ti.template(), labels: ti.template(), b):
    n_b, k = logits.shape[0], logits.shape[1]
    scale = 1.0 / (n_b * k)
    acc = 0.0
    for j in range(k):
        x = logits[b, j]
        t = _target(labels[b], j, k)
        # max(x,0) - x*t + log1p(exp(-|x|)): finite for every x, and exact to rounding where the first
        # terms cancel (x = 20, t = 1: not 0).
        acc += ti.max(x, 0.0) - x * t + _log1p(ti.exp(-ti.abs(x)))
        dlogits[b, j] = (sigmoid(x) - t) * scale
    losses[b] = acc * scale


@ti.func
def mse_row(losses: ti.template(), dlogits: ti.template(), logits: ti.template(), labels: ti.template(), b):
    n_b, k = logits.shape[0], logits.shape[1]
    scale = 1.0 / (n_b * k)
    acc = 0.0
    for j in range(k):
        d = logits[b, j] - _target(labels[b], j, k)
        acc += d * d
        dlogits[b, j] = 2.0 * d * scale
    losses[b] = acc * scale


@sized(lambda losses, dlogits, logits, labels: 10 * n_elems(logits))
def softmax_xent_forward_backward(losses: F1, dlogits: F2, logits: F2, labels: I1):
    # losses: (B,) f32   dlogits: (B, K) f32   logits: (B, K) f32   labels: (B,) i32 in [0, K)
    ti.loop_config(serialize=runtime.serial)
    for b in range(logits.shape[0]):
        xent_row(losses, dlogits, logits, labels, b)


@sized(lambda losses, dlogits, logits, labels: 10 * n_elems(logits))
def bce_logits_forward_backward(losses: F1, dlogits: F2, logits: F2, labels: I1):
    # losses: (B,) f32   dlogits: (B, K) f32   logits: (B, K) f32   labels: (B,) i32
    ti.loop_config(serialize=runtime.serial)
    for b in range(logits.shape[0]):
        bce_row(losses, dlogits, logits, labels, b)


@sized(lambda losses, dlogits, logits, labels: 3 * n_elems(logits))
def mse_forward_backward(losses: F1, dlogits: F2, logits: F2, labels: I1):
    # losses: (B,) f32   dlogits: (B, K) f32   logits: (B, K) f32   labels: (B,) i32
    ti.loop_config(serialize=runtime.serial)
    for b in range(logits.shape[0]):
        mse_row(losses, dlogits, logits, labels, b)


ROWS = {"softmax_xent_forward_backward": xent_row, "bce_logits_forward_backward": bce_row,
        "mse_forward_backward": mse_row}


@kernel
def loss_sum(out: F1, losses: F1):
    # out: (1,) f32   losses: (B,) f32 -- summed serially so the result does not depend on threads
    ti.loop_config(serialize=True)
    for _ in range(1):
        acc = 0.0
        for b in range(losses.shape[0]):
            acc += losses[b]
        out[0] = acc


@sized(lambda out, logits, labels: 2 * n_elems(logits))
def count_correct(out: I1, logits: F2, labels: I1):
    # out: (1,) i32   logits: (B, K) f32   labels: (B,) i32 -- argmax for K > 1, logit > 0 for K == 1
    k = logits.shape[1]
    ti.loop_config(serialize=runtime.serial)
    for b in range(logits.shape[0]):
        pred = 0
        if k == 1:
            pred = 1 if logits[b, 0] > 0.0 else 0
        else:
            best = logits[b, 0]
            for j in range(1, k):
                if logits[b, j] > best:
                    best = logits[b, j]
                    pred = j
        if pred == labels[b]:
            ti.atomic_add(out[0], 1)


@ti.func
def _finite(x: ti.f32) -> ti.i32:
    # Exponent bits all ones means inf or NaN; a bit test survives fast-math, which may drop isnan checks.
    return (ti.bit_cast(x, ti.i32) & 0x7F800000) != 0x7F800000


@kernel
def loss_accumulate(acc: F1, bad_step: I1, losses: F1, weight: ti.f32, step: ti.i32):
    # acc: (1,) f32 += weight * batch loss   bad_step: (1,) i32, set to `step` at the first non-finite loss
    # losses: (B,) f32 per-sample shares of the batch's mean loss
    ti.loop_config(serialize=True)
    for _ in range(1):
        s = 0.0
        for b in range(losses.shape[0]):
            s += losses[b]
        acc[0] += s * weight
        if not _finite(s) and bad_step[0] == 0:
            bad_step[0] = step


@sized(lambda bad_step, values, step: values.shape[0])
def check_finite(bad_step: I1, values: F1, step: ti.i32):
    # bad_step: (1,) i32 set to `step` when any of values: (P,) f32 is inf or NaN (and no earlier step was)
    ti.loop_config(serialize=runtime.serial)
    for i in values:
        if not _finite(values[i]) and bad_step[0] == 0:
            bad_step[0] = step  # every writer writes the same value: the race is harmless
