"""Pin Taichi's CPU worker threads one to a core, as OpenMP's ``OMP_PROC_BIND`` does.

Why: Taichi 1.7's thread pool wakes all its workers at once for every parallel loop, and Linux tends to put
woken threads on the waker's core, so the two workers of a 2-core run often shared one core for the length of a
short loop while the other idled: unpinned, a loop of two equal tasks took as long as one core doing both
(docs/LOG.md).

How the workers are found: ``ti.init`` creates its thread pool's N workers last, after its other threads
(compilation and the like), so they are the last N of the threads that ``ti.init`` added to the process (a
test checks it against the threads that gain CPU time in a parallel loop). Linux only; elsewhere, or with
``LAYERLAB_PIN=0``, nothing is pinned.
"""
from __future__ import annotations

import os


def thread_ids() -> set[int]:
    """The ids of this process's threads (empty where /proc is not there)."""
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return set()


def enabled() -> bool:
    return os.environ.get("LAYERLAB_PIN", "1") != "0" and hasattr(os, "sched_setaffinity")


def pin_workers(before: set[int], n_workers: int) -> tuple[int, ...]:
    """Pin the last ``n_workers`` threads created since ``before`` to this process's cores in turn; returns
    the core of each pinned worker, in order (empty if nothing was pinned)."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    new = sorted(thread_ids() - before)
    if not enabled() or n_workers < 2 or len(cores) < 2 or len(new) < n_workers:
        return ()
    placed = []
    try:
        for i, tid in enumerate(new[-n_workers:]):
            os.sched_setaffinity(tid, {cores[i % len(cores)]})
            placed.append(cores[i % len(cores)])
    except OSError:  # a thread that ended meanwhile, or a sandbox that forbids it: leave the rest alone
        pass
    return tuple(placed)
