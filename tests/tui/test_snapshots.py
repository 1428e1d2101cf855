"""Screenshots of the main views at fixed terminal sizes, compared with the accepted ones in __snapshots__.

After an intended change of the look: pytest tests/tui/test_snapshots.py --snapshot-update, then look at the
new SVGs before committing them.
"""
from tests.tui.conftest import scripted_run
from tui.app import LayerlabApp
from tui.state import Draft, RunRecord, spec_key


def _scripted(app: LayerlabApp) -> None:
    app.current = RunRecord("quadrant", "cpu-serial", 1, 32, 0, spec_key=spec_key(app.draft.spec()))
    app.runs.append(app.current)
    for msg in scripted_run():
        app._run_message(msg)
    app.runs.append(RunRecord("quadrant", "cpu-parallel", 2, 32, 3, 0.97, 0.04, 9000.0, "finished",
                              spec_key=spec_key(app.draft.spec())))
    app._show_runs()


def test_model_view(fixed_env, snap_compare):
    assert snap_compare(LayerlabApp("cnn"), terminal_size=(100, 30))


def test_model_view_at_80x24(fixed_env, snap_compare):
    assert snap_compare(LayerlabApp("quadrant"), terminal_size=(80, 24))


def test_invalid_network(fixed_env, snap_compare, tmp_path):
    # Opened from a file rather than typed, so the screenshot does not race the live edit.
    path = tmp_path / "bad.toml"
    path.write_text(Draft.from_model({"input": [1, 28, 28], "loss": "cross_entropy", "layers": [
        {"type": "Conv2D", "out_channels": 64, "kernel_size": 40}, {"type": "ReLU"}, {"type": "Flatten"},
        {"type": "Linear", "out_features": 10}]}, "bad").to_toml({"dataset": "fashion-subset"}, {}))
    assert snap_compare(LayerlabApp(str(path)), terminal_size=(100, 30))


def test_settings_view(fixed_env, snap_compare):
    assert snap_compare(LayerlabApp("quadrant"), press=["2"], terminal_size=(100, 30))


def test_training_view(fixed_env, snap_compare):
    async def feed(pilot):
        _scripted(pilot.app)
        await pilot.press("3")
        await pilot.pause()
        pilot.app.clear_notifications()
        await pilot.pause()

    assert snap_compare(LayerlabApp("quadrant"), terminal_size=(100, 30), run_before=feed)


def test_runs_view(fixed_env, snap_compare):
    async def feed(pilot):
        _scripted(pilot.app)
        await pilot.press("4")
        await pilot.pause()
        pilot.app.clear_notifications()
        await pilot.pause()

    assert snap_compare(LayerlabApp("quadrant"), terminal_size=(100, 30), run_before=feed)


def test_help_screen(fixed_env, snap_compare):
    assert snap_compare(LayerlabApp("quadrant"), press=["question_mark"], terminal_size=(100, 30))


def test_analysis_view(fixed_env, snap_compare):
    from nncore import analysis

    async def feed(pilot):
        layers = [{"name": "layer 0 (Linear)", "fwd_ms": 20.0, "bwd_ms": 30.0, "share": 0.8, "gflops": 1.0},
                  {"name": "optimizer", "fwd_ms": 10.0, "bwd_ms": 0.0, "share": 0.2, "gflops": 0.0}]
        pts = analysis.derive([analysis.SweepPoint(a, t, b, None, s, 1e3 * b / s, 1.0, layers, 9)
                               for a, t, b, s in [("cpu-serial", 1, 64, 1000.0), ("cpu-parallel", 2, 64, 1700.0),
                                                  ("cpu-serial", 1, 256, 2000.0), ("cpu-parallel", 2, 256, 3800.0)]])
        view = analysis.amdahl_view(pts[0], 0.01, 2, {"cpu-parallel": 1.7})
        pane = pilot.app.query_one("#analysis-pane")
        pane.progress(4, 4, "done")  # an indeterminate progress bar would animate
        pane.show([p.to_dict() for p in pts], view.__dict__)
        await pilot.press("5")
        await pilot.pause()

    assert snap_compare(LayerlabApp("quadrant"), terminal_size=(100, 30), run_before=feed)
