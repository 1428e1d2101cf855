"""Datasets: synthetic 2-D sets, IDX files (MNIST / Fashion-MNIST), and the embedded Fashion-MNIST subset.

Everything comes back as a :class:`Dataset` of float32 features (pixels scaled to [0, 1]) and int32 labels,
split into train / test (and validation, if asked) deterministically by seed. Every problem with a file
(missing, wrong magic number, truncated, counts that differ, labels out of range) is a :class:`DataError`
naming the file. The training loop uploads a Dataset to the device once per run.
"""
from __future__ import annotations

import gzip
import os
import math
import struct
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from .errors import ConfigError, DataError
from .limits import INT32_MAX, check_host_memory, check_index, clip, regular_file

ROOT = Path(__file__).resolve().parent.parent
EMBEDDED_DIR = ROOT / "assets" / "fashion-mnist-subset"
DEBIAN_FASHION = Path("/usr/share/datasets/fashion-mnist")
SYNTHETIC = ("quadrant", "circle", "xor", "gauss", "spiral")
IDX_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
             "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
FASHION_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                   "Ankle boot")


@dataclass(frozen=True)
class Dataset:
    name: str
    x_train: np.ndarray  # (N, *input_shape) f32
    y_train: np.ndarray  # (N,) i32
    x_test: np.ndarray
    y_test: np.ndarray
    n_classes: int
    x_val: np.ndarray | None = None
    y_val: np.ndarray | None = None
    meta: dict | None = None  # what loading found, for tabular data (nncore.tabular.load_csv)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    def limit(self, n: int | None) -> "Dataset":
        """At most ``n`` training samples (and at most ``n`` test samples), for quick runs."""
        if n is None:
            return self
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"data.limit = {n!r} must be a positive integer", field="data.limit")
        return replace(self, x_train=self.x_train[:n], y_train=self.y_train[:n], x_test=self.x_test[:n],
                       y_test=self.y_test[:n])

    def split_validation(self, fraction: float, seed: int) -> "Dataset":
        """Hold out ``fraction`` of the training set, chosen by ``seed``, as the validation set."""
        if not fraction:
            return self
        if not 0 < fraction < 1:
            raise ConfigError(f"data.val_ratio = {fraction!r} must be in [0, 1)", field="data.val_ratio")
        n_val = int(round(len(self.x_train) * fraction))
        if n_val < 1 or n_val >= len(self.x_train):
            raise ConfigError(f"data.val_ratio = {fraction} leaves no training or no validation samples",
                              field="data.val_ratio")
        order = np.random.default_rng(seed).permutation(len(self.x_train))
        val, train = order[:n_val], order[n_val:]
        return replace(self, x_train=self.x_train[train], y_train=self.y_train[train],
                       x_val=self.x_train[val], y_val=self.y_train[val])


