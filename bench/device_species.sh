#!/usr/bin/env bash
# device_species.sh: on the GPU machine, MACE's first convolution factored through the senders' species
# (species_conv.cuh): build; its kernel test and the convolution/radial kernel tests; test_gpu's fp32 model tests with
# it (default), with 64-edge chunks, and with it off (CGQ_GPU_SPECIES_CONV=0); compute-sanitizer memcheck and racecheck
# on its kernel test; the MACE-MP-0-medium-architecture step (5,184 water atoms, fp32) checked against the CPU and
# alternated with it off; a profile; 98,304 atoms; the shipped MACE models. Logs in $OUT; the summary last.
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source bench/device_build.sh
make_models
build_gpu
grep -A2 -E "k_species_conv" "$OUT/build.log" | grep -E "registers|spill" | head -4
K=build-gpu/tests/test_gpu_kernels T=build-gpu/tests/test_gpu FP32='*Float32*:*PairsOnDeviceFp32*'
$K --gtest_filter='*Species*:*Convolution*:*RadialTable*' >"$OUT/kernels.log" 2>&1
$T --gtest_filter="$FP32" >"$OUT/gpu_fp32.log" 2>&1
CGQ_GPU_MAX_CHUNK_EDGES=64 $T --gtest_filter="$FP32" >"$OUT/gpu_fp32_chunks.log" 2>&1
CGQ_GPU_SPECIES_CONV=0 $T --gtest_filter="$FP32" >"$OUT/gpu_fp32_off.log" 2>&1
compute-sanitizer --tool memcheck $K --gtest_filter='*Species*' >"$OUT/memcheck.log" 2>&1
compute-sanitizer --tool racecheck $K --gtest_filter='*Species*' >"$OUT/racecheck.log" 2>&1
wait $MODELS_PID
B=build-gpu/bench_eval W=.device/models/water_192.xyz MP=$M/mace_mp0_medium_arch.h5
{
  echo "== check factored"; $B $MP $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E "check|NONDET"
  echo "== check separate"; CGQ_GPU_SPECIES_CONV=0 $B $MP $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E "check|NONDET"
  for round in 1 2 3; do
    echo "== round $round factored"; $B $MP $W 3 3 3 cuda 10 --fp32 --pairs | grep ms/step
    echo "== round $round separate"; CGQ_GPU_SPECIES_CONV=0 $B $MP $W 3 3 3 cuda 10 --fp32 --pairs | grep ms/step
  done
  echo "== profile factored"; CGQ_GPU_PROFILE=1 $B $MP $W 3 3 3 cuda 3 --fp32 --pairs 2>&1 | grep profile | tail -1
  ncu --clock-control none -k regex:"k_species_conv" --metrics gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active \
    $B $MP $W 3 3 3 cuda 1 --fp32 --pairs 2>&1 | grep -E "^  [a-z]|duration|throughput|warps" | cut -c1-150
  echo "== 98,304 atoms"; $B $MP $W 8 8 8 cuda 2 --fp32 --pairs | grep -E "ms/step"
  for mdl in water-mace-small mace01-solvent; do
    echo "== $mdl factored"; $B potentials/$mdl.h5 $W 3 3 3 cuda 20 --fp32 --pairs --check | grep -E "check|ms/step"
    echo "== $mdl separate"; CGQ_GPU_SPECIES_CONV=0 $B potentials/$mdl.h5 $W 3 3 3 cuda 20 --fp32 --pairs | grep -E "ms/step"
  done
} >"$OUT/bench.txt" 2>&1
echo "==== summary"
for f in kernels gpu_fp32 gpu_fp32_chunks gpu_fp32_off; do
  echo "$f: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$OUT/$f.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \] [A-Z]' "$OUT/$f.log" | head -5
done
grep -E "species\)" "$OUT/kernels.log" | awk '{for (i = 1; i <= NF; i++) if ($i == "err") e = $(i + 1); w = $0;
  sub(/.*seed=[0-9]+ +/, "", w); sub(/ +err.*/, "", w); n[w]++; if (e + 0 > m[w]) m[w] = e + 0}
  END {for (k in m) printf "%s: %d checks, largest err %.1e\n", k, n[k], m[k]}'
grep -c "fp32: cgq_gpu_species_conv" "$OUT/kernels.log"
grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/memcheck.log" "$OUT/racecheck.log"
cat "$OUT/bench.txt"
