"""The ranges every number from outside must fit before it reaches a kernel or an allocation.

Taichi's kernel arguments and ndarray indices are 32-bit signed integers: a stride, a size or an element
count past 2**31 - 1 would wrap inside a kernel, so each is checked where it enters (layer parameters, layer
shapes, batch buffers, dataset sizes, checkpoint positions).
"""
from __future__ import annotations

from .errors import ConfigError

INT32_MAX = 2**31 - 1
CONFIG_BYTES = 1 << 20  # a config file: far above any real one, far below what would hurt to parse
CONFIG_DEPTH = 16  # tables and lists within each other in a config


def check_index(count: int, what: str, layer: int | None = None) -> int:
    """``count`` (a size, an element count) must be addressable by the kernels' 32-bit indices."""
    if count > INT32_MAX:
        raise ConfigError(f"{what} is {count:,}, beyond the kernels' 32-bit index range ({INT32_MAX:,})",
                          layer=layer)
    return count


def depth(value, limit: int = CONFIG_DEPTH) -> int:
    """How deeply lists and tables nest in ``value`` (iteratively: a hostile file cannot exhaust the stack);
    stops counting past ``limit``."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if level > limit:
            return level
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return deepest