# -- synthetic 2-D sets (TensorFlow Playground's, plus the quadrant task) ------------------------------------
def _points(name: str, n: int, noise: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` points in roughly [-1, 1]^2 and their 0/1 labels."""
    if name in ("quadrant", "xor"):
        p = rng.uniform(-1, 1, size=(n, 2))
        p += np.sign(p) * 0.03  # a small margin around the axes, as Playground's xor has
        noisy = p + rng.uniform(-1, 1, size=p.shape) * noise
        prod = noisy[:, 0] * noisy[:, 1]
        # quadrant: label 1 in the 2nd and 4th quadrants; xor (Playground): label 1 in the 1st and 3rd.
        return p, (prod < 0 if name == "quadrant" else prod >= 0).astype(np.int32)
    if name == "circle":
        half = n // 2
        r = np.concatenate([rng.uniform(0, 0.5, half), rng.uniform(0.7, 1.0, n - half)])
        a = rng.uniform(0, 2 * np.pi, n)
        p = np.stack([r * np.sin(a), r * np.cos(a)], 1)
        noisy = p + rng.uniform(-1, 1, size=p.shape) * noise
        return p, (np.hypot(noisy[:, 0], noisy[:, 1]) < 0.5).astype(np.int32)
    if name == "gauss":
        half = n // 2
        var = 0.1 + noise * 0.7  # Playground scales the spread with the noise
        centers = np.repeat([[0.4, 0.4], [-0.4, -0.4]], [half, n - half], axis=0)
        p = centers + rng.normal(0, math.sqrt(var) * 0.2, size=(n, 2))
        return p, np.repeat([1, 0], [half, n - half]).astype(np.int32)
    # spiral: two interleaved arms
    half = n // 2
    t_idx = np.concatenate([np.arange(half), np.arange(n - half)]) / max(half, 1)
    delta = np.repeat([0.0, np.pi], [half, n - half])
    r = t_idx
    t = 1.75 * t_idx * 2 * np.pi + delta
    p = np.stack([r * np.sin(t), r * np.cos(t)], 1) + rng.uniform(-1, 1, size=(n, 2)) * noise * 0.2
    return p, np.repeat([1, 0], [half, n - half]).astype(np.int32)


IDX_LOAD_FACTOR = 14  # host bytes per IDX byte at the peak of loading and uploading it, with a margin
SYNTHETIC_BYTES = 128  # host bytes per sample while a synthetic set is generated (float64 temporaries)


def _check_synthetic(samples, noise, test_ratio) -> None:
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 4:
        raise ConfigError(f"data.samples = {samples!r} must be a whole number of at least 4 (training and test points)",
                          field="data.samples")
    if samples > INT32_MAX:
        raise ConfigError(f"data.samples = {samples:,} is beyond the kernels' 32-bit index range", field="data.samples")
    check_host_memory(SYNTHETIC_BYTES * samples, f"data.samples = {samples:,}", field="data.samples")
    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not 0 <= noise <= 1:
        raise ConfigError(f"data.noise = {noise!r} must be in [0, 1]", field="data.noise")
    if isinstance(test_ratio, bool) or not isinstance(test_ratio, (int, float)) or not 0 < test_ratio < 1:
        raise ConfigError(f"data.test_ratio = {test_ratio!r} must be in (0, 1)", field="data.test_ratio")


def synthetic(name: str, samples: int = 1000, noise: float = 0.0, test_ratio: float = 0.2,
              seed: int = 0) -> Dataset:
    if name not in SYNTHETIC:
        raise ConfigError(f"dataset {clip(str(name), 40)!r} is unknown; choose one of {', '.join(SYNTHETIC)}",
                          field="data.dataset")
    _check_synthetic(samples, noise, test_ratio)
    rng = np.random.default_rng(seed)
    x, y = _points(name, samples, float(noise), rng)
    order = rng.permutation(samples)
    x, y = x[order].astype(np.float32), y[order]
    n_test = min(max(1, int(round(samples * test_ratio))), samples - 1)
    return Dataset(name, x[n_test:], y[n_test:], x[:n_test], y[:n_test], n_classes=2)


# -- IDX files ----------------------------------------------------------------------------------------------
def _open(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _header(path: Path, raw: bytes) -> tuple[int, ...]:
    """The dimensions an IDX file's first bytes declare; DataError naming the file if they are not an IDX
    header of unsigned bytes with 1 (labels) or 3 (images) dimensions."""
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        why = f"bad magic number {raw[:4].hex()}" if raw else "it is empty"
        raise DataError(f"{path}: not an IDX file ({why})")
    if raw[2] != 0x08:
        raise DataError(f"{path}: IDX element type 0x{raw[2]:02x} is not unsigned byte (0x08)")
    ndim = raw[3]
    if ndim not in (1, 3):
        raise DataError(f"{path}: IDX with {ndim} dimensions; expected 1 (labels) or 3 (images)")
    if len(raw) < 4 + 4 * ndim:
        raise DataError(f"{path}: truncated header")
    return struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])


def _check_dims(path: Path, dims: tuple[int, ...]) -> int:
    """The body size an IDX header declares, checked before anything is read or decompressed: no empty
    dimension, within the kernels' 32-bit indices (as float32 features) and within host memory."""
    if 0 in dims:
        raise DataError(f"{path}: the header declares {' x '.join(map(str, dims))} items; a dataset needs at "
                        "least one of each")
    body = math.prod(dims)
    try:
        check_index(body, f"{path}: the header's {' x '.join(map(str, dims))} values")
        # The bytes, their float32 copy and its scaled temporary, the split's copies and the upload.
        check_host_memory(IDX_LOAD_FACTOR * body, f"{path} ({' x '.join(map(str, dims))} values, loaded as float32)")
    except ConfigError as exc:
        raise DataError(str(exc)) from None
    return body


def _check_length(path: Path, have: int, need: int) -> None:
    """An IDX file of ``have`` bytes (at least) whose header promises ``need``: DataError naming it unless equal."""
    if have < need:
        raise DataError(f"{path}: truncated ({have} bytes, the header promises {need})")
    if have > need:
        raise DataError(f"{path}: bytes after the data the header describes")


def read_idx(path) -> np.ndarray:
    """One IDX file (raw or .gz) of unsigned bytes: images (N, H, W) or labels (N,). The header is checked
    before the body is read, so a file (or a gzip bomb) declaring more than fits is refused unread."""
    path = Path(path)
    regular_file(path, "IDX file")
    try:
        with _open(path) as fh:
            head = fh.read(4)
            ndim = head[3] if len(head) == 4 else 0
            head += fh.read(4 * ndim)
            dims = _header(path, head)
            body = _check_dims(path, dims)
            raw = fh.read(body)
            extra = len(fh.read(1))
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise DataError(f"{path}: cannot read ({exc})") from None
    _check_length(path, len(head) + len(raw) + extra, 4 + 4 * ndim + body)
    return np.frombuffer(raw, np.uint8).reshape(dims)


def idx_names(stem: str) -> tuple[str, ...]:
    """The names an IDX file of ``stem`` is looked for under, in order."""
    return stem + ".gz", stem, stem.replace("-idx", ".idx") + ".gz", stem.replace("-idx", ".idx")


def idx_files_read(directory) -> list[Path]:
    """The files of an IDX directory that loading it reads (those present)."""
    d = Path(directory)
    return [d / name for stems in IDX_FILES.values() for stem in stems for name in idx_names(stem)
            if os.path.lexists(d / name)]


def _find_file(directory: Path, stem: str) -> Path:
    for name in idx_names(stem):
        if os.path.lexists(directory / name):  # (a broken link or a loop is found, and read_idx says which)
            return directory / name
    raise DataError(f"{directory / stem}: no such file (looked for {stem}[.gz])")


def _split(directory: Path, part: str) -> tuple[np.ndarray, np.ndarray]:
    img_path, lab_path = (_find_file(directory, s) for s in IDX_FILES[part])
    images, labels = read_idx(img_path), read_idx(lab_path)
    if images.ndim != 3:
        raise DataError(f"{img_path}: expected images (N, H, W), got {images.ndim} dimension(s)")
    if labels.ndim != 1:
        raise DataError(f"{lab_path}: expected labels (N,), got {labels.ndim} dimensions")
    if len(images) != len(labels):
        raise DataError(f"{lab_path}: {len(labels)} labels for {len(images)} images in {img_path.name}")
    return images, labels


def load_idx_dir(directory, name: str | None = None, n_classes: int = 10) -> Dataset:
    """train-/t10k- images and labels from ``directory``; pixels scaled to [0, 1] as (N, 1, H, W)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise DataError(f"{directory}: no such directory")
    (xtr, ytr), (xte, yte) = _split(directory, "train"), _split(directory, "test")
    if xtr.shape[1:] != xte.shape[1:]:
        raise DataError(f"{directory}: train images are {xtr.shape[1:]}, test images {xte.shape[1:]}")
    for labels, part in ((ytr, "train"), (yte, "test")):
        if len(labels) and labels.max() >= n_classes:
            stem = IDX_FILES[part][1]
            raise DataError(f"{directory / stem}: label {int(labels.max())} is outside the {n_classes} classes")
    scale = lambda a: (a.astype(np.float32) / 255.0)[:, None]  # noqa: E731
    return Dataset(name or directory.name, scale(xtr), ytr.astype(np.int32), scale(xte), yte.astype(np.int32),
                   n_classes=n_classes)


@dataclass(frozen=True)
class DatasetInfo:
    """What a dataset holds, known without loading it: what a network must fit."""

    name: str
    input_shape: tuple[int, ...]
    n_classes: int
    notes: tuple = ()  # what loading found (a CSV file's classes and encoding), for the user
    test_only: str = ""  # where some classes are in the test rows only: which, and where ("x. only in t.csv")


def _idx_dims(path: Path) -> tuple[int, ...]:
    """The dimensions an IDX file's header declares (its first 16 bytes at most); an uncompressed file's size
    is checked against them too, as read_idx would (a .gz file's body is checked only when it is read)."""
    regular_file(path, "IDX file")
    try:
        with _open(path) as fh:
            head = fh.read(16)
        size = path.stat().st_size
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:  # (zlib.error: a damaged deflate stream)
        raise DataError(f"{path}: cannot read ({exc})") from None
    dims = _header(path, head)
    need = 4 + 4 * len(dims) + _check_dims(path, dims)
    if path.suffix != ".gz":
        _check_length(path, size, need)
    return dims


def _csv(path, test_ratio: float, seed: int, limit, csv: dict | None) -> Dataset:
    from .tabular import load_csv

    csv = csv or {}
    return load_csv(path, test_path=csv.get("test_path"), test_ratio=test_ratio, seed=seed, label=csv.get("label"),
                    header=csv.get("header", "auto"), categorical=csv.get("categorical") or (), limit=limit)


def is_table(path) -> bool:
    """Whether ``path`` names a file (read as CSV: nncore.tabular) rather than a directory of IDX files; a
    DataError if it names nothing."""
    if path is None:
        return False
    if not os.path.lexists(path):
        rel = "" if os.path.isabs(path) else f", from {os.getcwd()}"
        raise DataError(f"{path}: no such file or directory{rel} (give a directory of IDX files or a CSV file)")
    return not Path(path).is_dir()


def describe(name: str | None = None, directory=None, *, samples: int = 1000, noise: float = 0.0,
             test_ratio: float = 0.2, seed: int = 0, limit: int | None = None, csv: dict | None = None) -> DatasetInfo:
    """Input shape and class count of a dataset by name or IDX directory, reading at most the IDX headers; a
    CSV file (``is_table``) is loaded to find its width and classes (kept, so loading it next costs nothing).

    Raises the same DataError or ConfigError that loading it would for a missing directory, a missing file,
    an unknown name or a bad synthetic size, or an uncompressed IDX file whose size is not what its header says;
    a damaged body inside a .gz file is found only when loaded."""
    if is_table(directory):
        ds = _csv(directory, test_ratio, seed, limit, csv)
        only = ds.meta["test_only"]
        test = (csv or {}).get("test_path")
        where = f"the test file {Path(test).name}" if test else "its test rows"
        return DatasetInfo(ds.name, ds.input_shape, ds.n_classes, tuple(ds.meta["notes"]),
                           f"{', '.join(only)} only in {where}" if only else "")
    if directory is not None:
        directory = Path(directory)
        if not directory.is_dir():
            raise DataError(f"{directory}: no such directory")
        paths, dims = [], []
        for stem in (*IDX_FILES["train"], *IDX_FILES["test"]):  # each file read as found: its problem said first
            paths.append(_find_file(directory, stem))
            dims.append(_idx_dims(paths[-1]))
        # What load_idx_dir checks of the arrays, from the headers, in its words and naming the file at fault.
        for (img, lab), (d_img, d_lab) in ((paths[:2], dims[:2]), (paths[2:], dims[2:])):
            if len(d_img) != 3:
                raise DataError(f"{img}: expected images (N, H, W), got {len(d_img)} dimension(s)")
            if len(d_lab) != 1:
                raise DataError(f"{lab}: expected labels (N,), got {len(d_lab)} dimensions")
            if d_img[0] != d_lab[0]:
                raise DataError(f"{lab}: {d_lab[0]} labels for {d_img[0]} images in {img.name}")
        if dims[0][1:] != dims[2][1:]:
            raise DataError(f"{directory}: train images are {dims[0][1:]}, test images {dims[2][1:]}")
        return DatasetInfo(directory.name, (1, *dims[0][1:]), 10)
    if name in SYNTHETIC:
        _check_synthetic(samples, noise, test_ratio)
        return DatasetInfo(name, (2,), 2)
    if name == "fashion-subset":
        return DatasetInfo(name, (1, 28, 28), 10)
    if name == "fashion-mnist":
        if not DEBIAN_FASHION.is_dir():
            raise DataError(f"{DEBIAN_FASHION}: not installed (apt-get install dataset-fashion-mnist), "
                            "or pass --data DIR")
        return DatasetInfo(name, (1, 28, 28), 10)
    raise _unknown(name)


def _unknown(name) -> ConfigError:
    """A dataset name that is none of those here: the names that are, and where other data goes."""
    names = list(available_datasets())
    later = "" if "fashion-mnist" in names else " (fashion-mnist once dataset-fashion-mnist is installed)"
    shown = repr(clip(name, 40)) if isinstance(name, str) else repr(name)  # (--dataset may be any length)
    return ConfigError(f"dataset {shown} is unknown; choose one of {', '.join(names)}{later}; or a directory of "
                       "IDX files or a CSV file (--data, data.path)", field="data.dataset")


def available_datasets() -> dict[str, str]:
    """Dataset names usable here -> a short description."""
    out = {n: "synthetic 2-D, 2 classes" for n in SYNTHETIC}
    if EMBEDDED_DIR.is_dir():
        out["fashion-subset"] = "embedded Fashion-MNIST subset (6,000 train / 1,000 test), 1x28x28, 10 classes"
    if DEBIAN_FASHION.is_dir():
        out["fashion-mnist"] = f"Fashion-MNIST from {DEBIAN_FASHION} (60,000 / 10,000), 1x28x28, 10 classes"
    return out


def load(name: str | None = None, directory=None, *, samples: int = 1000, noise: float = 0.0,
         test_ratio: float = 0.2, val_ratio: float = 0.0, seed: int = 0, limit: int | None = None,
         csv: dict | None = None) -> Dataset:
    """A dataset by name (synthetic, ``fashion-subset``, ``fashion-mnist``), from an IDX directory, or from a
    CSV file (``csv``: nncore.tabular's options, test_path, label, header, categorical; ``limit`` rows read)."""
    if is_table(directory):
        ds = _csv(directory, test_ratio, seed, limit, csv)
    elif directory is not None:
        ds = load_idx_dir(directory)
    elif name in SYNTHETIC:
        ds = synthetic(name, samples, noise, test_ratio, seed)
    elif name == "fashion-subset":
        ds = load_idx_dir(EMBEDDED_DIR, "fashion-subset")
    elif name == "fashion-mnist":
        if not DEBIAN_FASHION.is_dir():
            raise DataError(f"{DEBIAN_FASHION}: not installed (apt-get install dataset-fashion-mnist), "
                            "or pass --data DIR")
        ds = load_idx_dir(DEBIAN_FASHION, "fashion-mnist")
    else:
        raise _unknown(name)
    return ds.limit(limit).split_validation(val_ratio, seed)
