#!/usr/bin/env bash
# device_radial_bwd.sh: on the GPU machine, after a change to the radial MLP kernels (radial_tc.cuh) or the fused
# forward (radial_conv.cuh): build, their kernel tests and the fp32 model tests, then the MACE-MP-0-medium-architecture
# step (5,184 water atoms) with the reverse's dE/da on the tensor cores (default) or SGEMM (CGQ_GPU_RADIAL_BWD_SGEMM=1),
# and the fused forward (CGQ_GPU_FUSED_CONV=1), alternated, with ncu times of the kernels involved. The model is made
# while the build runs (needs .whl unless $M/mace_mp0_medium_arch.h5 exists). Logs in $OUT; the summary last.
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source bench/device_build.sh
make_models
build_gpu
grep -A2 -E "k_radial_conv_fwd|k_radial_tc_bwd" "$OUT/build.log" | grep -E "registers|spill" | head -6
build-gpu/tests/test_gpu_kernels --gtest_filter='*Fused*:*RadialTable*' >"$OUT/kernels.log" 2>&1
OMP_NUM_THREADS=16 build-gpu/tests/test_gpu --gtest_filter='*Float32*:*PairsOnDeviceFp32*' >"$OUT/test_gpu_fp32.log" 2>&1
CGQ_GPU_FUSED_CONV=1 OMP_NUM_THREADS=16 build-gpu/tests/test_gpu --gtest_filter='*Float32*mace*' >"$OUT/test_gpu_fused.log" 2>&1
wait $MODELS_PID
B=build-gpu/bench_eval W=.device/models/water_192.xyz MP=$M/mace_mp0_medium_arch.h5
{
  echo "== check (default: reverse on the tensor cores)"
  $B $MP $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E "check|NONDET"
  for round in 1 2; do
    echo "== round $round default"; $B $MP $W 3 3 3 cuda 10 --fp32 --pairs | grep ms/step
    echo "== round $round CGQ_GPU_RADIAL_BWD_SGEMM=1"; CGQ_GPU_RADIAL_BWD_SGEMM=1 $B $MP $W 3 3 3 cuda 10 --fp32 --pairs | grep ms/step
    echo "== round $round CGQ_GPU_FUSED_CONV=1"; CGQ_GPU_FUSED_CONV=1 $B $MP $W 3 3 3 cuda 10 --fp32 --pairs | grep ms/step
  done
  echo "== profile default"; CGQ_GPU_PROFILE=1 $B $MP $W 3 3 3 cuda 3 --fp32 --pairs | tail -2
  echo "== profile fused"; CGQ_GPU_FUSED_CONV=1 CGQ_GPU_PROFILE=1 $B $MP $W 3 3 3 cuda 3 --fp32 --pairs | tail -2
  echo "== ncu"
  CGQ_GPU_FUSED_CONV=1 ncu --clock-control none -k regex:"k_radial_tc_bwd|k_radial_conv_fwd" -c 4 --metrics gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,dram__bytes.sum \
    $B $MP $W 3 3 3 cuda 1 --fp32 --pairs 2>&1 | grep -E "^  [a-z]|duration|warps_active|hmma|dram"
  for model in potentials/water-mace-small.h5 potentials/mace01-solvent.h5 potentials/water-nequip-small.h5; do
    echo "== $model"
    $B $model $W 3 3 3 cuda 20 --fp32 --pairs --check | grep -E "ms/step|check"
    CGQ_GPU_RADIAL_BWD_SGEMM=1 $B $model $W 3 3 3 cuda 20 --fp32 --pairs | grep -E "ms/step"
  done
  echo "== 98,304 atoms"
  $B $MP $W 8 8 8 cuda 2 --fp32 --pairs | grep -E "ms/step"
  CGQ_GPU_RADIAL_BWD_SGEMM=1 $B $MP $W 8 8 8 cuda 2 --fp32 --pairs | grep -E "ms/step"
} >"$OUT/bench.txt" 2>&1
echo "==== summary"
grep -E "dE/dr|M \(fused\)|FAILED|PASSED" "$OUT/kernels.log" | head -60
grep -E "FAILED|PASSED" "$OUT/test_gpu_fp32.log" "$OUT/test_gpu_fused.log" | head -12
cat "$OUT/bench.txt"
