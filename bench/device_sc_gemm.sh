#!/usr/bin/env bash
# device_sc_gemm.sh: on the GPU machine, session 21's measurement of the factored first convolution with its folds as
# node GEMMs (species_conv.cuh) against the session-20 code (a copy of its tree in .device/base, made by
# `git archive 3e60ba4 | tar -x -C .device/base`), alternated in one call: build both, the species kernel tests with
# compute-sanitizer memcheck and racecheck, the MACE-MP-0-medium-architecture step (5,184 water atoms, fp32, --pairs;
# checked against the CPU first), its profile, Nsight Compute's time of one step's layer-0 kernels, the shipped MACE
# models and 98,304 atoms. Needs the mace wheels in .whl (bench/device_build.sh make_models). Logs in $OUT; the summary
# is printed last.
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source bench/device_build.sh
make_models
build_gpu
( cd .device/base && cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCGQ_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCGQ_BUILD_TESTS=OFF >/dev/null && cmake --build build-gpu -j16 --target bench_eval >"$OUT/base_build.log" 2>&1 ) ||
  echo "BASE BUILD FAILED"
K=build-gpu/tests/test_gpu_kernels F='*Species*'
$K --gtest_filter="$F" >"$OUT/kernels.log" 2>&1
compute-sanitizer --tool memcheck $K --gtest_filter="$F" >"$OUT/memcheck.log" 2>&1
compute-sanitizer --tool racecheck $K --gtest_filter="$F" >"$OUT/racecheck.log" 2>&1
wait $MODELS_PID
B=build-gpu/bench_eval B0=.device/base/build-gpu/bench_eval W=.device/models/water_192.xyz MP=$M/mace_mp0_medium_arch.h5
ms() { grep -oE '[0-9.]+ ms/step median of [0-9]+ \(min [0-9.]+\)|GPU memory [0-9.]+ GiB' | tr '\n' ' '; }
{
  echo "new: $($B $MP $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E 'check|NONDET')"
  echo "base: $($B0 $MP $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E 'check|NONDET')"
  $B $MP $W 3 3 3 cuda 10 --fp32 --pairs >/dev/null
  for round in 1 2 3; do
    echo "== MP-0 round $round new: $($B $MP $W 3 3 3 cuda 10 --fp32 --pairs | ms)"
    echo "== MP-0 round $round base: $($B0 $MP $W 3 3 3 cuda 10 --fp32 --pairs | ms)"
  done
  echo "new $(CGQ_GPU_PROFILE=1 $B $MP $W 3 3 3 cuda 3 --fp32 --pairs 2>&1 | grep profile | tail -1)"
  echo "base $(CGQ_GPU_PROFILE=1 $B0 $MP $W 3 3 3 cuda 3 --fp32 --pairs 2>&1 | grep profile | tail -1)"
  # one evaluation's node GEMMs and species kernels (the third: two warm-ups skipped): 21 launches (new), 18 (base)
  for run in "new $B 21" "base $B0 18"; do
    set -- $run
    timeout 100 ncu --clock-control none --kernel-name regex:'species|k_lin_gemm' --launch-skip $((2 * $3)) \
      --launch-count $3 --metrics gpu__time_duration.sum $2 $MP $W 3 3 3 cuda 1 --fp32 --pairs >"$OUT/ncu_$1.txt" 2>&1
    echo "ncu $1: $(grep -E '^\s+(void )?k_|gpu__time' "$OUT/ncu_$1.txt" | sed -E 's/\s+/ /g' | cut -c1-60 | paste -sd' ' | cut -c1-1500)"
  done
  for mdl in water-mace-small mace01-solvent; do
    echo "== $mdl new: $($B potentials/$mdl.h5 $W 3 3 3 cuda 20 --fp32 --pairs --check | grep -E 'check|NONDET' | head -1)"
    echo "== $mdl new: $($B potentials/$mdl.h5 $W 3 3 3 cuda 20 --fp32 --pairs | ms)"
    echo "== $mdl base: $($B0 potentials/$mdl.h5 $W 3 3 3 cuda 20 --fp32 --pairs | ms)"
  done
  echo "== MP-0 98,304 atoms new: $($B $MP $W 8 8 8 cuda 3 --fp32 --pairs | ms)"
  echo "== MP-0 98,304 atoms base: $($B0 $MP $W 8 8 8 cuda 3 --fp32 --pairs | ms)"
} >"$OUT/bench.txt" 2>&1
echo "==== summary"
grep -E "FAILED|PASSED|BASE BUILD" "$OUT/kernels.log" "$OUT/base_build.log" | tail -4
grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/memcheck.log" "$OUT/racecheck.log"
cat "$OUT/bench.txt"
