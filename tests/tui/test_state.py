"""The app's rules without widgets: parameter kinds and parsing, draft edits and checks against the dataset,
run records, the Runs view's rows and speedups, saving."""

import pytest

from nncore.config import load_config
from nncore.data import DatasetInfo
from nncore.report import plural
from tui.state import Draft, RunRecord, editable, layer_params, parse_param, parse_shape, store_rows

QUADRANT = DatasetInfo("quadrant", (2,), 2)
IMAGES = DatasetInfo("fashion-subset", (1, 28, 28), 10)


def test_layer_params_come_from_the_layer_classes():
    conv = {p.name: p for p in layer_params("Conv2D")}
    assert list(conv) == ["out_channels", "kernel_size", "stride", "padding", "in_channels", "init"]
    assert (conv["out_channels"].kind, conv["out_channels"].placeholder) == ("int", "required")
    assert (conv["kernel_size"].kind, conv["stride"].placeholder, conv["padding"].placeholder) == ("pair", "1", "0")
    assert conv["init"].kind == "init" and conv["in_channels"].placeholder == "auto"
    assert [p.name for p in layer_params("ReLU")] == []
    assert {p.name: p.placeholder for p in layer_params("MaxPool2D")} == {"kernel_size": "required",
                                                                          "stride": "= kernel"}


@pytest.mark.parametrize("kind,text,value", [("int", "8", 8), ("int", " 016 ", 16), ("int", "", None),
                                             ("pair", "3", 3), ("pair", "3x2", [3, 2]), ("pair", "3,2", [3, 2]),
                                             ("pair", "[2, 1]", [2, 1]), ("pair", "(4 5)", [4, 5]),
                                             ("init", "he", "he"), ("init", "", None)])
def test_parse_param(kind, text, value):
    p = next(p for p in layer_params("Conv2D") if p.kind == kind)
    assert parse_param(p, text) == value


def test_the_word_an_empty_field_shows_may_be_typed():
    """in_features shows "auto" when empty; typing the word itself was refused as "must be a whole number"."""
    lin = {p.name: p for p in layer_params("Linear")}
    assert parse_param(lin["in_features"], "auto") is None and parse_param(lin["in_features"], " Auto ") is None
    with pytest.raises(ValueError, match="out_features 'auto' must be a whole number"):
        parse_param(lin["out_features"], "auto")  # (required: nothing stands for it)


@pytest.mark.parametrize("kind,text", [("int", "2.5"), ("int", "8,"), ("int", "3x2"), ("int", "-1"), ("int", "５"),
                                       ("int", "1e3"), ("pair", "3x"), ("pair", "1x2x3"), ("init", "glorot")])
def test_parse_param_refuses(kind, text):
    p = next(p for p in layer_params("Conv2D") if p.kind == kind)
    with pytest.raises(ValueError, match=p.name):
        parse_param(p, text)


@pytest.mark.parametrize("name,text,reason", [
    ("out_channels", "999999999999", "out_channels 999999999999 must be at most 2147483647"),
    ("out_channels", "2147483648", "out_channels 2147483648 must be at most 2147483647"),
    ("out_channels", "0", "out_channels 0 must be >= 1"), ("out_channels", "000", "out_channels 0 must be >= 1"),
    ("kernel_size", "3x99999999999", "kernel_size 99999999999 must be at most 2147483647"),
    ("kernel_size", "0x2", "kernel_size 0 must be >= 1"),
    pytest.param("in_channels", "9" * 5000, "in_channels 999999999999… must be at most 2147483647",
                 id="5000 digits, past what int() converts")])
def test_parse_param_refuses_what_is_out_of_the_parameters_own_range(name, text, reason):
    """A number no network could take (beyond the kernels' 32-bit integers, below the minimum) is refused where it
    is typed, with a one-line reason, so the layer keeps its last good value and the table its shapes."""
    p = next(p for p in layer_params("Conv2D") if p.name == name)
    with pytest.raises(ValueError) as exc:
        parse_param(p, text)
    assert str(exc.value) == reason


def test_parse_param_takes_the_ends_of_each_range():
    conv = {p.name: p for p in layer_params("Conv2D")}
    assert parse_param(conv["out_channels"], "2147483647") == 2147483647
    assert parse_param(conv["padding"], "0") == 0 and parse_param(conv["padding"], "0x1") == [0, 1]
    assert parse_param(conv["stride"], "1x2147483647") == [1, 2147483647]


def test_parse_shape():
    assert parse_shape("1,28,28") == parse_shape("1x28x28") == parse_shape("[1, 28, 28]") == [1, 28, 28]
    assert parse_shape(" 2 ") == [2] and parse_shape("") is None
    for bad in ("abc", "1,2", "1.5", "2,,x"):
        with pytest.raises(ValueError, match="input"):
            parse_shape(bad)


