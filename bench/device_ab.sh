#!/usr/bin/env bash
# device_ab.sh: on the GPU machine, this tree against the base tree in .device/base (`git archive BASE | tar -x -C
# .device/base`) on the MACE-MP-0-medium-architecture step and its convolution kernels, in one call: bench_eval and
# conv_workbench built for both trees side by side, then ROUNDS (default 3) alternated rounds of the step (5,184
# water atoms, fp32, --pairs) and of `conv_workbench --tables`, each tree's phase profile, and each switch set of
# VARIANTS on the new tree (';'-separated sets of 'VAR=value ...', e.g. 'CGQ_A=0;CGQ_A=1 CGQ_B=2'). Carry .whl
# (mace-torch's wheels make the model). For kernel changes before their `ctest -L gpu` proof (device_ctest.sh).
# BASE=0: no base tree (its build and rounds left out): the new tree's default against its VARIANTS only, ~200 s less.
# TESTS='VAR=value ...': the kernel tests of the weight-table convolutions and test_gpu's fp32 tests built too (carry
# .device/googletest) and run with those switches first, for a trial kernel's first call (its ctest variants), and
# last compute-sanitizer memcheck and racecheck (SAN_TOOLS) on the kernel tests SAN_FILTER (default MP-0's widths)
# with them.
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source bench/device_build.sh
make_models
BASE_PID=""
if [ "${BASE:-1}" = 1 ]; then
  build_base bench_eval conv_workbench &
  BASE_PID=$!
fi
if [ -n "${TESTS:-}" ]; then build_gpu bench_eval conv_workbench test_gpu_kernels test_gpu
else build_gpu --no-tests bench_eval conv_workbench; fi
[ -z "$BASE_PID" ] || wait $BASE_PID || { echo "base build failed"; tail -5 "$OUT/build_base.log"; }
wait $MODELS_PID
B=build-gpu/bench_eval CW=build-gpu/conv_workbench B0="" CW0="" # the base tree's, where it is built
[ -n "$BASE_PID" ] && B0=.device/base/build/bench_eval CW0=.device/base/build/conv_workbench
W=.device/models/water_192.xyz MP=$M/mace_mp0_medium_arch.h5
ms() { grep -oE '[0-9.]+ ms/step median of [0-9]+ \(min [0-9.]+\)' | tr '\n' ' '; }
prof() { CGQ_GPU_PROFILE=1 "$@" $MP $W 3 3 3 cuda 3 --fp32 --pairs 2>&1 | grep profile | tail -1; }
# the summary lines of a googletest (or compute-sanitizer) run on one line
passed() { grep -E '^\[  (PASSED|FAILED) |ERROR SUMMARY|RACECHECK SUMMARY' | tr '\n' ' '; }
{
  nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
  if [ -n "${TESTS:-}" ]; then
    echo "tests with $TESTS: $(env $TESTS build-gpu/tests/test_gpu_kernels --gtest_filter='*WeightTable*' 2>&1 |
      passed)"
    echo "  $(env $TESTS build-gpu/tests/test_gpu --gtest_filter='*Float32*:*PairsOnDeviceFp32*' 2>&1 | passed)"
  fi
  echo "check new: $($B $MP $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E 'check|NONDET')"
  for round in $(seq "${ROUNDS:-3}"); do
    [ -n "$B0" ] && echo "MP-0 round $round base: $($B0 $MP $W 3 3 3 cuda 10 --fp32 --pairs | ms)"
    echo "MP-0 round $round new:  $($B $MP $W 3 3 3 cuda 10 --fp32 --pairs | ms)"
  done
  [ -n "$CW0" ] && { echo "== conv_workbench --tables, base"; conv_tables $CW0 $MP $W; }
  echo "== conv_workbench --tables, new"; conv_tables $CW $MP $W
  [ -n "$B0" ] && echo "base $(prof $B0)"
  echo "new  $(prof $B)"
  IFS=';' read -ra sets <<<"${VARIANTS:-}"
  for v in "${sets[@]}"; do
    [ -z "$v" ] && continue
    echo "== new with $v"
    echo "check: $(env $v $B $MP $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E 'check|NONDET')"
    echo "MP-0: $(env $v $B $MP $W 3 3 3 cuda 10 --fp32 --pairs | ms)"
    prof env $v $B
    conv_tables env $v $CW $MP $W
  done
  [ -n "$B0" ] && echo "MP-0 round last base: $($B0 $MP $W 3 3 3 cuda 10 --fp32 --pairs | ms)"
  echo "MP-0 round last new:  $($B $MP $W 3 3 3 cuda 10 --fp32 --pairs | ms)"
  if [ -n "${TESTS:-}" ]; then # last, as they take the GPU a while: memcheck and racecheck with the switches
    SF=${SAN_FILTER:-*WeightTable*mace_res_l3_mul128*}
    for tool in ${SAN_TOOLS:-memcheck racecheck}; do
      echo "$tool with $TESTS: $(env $TESTS timeout 150 compute-sanitizer --tool $tool \
        build-gpu/tests/test_gpu_kernels --gtest_filter="$SF" 2>&1 | passed)"
    done
  fi
} >"$OUT/ab.txt" 2>&1
cat "$OUT/ab.txt"
