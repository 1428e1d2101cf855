"""The app driven as a person would (Textual's pilot), with the real training process where it matters."""
import asyncio
import json
import os
import signal
import time

import pytest
from textual.widgets import Button, DataTable, Input, Select

from nncore.config import load_config
from tests.tui.conftest import scripted_run, wait_for
from tui.app import LayerlabApp
from tui.panes.runs import RunsPane
from tui.screens.help import HelpScreen
from tui.state import STORE_COLUMNS
from tui.widgets.charts import Chart
from tui.widgets.timing import TimingBars

SIZE = (100, 32)


def recording(app):
    """Keep every message the app gets from the training process."""
    seen = []
    original = app._run_message

    def record(msg):
        seen.append(msg)
        original(msg)

    app._run_message = record
    return seen


def param(app, name):
    """The Model view's field for the selected layer's parameter ``name``."""
    return next(f for f in app.query_one("#model-pane").fields if getattr(f, "param", None) and f.param.name == name)


async def test_edit_the_network(fixed_env):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one("#layers", DataTable)
        assert table.row_count == 5
        app.query_one("#preset", Select).value = "cnn"
        await wait_for(pilot, lambda: app.draft.name == "cnn")
        await pilot.pause()
        assert app.draft.name == "cnn" and table.row_count == 5
        assert "64x26x26" in str(table.get_row_at(0)) and app.query_one("#dataset", Select).value == "fashion-subset"
        table.focus()
        await pilot.press("a")  # asks for the type: Linear is first
        await pilot.press("enter")
        await wait_for(pilot, lambda: table.row_count == 6)
        assert app.draft.layers[1] == {"type": "Linear", "out_features": 16}
        table.focus()
        await pilot.press("d")
        assert table.row_count == 5 and app.draft.layers[1]["type"] == "ReLU"
        # An invalid network: marked at the layer at fault, training disabled.
        table.move_cursor(row=0)
        await pilot.pause()
        param(app, "kernel_size").value = "40"
        await wait_for(pilot, lambda: app.query_one("#model-pane").error is not None)
        status = str(app.query_one("#model-status").render())
        assert "layer 0 (Conv2D): kernel_size 40" in status
        assert str(table.get_row_at(0)[0]).startswith("✗")
        await wait_for(pilot, lambda: app.query_one("#start", Button).disabled, 10)  # follows by message
        table.focus()
        await pilot.press("s")
        assert app.handle is None
        param(app, "kernel_size").value = "3"
        await wait_for(pilot, lambda: app.query_one("#model-pane").error is None)
        await wait_for(pilot, lambda: not app.query_one("#start", Button).disabled, 10)


async def test_home_and_end_select_the_first_and_last_layer_and_an_empty_network_says_what_to_do(fixed_env):
    """End did nothing in the layer table (End then Enter edited layer 0); with every layer removed the status
    said the config file's words, "layers must be a non-empty list of layer tables"."""
    app = LayerlabApp("cnn")
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one("#layers", DataTable)
        table.focus()
        await pilot.press("end")
        assert table.cursor_row == len(app.draft.layers) - 1 == 4
        await pilot.press("enter")  # the last layer's fields
        await pilot.pause()
        assert app.query_one("#model-pane").selected() == 4
        table.focus()
        await pilot.press("home")
        assert table.cursor_row == 0
        for _ in range(5):
            await pilot.press("d")
        await wait_for(pilot, lambda: not app.draft.layers)
        await pilot.pause()
        status = str(app.query_one("#model-status").render())
        assert status == "✗ the network has no layers: press a to add one", status


async def test_the_decision_boundary_says_what_its_colours_and_axes_are(fixed_env):
    """Once drawn, the boundary panel was colours and dots with no title or axes."""
    from tests.tui.conftest import screen_text

    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3")
        boundary = next(m for m in scripted_run() if m["event"] == "boundary")
        app.query_one("#boundary").show(boundary)
        await pilot.pause()
        text = screen_text(app)
        assert "p(1): blue→orange" in text and "x₁ → x₂ ↑ ±1.1" in text, text
        # A data set's own extent (not quite symmetric, six digits) is said rounded: it was cut off.
        app.query_one("#boundary").show({**boundary, "extent": [-1.12924, 1.12913, -1.1291, 1.1302]})
        await pilot.pause()
        assert "x₁ → x₂ ↑ ±1.1" in screen_text(app)
        app.query_one("#boundary").clear()
        await pilot.pause()
        assert "p(1)" not in screen_text(app)


async def test_a_views_keys_act_when_the_view_tabs_have_the_focus(fixed_env):
    """Tab stops on the view tabs; from there a view's own keys (a in Model, w in Runs) did nothing, as they are
    bound inside the view. They act, and the focus goes into the view."""
    from textual.widgets import Tabs

    from tui.panes.runs import RunsTable
    from tui.screens.pick import PickScreen

    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        app.query_one(Tabs).focus()
        await pilot.pause()
        await pilot.press("a")  # add a layer: asks for its type
        await wait_for(pilot, lambda: isinstance(app.screen, PickScreen), 10)
        await pilot.press("escape")
        await pilot.pause()
        await pilot.press("4")
        app.query_one(Tabs).focus()
        await pilot.pause()
        table = app.query_one(RunsTable)
        assert not table.every
        await pilot.press("w")
        await wait_for(pilot, lambda: table.every, 10)
        assert app.focused is table


async def test_bad_settings_are_marked_inline(fixed_env):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        app.query_one("#lr", Input).value = "fast"
        await wait_for(pilot, lambda: app.query_one("#settings-pane").error is not None)
        assert app.query_one("#lr", Input).has_class("error")
        assert "train.lr 'fast' must be a finite number" in str(app.query_one("#settings-status").render())
        await wait_for(pilot, lambda: app.query_one("#start", Button).disabled, 10)  # follows by message
        app.query_one("#lr", Input).value = "0.1"
        await wait_for(pilot, lambda: app.query_one("#settings-pane").error is None)
        await wait_for(pilot, lambda: not app.query_one("#start", Button).disabled, 10)


async def test_a_real_run_on_cpu_serial(tmp_path):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        seen = recording(app)
        assert app.query_one("#settings-pane").set_arch("cpu-serial")
        await pilot.press("s")
        await wait_for(pilot, lambda: sum(m["event"] == "epoch_end" for m in seen) >= 2)
        await pilot.pause(0.1)
        last = [m for m in seen if m["event"] == "epoch_end"][-1]
        assert next(m for m in seen if m["event"] == "run_started")["arch"] == "cpu-serial"
        # The charts hold the events' values: every step's loss (x in epochs) and each epoch's test metrics.
        spe = next(m for m in seen if m["event"] == "run_started")["steps_per_epoch"]
        steps = [m for m in seen if m["event"] == "step"]
        epochs = [m for m in seen if m["event"] == "epoch_end"]
        loss = app.query_one("#train-loss", Chart).series
        assert loss["train (raw)"][0] == pytest.approx([m["step"] / spe for m in steps])
        assert loss["train (raw)"][1] == pytest.approx([m["loss"] for m in steps])
        assert loss["test"] == (pytest.approx([m["epoch"] for m in epochs]), pytest.approx([m["test_loss"] for m in epochs]))
        assert app.query_one("#train-acc", Chart).series["test acc"][1] == pytest.approx([m["test_acc"] for m in epochs])
        timed = [m for m in seen if m["event"] == "epoch_end" and m["timings"]]
        assert timed and app.query_one(TimingBars).timings == timed[-1]["timings"]
        assert len(timed[-1]["timings"]) == 5 + 3  # every layer, then data, loss and optimizer
        shown = str(app.query_one("#accuracy").render())
        newest = [m for m in seen if m["event"] == "epoch_end"][-1]
        assert f"epoch {newest['epoch']}: test acc {newest['test_acc']:.4f}" in shown
        assert any(m["event"] == "boundary" for m in seen) and app.query_one("#boundary").grid is not None
        await pilot.press("x")
        await wait_for(pilot, lambda: app.handle is None)
        await pilot.press("4")
        table = app.query_one("#runs-table", DataTable)
        assert table.row_count == 1
        row = dict(zip(STORE_COLUMNS, (str(c) for c in table.get_row_at(0))))
        assert row["network"] == "quadrant" and row["arch"] == "cpu-serial" and row["status"] == "stopped"
        assert last["epoch"] >= 2
        app.query_one("#runs-table").focus()
        await pilot.press("e")
        await pilot.pause()
        app.screen.query_one("#path-input", Input).value = str(tmp_path / "runs.json")
        await pilot.press("enter")
        await wait_for(pilot, lambda: (tmp_path / "runs.json").exists())
        exported = json.loads((tmp_path / "runs.json").read_text())
        assert exported[0]["arch"] == "cpu-serial" and exported[0]["status"] == "stopped"
        assert len(exported[0]["epochs"]) == app.runs[0].epochs >= 2
    # The training process recorded the run in the store, each epoch as the app saw it.
    from nncore.store import Store

    (stored,) = Store().runs()
    assert stored["status"] == "stopped" and stored["arch"] == "cpu-serial"
    assert Store().run(stored["id"])["epochs"] == [m for m in seen if m["event"] == "epoch_end"]


