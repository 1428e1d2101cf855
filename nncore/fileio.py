"""Files written and read by nncore: atomic writes (weights, checkpoints, the app's exports) and checked reads."""
from __future__ import annotations

import fcntl
import os
import re
import stat
import tempfile
import time
import zipfile
import zlib
from pathlib import Path

import numpy as np

from .errors import ConfigError, DataError, OutputError
from .limits import check_host_memory, regular_file


def _new_file_mode(path: Path) -> int:
    """The mode the file would get from a plain open(): the old file's where one is replaced, else 0o666 less
    the umask (a temporary file is created 0o600, which a rename would otherwise keep)."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        mask = os.umask(0o022)
        os.umask(mask)
        return 0o666 & ~mask


def _clean_stale(path: Path) -> None:
    """Temporary files of our own naming left beside ``path`` by a process killed while writing it. A writer
    holds a lock on its temporary file until it is renamed, so one that can be locked is nobody's."""
    pattern = re.compile(rf"^\.{re.escape(path.name)}\.[A-Za-z0-9_]{{8}}\.tmp$")
    try:
        candidates = [p for p in path.parent.iterdir() if pattern.match(p.name)]
    except OSError:
        return
    for old in candidates:
        try:
            fd = os.open(old, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            old.unlink(missing_ok=True)
        except OSError:  # locked: another process is writing it
            pass
        finally:
            os.close(fd)


def write_atomic(path, write) -> None:
    """``write(fh)`` into a temporary file in the same directory, fsync, then rename over ``path``: a crash
    leaves the old file whole. The file gets the mode a plain open() would give it; a symlink keeps pointing
    at the file, which is what is replaced."""
    path = Path(os.path.realpath(path))
    _clean_stale(path)
    mode = _new_file_mode(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "wb") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)  # ours until renamed (see _clean_stale)
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


def _npz_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path) -> np.ndarray:
    """One .npy inside an .npz, its header checked before its body is read: a numeric dtype, and a size that
    is what the zip directory says the member holds (so no header can make us allocate more than the file's
    declared, memory-checked contents)."""
    name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
    with zf.open(info) as fh:
        try:
            version = np.lib.format.read_magic(fh)
            shape, fortran, dtype = (np.lib.format.read_array_header_1_0(fh) if version == (1, 0)
                                     else np.lib.format.read_array_header_2_0(fh))
        except (ValueError, SyntaxError, TypeError) as exc:
            raise DataError(f"{path}: {name} is not a .npy array ({exc})") from None
        if dtype.hasobject or dtype.kind not in "biuf":
            raise DataError(f"{path}: {name} holds {dtype} values, not numbers")
        nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
        if nbytes != info.file_size - fh.tell():
            raise DataError(f"{path}: {name}'s header declares {nbytes:,} bytes of data, the file holds "
                            f"{info.file_size - fh.tell():,}")
        raw = fh.read(nbytes)
    arr = np.frombuffer(raw, dtype).reshape(shape, order="F" if fortran else "C")
    return arr.copy()


def read_npz(path) -> dict[str, np.ndarray]:
    """The arrays of an .npz (weights, checkpoints): a regular file, every member checked before it is read,
    the whole within host memory; no pickles."""
    regular_file(path, ".npz file")
    try:
        with zipfile.ZipFile(path) as zf:
            members = zf.infolist()
            total = sum(info.file_size for info in members)
            try:
                check_host_memory(2 * total, f"{path} ({total:,} bytes unpacked)")
            except ConfigError as exc:
                raise DataError(str(exc)) from None
            return {(info.filename[:-4] if info.filename.endswith(".npy") else info.filename):
                    _npz_member(zf, info, path) for info in members}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, zlib.error, NotImplementedError, RuntimeError) as exc:
        raise DataError(f"{path}: not a readable .npz file ({exc})") from None  # RuntimeError: encrypted


