"""Tabular data from CSV files: KDD Cup 99's format (41 features, three of them words, and a label), or any
table of numbers and words with one label column.

A file is read as a stream, a chunk of rows at a time, with a line-length cap and the host-memory budget
checked as rows accumulate, so a file that would not fit is refused with the line where it stopped instead of
exhausting memory. Features are encoded from the training rows only:
- a numeric column is standardised with the training rows' mean and (population) standard deviation (a
  constant column becomes 0);
- a column of words (any value of the first data row that is not a number, or a column named in
  ``categorical``) is one-hot encoded over the categories seen in training, sorted; a test value of a category
  training never saw becomes all zeros, and is counted in the notes;
- labels become class indices in sorted order (numerically if every label is a number), over the labels of
  training and test.
Every problem is a DataError naming the file and, for a row, its line number (``path:line: ...``), or a
ConfigError naming the field (data.label, data.categorical).
"""
from __future__ import annotations

import csv
import gzip
import itertools
import math
import os
import time
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from .data import IDX_FILES
from .errors import ConfigError, DataError, LayerlabError
from .limits import INT32_MAX, check_host_memory, check_index, regular_file

MAX_LINE = 1 << 20  # characters in one line: a longer one is refused, not read whole into memory
MAX_COLUMNS = 65_536
CHUNK = 20_000  # rows parsed into arrays at a time
F32_MAX = float(np.finfo(np.float32).max)  # the features are float32: a value past this would become inf
HEADERS = ("auto", True, False)

# Where progress goes while a file loads: None, or a function of (path, rows, bytes read, file size, whether
# this is the last report); the CLI sets it to print to stderr.
progress = None


@dataclass
class Table:
    """A CSV file's rows as columns: numbers as float64, words as codes into their first-seen categories."""

    path: str
    names: list[str]  # every column's name (its index where the file has no header)
    has_header: bool
    label: int  # the label column's index (the last until ``_load_csv`` picks it)
    numeric: list[bool]  # per column: numbers (else words)
    columns: list = field(default_factory=list)  # per column: float64 array, or int32 codes into cats[i]
    cats: list = field(default_factory=list)  # per column: {word: code} (empty for numbers)
    lines: np.ndarray | None = None  # every row's line number in the file


def _open_bytes(path: Path):
    """The file and its bytes, decompressed where it is gzip (by its first bytes, whatever its name)."""
    raw = open(path, "rb")
    magic = raw.read(2)
    raw.seek(0)
    return raw, (gzip.GzipFile(fileobj=raw, mode="rb") if magic == b"\x1f\x8b" else raw)


def _not_idx(path: Path, binary) -> None:
    """A DataError where the file starts as an IDX file does (two zero bytes, an element type, 1-4 dimensions):
    IDX data is read from the directory that holds the four files, not as a table. Leaves ``binary`` at its
    start."""
    try:
        head = binary.read(4)
        binary.seek(0)
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error):
        return  # (read as a table, which says what is wrong)
    if len(head) == 4 and head[:2] == b"\0\0" and head[2] in (0x08, 0x09, 0x0B, 0x0C, 0x0D, 0x0E) and 1 <= head[3] <= 4:
        names = ", ".join(name for part in IDX_FILES.values() for name in part)
        raise DataError(f"{path}: an IDX file, not a CSV table; give the directory that holds it and the other "
                        f"three ({names}, each may end in .gz)")


def _lines(path: Path, binary, state: dict):
    """The file's lines as text, each checked against MAX_LINE and decoded on its own (so an error names its
    line); ``state['line']`` is the number of the last one."""
    while True:
        try:
            line = binary.readline(MAX_LINE + 1)
        except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
            raise DataError(f"{path}:{state['line'] + 1}: cannot read ({exc})") from None
        if not line:
            return
        state["line"] += 1
        if len(line) > MAX_LINE and not line.endswith(b"\n"):
            raise DataError(f"{path}:{state['line']}: a line longer than {MAX_LINE:,} bytes; not a CSV "
                            "file of records")
        if b"\0" in line:  # (valid UTF-8, so a binary file would read as one odd record)
            raise DataError(f"{path}:{state['line']}: a NUL byte; not a text (CSV) file")
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            raise DataError(f"{path}:{state['line']}: not UTF-8 text") from None
        yield text.lstrip("\ufeff") if state["line"] == 1 else text


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _rows(path: Path, text, state: dict):
    """Non-blank records of the file, stripped, with their line numbers."""
    reader = csv.reader(_lines(path, text, state), skipinitialspace=True)
    while True:
        start = state["line"] + 1  # (a quoted field may run over several lines: the record's first is named)
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise DataError(f"{path}:{start}: not CSV ({exc})") from None
        if row and any(v.strip() for v in row):
            yield [v.strip() for v in row], start