async def test_pause_single_step_and_resume(fixed_env):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        seen = recording(app)
        await pilot.press("s")
        await wait_for(pilot, lambda: any(m["event"] == "step" for m in seen))
        await pilot.press("p")
        await pilot.pause(0.5)
        n = len([m for m in seen if m["event"] == "step"])
        await pilot.pause(0.5)
        assert len([m for m in seen if m["event"] == "step"]) == n  # paused: nothing moves
        await pilot.press("n")
        await wait_for(pilot, lambda: len([m for m in seen if m["event"] == "step"]) == n + 1, 10)
        assert app.query_one("#step", Button).disabled is False
        runs = app.query_one(RunsPane)  # the run's row says paused (it said running), then running again
        assert [r["status"] for r in runs.rows][:1] == ["paused"], runs.rows
        await pilot.press("p")
        await wait_for(pilot, lambda: len([m for m in seen if m["event"] == "step"]) > n + 3, 10)
        assert [r["status"] for r in runs.rows][:1] == ["running"], runs.rows
        await pilot.press("x")
        await wait_for(pilot, lambda: app.handle is None)


async def test_run_controls_that_cannot_act_say_why(fixed_env):
    """s during a run, n while not paused, p, n and x with no run: their keys are out of the footer then, and
    pressing them did nothing at all; now each says why in a notice. Typed into a text field they are text."""
    app = LayerlabApp("quadrant")
    app.NOTIFICATION_TIMEOUT = 600  # (a notice expires after 5 s, which a loaded machine can take between two)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        notices = lambda: [str(n.message) for n in app._notifications]  # noqa: E731
        await pilot.press("3")
        for key in ("p", "n", "x"):
            await pilot.press(key)
        await pilot.pause()
        assert notices() == ["no run to pause: s (F6) starts one", "no run to step: s (F6) starts one",
                             "nothing to stop: no run or sweep is going on"]
        app.clear_notifications()
        app.query_one("#epochs", Input).value = "500"  # long enough to outlast the test
        await wait_for(pilot, lambda: app.settings_ok)
        seen = recording(app)
        await pilot.press("s")
        await wait_for(pilot, lambda: any(m["event"] == "step" for m in seen))
        await pilot.press("s", "f6", "n")
        await pilot.pause()
        assert notices() == ["a run is going on: x (F9) stops it, then s (F6) starts the next"] * 2 + [
            "n (F8) trains one step of a paused run: p (F7) pauses it first"]
        assert len(app.runs) == 1  # no second run
        app.clear_notifications()
        await pilot.press("2")
        field = app.query_one("#epochs", Input)
        field.focus()
        await pilot.press("end", "s", "n")
        await pilot.pause()
        assert field.value == "500sn" and notices() == []
        assert app.handle is not None
        await pilot.press("f9")  # (x would be typed into the field)
        await wait_for(pilot, lambda: app.handle is None)


async def test_killed_child_keeps_partial_results_and_a_new_run_starts(fixed_env):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        seen = recording(app)
        await pilot.press("s")
        await wait_for(pilot, lambda: any(m["event"] == "epoch_end" for m in seen))
        os.kill(app.handle.proc.pid, signal.SIGKILL)
        await wait_for(pilot, lambda: app.handle is None, 10)
        assert app.runs[0].status == "died" and app.runs[0].epochs >= 1 and app.runs[0].test_acc is not None
        assert "died" in str(app.query_one("#run-state").render())
        await pilot.press("s")
        await wait_for(pilot, lambda: app.handle is not None and len(app.runs) == 2)
        await pilot.press("q")


async def test_app_stays_responsive_during_a_run(fixed_env):
    app = LayerlabApp("cnn")
    async with app.run_test(size=SIZE) as pilot:
        seen = recording(app)
        app.query_one("#epochs", Input).value = "100"  # long enough to outlast the measurement
        app.query_one("#threads", Input).value = "1"  # leave the app a core of its own on small CI machines
        await wait_for(pilot, lambda: app.settings_ok)
        ticks = []
        app.set_interval(0.05, lambda: ticks.append(time.monotonic()))
        await pilot.press("s")
        await wait_for(pilot, lambda: sum(m["event"] == "step" for m in seen) >= 3, 120)
        ticks.clear()
        await asyncio.sleep(3.0)
        assert app.handle is not None  # the run was going on all along
        gaps = sorted(b - a for a, b in zip(ticks, ticks[1:]))
        print(f"timer gaps during training: median {gaps[len(gaps) // 2] * 1e3:.1f} ms, "
              f"max {gaps[-1] * 1e3:.1f} ms over {len(gaps)} ticks")
        # Training in this process would hold the GIL and stop the timer for whole steps and epochs; a child
        # process leaves it ticking.  The bounds are loose because CI machines are shared and noisy (two test
        # workers and the training process on two cores): the timer must have kept its pace and never stalled
        # for 1.5 s.
        assert len(gaps) > 30 and gaps[len(gaps) // 2] < 0.075 and gaps[-1] < 1.5, f"tick gaps {gaps}"
        assert app.handle.proc.pid != os.getpid()
        await pilot.press("q")


async def test_help_and_palette_commands(fixed_env):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("f12")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("f12")
        assert not isinstance(app.screen, HelpScreen)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for t in ("Start training", "Stop", "Pause", "Export runs", "Rerun", "Run a sweep", "Show Train",
                  "Backend: cpu-serial", "Backend: cpu-parallel"):
            assert t in titles
        assert "Backend: cuda" not in titles  # unavailable backends are not offered
        ids = {b.id for b in app.BINDINGS}
        assert {"start", "pause", "step", "stop", "help", "quit", "cycle_backend", "save_config"} <= ids


async def test_scripted_events_fill_the_views(fixed_env):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        from tui.state import RunRecord

        app.current = RunRecord("quadrant", "cpu-serial", 1, 32, 0)
        app.runs.append(app.current)
        for msg in scripted_run():
            app._run_message(msg)
        await pilot.pause()
        assert app.query_one("#train-loss", Chart).series["test"][1] == pytest.approx([0.65, 0.325, 0.65 / 3])
        assert app.runs[0].status == "finished" and app.runs[0].test_acc == pytest.approx(0.97)


async def test_rerun_on_the_next_backend(fixed_env, fake_runs):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("s")
        await wait_for(pilot, lambda: app.handle is None and app.runs and app.runs[0].status == "finished")
        await pilot.press("4")
        await pilot.press("r")
        assert app.runs[0].arch == "cpu-parallel"  # as the run reported (the app's default backend)
        assert fake_runs[-1]["train"]["arch"] == "cpu-serial"  # the next available one (cuda is not)
        assert fake_runs[-1]["model"] == app.runs[0].config["model"] and len(app.runs) == 2


async def test_a_real_sweep_in_the_analysis_view(fixed_env):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("5")
        app.query_one("#sweep-batch", Input).value = "32"
        app.query_one("#sweep-steps", Input).value = "2"
        await pilot.pause()
        await pilot.press("w")
        assert app.sweeper is not None
        await wait_for(pilot, lambda: app.sweeper is None, 180)
        pane = app.query_one("#analysis-pane")
        table = app.query_one("#sweep-table", DataTable)
        assert table.row_count == 2
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(2)]
        assert [r[0] for r in rows] == ["cpu-serial", "cpu-parallel"] and rows[0][7] == "1.00"
        assert [p["arch"] for p in pane.points] == ["cpu-serial", "cpu-parallel"]
        assert "Amdahl, from the cpu-serial profile" in str(app.query_one("#sweep-amdahl").render())
        assert str(app.query_one("#sweep-status").render()) == "done: 2 points"  # (it said "1/1 done: 2 points")
        await pilot.pause()
        # The charts hold the sweep's points: samples/s against batch per arch, and each part's ms.
        series = app.query_one("#sweep-throughput", Chart).series
        for p in pane.points:
            assert series[p["arch"]] == ([32.0], [pytest.approx(p["samples_per_s"])])
        parts = app.query_one("#sweep-layers", Chart).series["cpu-serial"]
        assert parts[1] == pytest.approx([l["fwd_ms"] + l["bwd_ms"] for l in pane.points[0]["layers"]])
        assert app.query_one("#sweep-speedup", Chart).series["measured"][1] == [pytest.approx(pane.points[1]["speedup"])]


async def _start_sweep(pilot, app, batches: str, steps: str) -> None:
    """A cpu-serial sweep over ``batches``, started from the Analysis view."""
    await pilot.press("5")
    app.query_one("#sweep-archs", Input).value = "cpu-serial"
    app.query_one("#sweep-batch", Input).value = batches
    app.query_one("#sweep-steps", Input).value = steps
    await pilot.pause()
    await pilot.press("w")


def _status(app) -> str:
    return str(app.query_one("#sweep-status").render())


async def test_a_sweep_stops_after_its_current_point_and_keeps_the_rest(fixed_env):
    """The stop key did nothing to a sweep (it only stopped training runs), so a long sweep could only be waited
    out, or lost by quitting; now it stops before the next point and keeps what it measured."""
    from nncore.store import Store

    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await _start_sweep(pilot, app, "16,24,32,40", "1500")
        await wait_for(pilot, lambda: _status(app).startswith("2/4"), 180)  # two points in, the third under way
        assert app.check_action("stop", ()) and app.sweeper is not None
        # A bad value typed meanwhile is marked in its field; the progress keeps its line (the error replaced it).
        app.query_one("#sweep-steps", Input).value = "q"
        await pilot.pause()
        assert app.query_one("#sweep-steps", Input).has_class("error") and _status(app).startswith("2/4")
        app.query_one("#sweep-steps", Input).value = "1500"
        await pilot.pause()
        await pilot.press("f9")
        assert _status(app) == "stopping after the current point…"
        await wait_for(pilot, lambda: app.sweeper is None, 180)
        assert _status(app) == "stopped: 3 of 4 points measured (kept)"
        assert app.query_one("#sweep-table", DataTable).row_count == 3
        assert [p["batch"] for p in app.query_one("#analysis-pane").points] == [16, 24, 32]
        assert not app.check_action("stop", ())
        # The Amdahl view from the cpu-serial points it kept (it said "sweep cpu-serial to get ...").
        assert "Amdahl, from the cpu-serial profile" in str(app.query_one("#sweep-amdahl").render())
        # A new sweep starts with an empty table, not the last one's rows under its progress bar.
        await pilot.press("w")
        await wait_for(pilot, lambda: _status(app).startswith("0/4"), 60)
        assert app.query_one("#sweep-table", DataTable).row_count == 0
        assert app.query_one("#analysis-pane").points == []
        await pilot.press("4")  # stopped from another view: a notice says so (the status line is out of sight)
        await pilot.press("f9")
        assert any("stopping the sweep after its current point" in str(n.message) for n in app._notifications)
        await wait_for(pilot, lambda: app.sweeper is None, 180)
        assert _status(app) == "stopped: 1 of 4 points measured (kept)"
    run = Store().runs()[-1]  # (newest first: the first sweep is last)
    assert run["kind"] == "sweep" and run["status"] == "stopped"
    assert [p["batch"] for p in Store().run(run["id"])["points"]] == [16, 24, 32]
    assert Store().run(run["id"])["summary"]["stopped"] == {"points": 3, "of": 4}


