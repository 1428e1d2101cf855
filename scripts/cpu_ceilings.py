"""What this CPU can do, measured the way docs/PERFORMANCE.md quotes it.

    python scripts/cpu_ceilings.py [--repeats N]

Prints, each the median of N timed runs after a warm-up:
- NumPy's BLAS: float32 GEMM 2048^3 (what a vendor library reaches);
- memory bandwidth: np.copyto of 64 MiB (read + write);
- Taichi's arithmetic ceiling: independent chains of 16-wide multiply-adds in registers (12 on AVX-512, 6 on
  AVX2: as many as the registers hold), no memory traffic (the median, and the range over the runs);
- nncore's Linear forward product at net-1h's size (256 x 784 -> 1024), both operands staged as vectors
  (the kernel the network runs) and with A read directly (the kernel for layers of few outputs), and its
  weight-gradient product (staged),
on cpu-serial and on cpu-parallel.
"""
import argparse
import statistics
import time

import numpy as np


def median_s(fn, repeats: int, sync=lambda: None) -> float:
    fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def numpy_rows(repeats: int) -> list[tuple[str, str]]:
    a = np.random.default_rng(0).random((2048, 2048), dtype=np.float32)
    t = median_s(lambda: a @ a, repeats)
    src, dst = np.ones(16 << 20, np.float32), np.empty(16 << 20, np.float32)
    c = median_s(lambda: np.copyto(dst, src), repeats)
    return [("NumPy BLAS float32 GEMM 2048^3", f"{2 * 2048 ** 3 / t / 1e9:.0f} GFLOP/s"),
            ("memory copy, 64 MiB", f"{2 * src.nbytes / c / 1e9:.1f} GB/s (read + write)")]


def taichi_rows(arch: str, repeats: int) -> list[tuple[str, str]]:
    from nncore import runtime

    info = runtime.init(arch)
    ti = runtime.ti
    from nncore.kernels import gemm_cpu as G

    V = ti.types.vector(16, ti.f32)
    # Independent chains that fit the vector registers (a 16-wide vector is one AVX-512 register, two AVX2 ones):
    # more spill to the stack and measure the spills.
    chains = 12 if (G.ROWS, G.COLS) == G.LAYOUT_AVX512 else 6

    @ti.kernel
    def fma_chains(out: ti.types.ndarray(dtype=V, ndim=1), n: ti.i32):
        ti.loop_config(block_dim=runtime.coarse_block)
        for t in range(out.shape[0]):
            acc = [V(0.0) for _ in ti.static(range(chains))]
            x, y = V(1.0001), V(0.9999)
            for _ in range(n):
                for i in ti.static(range(chains)):
                    acc[i] = acc[i] * y + x
            s = V(0.0)
            for i in ti.static(range(chains)):
                s += acc[i]
            out[t] = s

    out = ti.Vector.ndarray(16, ti.f32, shape=(64,))
    n = 100_000
    fma_chains(out, n)
    ti.sync()
    rates = []
    for _ in range(max(repeats, 9)):
        t0 = time.perf_counter()
        fma_chains(out, n)
        ti.sync()
        rates.append(64 * n * chains * 16 * 2 / (time.perf_counter() - t0) / 1e9)
    # The spread matters on a VM: on the development machine the two threads' ceiling moved between ~100 and
    # ~200 GFLOP/s from one 0.1 s run to the next (the second vCPU at times adds nothing).
    rows = [(f"Taichi multiply-add ceiling, {arch} ({info.threads} thread{'s' if info.threads > 1 else ''})",
             f"{statistics.median(rates):.0f} GFLOP/s (runs: {min(rates):.0f}-{max(rates):.0f})")]

    m, k, n_out = 256, 784, 1024
    rng = np.random.default_rng(0)
    inp = ti.ndarray(ti.f32, (m, k))
    inp.from_numpy(rng.normal(size=(m, k)).astype(np.float32))
    params = ti.ndarray(ti.f32, (n_out * k + n_out,))
    params.from_numpy(rng.normal(size=n_out * k + n_out).astype(np.float32))
    out2 = ti.ndarray(ti.f32, (m, n_out))
    wt = ti.Vector.ndarray(16, ti.f32, shape=G.panels_shape(n_out, k))
    xp = ti.Vector.ndarray(16, ti.f32, shape=G.panels_shape(m, k))
    G.weight_panels(wt, params, 0, n_out, 0)
    G.stage_panels(xp, inp, inp, 0)
    flops = 2 * m * k * n_out
    staged = median_s(lambda: G.linear_forward_cpu(out2, xp, wt, params, 0, n_out * k, 0, 0), repeats, ti.sync)
    direct = median_s(lambda: G.linear_forward_cpu_direct(out2, inp, wt, params, n_out * k, 0), repeats, ti.sync)
    stage = median_s(lambda: G.stage_panels(xp, inp, inp, 0), repeats, ti.sync)
    # The weight gradient dW = dout^T @ inp (1024 x 784, summed over the batch of 256).
    xs = ti.Vector.ndarray(16, ti.f32, shape=G.strips_shape(m, k))
    ds = ti.Vector.ndarray(16, ti.f32, shape=G.strips_shape(m, n_out))
    dparams = ti.ndarray(ti.f32, (n_out * k + n_out,))
    G.stage_dz(ds, dparams, out2, out2, n_out * k, 0)
    G.stage_strips(xs, inp)
    dweight = median_s(lambda: G.linear_dweight(dparams, ds, xs, ds, 0, n_out, k, 0), repeats, ti.sync)
    dstage = median_s(lambda: (G.stage_dz(ds, dparams, out2, out2, n_out * k, 0), G.stage_strips(xs, inp)),
                      repeats, ti.sync)
    rows += [(f"Linear forward 256x784x1024, operands staged, {arch}",
              f"{flops / staged / 1e9:.0f} GFLOP/s (W packed inside; +{stage * 1e3:.2f} ms staging the input)"),
             (f"Linear forward 256x784x1024, A read directly, {arch}", f"{flops / direct / 1e9:.0f} GFLOP/s"),
             (f"Linear weight gradient 1024x784 over 256, staged, {arch}",
              f"{flops / dweight / 1e9:.0f} GFLOP/s (+{dstage * 1e3:.2f} ms staging and bias gradient)")]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    rows = numpy_rows(args.repeats) + taichi_rows("cpu-serial", args.repeats) + taichi_rows("cpu-parallel",
                                                                                              args.repeats)
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