def _column_index(spec, names: list[str], has_header: bool, what: str, path: Path) -> int:
    """A column given by name or index (negative from the end) as its index; ConfigError naming ``what``."""
    n = len(names)
    if isinstance(spec, str) and not (has_header and spec in names) and spec.lstrip("-").isdigit():
        spec = int(spec)  # (from the command line: a number is an index unless a column has that name)
    if isinstance(spec, int) and not isinstance(spec, bool):
        if not -n <= spec < n:
            raise ConfigError(f"{what} {spec} is outside {path}'s {n} columns (0 to {n - 1}, or -1 for the last)",
                              field=what)
        return spec % n
    if not has_header:
        raise ConfigError(f"{what} {spec!r}: {path} has no header row to find it in; give the column's index",
                          field=what)
    if spec not in names:
        raise ConfigError(f"{what} {spec!r} is not a column of {path} (its columns: "
                          f"{', '.join(names[:8])}{', ...' if n > 8 else ''})", field=what)
    return names.index(spec)


def read_csv(path, *, header="auto", categorical=(), limit: int | None = None, like: Table | None = None) -> Table:
    """The rows of a CSV file (plain or gzip) as a Table (whichever column is the label: ``_load_csv`` picks
    it, so a new label column reads nothing again). ``header``: "auto" (the first row is a header where one of its fields is a word in a
    column whose next row holds a number), True or False. ``categorical``: columns (names or indices) to
    one-hot even where they hold numbers. ``limit``: read at most this many rows. ``like``: the training
    file's Table, whose columns, kinds and categories a test file must follow."""
    path = Path(path)
    size = regular_file(path, "CSV file")
    if header not in HEADERS:
        raise ConfigError(f"data.header {header!r} must be \"auto\", true or false", field="data.header")
    try:
        raw, text = _open_bytes(path)
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    state = {"line": 0}
    try:
        _not_idx(path, text)
        rows = _rows(path, text, state)
        first = next(rows, None)
        if first is None:
            raise DataError(f"{path}: empty (no header and no rows)")
        if len(first[0]) > MAX_COLUMNS:
            raise DataError(f"{path}:{first[1]}: {len(first[0]):,} columns, more than the {MAX_COLUMNS:,} "
                            "a table may have")
        second = next(rows, None)
        if header == "auto":
            has_header = second is not None and len(second[0]) == len(first[0]) and any(
                not _is_number(a) and _is_number(b) for a, b in zip(first[0], second[0]))
            if like is not None:  # a test file: also a header where its first row is the training file's
                has_header = has_header or first[0] == like.names
        else:
            has_header = bool(header)
        n_col = len(first[0])
        names = first[0] if has_header else [str(i) for i in range(n_col)]  # (as the indices data.label takes)
        if has_header and len(set(names)) != n_col:
            dup = next(v for v in names if names.count(v) > 1)
            raise DataError(f"{path}:{first[1]}: column {dup!r} appears twice in the header")
        pending = [r for r in ([second] if has_header else [first, second]) if r is not None]  # the first data rows
        if not pending:
            raise DataError(f"{path}: a header and no data rows")
        if like is not None:
            if n_col != len(like.names):
                raise DataError(f"{path}:{first[1]}: {n_col} columns, the training file {like.path} has "
                                f"{len(like.names)}")
            lab, numeric = like.label, like.numeric
            cats = [dict(c) for c in like.cats]  # new words get codes past training's (unseen: all zeros)
        else:
            lab = n_col - 1
            forced = {_column_index(c, names, has_header, "data.categorical", path) for c in (categorical or ())}
            numeric = [i not in forced and _is_number(v) for i, v in enumerate(pending[0][0])]
            cats = [{} for _ in range(n_col)]
        table = Table(str(path), names, has_header, lab, numeric)
        chunks: list[list] = [[] for _ in range(n_col)]
        line_chunks, n_rows = [], 0
        width = sum(numeric)
        last = time.monotonic()
        shown = False

        def flush(batch):
            nonlocal n_rows
            lines = np.fromiter((ln for _, ln in batch), np.int64, len(batch))
            cols = list(zip(*(r for r, _ in batch)))
            for i in range(n_col):
                if numeric[i]:
                    chunks[i].append(_numbers(path, names[i], cols[i], lines, pending[0][1]))
                else:
                    d = cats[i]
                    chunks[i].append(np.fromiter((d.setdefault(v, len(d)) for v in cols[i]), np.int32, len(batch)))
            line_chunks.append(lines)
            n_rows += len(batch)

        batch = []
        for row in itertools.chain(pending, rows):
            if len(row[0]) != n_col:
                raise DataError(f"{path}:{row[1]}: {len(row[0])} fields, expected {n_col} (as in line {first[1]})")
            batch.append(row)
            if limit is not None and n_rows + len(batch) >= limit:
                break
            if len(batch) >= CHUNK:
                flush(batch)
                batch = []
                onehot = sum(len(cats[i]) for i in range(n_col) if not numeric[i] and i != lab)
                # Held: float64 numbers and int32 codes; to come: the float32 features and their encoding pass.
                need = n_rows * (8 * width + 4 * (n_col - width) + 8 * (width + onehot))
                try:
                    check_host_memory(need, f"{path}: {n_rows:,} rows up to line {state['line']}")
                except ConfigError as exc:
                    raise DataError(f"{exc}; read fewer rows with data.limit (--limit)") from None
                if n_rows > INT32_MAX:
                    raise DataError(f"{path}:{state['line']}: more rows than the kernels' 32-bit indices reach")
                if progress is not None and time.monotonic() - last > 0.5:
                    last, shown = time.monotonic(), True
                    progress(str(path), n_rows, raw.tell(), size, False)
        if batch:
            flush(batch)
        if progress is not None and shown:
            progress(str(path), n_rows, raw.tell(), size, True)
    finally:
        if text is not raw:
            text.close()
        raw.close()
    table.columns = [np.concatenate(c) if c else np.zeros(0, np.float64 if numeric[i] else np.int32)
                     for i, c in enumerate(chunks)]
    table.cats = cats
    table.lines = np.concatenate(line_chunks)
    return table


