"""The app's rules without widgets: parameter parsing, draft edits and checks, speedups, export, saving."""
import csv
import io
import json

import pytest

from nncore.config import load_config
from nncore.errors import ConfigError
from tui.state import Draft, RunRecord, export_runs, parse_params, spec_key, update_speedups


def test_parse_params():
    assert parse_params("out_channels=8, kernel_size=3x2, stride=[2,1]", 0) == \
        {"out_channels": 8, "kernel_size": [3, 2], "stride": [2, 1]}
    assert parse_params("", 0) == {}
    assert parse_params("init=he", 0) == {"init": "he"}
    for bad in ("out_features", "out_features=abc", "k=1x2x3"):
        with pytest.raises(ConfigError, match="layer 4"):
            parse_params(bad, 4)


def test_draft_edits_and_checks():
    d = Draft.from_model(load_config("cnn").model, "cnn")
    rows, err = d.check()
    assert err is None and [r["out_shape"] for r in rows][-1] == [10]
    at = d.add("ReLU", 2)
    assert d.layers[at] == {"type": "ReLU"} and len(d.layers) == 6
    d.remove(at)
    assert d.move(0, 1) == 1 and d.layers[0]["type"] == "ReLU"
    d.move(1, -1)
    d.set_params(0, "out_channels=4, kernel_size=40")
    rows, err = d.check()
    assert err is not None and err.layer == 0 and "kernel_size 40" in str(err) and rows == []
    d.set_params(0, "out_channels=4, kernel_size=3")
    d.set_type(4, "Conv2D")  # a conv after Flatten: invalid at layer 4, the rows before it still shown
    rows, err = d.check()
    assert err.layer == 4 and len(rows) == 4
    d.set_type(4, "Linear")
    d.loss = "cross_entropy"
    d.set_params(4, "out_features=1")
    rows, err = d.check()
    assert err.layer is None and "loss cross_entropy" in str(err) and len(rows) == 5


def test_saved_draft_opens_again(tmp_path):
    d = Draft.from_model(load_config("cnn").model, "mine")
    d.set_params(0, "out_channels=5, kernel_size=3x2, stride=2")
    path = tmp_path / "mine.toml"
    path.write_text(d.to_toml({"dataset": "fashion-subset", "limit": 100}, {"epochs": 2, "lr": 0.05, "shuffle": False}))
    cfg = load_config(path)
    assert cfg.model == d.spec()
    assert cfg.data["limit"] == 100 and cfg.train["lr"] == 0.05 and cfg.train["shuffle"] is False


def test_speedups_compare_same_network_and_batch():
    a, b = spec_key({"layers": [1]}), spec_key({"layers": [2]})
    runs = [RunRecord("n", "cpu-serial", 1, 32, 1, samples_per_s=1000.0, spec_key=a),
            RunRecord("n", "cpu-parallel", 2, 32, 1, samples_per_s=1800.0, spec_key=a),
            RunRecord("n", "cpu-parallel", 2, 64, 1, samples_per_s=2500.0, spec_key=a),
            RunRecord("m", "cpu-parallel", 2, 32, 1, samples_per_s=900.0, spec_key=b)]
    update_speedups(runs)
    assert [r.speedup for r in runs] == [1.0, 1.8, None, None]


def test_export_csv_and_json():
    runs = [RunRecord("quadrant", "cpu-serial", 1, 32, 3, 0.99, 0.1, 16000.0, "finished", 1.0)]
    rows = list(csv.DictReader(io.StringIO(export_runs(runs, "csv"))))
    assert rows[0]["arch"] == "cpu-serial" and float(rows[0]["samples_per_s"]) == 16000.0
    data = json.loads(export_runs(runs, "json"))
    assert data[0]["test_acc"] == 0.99 and "config" not in data[0]
