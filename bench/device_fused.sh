#!/usr/bin/env bash
# device_fused.sh: on the GPU machine, the loop of the fused radial + convolution forward (radial_conv.cuh): build,
# its kernel test and the model tests that force it (ctest -R fused), then the MACE-MP-0-medium-architecture step
# (5,184 water atoms) fused and separate (CGQ_GPU_FUSED_CONV=0) alternated, with the check against the CPU and the
# phase profile of each, and the water and mace01 models both ways. The model is made while the build runs (needs
# .whl unless $M/mace_mp0_medium_arch.h5 exists). Logs go to $OUT; the summary is printed last.
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source bench/device_build.sh
make_models
build_gpu
grep -A2 "k_radial_conv_fwd" "$OUT/build.log" | grep -E "registers|spill" | head -2
build-gpu/tests/test_gpu_kernels --gtest_filter='*Fused*' >"$OUT/fused_kernel.log" 2>&1
OMP_NUM_THREADS=16 ctest --test-dir build-gpu -L gpu -R fused -j3 --output-on-failure >"$OUT/ctest_fused.log" 2>&1
wait $MODELS_PID
B=build-gpu/bench_eval W=.device/models/water_192.xyz MP=$M/mace_mp0_medium_arch.h5
{
  echo "== check, fused"
  CGQ_GPU_FUSED_CONV=1 $B $MP $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E "check|NONDET"
  CGQ_GPU_FUSED_CONV=1 $B $MP $W 1 1 1 cuda 3 --fp32 --check | grep -E "check|NONDET"
  for round in 1 2; do
    for f in 1 0; do echo "== round $round fused=$f"; CGQ_GPU_FUSED_CONV=$f $B $MP $W 3 3 3 cuda 10 --fp32 --pairs | grep ms/step; done
    echo "== round $round fused=1, 2 blocks per SM"
    CGQ_GPU_RCF_MINB=2 CGQ_GPU_FUSED_CONV=1 $B $MP $W 3 3 3 cuda 10 --fp32 --pairs | grep ms/step
  done
  for f in 1 0; do
    echo "== profile fused=$f"
    CGQ_GPU_FUSED_CONV=$f CGQ_GPU_PROFILE=1 $B $MP $W 3 3 3 cuda 3 --fp32 --pairs | tail -2
  done
  echo "== ncu, the fused kernel (1 and 2 blocks per SM) and the separate pair"
  for minb in 1 2; do
    CGQ_GPU_RCF_MINB=$minb CGQ_GPU_FUSED_CONV=1 ncu --clock-control none -k regex:k_radial_conv -c 2 --metrics \
      gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes.sum,launch__registers_per_thread \
      $B $MP $W 3 3 3 cuda 1 --fp32 --pairs 2>&1 | grep -E "k_radial|duration|warps_active|hmma|throughput|dram__bytes|registers"
  done
  CGQ_GPU_FUSED_CONV=0 ncu --clock-control none -k regex:"k_radial_tc_fwd|k_conv_fwd" -c 4 --metrics gpu__time_duration.sum \
    $B $MP $W 3 3 3 cuda 1 --fp32 --pairs 2>&1 | grep -E "k_radial|k_conv|duration"
  for model in potentials/water-mace-small.h5 potentials/mace01-solvent.h5; do
    for f in 1 0; do
      echo "== $model fused=$f"
      CGQ_GPU_FUSED_CONV=$f $B $model $W 3 3 3 cuda 20 --fp32 --pairs --check | grep -E "ms/step|check"
      CGQ_GPU_FUSED_CONV=$f CGQ_GPU_PROFILE=1 $B $model $W 3 3 3 cuda 3 --fp32 --pairs | tail -1
    done
  done
  echo "== 98,304 atoms (w formed again in the reverse)"
  for f in 1 0; do CGQ_GPU_FUSED_CONV=$f timeout 60 $B $MP $W 8 8 8 cuda 2 --fp32 --pairs | grep -E "ms/step|GiB"; done
} >"$OUT/bench.txt" 2>&1
echo "==== summary"
grep -E "M \(fused\)|differs|FAILED|PASSED" "$OUT/fused_kernel.log" | head -40
grep -E "tests passed|tests failed|Failed|FAILED" "$OUT/ctest_fused.log" | head -8
cat "$OUT/bench.txt"