async def test_quitting_during_a_sweep_keeps_its_measured_points(fixed_env, monkeypatch):
    """Quitting mid-sweep killed the sweep's process after 3 s and every point it had measured was lost; now the
    point under way is cut short (SIGTERM) and the others are recorded as a stopped sweep."""
    import tui.app
    from nncore.store import Store

    monkeypatch.setattr(tui.app, "QUIT_WAIT_S", 0.3)  # (points far longer than that: the SIGTERM cuts one short)
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await _start_sweep(pilot, app, "16,24,32,40", "5000")
        await wait_for(pilot, lambda: _status(app).startswith("1/4"), 240)
        handle = app.sweeper
        started = time.monotonic()
        await pilot.press("ctrl+q")
    assert not handle.proc.is_alive() and handle.proc.exitcode == 0  # it ended itself after the SIGTERM
    assert time.monotonic() - started < 10
    (run,) = Store().runs()
    assert run["kind"] == "sweep" and run["status"] == "stopped"
    assert [p["batch"] for p in Store().run(run["id"])["points"]] == [16]


async def test_sweep_arguments_are_checked(fixed_env):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("5")
        app.query_one("#sweep-archs", Input).value = "cpu-serial,tpu"
        await pilot.pause()
        await pilot.press("w")
        assert app.sweeper is None and app.query_one("#sweep-archs", Input).has_class("error")
        assert "'tpu' is not one of" in str(app.query_one("#sweep-status").render())
        app.query_one("#sweep-archs", Input).value = "cuda"  # unavailable in the fixed environment
        app.query_one("#sweep-batch", Input).value = "64,x"
        await pilot.pause()
        await pilot.press("w")
        assert app.sweeper is None and app.query_one("#sweep-batch", Input).has_class("error")
        app.query_one("#sweep-archs", Input).value = "cpu-serial"  # (the status shows the first field's error)
        for text, needle in (("５", "batch '５' must be a whole number written in digits 0-9"),
                             (" , ", "batch: give one or more whole numbers from 1 up")):
            app.query_one("#sweep-batch", Input).value = text
            await pilot.pause()
            await pilot.press("w")
            assert app.sweeper is None and needle in str(app.query_one("#sweep-status").render())
        app.query_one("#sweep-archs", Input).value = ","
        app.query_one("#sweep-batch", Input).value = "64"
        await pilot.pause()
        await pilot.press("w")
        assert "archs: give one or more of cpu-serial" in str(app.query_one("#sweep-status").render())
        pane = app.query_one("#analysis-pane")
        app.query_one("#sweep-archs", Input).value = "cpu-serial, cpu-serial,cpu-parallel"
        app.query_one("#sweep-batch", Input).value = "64,32,64"
        job = pane.job()  # each backend and batch once, in the order given
        assert job["archs"] == ["cpu-serial", "cpu-parallel"] and job["batches"] == [64, 32]
        app.query_one("#sweep-archs", Input).value = "cuda"
        app.query_one("#sweep-archs", Input).focus()
        await pilot.press("enter")  # enter in a field runs the sweep too
        assert app.sweeper is None and "cuda is unavailable" in str(app.query_one("#sweep-status").render())
        app.query_one("#sweep-archs", Input).value = "cpu-serial"
        app.query_one("#sweep-filters", Input).value = "8"  # (the quadrant MLP has no Conv2D: the same net twice)
        app.query_one("#sweep-filters", Input).focus()
        await pilot.press("enter")
        assert app.sweeper is None and app.query_one("#sweep-filters", Input).has_class("error")
        assert "filters 8: the network has no Conv2D" in str(app.query_one("#sweep-status").render())


@pytest.mark.parametrize("field,value", [("samples", "x"), ("noise", "2"), ("test_ratio", "1.5"), ("val_ratio", "-1"),
                                         ("lr", "0"), ("momentum", "1.5"), ("batch_size", "0"), ("epochs", "-3"),
                                         ("seed", "x"), ("threads", "0"), ("path", "/no/such/dir")])
async def test_every_settings_field_answers_inline(fixed_env, field, value):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        if field == "path":
            app.query_one("#dataset", Select).value = "idx"
        app.query_one(f"#{field}", Input).value = value
        await wait_for(pilot, lambda: app.query_one("#settings-pane").error is not None)
        assert app.query_one(f"#{field}", Input).has_class("error")
        assert (value if field == "path" else field.split("_")[0]) in app.query_one("#settings-pane").error
        await wait_for(pilot, lambda: app.query_one("#start", Button).disabled, 10)  # follows by message


@pytest.mark.parametrize("name,value,needle", [
    ("input", "abc", "model.input 'abc' must be [features]"),
    ("out_features", "", "layer 0 (Linear): missing parameter 'out_features'"),
    ("out_features", "0", "layer 0 (Linear): out_features 0 must be >= 1"),
    ("out_features", "2.5", "layer 0 (Linear): out_features '2.5' must be a whole number"),
    ("in_features", "3", "layer 0 (Linear): in_features 3 does not match the input size 2")])
async def test_model_fields_answer_inline(fixed_env, name, value, needle):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        field = app.query_one("#input-shape", Input) if name == "input" else param(app, name)
        field.value = value
        await wait_for(pilot, lambda: "✗" in str(app.query_one("#model-status").render()))
        assert needle in str(app.query_one("#model-status").render())
        assert field.value == value  # never rewritten
        # the pane tells the app by message, so the button follows a moment later
        await wait_for(pilot, lambda: app.query_one("#start", Button).disabled, 10)


async def test_open_prompt_takes_preset_names_as_the_cli_does(fixed_env, tmp_path):
    """ctrl+o opens a preset by its bare name (as `layerlab train NAME` does), typed alone or after the directory
    the prompt starts in; an unknown name is answered with what is accepted."""
    from pathlib import Path

    from tui.screens.path import PathScreen

    shipped = sorted(p.stem for p in (Path(__file__).parents[2] / "assets" / "configs").glob("*.toml"))
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        for typed, name in (("cnn", "cnn"), ("{start}net-1h", "net-1h")):
            await pilot.press("ctrl+o")
            prompt = app.screen.query_one("#path-input", Input)
            prompt.value = typed.format(start=prompt.value)
            await pilot.press("enter")
            await wait_for(pilot, lambda: not isinstance(app.screen, PathScreen))
            assert app.draft.name == name and app.sub_title == name
        await pilot.press("ctrl+o")
        app.screen.query_one("#path-input", Input).value = "cnnx"
        await pilot.press("enter")
        hint = str(app.screen.query_one("#path-hint").render())
        assert isinstance(app.screen, PathScreen) and "cnnx: no such file, nor a preset" in hint
        assert all(name in hint for name in shipped)
        assert app.draft.name == "net-1h"
        # A file with a name of its own opens under that name, as `layerlab train` records it.
        named = tmp_path / "f.toml"
        named.write_text('name = "xor-probe"\n' + (Path(__file__).parents[2] / "assets/configs/quadrant.toml")
                         .read_text().split("\n", 1)[1])
        app.screen.query_one("#path-input", Input).value = str(named)
        await pilot.press("enter")
        await wait_for(pilot, lambda: not isinstance(app.screen, PathScreen))
        assert app.draft.name == "xor-probe" and app.sub_title == "xor-probe"


async def test_a_bare_name_typed_in_a_save_prompt_goes_where_the_prompt_started(fixed_env, tmp_path, monkeypatch):
    """The save prompt proposes DIR/quadrant.toml; a name typed over it alone went to the app's working
    directory (and the next prompts started there). It goes to DIR; to open, a relative path that is not
    in DIR is still found in the working directory."""
    from tui.screens.path import PathScreen

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+s")
        prompt = app.screen.query_one("#path-input", Input)
        start = prompt.value.rsplit("/", 1)[0]
        prompt.value = "mine.toml"
        await pilot.press("enter")
        await wait_for(pilot, lambda: not isinstance(app.screen, PathScreen))
        assert (tmp_path / "saved" / "mine.toml").is_file() and start == str(tmp_path / "saved")
        assert not (cwd / "mine.toml").exists()
        (cwd / "here.toml").write_text((tmp_path / "saved" / "mine.toml").read_text().replace("mine", "here"))
        await pilot.press("ctrl+o")
        app.screen.query_one("#path-input", Input).value = "here.toml"
        await pilot.press("enter")
        await wait_for(pilot, lambda: not isinstance(app.screen, PathScreen))
        assert app.draft.name == "here"


