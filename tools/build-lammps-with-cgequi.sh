#!/usr/bin/env bash
# build-lammps-with-cgequi.sh: build LAMMPS from its source tree with pair_style cgequi built in
# (the route the Kokkos variant needs). cgequi must be built first (its build folder holds
# libcgequi.a and cgequi-link.txt, the libraries to link).
# usage: tools/build-lammps-with-cgequi.sh LAMMPS_SOURCE_DIR CGEQUI_BUILD_DIR LAMMPS_BUILD_DIR [cmake options...]
set -euo pipefail
lmp=$(cd "$1" && pwd); cgq_build=$(cd "$2" && pwd); out=$3; shift 3
here=$(cd "$(dirname "$0")/.." && pwd)
cp "$here/src/pair_style/pair_cgequi.h" "$here/src/pair_style/pair_cgequi.cpp" "$lmp/src/"
flags="-I$here/include -I$here/src"
# LAMMPS before mid-2022 names the pair communication calls forward_comm_pair/reverse_comm_pair
if grep -q "forward_comm_pair" "$lmp/src/comm.h"; then flags="$flags -DCGQ_LAMMPS_OLD_COMM_API"; fi
cmake -S "$lmp/cmake" -B "$out" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_CXX_STANDARD_LIBRARIES="$(cat "$cgq_build/cgequi-link.txt")" "$@"
cmake --build "$out" -j"$(nproc)"
echo "built $out/lmp with pair_style cgequi"
