# device_build.sh: sourced by the bench/device_*.sh scripts (on the GPU machine). Defines build_gpu, which
# configures and builds cgequi with CUDA for sm_90a and compute_90 (CUDA_ARCHS: another list) into build-gpu (logs in $OUT) and exits the calling script
# with the error lines when that fails. The tests are built when .device/googletest is there (carry it).
# usage: build_gpu [--no-tests] [TARGET...]   (no target: everything)
# gpu_archs: the CUDA architectures both builds compile for
gpu_archs() { echo "${CUDA_ARCHS:-90a-real;90-virtual}"; }
build_gpu() {
  local tests="-DCGQ_BUILD_TESTS=OFF" targets=""
  if [ "${1:-}" = --no-tests ]; then shift
  elif [ -d .device/googletest ]; then tests="-DCGQ_BUILD_TESTS=ON -DCGQ_GTEST_SOURCE_DIR=$PWD/.device/googletest"; fi
  for t in "$@"; do targets="$targets --target $t"; done
  mkdir -p "$OUT"
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCGQ_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$(gpu_archs)" $tests \
    >"$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
  cmake --build build-gpu -j16 $targets >"$OUT/build.log" 2>&1 || { grep -E "error" -A5 "$OUT/build.log" | head -60; exit 1; }
}

