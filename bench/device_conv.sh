#!/usr/bin/env bash
# device_conv.sh: on the GPU machine, the MACE-MP-0-medium convolution as the step runs it, side by side with
# OpenEquivariance in one call (issue #5): `conv_workbench --tables` (the kernels on the weight tables, validated
# against float64 first) and OpenEquivariance's deterministic fused convolution on the same graph
# (bench/oeq_conv_bench.py, fp32, per-edge weights as its input), alternated ROUNDS times (default 2); then the
# general kernels on per-edge weights (`conv_workbench --fp32`) and the step's own phases (bench_eval,
# CGQ_GPU_PROFILE=1). Carry .whl (mace-torch's wheels, which make the model and which oeq_conv_bench.py imports;
# .whl/oeq/ the openequivariance wheel, tools/make_peer_wheels.sh --oeq). PEAK_GBS (default 4800: an H200's
# HBM3e; an H100 SXM 3350) and PEAK_GFLOPS (66900, fp32) set the floors.
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source bench/device_build.sh
make_models
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site_oeq \
  .whl/oeq/*.whl >"$OUT/pip_oeq.log" 2>&1 || tail -3 "$OUT/pip_oeq.log"
export PATH=$PATH:/tmp/site_oeq/bin # ninja, should OpenEquivariance build its extension
build_gpu --no-tests conv_workbench bench_eval
wait $MODELS_PID
W=.device/models/water_192.xyz MP=$M/mace_mp0_medium_arch.h5 CW=build-gpu/conv_workbench
PK="--peak-gbs ${PEAK_GBS:-4800} --peak-gflops ${PEAK_GFLOPS:-66900}"
{
  nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
  for round in $(seq ${ROUNDS:-2}); do
    echo "== round $round"
    $CW $MP $W 3 3 3 --tables $PK
    PYTHONPATH=/tmp/site_oeq:/tmp/site timeout 240 python3 bench/oeq_conv_bench.py $W 3 3 3 --layers 1,0 \
      --dtypes fp32 --no-e3nn $([ "$round" -gt 1 ] && echo --no-check) 2>&1 | grep -E "^(oeq|openequivariance|graph)|Error"
  done
  echo "== the general kernels, per-edge weights as input"
  $CW $MP $W 3 3 3 --fp32 $PK
  echo "== the step's phases: $(CGQ_GPU_PROFILE=1 build-gpu/bench_eval $MP $W 3 3 3 cuda 3 --fp32 --pairs 2>&1 |
    grep profile | tail -1)"
} >"$OUT/conv.txt" 2>&1
cat "$OUT/conv.txt"
