#!/usr/bin/env bash
# device_peers_alt.sh: on the GPU machine, issue 5's whole-step ratios in one call: the MACE-MP-0-medium-architecture
# model (5,184 water atoms, energy+forces) in cgequi (fp32, --pairs) alternated with mace-torch converted to
# cuEquivariance (6 rounds of 10 steps) and with mace-torch on e3nn (2 rounds of 5), then cgequi fp64 with and without
# --pairs. Wheels as bench/device_peers.sh: .whl/*.whl (mace-torch 0.3.16 and its imports), .whl/cueq (cuequivariance
# 0.13; tools/make_peer_wheels.sh makes both). LMP=1: LAMMPS is also built from .device/lammps (Debian's source), at
# nice 19 on cores 8-15 while the peers run, and the shipped water models' MD timed after them (lammps_water_boxes).
# CONV=1: conv_workbench is built the same way, and after the peers the step is checked against the CPU, its phases
# profiled, the layer-1 convolution timed (`conv_workbench --tables`) and 98,304 atoms timed.
# Logs in $OUT; the summary last.
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source bench/device_build.sh
make_models
PIP="python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade"
(
  rm -rf /tmp/cueq_whl && mkdir -p /tmp/cueq_whl &&
    python3 -c 'import glob, tarfile
for f in glob.glob(".whl/cueq/*.tar.xz"): tarfile.open(f).extractall("/tmp/cueq_whl")' &&
    $PIP --target /tmp/site_cueq .whl/cueq/*.whl /tmp/cueq_whl/*.whl
) >"$OUT/cueq_install.log" 2>&1 &
CUEQ_PID=$!
if [ "${LMP:-0}" = 1 ]; then
  build_gpu --no-tests
  ( taskset -c 8-15 nice -n 19 tools/build-lammps-with-cgequi.sh .device/lammps build-gpu /tmp/lmpbuild \
      -DBUILD_MPI=yes -DBUILD_OMP=yes >"$OUT/lammps_build.log" 2>&1 || echo "LAMMPS BUILD FAILED" >>"$OUT/lammps_build.log" ) &
  LMP_PID=$!
else
  build_gpu --no-tests bench_eval
fi
if [ "${CONV:-0}" = 1 ]; then
  ( taskset -c 8-15 nice -n 19 cmake --build build-gpu -j8 --target conv_workbench >"$OUT/conv_build.log" 2>&1 ||
      echo "CONV_WORKBENCH BUILD FAILED" >>"$OUT/conv_build.log" ) &
  CONV_PID=$!
fi
wait $MODELS_PID $CUEQ_PID
M=$M/mace_mp0_medium_arch W=.device/models/water_192.xyz
CG="build-gpu/bench_eval $M.h5 $W 3 3 3 cuda 10 --fp32 --pairs"
PYTHONPATH=/tmp/site_cueq:/tmp/site timeout 300 python3 bench/mace_torch_bench.py $M.model $W 3 3 3 float32 10 \
  --cueq --rounds 6 --alternate "$CG" >"$OUT/cueq.log" 2>&1
PYTHONPATH=/tmp/site timeout 150 python3 bench/mace_torch_bench.py $M.model $W 3 3 3 float32 5 --rounds 2 \
  --alternate "$CG" >"$OUT/e3nn.log" 2>&1
{
  echo "fp64 --pairs: $(build-gpu/bench_eval $M.h5 $W 3 3 3 cuda 5 --pairs | grep ms/step)"
  echo "fp64 graph from the host: $(build-gpu/bench_eval $M.h5 $W 3 3 3 cuda 5 | grep ms/step)"
} >"$OUT/fp64.log" 2>&1
if [ "${CONV:-0}" = 1 ]; then
  wait $CONV_PID
  {
    echo "check: $(build-gpu/bench_eval $M.h5 $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E 'check|NONDET')"
    echo "$(CGQ_GPU_PROFILE=1 build-gpu/bench_eval $M.h5 $W 3 3 3 cuda 3 --fp32 --pairs 2>&1 | grep profile | tail -1)"
    conv_tables build-gpu/conv_workbench $M.h5 $W
    echo "98,304 atoms: $(build-gpu/bench_eval $M.h5 $W 8 8 8 cuda 5 --fp32 --pairs | grep -E 'ms/step|memory' | tr '\n' ' ')"
  } >"$OUT/conv.txt" 2>&1
fi
if [ "${LMP:-0}" = 1 ]; then
  wait $LMP_PID
  tail -1 "$OUT/lammps_build.log"
  lammps_water_boxes >"$OUT/lammps.txt" 2>&1
fi
echo "==== summary"
grep -h -E "^round|^alternated|^cueq|^converted|^mace-torch|Error|error" "$OUT/cueq.log" "$OUT/e3nn.log" | cut -c1-240
cat "$OUT/fp64.log"
if [ "${CONV:-0}" = 1 ]; then tail -2 "$OUT/conv_build.log"; cat "$OUT/conv.txt"; fi
if [ "${LMP:-0}" = 1 ]; then cat "$OUT/lammps.txt"; fi
