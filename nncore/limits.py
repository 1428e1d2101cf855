"""The ranges every number from outside must fit before it reaches a kernel or an allocation.

Taichi's kernel arguments and ndarray indices are 32-bit signed integers: a stride, a size or an element
count past 2**31 - 1 would wrap inside a kernel, so each is checked where it enters (layer parameters, layer
shapes, batch buffers, dataset sizes, checkpoint positions).
"""
from __future__ import annotations

import errno
import math
import os
import stat

from .errors import ConfigError, DataError

INT32_MAX = 2**31 - 1
# Taichi's CPU pool starts every thread asked for; tens of thousands stall the process at start, and it does
# not answer SIGTERM meanwhile. 1,024 is far past any machine's cores and still starts in moments.
MAX_THREADS = 1024
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


def host_memory() -> int:
    """Bytes the host can give new allocations now (MemAvailable), or a very large number where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 1 << 62


def check_host_memory(need: int, what: str, field: str | None = None) -> None:
    """Refuse, before allocating or decompressing, host data that would not fit (90% of what is available)."""
    avail = 0.9 * host_memory()
    if need > avail:
        raise ConfigError(f"{what} needs about {need / 2**30:.1f} GiB, more than the {avail / 2**30:.1f} GiB of "
                          "host memory available", field=field)


def regular_file(path, what: str = "file") -> int:
    """``path`` must be a regular file (not a FIFO, device, socket or directory, which could block for ever or
    never end); returns its size. Raises DataError naming it."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # (links that lead to each other: the file is there, but never reached)
            raise DataError(f"{path}: a symbolic link loop (its links lead to each other, never to a file)") from None
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise DataError(f"{path}: is a directory, not a {what}")
    if not stat.S_ISREG(st.st_mode):
        raise DataError(f"{path}: not a regular file (a FIFO, device or socket); give a {what}")
    if kernel_file(path):
        raise DataError(f"{path}: a kernel interface file (/proc, /sys), not a {what}")
    return st.st_size


def kernel_file(path) -> bool:
    """Files of /proc and /sys pass as regular but may block for ever (/proc/kmsg) or never end."""
    real = os.path.realpath(path)
    return real.startswith(("/proc/", "/sys/"))


BIG_DIGITS = 30  # digits past which a whole number stands for "too large" (every range here is far below)


def check_threads(threads: int | None, what: str = "threads") -> None:
    """A thread count the CPU pool can start (at most MAX_THREADS)."""
    if threads is not None and threads > MAX_THREADS:
        raise ConfigError(f"{what} {threads:,} is more than the {MAX_THREADS:,} a run may start")


def printable(text: str) -> str:
    """``text`` with each unprintable character (an escape, a newline) as "?": safe to show on one line."""
    return "".join(c if c.isprintable() else "?" for c in text)


def clip(text: str, chars: int = 20) -> str:
    """``text`` cut to ``chars`` characters and "…", for an error that quotes what was given (a 5,000-digit
    argument must not become a 5,000-character message)."""
    return text if len(text) <= chars else text[:chars] + "…"


def signed_digits(text: str) -> int | None:
    """ASCII digits with an optional leading minus, as an int; None for anything else. A number of more than
    BIG_DIGITS significant digits comes back as ±10**BIG_DIGITS: beyond every range checked here, and int()
    would refuse one of more than 4,300 digits with a ValueError (and takes time growing with its length)."""
    s = text.strip()
    digits = s[1:] if s.startswith("-") else s
    if not (digits.isascii() and digits.isdigit()):
        return None
    value = int(digits) if len(digits.lstrip("0")) <= BIG_DIGITS else 10**BIG_DIGITS
    return -value if s.startswith("-") else value


def ascii_int(text: str, what: str, minimum: int = 0) -> int:
    """An integer argument as a person types it: ASCII digits only (not ``²`` or ``５``, which Python's int()
    would take or choke on), within [minimum, 2**31 - 1].
    A sign is read, so that "-5" is refused for its value as "0" is."""
    value = signed_digits(text)
    if value is None:
        raise ConfigError(f"{what} {clip(text)!r} must be a whole number written in digits 0-9")
    if value < minimum:
        raise ConfigError(f"{what} {clip(text.strip())} must be >= {minimum}")
    if value > INT32_MAX:
        raise ConfigError(f"{what} {clip(text.strip())} is too large (beyond {INT32_MAX})")
    return value


def finite_float(text: str, what: str) -> float:
    """A number argument: ASCII, finite (no nan or inf)."""
    s = text.strip()
    try:
        value = float(s) if s.isascii() else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ConfigError(f"{what} {clip(text)!r} must be a finite number")
    return value
