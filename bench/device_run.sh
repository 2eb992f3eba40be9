#!/usr/bin/env bash
# device_run.sh: on the GPU machine: build with CUDA, run the gpu tests and compute-sanitizer, then the
# end-to-end benchmarks. Logs go to $OUT (or ./device-out); a short table is printed last.
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv
nvcc --version | tail -1
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCGQ_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCGQ_GTEST_SOURCE_DIR="$PWD/.device/googletest" >"$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
time cmake --build build-gpu -j16 >"$OUT/build.log" 2>&1 || { grep -E "error" -A5 "$OUT/build.log" | head -60; exit 1; }
grep -E "registers|stack frame" "$OUT/build.log" | head -20 >"$OUT/ptxas.txt"
OMP_NUM_THREADS=16 ctest --test-dir build-gpu -L gpu --output-on-failure -V >"$OUT/ctest_gpu.log" 2>&1
tail -5 "$OUT/ctest_gpu.log"
grep -E "dE/E" "$OUT/ctest_gpu.log" >"$OUT/gpu_parity.txt" || build-gpu/tests/test_gpu 2>&1 | grep -E "dE/E" >"$OUT/gpu_parity.txt"
compute-sanitizer --tool memcheck build-gpu/tests/test_gpu --gtest_filter='*mace_plain*:*zbl*' >"$OUT/memcheck.log" 2>&1
tail -3 "$OUT/memcheck.log"
compute-sanitizer --tool racecheck build-gpu/tests/test_gpu --gtest_filter='*mace_plain*' >"$OUT/racecheck.log" 2>&1
tail -3 "$OUT/racecheck.log"
M=.device/models
B=build-gpu/bench_eval
{
  $B potentials/mace01-solvent.h5 $M/water_192.xyz 1 1 1 cuda 20 --check
  $B potentials/mace01-solvent.h5 $M/water_192.xyz 3 3 3 cuda 10 --check
  OMP_NUM_THREADS=16 $B potentials/mace01-solvent.h5 $M/water_192.xyz 3 3 3 cpu 3
  $B $M/mace_mp0_medium_arch.h5 $M/water_192.xyz 1 1 1 cuda 5 --check
  $B $M/mace_mp0_medium_arch.h5 $M/water_192.xyz 3 3 3 cuda 3
  OMP_NUM_THREADS=16 $B $M/mace_mp0_medium_arch.h5 $M/water_192.xyz 1 1 1 cpu 2
} 2>&1 | tee "$OUT/bench.txt"
python3 -m pip list 2>/dev/null | grep -iE "^(scipy|sympy|pandas|ase|matplotlib|tqdm|pyyaml|e3nn|opt.einsum) " >"$OUT/pip.txt"
echo "==== summary"
grep -E "tests passed|tests failed" "$OUT/ctest_gpu.log"
grep -E "ERROR SUMMARY" "$OUT/memcheck.log" "$OUT/racecheck.log"
grep -E "ms/step|check vs" "$OUT/bench.txt"
