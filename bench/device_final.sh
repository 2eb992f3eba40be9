#!/usr/bin/env bash
# device_final.sh: on the GPU machine, the checks of a session's final GPU code that fit one call besides `ctest -L gpu`
# (bench/device_ctest.sh runs that): build; the kernel tests of the kernels the session changed (FILTER, default the
# factored first convolution's), and compute-sanitizer memcheck and racecheck on them; the MACE-MP-0-medium-architecture
# step (5,184 water atoms, fp32) with the session's change on (default) and off (AB_OFF, default
# CGQ_GPU_SPECIES_CONV=0), alternated; fp64; 98,304 atoms; and LAMMPS water MD (5,184 atoms, fp32, 500 steps) with the
# shipped MACE and NequIP water models, LAMMPS built from .device/lammps (Debian's source) while the tests run. Logs in
# $OUT; the summary last.
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source bench/device_build.sh
make_models
build_gpu
( tools/build-lammps-with-cgequi.sh .device/lammps build-gpu /tmp/lmpbuild -DBUILD_MPI=yes -DBUILD_OMP=yes \
    >"$OUT/lammps_build.log" 2>&1 || echo "LAMMPS BUILD FAILED" >>"$OUT/lammps_build.log" ) &
lmp=$!
K=build-gpu/tests/test_gpu_kernels F=${FILTER:-'*Species*'} AB_OFF=${AB_OFF:-CGQ_GPU_SPECIES_CONV=0}
$K --gtest_filter="$F" >"$OUT/kernels.log" 2>&1
compute-sanitizer --tool memcheck $K --gtest_filter="$F" >"$OUT/memcheck.log" 2>&1
compute-sanitizer --tool racecheck $K --gtest_filter="$F" >"$OUT/racecheck.log" 2>&1
wait $MODELS_PID
B=build-gpu/bench_eval W=.device/models/water_192.xyz MP=$M/mace_mp0_medium_arch.h5
{
  $B $MP $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E "check|NONDET"
  for round in 1 2 3; do
    echo "== round $round default"; $B $MP $W 3 3 3 cuda 10 --fp32 --pairs | grep ms/step
    echo "== round $round $AB_OFF"; env $AB_OFF $B $MP $W 3 3 3 cuda 10 --fp32 --pairs | grep ms/step
  done
  echo "== profile default"; CGQ_GPU_PROFILE=1 $B $MP $W 3 3 3 cuda 3 --fp32 --pairs 2>&1 | grep profile | tail -1
  $B $MP $W 3 3 3 cuda 5 --pairs | grep ms/step
  $B $MP $W 8 8 8 cuda 2 --fp32 --pairs | grep -E "ms/step"
} >"$OUT/bench.txt" 2>&1
wait $lmp
tail -1 "$OUT/lammps_build.log"
lammps_water_boxes > "$OUT/lammps.txt" 2>&1
echo "==== summary"
grep -E "FAILED|PASSED" "$OUT/kernels.log" | tail -4
grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/memcheck.log" "$OUT/racecheck.log"
cat "$OUT/bench.txt" "$OUT/lammps.txt"