async def test_open_and_save_prompts_answer_bad_paths_in_place(fixed_env, tmp_path):
    from tui.screens.path import PathScreen
    from tui.screens.pick import ConfirmScreen

    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+o")
        assert isinstance(app.screen, PathScreen)
        app.screen.query_one("#path-input", Input).value = str(tmp_path / "missing.toml")
        await pilot.press("enter")
        assert isinstance(app.screen, PathScreen)  # still open, with the reason
        assert "no such file" in str(app.screen.query_one("#path-hint").render())
        await pilot.press("escape")
        await pilot.press("ctrl+s")
        prompt = app.screen.query_one("#path-input", Input)
        assert prompt.value == str(tmp_path / "saved" / "quadrant.toml")  # the default directory, absolute
        prompt.value = str(tmp_path / "no" / "dir" / "x.toml")
        await pilot.press("enter")
        assert isinstance(app.screen, PathScreen) and "no such directory" in str(app.screen.query_one("#path-hint").render())
        prompt.value = str(tmp_path / "mine.txt")
        await pilot.press("enter")
        assert isinstance(app.screen, PathScreen) and ".toml" in str(app.screen.query_one("#path-hint").render())
        prompt.value = str(tmp_path / "mine.toml")
        await pilot.press("enter")
        await wait_for(pilot, lambda: (tmp_path / "mine.toml").exists())
        assert not isinstance(app.screen, PathScreen)
        # Saved under a name of its own, the network takes it: in the file (what `layerlab train` records its
        # runs under) and in the header.
        saved = load_config(tmp_path / "mine.toml")
        assert saved.label == "mine" and app.draft.name == "mine" and app.sub_title == "mine"
        assert saved.description == load_config("quadrant").description != ""  # kept, not dropped
        # A file name no config name could be (too long, a tab in it): the network's name is what of it fits.
        long_name = "z" * 70 + "\tq"
        await pilot.press("ctrl+s")
        app.screen.query_one("#path-input", Input).value = str(tmp_path / f"{long_name}.toml")
        await pilot.press("enter")
        await wait_for(pilot, lambda: (tmp_path / f"{long_name}.toml").exists())
        assert load_config(tmp_path / f"{long_name}.toml").label == "z" * 64 == app.draft.name
        assert (tmp_path / "mine.toml").stat().st_mode & 0o777 == 0o666 & ~_umask()
        # Saving over it asks first; no keeps the file as it was.
        (tmp_path / "mine.toml").write_text("kept")
        await pilot.press("ctrl+s")
        app.screen.query_one("#path-input", Input).value = str(tmp_path / "mine.toml")
        await pilot.press("enter")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        assert isinstance(app.screen, PathScreen) and (tmp_path / "mine.toml").read_text() == "kept"
        await pilot.press("enter")
        await pilot.press("y")
        await wait_for(pilot, lambda: (tmp_path / "mine.toml").read_text() != "kept")
        assert load_config(tmp_path / "mine.toml").model["layers"] == app.draft.layers


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


needs_mpi = pytest.mark.skipif(__import__("tui.panes.settings", fromlist=["mpi_missing"]).mpi_missing() is not None,
                               reason="MPI (mpi4py and mpiexec) is not installed here")


@needs_mpi
async def test_a_distributed_run_shows_every_rank_and_stops_them_all(fixed_env):
    from tui.widgets.timing import RankBars

    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        seen = recording(app)
        assert app.query_one("#settings-pane").set_arch("cpu-serial")
        app.query_one("#ranks", Input).value = "2"
        app.query_one("#epochs", Input).value = "200"
        await wait_for(pilot, lambda: app.settings_ok)
        await pilot.press("s")
        await wait_for(pilot, lambda: any(m["event"] == "epoch_end" for m in seen), 120)
        await pilot.pause(0.1)
        started = next(m for m in seen if m["event"] == "run_started")
        assert started["ranks"] == 2
        epoch = [m for m in seen if m["event"] == "epoch_end"][-1]
        bars = app.query_one(RankBars)
        assert [r["rank"] for r in bars.ranks] == [0, 1] and bars.ranks == epoch["ranks"]
        assert 0 < bars.share == epoch["comm_share"] < 1
        assert app.query_one("#pause", Button).disabled  # ranks step together: no pausing
        assert not app.check_action("pause", ()) and app.check_action("stop", ())  # (the footer offered p Pause)
        assert "× 2 ranks" in str(app.query_one("#run-state").render())
        await pilot.press("x")  # Ctrl-C through mpiexec to both ranks
        await wait_for(pilot, lambda: app.handle is None, 60)
        assert app.runs[0].status == "stopped" and app.runs[0].ranks == 2
        await pilot.press("4")
        row = dict(zip(STORE_COLUMNS, (str(c) for c in app.query_one("#runs-table", DataTable).get_row_at(0))))
        # rank 0 recorded the run in the app's store
        assert [row["arch"], row["threads"], row["ranks"], row["status"]] == ["cpu-serial", "1", "2", "stopped"]
        assert row["network"] == "quadrant"  # (the ranks read a temporary run.json: once recorded as "run")


async def test_ranks_without_mpi_are_refused_in_place(fixed_env, monkeypatch):
    import tui.panes.settings as settings

    monkeypatch.setattr(settings, "mpi_missing", lambda: "mpi4py is not installed; pip install 'layerlab[mpi]'")
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        app.query_one("#ranks", Input).value = "3"
        await wait_for(pilot, lambda: app.query_one("#settings-pane").error is not None)
        assert app.query_one("#ranks", Input).has_class("error")
        assert "train.ranks 3: mpi4py is not installed" in app.query_one("#settings-pane").error
        await wait_for(pilot, lambda: app.query_one("#start", Button).disabled, 10)
        app.query_one("#ranks", Input).value = "1"  # one rank needs no MPI
        await wait_for(pilot, lambda: app.query_one("#settings-pane").error is None)


def test_a_failed_distributed_run_is_explained_by_the_ranks_own_error():
    from tui.child import _rank_error

    lines = ["[mpiexec@vm] Sending Ctrl-C to processes as requested\n",
             "layerlab: error: rank 1: cuda is unavailable here: no CUDA driver\n",
             "Abort(4) on node 1 (rank 1 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 4) - process 1\n"]
    assert _rank_error(lines, 4) == "rank 1: cuda is unavailable here: no CUDA driver"
    assert _rank_error(lines[2:] + ["Segmentation fault\n"], 139) == "Segmentation fault"
    assert _rank_error([lines[0]], 137) == "mpiexec exited with code 137"




def test_config_errors_about_the_data_are_told_apart_from_errors_in_the_network():
    """The app opens a config whose network is fine but does not fit its data (another dataset would fix it),
    and refuses one whose network is wrong: told by the error itself, not by its wording."""
    from nncore.config import fit_model
    from nncore.data import DatasetInfo, describe
    from nncore.errors import ConfigError
    from tui.app import _about_data

    def error(fn):
        with pytest.raises(ConfigError) as info:
            fn()
        return info.value

    net = {"loss": "cross_entropy", "layers": [{"type": "Linear", "out_features": 3}]}
    assert _about_data(error(lambda: fit_model(net, DatasetInfo("x", (5,), 4))))  # 3 outputs, 4 classes
    assert _about_data(error(lambda: fit_model({**net, "input": [6]}, DatasetInfo("x", (5,), 3))))  # width
    assert _about_data(error(lambda: describe("no-such-dataset", None)))
    bad = {"loss": "cross_entropy", "layers": [{"type": "Linear", "out_features": 0}]}
    assert not _about_data(error(lambda: fit_model(bad, DatasetInfo("a dataset", (5,), 3))))


async def test_the_training_process_reading_its_data_shows_in_the_status(fixed_env, monkeypatch):
    """A big CSV file takes the training process seconds to read: its progress (nncore.tabular's, relayed by the
    child as "loading" lines) replaces "starting a training process…" until the run starts."""
    import multiprocessing as mp

    from textual.widgets import Static

    from nncore import tabular
    from tui.child import _loading_progress
    from tui.state import RunRecord

    monkeypatch.setattr(tabular, "progress", None)
    theirs, ours = mp.Pipe()
    _loading_progress(ours)
    tabular.progress("/data/kdd.csv", 120_000, 3 * 2**20, 10 * 2**20, False)
    msg = json.loads(theirs.recv())
    assert msg == {"event": "loading", "message": "reading kdd.csv 30%"}
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        app.current = RunRecord("quadrant", "cpu-serial", 1, 32, 0)
        app.runs.append(app.current)
        state = app.query_one("#run-state", Static)
        app._run_message(msg)
        assert "reading kdd.csv 30%" in str(state.render())
        app._run_message(scripted_run()[0])  # run_started: the status is the run's again
        await pilot.pause()
        assert "reading" not in str(state.render())


async def test_a_finished_run_shows_its_last_step_though_the_last_step_events_were_not_sent(fixed_env):
    """Step events are throttled, so the last one shown can be a few steps short of the end: the finished run's
    progress line and bar say where it really ended."""
    from textual.widgets import ProgressBar, Static

    from tui.state import RunRecord

    events = scripted_run(epochs=3, steps_per_epoch=10)
    last_steps = [i for i, m in enumerate(events) if m["event"] == "step"][-3:]
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        app.current = RunRecord("quadrant", "cpu-serial", 1, 32, 0)
        app.runs.append(app.current)
        for i, msg in enumerate(events):
            if i not in last_steps:
                app._run_message(msg)
        await pilot.pause()
        line = str(app.query_one("#progress-label", Static).render())
        assert "step 30/30" in line and "step 27/30" not in line, line
        assert app.query_one("#progress", ProgressBar).progress == 30


