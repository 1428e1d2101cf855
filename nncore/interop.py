"""The equivalent PyTorch model of a network, for interop tests and side-by-side benchmarks.

PyTorch is an optional extra (``pip install layerlab[torch]``); importing this module without it raises
ImportError with that hint. Layer i of the network is module i of the ``nn.Sequential``, so state_dict
names match the .npz files that ``Sequential.save_weights`` writes.
"""
from __future__ import annotations

import numpy as np

from .peer import layer_specs

try:
    import torch
    from torch import nn
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("PyTorch is not installed; pip install 'layerlab[torch]' for interop and comparisons") from exc


def torch_from_specs(specs: list) -> "nn.Sequential":
    """The nn.Sequential of ``layer_specs`` (PyTorch's own initial weights)."""
    mods = []
    for kind, *args in specs:
        if kind == "Linear":
            mods.append(nn.Linear(*args))
        elif kind == "Conv2D":
            mods.append(nn.Conv2d(*args))
        elif kind == "MaxPool2D":
            mods.append(nn.MaxPool2d(*args))
        elif kind == "Flatten":
            mods.append(nn.Flatten())
        else:
            mods.append({"ReLU": nn.ReLU, "Sigmoid": nn.Sigmoid, "Tanh": nn.Tanh}[kind]())
    return nn.Sequential(*mods)


def torch_sequential(net, copy_weights: bool = True) -> "nn.Sequential":
    model = torch_from_specs(layer_specs(net))
    if copy_weights:
        model.load_state_dict({k: torch.from_numpy(v) for k, v in net.state_dict().items()})
    return model


def torch_loss(name: str):
    """The PyTorch loss and a function turning integer labels into its targets."""
    if name == "cross_entropy":
        return nn.CrossEntropyLoss(), lambda y, k: torch.as_tensor(y, dtype=torch.long)
    onehot = lambda y, k: torch.as_tensor(  # noqa: E731
        np.asarray(y, np.float32)[:, None] if k == 1 else np.eye(k, dtype=np.float32)[np.asarray(y)])
    return (nn.BCEWithLogitsLoss() if name == "bce" else nn.MSELoss()), onehot
