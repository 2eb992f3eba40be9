#!/usr/bin/env bash
# device_timeline.sh: on the GPU machine, where each step leaves the GPU idle. Builds bench_eval and the CUPTI
# injection library bench/timeline.cpp, runs the MACE-MP-0-medium-architecture step (5,184 water atoms, fp32, graph
# on the device) and the shipped water models with every kernel, copy and runtime call recorded, and prints
# bench/timeline.py's summary of each (idle gaps and what the host did in them; the kernels' time per step without
# the profiler's synchronisations). BIN: a bench_eval already built (another tree's: no build here); TAG names the
# outputs; ONLY (space-separated: mp0 water_mace mace01 water_nequip) limits the models. Carry .whl and .device. Prints each
# model's step and idle lines; the whole summaries are in $OUT/timeline_$TAG.txt (the CSVs stay in /tmp: many large
# files do not come back).
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
out=$(cd "$OUT" && pwd)
source bench/device_build.sh
make_models
TAG=${TAG:-new} B=${BIN:-}
[ -n "$B" ] || { build_gpu --no-tests bench_eval; B=build-gpu/bench_eval; }
CUDA=$(dirname "$(dirname "$(command -v nvcc)")")
INC=$CUDA/include; [ -f $INC/cupti.h ] || INC=$CUDA/extras/CUPTI/include
LIB=$(dirname "$(find -L $CUDA -name 'libcupti.so' 2>/dev/null | head -1)")
newest() { grep -oE "^} CUpti_Activity$1[0-9]*;" $INC/cupti_activity.h | grep -oE "CUpti_Activity$1[0-9]*" | sort -V | tail -1; }
g++ -O2 -shared -fPIC bench/timeline.cpp -I$INC -L$LIB -Wl,-rpath,$LIB -lcupti -DKREC=$(newest Kernel) \
  -DMREC=$(newest Memcpy) -DSREC=$(newest Memset) -o /tmp/libcgq_timeline.so >/tmp/timeline_build.log 2>&1 \
  || { cat /tmp/timeline_build.log; exit 1; }
wait $MODELS_PID
W=.device/models/water_192.xyz
run() { # NAME MODEL NX NY NZ STEPS
  case " ${ONLY:-mp0 water_mace mace01 water_nequip} " in *" $1 "*) ;; *) return ;; esac
  CUDA_INJECTION64_PATH=/tmp/libcgq_timeline.so CGQ_TIMELINE=/tmp/tl_${TAG}_$1.csv $B $2 $W $3 $4 $5 cuda $6 --fp32 \
    --pairs >/tmp/run_$1.log 2>&1 || tail -3 /tmp/run_$1.log
  echo "== $TAG $1: $(grep -oE '[0-9.]+ ms/step median of [0-9]+' /tmp/run_$1.log)"
  python3 bench/timeline.py /tmp/tl_${TAG}_$1.csv 5 2
}
{
  run mp0 $M/mace_mp0_medium_arch.h5 3 3 3 12
  run water_mace potentials/water-mace-small.h5 3 3 3 20
  run mace01 potentials/mace01-solvent.h5 3 3 3 20
  run water_nequip potentials/water-nequip-small.h5 3 3 3 20
} >"$out/timeline_$TAG.txt" 2>&1
grep -E "^== |^GPU busy|^steps:" "$out/timeline_$TAG.txt"
