"""The training loop: accuracy on the quadrant task, events, timing, stop requests, divergence."""
import numpy as np
import pytest

from nncore import events as ev
from nncore.config import RunConfig, load_config
from nncore.network import Sequential
from nncore.train import Trainer


def run(cfg, **kwargs):
    out = []
    end = Trainer(cfg, out.append, **kwargs).run()
    return out, end


@pytest.mark.parametrize("arch", ["cpu-serial", "cpu-parallel"])
def test_quadrant_reaches_99_percent(arch):
    cfg = load_config("quadrant").override("train", arch=arch)
    events, end = run(cfg)
    assert isinstance(end, ev.RunFinished) and not end.stopped
    assert end.test_acc >= 0.99
    started = events[0]
    assert isinstance(started, ev.RunStarted) and started.arch == arch
    assert started.threads == (1 if arch == "cpu-serial" else started.threads)
    epochs = [e for e in events if isinstance(e, ev.EpochEnd)]
    assert [e.epoch for e in epochs] == list(range(1, 31))
    assert epochs[-1].train_loss < epochs[0].train_loss


def test_events_round_trip_through_json():
    cfg = load_config("quadrant").override("train", epochs=2).override("data", val_ratio=0.1)
    events, _ = run(cfg)
    kinds = [e.kind for e in events]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished" and kinds.count("epoch_end") == 2
    assert "step" in kinds
    for e in events:
        line = e.to_json()
        assert "\n" not in line
        assert ev.from_json(line) == e
    epoch = next(e for e in events if isinstance(e, ev.EpochEnd))
    assert epoch.val_acc is not None and 0 <= epoch.val_acc <= 1
    # Step 1 (the kernels' compile) is named in the epoch that ran it, so rates can leave it out.
    first, second = [e for e in events if isinstance(e, ev.EpochEnd)]
    assert 0 < first.first_step_s == events[-1].first_step_s < first.epoch_s and second.first_step_s == 0


def test_timings_are_consistent():
    cfg = load_config("quadrant").override("train", epochs=1, timing_every=3)
    events, _ = run(cfg)
    epoch = next(e for e in events if isinstance(e, ev.EpochEnd))
    assert epoch.timed_steps == 50 // 3  # steps 3, 6, ..., 48
    assert abs(sum(t.share for t in epoch.timings) - 1) < 1e-9
    layers = [t for t in epoch.timings if t.index >= 0]
    assert [t.index for t in layers] == list(range(5))
    assert all(t.fwd_ms > 0 and t.bwd_ms > 0 for t in layers)
    assert [t.name for t in epoch.timings if t.index < 0] == ["data", "loss", "optimizer"]


def test_a_batch_sizes_first_step_is_not_timed(monkeypatch):
    """1,600 samples in batches of 30: 53 whole batches and one of 10 an epoch. Timing every 27th step would take
    step 54, the first of 10 samples, whose kernels compile then (their compile was reported as the layers' time);
    it runs untimed, and the next epoch's step of 10 (108) is timed."""
    timed = []
    real = Trainer._timed_step
    monkeypatch.setattr(Trainer, "_timed_step",
                        lambda self, ws, *a, **k: (timed.append((self.step, ws.batch)), real(self, ws, *a, **k)))
    cfg = load_config("quadrant").override("train", epochs=2, batch_size=30, timing_every=27)
    events, _ = run(cfg)
    assert timed == [(27, 30), (81, 30), (108, 10)]
    first, second = [e for e in events if isinstance(e, ev.EpochEnd)]
    assert (first.timed_steps, second.timed_steps) == (1, 2)


def test_evaluation_matches_a_host_reference():
    cfg = load_config("quadrant").override("train", epochs=1)
    trainer = Trainer(cfg)
    trainer.run()
    logits = trainer.net.predict(trainer.ds.x_test)[:, 0]
    y = trainer.ds.y_test
    acc = np.mean((logits > 0) == (y == 1))
    loss = np.mean(np.logaddexp(0, logits.astype(np.float64)) - logits * y)
    got_loss, got_acc = trainer.evaluate(*trainer.test_set)
    assert got_acc == pytest.approx(acc, abs=1e-12)
    assert got_loss == pytest.approx(loss, rel=1e-5)


def test_stop_request_ends_between_steps_and_saves(tmp_path):
    cfg = load_config("quadrant")
    calls = []
    out = tmp_path / "w.npz"
    events, end = run(cfg, should_stop=lambda: len(calls.append(1) or calls) > 70, save_weights=out)
    assert isinstance(end, ev.RunFinished) and end.stopped
    assert 50 <= end.steps < 100 and end.epochs == 1  # epoch 2 was cut short and not reported
    net = Sequential.from_spec(cfg.model)
    net.load_weights(out)


def test_divergence_names_the_step():
    cfg = load_config("quadrant").override("train", lr=3e38, momentum=0.0)
    events, end = run(cfg)
    assert isinstance(end, ev.RunFailed) and end.exit_code == 3
    assert "non-finite loss at step" in end.error
    assert not any(isinstance(e, ev.EpochEnd) for e in events)


