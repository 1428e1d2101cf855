"""Optimizers over the network's one flat parameter buffer: one launch updates every parameter.

The loop runs as tasks of runtime.stream_run consecutive elements (a long run each on the CPU, one element
each on CUDA): see runtime.STREAM_TASK for why not one element per iteration on the CPU.

Both follow PyTorch's update rules exactly (torch.optim.SGD with dampening 0, torch.optim.Adam with L2
weight decay added to the gradient), so runs can be compared step by step.
"""
import taichi as ti

from .. import runtime
from . import F1, sized


@ti.func
def sgd_element(params: ti.template(), velocity: ti.template(), i, g, sgd: ti.template(), hyper: ti.template()):
    """SGD's step on params[i] from its gradient g (``sgd`` 2: with momentum, 1: without; ``hyper`` = (lr,
    momentum, weight decay)): torch.optim.SGD's arithmetic, in its order. sgd_step runs it over a range; on CUDA
    gemm_cuda runs it in the step's last kernel, on each parameter as its gradient forms."""
    lr, momentum, weight_decay = hyper
    g = g + weight_decay * params[i]
    if ti.static(sgd == 2):
        g = momentum * velocity[i] + g
        velocity[i] = g
    params[i] = params[i] - lr * g  # (not -=: in a parallel loop Taichi makes that an atomic)


@sized(lambda params, velocity, grads, lr, momentum, weight_decay, use_momentum, lo, hi: 2 * (hi - lo))
def sgd_step(params: F1, velocity: F1, grads: F1, lr: ti.f32, momentum: ti.f32, weight_decay: ti.f32,
             use_momentum: ti.template(), lo: ti.i32, hi: ti.i32):
    # params, velocity, grads: (P,) f32, updated at [lo, hi); velocity starts at zero, which makes step 1 equal
    # PyTorch's clone(g). Without momentum the velocity is neither read nor written (as PyTorch keeps no buffer
    # then): the step is memory-bound, and that is 12 bytes per parameter instead of 20.
    # (gemm_cpu.linear_dweight_cpu applies the same arithmetic, vectorised, to a Linear's weights as it forms
    # their gradient.)
    run = runtime.stream_run
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for t in range((hi - lo + run - 1) // run):
        for i in range(lo + t * run, ti.min(lo + t * run + run, hi)):
            sgd_element(params, velocity, i, grads[i], ti.static(2 if use_momentum else 1),
                        (lr, momentum, weight_decay))


def adam_step(params, m, v, grads, lr: float, beta1: float, beta2: float, eps: float, weight_decay: float,
              bias_c1: float, sqrt_bias_c2: float) -> None:
    """One Adam step; bias_c1 = 1 - beta1**t and sqrt_bias_c2 = sqrt(1 - beta2**t). The scalars are combined
    here in double precision, as PyTorch does: 1 - beta formed in float32 from the rounded beta is off by
    6.5e-6 relatively (1 - 0.999f = 0.00099999), and so was every update."""
    adam_update(params, m, v, grads, lr / bias_c1, 1.0 - beta1, beta2, 1.0 - beta2, eps, weight_decay, sqrt_bias_c2)


@sized(lambda params, *_: 4 * params.shape[0])
def adam_update(params: F1, m: F1, v: F1, grads: F1, step_size: ti.f32, one_m_beta1: ti.f32, beta2: ti.f32,
                one_m_beta2: ti.f32, eps: ti.f32, weight_decay: ti.f32, sqrt_bias_c2: ti.f32):
    # params, m, v, grads: (P,) f32; step_size = lr / (1 - beta1**t), one_m_beta* = 1 - beta*, from adam_step.
    # m as PyTorch's lerp, m + (1 - beta1)(g - m): its weights sum to exactly 1, where beta1 * m + (1 - beta1) * g
    # with both rounded to f32 does not (0.9f + 0.1f < 1) and shrinks every update.
    n, run = params.shape[0], runtime.stream_run
    ti.loop_config(block_dim=runtime.coarse_block, serialize=runtime.serial)
    for t in range((n + run - 1) // run):
        for i in range(t * run, ti.min(t * run + run, n)):
            g = grads[i] + weight_decay * params[i]
            mi = m[i] + one_m_beta1 * (g - m[i])
            vi = beta2 * v[i] + one_m_beta2 * g * g
            m[i] = mi
            v[i] = vi
            params[i] = params[i] - step_size * mi / (ti.sqrt(vi) / sqrt_bias_c2 + eps)
