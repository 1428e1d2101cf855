"""Batch assembly on the device: rows of the resident dataset picked by an index array."""
import taichi as ti

from .. import runtime
from . import F2, I1, n_elems, on_cpu, sized
from .gemm_cpu import V


@sized(lambda out, *_: 2 * n_elems(out))
def gather_rows(out: F2, labels_out: I1, src: F2, labels: I1, order: I1, start: ti.i32):
    # out: (B, F) f32   labels_out: (B,) i32   src: (N, F) f32   labels: (N,) i32   order: (M,) i32 sample ids
    if ti.static(not on_cpu()):  # CUDA: a thread per element, neighbours on neighbours
        # (ranges over the shapes rather than struct-fors: in a static fused step, nncore.graph, the shapes are
        # constants and these loops need no serial task to compute their bounds)
        # One loop for rows and labels: each loop is a launch of its own, and the step is launch-bound at small
        # batches (a row's first thread also copies its label).
        for b, f in ti.ndrange(out.shape[0], out.shape[1]):
            r = order[start + b]
            out[b, f] = src[r, f]
            if f == 0:
                labels_out[b] = labels[r]
    else:
        # CPU: a task copies a row, 16 floats per move (per-element loops are several times slower: Taichi reloads
        # an ndarray's address after every store into another one, so each store waits on a trip through memory).
        n = out.shape[1]
        ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
        for b in range(out.shape[0]):
            r = order[start + b]
            for fb in range(n // 16):
                v = V([src[r, fb * 16 + l] for l in ti.static(range(16))])
                for l in ti.static(range(16)):
                    out[b, fb * 16 + l] = v[l]
            for f in range(n // 16 * 16, n):
                out[b, f] = src[r, f]
            labels_out[b] = labels[r]
