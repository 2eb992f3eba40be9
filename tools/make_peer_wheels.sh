#!/usr/bin/env bash
# make_peer_wheels.sh: fill DIR (default .whl) with the wheels bench/device_peers.sh carries to the GPU machine
# (python 3.12, torch 2.11 + CUDA 13 there; nothing is fetched there):
#   DIR/        mace-torch 0.3.16 and the imports the GPU machine lacks (models, mace-torch timings)
#   DIR/cueq/   cuequivariance(-torch) 0.13.0; its two cu13 ops wheels (70 MiB) re-zipped without compression and
#               packed into one .tar.xz (~26 MiB) to fit the 64 MiB transfer limit (device_peers.sh unpacks it)
#   DIR/oeq/    openequivariance 0.7.0: PyPI has only its sdist, whose build downloads libtorch, so it is built
#               here against an installed torch 2.11 (pip install torch==2.11.0) with --oeq (session 5 ran this
#               pip wheel command by hand; the script form is not exercised by CI); plus ninja
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
if [ $OEQ = 1 ]; then # needs torch 2.11 and openequivariance's build requirements (its pyproject.toml) installed
  torch_dir=$(python3 -c "import torch, os; print(os.path.dirname(torch.__file__))")
  sdist=$(mktemp -d)
  python3 -m pip download -q --no-deps --no-binary=:all: -d "$sdist" openequivariance==0.7.0
  tar xf "$sdist"/openequivariance-0.7.0.tar.gz -C "$sdist"
  python3 -m pip wheel -q --no-deps --no-build-isolation -w "$DIR/oeq" "$sdist/openequivariance-0.7.0" \
    -C cmake.define.FETCHCONTENT_SOURCE_DIR_LIBTORCH="$torch_dir" \
    -C cmake.define.CMAKE_DISABLE_FIND_PACKAGE_hip=ON -C cmake.define.CMAKE_DISABLE_FIND_PACKAGE_rocblas=ON
  rm -rf "$sdist"
fi
du -sh "$DIR"
