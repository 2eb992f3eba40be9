#!/usr/bin/env bash
# device_ab.sh: on the GPU machine, this tree against a base commit in one call (session 22): builds this tree with the
# tests and the base's bench_eval (its source in .device/base: `git archive BASE | tar -x -C .device/base`) side by
# side; the kernel tests of FILTER (default: convolution, species, product basis and node maps; also with
# CGQ_GPU_NODE_TC=1, which runs the narrow fixtures on the tensor-core tile), memcheck on them and racecheck on
# RACE_FILTER; the MACE-MP-0-medium-architecture step (5,184 water atoms, fp32, --pairs; checked against the CPU first)
# base and new alternated three times, their profiles, the shipped models and 98,304 atoms. `ctest -L gpu` is left to
# bench/device_ctest.sh (one call would pass 600 s). ALT_ENV (e.g. "CGQ_GPU_WTAB12=0"): this tree under that
# environment too, alternated with the others. WATER=0 leaves out the shipped models; NCU_KERNELS (a
# regex) times those kernels' launches in one MP-0 step with Nsight Compute. Carry .whl and .device.
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source bench/device_build.sh
make_models
build_base bench_eval &
BASE_PID=$!
build_gpu test_gpu_kernels bench_eval # only what runs below (a fresh machine's whole build took 380 s, session 27)
wait $BASE_PID
K=build-gpu/tests/test_gpu_kernels F=${FILTER:-'*WeightTable*:*Convolution*:*Species*:*ProductBasis*:*NodeLinear*:*Skip*'}
$K --gtest_filter="$F" >"$OUT/kernels.log" 2>&1
CGQ_GPU_NODE_TC=1 $K --gtest_filter="$F" >"$OUT/kernels_tc.log" 2>&1
[ -n "${ALT_ENV:-}" ] && env $ALT_ENV CGQ_GPU_NODE_TC=1 $K --gtest_filter="$F" >"$OUT/kernels_alt.log" 2>&1
compute-sanitizer --tool memcheck $K --gtest_filter="$F" >"$OUT/memcheck.log" 2>&1
compute-sanitizer --tool racecheck $K --gtest_filter="${RACE_FILTER:-*WeightTable*:*ProductBasis*}" >"$OUT/racecheck.log" 2>&1
wait $MODELS_PID
B=build-gpu/bench_eval B0=.device/base/build/bench_eval W=.device/models/water_192.xyz MP=$M/mace_mp0_medium_arch.h5
ms() { grep -oE '[0-9.]+ ms/step median of [0-9]+ \(min [0-9.]+\)|GPU memory [0-9.]+ GiB' | tr '\n' ' '; }
{
  echo "new: $($B $MP $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E 'check|NONDET')"
  echo "base: $($B0 $MP $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E 'check|NONDET')"
  [ -n "${ALT_ENV:-}" ] && echo "new $ALT_ENV: $(env $ALT_ENV $B $MP $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E 'check|NONDET')"
  $B $MP $W 3 3 3 cuda 10 --fp32 --pairs >/dev/null
  for round in 1 2 3; do
    echo "== MP-0 round $round base: $($B0 $MP $W 3 3 3 cuda 10 --fp32 --pairs | ms)"
    echo "== MP-0 round $round new: $($B $MP $W 3 3 3 cuda 10 --fp32 --pairs | ms)"
    [ -n "${ALT_ENV:-}" ] && echo "== MP-0 round $round new $ALT_ENV: $(env $ALT_ENV $B $MP $W 3 3 3 cuda 10 --fp32 --pairs | ms)"
  done
  echo "base $(CGQ_GPU_PROFILE=1 $B0 $MP $W 3 3 3 cuda 3 --fp32 --pairs 2>&1 | grep profile | tail -1)"
  echo "new $(CGQ_GPU_PROFILE=1 $B $MP $W 3 3 3 cuda 3 --fp32 --pairs 2>&1 | grep profile | tail -1)"
  [ -n "${ALT_ENV:-}" ] && echo "new $ALT_ENV $(env $ALT_ENV CGQ_GPU_PROFILE=1 $B $MP $W 3 3 3 cuda 3 --fp32 --pairs 2>&1 | grep profile | tail -1)"
  if [ "${WATER:-1}" = 1 ]; then # WATER=0: MP-0 alone
    WM=potentials/water-mace-small.h5
    echo "water base $(CGQ_GPU_PROFILE=1 $B0 $WM $W 3 3 3 cuda 5 --fp32 --pairs 2>&1 | grep profile | tail -1)"
    echo "water new $(CGQ_GPU_PROFILE=1 $B $WM $W 3 3 3 cuda 5 --fp32 --pairs 2>&1 | grep profile | tail -1)"
    for mdl in water-mace-small mace01-solvent water-nequip-small; do
      echo "== $mdl new: $($B potentials/$mdl.h5 $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E 'check|NONDET' | head -1)"
      echo "== $mdl base: $($B0 potentials/$mdl.h5 $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E 'check|NONDET' | head -1)"
      [ -n "${ALT_ENV:-}" ] && echo "== $mdl new $ALT_ENV: $(env $ALT_ENV $B potentials/$mdl.h5 $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E 'check|NONDET' | head -1)"
      for round in 1 2; do
        echo "== $mdl base: $($B0 potentials/$mdl.h5 $W 3 3 3 cuda 20 --fp32 --pairs | ms)"
        echo "== $mdl new: $($B potentials/$mdl.h5 $W 3 3 3 cuda 20 --fp32 --pairs | ms)"
        [ -n "${ALT_ENV:-}" ] && echo "== $mdl new $ALT_ENV: $(env $ALT_ENV $B potentials/$mdl.h5 $W 3 3 3 cuda 20 --fp32 --pairs | ms)"
      done
    done
  fi
  echo "== MP-0 98,304 atoms base: $($B0 $MP $W 8 8 8 cuda 3 --fp32 --pairs | ms)"
  echo "== MP-0 98,304 atoms new: $($B $MP $W 8 8 8 cuda 3 --fp32 --pairs | ms)"
  [ -n "${ALT_ENV:-}" ] && echo "== MP-0 98,304 atoms new $ALT_ENV: $(env $ALT_ENV $B $MP $W 8 8 8 cuda 3 --fp32 --pairs | ms)"
} >"$OUT/bench.txt" 2>&1
if [ -n "${NCU_KERNELS:-}" ]; then # e.g. NCU_KERNELS=k_lin_gemm: those kernels' launches in one MP-0 step (new), timed
  timeout 150 ncu --clock-control none --kernel-name "regex:$NCU_KERNELS" --launch-skip 0 --launch-count 200 \
    --metrics gpu__time_duration.sum,launch__grid_size,sm__warps_active.avg.pct_of_peak_sustained_active \
    $B $MP $W 3 3 3 cuda 1 --fp32 --pairs >"$OUT/ncu_kernels.txt" 2>&1
  grep -E "^  [a-z_]+.*\(|gpu__time_duration|launch__grid_size|warps_active" "$OUT/ncu_kernels.txt" | \
    sed -E 's/ +/ /g' | paste - - - - | tail -40 >>"$OUT/bench.txt"
fi
echo "==== summary"
grep -hE "^\[  (PASSED|FAILED)|FAILED  \]" "$OUT"/kernels*.log | head
grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/memcheck.log" "$OUT/racecheck.log"
cat "$OUT/bench.txt"
