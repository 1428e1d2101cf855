"""The training loop: synchronous, on the calling thread, emitting :mod:`nncore.events` as it goes.

The dataset is uploaded to the device once per run; each epoch uploads one shuffled index array, and each
step gathers its batch on the device. The host reads the loss only every ``log_every`` steps (and at the
end of an epoch), so steps queue back to back. A non-finite batch loss is recorded on the device with its
step number and checked at each of those reads; the weights are scanned on the device at a read once
``WEIGHT_CHECK_STEPS`` steps have passed since the last scan, and at the end of each epoch; either ends the
run with :class:`DivergedError`. ``should_stop`` is polled between
steps; a stop finishes the current step, saves what was asked for and ends the run as stopped.

With a :class:`~nncore.distributed.Cluster` the run is one rank of a data-parallel run (see
:mod:`nncore.distributed`): each step trains on this rank's shard of the global batch and all-reduces the
gradients before the optimizer step; only rank 0 evaluates, checkpoints and saves weights, and its events carry
every rank's timing.

Per-layer timing: every ``timing_every``-th step (never a batch size's first, which compiles its kernels) runs
with a device sync after the batch gather, after each layer's forward, after the loss, after each layer's
backward and after the optimizer, timing each part with ``perf_counter``. Figures are means over an epoch's
timed steps.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable

import numpy as np

from . import data as datasets
from . import runtime
from .config import CSV_FIELDS, RunConfig, fit_model
from .distributed import RankFailed
from .errors import ConfigError, DataError, DivergedError, LayerlabError
from .fileio import write_or_rescue
from .limits import check_index
from .events import EpochEnd, Event, LayerTiming, RunFailed, RunFinished, RunStarted, Step
from .kernels.data import gather_rows
from .kernels.loss import check_finite, count_correct, loss_accumulate
from . import checkpoint as ckpt
from .network import Sequential, launch_steps
from .optim import make_optimizer
from .runtime import ti

# Steps between two scans of the weights for non-finite values (and at every epoch's end). A scan reads every
# parameter, more than a step's work for net-1h, so a scan at each loss read took a third of the training time
# on the embedded subset (docs/perf-log.md, "2026-11-26, late evening"); a diverging run's loss almost always
# shows it first.
WEIGHT_CHECK_STEPS = 50


def _upload(x: np.ndarray, y: np.ndarray):
    xs = ti.ndarray(ti.f32, shape=(len(x), int(np.prod(x.shape[1:]))))
    xs.from_numpy(np.ascontiguousarray(x.reshape(len(x), -1), np.float32))
    ys = ti.ndarray(ti.i32, shape=(len(y),))
    ys.from_numpy(np.ascontiguousarray(y, np.int32))
    order = ti.ndarray(ti.i32, shape=(len(y),))
    order.from_numpy(np.arange(len(y), dtype=np.int32))
    return xs, ys, order


def dataset_for(cfg: RunConfig) -> datasets.Dataset:
    """The run's dataset; with none named, image models get the embedded subset and flat ones quadrant."""
    dc, seed = cfg.data, cfg.train["seed"]
    return datasets.load(cfg.dataset_name(), dc["path"], samples=dc["samples"], noise=dc["noise"],
                         test_ratio=dc["test_ratio"], val_ratio=dc["val_ratio"], seed=seed, limit=dc["limit"],
                         csv={k: dc[k] for k in CSV_FIELDS})


