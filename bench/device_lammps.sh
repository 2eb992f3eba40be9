#!/usr/bin/env bash
# device_lammps.sh: on the GPU machine: build cgequi with CUDA, build LAMMPS from source with cgequi
# built in (tools/build-lammps-with-cgequi.sh), run the water boxes on the GPU (fp32 and fp64) and the CPU.
# usage: bash bench/device_lammps.sh [MODEL.h5]   (default potentials/water-mace-small.h5)
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
MODEL=$(realpath "${1:-potentials/water-mace-small.h5}")
source bench/device_build.sh
build_gpu
[ -d .device/googletest ] && { ctest --test-dir build-gpu -L gpu -V >"$OUT/ctest_gpu.log" 2>&1; grep -E "tests passed|tests failed" "$OUT/ctest_gpu.log"; }
time tools/build-lammps-with-cgequi.sh .device/lammps build-gpu /tmp/lmpbuild -DBUILD_MPI=yes -DBUILD_OMP=yes \
  >"$OUT/lammps_build.log" 2>&1 || { grep -E "error" -A3 "$OUT/lammps_build.log" | head -30; tail -5 "$OUT/lammps_build.log"; exit 1; }
tail -1 "$OUT/lammps_build.log"
LMP=/tmp/lmpbuild/lmp
cd examples/lammps
sed "s#^variable model index .*#variable model index $MODEL#" in.water_nvt > /tmp/in.fp32
sed 's/^pair_style cgequi device ${dev}$/pair_style cgequi device ${dev} precision fp64/' /tmp/in.fp32 > /tmp/in.fp64
run() { # name, args...
  local name=$1; shift
  OMP_NUM_THREADS=16 $LMP -log "$OUT/log.$name" -screen none "$@" || echo "FAILED $name"
  echo "$name: $(grep -E '^Performance' "$OUT/log.$name")  $(grep -E 'Loop time' "$OUT/log.$name")"
}
run water192_gpu_fp32 -in /tmp/in.fp32 -var steps 400 -var data water_192.data
run water192_gpu_fp64 -in /tmp/in.fp64 -var steps 200 -var data water_192.data
run water192_cpu -in /tmp/in.fp64 -var steps 40 -var data water_192.data -var dev cpu
run water5184_gpu_fp32 -in /tmp/in.fp32 -var steps 200 -var data water_5184.data
run water5184_gpu_fp64 -in /tmp/in.fp64 -var steps 100 -var data water_5184.data
run water5184_cpu -in /tmp/in.fp64 -var steps 5 -var data water_5184.data -var dev cpu
grep -A3 "pair_style cgequi: model" "$OUT/log.water192_gpu_fp32" | head -8
# one GPU per rank: two ranks on a one-GPU node must be refused unless gpu_id shares it deliberately
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun --oversubscribe -np 2 $LMP -in /tmp/in.fp32 -var steps 5 -var data water_192.data -log none -screen none \
  > "$OUT/two_ranks.txt" 2>&1; echo "2 ranks, 1 GPU, device auto: exit $? / $(grep -ho 'ERROR.*' "$OUT/two_ranks.txt" | head -1)"
sed 's/^pair_style cgequi device ${dev}$/pair_style cgequi device cuda gpu_id 0/' /tmp/in.fp32 > /tmp/in.share
mpirun --oversubscribe -np 2 $LMP -in /tmp/in.share -var steps 10 -var data water_192.data -log "$OUT/log.share" -screen none \
  > /dev/null 2>&1; echo "2 ranks sharing GPU 0 (gpu_id 0): exit $? / $(grep -E '^Performance' "$OUT/log.share")"
grep -A3 "^ *Step" "$OUT/log.share" | head -4
