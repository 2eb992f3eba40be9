#!/usr/bin/env bash
# device_final.sh: on the GPU machine, the checks of a session's final GPU code that fit one call besides `ctest -L gpu`
# (bench/device_check.sh runs that): build; the radial-MLP and fused-forward kernel tests, and compute-sanitizer
# memcheck and racecheck on them; the MACE-MP-0-medium-architecture step (5,184 water atoms, fp32) with the MLP reverse
# on the tensor cores (default) and as SGEMM (CGQ_GPU_RADIAL_BWD_SGEMM=1), alternated; and LAMMPS water MD (5,184
# atoms, fp32, 500 steps) with the shipped MACE and NequIP water models, LAMMPS built from .device/lammps (Debian's
# source) while the tests run. Logs in $OUT; the summary last.
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source bench/device_build.sh
make_models
build_gpu
grep -A2 -E "k_radial_tc_bwd|k_radial_conv_fwd" "$OUT/build.log" | grep -E "registers|spill" | head -4
( tools/build-lammps-with-cgequi.sh .device/lammps build-gpu /tmp/lmpbuild -DBUILD_MPI=yes -DBUILD_OMP=yes \
    >"$OUT/lammps_build.log" 2>&1 || echo "LAMMPS BUILD FAILED" >>"$OUT/lammps_build.log" ) &
lmp=$!
K=build-gpu/tests/test_gpu_kernels F='*Fused*:*RadialTable*'
$K --gtest_filter="$F" >"$OUT/kernels.log" 2>&1
compute-sanitizer --tool memcheck $K --gtest_filter="$F" >"$OUT/memcheck.log" 2>&1
compute-sanitizer --tool racecheck $K --gtest_filter='*Fused*mace01*:*Fused*water_mace*:*RadialTable*mace01*:*RadialTable*nequip_l2_parity_2layer_wide*' >"$OUT/racecheck.log" 2>&1
wait $MODELS_PID
B=build-gpu/bench_eval W=.device/models/water_192.xyz MP=$M/mace_mp0_medium_arch.h5
{
  $B $MP $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E "check|NONDET"
  for round in 1 2 3; do
    echo "== round $round default"; $B $MP $W 3 3 3 cuda 10 --fp32 --pairs | grep ms/step
    echo "== round $round CGQ_GPU_RADIAL_BWD_SGEMM=1"; CGQ_GPU_RADIAL_BWD_SGEMM=1 $B $MP $W 3 3 3 cuda 10 --fp32 --pairs | grep ms/step
  done
  echo "== profile default"; CGQ_GPU_PROFILE=1 $B $MP $W 3 3 3 cuda 3 --fp32 --pairs | tail -2 | head -1
  ncu --clock-control none -k regex:"k_radial_tc_bwd|gemm|k_radial_table_bwd" --metrics gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,dram__bytes.sum \
    $B $MP $W 3 3 3 cuda 1 --fp32 --pairs 2>&1 | grep -E "^  [a-z]|duration|hmma|dram" | cut -c1-150
  echo "== ncu, SGEMM"
  CGQ_GPU_RADIAL_BWD_SGEMM=1 ncu --clock-control none -k regex:"k_radial_tc_bwd|gemm|k_radial_table_bwd" --metrics gpu__time_duration.sum \
    $B $MP $W 3 3 3 cuda 1 --fp32 --pairs 2>&1 | grep -E "^  [a-z]|duration" | cut -c1-150
  $B $MP $W 3 3 3 cuda 5 | grep ms/step
  $B $MP $W 8 8 8 cuda 2 --fp32 --pairs | grep -E "ms/step"
} >"$OUT/bench.txt" 2>&1
wait $lmp
tail -1 "$OUT/lammps_build.log"
cd examples/lammps
for model in water-mace-small water-nequip-small; do
  sed "s#^variable model index .*#variable model index $(realpath ../../potentials/$model.h5)#" in.water_nvt > /tmp/in.$model
  CGQ_PAIR_TIMING=1 OMP_NUM_THREADS=16 timeout 120 /tmp/lmpbuild/lmp -in /tmp/in.$model -var steps 500 \
    -var data water_5184.data -log "$OUT/log.$model" -screen none || echo "FAILED $model"
  echo "$model: $(grep -E '^Performance' "$OUT/log.$model")"
done > "$OUT/lammps.txt" 2>&1
cd ../..
echo "==== summary"
grep -E "FAILED|PASSED|dE/dr" "$OUT/kernels.log" | tail -12
grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/memcheck.log" "$OUT/racecheck.log"
cat "$OUT/bench.txt" "$OUT/lammps.txt"
