"""Taichi kernels, one module per layer family, forward and backward side by side.

Conventions (llm.c style): outputs first, gradients prefixed ``d``, a shape comment on every array.
Activations are kept flat, ``(B, features)``, whatever the layer's logical shape; conv and pool kernels take
their geometry as scalars. Parameters and their gradients live in one flat f32 buffer per network; a layer
finds its weight and bias by offset, so the optimizer updates every parameter in one launch.

Only the outermost loop of a kernel runs in parallel. Reductions (bias and weight gradients) loop in
parallel over the output element and reduce serially inside: no atomics, so results do not depend on the
number of threads.
"""
from .. import runtime
from ..runtime import ti  # noqa: F401  (makes sure Taichi is imported with nncore's settings)

f32 = ti.f32
i32 = ti.i32
F1 = ti.types.ndarray(dtype=ti.f32, ndim=1)
F2 = ti.types.ndarray(dtype=ti.f32, ndim=2)
I1 = ti.types.ndarray(dtype=ti.i32, ndim=1)
I2 = ti.types.ndarray(dtype=ti.i32, ndim=2)


def chunk() -> int:
    """Elements per thread in element-wise and sliding-window kernels.

    CPU: long runs per thread, so the index decomposition (an integer division) happens once per run rather
    than once per element, and a thread walks memory contiguously. CUDA: one element per thread, so
    neighbouring threads touch neighbouring addresses (coalesced).
    """
    cur = runtime.current()
    return 1 if cur is not None and cur.arch == "cuda" else 4096


def on_cpu() -> bool:
    cur = runtime.current()
    return cur is None or cur.arch != "cuda"
