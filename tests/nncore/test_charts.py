"""nncore.charts: the series each chart plots, against the data it was given and float64 references."""
import math

import numpy as np
import pytest

from nncore import charts


class Fig:
    """A plotext stand-in that keeps every call."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *a, **k: self.calls.append((name, a, k))

    def called(self, name):
        return [c for c in self.calls if c[0] == name]


def _ema_reference(values, w):
    out, acc, n = [], 0.0, 0
    for v in values:
        if np.isfinite(v):
            acc, n = w * acc + (1 - w) * v, n + 1
        out.append(acc / (1 - w ** n) if n else np.nan)
    return np.array(out)


def test_smoothing_is_the_debiased_ema(rng):
    v = rng.uniform(0.1, 3.0, 137)
    v[[5, 40]] = np.nan
    got = charts.smooth(list(v), 0.8)
    ref = _ema_reference(v, 0.8)
    assert np.allclose(got, ref, equal_nan=True, rtol=1e-12)
    assert charts.smooth([2.5], None) == [2.5] and math.isnan(charts.smooth([float("nan")])[0])


def test_the_loss_chart_plots_every_step_and_epoch(rng):
    steps = [(s, float(v)) for s, v in enumerate(rng.uniform(0.2, 1.0, 61), 1)]
    steps[7] = (8, float("nan"))  # a diverged step is left out, not drawn as zero
    run = charts.Curves("a", 13, steps, [(1, 0.5, 0.8), (2, None, None), (3, 0.3, 0.9)])
    fig = Fig()
    series = charts.draw_loss(fig, [run])
    finite = [(s, v) for s, v in steps if v == v]
    assert series["train (raw)"][0] == pytest.approx([s / 13 for s, _ in finite])
    assert series["train (raw)"][1] == pytest.approx([v for _, v in finite])
    assert series["train"][1] == pytest.approx(charts.smooth([v for _, v in finite]))
    assert series["test"] == ([1.0, 3.0], [0.5, 0.3])
    assert [c[1][:2] for c in fig.called("plot")] == [tuple(v) for v in series.values()]


def test_the_first_steps_do_not_flatten_the_loss_axis():
    steps = [(1, 50.0), (2, 20.0)] + [(s, 1.0 / s) for s in range(3, 200)]
    fig = Fig()
    charts.draw_loss(fig, [charts.Curves("a", 50, steps, [(1, 0.3, 0.9)])])
    (_, (lo, hi), _), = fig.called("ylim")
    assert lo >= 0 and 0.3 < hi < 5  # the top follows the curve after its start, not the 50 of step 1


def test_a_long_run_is_drawn_thinned_but_smoothed_over_every_step(rng):
    v = list(rng.uniform(0.1, 1.0, 9001))
    series = charts.draw_loss(Fig(), [charts.Curves("a", 100, list(enumerate(v, 1)), [])])
    xs, ys = series["train"]
    assert len(xs) <= charts.MAX_POINTS
    k = math.ceil(len(v) / charts.MAX_POINTS)
    assert ys == pytest.approx(charts.smooth(v)[::k])


def test_overlaid_runs_keep_their_own_series():
    a = charts.Curves("#1", 10, [(s, 1.0 / s) for s in range(1, 31)], [(1, 0.4, 0.7), (2, 0.3, 0.8)])
    b = charts.Curves("#2", 5, [(s, 2.0 / s) for s in range(1, 16)], [(1, 0.5, 0.6)])
    series = charts.draw_loss(Fig(), [a, b])
    assert set(series) == {"#1 train", "#1 test", "#2 train", "#2 test"}
    assert series["#2 train"][0] == pytest.approx([s / 5 for s in range(1, 16)])
    acc = charts.draw_accuracy(Fig(), [a, b])
    assert acc == {"#1": ([1.0, 2.0], [0.7, 0.8]), "#2": ([1.0], [0.6])}


def test_throughput_is_plotted_per_arch_on_log_axes():
    pts = [{"arch": a, "batch": b, "samples_per_s": r * b, "filters": None}
           for a, r in (("cpu-serial", 3.0), ("cpu-parallel", 5.0)) for b in (256, 16, 64)]
    fig = Fig()
    series = charts.draw_throughput(fig, pts)
    assert series["cpu-serial"] == ([16.0, 64.0, 256.0], [48.0, 192.0, 768.0])
    assert ("xscale", ("log",), {}) in fig.calls and ("yscale", ("log",), {}) in fig.calls
    assert charts.log_ticks(48, 1280) == [50, 100, 200, 500, 1000]
    assert charts.si(1_500_000) == "1.5M" and charts.si(12000) == "12k" and charts.si(0.5) == "0.5"


def test_speedup_beside_the_amdahl_bound_and_parts_per_arch():
    view = {"measured": {"cpu-parallel": 1.7, "cuda": 6.0}, "threads": 2, "bound_threads": 1.8, "bound_gpu": 9.0}
    s = charts.draw_speedup(Fig(), view)
    assert s["measured"] == (["cpu-parallel 2t", "cuda"], [1.7, 6.0]) and s["Amdahl bound"][1] == [1.8, 9.0]
    assert charts.draw_speedup(Fig(), None) == {}
    layers = [{"name": "layer 0 (Linear)", "fwd_ms": 1.0, "bwd_ms": 2.0}, {"name": "loss", "fwd_ms": 0.5, "bwd_ms": 0}]
    pts = [{"arch": "cpu-serial", "batch": 64, "layers": layers}, {"arch": "cpu-serial", "batch": 8, "layers": []}]
    assert charts.draw_parts(Fig(), pts) == {"cpu-serial": (["0 (Linear)", "loss"], [3.0, 0.5])}


@pytest.mark.parametrize("width,title", [(80, "speedup over cpu-serial, batch 256, f8"),
                                         (34, "speedup, batch 256, f8")])
def test_the_speedup_chart_keeps_a_title_that_fits_and_names_the_batch_and_filters(width, title):
    """plotext leaves out a title wider than the chart: at 80 columns the speedup chart (half the width) had none,
    so nothing said what it showed or for which batch and filter count."""
    view = {"measured": {"cpu-parallel": 1.7}, "threads": 2, "bound_threads": 1.8, "bound_gpu": 9.0,
            "batch": 256, "filters": 8}
    text = charts.render(charts.draw_speedup, view, width=width, height=14, color=False)
    assert text.splitlines()[0].strip() == title, text


def test_render_draws_axes_and_legend_as_plain_text():
    run = charts.Curves("a", 10, [(s, 1.0 / s) for s in range(1, 31)], [(1, 0.4, 0.7), (2, 0.3, 0.8), (3, 0.2, 0.9)])
    text = charts.render(charts.draw_loss, [run], width=60, height=14, color=False)
    assert "\x1b[" not in text and "epoch" in text and "train (raw)" in text and "test" in text
    assert "┤" in text and "└" in text  # ticks on the y axis, the frame


def test_a_threads_sweep_keeps_each_thread_count_apart():
    layers = [{"name": "loss", "fwd_ms": 1.0, "bwd_ms": 0.0}]
    pts = [{"arch": "cpu-parallel", "threads": t, "batch": b, "samples_per_s": 100.0 * t * b, "layers": layers}
           for t in (1, 2) for b in (16, 64)] + [{"arch": "cpu-serial", "threads": 1, "batch": 64,
                                                   "samples_per_s": 50.0, "layers": layers}]
    series = charts.draw_throughput(Fig(), pts)
    assert series["cpu-parallel 2t"] == ([16.0, 64.0], [3200.0, 12800.0]) and series["cpu-serial"][0] == [64.0]
    assert set(charts.draw_parts(Fig(), pts)) == {"cpu-parallel 1t", "cpu-parallel 2t", "cpu-serial"}


def test_the_loss_axis_ticks_are_round_even_and_apart(rng):
    # Independent check: every tick a multiple of one 1-2-5 step, consecutive ticks one step apart, all inside
    # [lo, hi], few enough to stand two rows apart, at least two wherever a step fits twice.
    for _ in range(300):
        lo = float(rng.choice([0.0, rng.uniform(-5, 5)]))
        hi = lo + float(10.0 ** rng.uniform(-4, 3))
        rows = int(rng.integers(8, 60))
        top = hi + (hi - lo) * float(rng.choice([0.0, rng.uniform(0, 3)]))  # a legend's band above the data
        ticks = charts._nice_ticks(lo, hi, rows, top)
        data_rows = max(4, rows - 5) * (hi - lo) / (top - lo)
        most = max(2, min(6, int(data_rows // 2)))
        assert 2 <= len(ticks) <= most and all(lo - 1e-9 <= t <= hi + 1e-9 for t in ticks), (lo, hi, rows, ticks)
        step = ticks[1] - ticks[0]
        assert np.allclose(np.diff(ticks), step, rtol=1e-6), ticks
        bases = [m * 10.0 ** e for e in range(-6, 4) for m in (1, 2, 5)]
        whole = lambda v, b: abs(v / b - round(v / b)) < 1e-6  # noqa: E731
        assert any(whole(step, b) and all(whole(t, b) for t in ticks) for b in bases), ticks


def test_the_loss_chart_labels_its_own_round_ticks():
    run = charts.Curves("a", 10, [(s, 1.4 / math.sqrt(s)) for s in range(1, 301)], [(e, 0.5 / e, 0.9) for e in range(1, 31)])
    fig = Fig()
    charts.draw_loss(fig, [run], rows=12)
    (_, (ticks, labels), _), = fig.called("yticks")
    (_, (lo, hi), _), = fig.called("ylim")
    assert len(ticks) >= 2 and lo <= ticks[0] and ticks[-1] <= hi
    assert labels == [f"{t:.1f}" for t in ticks]
    text = charts.render(charts.draw_loss, [run], width=60, height=12, color=False)
    shown = [float(line.split("┤")[0]) for line in text.splitlines() if "┤" in line]
    assert shown == sorted(ticks, reverse=True)  # every tick drawn, none dropped
