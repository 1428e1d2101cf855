"""``bench.plain_steps``, the setup of the scripts that time a workload's steps (scripts/step_kernels.py,
scripts/step_host_cost.py): its step trains the workload's network on the pool's batch that starts at the
sample given, and on no other."""
import numpy as np

from nncore import bench, runtime


def test_a_plain_step_trains_on_the_batch_that_starts_where_it_is_told():
    runtime.ensure("cpu-serial")
    batch, start, lr = 17, 101, 0.05
    net, step = bench.plain_steps("net-1h", batch, lr=lr)
    before = {k: v.astype(np.float64) for k, v in net.state_dict().items()}
    step(start)
    after = net.state_dict()
    # The same step by hand, in float64: net-1h is Flatten, Linear(784, 1024), Sigmoid, Linear(1024, 10),
    # Sigmoid, MSE against one-hot labels (the mean over the batch and the 10 outputs), SGD without momentum.
    lin = [k.split(".")[0] for k in before if k.endswith(".weight")]
    (w1, b1), (w2, b2) = [(before[f"{i}.weight"], before[f"{i}.bias"]) for i in lin]
    x, y = bench._data(bench.workload_model("net-1h"))

    def grads(s):
        xb = x[s:s + batch].reshape(batch, -1).astype(np.float64)
        h = 1 / (1 + np.exp(-(xb @ w1.T + b1)))
        o = 1 / (1 + np.exp(-(h @ w2.T + b2)))
        dz2 = 2 * (o - np.eye(10)[y[s:s + batch]]) / o.size * o * (1 - o)
        dz1 = dz2 @ w2 * h * (1 - h)
        return {f"{lin[0]}.weight": dz1.T @ xb, f"{lin[0]}.bias": dz1.sum(0), f"{lin[1]}.weight": dz2.T @ h,
                f"{lin[1]}.bias": dz2.sum(0)}

    for name, grad in grads(start).items():
        ulp = np.spacing(np.float32(np.abs(before[name]).max()))  # (the step is read back from float32 weights)
        np.testing.assert_allclose(after[name] - before[name], -lr * grad, rtol=2e-3, atol=2 * ulp, err_msg=name)
    # (and the batch one sample further on would have given another step)
    g1 = grads(start + 1)[f"{lin[1]}.weight"]
    assert not np.allclose(after[f"{lin[1]}.weight"] - before[f"{lin[1]}.weight"], -lr * g1, rtol=2e-3, atol=1e-8)
