#!/usr/bin/env bash
# device_trees.sh: on the GPU machine, compile-time variants side by side in one call. TREES: space-separated
# NAME=DIR, each DIR a source tree (`git archive COMMIT | tar -x -C DIR`, then edited; "." is the working tree); each
# is built (bench_eval only, in DIR/build-trees, all at once) and the MACE-MP-0-medium-architecture step (5,184 water
# atoms, fp32, graph on the device) is timed in ROUNDS (default 3) rounds alternating the trees, then profiled once
# each (CGQ_GPU_PROFILE=1). Carry .whl (the model is made here) and the trees. Prints a short table last.
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source bench/device_build.sh
make_models
out=$(cd "$OUT" && pwd)
for t in ${TREES}; do
  name=${t%%=*} dir=${t#*=}
  ( cd "$dir" && cmake -S . -B build-trees -DCMAKE_BUILD_TYPE=Release -DCGQ_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DCGQ_BUILD_TESTS=OFF >"$out/cmake_$name.log" 2>&1 && cmake --build build-trees -j4 --target bench_eval \
      >"$out/build_$name.log" 2>&1 || echo "BUILD FAILED: $name" ) &
done
wait

W=.device/models/water_192.xyz MP=$M/mace_mp0_medium_arch.h5
ms() { grep -oE '[0-9.]+ ms/step median of [0-9]+ \(min [0-9.]+\)' | tr '\n' ' '; }
{
  for t in ${TREES}; do
    name=${t%%=*} dir=${t#*=}
    echo "$name check: $($dir/build-trees/bench_eval $MP $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E 'check|NONDET')"
  done
  for round in $(seq 1 "${ROUNDS:-3}"); do
    for t in ${TREES}; do
      name=${t%%=*} dir=${t#*=}
      echo "round $round $name: $($dir/build-trees/bench_eval $MP $W 3 3 3 cuda 10 --fp32 --pairs | ms)"
    done
  done
  for t in ${TREES}; do
    name=${t%%=*} dir=${t#*=}
    echo "$name $(CGQ_GPU_PROFILE=1 $dir/build-trees/bench_eval $MP $W 3 3 3 cuda 3 --fp32 --pairs 2>&1 | grep profile | tail -1)"
  done
} >"$out/trees.txt" 2>&1
cat "$out/trees.txt"
