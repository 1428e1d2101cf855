"""The Runs view over the run store: runs written by `layerlab train` listed, their curves plotted from the
store, marked runs overlaid, rerun, delete and export from the view, and a store that cannot be used."""
import json
import os
import subprocess
import sys

import pytest
from textual.widgets import DataTable

from nncore.store import Store
from tests.tui.conftest import record, scripted_run, screen_text, wait_for
from tui.app import LayerlabApp
from tui.panes.runs import RunsPane
from tui.screens.pick import ConfirmScreen
from tui.state import STORE_COLUMNS
from tui.widgets.charts import Chart

SIZE = (120, 36)


def _rows(app) -> list[dict]:
    table = app.query_one("#runs-table", DataTable)
    return [dict(zip(STORE_COLUMNS, (str(c) for c in table.get_row_at(i)))) for i in range(table.row_count)]


def _train(home, *args) -> None:
    env = {**os.environ, "LAYERLAB_HOME": str(home)}
    proc = subprocess.run([sys.executable, "-m", "tui.launch", "train", "quadrant", "--epochs", "2", "--quiet",
                           "--jsonl", str(home / f"run{len(list(home.glob('run*.jsonl')))}.jsonl"), *args],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


def _events(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_runs_written_by_train_are_listed_and_plotted(fixed_env, tmp_path):
    home = tmp_path / "home"  # the app's store (conftest points LAYERLAB_HOME here)
    home.mkdir(exist_ok=True)
    _train(home, "--arch", "cpu-serial")
    _train(home, "--arch", "cpu-parallel", "--lr", "0.05")
    first, second = _events(home / "run0.jsonl"), _events(home / "run1.jsonl")
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        await pilot.pause()
        rows = _rows(app)
        assert [r["arch"] for r in rows] == ["cpu-parallel", "cpu-serial"]  # newest first
        assert all(r["network"] == "quadrant" and r["status"] == "finished" and r["epochs"] == "2" for r in rows)
        assert rows[1]["speedup"] == "base" and rows[0]["speedup"].endswith("x")
        # The selected (newest) run's curves hold its events' values.
        loss, acc = app.query_one("#runs-loss", Chart), app.query_one("#runs-acc", Chart)
        spe = second[0]["steps_per_epoch"]
        steps = [e for e in second if e["event"] == "step"]
        epochs = [e for e in second if e["event"] == "epoch_end"]
        assert loss.series["train (raw)"][0] == pytest.approx([e["step"] / spe for e in steps])
        assert loss.series["train (raw)"][1] == pytest.approx([e["loss"] for e in steps])
        assert loss.series["test"][1] == pytest.approx([e["test_loss"] for e in epochs])
        assert acc.series["test acc"][1] == pytest.approx([e["test_acc"] for e in epochs])
        # Down to the older run: its curves.
        await pilot.press("down")
        await pilot.pause()
        old_epochs = [e for e in first if e["event"] == "epoch_end"]
        assert loss.series["test"][1] == pytest.approx([e["test_loss"] for e in old_epochs])
        # Both marked: overlaid, one train and one test curve each, labelled by run id.
        ids = [int(r["id"]) for r in rows]
        await pilot.press("space", "up", "space")
        await pilot.pause()
        assert set(loss.series) == {f"#{ids[1]} train", f"#{ids[1]} test", f"#{ids[0]} train", f"#{ids[0]} test"}
        assert loss.series[f"#{ids[1]} test"][1] == pytest.approx([e["test_loss"] for e in old_epochs])
        assert loss.series[f"#{ids[0]} test"][1] == pytest.approx([e["test_loss"] for e in epochs])
        assert set(acc.series) == {f"#{ids[0]}", f"#{ids[1]}"}
        assert "2 marked" in screen_text(app)
        # The newest unmarked: the one still marked is shown, though the cursor is on the other.
        await pilot.press("space")
        await pilot.pause()
        assert acc.series["test acc"][1] == pytest.approx([e["test_acc"] for e in old_epochs])


async def test_delete_and_export_from_the_view(fixed_env, tmp_path):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        cfg = app._run_config()
        ids = [record(app.store, scripted_run(), {**cfg, "train": {**cfg["train"], "arch": a}})
               for a in ("cpu-serial", "cpu-parallel", "cpu-serial")]
        app._show_runs()
        await pilot.press("4")
        await pilot.pause()
        assert [int(r["id"]) for r in _rows(app)] == ids[::-1]
        await pilot.press("space", "down", "space")  # the two newest marked
        await pilot.press("d")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen) and f"#{ids[2]}" in app.screen.question
        await pilot.press("n")  # declined: nothing goes
        await pilot.pause()
        assert len(_rows(app)) == 3
        await pilot.press("d")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert [int(r["id"]) for r in _rows(app)] == [ids[0]]
        assert [r["id"] for r in Store().runs()] == [ids[0]]
        # Export (nothing marked: every run) as JSON, and it parses to what the store holds.
        await pilot.press("e")
        await pilot.pause()
        app.screen.query_one("#path-input").value = str(tmp_path / "out.json")
        await pilot.press("enter")
        await wait_for(pilot, lambda: (tmp_path / "out.json").exists())
        exported = json.loads((tmp_path / "out.json").read_text())
        assert exported == [json.loads(json.dumps(Store().run(ids[0])))]


async def test_a_new_run_shows_at_the_top_at_80x24(fixed_env):
    # At the top row the table follows the newest run, scrolled to it; with another run selected, that run
    # stays selected when a new one comes in above.
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        cfg = app._run_config()
        rec = lambda: record(app.store, scripted_run(epochs=1), cfg)  # noqa: E731
        ids = [rec() for _ in range(4)]
        app._show_runs()
        await pilot.press("4")
        await pilot.pause()
        pane, table = app.query_one("#runs-pane"), app.query_one("#runs-table", DataTable)
        assert pane.selected_id() == ids[-1]
        ids.append(rec())
        app._show_runs()
        await pilot.pause()
        assert pane.selected_id() == ids[-1] and table.cursor_row == 0 and table.scroll_y == 0
        await pilot.press("down", "down")
        chosen = pane.selected_id()
        assert chosen == ids[-3]
        ids.append(rec())
        app._show_runs()
        await pilot.pause()
        assert pane.selected_id() == chosen and [int(r["id"]) for r in _rows(app)][0] == ids[-1]


async def test_the_charts_keep_their_titles_at_80x24_with_a_full_table(fixed_env):
    """With a dozen runs the table takes its share of 80x24 and the charts get 9 rows where the detail line takes
    two (here: a terminal two rows shorter): they dropped their titles and axis labels, leaving two unnamed plots.
    The title stays, the x axis named in it."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 22)) as pilot:
        cfg = app._run_config()
        for _ in range(13):
            record(app.store, scripted_run(epochs=3), cfg)
        app._show_runs()
        await pilot.press("4")
        await pilot.pause()
        await pilot.press("down")
        await pilot.pause(0.5)
        assert app.query_one("#runs-loss", Chart).size.height < 10  # the case: a short chart
        text = screen_text(app)
        assert "loss against epoch" in text and "test accuracy against epoch" in text, text


@pytest.mark.parametrize("size", [(140, 45), (80, 24)])
async def test_each_run_says_what_it_trained_on(fixed_env, size):
    """Two runs of one network, on the quadrant data and on a CSV file, looked alike everywhere in the view (only
    their speedup, "—", hinted at a difference). The data column says which, and where the terminal hides it,
    the detail line under the table."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=size) as pilot:
        cfg = app._run_config()
        record(app.store, scripted_run(epochs=2), cfg)
        record(app.store, scripted_run(epochs=2), {**cfg, "data": {**cfg["data"], "dataset": None,
                                                                  "path": "/somewhere/small.csv"}})
        app._show_runs()
        await pilot.press("4")
        await pilot.pause(0.3)
        assert [r["data"] for r in _rows(app)] == ["small.csv", "quadrant"]
        text = screen_text(app)
        if size[0] == 140:
            lines = [line for line in text.splitlines() if "finished" in line]
            assert "small.csv" in lines[0] and "quadrant" in lines[1].split("finished")[1], text
        else:
            assert "data small.csv" in text, text  # the newest run selected: its detail line


async def test_speedup_is_a_backends_over_cpu_serial_not_one_serial_run_over_another(fixed_env):
    """The newest cpu-serial run of a network and batch size is the base; an older one gets no speedup (its ratio
    to the base, 0.80x here, would read as a slower backend); runs on other backends get theirs over the base."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        cfg = app._run_config()
        for arch, rate in [("cpu-serial", 8000.0), ("cpu-parallel", 12000.0), ("cpu-serial", 10000.0)]:
            record(app.store, scripted_run(rate=rate), {**cfg, "train": {**cfg["train"], "arch": arch}})
        app._show_runs()
        await pilot.press("4")
        await pilot.pause()
        rows = [line.split("quadrant", 1)[1].split() for line in screen_text(app).splitlines()
                if "quadrant" in line and "finished" in line]  # arch, samples/s, speedup, ...
        assert [(cells[0], cells[2]) for cells in rows] == [
            ("cpu-serial", "base"), ("cpu-parallel", "1.20x"), ("cpu-serial", "—")]

async def test_a_running_run_is_not_deleted_and_a_sweep_has_no_curves(fixed_env):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        cfg = app._run_config()
        record(app.store, scripted_run()[:5], cfg)  # still running: no run_finished yet
        sweep = app.store.begin("sweep", "quadrant", {"model": cfg["model"]}, arch="cpu-serial")
        app.store.add_points(sweep, [{"arch": "cpu-serial", "batch": 32, "samples_per_s": 1000.0}])
        app.store.update(sweep, status="finished")
        app._show_runs()
        await pilot.press("4")
        await pilot.pause()
        assert "is a sweep" in str(app.query_one("#runs-loss", Chart).render())
        await pilot.press("r")  # a sweep is not rerun as training
        await pilot.pause()
        assert app.handle is None
        await pilot.press("down", "d")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen) and len(_rows(app)) == 2
        # A sweep stopped part-way says how many of its points it kept.
        from tui.child import record_sweep

        job = {"model": cfg["model"], "archs": ["cpu-serial"], "batches": [16, 32, 48], "filters": [None],
               "threads": [2], "steps": 5, "repeats": 1, "warmup": 1, "name": "part"}
        record_sweep(app.store, job, [{"arch": "cpu-serial", "batch": 16, "samples_per_s": 900.0}], None,
                     {"points": 1, "of": 3})
        app._show_runs()
        await pilot.pause()
        await pilot.press("home")  # (the newest run)
        await pilot.pause()
        shown = str(app.query_one("#runs-loss", Chart).render())
        assert "is a sweep stopped after 1 of 3 points" in shown and "`layerlab runs show" in shown, shown


@pytest.mark.parametrize("damage, reason", [("config = '{x'", "its config is not JSON"),
                                           ("started = 'garbage'", "its started is 'garbage', not a number")])
async def test_a_damaged_run_is_named_and_the_others_are_listed(fixed_env, damage, reason):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        cfg = app._run_config()
        ids = [record(app.store, scripted_run(epochs=1), cfg) for _ in range(3)]
        app.store.db.execute(f"UPDATE runs SET {damage} WHERE id = ?", (ids[1],))  # (edited by hand)
        app._show_runs()
        await pilot.press("4")
        await pilot.pause()
        assert [int(r["id"]) for r in _rows(app)] == [ids[2], ids[0]]
        hint = str(app.query_one("#runs-hint").render())
        assert f"✗ run {ids[1]} in {app.store.path}: damaged ({reason}); not shown" in hint
        assert "runs 1–2 of 2 ·" in hint  # (not "more load as you go down": the damaged run is not counted)
        await pilot.press("down")  # the oldest run: its curves, as recorded
        await pilot.pause()
        assert app.query_one("#runs-loss", Chart).series["test"][1] == pytest.approx([0.65])


async def test_a_paused_run_is_not_deleted(fixed_env):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        cfg = app._run_config()
        paused = record(app.store, scripted_run()[:5], cfg)  # recorded by this (live) process, not finished
        ended = record(app.store, scripted_run(), cfg)
        await pilot.press("4")
        await pilot.pause()
        pane = app.query_one(RunsPane)
        pane.paused_pid = os.getpid()  # as the app sets it while its run is paused
        pane.load(app.store)
        await pilot.press("down")  # (the older run)
        await pilot.pause()
        assert [(int(r["id"]), r["status"]) for r in _rows(app)] == [(ended, "finished"), (paused, "paused")]
        await pilot.press("d")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
        assert [str(n.message) for n in app._notifications][-1] == \
            f"run #{paused} is paused: stop it before deleting it"
        assert [r["id"] for r in app.store.runs()] == [ended, paused]


async def test_rerun_from_the_store(fixed_env, fake_runs):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        cfg = app._run_config()
        record(app.store, scripted_run(), {**cfg, "train": {**cfg["train"], "arch": "cpu-serial", "epochs": 7}})
        app._show_runs()
        await pilot.press("4", "r")
        await wait_for(pilot, lambda: fake_runs)
        assert fake_runs[-1]["train"]["arch"] == "cpu-parallel" and fake_runs[-1]["train"]["epochs"] == 7
        await wait_for(pilot, lambda: app.handle is None)
        await pilot.press("4")
        await pilot.pause()
        assert [r["arch"] for r in _rows(app)] == ["cpu-parallel", "cpu-serial"]  # the rerun was recorded


@pytest.mark.parametrize("damage", ["garbage", "truncated", "newer"])
async def test_a_store_that_cannot_be_used_leaves_the_app_without_history(fixed_env, fake_runs, tmp_path, damage):
    home = tmp_path / "home"
    path = home / "runs.sqlite"
    home.mkdir(exist_ok=True)
    if damage == "garbage":
        path.write_bytes(os.urandom(3000))
    else:
        store = Store(path)
        cfg = {"model": {"layers": []}, "train": {"batch_size": 8}}
        store.begin("train", "x", cfg)
        if damage == "newer":
            store.db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
        store.close()
        if damage == "truncated":
            path.write_bytes(path.read_bytes()[:1500])
    before = path.read_bytes()
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        assert app.store.memory and str(path) in app.store_note
        await pilot.press("s")  # a run still trains, and is kept for the session
        await wait_for(pilot, lambda: app.handle is None)
        await pilot.press("4")
        await pilot.pause()
        rows = _rows(app)
        assert len(rows) == 1 and rows[0]["status"] == "finished" and rows[0]["epochs"] == "3"
        assert "no history" in screen_text(app)
        assert app.query_one("#runs-loss", Chart).series["test"][1] == pytest.approx([0.65, 0.325, 0.65 / 3])
    assert path.read_bytes() == before  # never written


async def test_no_store_keeps_the_session_only(fixed_env, fake_runs, tmp_path):
    app = LayerlabApp("quadrant", store=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("s")
        await wait_for(pilot, lambda: app.handle is None)
        await pilot.press("4")
        await pilot.pause()
        assert len(_rows(app)) == 1 and "--no-store" in screen_text(app)
    assert not (tmp_path / "home" / "runs.sqlite").exists()


async def test_a_store_named_that_is_not_there_yet_is_announced_once(fixed_env, tmp_path):
    """--store PATH for a file not there yet: the app makes the store and says where, once (a typo shows)."""
    path = tmp_path / "new.sqlite"
    for _ in range(2):
        app = LayerlabApp("quadrant", store=str(path))
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            said = [n.message for n in app._notifications if "new run store" in n.message]
        assert said == ([f"new run store created: {path}"] if _ == 0 else [])
    assert path.is_file()


async def test_the_runs_view_shows_runs_recorded_elsewhere_when_it_is_shown(fixed_env):
    """A run recorded by another process (`layerlab train` in another terminal) while the app was open showed up
    only after a restart: the view read the store at start and after the app's own runs."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("4")
        await pilot.pause()
        assert "sweep" not in screen_text(app)
        other = Store(app.store.path)  # another connection to the same file, as another process has
        other.add_finished("sweep", "quadrant-elsewhere", {"model": {}, "sweep": {}}, [], {}, arch="cpu-serial")
        await pilot.press("1")
        await pilot.press("4")
        await wait_for(pilot, lambda: "quadrant-elsewhere" in [r["network"] for r in _rows(app)])


async def test_the_runs_view_follows_the_store_while_it_is_shown(fixed_env):
    """Runs recorded by another process appear while the view stays open (they needed another view and back);
    an empty store says so once (the hint under the table), and where the curves go what will be there."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("4")
        await pilot.pause()
        assert "curves appear here" in str(app.query_one("#runs-loss", Chart).render())
        assert screen_text(app).count("no runs yet") == 1, screen_text(app)
        other = Store(app.store.path)  # another connection to the same file, as another process has
        other.add_finished("sweep", "from-elsewhere", {"model": {}, "sweep": {}}, [], {}, arch="cpu-serial")
        await wait_for(pilot, lambda: "from-elsewhere" in [r["network"] for r in _rows(app)], 20)


async def test_home_and_end_go_to_the_first_and_last_run(fixed_env):
    """Home and End moved nothing in the runs table (DataTable's own scroll sideways)."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        cfg = app._run_config()
        for _ in range(4):
            record(app.store, scripted_run(epochs=1), cfg)
        await pilot.press("4")
        await wait_for(pilot, lambda: len(_rows(app)) == 4)
        table = app.query_one("#runs-table", DataTable)
        await pilot.press("end")
        await wait_for(pilot, lambda: table.cursor_row == 3)
        await pilot.press("home")
        await wait_for(pilot, lambda: table.cursor_row == 0)


async def test_a_run_refused_before_its_first_epoch_says_why_in_the_runs_view(fixed_env):
    """The app records every attempt, a refused one too; its curves' place said "no curves yet", as if it were
    still to come, where `layerlab runs show` gave the reason."""
    from nncore.events import RunFailed

    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        cfg = app._run_config()
        record(app.store, [RunFailed("train.epochs 2147483647 x 50 steps per epoch is beyond the kernels' "
                                     "32-bit index range", 2).to_dict()], cfg)
        await pilot.press("4")
        await wait_for(pilot, lambda: len(_rows(app)) == 1)
        await pilot.pause()
        shown = " ".join(str(app.query_one("#runs-loss", Chart).render()).split())
        assert "failed before its first epoch: train.epochs 2147483647" in shown, shown


async def test_a_run_stopped_before_its_first_epoch_does_not_promise_curves(fixed_env):
    """A run stopped by hand before an epoch ended (no error recorded) said "no curves yet", as if still to come."""
    from nncore.events import RunFinished

    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        cfg = app._run_config()
        started = [e for e in scripted_run() if e["event"] == "run_started"]  # stopped before a step was logged
        record(app.store, started + [RunFinished(0, 3, None, None, None, 0.1, 5000.0, True).to_dict()], cfg)
        await pilot.press("4")
        await wait_for(pilot, lambda: len(_rows(app)) == 1)
        await pilot.pause()
        assert _rows(app)[0]["status"] == "stopped"
        shown = " ".join(str(app.query_one("#runs-loss", Chart).render()).split())
        assert "stopped before its first epoch ended: no curves" in shown and "yet" not in shown, shown


async def test_a_sweep_row_leaves_the_status_column_readable_at_80_columns(fixed_env):
    """A sweep's archs (cpu-serial,cpu-parallel) are shown as serial+parallel: whole, they widened the arch column
    until the status column showed only "st"/"fi" at 80x24."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        cfg = {"model": {}, "data": {"dataset": "quadrant"}, "train": {"arch": "cpu-serial", "batch_size": 32}}
        record(app.store, scripted_run(epochs=2), cfg)
        app.store.add_finished("sweep", "quadrant", {"model": {}, "sweep": {}}, [], {},
                               arch="cpu-serial,cpu-parallel", threads=2)
        app._show_runs()
        await pilot.press("4")
        await pilot.pause()
        text = screen_text(app)
        header = next(line for line in text.splitlines() if "samples/s" in line)
        assert "status" in header.split(), header
        assert "serial+parallel" in text and "finished" in text
        assert next(r for r in app.query_one("#runs-pane").rows if r["kind"] == "sweep")["arch"] == \
            "cpu-serial,cpu-parallel"  # (what a rerun or an export reads)


async def test_the_table_fits_80_columns_and_shows_every_column_at_140(fixed_env):
    """At 80x24 every column shown fits the terminal (no scrolling sideways): the least useful columns are hidden,
    long network names are cut, and the line under the table gives the selected run's hidden values in full. At
    140x45 every column is back but the two least useful (threads, MPI ranks: with 18-character names and a
    sweep's "serial+parallel" the table is 145 cells wide), the names whole."""
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        cfg = app._run_config()
        long = "mnist-conv-2x64-bn"
        for name, arch in [("quadrant", "cpu-serial"), (long, "cpu-parallel"), ("kdd-net-2h-relu-v2", "cpu-serial")]:
            record(app.store, scripted_run(), {**cfg, "source": name, "train": {**cfg["train"], "arch": arch}})
        app.store.add_finished("sweep", long, {"model": {}, "sweep": {}}, [], {}, arch="cpu-serial,cpu-parallel",
                               threads=2)
        app._show_runs()
        await pilot.press("4")
        await pilot.pause()
        table = app.query_one("#runs-table", DataTable)

        def header() -> str:
            return next(line for line in screen_text(app).splitlines() if "samples/s" in line)

        assert table.virtual_size.width <= table.scrollable_content_region.width and table.max_scroll_x == 0
        for label in ["✓", "#", "network", "arch", "samples/s", "speedup", "test acc", "status"]:
            assert f" {label} " in header(), header()
        assert not {"started", "kind", "thr", "ranks", "s/epoch"} & set(header().split())
        rows = [line for line in screen_text(app).splitlines() if "finished" in line]
        assert len(rows) == 4 and "serial+parallel" in rows[0]
        assert not any(long in line for line in rows) and "mnist-con…" in rows[0]  # cut with an ellipsis
        record(app.store, scripted_run(), {**cfg, "source": "quadrant (edited)"})  # (" (edi…" read as a name)
        app._show_runs()
        await pilot.pause()
        assert " quadrant*  " in next(line for line in screen_text(app).splitlines() if "    5  " in line)
        app.store.remove([5])
        app._show_runs()
        await pilot.pause()
        detail = str(app.query_one("#runs-detail").render())
        assert detail.startswith("#4: ") and long in detail and "sweep" in detail and "2 thr" in detail
        await pilot.press("down", "down")  # the long-named training run
        await pilot.pause()
        detail = str(app.query_one("#runs-detail").render())
        assert detail.startswith("#2: ") and long in detail and "train" in detail and "3 ep" in detail
        assert f"batch {cfg['train']['batch_size']}" in detail
        # The table still holds every value, hidden or not (its rows read in full at any width).
        assert [r["network"] for r in _rows(app)] == [long, "kdd-net-2h-relu-v2", long, "quadrant"]
        assert [r["kind"] for r in _rows(app)] == ["sweep", "train", "train", "train"]

        await pilot.resize_terminal(140, 45)
        await pilot.pause()
        assert table.max_scroll_x == 0
        for label in ["network", "arch", "samples/s", "speedup", "test acc", "status", "data", "batch", "ep",
                      "s/epoch", "started", "kind"]:
            assert f" {label} " in header(), header()
        assert long in screen_text(app)
        detail = str(app.query_one("#runs-detail").render())  # the selected run's threads, where hidden
        assert " thr " in header() or " thr" in detail, (header(), detail)
        # A sweep has points, no epochs: its epochs cell is a dash, a training run's its count.
        epochs = [str(table.get_row_at(i)[STORE_COLUMNS.index("epochs")]) for i in range(table.row_count)]
        assert [e for e, r in zip(epochs, _rows(app)) if r["kind"] == "sweep"] == ["—"]
        assert all(e.isdigit() for e, r in zip(epochs, _rows(app)) if r["kind"] == "train"), epochs
        await pilot.resize_terminal(80, 24)  # and narrow again
        await pilot.pause()
        assert table.max_scroll_x == 0 and "started" not in header() and app.query_one("#runs-detail").display


async def test_the_footer_keeps_quit_in_view_at_80_columns_during_a_run(fixed_env, fake_runs, monkeypatch):
    """At 80 columns the Runs view's footer during a run ("space Mark r Rerun d Delete e Export p Pause x Stop
    b Backend ? Help ^q") was cut before Quit. Rerun, delete and export are named on the line under the table
    (and in help), so the footer leaves them out: Quit shows running and paused, and the palette key too."""
    from tests.tui.conftest import FakeHandle

    monkeypatch.setattr(FakeHandle, "per_poll", 0)  # a run that goes on until the test ends
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        cfg = app._run_config()
        record(app.store, scripted_run(), cfg)
        app._show_runs()
        await pilot.press("s")
        await wait_for(pilot, lambda: app.handle is not None)
        await pilot.press("4")
        await pilot.pause()
        footer = lambda: screen_text(app).splitlines()[-1]  # noqa: E731
        hint = str(app.query_one("#runs-hint").render())
        assert "r: rerun" in hint and "d: delete" in hint and "e: export" in hint
        for state in ("running", "paused"):
            if state == "paused":
                await pilot.press("p")
                await wait_for(pilot, lambda: app.paused)
                await pilot.pause()
                assert "p Resume" in footer() and "n Step" in footer()
            line = footer()
            assert "x Stop" in line and "space Mark" in line, line
            assert line.rstrip().endswith("^p palette") and "^q Quit" in line, f"{state}: {line!r}"


def test_seconds_per_epoch_keep_two_significant_digits_under_a_tenth():
    """A run of 150 epochs in a second showed "0.00 s/epoch"."""
    from tui.panes.runs import _cell

    assert [_cell("s_per_epoch", v) for v in (12.345, 0.1234, 0.0137, 0.00067)] == ["12.35", "0.12", "0.014",
                                                                                     "0.00067"]


def test_the_detail_line_breaks_between_values_never_inside_one():
    """The line under the table named the hidden values as one string, which the terminal wrapped wherever the
    width ran out ("... 0.01" / "s/epoch"). Broken to a width, each value stays whole on its line."""
    from tui.panes.runs import _detail

    row = {"id": 12, "network": "kdd-net-2h-relu-v2", "arch": "cpu-parallel", "kind": "train",
           "started": "2026-11-27 05:41", "batch": 1000, "epochs": 37, "threads": 2, "ranks": 1,
           "s_per_epoch": 0.0137, "samples_per_s": 81234.5}
    hidden = {"started", "kind", "batch", "epochs", "threads", "ranks", "s_per_epoch"}
    whole = _detail(row, hidden, {"network": 9})
    assert "\n" not in whole
    values = whole.removeprefix("#12: ").split(", ")
    assert len(values) == 8 and "0.014 s/epoch" in values and "kdd-net-2h-relu-v2" in values
    for width in (17, 23, 30, 41, 58):
        lines = _detail(row, hidden, {"network": 9}, width).splitlines()
        assert len(lines) > 1 and lines[0].startswith("#12: ")
        # Every line fits, but one holding a single value longer than the width (the terminal wraps that one).
        assert all(len(line) <= width or ", " not in line for line in lines), (width, lines)
        got = [v for line in lines for v in line.removeprefix("#12: ").rstrip(",").split(", ")]
        assert got == values, (width, lines)
    assert _detail(row, hidden, {"network": 9}, 500) == whole
