#!/usr/bin/env python3
"""sass_same.py: whether a change leaves the GPU kernels that already exist compiling to the same SASS, without device
time. It compiles one translation unit twice, from `git archive BASE src include` and from the working tree, for
sm_90 with -O3 (nvcc -cubin), disassembles both (cuobjdump -sass; it needs nvdisasm beside it: the pip wheels
nvidia-cuda-cuobjdump and -nvdisasm), and compares each function's instructions, addresses left out. The unit is
either one that includes the given headers (default kernels/gpu/conv.cuh: ~30 s, but only the kernels its
non-template host functions instantiate, the std forwards), or with --source the tree's own file, e.g.
src/kernels/gpu/mace_gpu.cu: every kernel the library launches (~6 minutes on two cores).
A kernel given a new defaulted template parameter has a new mangled name: --rename REGEX=REPLACEMENT rewrites the
new build's names before matching (re.sub; e.g. '(k_conv_fwd_std.*)ELb0EEv=\\1EEv' for a trailing `bool = false`).
usage: sass_same.py BASE [HEADER...] [--source PATH] [--rename REGEX=REPL] [--nvcc nvcc] [--cuobjdump cuobjdump]
Exit status 0 when every function of BASE's build has the same SASS in the new one."""
import argparse
import os
import re
import subprocess
import sys
import tempfile


def build(root, headers, source, out, nvcc):
    if source:
        tu = os.path.join(root, source)
    else:
        tu = os.path.join(out, "tu.cu")
        with open(tu, "w") as f:
            f.write('#include "kernels/gpu/vendor.h"\n')
            for h in headers:
                f.write('#include "%s"\n' % h)
    cubin = os.path.join(out, "tu.cubin")
    cmd = [nvcc, "-std=c++17", "-O3", "-arch=sm_90", "--expt-relaxed-constexpr", "-cubin",  # as CMakeLists.txt
           "-I", os.path.join(root, "src"), "-I", os.path.join(root, "include"), "-I", "/usr/include/hdf5/serial",
           "-o", cubin, tu]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit("nvcc failed in %s:\n%s" % (root, r.stderr[-3000:]))
    return cubin


# Each function's listing with the addresses left out but the encodings kept (the second /* 0x... */ word of each
# instruction holds its scheduling bits), so "the same" is stricter than sass_loops.kernels' instruction text.
def functions(cubin, cuobjdump, rename=None):
    text = subprocess.run([cuobjdump, "-sass", cubin], capture_output=True, text=True, check=True).stdout
    out = {}
    for part in re.split(r"\n\s*Function : ", text)[1:]:
        name = part.split("\n", 1)[0].strip()
        if rename:
            name = re.sub(rename[0], rename[1], name)
        body = [re.sub(r"/\*[0-9a-f]{4,}\*/", "", l).strip() for l in part.split("\n")[1:] if "/*" in l]
        out[name] = body
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base")
    ap.add_argument("headers", nargs="*", default=["kernels/gpu/conv.cuh"])
    ap.add_argument("--source", help="the tree's own file to compile instead (relative to its root)")
    ap.add_argument("--rename", help="REGEX=REPLACEMENT, applied to the new build's names")
    ap.add_argument("--nvcc", default="nvcc")
    ap.add_argument("--cuobjdump", default="cuobjdump")
    a = ap.parse_args()
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                         check=True).stdout.strip()
    rename = tuple(a.rename.split("=", 1)) if a.rename else None
    with tempfile.TemporaryDirectory() as tmp:
        base_root = os.path.join(tmp, "base")
        os.makedirs(base_root)
        archive = subprocess.run(["git", "-C", top, "archive", a.base, "src", "include"], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", base_root], input=archive, check=True)
        os.makedirs(os.path.join(tmp, "b"))
        os.makedirs(os.path.join(tmp, "n"))
        old = functions(build(base_root, a.headers, a.source, os.path.join(tmp, "b"), a.nvcc), a.cuobjdump)
        new = functions(build(top, a.headers, a.source, os.path.join(tmp, "n"), a.nvcc), a.cuobjdump, rename)
    same = [k for k in old if new.get(k) == old[k]]
    for k in old:
        if k not in new:
            print("only in %s: %s" % (a.base, k))
        elif new[k] != old[k]:
            print("differs: %s (%d -> %d instructions)" % (k, len(old[k]), len(new[k])))
    added = [k for k in new if k not in old]
    print("%d of %d functions of %s compile to the same SASS; %d new" % (len(same), len(old), a.base, len(added)))
    return 0 if len(same) == len(old) else 1


if __name__ == "__main__":
    sys.exit(main())
