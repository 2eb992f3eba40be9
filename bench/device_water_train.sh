#!/usr/bin/env bash
# device_water_train.sh SECONDS "NAME:ARGS" ...: on the GPU machine, trains water MACE candidates with
# tools/train_water_mace.py (mace-torch from the wheels in ${WHL:-.whl}, on the GPU, all at once under CUDA MPS), each
# stopped after SECONDS. The data travels in .device/data/water_train.xyz. The exported candidates and the
# training logs come back in $OUT/water_candidates.tgz; the held-out line of each is printed last.
set -u
SECS=$1
shift
OUT=${OUT:-device-out}
mkdir -p "$OUT" /tmp/site /tmp/cand
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHL:-.whl}/*.whl || exit 1
# mace imports python-hostlist (SLURM node lists; PyPI has no wheel of it): a stand-in for one machine
[ -f /tmp/site/hostlist.py ] || echo 'def expand_hostlist(s): return [s]' > /tmp/site/hostlist.py
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH OMP_NUM_THREADS=1
nvidia-cuda-mps-control -d >/dev/null 2>&1 && MPS=1 || MPS=0
echo "MPS: $MPS"
for spec in "$@"; do
  name=${spec%%:*} args=${spec#*:}
  eval "timeout $SECS python3 tools/train_water_mace.py $args --device cuda --data .device/data/water_train.xyz \
    --workdir /tmp/train/$name --out /tmp/cand/$name.h5" > /tmp/cand/$name.log 2>&1 & # eval: ARGS may quote
done
wait
[ $MPS = 1 ] && echo quit | nvidia-cuda-mps-control
cd /tmp/cand && tar czf "$OUT/water_candidates.tgz" *.h5 *.log 2>/dev/null
for spec in "$@"; do
  name=${spec%%:*}
  echo "$name [${spec#*:}]: $(ls $name.h5 2>/dev/null || echo 'no model') | $(grep -E 'held-out' $name.log | head -1) \
$(grep -E 'Error|error' $name.log | tail -1 | cut -c1-200)"
done
