"""Loss functions over integer labels, each a fused forward+gradient kernel, and their fit to the network.

``cross_entropy`` is softmax cross-entropy over K >= 2 logits (PyTorch's CrossEntropyLoss); ``bce`` is binary
cross-entropy on logits (BCEWithLogitsLoss), one output for two classes or one sigmoid per class; ``mse``
is mean squared error against the label (one output) or its one-hot row (PyTorch's MSELoss).
"""
from __future__ import annotations

import numpy as np

from .errors import ConfigError, DataError
from .kernels import loss as K

LOSSES = {  # loss name -> its kernel in kernels/loss.py
    "cross_entropy": "softmax_xent_forward_backward",
    "bce": "bce_logits_forward_backward",
    "mse": "mse_forward_backward",
}
ALIASES = {
    "ce": "cross_entropy", "softmax_cross_entropy": "cross_entropy", "crossentropy": "cross_entropy",
    "bce_with_logits": "bce", "binary_cross_entropy": "bce", "bcewithlogits": "bce",
    "mean_squared_error": "mse",
}


def canonical(name) -> str:
    """The loss's own name for ``name`` or one of its aliases; ConfigError if there is none."""
    key = str(name).lower().replace("-", "_")
    key = ALIASES.get(key, key)
    if key not in LOSSES:
        raise ConfigError(f"loss {name!r} is unknown; choose one of {', '.join(LOSSES)}", field="model.loss")
    return key


class Loss:
    """A loss bound to the network's output shape; ``n_classes`` is what the labels range over."""

    def __init__(self, name: str, out_shape: tuple[int, ...]):
        self.name = key = canonical(name)
        if len(out_shape) != 1:
            raise ConfigError(f"loss {key} needs a flat output, but the last layer gives {tuple(out_shape)}; "
                              "end the network with Flatten and Linear")
        self.outputs = out_shape[0]
        if key == "cross_entropy" and self.outputs < 2:
            raise ConfigError(f"loss cross_entropy needs at least 2 outputs (one per class), "
                              f"but the last layer gives {self.outputs}; use bce for one output")
        self.n_classes = 2 if self.outputs == 1 else self.outputs

    def check_classes(self, n_classes: int, where: str = "dataset", why: str = "") -> None:
        """Raise ConfigError unless labels in [0, n_classes) fit this loss and output size (``why``: said after
        the count, where it needs saying)."""
        if n_classes != self.n_classes:
            if self.name == "bce" and n_classes == 2:
                fix = "set the last layer's out_features to 1 (or 2)"
            elif self.name == "bce":  # (bce with one output per class, one-vs-rest, trains too)
                fix = f"set the last layer's out_features to {n_classes}, or use cross_entropy with as many"
            else:
                fix = f"set the last layer's out_features to {n_classes}"
            raise ConfigError(f"loss {self.name}: the network has {self.outputs} output(s), fit for "
                              f"{self.n_classes} classes, but the {where} has {n_classes}{why}; {fix}")

    def check_labels(self, labels, where: str = "labels") -> None:
        """Raise DataError unless every label is an integer in [0, n_classes): the kernels index by them."""
        y = np.asarray(labels)
        if y.size == 0:
            return
        if not (np.issubdtype(y.dtype, np.integer) or np.issubdtype(y.dtype, np.bool_)):
            bad = ~np.isfinite(y) | (y != np.round(y)) if np.issubdtype(y.dtype, np.floating) else None
            if bad is None or bad.any():
                what = f"label {y.ravel()[np.argmax(bad.ravel())].item()}" if bad is not None else f"dtype {y.dtype}"
                raise DataError(f"{where}: {what} is not a class index (an integer in [0, {self.n_classes}))")
        lo, hi = y.min(), y.max()
        if lo < 0 or hi >= self.n_classes:
            i = int(np.argmax(((y < 0) | (y >= self.n_classes)).ravel()))
            raise DataError(f"{where}: label {y.ravel()[i].item()} (sample {i}) is outside the {self.n_classes} "
                            f"classes [0, {self.n_classes}) of loss {self.name}")

    def forward_backward(self, losses, dlogits, logits, labels) -> None:
        getattr(K, LOSSES[self.name])(losses, dlogits, logits, labels)

    @property
    def row(self):
        """The loss's row function (one sample; nncore.kernels.loss.ROWS), for kernels that form it themselves."""
        return K.ROWS[LOSSES[self.name]]

    def __repr__(self) -> str:
        return f"Loss({self.name!r}, outputs={self.outputs})"
