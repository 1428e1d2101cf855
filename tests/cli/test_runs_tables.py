"""The headless tables stay aligned whatever their longest entry: a fused part's long name in `layerlab train`'s
per-part table, a sweep's list of archs in `layerlab runs list`."""
import sys

import pytest

from nncore.events import LayerTiming
from nncore.report import short_arch, timing_table
from nncore.store import Store
from tests.cli.test_cli import layerlab


def test_the_part_table_fits_its_longest_name():
    timings = [LayerTiming(0, "layers 0-2 (Conv2D+ReLU+MaxPool2D)", 1.5, 2.25, 0.6, 3.0),
               LayerTiming(3, "layer 3 (Linear)", 0.5, 0.75, 0.2, 1.0), LayerTiming(-1, "optimizer", 0.1, 0.0, 0.2, 0.0)]
    rows = timing_table(timings)
    header = rows[0]
    for row in rows[1:]:  # every figure ends where its header ends
        assert row.index("%") == header.index("share") + len("share") - 1, rows
        assert len(row.rstrip()) <= len(header), rows
    fwd_end = header.index("fwd ms") + len("fwd ms")
    assert [row[fwd_end - 5:fwd_end] for row in rows[1:]] == ["1.500", "0.500", "0.100"], rows


def test_a_sweeps_archs_are_shown_whole_in_runs_list(tmp_path):
    path = tmp_path / "runs.sqlite"
    store = Store(path)
    store.add_finished("sweep", "quadrant", {"model": {}, "sweep": {}}, [], {}, arch="cpu-serial,cpu-parallel",
                       threads=2)
    store.add_finished("bench", "quadrant", {"model": {}}, [], {}, arch="cpu-serial", threads=1)
    lines = layerlab("runs", "--store", path, "list").stdout.splitlines()
    assert short_arch("cpu-serial,cpu-parallel") == "serial+parallel" and short_arch("cuda") == "cuda"
    header, sweep, bench = lines[0], next(x for x in lines if " sweep " in x), next(x for x in lines if " bench " in x)
    at = header.index("arch")
    assert sweep[at:].startswith("serial+parallel ") and bench[at:].startswith("cpu-serial ")
    thr = header.index("thr") + len("thr")
    assert sweep[thr - 1] == "2" and bench[thr - 1] == "1"  # the columns after it stay in line


def test_a_long_network_name_is_cut_with_an_ellipsis_in_runs_list_and_compare(tmp_path):
    """Cut to the column silently, "two-input probe" read as "two-input prob"."""
    path = tmp_path / "runs.sqlite"
    store = Store(path)
    for name in ("two-input probe", "fourteen-chars"):
        store.add_finished("bench", name, {"model": {}}, [], {}, arch="cpu-serial", threads=1)
    listed = layerlab("runs", "--store", path, "list").stdout
    assert " two-input pro… " in listed and " fourteen-chars " in listed, listed
    compared = layerlab("runs", "--store", path, "compare", "1", "2").stdout
    assert " two-input pro… " in compared, compared


def test_losses_print_in_four_decimals_or_as_exponents_when_huge(capsys):
    """A diverging run (`--lr 1e30`) printed its losses as 31-digit decimals; the epoch that ran step 1 says its
    rate includes the compile (the closing line's rate leaves it out)."""
    from nncore.events import EpochEnd
    from nncore.report import TextReporter, loss_text

    for value in (0.123456, -3.5, 99999.5, 1.5e5, 1.123124e30, -2.5e12, float("inf")):
        text = loss_text(value)
        assert len(text) <= 11, text
        assert abs(float(text) - value) <= 5e-4 * max(1.0, abs(value)) or text == "inf", (value, text)
        assert ("e" in text) == (1e5 <= abs(value) < float("inf")), text
    assert loss_text(None) == "—" and loss_text(float("nan")) == "nan"
    rep = TextReporter(out=sys.stdout, progress=False)
    for epoch, first in ((1, 0.4), (2, 0.0)):
        rep(EpochEnd(epoch, 10 * epoch, 1.1231244856e30, 9.5513563e29, 0.5, 1234.0, 0.5, first_step_s=first))
    lines = capsys.readouterr().out.splitlines()
    assert "train loss 1.123e+30  test loss 9.551e+29" in lines[0], lines
    assert "1,234 samples/s incl. compile" in lines[0] and "incl. compile" not in lines[1], lines


@pytest.mark.parametrize("name,width,shown", [
    ("quadrant (edited)", 17, "quadrant (edited)"), ("quadrant (edited)", 16, "quadra… (edited)"),
    ("quadrant (edited)", 14, "quadrant*"), ("mnist-conv-2x64-bn (edited)", 14, "mnist-conv-2…*"),
    ("mnist-conv-2x64-bn", 14, "mnist-conv-2x…"), ("x (edited)", 1, "…")])
def test_a_cut_name_keeps_the_edited_mark(name, width, shown):
    """A run of an edited network cut to a table's width read "quadrant (edi…", as if another network's."""
    from nncore.report import cut_name

    assert cut_name(name, width) == shown and len(shown) <= width
