#!/usr/bin/env python3
"""check_nve.py: NVE energy conservation of the 192-atom water box with pair_style cgequi (fp64, CPU).
usage: check_nve.py LMP EXAMPLES_DIR STEPS [MAX_DRIFT_EV_PER_ATOM]
Prints the total-energy drift per atom (end minus start, and the largest excursion) and fails above
the limit (default 1e-5 eV/atom)."""
import os
import subprocess
import sys
import tempfile

lmp, examples, steps = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), int(sys.argv[3])
limit = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-5
with tempfile.TemporaryDirectory() as work:
    p = subprocess.run([lmp, "-in", os.path.join(examples, "in.water_nve"), "-var", "steps", str(steps), "-var", "every",
                        "10", "-log", os.path.join(work, "log"), "-screen", "none"], cwd=examples, capture_output=True,
                       text=True)
    log = open(os.path.join(work, "log")).read().splitlines()
if p.returncode:
    sys.exit(f"LAMMPS failed: {p.stdout[-2000:]} {p.stderr[-2000:]}")
k = next(i for i, l in enumerate(log) if l.split()[:2] == ["Step", "Time"])
rows = []
for l in log[k + 1:]:
    v = l.split()
    if len(v) != 6 or not v[0].isdigit():
        break
    rows.append([float(x) for x in v])
n_atoms = next(int(l.split()[0]) for l in log if l.strip().endswith("atoms") and l.split()[0].isdigit())
e0 = rows[0][5]
drift = (rows[-1][5] - e0) / n_atoms
excursion = max(abs(r[5] - e0) for r in rows) / n_atoms
ps = rows[-1][1] - rows[0][1]
print(f"NVE {steps} steps ({ps:.3f} ps, 0.5 fs), {n_atoms} atoms: drift {drift:.2e} eV/atom "
      f"({drift / ps:.2e} eV/atom/ps), max |E-E0| {excursion:.2e} eV/atom, T {rows[0][2]:.0f} -> {rows[-1][2]:.0f} K")
sys.exit(0 if excursion <= limit else 1)
