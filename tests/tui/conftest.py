"""App test helpers: a machine-independent environment, waiting on the app, and scripted events."""
import os
import time

import pytest

from nncore import events as ev
from nncore.runtime import ArchStatus

FIXED_ARCHS = [ArchStatus("cpu-serial", True, "", "test CPU"), ArchStatus("cpu-parallel", True, "", "test CPU"),
               ArchStatus("cuda", False, "no CUDA driver (libcuda.so.1 not found)", "")]
FIXED_DATASETS = {"quadrant": "", "circle": "", "xor": "", "gauss": "", "spiral": "", "fashion-subset": ""}


@pytest.fixture(autouse=True)
def app_home(tmp_path, monkeypatch):
    """Every app under test logs and saves under the test's own directory, and must end the test without having
    survived an error: the guard that keeps the app up would otherwise hide it."""
    import tui.app

    monkeypatch.setenv("LAYERLAB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LAYERLAB_SAVE_DIR", str(tmp_path / "saved"))
    apps = []
    original = tui.app.LayerlabApp.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        apps.append(self)

    monkeypatch.setattr(tui.app.LayerlabApp, "__init__", init)
    yield apps
    for app in apps:
        if not getattr(app, "errors_expected", False):
            assert not app.errors, f"the app survived errors it should not have met: {app.errors!r}"


@pytest.fixture
def fixed_env(monkeypatch):
    """The same backends and datasets on every machine, so screenshots do not depend on it."""
    import tui.app
    import tui.panes.settings

    monkeypatch.setattr(tui.app, "available_archs", lambda: FIXED_ARCHS)
    monkeypatch.setattr(tui.panes.settings, "available_archs", lambda: FIXED_ARCHS)
    monkeypatch.setattr(tui.panes.settings, "available_datasets", lambda: FIXED_DATASETS)


def scripted_run(epochs=3, steps_per_epoch=10, rate=6000.0):
    """Events of a made-up quadrant run, as the child would send them (dicts)."""
    layers = [{"index": i, "type": t, "repr": t, "out_shape": [s], "params": p, "flops_fwd": f, "flops_bwd": f}
              for i, (t, s, p, f) in enumerate([("Linear", 16, 48, 80), ("ReLU", 16, 0, 16), ("Linear", 1, 17, 33)])]
    out = [ev.RunStarted({"model": {}, "data": {"dataset": "quadrant"}, "train": {"epochs": epochs}},
                         "cpu-serial", 1, "test CPU", 65, layers, 320, 80, steps_per_epoch, 0.5).to_dict()]
    step = 0
    for e in range(1, epochs + 1):
        for _ in range(steps_per_epoch):
            step += 1
            out.append(ev.Step(e, step, 0.7 / step ** 0.5, 5000.0 + 10 * step).to_dict())
        timings = [ev.LayerTiming(0, "layer 0 (Linear)", 0.10, 0.20, 0.3, 0.01),
                   ev.LayerTiming(1, "layer 1 (ReLU)", 0.05, 0.05, 0.1, 0.0),
                   ev.LayerTiming(2, "layer 2 (Linear)", 0.10, 0.20, 0.3, 0.02),
                   ev.LayerTiming(-1, "data", 0.1, 0.0, 0.1, 0.0), ev.LayerTiming(-1, "loss", 0.1, 0.0, 0.1, 0.0),
                   ev.LayerTiming(-1, "optimizer", 0.1, 0.0, 0.1, 0.0)]
        out.append(ev.EpochEnd(e, step, 0.6 / e, 0.65 / e, 0.7 + 0.09 * e, rate, 0.05, timings=timings,
                               timed_steps=1).to_dict())
    cols, rows = 48, 32
    prob = [((x - 24) * (y - 16) < 0) * 0.9 + 0.05 for y in range(rows) for x in range(cols)]
    out.insert(1, {"event": "boundary", "extent": [-1.1, 1.1, -1.1, 1.1], "res": [cols, rows], "prob": prob,
                   "points": [[-0.5, 0.5, 1], [0.5, 0.5, 0], [0.5, -0.5, 1], [-0.5, -0.5, 0]]})
    out.append(ev.RunFinished(epochs, step, 0.2, 0.97, 0.97, 2.0, 6000.0, False).to_dict())
    return out


def record(store, events, cfg):
    """Events recorded in a run store as a training process records them, its config ``cfg``; the run's id."""
    from nncore.store import Recorder

    recorder = Recorder(store, str(cfg.get("source") or "run"), cfg)
    for e in events:
        recorder({**e, "config": cfg, "arch": cfg["train"]["arch"]} if e["event"] == "run_started" else e)
    return recorder.run_id


class FakeHandle:
    """Stands in for tui.child.RunHandle: records the config and plays a scripted run, a few events a poll,
    recording them in the run store as the training process would."""

    started: list = []
    per_poll = 3  # events handed over per poll (the app polls every 50 ms)

    def __init__(self, cfg, boundary=True, target=None, events=None, store=None):
        from nncore.store import Recorder, Store

        FakeHandle.started.append(cfg)
        self.events = [{**e, "config": cfg, "arch": cfg["train"]["arch"]} if e["event"] == "run_started" else e
                       for e in (events if events is not None else scripted_run())]
        self.finished = self.closed = False
        self.sent: list[str] = []
        self.recorder = Recorder(Store(store), str(cfg.get("source") or "run"), cfg) if store else None

    def poll(self, limit=500):
        out, self.events = self.events[:self.per_poll], self.events[self.per_poll:]
        if self.recorder is not None:
            for msg in out:
                self.recorder(msg)
        if not self.events:
            self.finished = self.closed = True
        return out

    def send(self, cmd):
        self.sent.append(cmd)

    @property
    def died(self):
        return False

    def exitcode(self):
        return 0

    def shutdown(self, timeout=3.0):
        self.closed = True

    class proc:  # noqa: N801 (what the app joins when the run retires)
        pid = os.getpid()  # the process that records the run: this one, as the recorder above does

        @staticmethod
        def join(timeout=None):
            pass

        @staticmethod
        def is_alive():
            return False

        @staticmethod
        def kill():
            pass


@pytest.fixture
def fake_runs(monkeypatch):
    """Runs that play scripted events instead of starting a training process."""
    import tui.app

    FakeHandle.started = []
    monkeypatch.setattr(tui.app, "RunHandle", FakeHandle)
    return FakeHandle.started


def screen_text(app) -> str:
    """What the terminal shows, as plain text, one line per row (modal screens included)."""
    strips = app.screen._compositor.render_strips()
    return "\n".join(strip.text for strip in strips)


async def wait_for(pilot, cond, timeout=60.0):
    """Let the app process messages until ``cond()`` holds (messages are handled asynchronously)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        await pilot.pause(0.05)
    raise AssertionError("timed out waiting for the app")
