#!/usr/bin/env bash
# quickstart.sh: install what is missing, build cgequi with its LAMMPS driver, verify the shipped water potentials
# against nequip's and mace-torch's stored numbers, then run liquid-water MD (the NequIP potential) and print the
# timesteps per second: the 5,184-atom box on the GPU when CUDA and a GPU are present, else the
# 192-atom box on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
cuda=OFF
if command -v nvcc >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then cuda=ON; fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCGQ_LAMMPS=ON -DCGQ_CUDA=$cuda \
  -DMPI_CXX_COMPILER=/usr/bin/mpicxx.openmpi -DMPI_C_COMPILER=/usr/bin/mpicc.openmpi >/dev/null
cmake --build build -j"$(nproc)" --target cgequi_cli lmp_cgequi >/dev/null
build/cgequi check potentials/water-nequip-small.h5
build/cgequi check potentials/water-mace-small.h5
if [ "$cuda" = ON ]; then data=water_5184.data; steps=50; else data=water_192.data; steps=100; fi
cd examples/lammps
../../build/lmp_cgequi -in in.water_nvt -var data "$data" -var steps "$steps" -log none -echo none | \
  grep -E "backend|atoms$|^ +[0-9]+ +[0-9.]+ |Performance"
