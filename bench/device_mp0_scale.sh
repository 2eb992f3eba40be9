#!/usr/bin/env bash
# device_mp0_scale.sh: on the GPU machine: build with CUDA and tests, `ctest -L gpu`, then the
# MACE-MP-0-medium-architecture step (random weights, tools/make_bench_models.py; needs the mace wheels in
# ${WHL:-.whl}) on water boxes from 5,184 atoms up to the largest that fits, through cgq_evaluate_pairs, fp32.
# Logs in $OUT; the summary is printed.
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source bench/device_build.sh
build_gpu
M=${M:-/tmp/models}
if [ ! -f $M/mace_mp0_medium_arch.h5 ]; then
  (python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
     ${WHL:-.whl}/*.whl >/dev/null 2>&1
   PYTHONPATH=/tmp/site python3 tools/make_bench_models.py $M --no-selftest >"$OUT/make_models.log" 2>&1) &
fi
OMP_NUM_THREADS=16 ctest --test-dir build-gpu -L gpu --output-on-failure -V >"$OUT/ctest_gpu.log" 2>&1
grep -E "tests passed|tests failed|\*\*\*Failed|Failed  " "$OUT/ctest_gpu.log" | head -8
wait
B=build-gpu/bench_eval W=.device/models/water_192.xyz MP=$M/mace_mp0_medium_arch.h5
$B potentials/water-mace-small.h5 $W 3 3 3 cuda 10 --fp32 --pairs | grep ms/step | sed 's/^.*atoms/atoms/'
CGQ_GPU_PROFILE=1 $B $MP $W 3 3 3 cuda 3 --fp32 --pairs 2>&1 | tail -2
for n in "3 3 3" "4 4 4" "6 6 6" "7 7 7" "8 8 8"; do
  timeout 120 $B $MP $W $n cuda 3 --fp32 --pairs 2>&1 | grep -E "ms/step|rror" | sed 's/^.*atoms/atoms/'
done
