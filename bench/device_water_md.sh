#!/usr/bin/env bash
# device_water_md.sh LMP MODEL.h5 INPUT_DIR SECONDS: on the GPU machine, the long water runs of potentials/README.md
# (20 ps NVT for the O-O RDF and 20 ps NVE after 1 ps NVT, 192 atoms, 0.5 fs) in precision fp32, both at once on
# the one GPU, each stopped after SECONDS if unfinished (restart files are written every 10,000 steps).
# TAG (default gpu) names the run: its work folder /tmp/water_md_TAG and its files in $OUT.
set -u
LMP=$1 MODEL=$(realpath "$2") IN=$(realpath "$3") SECS=${4:-400}
OUT=${OUT:-device-out}
TAG=${TAG:-gpu}
W=/tmp/water_md_$TAG && mkdir -p $W && cp examples/lammps/water_192.data $W/
for f in in.water_rdf in.water_nve; do
  sed -e "s#../../potentials/water-mace-small.h5#$MODEL#" -e 's/^pair_style cgequi device ${dev}$/pair_style cgequi device ${dev} precision fp32/' \
    "$IN/$f" > $W/$f
done
cd $W
OMP_NUM_THREADS=4 timeout $SECS $LMP -in in.water_rdf -var dev cuda -var equil 2000 -var steps 40000 -log water_rdf.log -screen none &
OMP_NUM_THREADS=4 timeout $SECS $LMP -in in.water_nve -var dev cuda -var equil 2000 -var steps 40000 -var every 100 \
  -log water_nve.log -screen none &
wait
for f in water_rdf.log water_nve.log water_rdf_OO.dat; do [ -f $f ] && gzip -c $f > "$OUT/${TAG}_$f.gz"; done
grep -E "^Performance|ERROR" water_rdf.log water_nve.log | sed "s/^/$TAG /"
