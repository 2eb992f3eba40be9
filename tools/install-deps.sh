#!/usr/bin/env bash
# install-deps.sh: install the Debian/Ubuntu packages cgequi needs to build and test (only the missing ones).
set -euo pipefail
pkgs=(cmake make gcc g++ libhdf5-dev hdf5-tools libgtest-dev googletest clang libclang-rt-dev
      liblammps-dev libfmt-dev openmpi-bin libopenmpi-dev python3 python3-pip hipcc)
# Debian 12 names the sanitizer/fuzzer runtime libclang-rt-14-dev
if ! apt-cache show libclang-rt-dev >/dev/null 2>&1; then pkgs=("${pkgs[@]/libclang-rt-dev/libclang-rt-14-dev}"); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
echo "installing: ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
