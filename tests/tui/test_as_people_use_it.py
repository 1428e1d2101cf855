"""The app as people use it: ordinary choices that once crashed it, keys typed at human speed from every kind of
widget, and numbers that must not mislead. Each test drives the app through its keys where a person would."""

import pytest
from textual.widgets import Button, Input, Select

from nncore.config import check_run, load_config
from nncore.errors import LayerlabError
from tests.tui.conftest import record, scripted_run, screen_text, wait_for
from tui.app import LayerlabApp
from tui.panes.model import LayerTable, ParamInput
from tui.screens.pick import PickScreen
from tui.screens.path import PathScreen
from tui.state import STORE_COLUMNS

SIZE = (100, 32)
NO_DATA = '[model]\ninput = [2]\nloss = "bce"\nlayers = [{type="Linear", out_features=8}, {type="ReLU"}, ' \
          '{type="Linear", out_features=1}]\n'
RMSPROP = NO_DATA + '[train]\noptimizer = "rmsprop"\n'
INTS = '[model]\ninput = [2]\nloss = "bce"\nlayers = [1, 2]\n'


async def type_keys(pilot, keys, delay=0.02):
    """One key at a time, as a person types (the app handles each before the next arrives)."""
    for key in keys:
        await pilot.press(key)
        await pilot.pause(delay)


def said(app) -> str:
    """Every notification the app has shown, one a line."""
    return "\n".join(n.message for n in app._notifications)


def focused_param(app, name):
    return next(f for f in app.query_one("#model-pane").fields if getattr(f, "param", None) and f.param.name == name)


# -- ordinary choices that crashed the app ---------------------------------------------------------------------
@pytest.mark.parametrize("path", ["", "/no/such/dir", "tmp"])
async def test_idx_directory_choices_keep_the_app_up(fixed_env, fake_runs, tmp_path, path):
    """Choosing "IDX directory…", clearing its path, or giving a directory without IDX files: marked in place."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("s")  # a run in the table, which must survive what follows
        await wait_for(pilot, lambda: app.handle is None and len(app.runs) == 1)
        await pilot.press("2")
        await pilot.press("enter")  # open the dataset list, go to its last entry, choose it
        await pilot.press("end", "enter")
        await wait_for(pilot, lambda: app.query_one("#dataset", Select).value == "idx")
        field = app.query_one("#path", Input)
        field.focus()
        await type_keys(pilot, list(str(tmp_path) if path == "tmp" else path))
        await type_keys(pilot, ["backspace"] * 3 if path == "" else [])
        await pilot.pause()
        pane = app.query_one("#settings-pane")
        assert pane.error is not None and field.has_class("error")
        assert "no such" in pane.error or "give a directory" in pane.error
        await wait_for(pilot, lambda: app.query_one("#start", Button).disabled, 10)
        assert app.is_running and len(app.runs) == 1


async def test_a_path_typed_right_after_choosing_idx_goes_into_the_path(fixed_env, fake_runs, tmp_path):
    """Having chosen "IDX dir or CSV file…" from the list, a person types the path at once: it lands in the
    path field, not as shortcut keys (``b`` used to switch the backend, ``s`` to start a run)."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        arch = app.query_one("#settings-pane")._arch
        await pilot.press("2")
        await pilot.press("enter")
        await pilot.press("end", "enter")
        await wait_for(pilot, lambda: app.query_one("#dataset", Select).value == "idx")
        await pilot.pause()
        typed = str(tmp_path / "bs")
        await type_keys(pilot, list(typed))
        await pilot.pause()
        assert app.query_one("#path", Input).value == typed
        assert app.query_one("#settings-pane")._arch == arch and app.handle is None and not fake_runs


