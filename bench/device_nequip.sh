#!/usr/bin/env bash
# device_nequip.sh: on the GPU machine: the NequIP path on the GPU (float64): build with tests, `ctest -L gpu`,
# the step of potentials/water-nequip-small.h5 at 192 and 5,184 atoms against 16 CPU threads, then LAMMPS
# (built from .device/lammps) water boxes with the NequIP model on the GPU. Logs in $OUT; summary printed.
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source bench/device_build.sh
build_gpu
(tools/build-lammps-with-cgequi.sh .device/lammps build-gpu /tmp/lmpbuild -DBUILD_MPI=yes -DBUILD_OMP=yes \
  >"$OUT/lammps_build.log" 2>&1 || echo "LAMMPS build FAILED") &
OMP_NUM_THREADS=16 ctest --test-dir build-gpu -L gpu --output-on-failure -V >"$OUT/ctest_gpu.log" 2>&1
grep -E "tests passed|tests failed|\*\*\*Failed|Failed  " "$OUT/ctest_gpu.log" | head -8
grep -E "^ +nequip|water_nequip" "$OUT/ctest_gpu.log" | grep -E "dE/E" | sort -k5 | tail -3
compute-sanitizer --tool memcheck build-gpu/tests/test_gpu --gtest_filter='*MatchesCpu*water_nequip*' >"$OUT/memcheck_nequip.log" 2>&1
grep -E "ERROR SUMMARY" "$OUT/memcheck_nequip.log"
B=build-gpu/bench_eval W=.device/models/water_192.xyz NQ=potentials/water-nequip-small.h5
$B $NQ $W 1 1 1 cuda 10 --check --pairs | grep -E "check|ms/step" | sed 's/^.*atoms/atoms/'
$B $NQ $W 3 3 3 cuda 5 --check --pairs | grep -E "check|ms/step" | sed 's/^.*atoms/atoms/'
OMP_NUM_THREADS=16 $B $NQ $W 3 3 3 cpu 3 --pairs | grep -E "ms/step" | sed 's/^.*atoms/atoms/'
wait
cd examples/lammps
for n in 192 5184; do
  steps=$([ $n = 192 ] && echo 400 || echo 50)
  OMP_NUM_THREADS=16 /tmp/lmpbuild/lmp -in in.water_nvt -var model ../../$NQ -var steps $steps -var data water_$n.data \
    -log "$OUT/log.nequip_$n" -screen none || echo "FAILED nequip $n"
  echo "nequip $n GPU: $(grep -E '^Performance' "$OUT/log.nequip_$n")"
  grep -E "backend" "$OUT/log.nequip_$n" | head -1
done
