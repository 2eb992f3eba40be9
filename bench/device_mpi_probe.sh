#!/usr/bin/env bash
# device_mpi_probe.sh: on a GPU machine with 2 GPUs, where two ranks' per-layer exchanges spend their time: the MPI
# transport alone (bench/mpi_exchange_bw.c, two ranks swapping 1-64 MB) under the default transports and under each
# shared-memory BTL this Open MPI has, then MACE-MP-0's architecture in LAMMPS at 93,312 atoms and the water MACE box
# (5,184) on 2 ranks with the pair style's timing (exchanges, and their MPI waits). MPI_ARGS: extra mpirun arguments
# for the LAMMPS runs. Summary in $OUT/probe.txt.
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source bench/device_build.sh
lammps_setup "$OUT/probe.txt" || exit 1
mpicc -O2 bench/mpi_exchange_bw.c -o /tmp/mpi_bw
run2() { mpirun --allow-run-as-root --bind-to none -np 2 "$@"; }
{
  echo "/dev/shm: $(df -h /dev/shm | tail -1)"
  echo "Open MPI $(ompi_info --version 2>/dev/null | head -1); BTLs: $(ompi_info 2>/dev/null | grep -oE 'MCA btl: [a-z]+' | cut -d' ' -f3 | tr '\n' ' ')"
  echo "MPI exchange, default transports:"; run2 /tmp/mpi_bw 2>&1 | tail -4
  for b in vader sm tcp; do
    ompi_info 2>/dev/null | grep -q "MCA btl: $b" || continue
    echo "MPI exchange, --mca btl self,$b:"; run2 --mca btl self,$b /tmp/mpi_bw 2>&1 | tail -4
  done
  wait $MODELS_PID 2>/dev/null
  for n in "3 2 3" "1 1 1"; do
    set -- $n
    CGQ_PAIR_TIMING=1 OMP_NUM_THREADS=8 timeout 200 mpirun --allow-run-as-root --bind-to none -np 2 ${MPI_ARGS:-} \
      /tmp/lmpbuild/lmp -in bench/in.water_scale -var model $M/mace_mp0_medium_arch.h5 -var nx $1 -var ny $2 -var nz $3 \
      -log /tmp/log.scale -screen none 2>/tmp/timing.scale || echo "FAILED MP-0 $n"
    echo "LAMMPS MP-0 $(grep -oE '[0-9]+ atoms' /tmp/log.scale | tail -1) fp32 2 ranks: $(grep -oE '[0-9.]+ timesteps/s' /tmp/log.scale)"
    grep -hE "ms per step" /tmp/timing.scale | sed 's/^pair cgequi timing, /  /'
  done
  LMP_RANKS=2 lammps_water_run water-mace-small /tmp/log.lmp /tmp/timing.lmp
  echo "LAMMPS water MACE 5,184 fp32 2 ranks: $(grep -oE '[0-9.]+ timesteps/s' /tmp/log.lmp)"
  grep -hE "ms per step" /tmp/timing.lmp | sed 's/^pair cgequi timing, /  /'
} >>"$OUT/probe.txt" 2>&1
cat "$OUT/probe.txt"
