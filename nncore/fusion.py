"""How a network runs: its layers grouped into parts, some parts fused into one kernel pair.

A part is one layer, or a run of layers executed together. A Linear followed by ReLU, Sigmoid or Tanh runs as
one part: on CUDA one kernel each way, which halves the launches of an MLP step; on the CPU the activation runs
in the product's epilogue and its derivative in backward's staging (for Linears of 32 outputs or more, which
stage their operands). Conv2D -> ReLU -> MaxPool2D, where the conv needs no input gradient and its window and
kernel are small enough to unroll (``fusable``), runs as one fused part: the conv output is never written (one
kernel computes each pooling window's conv values and keeps the ReLU'd winner), and backward sums the weight
gradient over the winners only, on the CPU vectorised over channels, on CUDA over samples. Backward needs neither
the ReLU nor the pooling layer's own kernels. On the CPU, where Flatten and a Linear follow the fused part, it
writes its output channels-last (contiguous stores) and the Linear maps its input features to W's PyTorch
columns (``Linear.cl_c``); for a narrow Linear, as 16-wide vectors the Linear reads as such (``Linear.pooled_in``).
Per-layer timings are reported per part: a fused part is named after all of its layers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .kernels import conv_cpu as K_cpu
from .kernels import conv_cuda as K_cuda
from .kernels import on_cpu
from .kernels import gemm_cpu as K_gemm
from .kernels import gemm_cuda as K_tiled
from .layers import Conv2D, Flatten, Layer, Linear, MaxPool2D, ReLU, Sigmoid, Tanh


@dataclass
class Part:
    first: int  # index of the first layer of the part
    last: int  # index of the last layer (inclusive)
    layers: list
    fused: "ConvReluPool | None" = None
    grad_from: int | None = None  # backward reads this gradient (index into the workspace's dacts), not j + 1's
    dinp_elsewhere: bool = False  # a later part computes this part's input gradient where it uses it
    scratch_from: int | None = None  # this part also reads that part's scratch (a fused part's packed W)

    def forward(self, ws, params, packed: bool = False, loss=None) -> None:
        """``packed``: the workspace's panels of this part's W hold W as it is now (nncore.network says when),
        so the forward need not pack them (only for a part with an ``sgd_range``). ``loss`` (the network's
        Loss, where ``forms_loss``): the forward also forms the loss and its gradient into ``ws``."""
        i, j = self.first, self.last
        runner = self.fused or self.layers[0]
        kw = {"packed": True} if packed else {}
        if loss is not None:
            kw["loss"] = (ws.losses, ws.dacts[j + 1], ws.labels, loss.row)
        runner.forward(ws.acts[j + 1], ws.acts[i], params, self._scratch(ws), **kw)

    def forms_loss(self) -> bool:
        """Whether this part, the network's last, can form the loss in its forward's kernel (CUDA: a Linear of
        few outputs with the split forward, ``gemm_cuda.linear_forward_split_loss``)."""
        if on_cpu() or not (self.fused is None or isinstance(self.fused, LinearAct)):
            return False
        lin = self._linear()
        return isinstance(lin, Linear) and K_tiled.use_split_k(lin.in_features, lin.out_features)

    def backward(self, ws, params, dparams, need_dinp: bool, sgd=None, panels_only: bool = False,
                 tail=None) -> None:
        """``sgd`` (optim.SGD.fused()): where ``sgd_range`` is not None, W gets SGD's step instead of its
        gradient (the optimizer then skips that range); ``panels_only``: the new W goes to the workspace's W
        panels alone (``sync_weight`` copies it back to params). ``tail`` (optim.SGD.fused(), where
        ``takes_sgd_tail``): this part's backward is the step's last kernel and runs SGD's step on every
        parameter."""
        i, j = self.first, self.last
        runner = self.fused or self.layers[0]
        dout = ws.dacts[j + 1 if self.grad_from is None else self.grad_from]
        kw = {"sgd": sgd, "panels_only": panels_only} if sgd is not None and self.sgd_range() is not None else {}
        if tail is not None:
            kw["tail"] = tail
        runner.backward(ws.dacts[i], dparams, dout, ws.acts[i], ws.acts[j + 1], params, self._scratch(ws),
                        need_dinp and not self.dinp_elsewhere, **kw)

    def _scratch(self, ws) -> dict:
        if self.scratch_from is None:
            return ws.scratch[self.first]
        return {**ws.scratch[self.scratch_from], **ws.scratch[self.first]}

    def out_buffer(self, batch: int) -> tuple | None:
        """The (dtype, shape) of this part's output buffer where it is not (batch, features) f32."""
        return self.fused.out_buffer(batch) if isinstance(self.fused, (ConvReluPool, LinearAct)) else None

    def _linear(self):
        runner = self.fused or self.layers[0]
        return runner.linear if isinstance(runner, LinearAct) else runner

    def has_panels(self) -> bool:
        """Whether this part keeps W in the workspace as panels that a step's SGD updates (``pack_weight``): an
        ``sgd_range``'s staged Linear; the pooled Linear packs its W at every forward."""
        return self.sgd_range() is not None and not self._linear().pooled_in

    def pack_weight(self, ws, params) -> None:
        """Pack W from params into the workspace's W panels (what the forward does when not ``packed``)."""
        lin = self._linear()
        K_gemm.weight_panels(ws.scratch[self.first]["wt"], params, lin.offsets["weight"], lin.out_features, lin.cl_c)

    def sync_weight(self, ws, params) -> None:
        """Copy W back to params from the workspace's W panels, where a ``panels_only`` step left it."""
        lin = self._linear()
        K_gemm.weight_from_panels(params, ws.scratch[self.first]["wt"], lin.offsets["weight"], lin.out_features,
                                  lin.cl_c)

    def takes_sgd_tail(self) -> bool:
        """Whether this part's backward can end a step with SGD's whole step (CUDA: a tiled Linear's weight
        gradient, its W and b side by side in the parameter buffer; ``linear_dweight_tiled``'s tail)."""
        lin = self._linear()
        if on_cpu() or not isinstance(lin, Linear) or not K_tiled.use_tiled(lin.in_features, lin.out_features):
            return False
        w, b = lin.offsets["weight"], lin.offsets["bias"]
        return b == w + lin.in_features * lin.out_features

    def sgd_range(self) -> tuple[int, int] | None:
        """The (lo, hi) range of the parameter buffer, a Linear's W, to which backward can apply SGD's step as
        it forms the gradient; None where it cannot. Not for a Linear whose W another part reads from params in
        backward (its input gradient computed elsewhere), which leaves the narrow Linear after a fused conv part:
        that part reads W as the vectors this Linear's forward packed."""
        lin = self._linear()
        if not isinstance(lin, Linear) or (self.dinp_elsewhere and not lin.pooled_in) or not lin.applies_sgd():
            return None
        lo = lin.offsets["weight"]
        return lo, lo + lin.out_features * lin.in_features

    def scratch_shapes(self, batch: int, need_dinp: bool) -> dict:
        return (self.fused or self.layers[0]).scratch_shapes(batch, need_dinp and not self.dinp_elsewhere)

    @property
    def name(self) -> str:
        if self.first == self.last:
            return f"layer {self.first} ({self.layers[0].kind})"
        return f"layers {self.first}-{self.last} ({'+'.join(l.kind for l in self.layers)})"


