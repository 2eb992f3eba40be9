#!/usr/bin/env bash
# device_lammps_ranks.sh: on a GPU machine with 2 GPUs, pair_style cgequi across MPI ranks without the test suite:
# cgequi (library and CLI) and LAMMPS (.device/lammps, carried) built, then the pair style on the GPU checked against
# the CPU on 1, 2 and 4 ranks (lammps_gpu_checks), the shipped water models on 1 and 2 ranks (lammps_ranks) and
# MACE-MP-0's architecture on 5,184 and 93,312 atoms (lammps_scale; carry .whl). Summary in $OUT/lammps.txt.
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source bench/device_build.sh
lammps_setup "$OUT/lammps.txt" || exit 1
{
  lammps_gpu_checks
  lammps_ranks
  lammps_scale
} >>"$OUT/lammps.txt" 2>&1
cat "$OUT/lammps.txt"
