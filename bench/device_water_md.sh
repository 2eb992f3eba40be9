#!/usr/bin/env bash
# device_water_md.sh LMP SECONDS MODEL.h5...: on the GPU machine, the long water runs of potentials/README.md for
# each model, all at once on the one GPU (CUDA MPS when it starts, so the small runs overlap): 20 ps NVT with the
# O-O RDF (one run per velocity seed in SEEDS) and 20 ps NVE after 1 ps NVT, 192 atoms, 0.5 fs, precision fp32.
# Each run is stopped after SECONDS if unfinished. Logs and RDFs go to $OUT as one tarball; a line per run is
# printed last: model, run, how far it got, and the summary of tools/water_md_summary.py.
# env: SEEDS (default 4928459), STEPS (default 40000), RUNS (default "nvt nve"), OMP (threads per run, default 1),
# NVT_VARS (more -var options for the NVT runs, e.g. "-var thermostat langevin -var tdamp 0.1"), TAG (added to log names)
set -u
LMP=$(realpath "$1") SECS=$2
shift 2
OUT=${OUT:-device-out}
SEEDS=${SEEDS:-4928459} STEPS=${STEPS:-40000} RUNS=${RUNS:-nvt nve}
REPO=$PWD
W=/tmp/water_md && mkdir -p $W && cp examples/lammps/water_192.data $W/
nvidia-cuda-mps-control -d >/dev/null 2>&1 && MPS=1 || MPS=0
echo "MPS: $MPS"
for model in "$@"; do
  tag=$(basename "$model" .h5) m=$(realpath "$model")
  for f in in.water_rdf in.water_nve; do
    sed -e "s#^variable model index .*#variable model index $m#" \
      -e 's/^pair_style cgequi device ${dev}$/pair_style cgequi device ${dev} precision fp32/' \
      "examples/lammps/$f" > "$W/${tag}_$f"
  done
  cd $W
  for run in $RUNS; do
    if [ $run = nvt ]; then
      for seed in $SEEDS; do
        OMP_NUM_THREADS=${OMP:-1} timeout $SECS $LMP -in ${tag}_in.water_rdf -var dev cuda -var equil 2000 -var steps $STEPS \
          -var seed $seed ${NVT_VARS:-} -var out ${tag}${TAG:-}_rdf_$seed -log ${tag}${TAG:-}_nvt_$seed.log -screen none &
      done
    else
      OMP_NUM_THREADS=${OMP:-1} timeout $SECS $LMP -in ${tag}_in.water_nve -var dev cuda -var equil 2000 -var steps $STEPS \
        -var every 100 -log ${tag}${TAG:-}_nve.log -screen none &
    fi
  done
  cd $REPO
done
wait
[ $MPS = 1 ] && echo quit | nvidia-cuda-mps-control
cd $W
tar czf "$OUT/water_md_logs.tgz" *.log *.dat 2>/dev/null
for log in *_nvt_*.log *_nve.log; do
  [ -f "$log" ] || continue
  last=$(grep -E "^ +[0-9]+ " "$log" | tail -1 | awk '{print "step", $1, "T", $3}')
  perf=$(grep -E "^Performance" "$log" | tail -1 | sed 's/.*, //')
  err=$(grep -m1 -E "ERROR|Lost atoms" "$log")
  summ=$(python3 "$REPO/tools/water_md_summary.py" "$log" 2>/dev/null | tail -1)
  echo "$log: $last | $perf | ${err:-no error} | $summ"
done