class _Timer:
    """Accumulates synced per-part times over the timed steps of one epoch."""

    def __init__(self, net: Sequential, distributed: bool = False):
        self.net = net
        n = len(net.parts)
        self.fwd, self.bwd, self.flops = np.zeros(n), np.zeros(n), np.zeros(n)
        self.other = {"data": 0.0, "loss": 0.0, "optimizer": 0.0}
        if distributed:
            self.other["allreduce"] = 0.0
        self.steps = 0

    def add(self, t: dict, batch: int) -> None:
        self.fwd += t["fwd"]
        self.bwd += t["bwd"]
        for k in self.other:
            self.other[k] += t.get(k, 0.0)
        self.flops += self.net.part_flops(batch)
        self.steps += 1

    def results(self) -> list[LayerTiming]:
        if not self.steps:
            return []
        total = self.fwd.sum() + self.bwd.sum() + sum(self.other.values())
        out = []
        for k, part in enumerate(self.net.parts):
            t = self.fwd[k] + self.bwd[k]
            out.append(LayerTiming(part.first, part.name, 1e3 * self.fwd[k] / self.steps,
                                   1e3 * self.bwd[k] / self.steps, t / total if total else 0.0,
                                   self.flops[k] / t / 1e9 if t > 0 else 0.0))
        for name, t in self.other.items():
            out.append(LayerTiming(-1, name, 1e3 * t / self.steps, 0.0, t / total if total else 0.0, 0.0))
        return out


