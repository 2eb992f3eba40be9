#!/usr/bin/env bash
# device_lammps_ab.sh: on the GPU machine, LAMMPS water boxes (5,184 atoms, fp32, 500 steps, MACE_MODEL; default the
# shipped MACE water model) through pair_style cgequi for this tree and for the base tree in .device/base
# (`git archive BASE | tar -x -C .device/base`), each built with its own pair style, ROUNDS runs each alternated (default
# 2). Prints each run's timesteps/s and the pair style's per-rebuild timing: for changes to the host side of a step.
set -u
OUT=${OUT:-device-out}
source bench/device_build.sh
build_gpu --no-tests cgequi &
build_base cgequi &
cp -r .device/lammps /tmp/lammps_base
wait
( tools/build-lammps-with-cgequi.sh .device/lammps build-gpu /tmp/lmpbuild -DBUILD_MPI=yes -DBUILD_OMP=yes \
    >"$OUT/lammps_build.log" 2>&1 || echo "LAMMPS build failed" ) &
.device/base/tools/build-lammps-with-cgequi.sh /tmp/lammps_base .device/base/build /tmp/lmpbase -DBUILD_MPI=yes \
  -DBUILD_OMP=yes >"$OUT/lammps_build_base.log" 2>&1 || echo "base LAMMPS build failed"
wait
model=$(realpath "${MACE_MODEL:-potentials/water-mace-small.h5}")
cd examples/lammps
sed "s#^variable model index .*#variable model index $model#" in.water_nvt >/tmp/in.ab
for round in $(seq "${ROUNDS:-2}"); do
  for which in base new; do
    lmp=/tmp/lmpbuild/lmp; [ $which = base ] && lmp=/tmp/lmpbase/lmp
    CGQ_PAIR_TIMING=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-16} timeout 120 $lmp -in /tmp/in.ab -var steps 500 \
      -var data water_5184.data -log "$OUT/log.$which.$round" -screen none 2>"$OUT/timing.$which.$round" || echo "FAILED"
    echo "$which round $round: $(grep -oE '[0-9.]+ timesteps/s' "$OUT/log.$which.$round"); $(grep 'later ones' "$OUT/timing.$which.$round" | sed 's/.*(neighbor list, node map, evaluator.s set pairs)://')"
  done
done