def test_model_input_is_checked_against_the_dataset():
    cfg = RunConfig({"input": [3], "layers": [{"type": "Linear", "out_features": 1}], "loss": "bce"},
                    {"dataset": "xor"})
    _, end = run(cfg)
    assert isinstance(end, ev.RunFailed) and end.exit_code == 2
    assert "model.input [3] does not match dataset xor's [2]" in end.error


def test_classes_are_checked_against_the_loss():
    cfg = RunConfig({"layers": [{"type": "Flatten"}, {"type": "Linear", "out_features": 3}],
                     "loss": "cross_entropy"}, {"dataset": "fashion-subset", "limit": 10})
    _, end = run(cfg)
    assert isinstance(end, ev.RunFailed) and "fit for 3 classes, but the dataset fashion-subset has 10" in end.error
    assert end.error.endswith("; set the last layer's out_features to 10")  # what to change, in the message
    cfg = RunConfig({"layers": [{"type": "Flatten"}, {"type": "Linear", "out_features": 1}], "loss": "bce"},
                    {"dataset": "fashion-subset", "limit": 10})
    _, end = run(cfg)
    assert end.error.endswith("set the last layer's out_features to 10, or use cross_entropy with as many")
    # ... which trains: bce with one output per class (one-vs-rest) is accepted
    cfg = RunConfig({"layers": [{"type": "Flatten"}, {"type": "Linear", "out_features": 10}], "loss": "bce"},
                    {"dataset": "fashion-subset", "limit": 10}, {"epochs": 1, "arch": "cpu-serial"})
    _, end = run(cfg)
    assert isinstance(end, ev.RunFinished), end


def test_paused_time_is_left_out_of_rates_and_times():
    """A controller that blocks in should_stop (the app's pause) for 1 s: no epoch time, rate or total counts it."""
    import time

    cfg = load_config("quadrant").override("train", epochs=2, arch="cpu-serial")
    calls = []

    def pause_once():
        calls.append(1)
        if len(calls) == 20:
            time.sleep(1.0)
        return False

    t0 = time.perf_counter()
    events, end = run(cfg, should_stop=pause_once)
    wall = time.perf_counter() - t0
    epochs = [e for e in events if isinstance(e, ev.EpochEnd)]
    last_step = [e for e in events if isinstance(e, ev.Step) and e.epoch == 1][-1]
    train_samples = events[0].train_samples
    assert epochs[0].epoch_s < wall - 1.0 and end.total_s < wall - 0.9
    assert epochs[0].samples_per_s == pytest.approx(train_samples / epochs[0].epoch_s)
    assert end.samples_per_s == pytest.approx(2 * train_samples / sum(e.epoch_s for e in epochs))
    # The epoch's last reported rate is near the epoch's own (counting the pause it would be a fraction of it).
    assert last_step.step > 20 and last_step.samples_per_s > 0.7 * epochs[0].samples_per_s


def test_a_stop_before_the_first_evaluation_reports_no_accuracy():
    cfg = load_config("quadrant")
    calls = []
    events, end = run(cfg, should_stop=lambda: len(calls.append(1) or calls) > 5)
    assert isinstance(end, ev.RunFinished) and end.stopped and end.epochs == 0 and end.steps == 5
    assert end.test_acc is None and end.test_loss is None and end.best_test_acc is None
    assert end.samples_per_s is not None and end.samples_per_s > 0
    assert ev.from_json(end.to_json()) == end
    events, end = run(cfg, should_stop=lambda: True)  # not one step: no rate either
    assert end.steps == 0 and end.samples_per_s is None and end.test_acc is None


def test_weights_are_scanned_every_so_many_steps_and_at_each_epochs_end(monkeypatch):
    """The loss is read every log_every steps (here every step); the weights, a scan of every parameter, only
    once train.WEIGHT_CHECK_STEPS steps have passed since the last scan, and at each epoch's end: a non-finite
    weight is still found, and stops the run as diverged."""
    import nncore.train as T

    scans, real = [], T.check_finite
    poison_at = 70

    def scan(bad, values, step):
        scans.append(step)
        if step >= poison_at:  # a non-finite weight that this step's loss did not show
            values.from_numpy(np.where(np.arange(values.shape[0]) == 3, np.nan, values.to_numpy()))
        real(bad, values, step)

    monkeypatch.setattr(T, "check_finite", scan)
    cfg = load_config("quadrant").override("train", epochs=3, log_every=1)  # 50 steps an epoch
    end = Trainer(cfg).run()
    assert scans[:3] == [50, 50, 100] and all(b - a <= T.WEIGHT_CHECK_STEPS for a, b in zip(scans, scans[1:]))
    assert isinstance(end, ev.RunFailed) and end.exit_code == 3 and "non-finite weight by step 100" in end.error
