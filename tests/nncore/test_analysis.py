"""Sweep figures against the raw timings they come from; Amdahl and Karp-Flatt against known answers;
lockstep agreement between cpu-serial and cpu-parallel."""
import math

import pytest

from nncore import analysis
from nncore.analysis import SweepPoint
from nncore.config import load_config
from nncore.errors import ConfigError


def test_amdahl_and_karp_flatt_known_answers():
    assert analysis.amdahl_bound(0.9, 2) == pytest.approx(1 / (0.1 + 0.45))
    assert analysis.amdahl_bound(0.5, math.inf) == pytest.approx(2.0)
    assert analysis.amdahl_bound(1.0, 8) == pytest.approx(8.0)
    assert analysis.amdahl_bound(0.0, 8) == pytest.approx(1.0)
    # A program whose serial fraction is exactly 0.1 runs 1 / (0.1 + 0.9 / 4) faster on 4 threads;
    # Karp-Flatt recovers the 0.1 from that speedup.
    s = 1 / (0.1 + 0.9 / 4)
    assert analysis.karp_flatt(s, 4) == pytest.approx(0.1)
    assert analysis.karp_flatt(2.0, 2) == pytest.approx(0.0)
    assert analysis.karp_flatt(1.5, 1) is None
    with pytest.raises(ValueError):
        analysis.amdahl_bound(1.5, 2)


def _point(arch, threads, batch, sps, filters=None, layers=(), launches=0):
    return SweepPoint(arch, threads, batch, filters, sps, 1e3 * batch / sps, 1.0, list(layers), launches)


def test_derived_sweep_figures_come_from_the_raw_timings():
    pts = analysis.derive([
        _point("cpu-serial", 1, 64, 1000.0), _point("cpu-parallel", 2, 64, 1800.0),
        _point("cpu-serial", 1, 256, 2000.0), _point("cpu-parallel", 2, 256, 2500.0),
        _point("cuda", 0, 256, 50000.0), _point("cpu-parallel", 2, 1000, 3000.0),  # no serial point at 1000
    ])
    by = {(p.arch, p.batch): p for p in pts}
    assert by["cpu-serial", 64].epoch_s == pytest.approx(60.0)
    assert by["cpu-parallel", 64].speedup == pytest.approx(1.8)
    assert by["cpu-parallel", 64].efficiency == pytest.approx(0.9)
    assert by["cpu-parallel", 64].karp_flatt == pytest.approx((1 / 1.8 - 0.5) / 0.5)
    assert by["cpu-parallel", 256].speedup == pytest.approx(1.25)
    assert by["cuda", 256].speedup == pytest.approx(25.0) and by["cuda", 256].efficiency is None
    assert by["cpu-parallel", 1000].speedup is None and by["cpu-parallel", 1000].efficiency is None
    assert by["cpu-serial", 256].speedup == pytest.approx(1.0)


def test_filters_are_compared_with_the_same_filter_count():
    pts = analysis.derive([_point("cpu-serial", 1, 1000, 100.0, 32), _point("cpu-serial", 1, 1000, 50.0, 64),
                           _point("cpu-parallel", 2, 1000, 150.0, 32), _point("cpu-parallel", 2, 1000, 90.0, 64)])
    assert [p.speedup for p in pts] == pytest.approx([1.0, 1.0, 1.5, 1.8])