def _plain(text: str) -> bool:
    """Written as a CSV number is: ASCII only, no '_' (float() and numpy also take '1_000' and the digits of
    other scripts, '０１２', '١٢')."""
    return text.isascii() and "_" not in text


def _numbers(path: Path, name: str, values, lines: np.ndarray, first_line: int) -> np.ndarray:
    """A chunk of a numeric column as float64; a DataError with the line of the first value that is not a
    finite number written in ASCII digits, sign, point and exponent."""
    out = None
    if _plain("".join(values)):  # (one scan of the chunk's text at C speed; a value at a time only to say which)
        try:
            out = np.array(values, dtype=np.float64)
        except ValueError:
            pass
    if out is not None and np.isfinite(out).all():
        return out
    for v, ln in zip(values, lines):
        try:
            numeric, ok = True, math.isfinite(float(v)) and _plain(v)
        except ValueError:
            numeric, ok = False, False
        if numeric and not _plain(v):
            raise DataError(f"{path}:{ln}: column {name!r} holds {v[:40]!r}; a number in a CSV file is written in "
                            "ASCII digits, sign, point and exponent only")
        if not ok:
            # (nan, inf or a number past float's range: numeric, but not one a network can take)
            why = "a numeric column needs finite numbers" if numeric else (
                f"the column's first row, line {first_line}, is numeric; name it in data.categorical if it holds words")
            raise DataError(f"{path}:{ln}: column {name!r} holds {v[:40]!r}, not a finite number ({why})")
    raise DataError(f"{path}: column {name!r} could not be read as numbers")  # (not reached)


def _past_float32(tbl: Table, rows: np.ndarray, name: str, raw: np.ndarray, z: np.ndarray, enc: dict):
    """A DataError naming the line of the first row whose feature (``z``, standardised from ``raw``) does not
    fit float32, or None where all do. Vectorised; the row is looked for only when one does not fit."""
    if not len(z) or np.abs(z).max() <= F32_MAX:
        return None
    j = int(np.flatnonzero(~(np.abs(z) <= F32_MAX))[0])
    where = f"{tbl.path}:{int(tbl.lines[rows[j]])}: column {name!r} holds {raw[j]:.6g}"
    if not abs(raw[j]) <= F32_MAX:
        return DataError(f"{where}, beyond float32's range (±{F32_MAX:.3g}), the features' type")
    return DataError(f"{where}, which standardised (mean {enc['mean']:.6g}, standard deviation {enc['std']:.6g} of "
                     f"the training rows) is beyond float32's range (±{F32_MAX:.3g}), the features' type")


