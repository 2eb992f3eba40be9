#!/usr/bin/env bash
# prepare-device.sh: the git-ignored inputs the bench/device_*.sh scripts read on the GPU machine, made here (a fresh
# checkout has none of them): .device/googletest (Debian's googletest source: the GPU build compiles the tests with
# it), .device/models/water_192.xyz (frame 0 of ../shared/data/water_train.xyz, 192 atoms) and, unless --no-wheels,
# the wheels in .whl (tools/make_peer_wheels.sh: mace-torch for the benchmark models, cuEquivariance for the peers).
# Carry .device and .whl in the device tool's `carry`.
# usage: tools/prepare-device.sh [--no-wheels]
set -euo pipefail
cd "$(dirname "$0")/.."
src=/usr/src/googletest
[ -d "$src" ] || { echo "prepare-device: $src is missing: apt-get install googletest" >&2; exit 1; }
mkdir -p .device/models
rm -rf .device/googletest
cp -r "$src" .device/googletest
data=../shared/data/water_train.xyz
[ -f "$data" ] || { echo "prepare-device: $data is missing (the shared data beside the checkout)" >&2; exit 1; }
n=$(head -1 "$data" | tr -d '[:space:]')
head -n $((n + 2)) "$data" >.device/models/water_192.xyz
echo "prepare-device: .device/googletest, .device/models/water_192.xyz ($n atoms)"
if [ "${1:-}" != --no-wheels ]; then tools/make_peer_wheels.sh .whl; fi
du -sh .device .whl 2>/dev/null || true
