"""The equivalent PyTorch model of a network, for interop tests and side-by-side benchmarks.

PyTorch is an optional extra (``pip install layerlab[torch]``); importing this module without it raises
ImportError with that hint. Layer i of the network is module i of the ``nn.Sequential``, so state_dict
names match the .npz files that ``Sequential.save_weights`` writes.
"""
from __future__ import annotations

import numpy as np

try:
    import torch
    from torch import nn
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("PyTorch is not installed; pip install 'layerlab[torch]' for interop and comparisons") from exc


def torch_sequential(net, copy_weights: bool = True) -> "nn.Sequential":
    mods = []
    for layer in net.layers:
        if layer.kind == "Linear":
            mods.append(nn.Linear(layer.in_features, layer.out_features))
        elif layer.kind == "Conv2D":
            mods.append(nn.Conv2d(layer.c, layer.out_channels, layer.kernel, layer.stride, layer.padding))
        elif layer.kind == "MaxPool2D":
            mods.append(nn.MaxPool2d(layer.kernel, layer.stride))
        elif layer.kind == "Flatten":
            mods.append(nn.Flatten())
        else:
            mods.append({"ReLU": nn.ReLU, "Sigmoid": nn.Sigmoid, "Tanh": nn.Tanh}[layer.kind]())
    model = nn.Sequential(*mods)
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
