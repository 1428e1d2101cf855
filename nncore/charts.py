"""Charts of runs and sweeps, drawn with plotext: the same functions draw into the app's chart widgets
(textual-plotext's ``Plot`` is a plotext figure) and onto the terminal for ``layerlab runs show``/``compare``.

Each ``draw_*`` takes a plotext figure (or the ``plotext`` module) and returns the series it plotted,
``{label: (xs, ys)}``, so tests can hold a chart to the events it was drawn from. Nothing here imports Textual.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

COLORS = ["orange", "blue+", "green+", "magenta+", "cyan+", "red+", "yellow", "gold"]
ARCH_COLORS = {"cpu-serial": "cyan+", "cpu-parallel": "green+", "cuda": "magenta+"}
MAX_POINTS = 2000  # step losses drawn per run at most
FAINT = "gray"  # the raw train loss, under its smoothed line
TEST = "blue+"


@dataclass
class Curves:
    """One run's curves: step losses (x in epochs: step / steps per epoch) and per-epoch test metrics."""

    label: str
    steps_per_epoch: int
    steps: list[tuple[int, float]] = field(default_factory=list)  # (step, train loss)
    epochs: list[tuple[int, float | None, float | None]] = field(default_factory=list)  # (epoch, test loss, acc)

    @classmethod
    def from_run(cls, run: dict, label: str | None = None) -> "Curves":
        """From a stored run (``Store.run``)."""
        spe = run.get("steps_per_epoch") or max((e["steps"] for e in run["epochs"][:1]), default=1)
        return cls(label or f"#{run['id']} {run.get('arch') or ''}".strip(), max(1, spe),
                   [(s["step"], s["loss"]) for s in run["steps"]],
                   [(e["epoch"], e.get("test_loss"), e.get("test_acc")) for e in run["epochs"]])


def _finite(v) -> bool:
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def smooth(values: list[float], weight: float | None = None) -> list[float]:
    """A debiased exponential moving average (TensorBoard's smoothing); a NaN step is skipped, not spread.
    ``weight`` None: 0.6 for short curves, rising to 0.95 for long ones."""
    if weight is None:
        weight = min(0.95, max(0.6, 1.0 - 8.0 / max(len(values), 1)))
    out, acc, n = [], 0.0, 0
    for v in values:
        if _finite(v):
            acc, n = acc * weight + (1 - weight) * v, n + 1
        out.append(acc / (1 - weight ** n) if n else float("nan"))
    return out


def _xy(pairs) -> tuple[list[float], list[float]]:
    pairs = [(x, y) for x, y in pairs if _finite(y)]
    return [float(x) for x, _ in pairs], [float(y) for _, y in pairs]


