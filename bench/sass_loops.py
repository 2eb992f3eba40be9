#!/usr/bin/env python3
"""sass_loops.py: the loops of GPU kernels in a SASS listing, largest first, with their instruction mix. A loop is
the span from a backward branch's target to the branch, so the counts are static (each instruction once, whatever
path runs). No device time: compile a cubin here and disassemble it, e.g. for MACE-MP-0's layer-1 reverse:
  nvcc -std=c++17 -O3 -arch=sm_90 -cubin -I src -I include -o k.cubin k.cu   (k.cu: includes kernels/gpu/conv.cuh and
      instantiates `template __global__ void k_conv_bwd_warp<2, 16, false>(...);`)
  cuobjdump -sass k.cubin > k.sass   (cuobjdump and nvdisasm: the pip wheels nvidia-cuda-cuobjdump, -nvdisasm)
usage: sass_loops.py LISTING [NAME_SUBSTRING] [--loops N]"""
import argparse
import collections
import re


def kernels(text):
    for part in re.split(r"\n\s*Function : ", text)[1:]:
        name = part.split("\n", 1)[0].strip()
        ins = []
        for line in part.split("\n"):
            m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
            if m:
                ins.append((int(m.group(1), 16), m.group(2)))
        yield name, ins


def loops(ins):
    at = {a: i for i, (a, _) in enumerate(ins)}
    found = []
    for i, (a, t) in enumerate(ins):
        m = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", t)
        if m and int(m.group(1), 16) < a and int(m.group(1), 16) in at:
            s = at[int(m.group(1), 16)]
            found.append((i - s + 1, s, i))
    return sorted(found, reverse=True)


def opcode(t):
    t = re.sub(r"^@!?U?P\w+\s+", "", t)  # predicate
    return t.split()[0].split(".")[0]


def main():
    ap = argparse.ArgumentParser(description="the loops of GPU kernels in a SASS listing (cuobjdump -sass)")
    ap.add_argument("listing")
    ap.add_argument("name", nargs="?", default="", help="only kernels whose mangled name contains this")
    ap.add_argument("--loops", type=int, default=4, help="loops shown per kernel (largest first)")
    a = ap.parse_args()
    for name, ins in kernels(open(a.listing).read()):
        if a.name not in name:
            continue
        print(f"{name}: {len(ins)} instructions")
        for size, s, e in loops(ins)[:a.loops]:
            mix = collections.Counter(opcode(t) for _, t in ins[s:e + 1])
            print(f"  loop of {size}: " + ", ".join(f"{k} {v}" for k, v in mix.most_common(14)))


if __name__ == "__main__":
    main()