class Trainer:
    def __init__(self, cfg: RunConfig, emit: Callable[[Event], None] = lambda e: None,
                 should_stop: Callable[[], bool] = lambda: False, init_weights=None, save_weights=None,
                 checkpoint=None, checkpoint_every=None, resume=None, cluster=None):
        self.cfg, self.emit, self.should_stop = cfg, emit, should_stop
        self.cluster = cluster  # a distributed.Cluster: this trainer is one rank of a data-parallel run
        self.root = cluster is None or cluster.is_root
        self.stop_agreed = self.failed_alone = False
        self.init_weights, self.save_weights = init_weights, save_weights
        self.checkpoint, self.resume = checkpoint, resume
        # A checkpoint file with no interval is written at every epoch's end.
        every = checkpoint_every if checkpoint_every is not None else ("1e" if checkpoint else None)
        self.every = ckpt.parse_every(every) if every is not None else None
        if self.every and not checkpoint:
            raise ConfigError("--checkpoint-every needs --checkpoint FILE")
        self.epoch = self.step = 0
        # Batch sizes that have run an untimed step: a size's first step compiles its kernels (a last partial
        # batch's in-place variants: about 0.1 s on the cnn's Linear), which a timed step would report as its time.
        self.warm_batches: set[int] = set()
        self.log_next = False  # set by a controller (the app's single-step) to report the next step's loss
        # While an epoch's steps run (not distributed): emits a Step event for the last step taken, for a
        # controller that pauses between two logged steps (the app's pause), so the step shown is the true one.
        self.report_step = None

    # -- set-up --------------------------------------------------------------------------------------------
    def _setup(self) -> RunStarted:
        t0 = time.perf_counter()
        tr, dc = self.cfg.train, self.cfg.data
        threads, cl = tr["threads"], self.cluster
        if cl is not None:
            if tr["batch_size"] < cl.size:
                raise ConfigError(f"train.batch_size {tr['batch_size']} is smaller than the {cl.size} ranks: "
                                  "every rank needs a sample of every batch")
            threads = cl.threads_for(tr["arch"], threads)
            if tr["arch"] == "cuda":
                cl.pick_gpu()  # before the CUDA runtime starts
        # Ranks sharing a host share its cores: their workers are left to the scheduler, not pinned.
        info = runtime.init(tr["arch"], threads, pin=cl is None or cl.local_size == 1)
        ds = dataset_for(self.cfg)
        model, _, _ = fit_model(self.cfg.model, ds)
        self.net = net = Sequential.from_spec(model, seed=tr["seed"])
        if self.init_weights:
            net.load_weights(self.init_weights)
        opt_args = {"lr": tr["lr"], "weight_decay": tr["weight_decay"]}
        if tr["optimizer"].lower() == "sgd":
            opt_args["momentum"] = tr["momentum"]
        self.opt = make_optimizer(tr["optimizer"], net.n_params, **opt_args)
        self.ds, self.device = ds, info.device
        data_bytes = sum(a.nbytes for a in (ds.x_train, ds.x_test, ds.x_val) if a is not None)
        runtime.check_memory(data_bytes, f"the dataset {ds.name}")
        self.train_set = _upload(ds.x_train, ds.y_train)
        self.test_set = _upload(ds.x_test, ds.y_test)
        self.val_set = _upload(ds.x_val, ds.y_val) if ds.x_val is not None else None
        self.acc, self.bad = ti.ndarray(ti.f32, shape=(1,)), ti.ndarray(ti.i32, shape=(1,))
        self.bad_w = ti.ndarray(ti.i32, shape=(1,))
        self.bad.fill(0)
        self.bad_w.fill(0)
        self.weights_checked = 0  # the step of the last scan of the weights (``_check_diverged``)
        self.step_s: float | None = None  # the last plain step's wall time, for ``_steps_together``
        self.batch = tr["batch_size"]
        n = len(ds.x_train)
        self.steps_per_epoch = -(-n // self.batch)
        check_index(self.steps_per_epoch * tr["epochs"], f"train.epochs {tr['epochs']} x {self.steps_per_epoch} "
                    "steps per epoch (the step count reaches the kernels)")
        self.log_every = tr["log_every"] or max(1, self.steps_per_epoch // 20)
        self.timing_every = min(tr["timing_every"], max(1, self.steps_per_epoch // 2))
        self.rng = np.random.default_rng(tr["seed"])
        resolved = self.cfg.to_dict()
        resolved["model"] = net.spec()
        if self.cluster is not None:
            resolved["train"] = {**resolved["train"], "ranks": self.cluster.size}
        resolved["data"] = {**dc, "dataset": ds.name if dc["path"] is None else None}
        return RunStarted(resolved, info.arch, info.threads, info.device, net.n_params, net.summary(1),
                          n, len(ds.x_test), self.steps_per_epoch, time.perf_counter() - t0)

    def _setup_agreed(self) -> tuple[RunStarted, int]:
        """Set up (and restore a checkpoint); returns the start event and the sample offset to continue from.
        In a distributed run every rank then learns whether every other one could, so a failure on one rank
        (its GPU, its memory, its checkpoint) ends all of them with one message instead of a hang."""
        cl = self.cluster
        try:
            started, status = self._setup(), None
            offset = self._restore() if self.resume else 0
        except LayerlabError as exc:
            if cl is None:
                raise
            started, status = None, (exc.exit_code, str(exc))
        if cl is None:
            return started, offset
        where = f"{cl.host}: {started.device}" if started else None
        report = cl.allgather((status, where))
        for rank, (st, _) in enumerate(report):
            if st is not None:
                exc = RankFailed(st[1] if rank == cl.rank or rank == 0 else f"rank {rank}: {st[1]}", st[0])
                exc.collective = True
                raise exc
        return dataclasses.replace(started, ranks=cl.size, rank_devices=[w for _, w in report]), offset

    # -- steps ---------------------------------------------------------------------------------------------
    def _steps_together(self, start: int, n: int) -> int:
        """How many steps from the next one on can run as one launch (``Sequential.train_steps``): whole batches
        in a row, none of them timed part by part, the last of them the first after which the loop reads the
        loss, saves a checkpoint or may pause; at most ``network.launch_steps`` of the last step's time. 1 for
        the run's first step (its time is reported alone), a step taken while paused, distributed runs (a
        reduction between every two), and before a step's time is known."""
        if self.cluster is not None or self.log_next or self.step == 0 or self.step_s is None:
            return 1
        most = launch_steps(self.step_s)
        k = 0
        while k < most and start + (k + 1) * self.batch <= n:
            step = self.step + k + 1
            if step > 1 and step % self.timing_every == 0:
                break
            k += 1
            if step % self.log_every == 0 or (self.every and self.every[1] == "steps" and step % self.every[0] == 0):
                break
        return max(k, 1)

    def _timed_step(self, ws, start: int, timer: _Timer, reduce=None) -> None:
        gather = lambda: gather_rows(ws.x, ws.labels, *self.train_set, start)  # noqa: E731
        timer.add(self.net.timed_step(ws, self.opt, gather, reduce), ws.batch)

    def _check_diverged(self, weights: bool = True) -> None:
        """Ends the run (DivergedError) where a loss was non-finite or a weight is. The weights are scanned
        where ``weights`` asks for it, else only once WEIGHT_CHECK_STEPS steps have passed since the last scan."""
        bad = int(self.bad.to_numpy()[0])
        if not bad and (weights or self.step - self.weights_checked >= WEIGHT_CHECK_STEPS):
            # (a finite loss can hide non-finite weights: behind a ReLU that is off, say)
            check_finite(self.bad_w, self.net.params_to_read(), self.step)
            self.weights_checked = self.step
        bad_w = int(self.bad_w.to_numpy()[0])
        if self.cluster is not None:  # every rank reaches this point: agree, so all stop together
            bad, bad_w = self.cluster.first_steps([bad, bad_w])
        what = f"non-finite loss at step {bad}" if bad else f"non-finite weight by step {bad_w}"
        if bad or bad_w:
            exc = DivergedError(f"diverged: {what} (epoch {self.epoch}); "
                                f"try a smaller learning rate than {self.cfg.train['lr']}")
            exc.collective = True
            raise exc

    def _stopping(self) -> bool:
        """Poll for a stop between steps; a distributed run stops when any rank asked, as told by the last
        gradient all-reduce. A controller may block here while the run is paused: that time is counted in
        ``paused_s`` and left out of every rate and time the run reports."""
        if self.cluster is not None:
            return self.stop_agreed
        t = time.perf_counter()
        stop = self.should_stop()
        self.paused_s += time.perf_counter() - t
        return stop

    def _reduce(self, scale: float) -> None:
        self.stop_agreed = self.cluster.allreduce_grads(self.net.grads, scale, self.should_stop())

    def _global_sum(self, value: float) -> float:
        return self.cluster.sum_floats([value])[0] if self.cluster is not None else value

    def _epoch(self, offset: int = 0) -> EpochEnd | None:
        """One epoch (from sample ``offset`` when resuming) and its evaluation; None when a stop request cut it
        short (no evaluation then)."""
        n = len(self.ds.x_train)
        order = self.train_set[2]
        if offset == 0:
            if self.cfg.train["shuffle"]:
                self.order_host = self.rng.permutation(n).astype(np.int32)
                order.from_numpy(self.order_host)
            self.acc.fill(0.0)
        cl = self.cluster
        timer, t0, done, mine = _Timer(self.net, cl is not None), time.perf_counter(), 0, 0
        first_s = 0.0  # step 1's time, when this epoch runs it
        paused0 = self.paused_s
        active = lambda: time.perf_counter() - t0 - (self.paused_s - paused0)  # noqa: E731 (seconds not paused)
        if cl is not None:
            cl.comm_s = 0.0

        def log() -> None:  # a Step event for the last step taken (the loop's variables as they are now)
            elapsed = max(active(), 1e-9)
            loss = self._global_sum(ws.loss_value() * nb if nb else 0.0) / b
            share = cl.comm_s / elapsed if cl is not None else None
            self.emit(Step(self.epoch, self.step, loss, done / elapsed, share))

        start = offset
        while start < n:
            if self._stopping():
                break
            b = min(self.batch, n - start)
            lo, nb = cl.shard(b) if cl is not None else (0, b)  # this rank's part of the batch
            reduce = (lambda: self._reduce(nb / b)) if cl is not None else None  # noqa: B023 (called now)
            k = self._steps_together(start, n)
            self.step += 1
            if nb == 0:  # a last batch smaller than the rank count: nothing to add but zeros
                self.net.grads.fill(0.0)
                reduce()
                self.opt.step(self.net.params, self.net.grads)
            else:
                ws = self.net.workspace(nb)
                if self.step % self.timing_every == 0 and nb in self.warm_batches:  # (never step 1: not warm yet)
                    self._timed_step(ws, start + lo, timer, reduce)
                    loss_accumulate(self.acc, self.bad, ws.losses, float(nb), self.step)
                elif k > 1:  # plain steps in a row: one launch where the step is one cooperative kernel, else one
                    s0, step0, t = start + lo, self.step, time.perf_counter()
                    k = self.net.train_steps(
                        ws, self.opt, k,
                        gather=lambda i: lambda: gather_rows(ws.x, ws.labels, *self.train_set, s0 + i * b),  # noqa: B023
                        after=lambda i: lambda: loss_accumulate(self.acc, self.bad, ws.losses, float(nb), step0 + i),  # noqa: B023
                        deltas={"start": b, "step": 1})
                    self.step += k - 1
                    self.step_s = (time.perf_counter() - t) / k
                else:  # one compute graph (nncore.graph): the batch in, the step, the loss summed
                    t = time.perf_counter()
                    self.net.train_step(
                        ws, self.opt, reduce,
                        gather=lambda: gather_rows(ws.x, ws.labels, *self.train_set, start + lo),  # noqa: B023
                        after=lambda: loss_accumulate(self.acc, self.bad, ws.losses, float(nb), self.step))  # noqa: B023
                    self.step_s = time.perf_counter() - t
                self.warm_batches.add(nb)
            done += b * k
            mine += nb * k
            start += b * k
            if self.step == 1:
                runtime.sync()
                self.first_step_s = first_s = active()
            # (log_next is the app's single step; a distributed run has none: collectives follow from here)
            if self.step % self.log_every == 0 or (self.log_next and cl is None):
                single = self.log_next and self.step % self.log_every != 0
                self.log_next = False
                if single:  # a step taken while paused: reading and sending its loss is not training time
                    runtime.sync()
                    t = time.perf_counter()
                    self._check_diverged()  # (the weights too: it is not training time)
                    self.paused_s += time.perf_counter() - t
                    t = time.perf_counter()
                    log()
                    self.paused_s += time.perf_counter() - t
                else:
                    self._check_diverged(weights=False)
                    log()
            self.report_step = log if cl is None else None
            if self.every and self.every[1] == "steps" and self.step % self.every[0] == 0:
                self._save_checkpoint(start, done, active())
        self.report_step = None
        runtime.sync()
        elapsed = active()
        self._check_diverged()
        self.samples_done += done
        self.train_s += elapsed
        if offset + done < n:
            return None
        train_loss = self._global_sum(float(self.acc.to_numpy()[0])) / n
        ranks, share = [], None
        if cl is not None:
            ranks = cl.gather({"rank": cl.rank, "host": cl.host, "device": self.device, "samples": mine,
                               "epoch_s": elapsed, "comm_s": cl.comm_s}) or []
            share = sum(r["comm_s"] for r in ranks) / max(sum(r["epoch_s"] for r in ranks), 1e-9) if ranks else None
        if self.root:
            test_loss, test_acc = self.evaluate(*self.test_set)
            val = self.evaluate(*self.val_set) if self.val_set else (None, None)
        else:  # rank 0 evaluates; the weights are the same everywhere
            test_loss, test_acc, val = float("nan"), 0.0, (None, None)
        if cl is not None:
            cl.barrier()  # the other ranks wait for rank 0's evaluation here, not inside the next step's timing
        return EpochEnd(self.epoch, self.step, train_loss, test_loss, test_acc, done / max(elapsed, 1e-9),
                        elapsed, val[0], val[1], timer.results(), timer.steps, ranks, share, first_s)

    def _save_checkpoint(self, offset: int, done_now: int = 0, elapsed_now: float = 0.0) -> None:
        """Write the run's state at the current step (after checking it is finite: a diverged run keeps the
        last good checkpoint)."""
        self._check_diverged()
        loss_sum = self._global_sum(float(self.acc.to_numpy()[0]))
        if not self.root:  # the weights are the same on every rank: rank 0 writes them
            return
        pos = ckpt.Position(self.epoch, offset, self.step, loss_sum, self.best,
                            self.samples_done + done_now, self.train_s + elapsed_now)
        ckpt.save(self.checkpoint, self.net, self.opt, pos, getattr(self, "order_host", None), self.rng,
                  self.cfg.to_dict())

    def _restore(self) -> int:
        """Continue from ``self.resume``; returns the sample offset within the epoch to continue."""
        state = ckpt.load(self.resume)
        ckpt.check_compatible(state, self.cfg.to_dict(), self.resume)
        n = len(self.ds.x_train)
        pos, epochs = state["position"], self.cfg.train["epochs"]
        ckpt.check_against(state, self.resume, n, self.opt, epochs, self.batch)
        done = pos.epoch - (pos.offset < n)  # epochs the checkpoint has finished
        if done >= epochs:  # (a run with no step to take would be recorded as an empty one)
            raise ConfigError(f"--resume {self.resume}: the checkpoint has finished {done} epoch(s), this run has "
                              f"{epochs}; give --epochs above {done} to train on from it")
        try:
            self.rng.bit_generator.state = state["rng"]
        except (TypeError, ValueError, KeyError, OverflowError) as exc:
            raise DataError(f"{self.resume}: rng is not the state of a {type(self.rng.bit_generator).__name__} "
                            f"generator ({exc})") from None
        self.net.load_state_dict(state["weights"], source=str(self.resume))
        self.opt.load_state_dict(state["opt"])
        self.step, self.best, self.samples_done, self.train_s = pos.step, pos.best_acc, pos.samples_done, pos.train_s
        if pos.offset >= n:  # the checkpoint closed an epoch: start the next one afresh
            self.start_epoch = pos.epoch + 1
            return 0
        self.start_epoch = pos.epoch
        if len(state["order"]) == n:
            self.order_host = state["order"].astype(np.int32)
            self.train_set[2].from_numpy(self.order_host)
        self.acc.from_numpy(np.array([pos.loss_sum if self.root else 0.0], np.float32))
        return pos.offset

    def evaluate(self, xs, ys, order) -> tuple[float, float]:
        """Mean loss and accuracy over a resident set, in training-size batches."""
        n = xs.shape[0]
        self.acc.fill(0.0)
        correct = None
        for start in range(0, n, self.batch):
            b = min(self.batch, n - start)
            ws = self.net.workspace(b)
            if correct is None:
                correct = ws.correct
                correct.fill(0)
            gather_rows(ws.x, ws.labels, xs, ys, order, start)
            self.net.forward(ws)
            self.net.loss_grad(ws)
            loss_accumulate(self.acc, self.bad, ws.losses, float(b), 0)
            count_correct(correct, ws.logits, ws.labels)
        return float(self.acc.to_numpy()[0]) / n, int(correct.to_numpy()[0]) / n

    # -- the run -------------------------------------------------------------------------------------------
    def run(self) -> Event:
        """Train to the end (or a stop request); returns the final event, also emitted."""
        t0 = time.perf_counter()
        self.samples_done, self.train_s, self.first_step_s, self.paused_s = 0, 0.0, 0.0, 0.0
        self.best, self.start_epoch = 0.0, 1
        last, stopped = None, False
        try:
            started, offset = self._setup_agreed()
            self.emit(started)
            for self.epoch in range(self.start_epoch, self.cfg.train["epochs"] + 1):
                result = self._epoch(offset)  # polls should_stop before every step
                offset = 0
                if result is None:
                    stopped = True
                    break
                last, self.best = result, max(self.best, result.test_acc)
                self.emit(last)
                if self.every and self.every[1] == "epochs" and self.epoch % self.every[0] == 0:
                    self._save_checkpoint(len(self.ds.x_train))
            if self.save_weights and self.root:
                state = self.net.state_dict()
                write_or_rescue(self.save_weights, lambda fh: np.savez(fh, **state), "the weights")
            # No evaluation yet (stopped in the first epoch): no accuracy or loss to report, not zeros.
            end = RunFinished(last.epoch if last else 0, self.step, last.test_loss if last else None,
                              last.test_acc if last else None, self.best if last or self.start_epoch > 1 else None,
                              time.perf_counter() - t0 - self.paused_s,
                              self.samples_done / self.train_s if self.samples_done and self.train_s > 0 else None,
                              stopped, str(self.save_weights) if self.save_weights else None, self.first_step_s)
        except LayerlabError as exc:
            end = RunFailed(str(exc), exc.exit_code, self.epoch, self.step)
            # In a distributed run, a failure that only this rank saw leaves the others waiting in a
            # collective: the caller must abort the job (see nncore.cli).
            self.failed_alone = self.cluster is not None and not getattr(exc, "collective", False)
        self.emit(end)
        return end
