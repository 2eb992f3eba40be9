#!/usr/bin/env python3
"""check_lammps_errors.py: pair_style cgequi turns user mistakes into clear LAMMPS errors, not crashes.
usage: check_lammps_errors.py LMP MODEL DATA(O,H types)"""
import os
import subprocess
import sys
import tempfile

lmp, model, data = (os.path.abspath(a) for a in sys.argv[1:4])
base = "atom_style atomic\nboundary p p p\nread_data {data}\n"
cases = [
    ("wrong units", "units real\n" + base + "pair_style cgequi\npair_coeff * * {model} O H\nrun 0\n", "needs 'units metal'"),
    ("missing model file", "units metal\n" + base + "pair_style cgequi\npair_coeff * * /nonexistent/x.h5 O H\nrun 0\n",
     "cannot find model file"),
    ("element not in model", "units metal\n" + base + "pair_style cgequi\npair_coeff * * {model} O Na\nrun 0\n",
     "element Na (type 2) is not in model"),
    ("not an element", "units metal\n" + base + "pair_style cgequi\npair_coeff * * {model} O Xq\nrun 0\n",
     "is not an element symbol"),
    ("type left unmapped but present", "units metal\n" + base + "pair_style cgequi\npair_coeff * * {model} O NULL\nrun 0\n",
     "type 2 is NULL, but cgequi is the only pair style"),
    ("wrong number of elements", "units metal\n" + base + "pair_style cgequi\npair_coeff * * {model} O\nrun 0\n",
     "element names (one per atom type"),
    ("unknown keyword", "units metal\n" + base + "pair_style cgequi speed fast\npair_coeff * * {model} O H\nrun 0\n",
     "unknown keyword speed"),
    ("gpu without gpu build", "units metal\n" + base + "pair_style cgequi device cuda\npair_coeff * * {model} O H\nrun 0\n",
     "no GPU backend"),
    ("corrupt model", "units metal\n" + base + "pair_style cgequi\npair_coeff * * {data} O H\nrun 0\n", "not an HDF5 file"),
    ("overlapping atoms", "units metal\natom_style atomic\nboundary p p p\nread_data overlap.data\n"
     "pair_style cgequi\npair_coeff * * {model} O H\nrun 0\n", "atoms 2 at (5.9, 5, 5) and 3 at (5.9, 5, 5)"),
]
# three atoms in a 10 A box, atoms 2 and 3 on the same spot
OVERLAP = """overlap test

3 atoms
2 atom types

0 10 xlo xhi
0 10 ylo yhi
0 10 zlo zhi

Masses

1 15.999
2 1.008

Atoms # atomic

1 1 5.0 5.0 5.0
2 2 5.9 5.0 5.0
3 2 5.9 5.0 5.0
"""
failed = 0
with tempfile.TemporaryDirectory() as work:
    for name, text, expect in cases:
        with open(os.path.join(work, "in.err"), "w") as f:
            f.write(text.format(model=model, data=data))
        with open(os.path.join(work, "overlap.data"), "w") as f:
            f.write(OVERLAP)
        p = subprocess.run([lmp, "-in", "in.err", "-log", "none", "-echo", "none"], cwd=work, capture_output=True,
                           text=True, timeout=120)
        out = p.stdout + p.stderr
        crashed = p.returncode < 0 or "Segmentation" in out or "core dumped" in out
        ok = p.returncode != 0 and expect in out and not crashed
        msg = next((l for l in out.splitlines() if "ERROR" in l), out.strip().splitlines()[-1] if out.strip() else "")
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {msg.strip()}")
        failed += not ok
print(f"{len(cases) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