def _loss_top(raw: list[float], smoothed: list[float], test: list[float]) -> float | None:
    """The loss axis' top: above the smoothed curve after its first tenth and every test loss, so the first
    steps (often many times the rest) do not flatten the curve; None where nothing is left out anyway."""
    tail = [v for v in smoothed[len(smoothed) // 10:] if _finite(v)] + [v for v in test if _finite(v)]
    if not tail or not raw:
        return None
    top = max(tail) * 1.15
    return top if max(raw) > top else None


def _plot_rows(rows: int | None) -> int:
    """The rows a chart ``rows`` high (None: a guess) plots in: less the title, the frame, the ticks and the axis
    label."""
    return max(4, (rows or 24) - 5)


def _headroom(lo: float, hi: float, entries: int, rows: int | None) -> float:
    """The axis top that leaves the legend (``entries`` rows at the plot's top) above the data: plotext puts
    the legend inside the plot, over whatever is drawn there. ``rows``: the chart's height (None: a guess)."""
    plot_rows = _plot_rows(rows)
    entries = min(entries, plot_rows - 2)
    return hi + (hi - lo) * (entries + 0.5) / max(plot_rows - entries - 0.5, 1.0)


def draw_loss(plt, runs: list[Curves], rows: int | None = None, width: int | None = None) -> dict:
    """Train loss per step (smoothed, the raw line faint under it for a single run) and test loss per epoch;
    one colour per run when several are overlaid."""
    series: dict = {}
    if not runs:
        return series
    single = len(runs) == 1
    tops, bottoms, tests = [], [], []
    for i, run in enumerate(runs):
        color = COLORS[i % len(COLORS)]
        xs, raw = _xy((s / run.steps_per_epoch, v) for s, v in run.steps)
        if len(xs) > MAX_POINTS:  # a long run: every k-th step is drawn (the smoothing saw them all)
            k = math.ceil(len(xs) / MAX_POINTS)
            sm = smooth(raw)[::k]
            xs, raw = xs[::k], raw[::k]
        else:
            sm = smooth(raw)
        test_x, test = _xy((e, tl) for e, tl, _ in run.epochs)
        name = "" if single else f"{run.label} "
        if raw and single:
            plt.plot(xs, raw, color=FAINT, marker="braille", label="train (raw)")
            series["train (raw)"] = (xs, raw)
        if raw:
            plt.plot(xs, sm, color=color, marker="braille", label=f"{name}train")
            series[f"{name}train"] = (xs, sm)
        if test:
            tests.append((f"{name}test", test_x, test, TEST if single else color))
        top = _loss_top(raw, sm, test)
        tops.append(top if top is not None else max(raw + test, default=0.0))
        bottoms.append(min(raw + test, default=0.0))
    for label, test_x, test, color in tests:  # drawn last: on top of the step curves
        plt.plot(test_x, test, color=color, marker="braille", label=label)
        series[label] = (test_x, test)
    if series:
        lo, hi = min(bottoms), max(tops)
        pad = (hi - lo) * 0.05 or abs(hi) * 0.05 or 1.0
        lo = max(0.0, lo - pad) if lo >= 0 else lo - pad
        top = _headroom(lo, hi + pad, len(series), rows)
        plt.ylim(lo, top)
        ticks = _nice_ticks(lo, hi + pad, rows, top)
        plt.yticks(ticks, [f"{t:.{_decimals(ticks)}f}" for t in ticks])
        _epoch_ticks(plt, series)
    plt.xlabel("epoch")
    plt.title("loss")
    return series


def _epoch_ticks(plt, series: dict) -> None:
    """Whole epochs on the x axis: each, or every 2nd, 5th, 10th, ... so that at most ten or so are labelled."""
    last = math.ceil(max(max(xs) for xs, _ in series.values() if xs) - 1e-9)
    step = next(m * 10 ** e for e in range(12) for m in (1, 2, 5) if last / (m * 10 ** e) <= 10)
    first = 0 if min(min(xs) for xs, _ in series.values() if xs) < 1 else 1
    ticks = sorted({first, *range(step, last + 1, step)})
    plt.xticks(ticks, [str(t) for t in ticks])


def draw_accuracy(plt, runs: list[Curves], rows: int | None = None, width: int | None = None) -> dict:
    """Test accuracy per epoch, one colour per run (one run: no legend, the title says it)."""
    series: dict = {}
    single = len(runs) == 1
    for i, run in enumerate(runs):
        xs, acc = _xy((e, a) for e, _, a in run.epochs)
        if acc:
            label = "test acc" if single else run.label
            plt.plot(xs, acc, color="green+" if single else COLORS[i % len(COLORS)], marker="hd",
                     label=None if single else label)
            series[label] = (xs, acc)
    if series:
        lo = max(0.0, min(min(ys) for _, ys in series.values()) - 0.05)
        plt.ylim(lo, 1.0 if single else max(1.0, _headroom(lo, 1.0, len(series), rows)))
        ticks = _accuracy_ticks(lo)  # none above 1: the band above it (overlays) holds the legend, not data
        plt.yticks(ticks, [f"{t:.{_decimals(ticks)}f}" for t in ticks])
        _epoch_ticks(plt, series)
    plt.xlabel("epoch")
    plt.title("test accuracy")
    return series


def _nice_ticks(lo: float, hi: float, rows: int | None, top: float | None = None) -> list[float]:
    """Evenly spaced ticks at multiples of 1, 2 or 5 times a power of ten within [lo, hi], at most six, and
    (but for two) at least two rows apart on a chart ``rows`` high (None: a guess) whose axis ends at ``top``
    (above hi: the legend's band). Left to plotext, a short axis got uneven labels, some of its own ticks
    dropped where two fell on one row."""
    plot_rows = _plot_rows(rows)
    if top is not None and top > lo:
        plot_rows = plot_rows * min(1.0, (hi - lo) / (top - lo))  # the rows [lo, hi] takes
    most = max(2, min(6, int(plot_rows // 2)))
    finer = None
    for step in (m * 10.0 ** e for e in range(-12, 13) for m in (1, 2, 5)):  # the finest step that fits
        first, last = math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9)
        if last - first + 1 <= most:
            if last > first:
                return [round(k * step, 12) for k in range(first, last + 1)]
            if finer is None:
                break
            step, (first, last) = finer  # one tick at most: every j-th of the finer step's instead
            j = math.ceil((last - first) / (most - 1))
            return [round(k * step, 12) for k in range(first, last + 1, j)]
        finer = step, (first, last)
    return sorted({lo, hi})


def _accuracy_ticks(lo: float) -> list[float]:
    """Round ticks from 1 down to ``lo``, at most six: an accuracy axis is never labelled past 1 (100%)."""
    span = max(1.0 - lo, 1e-6)
    step = next(m * 10.0 ** e for e in range(-6, 1) for m in (1, 2, 5) if span / (m * 10.0 ** e) <= 5)
    return [round(1.0 - k * step, 10) for k in range(int(span / step + 1e-9) + 1)][::-1]


def _decimals(ticks: list[float]) -> int:
    """Decimals enough to tell the ticks apart (at least one)."""
    return next((d for d in range(1, 7) if len({f"{t:.{d}f}" for t in ticks}) == len(ticks)), 6)


def si(value: float) -> str:
    """12000 -> '12k', 1.5e6 -> '1.5M': tick labels that fit a narrow axis."""
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= div:
            return f"{value / div:.3g}{suffix}"
    return f"{value:.3g}"


def log_ticks(lo: float, hi: float) -> list[float]:
    """1-2-5 ticks spanning [lo, hi] on a log axis (at least the two ends' decades)."""
    if lo <= 0 or hi <= 0:
        return []
    ticks = []
    for exp in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for m in (1, 2, 5):
            t = m * 10.0 ** exp
            if lo / 1.2 <= t <= hi * 1.2:
                ticks.append(t)
    return ticks if len(ticks) <= 8 else [t for t in ticks if str(t)[0] == "1"]


def _point_labels(points: list[dict]) -> list[str]:
    """Each point's series: its arch, with the filter count where set, and the thread count where the points
    hold several for that arch (a threads sweep)."""
    threads: dict[str, set] = {}
    for p in points:
        threads.setdefault(p["arch"], set()).add(p.get("threads"))
    return [p["arch"] + (f" {p['threads']}t" if len(threads[p["arch"]]) > 1 else "")
            + (f" f{p['filters']}" if p.get("filters") else "") for p in points]


def draw_throughput(plt, points: list[dict], rows: int | None = None, width: int | None = None) -> dict:
    """Samples/s against batch size, one line per arch (and filter count), both axes logarithmic."""
    series: dict = {}
    groups: dict[str, list[dict]] = {}
    for label, p in zip(_point_labels(points), points):
        groups.setdefault(label, []).append(p)
    for label, pts in groups.items():
        pts = sorted(pts, key=lambda q: q["batch"])
        xs, ys = [float(q["batch"]) for q in pts], [float(q["samples_per_s"]) for q in pts]
        plt.plot(xs, ys, color=ARCH_COLORS.get(pts[0]["arch"], COLORS[len(series) % len(COLORS)]), marker="hd",
                 label=label)
        series[label] = (xs, ys)
    if series:
        plt.xscale("log")
        plt.yscale("log")
        batches = sorted({x for xs, _ in series.values() for x in xs})
        plt.xticks(batches, [f"{b:g}" for b in batches])
        ys = [y for _, v in series.values() for y in v if y > 0]
        ticks = log_ticks(min(ys), max(ys))
        if len(ticks) < 3:  # within a decade: the ends and their geometric middle, to two figures
            lo, hi = min(ys), max(ys)
            ticks = sorted({float(f"{t:.2g}") for t in (lo, math.sqrt(lo * hi), hi)} | set(ticks))
        if ticks:
            plt.yticks(ticks, [si(t) for t in ticks])
        # Room above the curves for the legend, as the other charts leave (plotext takes a log axis's limits as
        # log10 of the values; one value gets a band around it).
        lo, hi = math.log10(min(ys)), math.log10(max(ys))
        lo, hi = (lo - 0.1, hi + 0.1) if hi - lo < 0.05 else (lo, hi)
        plt.ylim(lo, _headroom(lo, hi, len(series), rows))
    plt.xlabel("batch size (log)")
    plt.title("samples/s (log) against batch size")
    return series


def draw_speedup(plt, amdahl: dict | None, rows: int | None = None, width: int | None = None) -> dict:
    """Each backend's measured speedup over cpu-serial beside its Amdahl bound (threads for the CPU, infinitely
    fast kernels for a GPU), from the sweep's Amdahl view (:func:`nncore.analysis.amdahl_view`)."""
    series: dict = {}
    if not amdahl:
        return series
    measured = {k: v for k, v in amdahl["measured"].items() if v is not None}
    if not measured:
        return series
    labels = [f"{k} {amdahl['threads']}t" if k == "cpu-parallel" else k for k in measured]
    got = list(measured.values())
    bound = [amdahl["bound_gpu"] if k == "cuda" else amdahl["bound_threads"] for k in measured]
    plt.multiple_bar(labels, [got, bound], labels=["measured", "Amdahl bound"], color=["green+", "gray"])
    plt.ylim(0, _headroom(0.0, max(got + bound), 2, rows))
    series["measured"], series["Amdahl bound"] = (labels, got), (labels, bound)
    at = (f", batch {amdahl['batch']}" if amdahl.get("batch") else "") + (
        f", f{amdahl['filters']}" if amdahl.get("filters") else "")
    title = "speedup over cpu-serial" + at
    if width is not None and len(title) > width - 4:  # plotext leaves out a title wider than the chart
        title = "speedup" + at
    plt.title(title)
    return series


def draw_parts(plt, points: list[dict], rows: int | None = None, width: int | None = None) -> dict:
    """ms per step of each part (forward + backward, synced steps) at the largest batch swept: one labelled bar
    per part and arch ("0 (Linear) cpu-serial"), coloured by arch, the step's first part on top."""
    series: dict = {}
    if not points:
        return series
    batch = max(p["batch"] for p in points)
    sel = [p for p in points if p["batch"] == batch and p.get("layers")]
    names = list(dict.fromkeys(l["name"].replace("layer ", "") for p in sel for l in p["layers"]))
    if not names:
        return series
    for label, p in zip(_point_labels(sel), sel):
        ms = dict.fromkeys(names, 0.0)
        for l in p["layers"]:
            ms[l["name"].replace("layer ", "")] += l["fwd_ms"] + l["bwd_ms"]
        series[label] = (names, list(ms.values()))
    # One bar per part and series ("0 (Linear) cpu-serial"), a row each, the step's first part on top: each
    # series drawn at its own rows in its colour, and the y range set so that a row of the plot is a bar and its
    # label (plotext spreads bars over the rows it has: with more rows than bars, or grouped bars, labels and bars
    # fell on different rows).
    keys = list(series)
    bars = [(n, k) for n in names for k in range(len(keys))]
    top = len(bars)
    for k, ((_, ys), p) in enumerate(zip(series.values(), sel)):
        at = [(top - i, ys[names.index(n)]) for i, (n, kk) in enumerate(bars) if kk == k]
        plt.bar([a for a, _ in at], [v for _, v in at], orientation="h", width=0.01,
                color=ARCH_COLORS.get(p["arch"], "white"))
    plt.yticks([top - i for i in range(top)], [f"{n} {keys[k]}" if len(keys) > 1 else n for n, k in bars])
    plot_rows = max(top, (rows or top + 5) - 5)  # less the title, the frame, the ticks and the axis label
    plt.ylim(top + 0.5 - plot_rows, top + 0.5)
    plt.xlabel("ms per step (synced)")
    plt.title(f"per-part time, batch {batch}")
    return series


PLAIN_MARKERS = ("•", "+", "x", "o", "*", "#", "%", "@")  # a line's own character where colour is off


class _Plain:
    """plotext, each line drawn in a character of its own: without colour, braille lines all look alike."""

    def __init__(self, plt):
        self._plt, self._lines = plt, 0

    def plot(self, *args, **kwargs):
        kwargs["marker"] = PLAIN_MARKERS[self._lines % len(PLAIN_MARKERS)]
        self._lines += 1
        return self._plt.plot(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._plt, name)


def render(draw, *args, width: int = 72, height: int = 14, color: bool = True) -> str:
    """A chart as text for the terminal (``layerlab runs show``); plain where ``color`` is False, each line in
    a character of its own."""
    import plotext

    plotext.clf()
    plotext.plotsize(width, height)
    plotext.theme("clear")
    draw(plotext if color else _Plain(plotext), *args, rows=height, width=width)
    text = plotext.build()
    return text if color else plotext.uncolorize(text)