def test_draft_edits_and_checks():
    d = Draft.from_model(load_config("cnn").model, "cnn")
    rows, err = d.check(IMAGES)
    assert err is None and [r["out_shape"] for r in rows][-1] == [10]
    at = d.add("ReLU", 2)
    assert d.layers[at] == {"type": "ReLU"} and len(d.layers) == 6
    d.remove(at)
    assert d.move(0, 1) == 1 and d.layers[0]["type"] == "ReLU"
    d.move(1, -1)
    d.layers[0]["kernel_size"] = 40
    rows, err = d.check(IMAGES)
    assert err is not None and err.layer == 0 and "kernel_size 40" in str(err) and rows == []
    d.layers[0]["kernel_size"] = 3
    d.set_type(4, "Conv2D")  # a conv after Flatten: invalid at layer 4, the rows before it still shown
    rows, err = d.check(IMAGES)
    assert err.layer == 4 and len(rows) == 4
    d.set_type(4, "Linear")  # out_features 16 for 10 classes: the output layer is at fault
    rows, err = d.check(IMAGES)
    assert err.layer == 4 and "16 output(s)" in str(err) and "has 10" in str(err) and len(rows) == 5
    d.layers[4]["out_features"] = 10
    assert d.check(IMAGES)[1] is None
    rows, err = d.check(QUADRANT)  # the same network against 2-D data: the input is at fault
    assert err.field == "model.input" and "does not match dataset quadrant's [2]" in str(err)


def test_an_empty_input_is_the_datasets():
    d = Draft([{"type": "Linear", "out_features": 1}], None, "bce", "x")
    assert d.spec() == {"layers": d.layers, "loss": "bce"}
    assert d.spec(QUADRANT)["input"] == [2] and d.check(QUADRANT)[1] is None
    assert "missing field 'input'" in str(d.check()[1])


def test_from_model_takes_aliases_and_any_case():
    d = Draft.from_model({"input": 2, "loss": "MSE", "layers": [{"type": "linear", "out_features": 1}]}, "m")
    assert d.input == [2] and d.loss == "mse" and d.layers == [{"type": "Linear", "out_features": 1}]


def test_saved_draft_opens_again(tmp_path):
    d = Draft.from_model(load_config("cnn").model, "mine")
    d.layers[0].update(out_channels=5, kernel_size=[3, 2], stride=2)
    path = tmp_path / "mine.toml"
    path.write_text(d.to_toml({"dataset": "fashion-subset", "limit": 100}, {"epochs": 2, "lr": 0.05, "shuffle": False}))
    cfg = load_config(path)
    assert cfg.model == d.spec()
    assert cfg.data["limit"] == 100 and cfg.train["lr"] == 0.05 and cfg.train["shuffle"] is False


def test_run_record_rates_are_over_the_run():
    run = RunRecord("n", "cpu-serial", 1, 32)
    run.add_epoch({"epoch": 1, "test_acc": 0.5, "epoch_s": 2.0, "samples_per_s": 1000.0})
    assert run.s_per_epoch == pytest.approx(2.0) and run.samples_per_s == pytest.approx(1000.0)
    run.add_epoch({"epoch": 2, "test_acc": 0.7, "epoch_s": 1.0, "samples_per_s": 2000.0})
    run.add_epoch({"epoch": 3, "test_acc": 0.7, "epoch_s": 3.0, "samples_per_s": 1000.0})
    # From epoch 2 on, epoch 1 (which compiles the kernels) is left out: 5000 samples in 4.0 s over 2 epochs.
    assert run.s_per_epoch == pytest.approx(2.0) and run.samples_per_s == pytest.approx(5000 / 4)
    assert run.test_acc == 0.7 and run.epochs == 3
    assert RunRecord("n", "cpu-serial", 1, 32).test_acc is None  # no evaluation: no accuracy
    # Step 1 (compiling the kernels) is left out of the rate: 2000 samples in 2.0 s of which step 1 took 1.5 s.
    run = RunRecord("n", "cpu-serial", 1, 32)
    run.add_epoch({"epoch": 1, "test_acc": 0.5, "epoch_s": 2.0, "samples_per_s": 1000.0, "first_step_s": 1.5})
    assert run.samples_per_s == pytest.approx((2000 - 32) / 0.5) and run.s_per_epoch == pytest.approx(0.5)


def test_store_rows_compare_same_network_and_batch():
    """A run's speedup is over the latest cpu-serial training run of the same network, data and batch size;
    that run is the base, and an older cpu-serial run has none (its ratio to the base would be drift, not
    speedup). A run on other data has its own base (a six-row table's run was the base of the full set's)."""
    def run(i, arch, batch, rate, layers, kind="train", threads=1, data=None):
        return {"id": i, "name": "n", "arch": arch, "samples_per_s": rate, "test_acc": None, "status": "finished",
                "epochs_done": 1, "threads": threads, "ranks": 1, "s_per_epoch": 0.1, "started": 1.7e9 + i,
                "kind": kind, "config": {"model": {"layers": layers}, "train": {"batch_size": batch},
                                         "data": data or {"dataset": "quadrant", "path": None}}}

    tiny = {"dataset": None, "path": "/data/six-rows.csv"}
    rows = store_rows([run(9, "cpu-parallel", 32, 9000.0, [1]), run(8, "cpu-serial", 32, 80.0, [1], data=tiny),
                       run(7, "cpu-parallel", 32, 70.0, [1], data=tiny), run(6, "cpu-serial", 32, 6000.0, [1])])
    assert [r["speedup"] for r in rows] == [pytest.approx(1.5), "base", pytest.approx(0.875), "base"]
    runs = [run(6, "cpu-serial", 32, 1250.0, [1]),  # newest first: the latest cpu-serial is the base
            run(5, "cpu-parallel", 32, 1800.0, [1], threads=2),
            run(4, "cpu-serial", 32, 1000.0, [1]),
            run(3, "cpu-parallel", 64, 2500.0, [1]),
            run(2, "cpu-parallel", 32, 900.0, [2]),
            run(1, "cpu-serial", 32, None, [2], kind="sweep")]
    rows = store_rows(runs, marked=[5])
    assert [r["speedup"] for r in rows] == ["base", pytest.approx(1.44), None, None, None, None]
    assert [r["mark"] for r in rows] == ["", "✓", "", "", "", ""]
    assert rows[1]["batch"] == 32 and rows[1]["threads"] == 2 and rows[5]["kind"] == "sweep"


