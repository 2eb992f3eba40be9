#!/usr/bin/env bash
# device_conv_std.sh: on the GPU machine, session 19's measurement of the std convolution kernels (docs/gpu.md item 3c)
# against the general ones (CGQ_GPU_CONV_STD=0), alternated in one call: the MACE-MP-0-medium-architecture step (5,184
# water atoms, fp32, --pairs; check against the CPU first), its profile, Nsight Compute on layer 1's conv kernels
# (time, instructions, issue rate, registers, warps active), and the shipped MACE models. Needs the mace wheels in .whl
# (bench/device_build.sh make_models). Logs in $OUT; the summary is printed.
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source bench/device_build.sh
make_models
build_gpu --no-tests bench_eval
wait $MODELS_PID
B=build-gpu/bench_eval W=.device/models/water_192.xyz MP=$M/mace_mp0_medium_arch.h5
ms() { grep -oE '[0-9.]+ ms/step median of [0-9]+ \(min [0-9.]+\)|GPU memory [0-9.]+ GiB' | tr '\n' ' '; }
{
  for v in 1 0; do echo "std=$v: $(CGQ_GPU_CONV_STD=$v $B $MP $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E 'check|NONDET')"; done
  $B $MP $W 3 3 3 cuda 10 --fp32 --pairs >/dev/null
  for round in 1 2 3; do
    echo "== MP-0 round $round std: $($B $MP $W 3 3 3 cuda 10 --fp32 --pairs | ms)"
    echo "== MP-0 round $round general: $(CGQ_GPU_CONV_STD=0 $B $MP $W 3 3 3 cuda 10 --fp32 --pairs | ms)"
  done
  CGQ_GPU_PROFILE=1 $B $MP $W 3 3 3 cuda 3 --fp32 --pairs 2>&1 | grep profile | tail -1
  for v in 1 0; do
    CGQ_GPU_CONV_STD=$v timeout 100 ncu --clock-control none --kernel-name regex:k_conv_ --launch-skip 2 --launch-count 2 \
      --metrics gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active \
      $B $MP $W 3 3 3 cuda 1 --fp32 --pairs >"$OUT/ncu_std$v.txt" 2>&1
    echo "== ncu std=$v"
    grep -E "^\s+void k_conv|gpu__time|inst_executed|issue_active|registers|warps_active" "$OUT/ncu_std$v.txt" |
      sed -E 's/\s+/ /g' | cut -c1-100
  done
  for mdl in water-mace-small mace01-solvent; do
    for round in 1 2; do
      echo "== $mdl round $round std: $($B potentials/$mdl.h5 $W 3 3 3 cuda 20 --fp32 --pairs | ms)"
      echo "== $mdl round $round general: $(CGQ_GPU_CONV_STD=0 $B potentials/$mdl.h5 $W 3 3 3 cuda 20 --fp32 --pairs | ms)"
    done
  done
} 2>&1 | tee "$OUT/conv_std.txt"
