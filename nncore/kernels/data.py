"""Batch assembly on the device: rows of the resident dataset picked by an index array."""
import taichi as ti

from .. import runtime
from . import F2, I1, n_elems, sized


@sized(lambda out, *_: 2 * n_elems(out))
def gather_rows(out: F2, labels_out: I1, src: F2, labels: I1, order: I1, start: ti.i32):
    # out: (B, F) f32   labels_out: (B,) i32   src: (N, F) f32   labels: (N,) i32   order: (M,) i32 sample ids
    ti.loop_config(serialize=runtime.serial)
    for b, f in out:
        out[b, f] = src[order[start + b], f]
    ti.loop_config(serialize=runtime.serial)
    for b in labels_out:
        labels_out[b] = labels[order[start + b]]