@pytest.mark.parametrize("size", [(140, 45), (80, 24)])
async def test_every_per_part_bar_of_a_sweep_has_its_label(fixed_env, size):
    """The Analysis view's per-part chart: a quadrant sweep has 8 parts on 2 archs, 16 bars; each is on the row
    of its label (plotext had spread them over the rows it had, leaving bars beside no label)."""
    import re

    from nncore import analysis
    from tests.tui.conftest import screen_text

    parts = [f"layer {i} ({t})" for i, t in enumerate(["Linear", "ReLU", "Linear", "Sigmoid", "Linear"])]
    parts += ["data", "loss", "optimizer"]
    ms = {"cpu-serial": [3.0 + i for i in range(8)], "cpu-parallel": [1.0 + i / 2 for i in range(8)]}
    pts = analysis.derive([analysis.SweepPoint(a, t, 256, None, s, 1e3 * 256 / s, 1.0,
                                               [{"name": n, "fwd_ms": v, "bwd_ms": 0.0, "share": 0.1, "gflops": 0.0}
                                                for n, v in zip(parts, ms[a])], 9)
                           for a, t, s in [("cpu-serial", 1, 1000.0), ("cpu-parallel", 2, 1700.0)]])
    app = LayerlabApp("quadrant")
    async with app.run_test(size=size) as pilot:
        await pilot.press("5")
        pane = app.query_one("#analysis-pane")
        pane.show([p.to_dict() for p in pts], None)
        chart = app.query_one("#sweep-layers")
        await pilot.pause()
        chart.scroll_visible(animate=False)
        rows = {}
        for _ in range(len(parts) * 2 + 10):  # scrolled through, a few rows at a time at 80x24
            await pilot.pause()
            for line in screen_text(app).splitlines():
                m = re.match(r"\s*(.*?) (cpu-serial|cpu-parallel)┤(█*)", line)
                if m:
                    rows[(m.group(1), m.group(2))] = len(m.group(3))
            if len(rows) == 16:
                break
            app.query_one("#sweep-results").scroll_down(animate=False)
        names = [n.replace("layer ", "") for n in parts]
        assert set(rows) == {(n, a) for n in names for a in ms}, rows
        assert all(rows[(n, a)] > 0 for n, a in rows), rows  # a bar on each labelled row
        longest = max(rows, key=rows.get)
        assert longest == ("optimizer", "cpu-serial")  # the longest bar is the largest time


@pytest.mark.parametrize("size", [(140, 45), (80, 24)])
async def test_every_per_part_bar_of_a_filters_sweep_has_its_label(fixed_env, size):
    """A sweep over filter counts has a bar per part, arch and filter count (6 parts x 2 archs x 2 counts of the
    cnn: 24): the chart is tall enough for each to have its own row and label (it was sized for parts x archs,
    so bars were squeezed together, some under another part's label, some not drawn)."""
    import re

    from nncore import analysis
    from tests.tui.conftest import screen_text

    parts = ["layers 0-2 (Conv2D+ReLU+MaxPool2D)", "layer 3 (Flatten)", "layer 4 (Linear)", "data", "loss",
             "optimizer"]
    # Distinct times: part i of arch a at filter count f takes (i + 1) * (2 if serial else 1) * f / 4 ms.
    def ms(i, arch, f):
        return (i + 1) * (2.0 if arch == "cpu-serial" else 1.0) * f / 4
    pts = analysis.derive([analysis.SweepPoint(a, t, 16, f, s, 1e3 * 16 / s, 1.0,
                                               [{"name": n, "fwd_ms": ms(i, a, f), "bwd_ms": 0.0, "share": 0.1,
                                                 "gflops": 0.0} for i, n in enumerate(parts)], 9)
                           for f in (4, 8) for a, t, s in [("cpu-serial", 1, 1000.0), ("cpu-parallel", 2, 1700.0)]])
    app = LayerlabApp("cnn")
    async with app.run_test(size=size) as pilot:
        await pilot.press("5")
        app.query_one("#analysis-pane").show([p.to_dict() for p in pts], None)
        await pilot.pause()
        app.query_one("#sweep-layers").scroll_visible(animate=False)
        rows = {}
        for _ in range(60):  # scrolled through, a few rows at a time at 80x24
            await pilot.pause()
            for line in screen_text(app).splitlines():
                m = re.match(r"\s*(.*?) (cpu-serial|cpu-parallel) f(\d)┤(█*)", line)
                if m:
                    rows[(m.group(1), m.group(2), int(m.group(3)))] = len(m.group(4))
            if len(rows) == 24:
                break
            app.query_one("#sweep-results").scroll_down(animate=False)
        names = [n.replace("layer ", "") for n in parts]
        assert set(rows) == {(n, a, f) for n in names for a in ("cpu-serial", "cpu-parallel") for f in (4, 8)}, rows
        assert all(rows[k] > 0 for k in rows), rows  # a bar on each labelled row
        # Bar lengths follow the times: the longest row is the largest time, and within a part and arch f8's bar
        # is longer than f4's.
        assert max(rows, key=rows.get) == ("optimizer", "cpu-serial", 8)
        assert all(rows[(n, a, 8)] > rows[(n, a, 4)] for n in names for a in ("cpu-serial", "cpu-parallel")), rows


async def test_the_eta_waits_while_paused_and_leaves_single_steps_out(fixed_env):
    """A paused run has no ETA ("ETA —": it waits for a key), also after single steps (it said "ETA 0s": the
    steps counted, the paused time not); once resumed, the ETA is worked out from the steps run unpaused."""
    from textual.widgets import Static

    from tui.state import RunRecord

    events = [m for m in scripted_run(epochs=2, steps_per_epoch=50) if m["event"] in ("run_started", "step")]
    clock = [100.0]
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        app.clock = lambda: clock[0]
        app.current = RunRecord("quadrant", "cpu-serial", 1, 32, 0)
        app.runs.append(app.current)
        proc = type("P", (), {"pid": os.getpid()})()  # a training process that sends nothing of its own
        app.handle = type("H", (), {"send": lambda self, what: None, "poll": lambda self: [], "died": False,
                                    "proc": proc})()
        line = lambda: str(app.query_one("#progress-label", Static).render())  # noqa: E731
        app._run_message(events[0])  # run_started at t=100
        app._run_message(events[1])  # step 1 at t=100: no time has passed, nothing to go by
        await pilot.pause()
        assert "ETA —" in line(), line()
        clock[0] = 110.0
        app._run_message(events[10])  # step 10 at t=110: 1 s a step, 90 steps left
        await pilot.pause()
        assert "ETA 1m 30s" in line(), line()
        app.action_pause()
        await pilot.pause()
        assert "ETA —" in line(), line()  # shown at once, not at the next step event
        clock[0] = 200.0
        for i in (11, 12, 13):  # single steps while paused (n), each reported
            app.action_step()
            app._run_message(events[i])
        await pilot.pause()
        assert "step 13/100" in line() and "ETA —" in line(), line()
        app.action_pause()  # resumed at t=200: 10 s of running for 10 unpaused steps
        await pilot.pause()
        assert "ETA 1m 27s" in line(), line()  # 87 steps left at 1 s a step
        app.handle = None


async def test_a_sweeps_table_fits_80_columns(fixed_env):
    """At 80x24 a sweep of an MLP shows every column of its table whole, headers and figures (the table went past
    the right edge, cut at "ef"): the filters column is left out where the sweep set none."""
    from tests.tui.conftest import screen_text
    from tests.tui.test_snapshots import _sweep

    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("5")
        assert "GFLOP/s" not in screen_text(app)  # no table before a sweep, not even its header
        _sweep(app)
        await pilot.pause()
        lines = screen_text(app).splitlines()
        header = next(line for line in lines if "GFLOP/s" in line)
        assert header.split() == ["arch", "thr", "batch", "samples/s", "ms/step", "GFLOP/s", "speedup", "eff.",
                                  "K-F"]
        points = app.query_one("#analysis-pane").points
        for p in points:
            row = next(line for line in lines if f" {p['samples_per_s']:,.0f} " in line).split()
            row = [cell for cell in row if cell.strip("▁▂▃▄▅▆▇█")]  # not the scrollbar's thumb beside the table
            assert row[0] == p["arch"] and row[-1] == ("—" if p["karp_flatt"] is None else f"{p['karp_flatt']:.2f}")


async def test_a_filters_sweeps_table_fits_80_columns(fixed_env):
    """With a filters column the table was cut at "eff" and K-F was off the screen at 80x24: ms/step (the batch
    over samples/s) makes way for it."""
    from nncore import analysis
    from tests.tui.conftest import screen_text

    layers = [{"name": "layer 0 (Linear)", "fwd_ms": 2.0, "bwd_ms": 3.0, "share": 0.8, "gflops": 1.0}]
    pts = analysis.derive([analysis.SweepPoint(a, t, 64, f, s, 64e3 / s, 1.0, layers, 9)
                           for f in (4, 8) for a, t, s in [("cpu-serial", 1, 1000.0 / f), ("cpu-parallel", 2, 1700.0 / f)]])
    app = LayerlabApp("cnn")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("5")
        app.query_one("#analysis-pane").show([p.to_dict() for p in pts], None)
        await pilot.pause()
        lines = screen_text(app).splitlines()
        header = next(line for line in lines if "GFLOP/s" in line)
        assert header.split() == ["arch", "thr", "batch", "filters", "samples/s", "GFLOP/s", "speedup", "eff.", "K-F"]
        for p in pts:
            row = next(line for line in lines if f" {p.samples_per_s:,.0f} " in line).split()
            row = [cell for cell in row if cell.strip("▁▂▃▄▅▆▇█")]
            assert row[3] == str(p.filters) and row[-1] == ("—" if p.karp_flatt is None else f"{p.karp_flatt:.2f}")