PARTIAL_BLOCKS = 8  # blocks of samples whose weight-gradient sums run in parallel, then add up
# The fused kernels unroll a pooling window's positions, and each position's kernel taps, at compile time: a
# 12 x 12 window or an 11 x 11 kernel took minutes to compile, so beyond these bounds the layers run one by one.
# (The CPU's winners, positions in their window, fit 8 bits.)
MAX_WINDOW, MAX_UNROLLED = 16, 144  # window positions; window positions x kernel taps


def fusable(conv: Conv2D, pool: MaxPool2D) -> bool:
    """Whether Conv2D -> ReLU -> MaxPool2D of these sizes compiles in reasonable time as one fused part."""
    window = math.prod(pool.kernel)
    return window <= MAX_WINDOW and window * math.prod(conv.kernel) <= MAX_UNROLLED


class ConvReluPool:
    """Conv2D -> ReLU -> MaxPool2D, for a conv that needs no input gradient (nothing with parameters before it):
    forward computes each pooling window's conv values in registers, vectorised over channels, and stores only
    the ReLU'd winner and where it was; backward sums the weight and bias gradients over the winners
    (nncore.kernels.conv_cpu). Neither the conv output nor its gradient is ever stored."""

    def __init__(self, conv: Conv2D, pool: MaxPool2D, channels_last: bool = False, linear: Linear | None = None):
        self.conv, self.pool = conv, pool
        self.blocks = -(-conv.out_channels // K_cpu.L)
        self.taps = conv.c * conv.kernel[0] * conv.kernel[1]
        # The pooled output written channels-last, for a Linear that reads it so (set by ``plan``); ``linear``:
        # that Linear, when it is narrow and this part computes its input gradient from the gradient at its
        # output (its Part has dinp_elsewhere, this one grad_from). The output is then 16-wide vectors the
        # Linear reads as such (``Linear.pooled_in``), and W packed by that Linear's forward into this part's
        # scratch serves this part's backward.
        self.channels_last, self.linear = channels_last, linear

    def out_buffer(self, batch: int) -> tuple | None:
        if self.linear is None:
            return None
        _, ph, pw = self.pool.out_shape
        return "v16", (batch, ph * pw, self.blocks)

    def to_channel_major(self, a):
        """A host copy of this part's output (B, features) in PyTorch's (C, H, W) order."""
        if not self.channels_last:
            return a
        _, ph, pw = self.pool.out_shape
        if a.ndim == 4:  # vectors (B, PH*PW, OCB, 16): the channels past OC dropped
            a = a.reshape(len(a), ph * pw, -1)[:, :, :self.conv.out_channels]
        return a.reshape(len(a), ph * pw, -1).transpose(0, 2, 1).reshape(len(a), -1)

    def scratch_shapes(self, batch: int, need_dinp: bool) -> dict:
        c, (_, ph, pw) = self.conv, self.pool.out_shape
        shapes = {"argmax": ("vi8", (batch, ph * pw, self.blocks)), "wv": ("v16", (self.taps + 1, self.blocks)),
                  "part": ("v16", (min(batch, PARTIAL_BLOCKS), self.taps + 1, self.blocks)),
                  "wc": ("v16", (ph * pw, self.linear.out_features, self.blocks) if self.linear else (1, 1, 1))}
        if self.linear:  # (the narrow Linear's weight gradient, summed by halves of the batch: linear_dweight_pooled)
            shapes["half"] = ("v16", (K_cpu.HALVES, *shapes["wc"][1]))
        if any(c.padding):  # the input with its padding written out; without padding the kernels read the input
            shapes["xp"] = ("f32", (batch, c.c * (c.h + 2 * c.padding[0]) * (c.w + 2 * c.padding[1])))
        return shapes

    def winners(self, arg):
        """A host copy of the winners (B, PH*PW, OCB, 16) as MaxPool2D's own argmax, (B, OC*PH*PW), each the flat
        index (oc*OH + oy)*OW + ox in the conv output of its sample, -1 kept."""
        (n_oc, oh, ow), (_, ph, pw) = self.conv.out_shape, self.pool.out_shape
        qw, (qsh, qsw) = self.pool.kernel[1], self.pool.stride
        arg = arg.reshape(len(arg), ph * pw, -1)[:, :, :n_oc].astype(np.int64)
        py, px = np.divmod(np.arange(ph * pw), pw)
        oy = py[None, :, None] * qsh + arg // qw
        ox = px[None, :, None] * qsw + arg % qw
        flat = (np.arange(n_oc)[None, None, :] * oh + oy) * ow + ox
        flat = np.where(arg >= 0, flat, -1)
        return flat.transpose(0, 2, 1).reshape(len(arg), -1)

    def _geometry(self):
        c, p = self.conv, self.pool
        return (c.out_channels, c.c, c.h + 2 * c.padding[0], c.w + 2 * c.padding[1], *c.kernel, *c.stride,
                *c.out_shape[1:], *p.kernel, *p.stride)

    def forward(self, out, inp, params, scratch) -> None:
        conv = self.conv
        K_cpu.pack_weights(scratch["wv"], params, conv.offsets["weight"], conv.offsets["bias"], conv.out_channels)
        if "xp" in scratch:
            K_cpu.pad_input(scratch["xp"], inp, conv.c, conv.h, conv.w, *conv.padding)
        K_cpu.conv_relu_pool_forward_cl(out, scratch["argmax"], scratch.get("xp", inp), scratch["wv"],
                                        *self._geometry(), 2 if self.linear is not None else self.channels_last,
                                        K_cpu.blocks_together(self.blocks, self.pool.kernel[0] * self.pool.kernel[1],
                                                              K_cpu.budget()["forward"]))

    def backward(self, dinp, dparams, dout, inp, out, params, scratch, need_dinp: bool) -> None:
        conv = self.conv
        K_cpu.conv_relu_pool_dweight_cl(scratch["part"], dout, scratch["wc"], scratch["argmax"],
                                        scratch.get("xp", inp), *self._geometry(), self.channels_last,
                                        self.linear is not None,
                                        K_cpu.blocks_together(self.blocks, self.taps // self.conv.c + 1,
                                                              K_cpu.budget()["dweight"],
                                                              scratch["part"].shape[0] * self.conv.c))
        K_cpu.dweight_reduce(dparams, scratch["part"], conv.offsets["weight"], conv.offsets["bias"],
                             conv.out_channels)


class ConvReluPoolCUDA:
    """Conv2D -> ReLU -> MaxPool2D on CUDA, for a conv that needs no input gradient: one kernel computes the
    pooled winners of the ReLU'd conv; backward sums the weight and bias gradients over the winners only
    (nncore.kernels.conv_cuda), with neither the conv's output nor its gradient ever stored."""

    def __init__(self, conv: Conv2D, pool: MaxPool2D):
        self.conv, self.pool = conv, pool
        self.n_grads = conv.out_channels * (conv.c * conv.kernel[0] * conv.kernel[1] + 1)

    def scratch_shapes(self, batch: int, need_dinp: bool) -> dict:
        return {"argmax": ("i32", (batch, math.prod(self.pool.out_shape))),
                "part": ("f32", (K_cuda.chunks(batch), self.n_grads))}

    def forward(self, out, inp, params, scratch) -> None:
        conv = self.conv
        K_cuda.conv_relu_pool_forward(out, scratch["argmax"], inp, params, conv.offsets["weight"],
                                      conv.offsets["bias"], *conv._geometry(), *self.pool.kernel,
                                      *self.pool.stride)

    def backward(self, dinp, dparams, dout, inp, out, params, scratch, need_dinp: bool) -> None:
        conv = self.conv
        K_cuda.conv_relu_pool_dweight(dparams, scratch["part"], dout, out, scratch["argmax"], inp,
                                      conv.offsets["weight"], conv.offsets["bias"], *conv._geometry())


class LinearAct:
    """Linear followed by ReLU, Sigmoid or Tanh. CUDA: one kernel forward, one backward (fewer launches). CPU
    (where the Linear stages its operands, ``K_gemm.staging_pays``): the activation runs in the product's
    epilogue on the tile's vectors and its derivative in the staging of backward's operands, so neither the
    pre-activation nor its gradient makes a pass through memory."""

    KINDS = {ReLU: 1, Sigmoid: 2, Tanh: 3}

    def __init__(self, linear: Linear, act: Layer, nxt: Linear | None = None):
        # nxt: the narrow Linear right after the activation, on the CPU, when this part needs no input gradient:
        # this part forms the gradient at its output from the gradient at nxt's output as it stages its own
        # (K_gemm.stage_dz_from), so nxt's input gradient is never computed on its own (its Part has
        # dinp_elsewhere, this one grad_from); nxt's weight gradient is summed there too, from the same strips
        # of this part's output (nxt.dweight_elsewhere).
        self.linear, self.kind, self.nxt = linear, self.KINDS[type(act)], nxt

    def scratch_shapes(self, batch: int, need_dinp: bool) -> dict:
        return self.linear.scratch_shapes(batch, need_dinp)  # (CUDA: the split gradients' partial sums, if any)

    def out_buffer(self, batch: int) -> tuple | None:
        """The output as strips of vectors where a narrow Linear reads it (Linear.strips_out)."""
        if not self.linear.strips_out:
            return None
        return "v16", K_gemm.strips_shape(batch, self.linear.out_features)

    def to_rows(self, a):
        """A host copy of this part's output as (B, features), from its strips where it is kept so."""
        if not self.linear.strips_out:
            return a
        return a.transpose(1, 0, 2).reshape(a.shape[1], -1)[:, :self.linear.out_features]

    def forward(self, out, inp, params, scratch, packed: bool = False, loss=None) -> None:
        lin = self.linear
        if on_cpu():
            return lin.forward(out, inp, params, scratch, self.kind, packed)
        K_tiled.linear_forward_gpu(out, inp, params, lin.offsets["weight"], lin.offsets["bias"], self.kind, loss,
                                   scratch.get("kpart"))

    def backward(self, dinp, dparams, dout, inp, out, params, scratch, need_dinp: bool, sgd=None,
                 panels_only: bool = False, tail=None) -> None:
        lin, nxt = self.linear, self.nxt
        if on_cpu():
            return lin.backward(dinp, dparams, dout, inp, out, params, scratch, need_dinp, self.kind,
                                nxt.offsets["weight"] if nxt is not None else None, sgd, panels_only)
        K_tiled.linear_backward_gpu(dinp, dparams, dout, inp, out, params, lin.offsets["weight"], lin.offsets["bias"],
                                    need_dinp, self.kind, scratch.get("dpartial"), tail, scratch.get("kpart"))


def plan(layers: list[Layer], need_dinp: list[bool], fuse: bool = True) -> list[Part]:
    """Group the layers into parts; fuse where the backend has a fused kernel for the pattern (nothing is fused
    with ``fuse`` False). On the CPU, a fused conv part followed by Flatten and a Linear hands the Linear its
    output channels-last (``Linear.cl_c``)."""
    parts, i, cpu = [], 0, on_cpu()
    for layer in layers:
        if isinstance(layer, Linear):
            layer.cl_c, layer.pooled_in, layer.dweight_elsewhere = 0, False, False
            layer.strips_in = layer.strips_out = False
    if not fuse:
        return [Part(i, i, [layer]) for i, layer in enumerate(layers)]
    elsewhere = set()  # layers whose input gradient an earlier part computes
    pooled = {}  # narrow Linears that read a fused part's vectors: the index of that part's first layer
    while i < len(layers):
        trio = layers[i:i + 3]
        if (len(trio) == 3 and isinstance(trio[0], Conv2D) and isinstance(trio[1], ReLU)
                and isinstance(trio[2], MaxPool2D) and not need_dinp[i] and fusable(trio[0], trio[2])):
            grad_from = None
            if cpu:
                after = layers[i + 3:i + 5]
                cl = len(after) == 2 and isinstance(after[0], Flatten) and isinstance(after[1], Linear)
                if cl:
                    after[1].cl_c = trio[0].out_channels
                # A narrow Linear (the seed cnn's 10,816 -> 10): its input gradient, the pooled gradient, is
                # computed inside the part's weight gradient from the gradient at the Linear's output.
                narrow = cl and not K_gemm.staging_pays(after[1].out_features)
                if narrow:
                    elsewhere.add(i + 4)
                    grad_from = i + 5
                    pooled[i + 4] = i
                    after[1].pooled_in = True
                fused = ConvReluPool(trio[0], trio[2], channels_last=cl, linear=after[1] if narrow else None)
            else:
                fused = ConvReluPoolCUDA(trio[0], trio[2])
            parts.append(Part(i, i + 2, trio, fused, grad_from=grad_from))
            i += 3
        elif (len(trio) >= 2 and isinstance(trio[0], Linear) and type(trio[1]) in LinearAct.KINDS
              and (not cpu or K_gemm.staging_pays(trio[0].out_features))):
            # net-1h's 784 -> 1024 + Sigmoid, then 1,024 -> 10: the narrow Linear's input gradient is formed
            # where it is used, in this part's staging (B x 1,024 floats neither written nor read back).
            nxt = trio[2] if len(trio) == 3 else None
            narrow_next = (cpu and not need_dinp[i] and isinstance(nxt, Linear)
                           and not K_gemm.staging_pays(nxt.out_features))
            if narrow_next:
                elsewhere.add(i + 2)
                nxt.dweight_elsewhere = nxt.strips_in = trio[0].strips_out = True
            parts.append(Part(i, i + 1, trio[:2], LinearAct(trio[0], trio[1], nxt if narrow_next else None),
                              grad_from=i + 3 if narrow_next else None))
            i += 2
        else:
            parts.append(Part(i, i, [layers[i]], dinp_elsewhere=i in elsewhere, scratch_from=pooled.get(i)))
            i += 1
    return parts
