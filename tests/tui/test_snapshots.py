"""Screenshots of every view at 80x24 (the smallest terminal we support) and 140x45, compared with the accepted
ones in __snapshots__.

After an intended change of the look: pytest tests/tui/test_snapshots.py --snapshot-update, then look at the
new SVGs before committing them.
"""
import pytest

from tests.tui.conftest import record, scripted_run
from tui.app import LayerlabApp
from tui.state import RunRecord

SIZES = [(80, 24), (140, 45)]


def _scripted(app: LayerlabApp) -> None:
    """A run fed to the Train view, and two runs in the store (started at fixed times) for the Runs view."""
    app.current = RunRecord("quadrant", "cpu-serial", 1, 32)
    app.runs.append(app.current)
    for msg in scripted_run():
        app._run_message(msg)
    cfg = app._run_config()
    for i, (arch, rate) in enumerate([("cpu-serial", 6000.0), ("cpu-parallel", 9000.0)]):
        events = scripted_run(rate=rate)
        if i:  # the second run learns faster: its curves differ
            events = [{**e, "loss": e["loss"] * 0.6} if e["event"] == "step" else
                      {**e, "test_loss": e["test_loss"] * 0.6, "test_acc": min(1.0, e["test_acc"] + 0.05)}
                      if e["event"] == "epoch_end" else e for e in events]
        run_id = record(app.store, events, {**cfg, "train": {**cfg["train"], "arch": arch}})
        app.store.update(run_id, started=1795000000.0 + 3600 * i, ended=1795000060.0 + 3600 * i)
    app._show_runs()


def _sweep(app: LayerlabApp) -> None:
    from nncore import analysis

    layers = [{"name": "layer 0 (Linear)", "fwd_ms": 20.0, "bwd_ms": 30.0, "share": 0.8, "gflops": 1.0},
              {"name": "optimizer", "fwd_ms": 10.0, "bwd_ms": 0.0, "share": 0.2, "gflops": 0.0}]
    pts = analysis.derive([analysis.SweepPoint(a, t, b, None, s, 1e3 * b / s, 1.0, layers, 9)
                           for a, t, b, s in [("cpu-serial", 1, 64, 1000.0), ("cpu-parallel", 2, 64, 1700.0),
                                              ("cpu-serial", 1, 256, 2000.0), ("cpu-parallel", 2, 256, 4300.0)]])
    view = analysis.amdahl_view(pts[2], 0.01, 2, {"cpu-parallel": 2.15})
    pane = app.query_one("#analysis-pane")
    pane.progress(4, 4, "done: 4 points")  # an indeterminate progress bar would animate
    pane.show([p.to_dict() for p in pts], view.__dict__)


def _before(keys, feed=None):
    async def run_before(pilot):
        if feed is not None:
            feed(pilot.app)
        await pilot.press(*keys)
        await pilot.pause()
        pilot.app.clear_notifications()
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("config,keys,feed", [
    pytest.param("cnn", [], None, id="model"),
    pytest.param("quadrant", ["2"], None, id="settings"),
    pytest.param("quadrant", ["3"], _scripted, id="train"),
    pytest.param("quadrant", ["4"], _scripted, id="runs"),
    pytest.param("quadrant", ["4", "space", "down", "space"], _scripted, id="runs-overlaid"),
    pytest.param("quadrant", ["5"], _sweep, id="analysis"),
    pytest.param("quadrant", ["question_mark"], None, id="help"),
])
def test_every_view(fixed_env, snap_compare, config, keys, feed, size, monkeypatch):
    monkeypatch.setenv("TZ", "UTC")  # the Runs view's start times
    __import__("time").tzset()
    assert snap_compare(LayerlabApp(config), terminal_size=size, run_before=_before(keys, feed))


def test_an_invalid_network_is_marked_where_it_is_wrong(fixed_env, snap_compare):
    def break_it(app):  # a kernel larger than the image, as typed into the layer's field
        app.query_one("#model-pane").fields[2].value = "40"

    assert snap_compare(LayerlabApp("cnn"), terminal_size=(80, 24), run_before=_before([], break_it))
