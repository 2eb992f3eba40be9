#!/usr/bin/env bash
# device_ncu.sh: on the GPU machine: per-kernel GPU times of one MACE-MP-0-medium-architecture step (5,184 water
# atoms, fp32, cgq_evaluate_pairs) and of the shipped water model's, from Nsight Compute (one metric,
# gpu__time_duration, clocks left alone). Needs the mace wheels in ${WHL:-.whl} unless $M/mace_mp0_medium_arch.h5
# exists. Logs in $OUT; the per-kernel tables are printed.
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source bench/device_build.sh
build_gpu --no-tests bench_eval
M=${M:-/tmp/models}
if [ ! -f $M/mace_mp0_medium_arch.h5 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHL:-.whl}/*.whl >/dev/null 2>&1
  PYTHONPATH=/tmp/site python3 tools/make_bench_models.py $M --no-selftest >"$OUT/make_models.log" 2>&1 || tail -5 "$OUT/make_models.log"
fi
B=build-gpu/bench_eval W=.device/models/water_192.xyz
for model in $M/mace_mp0_medium_arch.h5 potentials/water-mace-small.h5; do
  name=$(basename $model .h5)
  timeout 240 ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
    $B $model $W 3 3 3 cuda 1 --fp32 --pairs >"$OUT/ncu_$name.txt" 2>&1
  # kernel name, invocations, mean duration -> total per kernel over the 3 evaluations (2 warm-up + 1), sorted
  python3 - "$OUT/ncu_$name.txt" <<'PY'
import re, sys
agg, name, calls = {}, None, 0
for line in open(sys.argv[1]):
    m = re.match(r"\s{2}(\S.*?) \(\d+, \d+, \d+\)x\(\d+, \d+, \d+\), .*Invocations (\d+)", line)
    if m: name, calls = re.sub(r"\(.*", "", m.group(1))[:60], int(m.group(2)); continue
    m = re.match(r"\s+gpu__time_duration.sum\s+(\w+)\s+([\d.,]+)\s+([\d.,]+)\s+([\d.,]+)", line)
    if m and name:
        ms = float(m.group(4).replace(",", "")) * {"ns": 1e-6, "us": 1e-3, "ms": 1.0}[m.group(1)]
        a = agg.setdefault(name, [0.0, 0]); a[0] += ms * calls / 3.0; a[1] += calls // 3; name = None
print(f"== {sys.argv[1]}: GPU kernel time per evaluation {sum(a[0] for a in agg.values()):.3f} ms")
for n, (t, c) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:22]: print(f"{t:8.3f} ms  {c:4d} launches  {n}")
PY
done
