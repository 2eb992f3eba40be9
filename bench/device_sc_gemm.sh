#!/usr/bin/env bash
# device_sc_gemm.sh: on the GPU machine, the factored first convolution with its folds as node GEMMs (species_conv.cuh,
# CGQ_GPU_SPECIES_CONV=2; first run in session 22, the default from 64 channels since) against the in-kernel folds
# (CGQ_GPU_SPECIES_CONV=1; labelled "default", as they were when the script was written), in one call: build with the
# tests; the species kernel tests in both modes, compute-sanitizer memcheck and racecheck on the GEMM mode; `ctest -L gpu` (which holds test_gpu_kernels_species_gemm and test_gpu_species_gemm);
# the MACE-MP-0-medium-architecture step (5,184 water atoms, fp32, --pairs; checked against the CPU first) alternated
# three times, both profiles, Nsight Compute's time of one step's node GEMMs and species kernels in the GEMM mode, the
# shipped MACE models and 98,304 atoms. Needs the mace wheels in .whl (bench/device_build.sh make_models),
# .device/googletest and .device/models/water_192.xyz (tools/prepare-device.sh makes them; carry .whl and .device).
# Logs in $OUT; the summary is printed last. Build, ctest and bench together may pass one call's 600 s: CTEST=0 leaves
# ctest out (run bench/device_ctest.sh on the warm machine next).
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source bench/device_build.sh
make_models
build_gpu
K=build-gpu/tests/test_gpu_kernels F='*Species*' GM=CGQ_GPU_SPECIES_CONV=2 DF=CGQ_GPU_SPECIES_CONV=1
env $DF $K --gtest_filter="$F" >"$OUT/kernels_default.log" 2>&1
env $GM $K --gtest_filter="$F" >"$OUT/kernels_gemm.log" 2>&1
env $GM compute-sanitizer --tool memcheck $K --gtest_filter="$F" >"$OUT/memcheck.log" 2>&1
env $GM compute-sanitizer --tool racecheck $K --gtest_filter="$F" >"$OUT/racecheck.log" 2>&1
start=$(date +%s)
if [ "${CTEST:-1}" = 1 ]; then
  OMP_NUM_THREADS=2 ctest --test-dir build-gpu -L gpu -j12 --output-on-failure >"$OUT/ctest_gpu.log" 2>&1
  echo "ctest -L gpu: $(( $(date +%s) - start )) s; $(grep -E 'tests passed|tests failed' "$OUT/ctest_gpu.log")" >"$OUT/ctest.txt"
  grep -E "\*\*\*Failed|\*\*\*Timeout|\*\*\*Exception" "$OUT/ctest_gpu.log" | head -20 >>"$OUT/ctest.txt"
fi
wait $MODELS_PID
B=build-gpu/bench_eval W=.device/models/water_192.xyz MP=$M/mace_mp0_medium_arch.h5
ms() { grep -oE '[0-9.]+ ms/step median of [0-9]+ \(min [0-9.]+\)|GPU memory [0-9.]+ GiB' | tr '\n' ' '; }
{
  echo "default: $(env $DF $B $MP $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E 'check|NONDET')"
  echo "gemm: $(env $GM $B $MP $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E 'check|NONDET')"
  env $DF $B $MP $W 3 3 3 cuda 10 --fp32 --pairs >/dev/null
  for round in 1 2 3; do
    echo "== MP-0 round $round default: $(env $DF $B $MP $W 3 3 3 cuda 10 --fp32 --pairs | ms)"
    echo "== MP-0 round $round gemm: $(env $GM $B $MP $W 3 3 3 cuda 10 --fp32 --pairs | ms)"
  done
  echo "default $(env $DF CGQ_GPU_PROFILE=1 $B $MP $W 3 3 3 cuda 3 --fp32 --pairs 2>&1 | grep profile | tail -1)"
  echo "gemm $(env $GM CGQ_GPU_PROFILE=1 $B $MP $W 3 3 3 cuda 3 --fp32 --pairs 2>&1 | grep profile | tail -1)"
  # one evaluation's 16 node GEMMs and the layer's 5 launches (weights, Q, its GEMM; G's GEMM, the reverse): the third
  # evaluation (two warm-ups skipped)
  env $GM timeout 100 ncu --clock-control none --kernel-name regex:'species|k_lin_gemm' --launch-skip 42 \
    --launch-count 21 --metrics gpu__time_duration.sum $B $MP $W 3 3 3 cuda 1 --fp32 --pairs >"$OUT/ncu_gemm.txt" 2>&1
  grep -E "^\s+(void )?k_|gpu__time" "$OUT/ncu_gemm.txt" | sed -E 's/\s+/ /g' | cut -c1-100
  for mdl in water-mace-small mace01-solvent; do
    echo "== $mdl gemm: $(env $GM $B potentials/$mdl.h5 $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E 'check|NONDET' | head -1)"
    echo "== $mdl default: $(env $DF $B potentials/$mdl.h5 $W 3 3 3 cuda 20 --fp32 --pairs | ms)"
    echo "== $mdl gemm: $(env $GM $B potentials/$mdl.h5 $W 3 3 3 cuda 20 --fp32 --pairs | ms)"
  done
  echo "== MP-0 98,304 atoms default: $(env $DF $B $MP $W 8 8 8 cuda 3 --fp32 --pairs | ms)"
  echo "== MP-0 98,304 atoms gemm: $(env $GM $B $MP $W 8 8 8 cuda 3 --fp32 --pairs | ms)"
} >"$OUT/bench.txt" 2>&1
echo "==== summary"
grep -hE "^\[  (PASSED|FAILED)" "$OUT/kernels_default.log" "$OUT/kernels_gemm.log"
grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/memcheck.log" "$OUT/racecheck.log"
cat "$OUT/ctest.txt" "$OUT/bench.txt" 2>/dev/null
