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
    monkeypatch.delenv("LAYERLAB_CUDA_GRAPHS", raising=False)
    assert CG.enabled()
    monkeypatch.setenv("LAYERLAB_CUDA_GRAPHS", "0")
    assert not CG.enabled()
