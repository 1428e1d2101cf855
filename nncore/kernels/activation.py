"""Element-wise activations. Backward uses the forward output (ReLU: out > 0; sigmoid: s(1-s); tanh: 1-t^2).

NaN propagates as in PyTorch: relu(NaN) = NaN, and ReLU's backward passes the gradient where out is NaN
(PyTorch's threshold_backward zeroes only where out <= 0).

Every kernel walks its (B, N) arrays, row after row, in runs of ``chunk`` elements per task (see
``kernels.chunk``): a run may cross rows, so narrow layers (10 outputs) still make long runs.
"""
import taichi as ti

from .. import runtime
from . import F2, n_elems, sized


@ti.func
def is_nan(x):
    # On the bits: Taichi folds x != x to false, and fast math (CUDA) lets LLVM assume x == x.
    return (ti.bit_cast(x, ti.i32) & 0x7FFFFFFF) > 0x7F800000


@ti.func
def relu(x):
    # max(x, 0) keeping NaN (ti.max is LLVM's maxnum, which drops it), on the bits so fast math cannot fold the
    # test: as i32, every negative float (-0 and -inf too) is <= -inf's bits 0xFF800000; a negative NaN is above.
    return ti.select(ti.bit_cast(x, ti.i32) <= -8388608, 0.0, x)


@sized(lambda a, *_: 3 * n_elems(a))
def relu_forward(out: F2, inp: F2, chunk: ti.i32):
    # out: (B, N) f32   inp: (B, N) f32
    n = out.shape[1]
    total = out.shape[0] * n
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for t in range((total + chunk - 1) // chunk):
        b, j = (t * chunk) // n, (t * chunk) % n
        for _ in range(ti.min(chunk, total - t * chunk)):
            out[b, j] = relu(inp[b, j])
            j += 1
            if j == n:
                b, j = b + 1, 0


@sized(lambda a, *_: 3 * n_elems(a))
def relu_backward(dinp: F2, dout: F2, out: F2, chunk: ti.i32):
    # dinp: (B, N) f32   dout: (B, N) f32   out: (B, N) f32 (forward output)
    n = dinp.shape[1]
    total = dinp.shape[0] * n
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for t in range((total + chunk - 1) // chunk):
        b, j = (t * chunk) // n, (t * chunk) % n
        for _ in range(ti.min(chunk, total - t * chunk)):
            dinp[b, j] = 0.0 if out[b, j] <= 0.0 else dout[b, j]
            j += 1
            if j == n:
                b, j = b + 1, 0


@ti.func
def sigmoid(x):
    # exp of -|x| only, so it never overflows; and no branch on the sign, which random inputs mispredict half
    # the time (the branch-free form is about twice as fast on the CPU).
    e = ti.exp(-ti.abs(x))
    s = 1.0 / (1.0 + e)
    return ti.select(x >= 0.0, s, e * s)


@sized(lambda a, *_: 3 * n_elems(a))
def sigmoid_forward(out: F2, inp: F2, chunk: ti.i32):
    # out: (B, N) f32   inp: (B, N) f32
    n = out.shape[1]
    total = out.shape[0] * n
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for t in range((total + chunk - 1) // chunk):
        b, j = (t * chunk) // n, (t * chunk) % n
        for _ in range(ti.min(chunk, total - t * chunk)):
            out[b, j] = sigmoid(inp[b, j])
            j += 1
            if j == n:
                b, j = b + 1, 0


@sized(lambda a, *_: 3 * n_elems(a))
def sigmoid_backward(dinp: F2, dout: F2, out: F2, chunk: ti.i32):
    # dinp: (B, N) f32   dout: (B, N) f32   out: (B, N) f32 (forward output)
    n = dinp.shape[1]
    total = dinp.shape[0] * n
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for t in range((total + chunk - 1) // chunk):
        b, j = (t * chunk) // n, (t * chunk) % n
        for _ in range(ti.min(chunk, total - t * chunk)):
            s = out[b, j]
            dinp[b, j] = dout[b, j] * s * (1.0 - s)
            j += 1
            if j == n:
                b, j = b + 1, 0


@sized(lambda a, *_: 3 * n_elems(a))
def tanh_forward(out: F2, inp: F2, chunk: ti.i32):
    # out: (B, N) f32   inp: (B, N) f32
    n = out.shape[1]
    total = out.shape[0] * n
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for t in range((total + chunk - 1) // chunk):
        b, j = (t * chunk) // n, (t * chunk) % n
        for _ in range(ti.min(chunk, total - t * chunk)):
            out[b, j] = ti.tanh(inp[b, j])
            j += 1
            if j == n:
                b, j = b + 1, 0


@sized(lambda a, *_: 3 * n_elems(a))
def tanh_backward(dinp: F2, dout: F2, out: F2, chunk: ti.i32):
    # dinp: (B, N) f32   dout: (B, N) f32   out: (B, N) f32 (forward output)
    n = dinp.shape[1]
    total = dinp.shape[0] * n
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for t in range((total + chunk - 1) // chunk):
        b, j = (t * chunk) // n, (t * chunk) % n
        for _ in range(ti.min(chunk, total - t * chunk)):
            tv = out[b, j]
            dinp[b, j] = dout[b, j] * (1.0 - tv * tv)
            j += 1
            if j == n:
                b, j = b + 1, 0
