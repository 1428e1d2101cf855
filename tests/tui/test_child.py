"""The training process's controller (tui.child._Controller): what the app sees when it pauses a run."""
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
