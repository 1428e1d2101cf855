"""The training process's controller (tui.child._Controller): what the app sees when it pauses a run."""
import time

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
