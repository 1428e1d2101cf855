"""Shared fixtures: the backend under test, host<->ndarray helpers and the gpu marker's skip."""
import os
import zlib

import numpy as np
import pytest
from hypothesis import settings

from nncore import runtime

# Runs recorded by the suite (the CLI and the app record every run) go to a store of the test session's own,
# never to the user's.
os.environ["LAYERLAB_HOME"] = __import__("tempfile").mkdtemp(prefix="layerlab-tests-home-")

# CI runs the fuzz tests on a fixed sequence of examples, so a submission's result does not depend on luck;
# local runs draw new examples every time (and keep failures in .hypothesis/ to replay them).
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

_CUDA = {s.name: s for s in runtime.available_archs()}["cuda"]


def pytest_collection_modifyitems(config, items):
    if _CUDA.available:
        return
    skip = pytest.mark.skip(reason=f"no working CUDA backend here: {_CUDA.reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# Kernel tests run on each backend that can run here; cuda only on a machine with a GPU.
ARCH_PARAMS = ["cpu-parallel", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture(params=ARCH_PARAMS)
def arch(request):
    runtime.ensure(request.param)
    return request.param


@pytest.fixture
def cpu():
    """The default CPU backend, for tests that are about shapes and logic, not backends."""
    return runtime.ensure("cpu-parallel")


@pytest.fixture
def rng(request):
    # A different, reproducible stream per test.
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def nd(a, dtype=None):
    """A Taichi ndarray holding ``a`` (f32 unless integer)."""
    a = np.asarray(a)
    dtype = dtype or (runtime.ti.i32 if np.issubdtype(a.dtype, np.integer) else runtime.ti.f32)
    np_dtype = np.int32 if dtype == runtime.ti.i32 else np.float32
    arr = runtime.ti.ndarray(dtype, shape=a.shape)
    arr.from_numpy(np.ascontiguousarray(a, np_dtype))
    return arr


def rel_err(got, want) -> float:
    """Largest absolute difference relative to the largest reference magnitude."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))

