#!/usr/bin/env bash
# device_run.sh: on the GPU machine: build with CUDA, run the gpu tests and compute-sanitizer, then the
# end-to-end benchmarks. Logs go to $OUT (or ./device-out); a short table is printed last.
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv
nvcc --version | tail -1
source bench/device_build.sh
time build_gpu
grep -E "registers|stack frame" "$OUT/build.log" | head -20 >"$OUT/ptxas.txt"
OMP_NUM_THREADS=16 ctest --test-dir build-gpu -L gpu --output-on-failure -V >"$OUT/ctest_gpu.log" 2>&1
tail -5 "$OUT/ctest_gpu.log"
grep -E "dE/E" "$OUT/ctest_gpu.log" >"$OUT/gpu_parity.txt" || build-gpu/tests/test_gpu 2>&1 | grep -E "dE/E" >"$OUT/gpu_parity.txt"
compute-sanitizer --tool memcheck build-gpu/tests/test_gpu --gtest_filter='*mace_plain*:*zbl*' >"$OUT/memcheck.log" 2>&1
tail -3 "$OUT/memcheck.log"
compute-sanitizer --tool racecheck build-gpu/tests/test_gpu --gtest_filter='*mace_plain*' >"$OUT/racecheck.log" 2>&1
tail -3 "$OUT/racecheck.log"
M=.device/models
if [ -d .whl ]; then # mace-torch and its imports, carried as wheels
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
fi
if [ ! -f $M/mace_mp0_medium_arch.model ] && [ -d .whl ]; then # too large to carry with the .h5: made here
  M=/tmp/models
  (time PYTHONPATH=/tmp/site python3 tools/make_bench_models.py $M --no-selftest) >"$OUT/make_models.log" 2>&1 || tail -20 "$OUT/make_models.log"
fi
B=build-gpu/bench_eval
W=.device/models/water_192.xyz
MP=$M/mace_mp0_medium_arch
{
  $B potentials/mace01-solvent.h5 $W 1 1 1 cuda 20 --check
  $B potentials/mace01-solvent.h5 $W 3 3 3 cuda 10 --check
  $B $MP.h5 $W 1 1 1 cuda 10 --check
  $B $MP.h5 $W 3 3 3 cuda 5
  $B potentials/water-mace-small.h5 $W 1 1 1 cuda 50 --check --fp32
  $B potentials/water-mace-small.h5 $W 3 3 3 cuda 30 --check --fp32
  CGQ_GPU_PROFILE=1 $B potentials/water-mace-small.h5 $W 3 3 3 cuda 3 --fp32
  $B potentials/mace01-solvent.h5 $W 1 1 1 cuda 20 --check --fp32
  $B potentials/mace01-solvent.h5 $W 3 3 3 cuda 10 --check --fp32
  $B $MP.h5 $W 1 1 1 cuda 10 --check --fp32
  $B $MP.h5 $W 3 3 3 cuda 5 --fp32
  CGQ_GPU_PROFILE=1 $B $MP.h5 $W 3 3 3 cuda 1
  CGQ_GPU_PROFILE=1 $B $MP.h5 $W 3 3 3 cuda 1 --fp32
  [ -n "${CGQ_BENCH_V1:-}" ] && CGQ_GPU_V1=1 $B $MP.h5 $W 1 1 1 cuda 3
} 2>&1 | tee "$OUT/bench.txt"
# side by side: mace-torch (e3nn) on the same GPU, from wheels carried in .whl (see bench/mace_torch_bench.py)
if [ -d .whl ] && [ -f $MP.model ]; then
  for args in "$MP.model $W 1 1 1 float32 10" "$MP.model $W 3 3 3 float32 5" "$MP.model $W 3 3 3 float64 3"; do
    PYTHONPATH=/tmp/site python3 bench/mace_torch_bench.py $args 2>&1 | grep -E "mace-torch|Error|error" | tail -2
  done | tee "$OUT/mace_torch.txt"
fi
echo "==== summary"
grep -E "tests passed|tests failed" "$OUT/ctest_gpu.log"
grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/memcheck.log" "$OUT/racecheck.log"
grep -E "Failed|FAILED" "$OUT/ctest_gpu.log" | head -5
grep -E "ms/step|check vs|profile" "$OUT/bench.txt"
cat "$OUT/mace_torch.txt" 2>/dev/null
