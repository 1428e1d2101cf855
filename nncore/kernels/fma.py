"""Fused multiply-add of 16-wide f32 vectors on the CPU: ``acc += s * b`` as one instruction.

Taichi 1.7 has no FMA operation, and its CPU JIT compiles ``acc += s * b`` to a multiply and an add that it
never fuses (its target options fuse only ``llvm.fmuladd``, which Taichi does not emit, fast math or not). Two
instructions per multiply-add halve the products' ceiling (measured on one core of an AVX-512 Xeon; docs/LOG.md,
'2026-11-23: fused multiply-adds, and the PyTorch peer in its own process'). So the
multiply-add is an LLVM function (``fma.ll``, ``llvm.fma.v16f32``) whose bitcode (``fma.bc``, assembled from
it with ``llvm-as``) Taichi links into each kernel that calls it, where LLVM inlines it: the accumulators stay
in registers. Where the CPU has no FMA instruction (llvm.fma would become a library call per lane) or is not
x86-64, ``madd`` is the plain multiply and add. Either way, cpu-serial and cpu-parallel run the same code and
agree bit for bit; a fused multiply-add rounds once where the pair rounds twice.
"""
import os
import platform

from .. import runtime
from ..runtime import ti

BITCODE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fma.bc")


def _has_fma() -> bool:
    return (os.environ.get("LAYERLAB_FMA", "1") != "0" and platform.machine() in ("x86_64", "AMD64")
            and "fma" in runtime.cpu_flags())


FUSED = _has_fma() and os.path.exists(BITCODE)  # read when the kernels compile (tests may swap it)


def _bitcode(path: str):
    """Taichi's handle on linked bitcode (taichi.lang.source_builder.SourceBuilder in "bc" mode), made
    directly: SourceBuilder.from_file asks for an initialised runtime, and this module loads before one."""
    from taichi.lang.source_builder import SourceBuilder

    sb = SourceBuilder()
    sb.bc, sb.mode = path, "bc"
    return sb


_bc = _bitcode(BITCODE)


@ti.func
def madd(acc: ti.template(), s, b):
    """acc += s * b, with acc a 16-wide vector variable, s a scalar and b a 16-wide vector."""
    if ti.static(FUSED):
        _bc.nncore_fma16(acc, s, b)
    else:
        acc += s * b


@ti.func
def vmadd(acc: ti.template(), a, b):
    """acc += a * b, with acc, a and b 16-wide vectors (lane by lane)."""
    if ti.static(FUSED):
        _bc.nncore_fma16vv(acc, a, b)
    else:
        acc += a * b
