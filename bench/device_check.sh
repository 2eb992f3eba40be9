#!/usr/bin/env bash
# device_check.sh: on the GPU machine, the short loop after a GPU change: build with CUDA, `ctest -L gpu`,
# memcheck on the kernel tests, then the MACE-MP-0-medium-architecture step (5,184 water atoms) in fp32 and fp64
# with its phase profile. Needs .whl (mace-torch wheels, to make the model) unless $M/mace_mp0_medium_arch.h5
# exists (WHL=folder for another wheel folder). Logs go to $OUT; the summary is printed last.
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source bench/device_build.sh
build_gpu
OMP_NUM_THREADS=16 ctest --test-dir build-gpu -L gpu --output-on-failure -V >"$OUT/ctest_gpu.log" 2>&1
compute-sanitizer --tool memcheck build-gpu/tests/test_gpu_kernels >"$OUT/memcheck_kernels.log" 2>&1
compute-sanitizer --tool memcheck build-gpu/tests/test_gpu --gtest_filter='*Pairs*water_mace*:*Pairs*mace_plain*' \
  >"$OUT/memcheck_pairs.log" 2>&1
M=${M:-/tmp/models}
if [ ! -f $M/mace_mp0_medium_arch.h5 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHL:-.whl}/*.whl >/dev/null 2>&1
  PYTHONPATH=/tmp/site python3 tools/make_bench_models.py $M --no-selftest >"$OUT/make_models.log" 2>&1 || tail -5 "$OUT/make_models.log"
fi
B=build-gpu/bench_eval W=.device/models/water_192.xyz MP=$M/mace_mp0_medium_arch.h5
{
  $B $MP $W 1 1 1 cuda 10 --check --fp32
  $B $MP $W 3 3 3 cuda 10 --fp32
  $B $MP $W 3 3 3 cuda 5
  CGQ_GPU_PROFILE=1 $B $MP $W 3 3 3 cuda 3 --fp32 | tail -2
  CGQ_GPU_PROFILE=1 $B $MP $W 3 3 3 cuda 3 | tail -2
  $B $MP $W 3 3 3 cuda 10 --fp32 --pairs
  CGQ_GPU_PROFILE=1 $B $MP $W 3 3 3 cuda 3 --fp32 --pairs | tail -2
  $B potentials/water-mace-small.h5 $W 3 3 3 cuda 20 --check --fp32
  $B potentials/water-mace-small.h5 $W 3 3 3 cuda 20 --check --fp32 --pairs
  $B potentials/water-mace-small.h5 $W 3 3 3 cuda 20 --pairs
  CGQ_GPU_PROFILE=1 $B potentials/water-mace-small.h5 $W 3 3 3 cuda 3 --fp32 | tail -1
  CGQ_GPU_PROFILE=1 $B potentials/water-mace-small.h5 $W 3 3 3 cuda 3 --fp32 --pairs | tail -1
} >"$OUT/bench.txt" 2>&1
echo "==== check summary"
grep -E "tests passed|tests failed|Failed|FAILED" "$OUT/ctest_gpu.log" | head -8
grep -E "ERROR SUMMARY" "$OUT/memcheck_kernels.log" "$OUT/memcheck_pairs.log"
grep -E "err" "$OUT/ctest_gpu.log" | grep -E "layer" | sort -t' ' -k1,1 | tail -4
cat "$OUT/bench.txt"
# the conv kernels alone (validated first), and the racecheck of the model test on two fixtures
build-gpu/conv_workbench $MP $W 3 3 3 --fp32 >"$OUT/workbench.txt" 2>&1
build-gpu/conv_workbench potentials/water-mace-small.h5 $W 3 3 3 --fp32 >>"$OUT/workbench.txt" 2>&1
compute-sanitizer --tool racecheck build-gpu/tests/test_gpu --gtest_filter='*MatchesCpu*mace_plain*:*MatchesCpu*water_mace*:*Pairs*water_mace*' >"$OUT/racecheck.log" 2>&1
grep -E "RACECHECK SUMMARY" "$OUT/racecheck.log"
grep -v "^ *$" "$OUT/workbench.txt" | tail -14