def check_output(path, flag: str) -> Path:
    """An output path, checked before a run starts so that its result cannot be lost to it at the end: a name
    given, not a directory or special file, in a directory that exists and where a file can be created."""
    text = str(path)
    if not text.strip():
        raise ConfigError(f"{flag} '': give a file name")
    if text.endswith("/"):  # a directory meant, present or not (realpath would drop the slash)
        raise ConfigError(f"{flag} {text}: names a directory; give a file name in it")
    if text in ("/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"):
        raise ConfigError(f"{flag} {text}: give - for standard output" if flag in ("--jsonl", "--json", "--csv")
                          else f"{flag} {text}: give a file")
    try:
        p = Path(os.path.realpath(text))
        if p.is_dir():
            raise ConfigError(f"{flag} {text}: is a directory; give a file name in it")
        if p.exists() and not stat.S_ISREG(p.stat().st_mode):
            raise ConfigError(f"{flag} {text}: not a regular file")
        if not p.parent.is_dir():
            raise ConfigError(f"{flag} {text}: its directory does not exist")
    except OSError as exc:  # a name too long, a loop of links
        raise ConfigError(f"{flag} {text}: {exc.strerror or exc}") from None
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(f"{flag} {text}: cannot write in {p.parent} ({exc.strerror or exc})") from None
    return p


def _same_file(a: Path, b: Path) -> bool:
    if a == b:
        return True
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)  # (hard links)
    except OSError:
        return False


def input_files(what: str, path) -> list[tuple[str, Path]]:
    """(what, file) for an input the command reads: the file itself, or for a directory (an IDX data set) the
    IDX files loading it reads; other files there (weights, checkpoints kept beside the data) are not inputs."""
    if path is None or not str(path).strip():
        return []
    p = Path(os.path.realpath(os.path.expanduser(str(path))))
    try:
        if p.is_dir():
            from .data import idx_files_read

            return [(what, f) for f in idx_files_read(p)]
    except OSError:
        return []
    return [(what, p)]


def store_files(path) -> list[tuple[str, Path]]:
    """The run store's file and SQLite's files beside it, which hold its latest writes, as inputs."""
    return [("the run store", q) for suffix in ("", "-wal", "-shm", "-journal")
            for _, q in input_files("", f"{path}{suffix}")]


def check_outputs(outputs: list[tuple[str, object]], inputs: list[tuple[str, Path]] = (),
                  replaces: tuple[tuple[str, str], ...] = ()) -> None:
    """Every (flag, path) given (None: not asked for) checked, no two the same file, and none the same file as
    one of the command's ``inputs`` (from :func:`input_files`): writing it would destroy what the run reads
    (a config, data, the run store). ``replaces``: (output flag, input) pairs that may be one file, an input
    read whole before the output is first written (--checkpoint over the checkpoint resumed from)."""
    seen: dict[Path, str] = {}
    for flag, path in outputs:
        if path is None:
            continue
        p = check_output(path, flag)
        if p in seen:
            raise ConfigError(f"{flag} {path}: the same file as {seen[p]}; give each output its own file")
        for what, q in inputs:
            if (flag, what) not in replaces and _same_file(p, q):
                raise ConfigError(f"{flag} {path}: the same file as {what} ({q}), which writing it would destroy; "
                                  "give the output another file")
        seen[p] = flag


def write_or_rescue(path, write, what: str) -> None:
    """:func:`write_atomic`, and if that fails (a full disk, a directory gone read-only), the same bytes beside
    it or in the temporary directory, with an OutputError naming where they went: a finished result is kept."""
    path = Path(path)
    try:
        write_atomic(path, write)
        return
    except OSError as exc:
        reason = exc.strerror or str(exc)
    raise rescue(write, what, f"to {path}", reason, path.name, beside=path.parent)


def rescue(write, what: str, where: str, reason: str, name: str, beside: Path | None = None) -> OutputError:
    """``what``, which could not be written ``where`` ("to PATH", "to stdout") for ``reason``, written as
    NAME.rescued-DATE in ``beside`` or else the temporary directory; the OutputError to raise, naming where it
    went (or that it went nowhere)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for folder in ([beside] if beside is not None else []) + [Path(tempfile.gettempdir())]:
        alt = folder / f"{name}.rescued-{stamp}"
        try:
            write_atomic(alt, write)
        except OSError:
            continue
        return OutputError(f"{what} could not be written {where} ({reason}); saved to {alt} instead")
    return OutputError(f"{what} could not be written {where} ({reason}), nor "
                       f"{'beside it or ' if beside is not None else ''}in {tempfile.gettempdir()}")
