"""The PyTorch peer of ``layerlab bench`` and scripts/cpu_scaling.py, measured in a process of its own.

Why a process: layerlab's pinned Taichi workers slowed PyTorch up to 12x when both ran in one process
(docs/LOG.md), which inflated every CPU ratio. The peer process is started
with ``python -m nncore.peer``: it never imports Taichi or anything of nncore that does, resets its CPU
affinity to the calling thread's set (never a pinned worker's single core), and runs PyTorch with the thread
count it is given. The caller sends the same network (``layer_specs``), initial weights,
data pool, batch starts and learning rate it trains on, then asks for timed rounds between its own, so drift
on a shared machine hits both sides alike.

Protocol: pickled (command, payload) requests on the child's stdin, (ok, result) replies on its stdout (the
child moves Python's own stdout to stderr, so a stray print cannot corrupt the stream).
"""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time


def layer_specs(net) -> list[tuple]:
    """The network's layers as plain tuples, enough to build the PyTorch model anywhere (nncore.peer builds it
    in a process that never imports Taichi): ("Linear", in, out), ("Conv2D", c, out, kernel, stride, padding),
    ("MaxPool2D", kernel, stride), ("Flatten",), ("ReLU",), ("Sigmoid",), ("Tanh",)."""
    specs = []
    for layer in net.layers:
        if layer.kind == "Linear":
            specs.append(("Linear", layer.in_features, layer.out_features))
        elif layer.kind == "Conv2D":
            specs.append(("Conv2D", layer.c, layer.out_channels, layer.kernel, layer.stride, layer.padding))
        elif layer.kind == "MaxPool2D":
            specs.append(("MaxPool2D", layer.kernel, layer.stride))
        else:
            specs.append((layer.kind,))
    return specs


class PeerError(RuntimeError):
    """The peer process failed or could not start; the message says why."""


class TorchPeer:
    """A PyTorch process on ``device`` ("cpu" or "cuda") with ``threads`` intra-op threads (CPU)."""

    def __init__(self, device: str = "cpu", threads: int = 1):
        # The calling thread's CPUs: the Taichi owner thread's, which nncore.pinning never pins.
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        self._proc = subprocess.Popen([sys.executable, "-m", "nncore.peer"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, env=env)
        try:
            self.call("init", {"device": device, "threads": threads, "cpus": cpus})
        except BaseException:
            self.close()
            raise

    def call(self, cmd: str, payload=None):
        try:
            pickle.dump((cmd, payload), self._proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self._proc.stdin.flush()
            ok, result = pickle.load(self._proc.stdout)
        except (OSError, EOFError, pickle.UnpicklingError) as exc:
            raise PeerError(f"the PyTorch peer process ended ({type(exc).__name__}; its stderr is above)") from None
        if not ok:
            raise PeerError(f"the PyTorch peer failed: {result}")
        return result

    def setup(self, ctx: dict, batch: int, warmup: int) -> None:
        """Build the network of ``ctx`` (bench.bench_layerlab's) with its initial weights, and run ``warmup``
        steps (at least one) untimed."""
        self.call("setup", {**ctx, "batch": batch, "warmup": warmup})

    def round(self, steps: int) -> float:
        """Samples/s of ``steps`` timed training steps, on the batches of layerlab's rounds (from the first)."""
        return self.call("round", steps)

    def info(self) -> dict:
        """What the peer process holds: pid, whether Taichi is imported, its threads and their CPUs."""
        return self.call("info")

    def state(self) -> dict:
        """The peer's current weights, as NumPy arrays (tests compare them with PyTorch trained in-process)."""
        return self.call("state")

    def close(self) -> None:
        """End the child: closing its stdin ends its loop (even mid-request), then it is waited for, or
        killed after 10 s."""
        for f in (self._proc.stdin, self._proc.stdout):
            try:
                f.close()
            except OSError:  # the pipe of a process that died: nothing left to flush
                pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- the child process ----

class _Worker:
    def __init__(self):
        self.model = self.opt = None

    def init(self, p: dict):
        import torch

        if p["cpus"] and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, p["cpus"])
        self.device = p["device"]
        if self.device == "cpu":
            torch.set_num_threads(p["threads"])
        return None

    def setup(self, p: dict):
        import torch

        from .interop import torch_from_specs, torch_loss

        torch.manual_seed(0)
        self.model = torch_from_specs(p["specs"]).to(self.device)
        self.model.load_state_dict({k: torch.from_numpy(v) for k, v in p["init"].items()})
        self.crit, target = torch_loss(p["loss"])
        self.opt = torch.optim.SGD(self.model.parameters(), lr=p["lr"])
        self.x = torch.from_numpy(p["x"]).to(self.device)
        self.y = target(p["y"], p["n_out"]).to(self.device)
        self.starts, self.batch, self.next = p["starts"], p["batch"], 0
        self.sync = torch.cuda.synchronize if self.device == "cuda" else (lambda: None)
        self._run(max(p["warmup"], 1))
        self.sync()
        return None

    def _run(self, n: int) -> None:
        b = self.batch
        for _ in range(n):
            s = self.starts[self.next % len(self.starts)]
            self.next += 1
            self.opt.zero_grad(set_to_none=True)
            self.crit(self.model(self.x[s:s + b]), self.y[s:s + b]).backward()
            self.opt.step()

    def round(self, steps: int) -> float:
        self.next = 0  # every round trains on the same batches as layerlab's rounds
        t0 = time.perf_counter()
        self._run(steps)
        self.sync()
        return steps * self.batch / (time.perf_counter() - t0)

    def info(self, _=None) -> dict:
        import torch

        threads = {}
        for tid in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else []:
            try:
                threads[int(tid)] = sorted(os.sched_getaffinity(int(tid)))
            except OSError:
                pass
        return {"pid": os.getpid(), "taichi": "taichi" in sys.modules,
                "nncore": sorted(m for m in sys.modules if m.startswith("nncore")),
                "threads": threads, "process_cpus": sorted(os.sched_getaffinity(0)),
                "torch_threads": torch.get_num_threads()}

    def state(self, _=None) -> dict:
        return {k: v.detach().cpu().numpy().copy() for k, v in self.model.state_dict().items()}


def _serve() -> None:
    inp, out = sys.stdin.buffer, os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints go to stderr, not into the replies
    worker = _Worker()
    while True:
        try:
            cmd, payload = pickle.load(inp)
        except (EOFError, pickle.UnpicklingError):  # the caller closed the pipe, perhaps mid-request
            return
        try:
            reply = (True, getattr(worker, cmd)(payload))
        except Exception as exc:  # reported to the caller, which raises PeerError with it
            reply = (False, f"{type(exc).__name__}: {exc}")
        pickle.dump(reply, out, protocol=pickle.HIGHEST_PROTOCOL)
        out.flush()


if __name__ == "__main__":
    _serve()