async def test_every_bad_setting_is_marked_at_once(fixed_env):
    """Two bad fields are both marked as typed (the batch size stayed unmarked until the epochs were fixed)."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        app.query_one("#batch_size", Input).value = "-3"
        app.query_one("#epochs", Input).value = "xy"
        await wait_for(pilot, lambda: app.query_one("#settings-pane").error is not None)
        await pilot.pause()
        assert app.query_one("#batch_size", Input).has_class("error")
        assert app.query_one("#epochs", Input).has_class("error")
        assert not app.query_one("#lr", Input).has_class("error")
        # Every bad field's reason, a line each, the focused field's first (only the first one's was ever shown).
        app.query_one("#batch_size", Input).focus()
        await pilot.pause()
        status = str(app.query_one("#settings-status").render()).splitlines()
        assert len(status) == 2 and "batch_size" in status[0] and "-3" in status[0] and "'xy'" in status[1], status
        app.query_one("#epochs", Input).focus()
        await pilot.pause()
        status = str(app.query_one("#settings-status").render()).splitlines()
        assert len(status) == 2 and "'xy'" in status[0] and "-3" in status[1], status
        for field, bad in (("lr", "abc"), ("seed", "x")):  # four bad fields: three reasons, the fourth counted
            app.query_one(f"#{field}", Input).value = bad
        await pilot.pause()
        status = str(app.query_one("#settings-status").render()).splitlines()
        assert len(status) == 4 and status[-1] == "(1 more marked)", status
        app.query_one("#epochs", Input).value = "2"
        await pilot.pause()
        assert app.query_one("#batch_size", Input).has_class("error")
        assert not app.query_one("#epochs", Input).has_class("error")


async def test_sweep_fields_are_marked_as_typed(fixed_env):
    """Bad sweep fields are marked as they are typed, every one of them, not only after enter or w."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("5")
        app.query_one("#sweep-archs", Input).value = "-1"
        app.query_one("#sweep-batch", Input).value = "-1,abc"
        await pilot.pause()
        assert app.query_one("#sweep-archs", Input).has_class("error")
        assert app.query_one("#sweep-batch", Input).has_class("error")
        assert not app.query_one("#sweep-steps", Input).has_class("error")
        assert "'-1' is not one of" in str(app.query_one("#sweep-status").render())
        app.query_one("#sweep-archs", Input).value = "cuda"  # unavailable in the fixed environment
        await pilot.pause()
        assert app.query_one("#sweep-archs", Input).has_class("error")
        assert "cuda is unavailable" in str(app.query_one("#sweep-status").render())
        app.query_one("#sweep-archs", Input).value = "cpu-serial"
        app.query_one("#sweep-batch", Input).value = "64"
        await pilot.pause()
        assert not any(f.has_class("error") for f in app.query("#sweep-form Input"))
        assert str(app.query_one("#sweep-status").render()) == "enter in a field or w runs the sweep"
        assert app.sweeper is None


async def test_the_data_view_does_not_call_valid_data_the_network_cannot_train_on(fixed_env):
    """The quadrant network on a 28x28 image set: the Data view names the mismatch (it said "settings are valid",
    and the mismatch showed only as a pop-up after F6), and says valid again once the data fits."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        app.query_one("#dataset", Select).value = "fashion-subset"
        status = app.query_one("#settings-status")
        await wait_for(pilot, lambda: "✗" in str(status.render()))
        assert "does not fit fashion-subset" in str(status.render())
        assert "model.input [2] does not match" in str(status.render()) and status.has_class("error")
        app.query_one("#dataset", Select).value = "xor"
        await wait_for(pilot, lambda: str(status.render()).startswith("✓ settings are valid"))
        assert not status.has_class("error")


async def test_the_data_view_does_not_call_the_run_ready_while_a_layer_is_invalid(fixed_env):
    """A layer's field is bad in the Model view: the Data view still says its own settings are valid, and then
    that the network is not, with the Model view's reason (it said only "settings are valid")."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one("#layers", DataTable)
        table.focus()
        await pilot.press("enter", "backspace", "backspace", "q", "escape", "2")
        status = app.query_one("#settings-status")
        await wait_for(pilot, lambda: "✗" in str(status.render()))
        shown = str(status.render())
        assert shown.startswith("✓ settings are valid; quadrant"), shown
        assert "✗ but the network is not (Model view, F1): layer 0 (Linear): out_features 'q'" in shown, shown
        assert status.has_class("error")
        await pilot.press("1")
        table.focus()
        await pilot.press("enter", "backspace", "5", "escape", "2")
        await wait_for(pilot, lambda: "✗" not in str(status.render()))
        assert str(status.render()).startswith("✓ settings are valid") and not status.has_class("error")


async def test_a_layer_keeps_its_last_good_value_while_its_field_is_bad(fixed_env):
    """Clearing out_features and typing abc marks the field, but the layer keeps 16: the table shows its shapes
    (it showed "✗ invalid" and "—" below), and its columns shrink back once a long value is gone."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one("#layers", DataTable)
        table.focus()
        await pilot.press("enter")  # edits the first layer: its out_features
        for key in ["backspace", "backspace", "a", "b", "c"]:
            await pilot.press(key)
        field = param(app, "out_features")
        assert field.value == "abc" and field.has_class("error")
        assert app.draft.layers[0]["out_features"] == 16
        assert [str(c) for c in table.get_row_at(0)][3:] == ["16", "48", "80"]
        assert "—" not in str(table.get_row_at(4)) and str(table.get_row_at(0)[0]).startswith("✗")
        assert "out_features 'abc' must be a whole number" in str(app.query_one("#model-status").render())
        await wait_for(pilot, lambda: app.query_one("#start", Button).disabled, 10)
        field.value = "123456789"
        await pilot.pause()
        wide = sum(c.get_render_width(table) for c in table.columns.values())
        field.value = "16"
        await pilot.pause()
        assert sum(c.get_render_width(table) for c in table.columns.values()) < wide
        assert not field.has_class("error") and "✓ valid" in str(app.query_one("#model-status").render())


async def test_the_model_status_never_wraps_mid_phrase_at_80_columns(fixed_env):
    """The valid network's status at 80x24 breaks after the dataset it fits, not inside "fits quadrant"."""
    from tests.tui.conftest import screen_text

    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "fits quadrant" in screen_text(app))
        lines = [line.strip() for line in screen_text(app).splitlines()]
        at = next(i for i, line in enumerate(lines) if line.startswith("✓ valid"))
        assert lines[at] == "✓ valid; fits quadrant"
        assert lines[at + 1] == "5 layers, 337 parameters, 721 forward FLOPs per sample"
        await pilot.pause()  # (the views' messages of the first layout, before the app closes)


async def test_notices_sit_top_right_and_go_soon_unless_they_are_errors(fixed_env):
    """At 80x24 a notice covered the Train view's per-part summary and status lines for seconds: notices sit
    at the top right, under the header, and an information notice goes sooner than a warning or an error."""
    from textual.widgets._toast import Toast, ToastRack

    from tui.state import RunRecord

    app = LayerlabApp("quadrant", store=False)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await pilot.press("3")
        app.current = RunRecord("quadrant", "cpu-serial", 1, 32)
        app.runs.append(app.current)
        for msg in scripted_run():
            app._run_message(msg)
        app.notify("x" * 200, severity="error")
        await pilot.pause()
        await pilot.pause()
        toasts = list(app.screen.get_child_by_type(ToastRack).query(Toast))
        assert len(toasts) == 2
        short, long = sorted(toasts, key=lambda t: t.region.height)
        assert short.region.y == 1 and short.region.height == 1  # "finished: ...": over the tab row's end
        assert short.region.x >= 40  # in the right half, clear of the first four tabs
        assert long.region.bottom <= 12 and long.region.right <= 80  # the error wraps, up high, in full
        assert long.region.height >= 6
        timeouts = {n.severity: n.timeout for n in app._notifications}
        assert timeouts["information"] <= 5 and timeouts["error"] >= 10
        app.notify("a warning", severity="warning")
        await pilot.pause()
        assert max(n.timeout for n in app._notifications if n.severity == "warning") >= 8


