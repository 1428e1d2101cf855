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
