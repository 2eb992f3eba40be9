#!/usr/bin/env bash
# prepare-device.sh: the git-ignored inputs the bench/device_*.sh scripts read on the GPU machine, made here (a fresh
# checkout has none of them): .device/googletest (Debian's googletest source: the GPU build compiles the tests with
# it), .device/models/water_192.xyz (frame 0 of ../shared/data/water_train.xyz, 192 atoms), .device/lammps (Debian's
# LAMMPS source: cmake/ and src/'s own files with src/fmt/ and src/STUBS/, ~9 MB; `apt-get source`, which needs a deb-src
# line: added to /etc/apt/sources.list.d/debian.sources if missing) and, unless --no-wheels,
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
if [ ! -d .device/lammps ]; then
  srcs=/etc/apt/sources.list.d/debian.sources
  if [ -f $srcs ] && ! grep -q "deb-src" $srcs; then
    sed -i 's/^Types: deb$/Types: deb deb-src/' $srcs && apt-get update -qq
  fi
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get source -qq lammps >/dev/null 2>&1) || { echo "prepare-device: apt-get source lammps failed" >&2; exit 1; }
  s=$(echo "$tmp"/lammps-*/)
  mkdir -p .device/lammps/src
  cp -r "$s/cmake" .device/lammps/
  find "$s/src" -maxdepth 1 -type f -exec cp {} .device/lammps/src/ \;
  cp -r "$s/src/fmt" "$s/src/STUBS" .device/lammps/src/
  rm -rf "$tmp"
  echo "prepare-device: .device/lammps ($(du -sh .device/lammps | cut -f1))"
fi
if [ "${1:-}" != --no-wheels ]; then tools/make_peer_wheels.sh .whl; fi
du -sh .device .whl 2>/dev/null || true