async def test_the_analysis_form_and_table_fit_80_columns(fixed_env):
    """At 80 columns the archs field cut its default "cpu-serial,cpu-parallel" and the table's last header
    ("K-F e") was cut where the fraction is negative: the field shows the default in full, the table fits,
    and a legend spells out the short "K-F"."""
    from tests.tui.test_snapshots import _sweep

    app = LayerlabApp("quadrant", store=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("5")
        _sweep(app)
        await pilot.pause()
        archs = app.query_one("#sweep-archs", Input)
        assert archs.content_region.width > len(archs.value)  # the text and the cursor after it
        table = app.query_one("#sweep-table", DataTable)
        assert table.virtual_size.width <= table.content_region.width
        assert str(table.ordered_columns[-1].label) == "K-F"
        assert "K-F: Karp–Flatt serial fraction" in str(app.query_one("#sweep-legend").render())
        assert "K-F above 1" not in str(app.query_one("#sweep-legend").render())  # (every speedup over 1 here)
        points = [{**p, "karp_flatt": 1.4} if p["arch"] == "cpu-parallel" else p for p in app.query_one(
            "#analysis-pane").points]  # a parallel point slower than serial: the legend says what K-F means then
        app.query_one("#analysis-pane").show(points, None)
        await pilot.pause()
        assert "K-F above 1: slower than cpu-serial" in str(app.query_one("#sweep-legend").render())


@pytest.mark.parametrize("size", [(80, 24), (140, 45)])
async def test_the_samples_chart_keeps_its_curves_below_its_legend(fixed_env, size):
    """plotext draws the legend inside the plot, at its top left, and the fastest arch's curve ran through it:
    the axis leaves the legend's rows above the curves."""
    from tests.tui.test_snapshots import _sweep

    app = LayerlabApp("quadrant", store=False)
    async with app.run_test(size=size) as pilot:
        await pilot.press("5")
        _sweep(app)
        await pilot.pause()
        chart = app.query_one("#sweep-throughput", Chart)
        lines = chart.render().plain.splitlines()
        for label in chart.series:
            row = next(line for line in lines if f" {label} " in f"{line} ")
            after = row.split(f" {label}", 1)[1].rstrip().rstrip("│┤")
            assert not after.strip(), f"a curve crosses the legend's {label!r} row: {row!r}"


async def test_an_emptied_settings_field_shows_the_value_a_run_gets(fixed_env):
    """Each number field left empty names, in grey, the value the run's checked config then holds."""
    from nncore.config import RunConfig

    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        pane = app.query_one("#settings-pane")
        for key in ("samples", "noise", "test_ratio", "val_ratio", "lr", "momentum", "batch_size", "epochs", "seed"):
            app.query_one(f"#{key}", Input).value = ""
        await pilot.pause()
        data, train = pane.values()
        cfg = RunConfig({}, data, train, source="test")
        for key in ("samples", "noise", "test_ratio", "val_ratio"):
            assert app.query_one(f"#{key}", Input).placeholder == f"default {cfg.data[key]:g}", key
        for key in ("lr", "momentum", "batch_size", "epochs", "seed"):
            assert app.query_one(f"#{key}", Input).placeholder == f"default {cfg.train[key]:g}", key


def _train_view_results(app) -> dict:
    """What the Train view shows of a run's results."""
    return {"loss": app.query_one("#train-loss", Chart).series, "acc": app.query_one("#train-acc", Chart).series,
            "accuracy": str(app.query_one("#accuracy").render()), "timings": app.query_one(TimingBars).timings,
            "boundary": app.query_one("#boundary").grid, "progress": str(app.query_one("#progress-label").render())}


async def test_opening_another_network_clears_the_last_runs_results(fixed_env, fake_runs):
    """After a quadrant run, ctrl+o cnn left the Train view showing quadrant's curves, accuracy, timing bars and
    decision boundary under the cnn title until the next start: the view now starts blank for the network
    opened, as when the app opens."""
    from tests.tui.conftest import screen_text
    from tui.screens.path import PathScreen

    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("s")
        await wait_for(pilot, lambda: fake_runs and app.handle is None)
        await pilot.pause()
        shown = _train_view_results(app)
        assert shown["loss"] and shown["acc"] and shown["timings"] and shown["boundary"] is not None
        assert "test acc 0.9700" in shown["accuracy"] and "finished" in shown["progress"]
        await pilot.press("ctrl+o")
        await wait_for(pilot, lambda: isinstance(app.screen, PathScreen))
        app.screen.query_one("#path-input", Input).value = "cnn"
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.draft.name == "cnn" and not isinstance(app.screen, PathScreen))
        await pilot.pause()
        shown = _train_view_results(app)
        assert not shown["loss"] and not shown["acc"] and not shown["timings"] and shown["boundary"] is None
        assert "0.9700" not in shown["accuracy"] and not shown["progress"].strip()
        text = screen_text(app)
        assert "layerlab — cnn" in text and "0.9700" not in text and "finished" not in text


async def test_opening_another_network_during_a_run_keeps_the_runs_view(fixed_env, fake_runs, monkeypatch):
    """While a run goes on, the Train view is the run's (the header names its network beside the one edited):
    opening another network leaves it alone, and once the run ends its results say whose they are."""
    from tests.tui.conftest import FakeHandle

    monkeypatch.setattr(FakeHandle, "per_poll", 0)  # the test feeds the run's events itself
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("s")
        await wait_for(pilot, lambda: app.handle is not None)
        for msg in scripted_run()[:-1]:
            app._run_message({**msg, "config": fake_runs[-1]} if msg["event"] == "run_started" else msg)
        await pilot.pause()
        before = _train_view_results(app)
        assert before["loss"] and before["timings"]
        assert app.open_config("cnn")
        await pilot.pause()
        assert app.handle is not None and _train_view_results(app) == before
        assert "quadrant (training" in app.sub_title and "editing cnn" in app.sub_title
        app._run_message(scripted_run()[-1])
        await pilot.pause()
        assert app.handle is None and app.sub_title == "cnn"
        after = _train_view_results(app)
        assert after["loss"] == before["loss"] and after["timings"] == before["timings"]
        assert after["progress"].startswith("quadrant finished: test acc 0.9700")
        assert str(app.query_one("#run-state").render()) == "quadrant finished: test acc 0.9700"


async def test_a_long_network_name_before_a_runs_result_is_cut(fixed_env, fake_runs, monkeypatch):
    """A run's network named at full length (up to 64 characters) before its result wrapped the Train view's
    status line over four lines at 80 columns."""
    from tests.tui.conftest import FakeHandle

    monkeypatch.setattr(FakeHandle, "per_poll", 0)  # the test feeds the run's events itself
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        app.draft.name = "n" * 64  # (as a config's name line may say)
        await pilot.press("s")
        await wait_for(pilot, lambda: app.handle is not None)
        for msg in scripted_run()[:-1]:
            app._run_message({**msg, "config": fake_runs[-1]} if msg["event"] == "run_started" else msg)
        await pilot.pause()
        assert app.open_config("cnn")
        await pilot.pause()
        app._run_message(scripted_run()[-1])
        await pilot.pause()
        assert str(app.query_one("#run-state").render()) == "n" * 19 + "… finished: test acc 0.9700"


@pytest.mark.parametrize("typed,reason", [
    ("paste 999999999999", "layer 0 (Linear): out_features 999999999999 must be at most 2147483647"),
    ("0", "layer 0 (Linear): out_features 0 must be >= 1")])
async def test_an_out_of_range_parameter_is_marked_and_the_shapes_stay(fixed_env, typed, reason):
    """out_features 999999999999 (or 0) for a Linear layer went into the network, whose check then failed at
    layer 0 and blanked every layer's shapes ("✗ invalid", then "—"); the value is out of the parameter's own
    range whatever the network, so it is refused where it is typed, as abc or -1 are: the field marked, the reason
    on one line at 80 columns, and the layer keeping 16 with the table's shapes. (Typed a digit at a time, the
    layer keeps 999999999, the last value that parsed.)"""
    from textual import events

    from tests.tui.conftest import screen_text

    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one("#layers", DataTable)
        shapes = [[str(c) for c in table.get_row_at(i)][3:] for i in range(table.row_count)]
        table.focus()
        await pilot.press("enter")  # edits the first layer: its out_features
        await pilot.press("backspace", "backspace")
        field = param(app, "out_features")
        if typed.startswith("paste "):
            typed = typed.split()[1]
            field.post_message(events.Paste(typed))
        else:
            await pilot.press(*typed)
        await wait_for(pilot, lambda: field.value == typed and "✗" in str(app.query_one("#model-status").render()))
        await pilot.pause()
        assert field.has_class("error") and app.draft.layers[0]["out_features"] == 16
        assert [[str(c) for c in table.get_row_at(i)][3:] for i in range(table.row_count)] == shapes
        assert str(table.get_row_at(0)[0]).startswith("✗")
        lines = [line.strip() for line in screen_text(app).splitlines()]
        at = next(i for i, line in enumerate(lines) if line.startswith("✗ layer 0"))
        assert lines[at] == f"✗ {reason}"  # the whole reason, on one line: the next is blank or the footer
        assert lines[at + 1] == "" or at + 1 == len(lines) - 1
        await wait_for(pilot, lambda: app.query_one("#start", Button).disabled, 10)


async def test_the_analysis_scrollbar_draws_no_stray_glyph_beside_the_charts(fixed_env):
    """At 140x45 after a quadrant sweep (8 parts on 2 archs) the results scroll, and the one-column scrollbar's
    thumb ended in a partial-cell glyph (▁ … ▇) flush against the speedup chart's frame: "┘▇", a stray character
    at its corner. The thumb now starts and ends on whole cells: its column holds blanks only (thumb and track
    differ in colour), at every scroll position."""
    from nncore import analysis
    from tests.tui.conftest import screen_text

    names = [f"layer {i} ({t})" for i, t in enumerate(["Linear", "ReLU", "Linear", "Sigmoid", "Linear"])]
    layers = [{"name": n, "fwd_ms": 0.01 * (i + 1), "bwd_ms": 0.02, "share": 0.1, "gflops": 1.0}
              for i, n in enumerate(names + ["data", "loss", "optimizer"])]
    pts = analysis.derive([analysis.SweepPoint(a, t, b, None, s, 1e3 * b / s, 1.0, layers, 9)
                           for a, t, b, s in [("cpu-serial", 1, 64, 1000.0), ("cpu-parallel", 2, 64, 1700.0),
                                              ("cpu-serial", 1, 256, 2000.0), ("cpu-parallel", 2, 256, 4300.0)]])
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.press("5")
        pane = app.query_one("#analysis-pane")
        pane.progress(4, 4, "done: 4 points")
        pane.show([p.to_dict() for p in pts], analysis.amdahl_view(pts[0], 0.01, 2, {"cpu-parallel": 1.7}).__dict__)
        results = app.query_one("#sweep-results")
        await wait_for(pilot, lambda: results.max_scroll_y > 0 and results.vertical_scrollbar.display)
        region = results.vertical_scrollbar.region
        assert region.width == 1 and region.height > 30
        for y in range(results.max_scroll_y + 1):
            results.scroll_to(y=y, animate=False)
            await pilot.pause()
            lines = screen_text(app).splitlines()
            bar = "".join(lines[row][region.x] for row in range(region.y, region.bottom))
            assert set(bar) == {" "}, f"at scroll {y}: {bar!r}"


