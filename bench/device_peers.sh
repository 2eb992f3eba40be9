#!/usr/bin/env bash
# device_peers.sh: on the GPU machine: cgequi's peers, side by side (issue #5), in about 6 minutes at most:
#   1. the MACE-MP-0-medium convolution, layers 1 and 0, fp32 and fp64, 5,184 atoms (water x 3 x 3 x 3, 459,594
#      edges): OpenEquivariance's deterministic fused kernel and mace's own e3nn path (bench/oeq_conv_bench.py),
#      to set against build-gpu/conv_workbench's k_conv_fwd / k_conv_bwd numbers (bench/RESULTS.md);
#   2. mace-torch energy+forces of the whole MACE-MP-0-medium-architecture model, 3 x 3 x 3, float32, e3nn and
#      converted to cuEquivariance by mace's own conversion (bench/mace_torch_bench.py [--cueq]).
# Wheels travel in .whl (carry it): .whl/*.whl (or .device/whl/*.whl) mace-torch 0.3.16 and the imports the device
# lacks (-> /tmp/site, as bench/device_run.sh); .whl/oeq/ openequivariance (-> /tmp/site_oeq); .whl/cueq/
# cuequivariance(-torch) and, packed as one .tar.xz of uncompressed wheels to fit the transfer limit,
# cuequivariance-ops-cu13 and cuequivariance-ops-torch-cu13 (-> /tmp/site_cueq).
# tools/make_peer_wheels.sh makes .whl (--oeq also builds the openequivariance wheel against an installed torch 2.11).
# The two peers get their own folders so that neither changes what mace builds elsewhere: mace imports
# openequivariance (which builds or loads its extension on import) and cuequivariance (which switches mace's
# symmetric contractions to another basis) whenever they are importable.
# The structure is .device/models/water_192.xyz (frame 0 of water_train.xyz), or STRUCTURE=...; the model is
# .device/models/mace_mp0_medium_arch.model, or /tmp/models/ (made here by tools/make_bench_models.py if missing,
# in the background while step 1 runs).
# Every step runs under its own timeout and the whole under PEERS_BUDGET seconds (default 330); a failing step
# does not stop the others. Step logs come back in $OUT/peers_logs.tgz, everything printed in $OUT/peers.log; the
# summary table is printed last. A dry run elsewhere: NREP="1 1 1" CONV_ARGS="--reps 2 --warmup 1" MACE_REPS=1.
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
L=/tmp/peers_logs
rm -rf $L && mkdir -p $L
exec > >(tee "$OUT/peers.log") 2>&1
T0=$(date +%s)
T_END=$((T0 + ${PEERS_BUDGET:-330}))
STATUS=$L/status.txt
: >$STATUS
export PYTHONUNBUFFERED=1

# step NAME CAP_SECONDS COMMAND...: runs COMMAND under timeout min(CAP, time left), its output in $L/NAME.log
step() {
  local name=$1 cap=$2 t s rc
  shift 2
  t=$((T_END - $(date +%s)))
  [ $t -gt $cap ] && t=$cap
  if [ $t -lt 15 ]; then
    echo "$name: skipped, no time left" | tee -a $STATUS
    return 124
  fi
  s=$(date +%s)
  timeout -k 5 $t "$@" >$L/$name.log 2>&1
  rc=$?
  echo "$name: rc $rc in $(($(date +%s) - s)) s (limit $t s)$([ $rc = 124 ] && echo ', TIMED OUT')" | tee -a $STATUS
  return $rc
}

