#!/usr/bin/env bash
# make_peer_wheels.sh: fill DIR (default .whl) with the wheels bench/device_peers.sh carries to the GPU machine
# (python 3.12, torch 2.11 + CUDA 13 there; nothing is fetched there):
#   DIR/        mace-torch 0.3.16 and the imports the GPU machine lacks (models, mace-torch timings)
#   DIR/cueq/   cuequivariance(-torch) 0.13.0; its two cu13 ops wheels (70 MiB) re-zipped without compression and
#               packed into one .tar.xz (~26 MiB) to fit the 64 MiB transfer limit (device_peers.sh unpacks it)
#   DIR/oeq/    openequivariance 0.7.0: PyPI has only its sdist, whose build downloads libtorch, so with --oeq it is
#               built here in a Python 3.12 venv (PY312) against torch 2.11.0 from PyPI (CUDA 13) and the CUDA
#               toolkit's nvcc (session 45 ran these commands by hand; the script form is not exercised by CI);
#               plus ninja
# usage: tools/make_peer_wheels.sh [DIR] [--oeq]
set -euo pipefail
DIR=${1:-.whl}
[ "${1:-}" = "--oeq" ] && DIR=.whl
OEQ=0
for a in "$@"; do [ "$a" = "--oeq" ] && OEQ=1; done
mkdir -p "$DIR/cueq" "$DIR/oeq"
get() { # dest, packages...
  local d=$1
  shift
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$d" "$@"
}
get "$DIR" mace-torch==0.3.16 e3nn==0.4.4 ase matscipy lmdb orjson torch-ema
get "$DIR/cueq" cuequivariance==0.13.0 cuequivariance-torch==0.13.0 platformdirs
get "$DIR/oeq" ninja
ops=$(mktemp -d)
get "$ops" cuequivariance-ops-cu13==0.13.0 cuequivariance-ops-torch-cu13==0.13.0
python3 - "$ops" "$DIR/cueq/cueq_ops_cu13-0.13.0-wheels.tar.xz" <<'EOF'
import glob, os, sys, tarfile, zipfile
src, out = sys.argv[1], sys.argv[2]
names = []
for w in sorted(glob.glob(os.path.join(src, "*.whl"))):
    stored = w + ".stored"
    with zipfile.ZipFile(w) as zi, zipfile.ZipFile(stored, "w", zipfile.ZIP_STORED) as zo:
        for info in zi.infolist():  # the same files, byte for byte, without deflate (xz compresses better)
            zo.writestr(info, zi.read(info.filename), compress_type=zipfile.ZIP_STORED)
    names.append((stored, os.path.basename(w)))
with tarfile.open(out, "w:xz", preset=9) as t:
    for path, name in names:
        t.add(path, arcname=name)
print(f"{out}: {os.path.getsize(out) / 2**20:.1f} MiB")
EOF
rm -rf "$ops"
if [ $OEQ = 1 ]; then # the GPU machine's Python (3.12) and torch (2.11.0, CUDA 13: PyPI's default build) in a venv
  PY=${PY312:-python3.12}  # e.g. PY312=/root/.pyenv/versions/3.12.1/bin/python3.12
  venv=$(mktemp -d)
  "$PY" -m venv "$venv"
  "$venv/bin/pip" install -q torch==2.11.0 setuptools setuptools-scm scikit-build-core nanobind cmake ninja numpy
  torch_dir=$("$venv/bin/python" -c "import torch, os; print(os.path.dirname(torch.__file__))")
  sdist=$(mktemp -d)
  "$venv/bin/pip" download -q --no-deps --no-binary=:all: -d "$sdist" openequivariance==0.7.0
  tar xf "$sdist"/openequivariance-0.7.0.tar.gz -C "$sdist"
  # nvcc on PATH (CUDA 13 toolkit); libtorch from the venv's torch instead of a download
  PATH=$venv/bin:$PATH:/usr/local/cuda/bin CMAKE_BUILD_PARALLEL_LEVEL=2 "$venv/bin/pip" wheel -q --no-deps \
    --no-build-isolation -w "$DIR/oeq" "$sdist/openequivariance-0.7.0" \
    -C cmake.define.FETCHCONTENT_SOURCE_DIR_LIBTORCH="$torch_dir" \
    -C cmake.define.CMAKE_DISABLE_FIND_PACKAGE_hip=ON -C cmake.define.CMAKE_DISABLE_FIND_PACKAGE_rocblas=ON
  rm -rf "$sdist" "$venv"
fi
du -sh "$DIR"