async def test_a_name_typed_before_the_open_prompt_has_focus_keeps_every_letter(fixed_env):
    """Keys reach the ctrl+o prompt as soon as it is pushed, but its field gets focus only once it is shown,
    which a busy app delays: letters typed in that gap go into the field instead of being dropped."""
    from tui.screens.path import PathScreen

    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+o")
        await wait_for(pilot, lambda: isinstance(app.screen, PathScreen))
        field = app.screen.query_one("#path-input", Input)
        start = field.value
        app.screen.set_focus(None)  # the gap before the prompt's field is focused
        await pilot.press("c", "n", "n")
        assert field.value == start + "cnn" and app.screen.focused is field
        await pilot.press("enter")
        await wait_for(pilot, lambda: not isinstance(app.screen, PathScreen))
        assert app.draft.name == "cnn"


async def test_a_dialogs_footer_shows_its_own_keys_not_the_views(fixed_env):
    """Inside the ctrl+o prompt, the layer-type choice and the overwrite question the footer names the dialog's
    keys; the view's letters (a Add, s Start), which type or do nothing there, are gone from it."""
    from tui.widgets.keybar import KeyBar

    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        base = str(app.screen.query_one(KeyBar).render())
        assert "Add" in base and "Start" in base
        for keys in (["ctrl+o"], ["a"]):
            await pilot.press(*keys)
            await wait_for(pilot, lambda: len(app.screen_stack) == 2)
            shown = str(app.screen.query_one(KeyBar).render())
            assert "Cancel" in shown and "Add" not in shown and "Start" not in shown, shown
            await pilot.press("escape")
            await wait_for(pilot, lambda: len(app.screen_stack) == 1)


@pytest.mark.parametrize("size", [(80, 24), (140, 45)])
async def test_the_epoch_line_breaks_between_its_figures_never_inside_one(size):
    """At 80 columns, from epoch 100 on, the epoch's line no longer fits: it breaks between its figures, so
    "test loss" keeps its value beside it; wide enough, it stays one line."""
    from tui.panes.train import TrainPane

    app = LayerlabApp("quadrant", store=False)
    async with app.run_test(size=size) as pilot:
        await pilot.press("3")
        await pilot.pause()
        pane = app.query_one(TrainPane)
        pane.on_epoch({"epoch": 123, "test_loss": 0.03004, "test_acc": 0.809, "train_loss": 0.02701, "steps": 10})
        await pilot.pause()
        label = app.query_one("#accuracy")
        lines = str(label.render()).splitlines()
        assert all(len(line) <= label.content_size.width for line in lines)
        assert any("test loss 0.0300" in line for line in lines)
        assert any("train loss 0.0270" in line for line in lines)
        assert ("epoch 123: test acc 0.8090 (best 0.8090)" in lines[0]) and len(lines) == (1 if size[0] > 100 else 2)


async def test_the_finished_notice_leaves_the_tabs_whole_at_80_columns(fixed_env, fake_runs, monkeypatch):
    """The notice at a run's end sits over the end of the tab row: short ("finished · acc 0.9700"), it covers
    none of the tabs at 80 columns; the Train view still says it in full."""
    from textual.widgets import Tabs
    from textual.widgets._toast import Toast, ToastRack
    from tests.tui.conftest import FakeHandle

    monkeypatch.setattr(FakeHandle, "per_poll", 0)  # the test feeds the run's events itself
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await pilot.press("s")
        await wait_for(pilot, lambda: app.handle is not None)
        for msg in scripted_run():
            app._run_message({**msg, "config": fake_runs[-1]} if msg["event"] == "run_started" else msg)
        await pilot.pause(0.3)
        assert [n.message for n in app._notifications][-1] == "finished · acc 0.9700"
        toast = list(app.screen.get_child_by_type(ToastRack).query(Toast))[-1]
        tabs = app.query_one(Tabs)
        last_tab = max(t.region.right for t in tabs.query("Tab"))
        assert toast.region.y <= tabs.region.y < toast.region.bottom and toast.region.x >= last_tab
        assert str(app.query_one("#run-state").render()) == "finished: test acc 0.9700"


async def test_a_batch_larger_than_the_training_set_or_threads_past_the_cores_are_pointed_out(fixed_env, fake_runs,
                                                                                             monkeypatch):
    """A batch size beyond the training set trains one step an epoch on all of it: allowed, but the app says so
    when the run starts (a typo in the batch field would otherwise pass unseen); a usual batch gets no notice."""
    from tests.tui.conftest import FakeHandle

    monkeypatch.setattr(FakeHandle, "per_poll", 0)  # the test feeds the run's events itself
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await pilot.press("s")
        await wait_for(pilot, lambda: app.handle is not None)
        started = scripted_run()[0]  # 320 training samples
        for batch, noticed in ((320, False), (5000, True)):
            cfg = {**fake_runs[-1], "train": {**fake_runs[-1]["train"], "batch_size": batch}}
            before = len(app._notifications)
            app._run_message({**started, "config": cfg})
            await pilot.pause()
            said = [n.message for n in list(app._notifications)[before:]]
            assert any("batch_size 5,000 exceeds the 320 training samples" in m for m in said) == noticed, said
        # More threads than cores: said as the CLI says it (they share the cores: slower, not faster).
        from nncore.runtime import cpu_count

        for threads, noticed in ((cpu_count(), False), (cpu_count() + 3, True)):
            before = len(app._notifications)
            app._run_message({**started, "config": fake_runs[-1], "arch": "cpu-parallel", "threads": threads})
            await pilot.pause()
            said = [n.message for n in list(app._notifications)[before:]]
            assert any(f"{threads} threads on the {cpu_count()} core" in m for m in said) == noticed, said


async def test_two_invalid_layers_are_both_counted_in_the_status(fixed_env):
    """Two layers with a bad field each: both are marked ✗ and the status gives both reasons, a line each (it gave
    the first reason alone, as if one fix would do); two bad fields of one layer likewise."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one("#layers", DataTable)
        status = app.query_one("#model-status")
        for row, text in ((0, "abc"), (2, "xyz")):
            table.focus()
            table.move_cursor(row=row)
            await pilot.press("enter")  # edits the layer's out_features
            await pilot.press("backspace", "backspace", *text)
            await wait_for(pilot, lambda: param(app, "out_features").value == text)  # noqa: B023
        await wait_for(pilot, lambda: len(str(status.render()).splitlines()) == 2)
        shown = str(status.render()).splitlines()
        assert shown[0].startswith("✗ layer 0 (Linear): out_features 'abc'"), shown
        assert shown[1].startswith("✗ layer 2 (Linear): out_features 'xyz'"), shown
        assert [str(table.get_row_at(i)[0]).startswith("✗") for i in range(table.row_count)][:3] == [True, False, True]
        table.focus()
        table.move_cursor(row=0)
        await pilot.press("enter", "backspace", "backspace", "backspace", "8")
        await wait_for(pilot, lambda: str(status.render()).startswith("✗ layer 2"))
        assert len(str(status.render()).splitlines()) == 1
        await pilot.press("tab", "backspace", "backspace", "backspace", "backspace", *"-1")  # in_features too
        await wait_for(pilot, lambda: "in_features" in str(status.render()))
        shown = str(status.render()).splitlines()
        assert len(shown) == 2 and "layer 0 (Linear): in_features" in shown[0] and "layer 2" in shown[1], shown


async def test_an_edited_preset_runs_as_edited(fixed_env, fake_runs):
    """The quadrant preset with its first layer changed ran (and was recorded) as "quadrant": now as
    "quadrant (edited)", in the Runs view too; the preset as it is runs as "quadrant"."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one("#layers", DataTable)
        table.focus()
        await pilot.press("enter", "backspace", "backspace", "8")
        await wait_for(pilot, lambda: app.draft.layers[0]["out_features"] == 8 and app.model_ok)
        await pilot.press("escape", "escape", "s")
        await wait_for(pilot, lambda: app.handle is None and app.runs and app.runs[0].status == "finished")
        assert fake_runs[-1]["source"] == "quadrant (edited)" and app.runs[0].network == "quadrant (edited)"
        await pilot.press("4")
        assert app.query_one(RunsPane).rows[0]["network"] == "quadrant (edited)"


async def test_the_analysis_results_scroll_from_the_form(fixed_env):
    """At 80x24 the charts below the fold scroll with PageDown / PageUp typed while a field of the form has the
    focus (they scrolled only once Tab reached the results); the field keeps its text and the focus."""
    from nncore import analysis

    layers = [{"name": f"layer {i}", "fwd_ms": 0.01, "bwd_ms": 0.02, "share": 0.1, "gflops": 1.0} for i in range(7)]
    pts = analysis.derive([analysis.SweepPoint(a, t, b, None, s, 1e3 * b / s, 1.0, layers, 9)
                           for a, t, b, s in [("cpu-serial", 1, 64, 1000.0), ("cpu-parallel", 2, 64, 1700.0)]])
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("5")
        pane = app.query_one("#analysis-pane")
        pane.show([p.to_dict() for p in pts], analysis.amdahl_view(pts[0], 0.01, 2, {"cpu-parallel": 1.7}).__dict__)
        results = app.query_one("#sweep-results")
        await wait_for(pilot, lambda: results.max_scroll_y > 0)
        field = app.query_one("#sweep-batch", Input)
        field.focus()
        await pilot.press("pagedown")
        await wait_for(pilot, lambda: results.scroll_y > 0)
        assert app.focused is field and field.value == "64,256"
        await pilot.press("pageup")
        await wait_for(pilot, lambda: results.scroll_y == 0)