finish() {
  tar czf "$OUT/peers_logs.tgz" -C /tmp peers_logs 2>/dev/null
  echo "==== peers summary ($(($(date +%s) - T0)) s in all)"
  cat $STATUS
  grep -h -E "^(openequivariance|torch) " $L/oeq_l1.log $L/oeq_l0.log 2>/dev/null | sort -u
  grep -h -E "^graph:" $L/oeq_l1.log $L/oeq_l0.log 2>/dev/null | head -1
  grep -h -E "^(oeq|e3nn) layer[0-9]" $L/oeq_l1.log $L/e3nn_l1.log $L/oeq_l0.log $L/e3nn_l0.log 2>/dev/null
  grep -h -E "^cueq: |^converted|^conversion with|^cueq vs e3nn|^mace-torch" $L/mace_e3nn.log $L/mace_cueq.log \
    2>/dev/null
  grep -h -E "Error|error:" $L/*.log 2>/dev/null | grep -v -E "Warning|^ *warnings" | sort | uniq -c | sort -rn |
    head -8
  sleep 1 # let tee write the end of $OUT/peers.log
}
trap finish EXIT

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader
python3 -c 'import sys, torch
print("python", sys.version.split()[0], "torch", torch.__version__, "CUDA", torch.version.cuda,
      torch.cuda.get_device_name())'
NREP=${NREP:-3 3 3}
CONV_ARGS=${CONV_ARGS:-}
MACE_REPS=${MACE_REPS:-5}
W=${STRUCTURE:-.device/models/water_192.xyz}
[ -f "$W" ] || W=../shared/data/water_train.xyz
echo "structure: $W"

# ---- wheels
PIP="python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade"
MW=.whl # mace-torch and its imports; or the same set in .device/whl
ls .whl/mace_torch-*.whl >/dev/null 2>&1 || MW=.device/whl
UNPACK='import glob, tarfile
for f in glob.glob(".whl/cueq/*.tar.xz"):
    tarfile.open(f).extractall("/tmp/cueq_whl")'
step install 90 bash -xc "$PIP --target /tmp/site $MW/*.whl; $PIP --target /tmp/site_oeq .whl/oeq/*.whl
  rm -rf /tmp/cueq_whl && mkdir -p /tmp/cueq_whl && python3 -c '$UNPACK' &&
  $PIP --target /tmp/site_cueq .whl/cueq/*.whl /tmp/cueq_whl/*.whl"
SITE=/tmp/site
SITE_OEQ=/tmp/site_oeq:/tmp/site
SITE_CUEQ=/tmp/site_cueq:/tmp/site
export PATH=$PATH:/tmp/site_oeq/bin # ninja for OpenEquivariance's JIT fallback, should the image lack one

# ---- the model of step 2: made in the background (on the CPU) while step 1 uses the GPU
M=.device/models
[ -f $M/mace_mp0_medium_arch.model ] || M=/tmp/models
MP=$M/mace_mp0_medium_arch
MODEL_PID=
if [ ! -f $MP.model ]; then
  (
    s=$(date +%s)
    OMP_NUM_THREADS=4 PYTHONPATH=$SITE nice -n 10 timeout -k 5 200 python3 tools/make_bench_models.py $M --no-selftest \
      >$L/make_model.log 2>&1
    echo "make_model: rc $? in $(($(date +%s) - s)) s (in the background, limit 200 s)" >>$STATUS
  ) &
  MODEL_PID=$!
fi

# ---- 1. the convolution: OpenEquivariance (deterministic) and mace's e3nn path, layer 1 then layer 0
PROBE='import sys, openequivariance as oeq
from openequivariance._torch import extlib as e
print("openequivariance", oeq.__version__, "precompiled" if e.USE_PRECOMPILED_EXTENSION else "JIT",
      "extension built:", e.BUILT_EXTENSION, e.BUILT_EXTENSION_ERROR or "")
sys.exit(0 if e.BUILT_EXTENSION else 3)'
if ! PYTHONPATH=$SITE_OEQ step oeq_probe 60 python3 -c "$PROBE"; then
  tail -3 $L/oeq_probe.log
  export OEQ_JIT_EXTENSION=1 # the carried precompiled extension did not load: torch's JIT builds it (g++, ninja)
  PYTHONPATH=$SITE_OEQ step oeq_probe_jit 150 python3 -c "$PROBE" || tail -5 $L/oeq_probe_jit.log
fi
for l in 1 0; do
  PYTHONPATH=$SITE_OEQ step oeq_l$l $((l ? 150 : 100)) python3 bench/oeq_conv_bench.py $W $NREP --layers $l \
    --dtypes fp32,fp64 $CONV_ARGS
  rc=$?
  # a crash, or a CUDA error that also failed the e3nn rows (not their own out-of-memory): the e3nn rows again,
  # without OpenEquivariance
  if { [ $rc != 0 ] && [ $rc != 124 ]; } || grep "^e3nn layer.*FAILED" $L/oeq_l$l.log | grep -qv OutOfMemory; then
    PYTHONPATH=$SITE step e3nn_l$l 80 python3 bench/oeq_conv_bench.py $W $NREP --layers $l --dtypes fp32,fp64 \
      --no-oeq $CONV_ARGS
  fi
done

# ---- 2. the whole model: mace-torch with e3nn, then converted to cuEquivariance
if [ -n "$MODEL_PID" ]; then
  wait $MODEL_PID
  [ -f $MP.model ] || tail -5 $L/make_model.log
fi
if [ -f $MP.model ]; then
  PYTHONPATH=$SITE step mace_e3nn 80 python3 bench/mace_torch_bench.py $MP.model $W $NREP float32 $MACE_REPS
  PYTHONPATH=$SITE_CUEQ step mace_cueq 170 python3 bench/mace_torch_bench.py $MP.model $W $NREP float32 $MACE_REPS \
    --cueq
else
  echo "mace_e3nn, mace_cueq: skipped, no model $MP.model" | tee -a $STATUS
fi
