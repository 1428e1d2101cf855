"""Make assets/fashion-mnist-subset: a stratified, seeded subset of Fashion-MNIST as gzipped IDX files.

Source: Debian's dataset-fashion-mnist package (apt-get install dataset-fashion-mnist), or any directory
holding the four Fashion-MNIST IDX files. 600 images per class from the training set and 100 per class from
the test set: 6,000 / 1,000, about 3 MB. Run from the repository root:

    python scripts/make_embedded_subset.py [SOURCE_DIR]
"""
import gzip
import struct
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from nncore.data import DEBIAN_FASHION, EMBEDDED_DIR, IDX_FILES, _find_file, read_idx  # noqa: E402

PER_CLASS = {"train": 600, "test": 100}


def write_idx(path: Path, arr: np.ndarray) -> None:
    header = bytes([0, 0, 0x08, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    with gzip.GzipFile(path, "wb", compresslevel=9, mtime=0) as fh:  # mtime 0: byte-identical reruns
        fh.write(header + arr.astype(np.uint8).tobytes())


def main(src: Path) -> None:
    EMBEDDED_DIR.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(2026)
    for part, (img_stem, lab_stem) in IDX_FILES.items():
        images, labels = read_idx(_find_file(src, img_stem)), read_idx(_find_file(src, lab_stem))
        pick = np.concatenate([rng.choice(np.flatnonzero(labels == c), PER_CLASS[part], replace=False)
                               for c in range(10)])
        pick = pick[rng.permutation(len(pick))]
        write_idx(EMBEDDED_DIR / f"{img_stem}.gz", images[pick])
        write_idx(EMBEDDED_DIR / f"{lab_stem}.gz", labels[pick])
        print(f"{part}: {len(pick)} images")
    total = sum(p.stat().st_size for p in EMBEDDED_DIR.iterdir())
    print(f"{EMBEDDED_DIR}: {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEBIAN_FASHION)