def _labels(table: Table, rows: np.ndarray, word_of: dict) -> np.ndarray:
    """The label column's values at ``rows`` as strings; numbers written alike ("1", "1.0": "1")."""
    col = table.columns[table.label][rows]
    if table.numeric[table.label]:
        return np.array([np.format_float_positional(v, trim="-") for v in col.tolist()], dtype=object)
    words = [word_of[c] for c in col.tolist()]
    return np.array([np.format_float_positional(float(w), trim="-") if _plain(w) and _is_number(w) else w
                     for w in words], dtype=object)  # ('1_000' and '１' stay words: not '1000' and '1')


def _class_order(labels) -> list[str]:
    try:
        return sorted(labels, key=lambda v: (float(v), v))
    except ValueError:
        return sorted(labels)


@dataclass
class Encoded:
    """Features and labels of one split, and what the encoding found."""

    x: np.ndarray  # (N, F) float32
    y: np.ndarray  # (N,) int32
    unseen: dict = field(default_factory=dict)  # column name -> test values of categories training never saw


def encode(table: Table, train_rows: np.ndarray, test: tuple[Table, np.ndarray]) -> tuple[Encoded, Encoded, dict]:
    """Training and test features of ``table``'s ``train_rows`` and of the test rows (``test``: a Table and its
    rows, the same table or another file read ``like`` it); and the encoding (classes, features, per column
    the mean/std or categories)."""
    lab = table.label
    t_table, t_rows = test
    word_of = [{c: w for w, c in d.items()} for d in t_table.cats]  # test codes cover training's and new words
    train_y, test_y = _labels(table, train_rows, word_of[lab]), _labels(t_table, t_rows, word_of[lab])
    train_labels = set(np.unique(train_y).tolist())
    labels_seen = train_labels | set(np.unique(test_y).tolist())
    classes = _class_order(labels_seen)
    if len(classes) < 2:
        raise DataError(f"{table.path}: one label ({classes[0] if classes else 'none'}) in column "
                        f"{table.names[lab]!r}; classification needs at least two")
    class_of = {w: i for i, w in enumerate(classes)}
    # The layout first (a numeric column is one feature, a word column one per training category), then both
    # splits written straight into their float32 matrices.
    layout, features, encoding = [], [], {}
    for i, name in enumerate(table.names):
        if i == lab:
            continue
        col_tr = table.columns[i][train_rows]
        if table.numeric[i]:
            # (first: a training value past float32's range, 1e300, would overflow the mean and deviation too)
            past = _past_float32(table, train_rows, name, col_tr, col_tr, {})
            if past:
                raise past
            mean, std = float(col_tr.mean()), float(col_tr.std())
            encoding[name] = {"mean": mean, "std": std if std > 0 else 1.0}
            layout.append((i, None, 1))
            features.append(name)
        else:
            words = sorted(word_of[i][c] for c in np.unique(col_tr))
            index = np.full(len(t_table.cats[i]), -1, np.int64)  # a code (training's or the test's) -> its feature
            for k, w in enumerate(words):
                index[t_table.cats[i][w]] = k
            encoding[name] = {"categories": words}
            layout.append((i, index, len(words)))
            features += [f"{name}={w}" for w in words]
    if not features:
        raise DataError(f"{table.path}: no feature columns besides the label")
    out, unseen = [], {}
    for tbl, rows in ((table, train_rows), (t_table, t_rows)):
        x = np.zeros((len(rows), len(features)), np.float32)
        at = 0
        for i, index, width in layout:
            col = tbl.columns[i][rows]
            name = table.names[i]
            if index is None:
                e = encoding[name]
                z = (col - e["mean"]) / e["std"]
                past = _past_float32(tbl, rows, name, col, z, e)  # (cast, it would be inf: a nan loss, and exit 0)
                if past:
                    raise past
                x[:, at] = z
            else:
                k = index[col]
                hit = k >= 0
                x[np.nonzero(hit)[0], at + k[hit]] = 1.0
                if tbl is t_table and rows is t_rows and (~hit).any():
                    unseen[name] = int((~hit).sum())
            at += width
        out.append(x)
    to_class = lambda words: np.array([class_of[w] for w in words], np.int32).reshape(-1)  # noqa: E731
    meta = {"classes": classes, "features": features, "label": table.names[lab], "encoding": encoding,
            "train_classes": sorted(train_labels)}
    return (Encoded(out[0], to_class(train_y)), Encoded(out[1], to_class(test_y), unseen), meta)


_memo: dict = {}  # the last few loads (key: ``_key``) -> a Dataset, or the LayerlabError the load raised
_tables: dict = {}  # the last few files read (a label column picked later reads nothing again)
MEMO = 3