def test_amdahl_view_from_a_scripted_profile():
    # Step 10 ms; synced parts add up to 9 ms; 20 launches at 0.05 ms each: host = 1 + 1 = 2 ms, p = 0.8.
    layers = [{"name": "layer 0 (Linear)", "fwd_ms": 3.0, "bwd_ms": 3.0}, {"name": "optimizer", "fwd_ms": 3.0,
                                                                           "bwd_ms": 0.0}]
    serial = SweepPoint("cpu-serial", 1, 100, None, 10000.0, 10.0, 1.0, layers, 20)
    view = analysis.amdahl_view(serial, launch_ms=0.05, threads=2, measured={"cpu-parallel x2": 1.5})
    assert view.p == pytest.approx(0.8) and view.host_ms == pytest.approx(2.0)
    assert view.bound_threads == pytest.approx(1 / (0.2 + 0.4))
    assert view.bound_gpu == pytest.approx(5.0)
    assert [s for _, s in view.layer_shares] == pytest.approx([0.6, 0.3])
    # A graph step (8 ms) shorter than its synced parts (9 ms): no host time beyond the launches, and the shares
    # are of the parts, adding up to 1.
    fast = SweepPoint("cpu-serial", 1, 100, None, 12500.0, 8.0, 1.0, layers, 20)
    view = analysis.amdahl_view(fast, launch_ms=0.05, threads=2, measured={})
    assert view.host_ms == pytest.approx(1.0) and view.p == pytest.approx(7 / 8)
    assert [s for _, s in view.layer_shares] == pytest.approx([6 / 9, 3 / 9])


@pytest.mark.parametrize("config", ["net-1h", "cnn"])
def test_lockstep_serial_and_parallel_agree(config):
    rows = analysis.lockstep(load_config(config).model, "cpu-serial", "cpu-parallel", steps=20, batch=32)
    assert len(rows) == 20
    assert max(r.weight_diff for r in rows) <= 1e-5
    assert max(r.loss_diff for r in rows) <= 1e-5
    assert all(r.ok for r in rows)
    assert rows[-1].loss_a != rows[0].loss_a  # the weights moved, so the comparison means something


@pytest.mark.gpu
@pytest.mark.parametrize("config", ["net-1h", "cnn"])
def test_lockstep_serial_and_cuda(config):
    rows = analysis.lockstep(load_config(config).model, "cpu-serial", "cuda", steps=20, batch=32)
    print(f"{config}: largest relative weight difference cpu-serial vs cuda over 20 steps: "
          f"{max(r.weight_diff for r in rows):.2e}, loss {max(r.loss_diff for r in rows):.2e}")
    assert rows[0].weight_diff <= 1e-5  # one step: the kernels agree
    # Over 20 steps on random images, near-ties in ReLU and max-pool make float32 training chaotic at about
    # 1e-4: PyTorch's own float32 run of these steps ended 9.7e-05 from its float64 run on one machine
    # (see test_torch_interop.py::test_float32_gradients_are_no_less_precise_than_pytorchs).
    assert max(r.weight_diff for r in rows) <= 2.5e-4


def _fake_bench(monkeypatch, interrupt_at=None, raise_at=None):
    """run_sweep's measurements replaced by a made-up rate per call (the grid's bookkeeping is what is tested);
    the call numbered ``interrupt_at`` (from 0) raises KeyboardInterrupt, as a Ctrl-C during that point would,
    and the one numbered ``raise_at`` a ConfigError, as a point refused for its memory would."""
    from types import SimpleNamespace

    from nncore import bench, sweep

    calls = []

    def fake(name, arch, batch, steps, repeats, warmup, threads, model=None):
        if len(calls) == interrupt_at:
            raise KeyboardInterrupt
        if len(calls) == raise_at:
            raise ConfigError(f"batch size {batch} with this network needs more memory than there is")
        calls.append((arch, batch))
        return SimpleNamespace(arch=arch, threads=threads or 1, samples_per_s=1000.0 * (len(calls) + 1),
                               ms_per_step=1.0, gflops=1.0, layers=[]), None

    monkeypatch.setattr(bench, "bench_layerlab", fake)
    monkeypatch.setattr(sweep, "count_launches", lambda *a: 7)
    return calls


def test_a_sweep_keeps_its_points_when_a_later_one_is_refused(monkeypatch):
    """A point refused after others were measured (its memory, say) ended the sweep with the measured ones lost:
    they are returned, with what refused the next one."""
    from nncore import sweep

    model = load_config("quadrant").model
    _fake_bench(monkeypatch, raise_at=2)
    points = sweep.run_sweep(model, ["cpu-serial", "cpu-parallel"], [16, 32], [None], [2], 1, 1, 1)
    assert isinstance(points, sweep.Stopped) and points.of == 4 and len(points) == 2
    assert [(p.arch, p.batch) for p in points] == [("cpu-serial", 16), ("cpu-parallel", 16)]
    assert "batch size 32" in str(points.error)
    calls = _fake_bench(monkeypatch, raise_at=0)  # refused first: nothing to keep, the error as it came
    with pytest.raises(ConfigError, match="batch size 16"):
        sweep.run_sweep(model, ["cpu-serial"], [16, 32], [None], [2], 1, 1, 1)
    assert calls == []


