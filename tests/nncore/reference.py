"""Float64 NumPy references for every kernel, written independently of the Taichi code (no shared helpers).

Layouts follow PyTorch: activations (B, C, H, W) or (B, N); Linear weight (OUT, IN); Conv2d weight
(OC, C, KH, KW). Losses use PyTorch's default mean reduction.
"""
import numpy as np


def linear(x, w, b):
    return x @ w.T + b


def linear_grads(x, w, dout):
    return dout @ w, dout.T @ x, dout.sum(0)


def relu(x):
    return np.maximum(x, 0)


def sigmoid(x):
    e = np.exp(-np.abs(x))  # no overflow, and no cancellation where it saturates (1 + tanh would lose 1 - s)
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def conv2d(x, w, b, stride, pad):
    (sh, sw), (ph, pw) = stride, pad
    n, c, h, wd = x.shape
    oc, _, kh, kw = w.shape
    xp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
    xp[:, :, ph:ph + h, pw:pw + wd] = x
    oh, ow = (h + 2 * ph - kh) // sh + 1, (wd + 2 * pw - kw) // sw + 1
    out = np.zeros((n, oc, oh, ow))
    for y in range(oh):
        for z in range(ow):
            patch = xp[:, :, y * sh:y * sh + kh, z * sw:z * sw + kw]
            out[:, :, y, z] = np.einsum("nckl,ockl->no", patch, w)
    return out + b[None, :, None, None]


def conv2d_grads(x, w, dout, stride, pad):
    (sh, sw), (ph, pw) = stride, pad
    n, c, h, wd = x.shape
    _, _, kh, kw = w.shape
    xp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
    xp[:, :, ph:ph + h, pw:pw + wd] = x
    dxp = np.zeros_like(xp)
    dw = np.zeros_like(w)
    for y in range(dout.shape[2]):
        for z in range(dout.shape[3]):
            patch = xp[:, :, y * sh:y * sh + kh, z * sw:z * sw + kw]
            g = dout[:, :, y, z]
            dw += np.einsum("no,nckl->ockl", g, patch)
            dxp[:, :, y * sh:y * sh + kh, z * sw:z * sw + kw] += np.einsum("no,ockl->nckl", g, w)
    return dxp[:, :, ph:ph + h, pw:pw + wd], dw, dout.sum((0, 2, 3))


def maxpool2d(x, k, s):
    (kh, kw), (sh, sw) = k, s
    n, c, h, w = x.shape
    oh, ow = (h - kh) // sh + 1, (w - kw) // sw + 1
    out = np.zeros((n, c, oh, ow))
    for y in range(oh):
        for z in range(ow):
            out[:, :, y, z] = x[:, :, y * sh:y * sh + kh, z * sw:z * sw + kw].max(axis=(2, 3))
    return out


def maxpool2d_grad(x, dout, k, s):
    """Routes each window's gradient to its first maximum (row-major), as the forward's argmax does."""
    (kh, kw), (sh, sw) = k, s
    dx = np.zeros_like(x)
    n, c = x.shape[:2]
    for y in range(dout.shape[2]):
        for z in range(dout.shape[3]):
            win = x[:, :, y * sh:y * sh + kh, z * sw:z * sw + kw].reshape(n, c, -1)
            arg = win.argmax(-1)
            ky, kx = np.divmod(arg, kw)
            for i in range(n):
                for j in range(c):
                    dx[i, j, y * sh + ky[i, j], z * sw + kx[i, j]] += dout[i, j, y, z]
    return dx


def targets(labels, k):
    return labels[:, None].astype(np.float64) if k == 1 else np.eye(k)[labels]


def cross_entropy(logits, labels):
    m = logits.max(1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(logits - m).sum(1))
    p = np.exp(logits - lse[:, None])
    loss = np.mean(lse - logits[np.arange(len(labels)), labels])
    return loss, (p - np.eye(logits.shape[1])[labels]) / len(labels)


def bce_logits(logits, labels):
    t = targets(labels, logits.shape[1])
    loss = np.mean(np.logaddexp(0, logits) - logits * t)
    return loss, (sigmoid(logits) - t) / logits.size


def mse(logits, labels):
    d = logits - targets(labels, logits.shape[1])
    return np.mean(d * d), 2 * d / logits.size


def sgd(p, v, g, lr, momentum, wd):
    g = g + wd * p
    v = momentum * v + g
    return p - lr * v, v


def adam(p, m, v, g, t, lr, b1, b2, eps, wd):
    g = g + wd * p
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    mhat, vhat = m / (1 - b1 ** t), v / (1 - b2 ** t)
    return p - lr * mhat / (np.sqrt(vhat) + eps), m, v


def central_diff(f, x, eps=1e-6):
    """d f / d x by central differences in float64, element by element."""
    x = x.astype(np.float64).copy()
    g = np.zeros_like(x)
    it = np.nditer(x, flags=["multi_index"])
    for _ in it:
        i = it.multi_index
        old = x[i]
        x[i] = old + eps
        hi = f(x)
        x[i] = old - eps
        lo = f(x)
        x[i] = old
        g[i] = (hi - lo) / (2 * eps)
    return g
