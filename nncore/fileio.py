"""Files written and read by nncore: atomic writes (weights, checkpoints, the app's exports) and checked reads."""
from __future__ import annotations

import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from .errors import DataError


def _new_file_mode(path: Path) -> int:
    """The mode the file would get from a plain open(): the old file's where one is replaced, else 0o666 less
    the umask (a temporary file is created 0o600, which a rename would otherwise keep)."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        mask = os.umask(0o022)
        os.umask(mask)
        return 0o666 & ~mask


def write_atomic(path, write) -> None:
    """``write(fh)`` into a temporary file in the same directory, fsync, then rename over ``path``: a crash
    leaves the old file whole. The file gets the mode a plain open() would give it."""
    path = Path(path)
    mode = _new_file_mode(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_npz_atomic(path, arrays: dict[str, np.ndarray]) -> None:
    """Arrays as an .npz, written atomically (:func:`write_atomic`)."""
    write_atomic(path, lambda fh: np.savez(fh, **arrays))


def read_npz(path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise DataError(f"{path}: not a readable .npz weights file ({exc})") from None