@pytest.mark.parametrize("text,opens", [(NO_DATA, True), (RMSPROP, False), (INTS, False)])
async def test_configs_open_as_the_cli_decides(fixed_env, tmp_path, capsys, text, opens):
    """A config `layerlab train` accepts opens (through ctrl+o and as `layerlab tui FILE`); one it refuses is
    refused with the CLI's own message, and the app stays up with what it had."""
    from nncore import cli

    path = tmp_path / "c.toml"
    path.write_text(text)
    code = cli.main(["train", str(path), "--epochs", "1", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert (code == 0) == opens
    if not opens:
        with pytest.raises(LayerlabError) as refused:
            check_run(load_config(path))
        assert err == f"layerlab: error: {refused.value}"
    for how in ("ctrl+o", "argument"):
        app = LayerlabApp(str(path) if how == "argument" else "cnn")
        async with app.run_test(size=SIZE) as pilot:
            if how == "ctrl+o":
                await pilot.press("ctrl+o")
                app.screen.query_one("#path-input", Input).value = str(path)
                await pilot.press("enter")
            await pilot.pause(0.2)
            if opens:
                assert app.draft.name == "c" and [x["type"] for x in app.draft.layers] == ["Linear", "ReLU", "Linear"]
                assert app.query_one("#dataset", Select).value == "quadrant"
                await wait_for(pilot, lambda: not app.query_one("#start", Button).disabled, 10)
            elif how == "ctrl+o":  # refused in the prompt, which stays open: the next keys are typed there
                assert app.draft.name == "cnn" and isinstance(app.screen, PathScreen)
                assert str(app.screen.query_one("#path-hint").render()) == f"✗ {refused.value}"
                await pilot.press("q")
                assert app.is_running and app.screen.query_one("#path-input", Input).value.endswith("q")
                await pilot.press("escape")
                assert not isinstance(app.screen, PathScreen) and app.draft.name == "cnn"
            else:
                assert app.draft.name == "quadrant"  # what it had
                assert f"not opened: {refused.value}" in said(app)
            assert app.is_running


@pytest.mark.parametrize("kind", ["device", "fifo"])
async def test_a_device_or_fifo_typed_to_open_is_refused_in_the_clis_words(fixed_env, tmp_path, capsys, kind):
    """/dev/zero typed at ctrl+o was "no such file"; the prompt now says what `layerlab train` says of it."""
    import os

    from nncore import cli

    if kind == "device":
        path = "/dev/zero"
    else:
        path = str(tmp_path / "pipe")
        os.mkfifo(path)
    assert cli.main(["train", path, "--epochs", "1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().removeprefix("layerlab: error: ")
    assert "not a regular file" in err
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+o")
        app.screen.query_one("#path-input", Input).value = path
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, PathScreen)
        assert str(app.screen.query_one("#path-hint").render()) == f"✗ {err}"


async def test_a_network_that_cannot_fit_the_data_cannot_start(fixed_env, fake_runs):
    """16 outputs on the 2-class quadrant: the output layer is marked before anything starts."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one("#layers")
        table.move_cursor(row=4)
        await pilot.press("enter")
        await type_keys(pilot, ["1", "6"])
        assert app.query_one(ParamInput).value == "16"
        await wait_for(pilot, lambda: app.query_one("#start", Button).disabled, 10)
        status = str(app.query_one("#model-status").render())
        assert "the network has 16 output(s)" in status and "dataset quadrant has 2" in status
        assert str(table.get_row_at(4)[0]).startswith("✗")
        await pilot.press("f6")  # start, from the field
        assert app.handle is None and not fake_runs
        assert "the network cannot train: loss bce: the network has 16 output(s)" in said(app)


async def test_a_run_whose_set_up_fails_says_why(fixed_env, fake_runs):
    """The child's set-up fails (a damaged file found only when loaded): the reason stays on screen, the bar
    stops, and nothing else follows it."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        failed = {"event": "run_failed", "error": "/x/train-images-idx3-ubyte: truncated (9 bytes, the header "
                  "promises 47040016)", "exit_code": 2, "epoch": 0, "step": 0}
        stale = {"event": "run_failed", "error": "AttributeError: 'Trainer' object has no attribute 'ds'",
                 "exit_code": 1}
        import tui.app

        original = tui.app.RunHandle
        tui.app.RunHandle = lambda cfg, target=None, store=None: original(cfg, events=[failed, stale], store=store)
        try:
            await pilot.press("s")
            await wait_for(pilot, lambda: app.handle is None)
        finally:
            tui.app.RunHandle = original
        await pilot.pause()
        state = str(app.query_one("#run-state").render())
        assert "truncated" in state and "AttributeError" not in screen_text(app)
        assert app.runs[0].status == "failed"
        bar = app.query_one("#progress")
        assert bar.total is not None  # not pulsing "--%"


async def test_a_run_refused_for_its_backend_is_shown_refused_not_failed(fixed_env, fake_runs):
    """The backend proves unavailable when the training process starts it (exit 4, before run_started): nothing
    ran, so the run is "refused" on screen, in the Runs view and in the store, not "failed"."""
    from nncore.errors import BackendUnavailable
    from nncore.store import Store

    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        refused = {"event": "run_failed", "error": "cuda is unavailable: no CUDA driver (libcuda.so.1 not found)",
                   "exit_code": BackendUnavailable.exit_code, "epoch": 0, "step": 0}
        import tui.app

        original = tui.app.RunHandle
        tui.app.RunHandle = lambda cfg, target=None, store=None: original(cfg, events=[refused], store=store)
        try:
            await pilot.press("s")
            await wait_for(pilot, lambda: app.handle is None)
        finally:
            tui.app.RunHandle = original
        await pilot.press("4")
        await pilot.pause()
        assert str(app.query_one("#run-state").render()).startswith("refused: cuda is unavailable")
        assert app.runs[0].status == "refused"
        table = app.query_one("#runs-table")
        assert "refused" in [str(c) for c in table.get_row_at(0)]
    assert [r["status"] for r in Store().runs()] == ["refused"]


# -- keys -------------------------------------------------------------------------------------------------------
async def test_typing_into_a_parameter_is_never_rewritten(fixed_env):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("enter")  # edit layer 0: its first parameter, selected so typing replaces it
        field = focused_param(app, "out_features")
        assert app.focused is field
        seen = []
        for key in ["8", "2", "backspace", "backspace", "2", "5"]:
            await pilot.press(key)
            await pilot.pause(0.05)
            seen.append(field.value)
        assert seen == ["8", "82", "8", "", "2", "25"]
        assert app.draft.layers[0]["out_features"] == 25
        await type_keys(pilot, [".", "5"])
        assert field.value == "25.5" and field.has_class("error")
        assert app.draft.layers[0]["out_features"] == 25  # the last good value
        assert "out_features '25.5' must be a whole number" in str(app.query_one("#model-status").render())
        await wait_for(pilot, lambda: app.query_one("#start", Button).disabled, 10)
        await type_keys(pilot, ["backspace", "backspace"])
        assert field.value == "25" and not field.has_class("error")
        # The init scheme, then another layer: what was typed stays with its own layer.
        await pilot.press("tab", "tab")
        assert app.focused.param.name == "init"
        await pilot.press("enter", "down", "enter")  # default -> he
        await wait_for(pilot, lambda: app.draft.layers[0].get("init") == "he")
        await pilot.press("escape")
        assert app.focused is app.query_one("#layers")
        await pilot.press("d")  # remove layer 0: its text must not land on another row
        await pilot.pause(0.1)
        assert [x["type"] for x in app.draft.layers] == ["ReLU", "Linear", "Sigmoid", "Linear"]
        assert app.draft.layers[1] == {"type": "Linear", "out_features": 16}
        assert app.draft.layers[3] == {"type": "Linear", "out_features": 1}


async def test_add_layer_asks_for_its_type(fixed_env):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("a")
        assert isinstance(app.screen, PickScreen)
        await pilot.press("escape")  # no: nothing added
        assert len(app.draft.layers) == 5
        await pilot.press("a", "down", "down", "down", "down", "enter")  # Conv2D
        await wait_for(pilot, lambda: len(app.draft.layers) == 6)
        assert app.draft.layers[1] == {"type": "Conv2D", "out_channels": 8, "kernel_size": 3}
        await wait_for(pilot, lambda: isinstance(app.focused, ParamInput))
        assert app.focused.param.name == "out_channels"  # ready to type the new layer's first parameter


@pytest.mark.parametrize("where", ["dropdown", "field", "table", "button", "radio"])
async def test_views_and_start_from_every_kind_of_widget(fixed_env, fake_runs, where):
    """From a dropdown, a table, a button or the backend list, the plain keys act; in a text field they are typed,
    and the F-keys act instead."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        targets = {"dropdown": ("model", "#loss"), "field": ("model", "#input-shape"), "table": ("model", "#layers"),
                   "button": ("train", "#start"), "radio": ("settings", "#backend")}
        tab, widget = targets[where]
        for i, view in enumerate(["model", "settings", "train", "runs", "analysis"]):
            await pilot.press(str(i + 1))  # from wherever the last key left the focus
        await pilot.press({"model": "1", "settings": "2", "train": "3"}[tab])
        app.query_one(widget).focus()
        await pilot.pause()
        tabs = app.query_one("#tabs")
        if where == "field":
            field = app.query_one(widget, Input)
            await type_keys(pilot, ["end", "2", "s"])
            assert field.value == "22s" and tabs.active == "model" and app.handle is None  # typed, as meant
            await type_keys(pilot, ["backspace", "backspace", "f2"])
            assert tabs.active == "settings"
            app.query_one("#lr", Input).focus()
            await pilot.press("f6")
        else:
            for i, view in enumerate(["settings", "train", "runs", "analysis", "model"]):
                app.query_one(widget).focus()
                await pilot.press(str((i + 1) % 5 + 1))
                assert tabs.active == view, f"{i + 1} from a {where}"
            app.query_one(widget).focus()
            await pilot.press("s")
        # A start from anywhere shows the run: the Train view, with the focus in it.
        await wait_for(pilot, lambda: len(fake_runs) == 1)
        await pilot.pause()
        assert tabs.active == "train" and app.focused is not None
        assert app.query_one("#train") in app.focused.ancestors


async def test_escape_leaves_a_field_and_q_quits_only_outside_one(fixed_env):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        app.query_one("#lr", Input).focus()
        await type_keys(pilot, ["end", "q"])
        assert app.query_one("#lr", Input).value == "0.1q" and app.is_running
        await pilot.press("backspace", "escape")
        assert not isinstance(app.focused, Input) and app.query_one("#tabs").active == "settings"
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running, 10)


async def test_ctrl_q_quits_from_a_field(fixed_env):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        app.query_one("#input-shape", Input).focus()
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: not app.is_running, 10)


@pytest.mark.parametrize("dialog", ["f12", "ctrl+o", "add a layer"])
async def test_ctrl_q_quits_from_a_dialog_too(fixed_env, dialog):
    """The help screen, the open dialog and the layer-type list are modal screens, which hide the app's bindings:
    ctrl+q did nothing there, where the key table says it acts anywhere. q in a dialog's field still types."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        if dialog == "add a layer":
            await pilot.press("1")
            app.query_one(LayerTable).focus()
            await pilot.press("a")
        else:
            await pilot.press(dialog)
        await pilot.pause()
        assert app.screen.is_modal, dialog
        if dialog == "ctrl+o":
            field = app.screen.query_one(Input)
            field.focus()
            await type_keys(pilot, ["q"])
            assert field.value.endswith("q") and app.is_running
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: not app.is_running, 10)


async def test_the_backend_toast_names_the_new_backend(fixed_env):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        assert app.query_one("#settings-pane").arch() == "cpu-parallel"
        await pilot.press("b")
        await pilot.pause()
        assert app.query_one("#settings-pane").arch() == "cpu-serial"
        assert said(app).splitlines()[-1] == "backend: cpu-serial"
        app.query_one("#lr", Input).focus()
        await pilot.press("ctrl+b")
        await pilot.pause()
        assert said(app).splitlines()[-1] == "backend: cpu-parallel"


async def test_labels_with_brackets_are_shown_whole(fixed_env):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        text = screen_text(app)
        for label in ("Start (s)", "Pause (p)", "Step (n)", "Stop (x)"):
            assert label in text
        await pilot.press("1")
        app.query_one("#input-shape", Input).value = "[1, 2"
        await pilot.pause()
        assert "model.input '[1, 2' must be [features] or [channels, height, width]" in screen_text(app)


# -- numbers ----------------------------------------------------------------------------------------------------
async def test_paused_time_is_not_counted(fixed_env, fake_runs):
    """The app's ETA leaves paused time out (the trainer does the same for samples/s: tests/nncore/test_train)."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        clock = [1000.0]
        app.clock = lambda: clock[0]
        events = scripted_run(epochs=1, steps_per_epoch=10)
        app.start_run(app._run_config(), "quadrant")
        app.handle.events = []
        app._run_message(events[0])  # run_started at t = 1000
        clock[0] = 1001.0
        await pilot.press("p")  # paused for 100 s
        clock[0] = 1101.0
        await pilot.press("p")
        clock[0] = 1102.0
        app._run_message({**events[2], "step": 5})  # 5 of 10 steps in 2 s of training: 2 s left
        assert "ETA 2s" in str(app.query_one("#progress-label").render()).replace("\xa0", " ")


async def test_a_run_stopped_before_its_first_evaluation_shows_no_accuracy(fixed_env, fake_runs):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        import tui.app
        from nncore import events as ev

        original = tui.app.RunHandle
        stopped = [scripted_run()[0], ev.Step(1, 3, 0.7, 5000.0).to_dict(),
                   ev.RunFinished(0, 3, None, None, None, 0.4, 4800.0, True).to_dict()]
        tui.app.RunHandle = lambda cfg, target=None, store=None: original(cfg, events=stopped, store=store)
        try:
            await pilot.press("s")
            await wait_for(pilot, lambda: app.handle is None)
        finally:
            tui.app.RunHandle = original
        assert app.runs[0].test_acc is None and app.runs[0].status == "stopped"
        assert "stopped: no evaluation" in str(app.query_one("#run-state").render())
        await pilot.press("4")
        row = dict(zip(STORE_COLUMNS, (str(c) for c in app.query_one("#runs-table").get_row_at(0))))
        assert row["test_acc"] == "—" and row["samples_per_s"] == "4,800"  # the trainer's rate: no epoch to time


# -- the title and the footer say what is there ------------------------------------------------------------------
def title(app) -> str:
    """The header's line as the terminal shows it."""
    return screen_text(app).splitlines()[0]


async def test_the_title_names_the_network_a_rerun_trains(fixed_env, fake_runs, monkeypatch):
    """A rerun from the Runs view trains the run's network, not the editor's: the header says so while the run
    lasts, and names the editor's network again when it ends."""
    from tests.tui.conftest import FakeHandle

    monkeypatch.setattr(FakeHandle, "per_poll", 1)  # a run of a second or two: time to read the header
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        cfg = load_config("cnn").to_dict()
        record(app.store, scripted_run(), {**cfg, "source": "cnn", "train": {**cfg["train"], "arch": "cpu-serial"}})
        app._show_runs()
        await pilot.press("4", "r")
        await wait_for(pilot, lambda: app.handle is not None)
        await pilot.pause()
        assert "layerlab — cnn (training on cpu-parallel) · editing quadrant" in title(app)
        await wait_for(pilot, lambda: app.handle is None)
        await pilot.pause()
        assert "layerlab — quadrant" in title(app) and "cnn" not in title(app)
        await pilot.press("s")  # the editor's own network: named once
        await wait_for(pilot, lambda: app.handle is not None)
        await pilot.pause()
        assert "layerlab — quadrant (training on cpu-parallel)" in title(app) and "editing" not in title(app)


async def test_the_empty_network_is_untitled(fixed_env):
    """Chosen from the preset list, the empty network is titled "untitled", saved as untitled.toml by default,
    and its editor says how to add a layer (not the fields of the network shown before)."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        app.query_one("#preset", Select).focus()
        await type_keys(pilot, ["enter", "end", "enter"])  # the last entry of the list: (empty network)
        await wait_for(pilot, lambda: not app.draft.layers)
        await pilot.pause()
        text = screen_text(app)
        assert "layerlab — untitled" in title(app)
        assert "no layers: press a to add one" in text and "layer 0" not in text and "out_features" not in text
        await type_keys(pilot, ["a", "enter"])  # as the hint says (the focus stayed on the preset list: a did nothing)
        await wait_for(pilot, lambda: len(app.draft.layers) == 1)
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: isinstance(app.screen, PathScreen))
        assert app.screen.query_one(Input).value == str(app.save_dir / "untitled.toml")


async def test_the_footer_offers_no_layer_keys_without_layers(fixed_env):
    """With no layer to act on, the footer leaves out Remove; it comes back with the first layer added."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        footer = lambda: screen_text(app).splitlines()[-1]  # noqa: E731
        assert "d Remove" in footer()
        await type_keys(pilot, ["d"] * 5)
        await wait_for(pilot, lambda: not app.draft.layers)
        await pilot.pause()
        assert "d Remove" not in footer() and "a Add" in footer()
        await type_keys(pilot, ["a", "enter"])
        await wait_for(pilot, lambda: len(app.draft.layers) == 1)
        app.query_one("#layers").focus()
        await pilot.pause()
        assert "d Remove" in footer()


# -- layout -----------------------------------------------------------------------------------------------------
async def test_what_matters_is_on_screen_at_80x24(fixed_env):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        from tui.state import RunRecord

        app.current = RunRecord("quadrant", "cpu-serial", 1, 32)
        app.runs.append(app.current)
        for msg in scripted_run()[:-1]:
            app._run_message(msg)
        await pilot.press("3")
        await pilot.pause()
        text = screen_text(app)
        for needle in ("ms/step", "0.300", "samples/s", "ETA", "test acc 0.9700", "Quit", "Help"):
            assert needle in text, needle
        app._run_message(scripted_run()[-1])
        cfg = app._run_config()
        record(app.store, scripted_run(), {**cfg, "train": {**cfg["train"], "arch": "cpu-serial"}})
        record(app.store, scripted_run(rate=9000.0), {**cfg, "train": {**cfg["train"], "arch": "cpu-parallel"}})
        app._show_runs()
        await pilot.press("4")
        await pilot.pause()
        text = screen_text(app)
        assert "speedup" in text and "1.50x" in text and "finished" in text and "Quit" in text


async def test_version_and_help_of_the_launcher(capsys):
    from tui import launch

    assert launch.main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("layerlab ") and out.split()[1][0].isdigit()
    assert launch.main(["tui", "--help"]) == 0
    assert "usage: layerlab [tui [CONFIG]" in capsys.readouterr().out
    assert launch.main(["tui", "a", "b"]) == 2
    assert "unexpected argument 'b'" in capsys.readouterr().err


async def test_an_exception_in_a_handler_is_reported_not_fatal(fixed_env, app_home, tmp_path):
    """The guard: the app stays up, keeps its runs, says where the traceback went, and the log has it."""
    from tui.panes.model import ModelPane

    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        from tui.state import RunRecord

        app.runs.append(RunRecord("quadrant", "cpu-serial", 1, 32, 2, 0.9, 0.1, 1000.0, "finished"))

        def boom(self, *args):
            raise RuntimeError("a bug in a handler")

        original = ModelPane.refresh_table
        ModelPane.refresh_table = boom
        try:
            app.query_one("#input-shape", Input).value = "3"  # its Changed handler refreshes the table
            await pilot.pause(0.2)
            await pilot.press("b")  # an action that raises, too
        finally:
            ModelPane.refresh_table = original
        app.action_cycle_backend = lambda: boom(None)
        await pilot.press("b")
        await pilot.pause(0.2)
        assert app.is_running and len(app.runs) == 1
        assert len(app.errors) >= 2 and all(isinstance(e, RuntimeError) for e in app.errors)
        log = tmp_path / "home" / "logs" / "app-errors.log"
        assert "a bug in a handler" in log.read_text() and "Traceback" in log.read_text()
        assert any(str(log) in m and "RuntimeError: a bug in a handler" in m for m in said(app).splitlines())
        await pilot.press("1")  # and it still answers
        assert app.query_one("#tabs").active == "model"
        app.errors_expected = True


async def test_the_runs_rate_keeps_its_meaning_when_the_run_ends(fixed_env, fake_runs):
    """The Runs table's samples/s leaves step 1 out; the trainer's final figure (step 1 in) must not replace it."""
    from nncore import events as ev

    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        import tui.app

        original = tui.app.RunHandle
        start = scripted_run()[0]
        epoch = ev.EpochEnd(1, 50, 0.5, 0.5, 0.9, 1000.0, 1.6, first_step_s=1.2).to_dict()  # 1,600 samples in 1.6 s
        end = ev.RunFinished(1, 50, 0.5, 0.9, 0.9, 1.7, 1000.0, False).to_dict()
        tui.app.RunHandle = lambda cfg, target=None, store=None: original(cfg, events=[start, epoch, end], store=store)
        try:
            await pilot.press("s")
            await wait_for(pilot, lambda: app.handle is None)
        finally:
            tui.app.RunHandle = original
        run = app.runs[0]
        assert run.samples_per_s == pytest.approx((1600 - 32) / 0.4) and run.s_per_epoch == pytest.approx(0.4)
        row = dict(zip(STORE_COLUMNS, (str(c) for c in app.query_one("#runs-table").get_row_at(0))))
        assert row["samples_per_s"] == f"{(1600 - 32) / 0.4:,.0f}" and row["s_per_epoch"] == "0.40"  # the store's
        assert "finished: test acc 0.9000" in str(app.query_one("#progress-label").render())


async def test_the_editor_follows_a_moved_layer(fixed_env):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("down", "down", "shift+up")
        await pilot.pause()
        labels = [str(label.render()) for label in app.query("#layer-editor .layer-index")]
        assert labels == ["layer 1"] and app.draft.layers[1]["type"] == "Linear"

async def test_a_moved_invalid_layer_is_named_where_it_now_is(fixed_env):
    """A value refused in layer 2, then the layer moved up: every message names it as layer 1, as the table does."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("down", "down", "enter")
        field = focused_param(app, "out_features")
        field.value = ""
        await type_keys(pilot, list("-3"))
        assert str(app.query_one("#model-status").render()).startswith("✗ layer 2 (Linear): out_features -3")
        app.query_one(LayerTable).focus()
        await pilot.press("shift+up")
        await pilot.pause()
        status = str(app.query_one("#model-status").render())
        assert status.startswith("✗ layer 1 (Linear): out_features -3"), status
        assert str(app.query_one(LayerTable).get_row_at(1)[0]) == "✗ 1"
        assert "layer 1 (Linear)" in str(app.query_one("#settings-pane").model_problem)



async def test_a_negative_parameter_is_refused_for_what_it_is(fixed_env):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("enter")
        field = focused_param(app, "out_features")
        field.value = ""
        await type_keys(pilot, list("-1"))
        assert "out_features -1 must be >= 1" in str(app.query_one("#model-status").render())


async def test_a_refused_sweep_field_clears_when_fixed(fixed_env):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("5")
        steps = app.query_one("#sweep-steps", Input)
        steps.focus()
        steps.value = "abc"
        await pilot.press("enter")
        assert str(app.query_one("#sweep-status").render()).startswith("✗")
        steps.value = ""
        await type_keys(pilot, ["5"])
        assert not steps.has_class("error") and not str(app.query_one("#sweep-status").render()).startswith("✗")
        assert app.sweeper is None  # fixing a field does not start the sweep


async def test_the_palette_offers_our_quit_and_help_not_textuals(fixed_env):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        commands = {c.title: c.help for c in app.get_system_commands(app.screen)}
        assert "Keys" not in commands and "stopped cleanly" in commands["Quit"]
        assert str(app.save_dir) in commands["Screenshot"]


async def test_a_csv_file_is_read_in_the_background_and_fed_to_the_model_view(fixed_env, tmp_path, rng):
    """Typing a CSV file's path: while it is read (in a thread: the form stays live) the status says so and
    training stays off; then its width and classes reach the Model view, which marks the network that does not
    fit them, and a label column typed after is answered from the file read once per label."""
    from nncore import tabular
    from tests.nncore.test_tabular import KDD_COLUMNS, kdd_rows, write_csv

    rows, _ = kdd_rows(400, rng)
    path = write_csv(tmp_path / "kdd.csv", rows, KDD_COLUMNS + ["label"])
    tabular.forget()
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        app.query_one("#dataset", Select).value = "idx"
        await pilot.pause()
        app.query_one("#path", Input).focus()
        await type_keys(pilot, list(str(path)))
        pane = app.query_one("#settings-pane")
        model = app.query_one("#model-pane")
        # The Model view hears of the file a message after the Data view: wait for both (under load they part).
        await wait_for(pilot, lambda: pane.data is not None and model.data is pane.data, 30)
        ds = tabular.load_csv(str(path))
        assert pane.data.input_shape == ds.input_shape and pane.data.n_classes == ds.n_classes
        # quadrant's 2-input network does not fit the file: the Data view says so (not "valid"), naming both
        await wait_for(pilot, lambda: "✗ the network does not fit kdd.csv" in screen_text(app), 30)
        assert "settings are valid" not in screen_text(app)
        assert app.query_one("#input-shape", Input).placeholder == f"data: {ds.input_shape[0]}"
        await wait_for(pilot, lambda: app.query_one("#start", Button).disabled, 30)  # quadrant's 2-input network
        app.query_one("#label", Input).value = "protocol_type"                     # does not fit
        await wait_for(pilot, lambda: pane.data is not None and pane.data.n_classes == 3, 30)
        assert app.is_running


async def test_a_preset_whose_data_file_is_missing_opens_with_the_reason(fixed_env, tmp_path, monkeypatch):
    """The KDD presets name a file the user brings: where it is missing they open, the path marked with the
    reason, training off; the CLI refuses the same config with the same reason."""
    monkeypatch.chdir(tmp_path)
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        assert app.open_config("kdd-net-1h")
        await pilot.pause()
        assert app.draft.name == "kdd-net-1h"
        assert "opened; it cannot train yet: kddcup.data_10_percent.gz: no such file" in said(app)
        pane = app.query_one("#settings-pane")
        assert "no such file or directory" in pane.error and app.query_one("#path", Input).has_class("error")
        assert app.query_one("#start", Button).disabled


@pytest.mark.parametrize("burst,expected", [
    ([("end", None)] + [("backspace", None)] * 5 + [(c, c) for c in "5000"], "5000"),
    ([("ctrl+u", None)], ""),  # then a paste, below
])
async def test_keys_that_come_in_one_burst_apply_in_order(fixed_env, burst, expected):
    """Keys typed faster than the app handles them (posted together, as the terminal delivers a fast typist's or a
    script's keys) apply in the order typed: a text field resolved backspace, ctrl+u or Tab only after the key had
    bubbled up to the app, behind the letters typed after it (backspace x 5 then 5000 left "500"; ctrl+u then a
    paste left the field empty)."""
    from textual import events
    from textual.widgets import Input

    app = LayerlabApp("quadrant", store=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2")
        seed = app.query_one("#seed", Input)
        for _ in range(3):
            seed.value = "0"
            seed.focus()
            seed.cursor_position = 1
            await pilot.pause()
            for key, char in burst:
                app.post_message(events.Key(key, char))
            if burst == [("ctrl+u", None)]:
                app.post_message(events.Paste("7000"))
                want = "7000"
            else:
                want = expected
            for _ in range(6):  # (until every key has bubbled and every action has run)
                await pilot.pause()
            assert seed.value == want, [k for k, _ in burst]


@pytest.mark.parametrize("start,key", [("seed", "tab"), ("seed", "shift+tab"), ("ranks", "tab")])
async def test_keys_typed_right_after_tab_go_to_the_field_it_reaches(fixed_env, start, key):
    """Tab (or shift+tab) and digits in one burst: the digits go to the widget Tab moves to, as they do typed
    slowly (a field takes them; the radio buttons pass them to the app, as the views' keys). They went to the
    widget Tab left. Each burst's result is compared with the same keys pressed one at a time."""
    from textual import events
    from textual.widgets import Input, TabbedContent

    async def values(burst: bool):
        app = LayerlabApp("quadrant", store=False)
        state = lambda: ({w.id: w.value for w in app.query(Input)}, getattr(app.focused, "id", None),  # noqa: E731
                         app.query_one(TabbedContent).active, list(app.errors))
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("2")
            app.query_one(f"#{start}").focus()
            await pilot.pause()
            if burst:
                for k, char in [(key, None), ("4", "4"), ("3", "3")]:
                    app.post_message(events.Key(k, char))
            else:
                for k in (key, "4", "3"):
                    await pilot.press(k)
                    await pilot.pause()
            seen, same = None, 0
            for _ in range(60):  # (until every key has bubbled and every action has run: 5 pauses unchanged)
                await pilot.pause()
                now = state()
                same = same + 1 if now == seen else 0
                seen = now
                if same == 5:
                    break
            return seen

    slow, fast = await values(False), await values(True)
    assert not slow[3] and slow[1] != start
    assert fast == slow


@pytest.mark.parametrize("size, full", [((80, 24), False), ((140, 45), True)])
async def test_why_training_cannot_start_fits_beside_the_buttons(fixed_env, size, full):
    """With an invalid layer the Train view says why beside the buttons: in full where it fits in two lines,
    else where to look, so the charts keep their place on a small terminal."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=size) as pilot:
        await pilot.press("down", "down", "enter")
        focused_param(app, "out_features").value = "0"
        await pilot.press("f3")
        await pilot.pause()
        state = app.query_one("#run-state")
        text = str(state.render())
        assert ("layer 2 (Linear): out_features 0" in text) == full, text
        assert ("see the Model view" in text) != full, text
        assert state.size.height <= 2 and app.query_one("#start", Button).disabled


async def test_the_layer_tables_columns_fit_their_cells_after_keys_in_a_burst(fixed_env):
    """Three digits typed into a layer's field in one burst (a paste, or tmux's send-keys) left the table's
    columns as wide as their headers ("Linea", "✗ inva") until the next edit; each column is now as wide as its
    widest cell, and narrows again when that cell does."""
    from rich.cells import cell_len
    from textual import events

    app = LayerlabApp("quadrant", store=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        table = app.query_one(LayerTable)
        fields = {f.param.name: f for f in app.query(ParamInput)}

        async def burst(field: str, text: str):
            fields[field].focus()
            fields[field].value = ""
            await pilot.pause()
            for c in text:
                app.post_message(events.Key(c, c))
            for _ in range(6):
                await pilot.pause()
            widths = [c.get_render_width(table) - 2 * table.cell_padding for c in table.ordered_columns]
            cells = [[str(table.get_cell_at((r, k))) for r in range(table.row_count)] for k in range(len(widths))]
            want = [max(cell_len(x) for x in (c.label.plain, *col)) for c, col in zip(table.ordered_columns, cells)]
            return widths, want, cells

        widths, want, cells = await burst("in_features", "128")  # (the input is 2: layer 0 is marked invalid)
        assert widths == want and cells[0][0] == "✗ 0" and cells[3][0] == "✗ invalid"
        widths, want, cells = await burst("in_features", "auto")  # (the word the empty field shows)
        assert widths == want and cells[0][0] == "0" and cells[2][0] == "out=16"  # narrower again
        assert widths[2] == len("parameters")


@pytest.mark.parametrize("view,stops", [("2", ["dataset", "samples", "noise", "test_ratio", "val_ratio", "optimizer",
                                               "lr", "momentum", "batch_size", "epochs", "seed", "threads", "ranks",
                                               "backend", "tabs"]),
                                        ("5", ["sweep-run", "tabs", "sweep-archs", "sweep-batch", "sweep-filters",
                                               "sweep-steps"])])
async def test_tab_stops_only_where_the_focus_shows(fixed_env, view, stops):
    """Tab in the Data & training view stopped on the settings' scroll container, and in the Analysis view on
    the empty results, where nothing showed the focus (a Tab that seemed to do nothing). Each stop is now a
    field, a button, the radio buttons or the view tabs; a container only while it has something to scroll."""
    from textual.widgets import Tabs

    app = LayerlabApp("quadrant", store=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(view)
        await pilot.pause()
        seen = []
        for _ in range(len(stops)):
            seen.append("tabs" if isinstance(app.focused, Tabs) else app.focused.id)
            await pilot.press("tab")
            await pilot.pause()
        assert seen == stops and app.focused.id == stops[0]


async def test_opening_another_network_asks_before_dropping_changes(fixed_env):
    """A layer removed, then another preset chosen (or ctrl+o): the change was dropped without a word, and the
    title never showed it. The title says "(edited)"; opening asks first, n keeps the network (the preset list
    shows it again), y opens the other one."""
    from tui.screens.pick import ConfirmScreen

    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        await type_keys(pilot, ["d"])
        await wait_for(pilot, lambda: len(app.draft.layers) == 4)
        await pilot.pause()
        assert "layerlab — quadrant (edited)" in title(app)
        for answer in ("n", "y"):
            app.query_one("#preset", Select).value = "cnn"
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            # (the dialog is drawn a refresh after it is pushed)
            await wait_for(pilot, lambda: "Discard the changes to quadrant and open cnn?" in screen_text(app), 10)
            await type_keys(pilot, [answer])
            await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
            await pilot.pause()
            if answer == "n":
                assert len(app.draft.layers) == 4 and app.query_one("#preset", Select).value == "quadrant"
        await wait_for(pilot, lambda: app.draft.name == "cnn")
        assert "layerlab — cnn" in title(app) and "edited" not in title(app)
        await pilot.press("ctrl+o")  # unchanged: opens without a question
        app.screen.query_one("#path-input", Input).value = "quadrant"
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.draft.name == "quadrant")


async def test_quitting_with_unsaved_changes_asks_first(fixed_env):
    """q with a changed network quit at once and the change was lost. It asks: n stays, y quits; ctrl+q while
    the question is open quits too (a second quit is a yes). Unchanged, q quits without a question."""
    from tui.screens.pick import ConfirmScreen

    for answer in ("y", "ctrl+q"):
        app = LayerlabApp("quadrant")
        async with app.run_test(size=(80, 24)) as pilot:
            await type_keys(pilot, ["d"])
            await wait_for(pilot, lambda: len(app.draft.layers) == 4)
            await type_keys(pilot, ["q"])
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            # (the dialog is drawn a refresh after it is pushed)
            await wait_for(pilot, lambda: "Quit and lose the changes to quadrant?" in screen_text(app), 10)
            await type_keys(pilot, ["n"])
            await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
            await pilot.pause()
            assert app.is_running and len(app.draft.layers) == 4
            await type_keys(pilot, ["q"])
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press(answer)
            await wait_for(pilot, lambda: not app.is_running)
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        await type_keys(pilot, ["q"])
        await wait_for(pilot, lambda: not app.is_running)


async def test_a_stray_enter_around_a_run_neither_pauses_it_nor_starts_another(fixed_env):
    """Enter on Start begins a run; Start is then disabled, and the focus went to Pause, where a second Enter paused
    the run; when the run stopped, the focus went to Start (from Pause or Stop), where an Enter began another run.
    The focus now goes to the charts, where Enter does nothing; the keys still act (x stops, s starts)."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        app.query_one("#epochs", Input).value = "500"  # long enough to outlast the test
        await wait_for(pilot, lambda: app.settings_ok)
        await pilot.press("3")
        await pilot.pause()
        assert app.focused.id == "start"
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.handle is not None and app.focused is not None)
        assert app.focused.id == "train-body"
        await type_keys(pilot, ["enter", "space"])
        assert not app.paused and app.handle is not None
        await pilot.press("x")
        await wait_for(pilot, lambda: app.handle is None)
        await pilot.pause()
        assert app.focused.id == "train-body"
        await type_keys(pilot, ["enter", "space"])
        await pilot.pause(0.2)
        assert app.handle is None and len(app.runs) == 1
        await pilot.press("s")  # the key starts the next run from there
        await wait_for(pilot, lambda: app.handle is not None)
        assert len(app.runs) == 2
        # Stop pressed with Enter: its button is disabled as the run ends, and the focus went to Start.
        app.query_one("#stop", Button).focus()
        await pilot.pause()
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.handle is None)
        await pilot.pause()
        assert app.focused.id == "train-body"
        await type_keys(pilot, ["enter"])
        await pilot.pause(0.2)
        assert app.handle is None and len(app.runs) == 2


async def test_w_shows_every_run_column_at_80_columns(fixed_env):
    """At 80 columns the Runs table hides its least useful columns (batch, epochs, ...) and names them for one
    run at a time on the line under it; there was no way to see them for every run. w shows every column whole,
    the table scrolled sideways with the arrows, and w again fits it to the width."""
    from tui.panes.runs import RunsTable

    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        cfg = load_config("quadrant").to_dict()
        for batch in (16, 48):
            record(app.store, scripted_run(), {**cfg, "train": {**cfg["train"], "batch_size": batch,
                                                                "arch": "cpu-serial"}})
        app._show_runs()
        await pilot.press("4")
        await pilot.pause()
        table = app.query_one(RunsTable)
        assert "batch" in table.hidden and "w: columns" in str(app.query_one("#runs-hint").render())
        assert app.query_one("#runs-detail").display
        await type_keys(pilot, ["w"])
        await pilot.pause()
        assert not table.hidden and not table.cut
        assert not app.query_one("#runs-detail").display  # (nothing hidden to name)
        assert table.virtual_size.width > table.size.width
        await type_keys(pilot, ["right"])
        await pilot.pause()
        first = table.ordered_columns[0].get_render_width(table)
        assert table.scroll_x == first  # a column at a time
        await type_keys(pilot, ["right"] * 20)
        await pilot.pause()
        assert table.scroll_x == table.max_scroll_x > first
        await type_keys(pilot, ["left"])
        await pilot.pause()
        assert 0 < table.scroll_x < table.max_scroll_x
        batch = [str(table.get_cell(key, "batch")) for key in table.rows]
        assert sorted(batch) == ["16", "48"]
        await type_keys(pilot, ["w"])
        await pilot.pause()
        assert "batch" in table.hidden and table.scroll_x == 0


async def test_choosing_none_in_the_preset_list_keeps_the_network_named(fixed_env):
    """"(none)", the preset list's first entry, stands for a network that is no preset; chosen by hand it did
    nothing but leave the list saying "(none)" over the quadrant network. The list names the network again and
    a notice says what to pick; the network is untouched."""
    app = LayerlabApp("quadrant")
    app.NOTIFICATION_TIMEOUT = 600
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        layers = len(app.draft.layers)
        preset = app.query_one("#preset", Select)
        assert preset.value == "quadrant"
        preset.focus()
        await pilot.pause()
        await type_keys(pilot, ["enter", "home", "enter"])
        await pilot.pause()
        assert preset.value == "quadrant" and len(app.draft.layers) == layers and not app.draft.edited()
        assert "(none) opens nothing" in said(app)


async def test_a_network_saved_half_done_opens_again(fixed_env, tmp_path):
    """ctrl+s saves the network in the editor as it is, a Conv2D after a 2-D input included; ctrl+o then refused
    that file ("layer 1 (Conv2D): input shape ... is not (channels, height, width)"), so the work could not be
    picked up again. It opens, the reason said and marked, and cannot train until fixed; a file whose layers the
    editor could not hold (an unknown type) is still refused in the prompt. Saved, the network is the file's: the
    preset list no longer names the preset it came from."""
    app = LayerlabApp("quadrant")
    app.NOTIFICATION_TIMEOUT = 600
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        app.draft.add("Conv2D", 1)
        app.query_one("#model-pane").refresh_table(1)
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: isinstance(app.screen, PathScreen))
        path = tmp_path / "half done.toml"
        app.screen.query_one("#path-input", Input).value = str(path)
        await pilot.press("enter")
        await wait_for(pilot, lambda: path.exists())
        await pilot.pause()
        assert app.draft.name == "half done" and app.query_one("#preset", Select).value == Select.NULL  # (a file's)
        with pytest.raises(LayerlabError, match="layer 1 .Conv2D."):
            check_run(load_config(path))  # (what `layerlab train` refuses)
        await pilot.press("1")
        app.open_config("cnn")
        await pilot.pause()
        await pilot.press("ctrl+o")
        await wait_for(pilot, lambda: isinstance(app.screen, PathScreen))
        app.screen.query_one("#path-input", Input).value = str(path)
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.draft.name == "half done")
        await pilot.pause()
        assert [layer["type"] for layer in app.draft.layers][:2] == ["Linear", "Conv2D"]
        assert "opened; it cannot train yet" in said(app) and "layer 1 (Conv2D)" in said(app)
        assert app.query_one("#start", Button).disabled
        bad = tmp_path / "bad.toml"
        bad.write_text(path.read_text().replace('"Conv2D"', '"Conv9D"'))
        await pilot.press("ctrl+o")
        await wait_for(pilot, lambda: isinstance(app.screen, PathScreen))
        app.screen.query_one("#path-input", Input).value = str(bad)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, PathScreen) and "Conv9D" in str(app.screen.query_one("#path-hint").render())


@pytest.mark.parametrize("how", ["//", "/~/"])
async def test_a_path_typed_after_the_proposed_directory_is_taken_whole(fixed_env, tmp_path, monkeypatch, how):
    """The open prompt proposes the save directory and keys typed go after it: /dev/null typed there was read as
    <dir>/dev/null. A path from / or ~/ typed after the proposed one is taken whole."""
    monkeypatch.setenv("HOME", str(tmp_path))
    path = tmp_path / "typed.toml"
    path.write_text(NO_DATA)
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+o")
        await wait_for(pilot, lambda: isinstance(app.screen, PathScreen))
        field = app.screen.query_one("#path-input", Input)
        assert field.value.endswith("/")
        await type_keys(pilot, ["end", *(str(path) if how == "//" else "~/typed.toml")], delay=0)
        assert field.value.endswith(f"/{str(path)}" if how == "//" else "/~/typed.toml")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.draft.name == "typed")
