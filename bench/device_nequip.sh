#!/usr/bin/env bash
# device_nequip.sh: on the GPU machine, after a change to the NequIP GPU path: build with CUDA and tests,
# `ctest -L gpu`, memcheck and racecheck on NequIP models, then the step of potentials/water-nequip-small.h5 at
# 192 and 5,184 atoms (fp64 and fp32, checked against the CPU; phase profile) and the MACE water model as a
# regression check; with LMP=1 also LAMMPS (built from .device/lammps) water boxes with the NequIP model on the GPU.
# Logs in $OUT; the summary is printed last.
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source bench/device_build.sh
build_gpu
if [ "${LMP:-0}" = 1 ]; then
  (tools/build-lammps-with-cgequi.sh .device/lammps build-gpu /tmp/lmpbuild -DBUILD_MPI=yes -DBUILD_OMP=yes \
    >"$OUT/lammps_build.log" 2>&1 || echo "LAMMPS build FAILED") &
fi
OMP_NUM_THREADS=16 timeout 300 ctest --test-dir build-gpu -L gpu -j4 --output-on-failure -V >"$OUT/ctest_gpu.log" 2>&1
B=build-gpu/bench_eval W=.device/models/water_192.xyz NQ=potentials/water-nequip-small.h5
timeout 120 compute-sanitizer --tool memcheck build-gpu/tests/test_gpu --gtest_filter='*water_nequip*:*nequip_l2_noparity*' \
  >"$OUT/memcheck_nequip.log" 2>&1
timeout 100 compute-sanitizer --tool racecheck $B $NQ $W 1 1 1 cuda 1 --fp32 --pairs >"$OUT/racecheck_nequip.log" 2>&1
{
  for n in "1 1 1" "3 3 3"; do
    $B $NQ $W $n cuda 10 --check --pairs
    $B $NQ $W $n cuda 10 --check --pairs --fp32
  done
  CGQ_GPU_V1=1 $B $NQ $W 1 1 1 cuda 3 --pairs
  CGQ_GPU_PROFILE=1 $B $NQ $W 3 3 3 cuda 3 --fp32 --pairs | tail -1
  OMP_NUM_THREADS=16 $B $NQ $W 3 3 3 cpu 3 --pairs
  $B $NQ $W 8 8 8 cuda 5 --fp32 --pairs
  $B potentials/water-mace-small.h5 $W 3 3 3 cuda 20 --check --fp32 --pairs
} >"$OUT/bench.txt" 2>&1
echo "==== summary"
grep -E "tests passed|tests failed|\*\*\*Failed|Failed  |Total Test time" "$OUT/ctest_gpu.log" | head -12
grep -E "nequip|water_nequip" "$OUT/ctest_gpu.log" | grep -E "dE" | sort -g -k6 | tail -3
grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/memcheck_nequip.log" "$OUT/racecheck_nequip.log"
grep -vE "^ *$" "$OUT/bench.txt" | sed 's/^.*atoms/atoms/' | cut -c1-230
# LAMMPS (built in the background above when LMP=1): the water boxes with the NequIP model on the GPU
if [ "${LMP:-0}" = 1 ]; then
  wait
  tail -1 "$OUT/lammps_build.log"
  cd examples/lammps
  for prec in fp32 fp64; do
    sed 's/^pair_style cgequi device ${dev}$/pair_style cgequi device ${dev} precision '$prec'/' in.water_nvt > /tmp/in.$prec
    for n in 192 5184; do
      steps=$([ $n = 192 ] && echo 1000 || echo 400)
      OMP_NUM_THREADS=16 /tmp/lmpbuild/lmp -in /tmp/in.$prec -var model ../../$NQ -var steps $steps -var data water_$n.data \
        -log "$OUT/log.nequip_${n}_$prec" -screen none || echo "FAILED nequip $n $prec"
      echo "nequip $n GPU $prec: $(grep -E '^Performance' "$OUT/log.nequip_${n}_$prec")"
    done
  done
  OMP_NUM_THREADS=16 /tmp/lmpbuild/lmp -in /tmp/in.fp32 -var model ../../potentials/water-mace-small.h5 -var steps 400 \
    -var data water_5184.data -log "$OUT/log.mace_5184_fp32" \
    -screen none || echo "FAILED mace 5184"
  echo "mace 5184 GPU fp32: $(grep -E '^Performance' "$OUT/log.mace_5184_fp32")"
  grep -E "backend|cuda" "$OUT/log.nequip_5184_fp32" | head -2
fi
