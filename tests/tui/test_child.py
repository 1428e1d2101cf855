"""The training process's controller (tui.child._Controller): what the app sees when it pauses a run."""
import time

import pytest

from nncore.config import load_config
from nncore.events import Step
from nncore.train import Trainer
from tui.child import _Controller


class _Pipe:
    """The controller's end of the app's pipe: commands queued by the test, polled as the child polls."""

    def __init__(self):
        self.queue, self.polls_paused = [], 0

    def poll(self, timeout=0):
        if not self.queue and timeout:  # the controller waits while paused: the app stops the run then
            self.polls_paused += 1
            self.queue.append("stop")
        return bool(self.queue)

    def recv(self):
        return self.queue.pop(0)


def test_a_pause_between_logged_steps_reports_the_step_it_paused_after():
    # Step events are throttled (every log_every steps); a pause after step 7, with events every 5 steps, must
    # still send step 7, or the paused screen shows step 5 until the next step.
    cfg = load_config("quadrant").override("train", arch="cpu-serial", epochs=2, log_every=5) \
        .override("data", samples=400)
    pipe, events = _Pipe(), []

    class Controller(_Controller):
        def __call__(self):
            if self.trainer.step == 7 and not self.paused:
                pipe.queue.append("pause")
            return super().__call__()

    ctl = Controller(pipe)
    trainer = Trainer(cfg, events.append, should_stop=ctl)
    ctl.trainer = trainer
    trainer.run()
    steps = [e.step for e in events if isinstance(e, Step)]
    assert pipe.polls_paused == 1 and trainer.step == 7
    assert steps == [5, 7]  # 7 sent once, on pausing; nothing after the stop


def test_single_steps_leave_their_loss_reading_out_of_the_rate(monkeypatch):
    # A step taken while paused reads its loss and checks for divergence before the next pause: that is the
    # app showing the step, not training, so samples/s must not fall with every single step. The check is
    # slowed to 50 ms here: counted as training, each single step would add 50 ms to the epoch's time.
    # (1,000 samples: the first per-layer timing step comes at step 10, after the single steps; where the
    # step runs cooperative, nncore.coop, that timing step loads the part-by-part kernels.)
    cfg = load_config("quadrant").override("train", arch="cpu-serial", epochs=1, log_every=1000) \
        .override("data", samples=1000)
    pipe, events = _Pipe(), []
    slow = Trainer._check_diverged

    def check(self):
        time.sleep(0.05)
        slow(self)
    monkeypatch.setattr(Trainer, "_check_diverged", check)

    class Controller(_Controller):
        def __call__(self):
            if self.trainer.step == 2 and not self.paused and not self.steps:
                pipe.queue.extend(["pause", "step", "step", "step", "step"])
            return super().__call__()

    ctl = Controller(pipe)
    trainer = Trainer(cfg, events.append, should_stop=ctl)
    ctl.trainer = trainer
    trainer.run()
    singles = [e for e in events if isinstance(e, Step) and e.step > 2]
    assert [e.step for e in singles] == [3, 4, 5, 6]
    busy = [e.step * trainer.batch / e.samples_per_s for e in singles]  # seconds counted as training so far
    assert busy[-1] - busy[0] < 0.05, busy  # (3 more checks counted as training: 0.15 s more)


def _wait_for(handle, event: str, seconds: float = 120) -> list:
    seen, deadline = [], time.monotonic() + seconds
    while not any(m.get("event") == event for m in seen) and time.monotonic() < deadline:
        seen += handle.poll()
        time.sleep(0.02)
    assert any(m.get("event") == event for m in seen), seen[-3:]
    return seen


def test_quitting_mid_run_stops_it_even_when_nobody_read_its_pipe(tmp_path):
    """The app quits with a run going: it asks the run to stop and waits. The child, which sends an event every
    step, had filled the pipe meanwhile and sat blocked in a send, never saw the stop, and was killed after 3 s,
    its run recorded as died. Now its messages are read (and dropped) while it winds down."""
    from nncore.store import Store
    from tui.child import RunHandle

    cfg = load_config("quadrant").override("train", arch="cpu-serial", epochs=100000, log_every=1).to_dict()
    handle = RunHandle(cfg, store=str(tmp_path / "runs.sqlite"))
    _wait_for(handle, "epoch_end")
    time.sleep(1.0)  # nobody reads: the pipe's buffer fills with step events
    handle.shutdown(timeout=10.0)
    assert handle.proc.exitcode == 0  # ended by itself, not killed
    (run,) = Store(tmp_path / "runs.sqlite").runs()
    assert run["status"] == "stopped"


def test_a_stop_after_the_run_ended_does_not_lose_its_last_messages():
    """x pressed as the run finishes: the stop finds the child's end closed. That once marked the pipe closed
    for reading too, so run_finished, still in it, was never read and the app said the process had died."""
    from tui.child import RunHandle

    cfg = load_config("quadrant").override("train", arch="cpu-serial", epochs=1, log_every=1000).to_dict()
    handle = RunHandle(cfg, boundary=False)
    handle.proc.join(120)  # the run ended; its messages wait in the pipe
    assert handle.proc.exitcode == 0
    handle.send("stop")
    seen = _wait_for(handle, "run_finished")
    while not handle.closed:
        seen += handle.poll()
    assert not handle.died and handle.finished


def test_a_sweep_is_recorded_with_the_threads_it_ran_on(tmp_path):
    """A cpu-serial sweep from the app was recorded with the machine's core count (the thread counts asked for
    cpu-parallel), where it ran on one thread."""
    from nncore.store import Store
    from tui.child import record_sweep

    store = Store(tmp_path / "runs.sqlite")
    job = {"name": "quadrant", "model": {}, "archs": ["cpu-serial"], "batches": [32], "filters": [None],
           "threads": [8], "steps": 2, "repeats": 3, "warmup": 2}
    serial = record_sweep(store, job, [{"arch": "cpu-serial", "threads": 1, "batch": 32}], None)
    both = record_sweep(store, {**job, "archs": ["cpu-serial", "cpu-parallel"]},
                        [{"arch": "cpu-serial", "threads": 1}, {"arch": "cpu-parallel", "threads": 8}], None)
    assert store.run(serial)["threads"] == 1 and store.run(both)["threads"] == 8
    began = time.time() - 60  # (the app's start of the sweep, kept in its job)
    timed = store.run(record_sweep(store, {**job, "started": began}, [{"arch": "cpu-serial", "threads": 1}], None))
    assert timed["started"] == pytest.approx(began) and timed["ended"] - timed["started"] > 59