def test_a_batch_the_buffers_cannot_index_is_refused_before_any_point(monkeypatch):
    """batch 8 then 2**31 - 1: the second was refused only after the first was measured, which was then lost."""
    from nncore import sweep

    model = load_config("quadrant").model
    calls = _fake_bench(monkeypatch)
    with pytest.raises(ConfigError, match="batch size 2147483647 times the widest layer's 16 values"):
        sweep.run_sweep(model, ["cpu-serial"], [8, 2**31 - 1], [None], [2], 1, 1, 1)
    assert calls == []  # nothing measured


def test_a_sweep_stopped_between_points_keeps_those_measured(monkeypatch):
    from nncore import sweep

    model = load_config("quadrant").model
    calls = _fake_bench(monkeypatch)
    asks = []
    stop_after = 3  # points measured before should_stop says yes

    def should_stop():
        asks.append(len(calls))
        return len(calls) >= stop_after

    points = sweep.run_sweep(model, ["cpu-serial", "cpu-parallel"], [16, 32, 48], [None], [2], 1, 1, 1,
                             should_stop=should_stop)
    assert isinstance(points, sweep.Stopped) and points.of == 6 and len(points) == stop_after
    assert asks == [0, 1, 2, 3]  # asked before every point, and nothing measured after the yes
    # Measured in (batch, arch) order: serial 16, parallel 16, serial 32; reported in the grid's order.
    assert [(p.arch, p.batch) for p in points] == [("cpu-serial", 16), ("cpu-serial", 32), ("cpu-parallel", 16)]
    assert points[2].speedup == pytest.approx(points[2].samples_per_s / points[0].samples_per_s)
    # Never stopped: a plain list of every point.
    calls.clear()
    full = sweep.run_sweep(model, ["cpu-serial"], [16, 32], [None], [2], 1, 1, 1, should_stop=lambda: False)
    assert not isinstance(full, sweep.Stopped) and len(full) == 2


def test_a_ctrl_c_during_a_point_drops_that_point_only(monkeypatch):
    from nncore import sweep

    model = load_config("quadrant").model
    _fake_bench(monkeypatch, interrupt_at=2)
    points = sweep.run_sweep(model, ["cpu-serial", "cpu-parallel"], [16, 32], [None], [2], 1, 1, 1)
    assert isinstance(points, sweep.Stopped) and points.of == 4
    assert [(p.arch, p.batch) for p in points] == [("cpu-serial", 16), ("cpu-parallel", 16)]
    _fake_bench(monkeypatch, interrupt_at=0)  # in the first point: nothing to keep, the Ctrl-C goes on up
    with pytest.raises(KeyboardInterrupt):
        sweep.run_sweep(model, ["cpu-serial"], [16, 32], [None], [2], 1, 1, 1)


def test_a_karp_flatt_fraction_above_1_is_explained_in_the_sweep_table():
    """A parallel point slower than cpu-serial gives a Karp-Flatt fraction above 1, which read as a serial share
    of more than all of the work with nothing said; the table now says what it means, and only then."""
    import io

    from nncore import sweep

    for rate, noted in ((800.0, True), (1500.0, False)):
        pts = analysis.derive([_point("cpu-serial", 1, 64, 1000.0), _point("cpu-parallel", 2, 64, rate)])
        out = io.StringIO()
        sweep.report(pts, None, out)
        kf = pts[1].karp_flatt
        assert (kf > 1) == noted and kf == pytest.approx((1000.0 / rate - 0.5) / 0.5)
        assert (analysis.KF_ABOVE_1 in out.getvalue()) == noted, out.getvalue()
