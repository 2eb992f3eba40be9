#!/usr/bin/env bash
# device_scale.sh: on the GPU machine: sanitizers on the positions-only path (graph built on the device), the
# step of the shipped water model from 5,184 to ~200,000 atoms (cgq_evaluate_pairs, fp32 and fp64), and a
# 20 ps NVE of the 192-atom water box on the GPU through LAMMPS (built from .device/lammps) with its drift.
# usage: bash bench/device_scale.sh   (logs in $OUT; the summary is printed)
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source bench/device_build.sh
build_gpu --no-tests
B=build-gpu/bench_eval W=.device/models/water_192.xyz WM=potentials/water-mace-small.h5
for tool in racecheck memcheck; do
  compute-sanitizer --tool $tool $B $WM $W 1 1 1 cuda 1 --fp32 --pairs >"$OUT/$tool.log" 2>&1
  grep -hE "SUMMARY" "$OUT/$tool.log"
done
{
  for n in "3 3 3" "6 6 6" "8 8 8" "10 10 10"; do $B $WM $W $n cuda 10 --fp32 --pairs | grep ms/step; done
  for n in "3 3 3" "8 8 8"; do $B $WM $W $n cuda 5 --pairs | grep ms/step; done
} 2>&1 | sed 's/^.*atoms/atoms/' | tee "$OUT/scale.txt"
tools/build-lammps-with-cgequi.sh .device/lammps build-gpu /tmp/lmpbuild -DBUILD_MPI=yes -DBUILD_OMP=yes \
  >"$OUT/lammps_build.log" 2>&1 || { grep -E "error" -A3 "$OUT/lammps_build.log" | head -30; exit 1; }
cd examples/lammps
OMP_NUM_THREADS=16 /tmp/lmpbuild/lmp -in in.water_nve -var equil 2000 -var steps 40000 -var every 100 \
  -log "$OUT/log.water_nve_gpu" -screen none || echo "NVE run FAILED"
grep -E "^Performance|Loop time" "$OUT/log.water_nve_gpu" | tail -2
python3 ../../tools/water_md_summary.py "$OUT/log.water_nve_gpu" | tail -8
