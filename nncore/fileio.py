"""Files written and read by nncore: atomic .npz writes (weights, checkpoints) and their checked reads."""
from __future__ import annotations

import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from .errors import DataError


def write_npz_atomic(path, arrays: dict[str, np.ndarray]) -> None:
    """Temporary file in the same directory, fsync, then rename: a crash leaves the old file whole."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_npz(path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise DataError(f"{path}: not a readable .npz weights file ({exc})") from None