# build_base TARGET...: the base tree in .device/base (`git archive BASE | tar -x -C .device/base`) built the same way
# (gpu_archs), without tests, into .device/base/build (logs in $OUT: cmake_base.log, build_base.log); the scripts
# that compare against it run it in the background beside build_gpu.
build_base() {
  local targets="" out
  for t in "$@"; do targets="$targets --target $t"; done
  mkdir -p "$OUT" && out=$(cd "$OUT" && pwd)
  ( cd .device/base && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCGQ_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$(gpu_archs)" \
      -DCGQ_BUILD_TESTS=OFF >"$out/cmake_base.log" 2>&1 && cmake --build build -j8 $targets >"$out/build_base.log" 2>&1 )
}

# conv_tables CMD... MODEL STRUCTURE: `CMD MODEL STRUCTURE 3 3 3 --tables` (CMD: conv_workbench, with `env VAR=value`
# before it for a switch), its summary lines: each layer, its check against float64 and its times. PEAK_GBS and
# PEAK_GFLOPS as device_conv.sh.
conv_tables() {
  local n=$# cmd=("${@:1:$#-2}")
  "${cmd[@]}" "${@:n-1:1}" "${@:n:1}" 3 3 3 --tables --peak-gbs ${PEAK_GBS:-4800} --peak-gflops ${PEAK_GFLOPS:-66900} \
    2>&1 | grep -E "^layer|check|forward|reverse|sums|all three" | tr -s ' '
}

# make_models: makes the MACE-MP-0-medium-architecture model in $M (default /tmp/models) in the background, unless it
# is there (mace-torch from the wheels carried in .whl; log in $OUT/make_models.log), and with MODEL_WIDTHS=64,96 the
# same architecture at those widths ($M/mace_mp0_arch_c64.h5, ...). `wait $MODELS_PID` before use.
make_models() {
  M=${M:-/tmp/models}
  (
    if [ ! -f $M/mace_mp0_medium_arch.h5 ]; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
      PYTHONPATH=/tmp/site python3 tools/make_bench_models.py $M --no-selftest ${MODEL_WIDTHS:+--widths $MODEL_WIDTHS} \
        >"$OUT/make_models.log" 2>&1 || tail -5 "$OUT/make_models.log"
    fi
  ) &
  MODELS_PID=$!
}

# lammps_water_run MODEL LOG TIMING [VAR=value ...]: examples/lammps/in.water_nvt with potentials/MODEL.h5 on
# water_5184.data (fp32, 500 steps, CGQ_PAIR_TIMING=1) in /tmp/lmpbuild/lmp (build_lammps), with the given switches,
# on LMP_RANKS MPI ranks (default 1; each rank takes its own GPU); the LAMMPS log goes to LOG, the pair style's timing
# to TIMING. Prints "FAILED" if the run fails.
lammps_water_run() {
  local mdl=$1 log=$2 timing=$3 ranks=${LMP_RANKS:-1} mpi=""
  shift 3
  [ "$ranks" -gt 1 ] && mpi="mpirun --allow-run-as-root --bind-to none -np $ranks ${MPI_ARGS:-}"
  sed "s#^variable model index .*#variable model index $(realpath potentials/$mdl.h5)#" examples/lammps/in.water_nvt \
    >/tmp/in.$mdl
  ( cd examples/lammps && env "$@" CGQ_PAIR_TIMING=1 OMP_NUM_THREADS=$((16 / ranks)) timeout 120 $mpi /tmp/lmpbuild/lmp \
      -in /tmp/in.$mdl -var steps 500 -var data water_5184.data -log "$log" -screen none 2>"$timing" \
      || echo "FAILED $mdl $ranks ranks $*" )
}

# lammps_water_boxes: the shipped MACE and NequIP water models (lammps_water_run; logs in $OUT: log.MODEL,
# timing.MODEL); prints each model's performance line, its first and last thermo lines and the pair style's timing.
lammps_water_boxes() {
  local mdl
  for mdl in water-mace-small water-nequip-small; do
    lammps_water_run $mdl "$OUT/log.$mdl" "$OUT/timing.$mdl"
    echo "$mdl 5,184 atoms fp32, 500 steps: $(grep -E '^Performance' "$OUT/log.$mdl")"
    grep -E "^ +(0|500) " "$OUT/log.$mdl" | head -2
    tail -4 "$OUT/timing.$mdl"
  done
}

# build_lammps: LAMMPS from .device/lammps (carried: Debian's LAMMPS 20220106 source, its cmake/ and src/ with fmt/ and
# STUBS/ but no packages) with this tree's pair style built in, into /tmp/lmpbuild (log /tmp/lammps_build.log); build-gpu
# must be configured (cgequi-link.txt), and its libcgequi.a built before the link. Prints the error lines on failure.
build_lammps() {
  nice tools/build-lammps-with-cgequi.sh .device/lammps build-gpu /tmp/lmpbuild -DBUILD_MPI=yes -DBUILD_OMP=yes \
    >/tmp/lammps_build.log 2>&1 || { echo "LAMMPS build failed"; grep -E "error" -A3 /tmp/lammps_build.log | head -20; return 1; }
}

# lammps_setup SUMMARY: what the LAMMPS runs need: the models (make_models, in the background), cgequi's library and
# CLI (build_gpu), and LAMMPS (build_lammps; its failure written to SUMMARY, which it starts)
lammps_setup() {
  make_models
  build_gpu --no-tests cgequi_cli
  build_lammps >"$1"
}

# lammps_variants: the shipped MACE water model (lammps_water_run) once per switch (VAR=value) of LAMMPS_VARIANTS,
# two rounds alternated; prints each run's timesteps/s, its last thermo line and the pair style's timing lines.
lammps_variants() {
  local round v
  for round in 1 2; do
    for v in ${LAMMPS_VARIANTS:-CGQ_GPU_BUILD_PAIRS=0 CGQ_GPU_BUILD_PAIRS=1}; do
      lammps_water_run water-mace-small /tmp/log.lmp /tmp/timing.lmp $v
      echo "LAMMPS water MACE 5,184 fp32 $v round $round: $(grep -oE '[0-9.]+ timesteps/s' /tmp/log.lmp);" \
        "$(grep -E '^ +500 ' /tmp/log.lmp | head -1)"
      grep -hE "ms per step|later ones" /tmp/timing.lmp | sed 's/^pair cgequi timing, rank 0, /  /'
    done
  done
}

# lammps_gpu_checks: tests/lammps/check_lammps.py with the pair style on the GPU (/tmp/lmpbuild/lmp, build_lammps)
# against `cgequi eval` on the CPU in float64 (build-gpu/cgequi): energy, forces, pressure tensor, per-atom energies and
# virials of one configuration, on 1, 2 and 4 ranks (one GPU per rank where there are enough, else all on GPU 0),
# newton on and off, open boundaries, empty ranks, and NequIP's per-layer ghost exchange; on 2 and 4 ranks also which
# path the rows took (--expect-rows). One line per case.
lammps_gpu_checks() {
  local ngpu share2="" share4="--gpu-id 0" d=examples/lammps t=tests/lammps
  ngpu=$(nvidia-smi -L | wc -l)
  [ "$ngpu" -lt 2 ] && share2="--gpu-id 0"
  [ "$ngpu" -ge 4 ] && share4=""
  chk() {
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 python3 $t/check_lammps.py --lmp /tmp/lmpbuild/lmp \
      --cgequi build-gpu/cgequi --mpirun "mpirun --oversubscribe --bind-to none" --device cuda "$@" 2>&1 | tail -3
  }
  local mace="--model potentials/mace01-solvent.h5" water="--data $d/water_192.data"
  echo "GPUs: $ngpu"
  chk $mace $water --elements "O H" --tol 1e-9
  chk $mace $water --elements "O H" --tol 1e-9 --newton off
  chk $mace $water --elements "O H" --tol 1e-9 --ranks 2 $share2 "--expect-rows=double rows staged in the peer's memory"
  chk $mace $water --elements "O H" --tol 1e-9 --ranks 4 $share4 "--expect-rows=double rows shared within the node"
  chk $mace --data $t/triclinic_small.data --elements "H O C" --tol 1e-9 --ranks 2 --newton off $share2
  chk $mace --data $t/cluster_corner.data --elements "C H O" --tol 1e-9 --ranks 4 --processors "4 1 1" $share4
  chk $mace --data $t/cluster_corner.data --elements "C H O" --tol 1e-9 --boundary "f f f" --ranks 2 $share2
  chk $mace --data $t/water_sparse_ids.data --elements "O H" --tol 1e-9
  chk --model potentials/water-nequip-small.h5 $water --elements "O H" --tol 1e-9 --ranks 2 $share2
  chk --model potentials/water-nequip-small.h5 $water --elements "O H" --tol 2e-5 --precision fp32 --ranks 2 $share2
  chk --model potentials/water-mace-small.h5 $water --elements "O H" --tol 2e-5 --precision fp32 --ranks 2 $share2 \
    "--expect-rows=float rows staged in the peer's memory"
}

# lammps_ranks: the shipped MACE and NequIP water models on the 5,184-atom box (lammps_water_run) on 1 rank and on
# 2 ranks with one GPU each (where there are 2), two rounds alternated; timesteps/s and the last thermo line.
lammps_ranks() {
  local round r mdl
  for round in 1 2; do
    for mdl in water-mace-small water-nequip-small; do
      for r in 1 2; do
        LMP_RANKS=$r lammps_water_run $mdl /tmp/log.lmp /tmp/timing.lmp
        echo "LAMMPS $mdl 5,184 fp32 $r rank(s) round $round: $(grep -oE '[0-9.]+ timesteps/s' /tmp/log.lmp);" \
          "$(grep -E '^ +500 ' /tmp/log.lmp | head -1)"
        grep -hE "ms per step" /tmp/timing.lmp | head -2 | sed 's/^pair cgequi timing, /  /'
      done
    done
  done
}

# lammps_scale: the MACE-MP-0-medium-architecture model ($M, make_models) in LAMMPS on the water box replicated
# (bench/in.water_scale, SCALE_SIZES: default "1x1x1 3x2x3", 5,184 and 93,312 atoms; fp32, 50 NVE steps) on 1 rank and
# on SCALE_RANKS (default 2) ranks with one GPU each, the latter once per switch (VAR=value) of SCALE_VARIANTS (default
# none), SCALE_ROUNDS (default 2) rounds alternated; timesteps/s, the first and last thermo lines and the pair style's
# timing per rank.
lammps_scale() {
  wait $MODELS_PID 2>/dev/null # (already reaped where the caller waited for every job)
  local round r n v mpi
  for n in ${SCALE_SIZES:-1x1x1 3x2x3}; do
    set -- ${n//x/ }
    for round in $(seq ${SCALE_ROUNDS:-2}); do
      for r in 1 ${SCALE_RANKS:-2}; do
        for v in $([ "$r" -gt 1 ] && echo ${SCALE_VARIANTS:-CGQ_NONE=0} || echo CGQ_NONE=0); do
          mpi=""
          [ "$r" -gt 1 ] && mpi="mpirun --allow-run-as-root --bind-to none -np $r -x $v"
          env $v CGQ_PAIR_TIMING=1 OMP_NUM_THREADS=$((16 / r)) timeout 200 $mpi /tmp/lmpbuild/lmp -in bench/in.water_scale \
            -var model $M/mace_mp0_medium_arch.h5 -var nx $1 -var ny $2 -var nz $3 -log /tmp/log.scale -screen none \
            2>/tmp/timing.scale || echo "FAILED MP-0 $n $r ranks $v"
          echo "LAMMPS MP-0 $(grep -oE '[0-9]+ atoms' /tmp/log.scale | tail -1) fp32 $r rank(s) $v round $round:" \
            "$(grep -oE '[0-9.]+ timesteps/s' /tmp/log.scale)"
          grep -E "^ +(0|50) " /tmp/log.scale | head -2
          grep -hE "ms per step" /tmp/timing.scale | sed 's/^pair cgequi timing, /  /'
        done
      done
    done
  done
}