def test_plural():
    assert [plural(n, "layer") for n in (0, 1, 2, 1000)] == ["0 layers", "1 layer", "2 layers", "1,000 layers"]


def test_a_changed_network_records_its_runs_as_edited():
    """A preset edited in the app recorded its runs under the preset's name, as if they were the preset's; the
    name says "(edited)" until the network is as opened again or saved under a name of its own."""
    d = Draft.from_model(load_config("quadrant").model, "quadrant")
    assert d.run_name() == "quadrant"
    d.layers[0]["out_features"] = 17
    assert d.run_name() == "quadrant (edited)"
    d.layers[0]["out_features"] = 16  # back as it was opened
    assert d.run_name() == "quadrant"
    d.loss = "mse"
    assert d.run_name() == "quadrant (edited)"
    d.name = "x" * 64  # (a name at the 64-character limit keeps the mark whole)
    assert d.run_name() == "x" * 55 + " (edited)"
    d.name = "mine"
    d.keep_origin()  # saved as mine.toml
    assert d.run_name() == "mine"
    assert Draft([], [2], "bce").run_name() == "untitled"  # a new network has nothing to differ from


@pytest.mark.parametrize("pid,shown", [(4242, "paused"), (4243, "running"), (None, "running")])
def test_the_paused_runs_row_says_paused(pid, shown):
    """While this app's run is paused its row in the Runs view said running; the row of the process that records
    it says paused (the store keeps running: a pause is no outcome), and another running run is left as it is."""
    run = {"id": 1, "name": "quadrant", "arch": "cpu-serial", "samples_per_s": None, "test_acc": None,
           "status": "running", "threads": 1, "ranks": 1, "started": 0, "kind": "train", "pid": 4242,
           "epochs_done": 0, "config": {"train": {"batch_size": 32}}}
    assert store_rows([run], paused_pid=pid)[0]["status"] == shown
    assert store_rows([{**run, "status": "finished"}], paused_pid=pid)[0]["status"] == "finished"


LIN = {"type": "Linear", "out_features": 8}


@pytest.mark.parametrize("model,ok", [
    ({"input": [2], "loss": "bce", "layers": [LIN, {"type": "Conv2D", "out_channels": 4, "kernel_size": [3, 2]}]},
     True),  # builds no network (a Conv2D on features), but every layer is one the editor holds
    ({"layers": [{"type": "maxpool2d", "kernel_size": 2}, {"type": "ReLU"}]}, True),  # (types in any case)
    ({"input": [1, 28, 28], "layers": []}, True),
    ({"input": 3, "loss": "mse", "layers": [{**LIN, "init": "he"}]}, True),
    ({"layers": [1, 2]}, False), ({"layers": "Linear"}, False), ({"input": [2]}, False),
    ({"layers": [{"type": "Conv9D"}]}, False), ({"layers": [{"out_features": 3}]}, False),
    ({"layers": [{**LIN, "out_features": 8.0}]}, False), ({"layers": [{**LIN, "out_features": True}]}, False),
    ({"layers": [{**LIN, "out_features": -3}]}, False), ({"layers": [{**LIN, "out_features": 2 ** 31}]}, False),
    ({"layers": [{**LIN, "bias": 1}]}, False), ({"layers": [{**LIN, "init": "zeros"}]}, False),
    ({"layers": [{"type": "Conv2D", "out_channels": 4, "kernel_size": [3, 2, 1]}]}, False),
    ({"layers": [LIN], "loss": "hinge"}, False), ({"layers": [LIN], "input": [2, 3]}, False),
    ({"layers": [LIN], "input": [0]}, False), ({"layers": [LIN], "input": "2"}, False),
])
def test_editable_is_what_the_editor_can_hold(model, ok):
    """``editable``: a config's network opens in the editor where each layer is one its fields could have made,
    whatever the network's shapes; malformed layers, values no field accepts, an unknown loss or input do not.
    What it accepts, Draft.from_model takes without error."""
    assert editable(model) == ok
    if ok:
        draft = Draft.from_model(model, "x")
        assert len(draft.layers) == len(model["layers"])
