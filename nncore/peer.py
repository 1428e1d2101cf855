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
import signal
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


MODES = ("eager", "graph", "compile")  # how the peer runs PyTorch's training step: see _Worker.setup


class TorchPeer:
    """A PyTorch process on ``device`` ("cpu" or "cuda") with ``threads`` intra-op threads (CPU), timing the
    training step in each of ``modes`` (MODES; "graph" only on cuda)."""

    def __init__(self, device: str = "cpu", threads: int = 1, modes: tuple = ("eager",)):
        self.modes = tuple(modes)
        # The calling thread's CPUs: the Taichi owner thread's, which nncore.pinning never pins.
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        self._proc = subprocess.Popen([sys.executable, "-m", "nncore.peer"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, env=env)
        try:
            self.call("init", {"device": device, "threads": threads, "cpus": cpus, "modes": self.modes})
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
        """Build the network of ``ctx`` (bench.bench_layerlab's) with its initial weights, once per mode, and
        run ``warmup`` steps (at least one; more where a mode needs them to capture or compile) untimed."""
        self.call("setup", {**ctx, "batch": batch, "warmup": warmup})

    def round(self, steps: int, quiet_s: float = 0.0, warmup: int = 0) -> dict[str, float]:
        """Samples/s of ``steps`` timed training steps in each mode, one mode after the other, on the batches
        of layerlab's rounds (from the first), each after ``quiet_s`` seconds of sleep (so that whatever the
        caller ran has gone idle) and ``warmup`` untimed steps on the same first batches."""
        return self.call("round", (steps, quiet_s, warmup))

    def info(self) -> dict:
        """What the peer process holds: pid, whether Taichi is imported, its threads and their CPUs."""
        return self.call("info")

    def state(self, mode: str | None = None) -> dict:
        """The weights of ``mode``'s model (default: the first mode), as NumPy arrays (tests compare them with
        PyTorch trained in-process)."""
        return self.call("state", mode)

    def close(self, wait_s: float = 10.0) -> None:
        """End the child: closing its stdin ends its loop (even mid-request), then it is waited for, or
        killed after ``wait_s``."""
        for f in (self._proc.stdin, self._proc.stdout):
            try:
                f.close()
            except OSError:  # the pipe of a process that died: nothing left to flush
                pass
        try:
            self._proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- the child process ----

class _Runner:
    """One mode's model, optimizer and step (``step(s)``: train on the batch starting at sample ``s``).

    eager: the step as most people write it. graph: the whole step (forward, loss, backward, SGD) captured
    once in a CUDA graph and replayed, the batch copied into the graph's static input first, as PyTorch's
    CUDA-graph documentation shows for whole-network capture. compile: the step function compiled with
    ``torch.compile(mode="reduce-overhead")`` (Inductor's kernels, replayed as CUDA graphs on the GPU)."""

    def __init__(self, mode: str, p: dict, x, y, device: str):
        import torch

        from .interop import torch_from_specs, torch_loss

        torch.manual_seed(0)
        self.model = torch_from_specs(p["specs"]).to(device)
        self.model.load_state_dict({k: torch.from_numpy(v) for k, v in p["init"].items()})
        self.crit = torch_loss(p["loss"])[0]
        self.opt = torch.optim.SGD(self.model.parameters(), lr=p["lr"])
        self.x, self.y, self.b = x, y, p["batch"]
        self.step = self._eager
        if mode == "graph":
            self._capture(p["starts"][0])
        elif mode == "compile":
            import logging

            logging.getLogger("torch").setLevel(logging.ERROR)  # (Inductor's notes would fill the bench's output)
            self._compiled = torch.compile(self._train, mode="reduce-overhead")
            self.step = lambda s: self._compiled(self.x[s:s + self.b], self.y[s:s + self.b])

    def _train(self, x, y):
        self.opt.zero_grad(set_to_none=True)
        self.crit(self.model(x), y).backward()
        self.opt.step()

    def _eager(self, s: int) -> None:
        self._train(self.x[s:s + self.b], self.y[s:s + self.b])

    def _capture(self, s: int) -> None:
        import torch

        self.sx, self.sy = self.x[s:s + self.b].clone(), self.y[s:s + self.b].clone()
        side = torch.cuda.Stream()  # warm-up on a side stream before capture, as the documentation asks
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self._train(self.sx, self.sy)
        torch.cuda.current_stream().wait_stream(side)
        self.opt.zero_grad(set_to_none=True)  # the captured backward allocates .grad from the graph's pool
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.crit(self.model(self.sx), self.sy).backward()
            self.opt.step()

        def step(s: int) -> None:
            self.sx.copy_(self.x[s:s + self.b])
            self.sy.copy_(self.y[s:s + self.b])
            self.graph.replay()

        self.step = step


class _Worker:
    def __init__(self):
        self.runners = {}

    def init(self, p: dict):
        import torch

        if p["cpus"] and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, p["cpus"])
        self.device, self.modes = p["device"], p["modes"]
        bad = [m for m in self.modes if m not in MODES]
        if bad:
            raise ValueError(f"unknown mode {bad[0]!r}; choose from {', '.join(MODES)}")
        if "graph" in self.modes and self.device != "cuda":
            raise ValueError("mode 'graph' captures CUDA graphs: it needs --arch cuda")
        if self.device == "cpu":
            torch.set_num_threads(p["threads"])
        return None

    def setup(self, p: dict):
        import torch

        from .interop import torch_loss

        self.runners = {}  # the previous setup's models go first (GPU memory)
        x = torch.from_numpy(p["x"]).to(self.device)
        y = torch_loss(p["loss"])[1](p["y"], p["n_out"]).to(self.device)
        self.starts, self.batch = p["starts"], p["batch"]
        self.sync = torch.cuda.synchronize if self.device == "cuda" else (lambda: None)
        for mode in self.modes:
            self.runners[mode] = r = _Runner(mode, p, x, y, self.device)
            self._run(r, max(p["warmup"], 3 if mode == "compile" else 1))
        self.sync()
        return None

    def _run(self, runner: _Runner, n: int) -> None:
        for i in range(n):
            runner.step(self.starts[i % len(self.starts)])  # every round on the same batches as layerlab's

    def round(self, p: tuple[int, float, int]) -> dict[str, float]:  # (steps, quiet_s, warmup)
        if not self.runners:
            raise RuntimeError("round before setup: no network")
        steps, quiet_s, warmup = p
        rates = {}
        for mode, runner in self.runners.items():
            self.sync()
            time.sleep(quiet_s)
            self._run(runner, warmup)
            self.sync()
            t0 = time.perf_counter()
            self._run(runner, steps)
            self.sync()
            rates[mode] = steps * self.batch / (time.perf_counter() - t0)
        return rates

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

    def state(self, mode: str | None = None) -> dict:
        model = self.runners[mode or self.modes[0]].model
        return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}


def _serve() -> None:
    # The caller alone ends the peer (by closing the pipe): a Ctrl-C at the terminal reaches both processes,
    # and the caller keeps what it measured, so the peer neither dies with a traceback nor ends the round early.
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
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
        try:
            pickle.dump(reply, out, protocol=pickle.HIGHEST_PROTOCOL)
            out.flush()
        except OSError:  # the caller stopped reading (it was stopped mid-request): nothing left to answer
            os._exit(0)


if __name__ == "__main__":
    _serve()
