#!/usr/bin/env bash
# quickstart.sh: install what is missing, build cgequi, and evaluate the shipped potential on the
# shipped structure (energy, forces, virial, stress, per-atom energies as JSON).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target cgequi_cli >/dev/null
build/cgequi info potentials/mace01-solvent.h5
build/cgequi check potentials/mace01-solvent.h5
build/cgequi eval potentials/mace01-solvent.h5 examples/structures/methanol_water.xyz
