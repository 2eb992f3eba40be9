#!/usr/bin/env bash
# device_wtab.sh: on the GPU machine, the convolutions' weights from their weight tables (conv.cuh conv_weights; the
# radial MLP kernels skipped): build; the weight-table, convolution, species and radial kernel tests; test_gpu's fp32
# model tests with the tables (default), with 64-edge chunks, and without (CGQ_GPU_WEIGHT_TABLE=0); the NequIP fp32
# test at the seeds that missed in session 16 (with the fp32 floor printed); compute-sanitizer on the table kernel
# test; the MACE-MP-0-medium-architecture step (5,184 water atoms, fp32) checked against the CPU and alternated with
# the tables off; a profile; 98,304 atoms; the shipped MACE models. Logs in $OUT; the summary last.
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source bench/device_build.sh
make_models
build_gpu
grep -A2 -E "_Z10k_conv_(fwd|bwd)If" "$OUT/build.log" | grep -E "registers|spill" | head -8
K=build-gpu/tests/test_gpu_kernels T=build-gpu/tests/test_gpu FP32='*Float32*:*PairsOnDeviceFp32*'
$K --gtest_filter='*WeightTable*:*Convolution*:*Species*:*RadialTable*' >"$OUT/kernels.log" 2>&1
$T --gtest_filter="$FP32" >"$OUT/gpu_fp32.log" 2>&1
CGQ_GPU_MAX_CHUNK_EDGES=64 $T --gtest_filter="$FP32" >"$OUT/gpu_fp32_chunks.log" 2>&1
CGQ_GPU_WEIGHT_TABLE=0 $T --gtest_filter="$FP32" >"$OUT/gpu_fp32_off.log" 2>&1
for s in 2247412084 3724332877; do
  CGQ_TEST_SEED=$s $T --gtest_filter='*PairsOnDeviceFp32*nequip_l2_parity_2layer_wide*' 2>&1
done >"$OUT/nequip_seeds.log"
compute-sanitizer --tool memcheck $K --gtest_filter='*WeightTable*' >"$OUT/memcheck.log" 2>&1
compute-sanitizer --tool racecheck $K --gtest_filter='*WeightTable*' >"$OUT/racecheck.log" 2>&1
wait $MODELS_PID
B=build-gpu/bench_eval W=.device/models/water_192.xyz MP=$M/mace_mp0_medium_arch.h5
{
  build-gpu/cgequi info $MP | grep -E "layer|intervals"
  echo "== check tables"; $B $MP $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E "check|NONDET|GiB"
  echo "== check no tables"; CGQ_GPU_WEIGHT_TABLE=0 $B $MP $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E "check|NONDET|GiB"
  for round in 1 2 3; do
    echo "== round $round tables"; $B $MP $W 3 3 3 cuda 10 --fp32 --pairs | grep ms/step
    echo "== round $round no tables"; CGQ_GPU_WEIGHT_TABLE=0 $B $MP $W 3 3 3 cuda 10 --fp32 --pairs | grep ms/step
  done
  echo "== profile tables"; CGQ_GPU_PROFILE=1 $B $MP $W 3 3 3 cuda 3 --fp32 --pairs 2>&1 | grep profile | tail -1
  ncu --clock-control none -k regex:"k_conv_(fwd|bwd)" --metrics gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    $B $MP $W 3 3 3 cuda 1 --fp32 --pairs 2>&1 | grep -E "^  [a-z]|duration|throughput|hit_rate" | cut -c1-150
  echo "== 98,304 atoms tables"; $B $MP $W 8 8 8 cuda 2 --fp32 --pairs | grep -E "ms/step|GiB"
  echo "== 98,304 atoms no tables"; CGQ_GPU_WEIGHT_TABLE=0 $B $MP $W 8 8 8 cuda 2 --fp32 --pairs | grep -E "ms/step|GiB"
  for mdl in water-mace-small mace01-solvent; do
    echo "== $mdl tables"; $B potentials/$mdl.h5 $W 3 3 3 cuda 20 --fp32 --pairs --check | grep -E "check|ms/step"
    echo "== $mdl no tables"; CGQ_GPU_WEIGHT_TABLE=0 $B potentials/$mdl.h5 $W 3 3 3 cuda 20 --fp32 --pairs | grep -E "ms/step"
  done
} >"$OUT/bench.txt" 2>&1
echo "==== summary"
for f in kernels gpu_fp32 gpu_fp32_chunks gpu_fp32_off nequip_seeds; do
  echo "$f: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$OUT/$f.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \] [A-Z]' "$OUT/$f.log" | head -5
done
grep -E "table\)" "$OUT/kernels.log" | awk '{for (i = 1; i <= NF; i++) if ($i == "err") e = $(i + 1); w = $0;
  sub(/.*seed=[0-9]+ +/, "", w); sub(/ +err.*/, "", w); n[w]++; if (e + 0 > m[w]) m[w] = e + 0}
  END {for (k in m) printf "%s: %d checks, largest err %.1e\n", k, n[k], m[k]}'
grep -E "tiny_cell" "$OUT/nequip_seeds.log" | head -8
grep -hE "floor/scale=[0-9.e+-]+" -o "$OUT/gpu_fp32.log" | sort -t= -k2 -g | tail -3
grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/memcheck.log" "$OUT/racecheck.log"
cat "$OUT/bench.txt"