def _stamp(path) -> tuple:
    try:
        st = os.stat(path)
    except OSError:
        return (str(path),)
    return (str(path), st.st_size, st.st_mtime_ns)


def _key(path, test_path=None, test_ratio: float = 0.2, seed: int = 0, label=None, header="auto", categorical=(),
         limit: int | None = None) -> tuple:
    return (_stamp(path), _stamp(test_path) if test_path else None, test_ratio, seed, label, header,
            tuple(categorical or ()), limit)


def _keep(cache: dict, key, value):
    """``value`` into ``cache`` under ``key``, the oldest entries dropped past MEMO; returns ``value``."""
    while len(cache) >= MEMO:
        cache.pop(next(iter(cache)))
    cache[key] = value
    return value


def forget() -> None:
    """Drop what is kept of earlier loads (tests; a file changed in place keeps its size and time)."""
    _memo.clear()
    _tables.clear()


def is_loaded(path, **options) -> bool:
    """Whether ``load_csv(path, **options)`` would answer from memory (a Dataset, or its error)."""
    return _key(path, **options) in _memo


def load_csv(path, *, test_path=None, test_ratio: float = 0.2, seed: int = 0, label=None, header="auto",
             categorical=(), limit: int | None = None):
    """A Dataset from a CSV file (see the module's docstring): the test split from ``test_path``, else
    ``test_ratio`` of the rows chosen by ``seed``. Notes for the user (the classes' order, unseen categories)
    are in the Dataset's ``meta["notes"]``. The last few loads (and their errors) are kept, so checking a run
    and starting it read the file once, and the app can read it in the background."""
    key = _key(path, test_path, test_ratio, seed, label, header, categorical, limit)
    if key in _memo:
        got = _memo[key]
        if isinstance(got, LayerlabError):
            raise got
        return got
    try:
        ds = _load_csv(path, test_path, test_ratio, seed, label, header, categorical, limit)
    except LayerlabError as exc:
        ds = exc
    _keep(_memo, key, ds)
    if isinstance(ds, LayerlabError):
        raise ds
    return ds


def _load_csv(path, test_path, test_ratio, seed, label, header, categorical, limit):
    from .data import Dataset

    tkey = (_stamp(path), header, tuple(categorical or ()), limit)
    table = _tables.get(tkey)
    if table is None:
        table = _keep(_tables, tkey, read_csv(path, header=header, categorical=categorical, limit=limit))
    lab = _column_index(-1 if label is None else label, table.names, table.has_header, "data.label", Path(path))
    table = replace(table, label=lab)
    n = len(table.lines)
    if n < 2:  # (one row: a header alone, or a single record; "auto" cannot tell them apart)
        if limit is not None and limit < 2:
            raise DataError(f"{path}: data.limit (--limit) = {limit} reads one row; training needs at least two")
        raise DataError(f"{path}: one row only (a header, or a single record); training needs at least two")
    if test_path:
        test = replace(read_csv(test_path, header=header, limit=limit, like=table), label=lab)
        train_rows, test_rows, t_table = np.arange(n), np.arange(len(test.lines)), test
    else:
        order = np.random.default_rng(seed).permutation(n)
        n_test = min(max(1, int(round(n * test_ratio))), n - 1)
        test_rows, train_rows, t_table = np.sort(order[:n_test]), np.sort(order[n_test:]), table
    tr, te, meta = encode(table, train_rows, (t_table, test_rows))
    try:
        check_index(max(len(tr.y), len(te.y)) * tr.x.shape[1], f"{path}: rows x {tr.x.shape[1]} features")
    except ConfigError as exc:
        raise DataError(str(exc)) from None
    notes = [f"{Path(path).name}: {len(tr.y):,} training and {len(te.y):,} test rows, {tr.x.shape[1]} features "
             f"({sum(table.numeric) - table.numeric[lab]} numeric standardised, the rest one-hot), label column "
             f"{meta['label']!r}: classes " + ", ".join(f"{i} = {c}" for i, c in enumerate(meta["classes"]))]
    meta["test_only"] = test_only = [c for c in meta["classes"] if c not in meta["train_classes"]]
    if test_only:
        notes.append(f"labels in the test rows only (classes the network is never trained on): {', '.join(test_only)}")
    if te.unseen:
        notes.append("test rows with categories training never saw, encoded as all zeros: "
                     + ", ".join(f"column {name} in {count:,} row{'s' * (count != 1)}"
                                 for name, count in te.unseen.items()))
    meta["notes"], meta["unseen"] = notes, te.unseen
    return Dataset(Path(path).name, tr.x, tr.y, te.x, te.y, n_classes=len(meta["classes"]), meta=meta)
