#!/usr/bin/env bash
# device_node_tc.sh: on the GPU machine, session 20's measurement of the node GEMMs on the tensor cores (docs/gpu.md
# item 4, node_ops.cuh k_lin_gemm_tc) against the CUDA-core tile (CGQ_GPU_NODE_TC=0), alternated in one call: the
# MACE-MP-0-medium-architecture step (5,184 water atoms, fp32, --pairs; checked against the CPU first), its profile,
# Nsight Compute's time of one step's node GEMMs and sender sums, the shipped MACE models, and 98,304 atoms. Needs the
# mace wheels in .whl (bench/device_build.sh make_models). Logs in $OUT; the summary is printed. (The commands of
# session 20's calls 2 and 4, gathered here afterwards.)
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source bench/device_build.sh
make_models
build_gpu --no-tests bench_eval
wait $MODELS_PID
B=build-gpu/bench_eval W=.device/models/water_192.xyz MP=$M/mace_mp0_medium_arch.h5
ms() { grep -oE '[0-9.]+ ms/step median of [0-9]+ \(min [0-9.]+\)|GPU memory [0-9.]+ GiB' | tr '\n' ' '; }
{
  echo "tensor cores: $($B $MP $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E 'check|NONDET')"
  echo "CUDA cores: $(CGQ_GPU_NODE_TC=0 $B $MP $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E 'check|NONDET')"
  $B $MP $W 3 3 3 cuda 10 --fp32 --pairs >/dev/null
  for round in 1 2 3; do
    echo "== MP-0 round $round tensor cores: $($B $MP $W 3 3 3 cuda 10 --fp32 --pairs | ms)"
    echo "== MP-0 round $round CUDA cores: $(CGQ_GPU_NODE_TC=0 $B $MP $W 3 3 3 cuda 10 --fp32 --pairs | ms)"
  done
  CGQ_GPU_PROFILE=1 $B $MP $W 3 3 3 cuda 3 --fp32 --pairs 2>&1 | grep profile | tail -1
  # one evaluation's 16 node GEMMs and its sender sums (the third evaluation: two warm-ups skipped)
  timeout 100 ncu --clock-control none --kernel-name regex:'k_lin_gemm|k_sender_sum' --launch-skip 34 --launch-count 17 \
    --metrics gpu__time_duration.sum $B $MP $W 3 3 3 cuda 1 --fp32 --pairs >"$OUT/ncu_node.txt" 2>&1
  grep -E "^\s+(void )?k_|gpu__time" "$OUT/ncu_node.txt" | sed -E 's/\s+/ /g' | cut -c1-100
  for mdl in water-mace-small mace01-solvent; do
    # the default keeps their 16- and 32-wide outputs on the CUDA cores; CGQ_GPU_NODE_TC=1 puts every width on the tensor cores
    echo "== $mdl default: $($B potentials/$mdl.h5 $W 3 3 3 cuda 20 --fp32 --pairs | ms)"
    echo "== $mdl every width on the tensor cores: $(CGQ_GPU_NODE_TC=1 $B potentials/$mdl.h5 $W 3 3 3 cuda 20 --fp32 --pairs | ms)"
  done
  echo "== MP-0 98,304 atoms: $($B $MP $W 8 8 8 cuda 3 --fp32 --pairs | ms)"
} 2>&1 | tee "$OUT/node_tc.txt"
