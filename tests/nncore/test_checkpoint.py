"""Checkpoints: atomic, complete, and a resumed run ends bit-identically to an uninterrupted one."""
import numpy as np
import pytest

from nncore import checkpoint as ckpt
from nncore.config import load_config
from nncore.errors import ConfigError, DataError
from nncore.events import RunFailed, RunFinished
from nncore.network import Sequential
from nncore.train import Trainer


def _cfg(optimizer="sgd", epochs=3):
    return load_config("quadrant").override("train", arch="cpu-serial", epochs=epochs, optimizer=optimizer,
                                            lr=0.05 if optimizer == "sgd" else 0.01).override("data", samples=400)


def _final(cfg, tmp_path, name, **kwargs):
    out = tmp_path / f"{name}.npz"
    end = Trainer(cfg, save_weights=out, **kwargs).run()
    assert isinstance(end, RunFinished), end
    net = Sequential.from_spec(cfg.model)
    net.load_weights(out)
    return net.state_dict(), end


@pytest.mark.parametrize("optimizer,every,stop_after", [("sgd", "7", 12), ("adam", "7", 12), ("sgd", "1e", 25)])
def test_resume_is_bit_identical(tmp_path, optimizer, every, stop_after):
    cfg = _cfg(optimizer)
    full, _ = _final(cfg, tmp_path, "full")
    # A run stopped part-way (a stop request after `stop_after` steps), then resumed from its checkpoint.
    calls = []
    path = tmp_path / "run.ckpt.npz"
    stopped = Trainer(cfg, should_stop=lambda: len(calls.append(1) or calls) > stop_after, checkpoint=path,
                      checkpoint_every=every).run()
    assert isinstance(stopped, RunFinished) and stopped.stopped
    resumed, end = _final(cfg, tmp_path, "resumed", resume=path)
    assert end.steps == 3 * 10  # 320 training samples, batch 32: the resumed run counts every step
    for k in full:
        assert np.array_equal(full[k], resumed[k]), k


def test_checkpoint_records_the_position(tmp_path):
    path = tmp_path / "c.npz"
    Trainer(_cfg(epochs=1), checkpoint=path, checkpoint_every="4").run()
    state = ckpt.load(path)
    assert state["position"].step == 8 and state["position"].offset == 8 * 32 and state["position"].epoch == 1
    assert len(state["order"]) == 320 and sorted(state["order"]) == list(range(320))
    assert set(state["weights"]) == {"0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"}


def test_resume_refuses_a_different_run(tmp_path):
    path = tmp_path / "c.npz"
    Trainer(_cfg(epochs=1), checkpoint=path, checkpoint_every="1e").run()
    end = Trainer(_cfg(epochs=2).override("train", batch_size=16), resume=path).run()
    assert isinstance(end, RunFailed) and end.exit_code == 2 and "train.batch_size = 32" in end.error
    (tmp_path / "junk.npz").write_bytes(b"junk")
    end = Trainer(_cfg(), resume=tmp_path / "junk.npz").run()
    assert isinstance(end, RunFailed) and "junk.npz" in end.error


def test_resume_with_no_epoch_left_is_refused(tmp_path):
    """A checkpoint that has finished as many epochs as the run asks for (or more) leaves nothing to train: the
    run is refused (exit 2, saying so), where it finished at once with zero steps and was recorded. One epoch
    more trains on."""
    path = tmp_path / "c.npz"
    Trainer(_cfg(epochs=2), checkpoint=path, checkpoint_every="1e").run()
    assert ckpt.load(path)["position"].epoch == 2
    for epochs in (1, 2):
        end = Trainer(_cfg(epochs=epochs), resume=path).run()
        assert isinstance(end, RunFailed) and end.exit_code == 2, end
        assert "has finished 2 epoch(s)" in end.error and "above 2" in end.error
    end = Trainer(_cfg(epochs=3), resume=path).run()
    assert isinstance(end, RunFinished) and end.steps == 3 * 10


def test_divergence_keeps_the_last_good_checkpoint(tmp_path):
    path = tmp_path / "c.npz"
    good = Trainer(_cfg(epochs=1), checkpoint=path, checkpoint_every="5").run()
    assert isinstance(good, RunFinished)
    before = ckpt.load(path)["weights"]
    end = Trainer(_cfg(epochs=1).override("train", lr=3e38), checkpoint=path, checkpoint_every="5").run()
    assert isinstance(end, RunFailed) and end.exit_code == 3
    after = ckpt.load(path)["weights"]
    assert all(np.array_equal(before[k], after[k]) and np.all(np.isfinite(after[k])) for k in before)


@pytest.mark.parametrize("text,want", [("500", (500, "steps")), ("2e", (2, "epochs")), ("3epochs", (3, "epochs")),
                                       ("10steps", (10, "steps"))])
def test_parse_every(text, want):
    assert ckpt.parse_every(text) == want


@pytest.mark.parametrize("text", ["0", "x", "-3", "e", ""])
def test_parse_every_refuses(text):
    with pytest.raises(ConfigError, match="--checkpoint-every"):
        ckpt.parse_every(text)


def test_not_a_checkpoint(tmp_path):
    np.savez(tmp_path / "w.npz", a=np.zeros(2))
    with pytest.raises(DataError, match="not a layerlab checkpoint"):
        ckpt.load(tmp_path / "w.npz")


def test_non_finite_weights_stop_the_run():
    """A fault injected between steps (weights set to NaN) ends the run at the next check, with exit 3."""
    cfg = _cfg(epochs=2)
    box = {}

    def inject():
        t = box["trainer"]
        if t.step == 5 and not box.get("done"):
            w = t.net.params.to_numpy()
            w[3] = np.nan
            t.net.params.from_numpy(w)
            box["done"] = True
        return False

    trainer = Trainer(cfg, should_stop=inject)
    box["trainer"] = trainer
    end = trainer.run()
    assert isinstance(end, RunFailed) and end.exit_code == 3
    assert "non-finite" in end.error and end.step <= 10


def test_memory_guard_refuses_before_allocating(monkeypatch):
    from nncore import runtime

    runtime.ensure("cpu-parallel")
    allocated = []
    real = runtime.ti.ndarray
    monkeypatch.setattr(runtime.ti, "ndarray", lambda *a, **k: allocated.append(a) or real(*a, **k))
    with pytest.raises(ConfigError, match=r"layer 0 \(Linear\): its weight is 7,840,000,000, beyond the kernels' "
                                          r"32-bit index range"):
        Sequential([{"type": "Linear", "out_features": 10**7}], [784], "mse")  # 7.8e9 parameters
    assert allocated == []
    net = Sequential.from_spec(load_config("cnn").model)
    with pytest.raises(ConfigError, match=r"batch size 2000000 times the widest layer's .* 32-bit index range"):
        net.workspace(2_000_000)
    # Within the index range but not within memory (1 GiB, as if the machine had no more).
    monkeypatch.setattr(runtime, "memory_available", lambda: (2**30, "host memory"))
    allocated.clear()  # (the cnn's own buffers)
    with pytest.raises(ConfigError, match=r"parameters needs about \d+\.\d GiB of buffers, more than"):
        Sequential([{"type": "Linear", "out_features": 10**5}], [784], "mse")  # 7.8e7 parameters, 1.5 GiB
    assert allocated == []
    with pytest.raises(ConfigError, match=r"batch size 20000 with this network needs about \d+\.\d GiB"):
        net.workspace(20_000)
    assert 2_000_000 not in net._workspaces and 20_000 not in net._workspaces
