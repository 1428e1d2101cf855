#!/usr/bin/env bash
# What a lent GPU machine runs in one call before CUDA work is called done, and the figures the docs quote:
# the CUDA bench against PyTorch eager and with its step in a CUDA graph (every seed workload, net-1h-relu
# included), the first Linear against cuBLAS, then the CUDA tests. Outputs go to $OUT (the device's result
# folder) or ./gpu-out; a summary to stdout. The figures come first, so that a call cut short by the machine's
# command limit still returns them; GPU_CHECKS_LIMIT_S (seconds since the start) stops the tests before it.
# Usage, from the project root: [GPU_CHECKS_LIMIT_S=N] bash scripts/gpu_checks.sh [quick]
#   (on a lent machine, with pytest-xdist and execnet among the wheels carried: the tests in parallel)
#   (quick: net-1h and cnn64, 3 repeats)
set -u
out=${OUT:-gpu-out}
mkdir -p "$out"
export LAYERLAB_HOME=${LAYERLAB_HOME:-/tmp/layerlab-gpu-home}
nvidia-smi -L 2>/dev/null || echo "nvidia-smi: not found"
workloads=(--workloads net-1h,net-1h-relu,net-2h,cnn32,cnn64,cnn256) repeats=5
if [ "${1:-}" = quick ]; then workloads=(--workloads net-1h,cnn64); repeats=3; fi
python3 -m nncore.cli bench --arch cuda --torch-mode eager,graph --steps 50 --repeats "$repeats" --batch 64,256,1000 \
    "${workloads[@]}" --no-store --json "$out/bench-cuda.json" > "$out/bench-cuda.txt" 2>&1
echo "bench: exit $? ($SECONDS s)"
grep -v "Warning\|Save a field" "$out/bench-cuda.txt" | head -n 30
python3 scripts/first_linear.py --batch 64,256,1000 --json "$out/first-linear.json" > "$out/first-linear.txt" 2>&1
echo "first_linear: exit $? ($SECONDS s)"
grep -v "Warning\|Save a field" "$out/first-linear.txt"
# The app's tests need the app's test plugins, which the GPU image may lack; no CUDA test lives there.
# With pytest-xdist installed the tests run in six processes on the one GPU: their time is mostly compiling,
# which the host's cores share out (docs/LOG.md, 2026-11-29).
par=()
python3 -c "import xdist" 2>/dev/null && par=(-n 6 --dist loadfile)
left=$(( ${GPU_CHECKS_LIMIT_S:-100000} - SECONDS ))
timeout "$(( left > 1 ? left : 1 ))" python3 -m pytest -q -p no:cacheprovider -m gpu --ignore=tests/tui ${par[@]+"${par[@]}"} \
    > "$out/pytest-gpu.txt" 2>&1
echo "pytest -m gpu: exit $? ($SECONDS s), $(tail -n 1 "$out/pytest-gpu.txt")"
