#!/usr/bin/env python3
"""check_nve.py: NVE energy conservation with pair_style cgequi (fp64, CPU) on the periodic solvent liquid
(../shared/data/solvent_liquid.xyz: 160 atoms of EC/EMC, the training domain of potentials/mace01-solvent.h5).
usage: check_nve.py LMP MODEL XYZ STEPS [MAX_DRIFT_EV_PER_ATOM]
Writes a LAMMPS data file from the XYZ and runs NVE from 300 K twice: STEPS at 0.5 fs and 2*STEPS at
0.25 fs (same simulated time). Prints the total-energy drift per atom (end minus start, per ps, and the
largest excursion). Passes when the 0.25 fs excursion is below the limit (default 1e-4 eV/atom) and the
excursion falls as dt^2 (ratio 3 to 5): the signature of forces that are exactly -dE/dx."""
import os
import re
import subprocess
import sys
import tempfile

MASS = {"H": 1.008, "C": 12.011, "O": 15.999}
lmp, model, xyz = (os.path.abspath(a) for a in sys.argv[1:4])
steps = int(sys.argv[4])
limit = float(sys.argv[5]) if len(sys.argv) > 5 else 1e-4

lines = open(xyz).read().splitlines()
n = int(lines[0])
lat = [float(x) for x in re.search(r'Lattice="([^"]+)"', lines[1]).group(1).split()]
if any(abs(lat[i]) > 1e-9 for i in (1, 2, 3, 5, 6, 7)):
    sys.exit("check_nve.py expects an orthorhombic cell")
atoms = [l.split()[:4] for l in lines[2:2 + n]]
types = sorted({a[0] for a in atoms}, key=lambda s: "HCO".index(s))

def run(dt_fs, steps):
    with tempfile.TemporaryDirectory() as work:
        with open(os.path.join(work, "s.data"), "w") as f:
            f.write(f"solvent liquid\n\n{n} atoms\n{len(types)} atom types\n\n0 {lat[0]} xlo xhi\n0 {lat[4]} ylo yhi\n"
                    f"0 {lat[8]} zlo zhi\n\nMasses\n\n")
            f.writelines(f"{i + 1} {MASS[t]}\n" for i, t in enumerate(types))
            f.write("\nAtoms # atomic\n\n")
            f.writelines(f"{i + 1} {types.index(a[0]) + 1} {a[1]} {a[2]} {a[3]}\n" for i, a in enumerate(atoms))
        with open(os.path.join(work, "in.nve"), "w") as f:
            f.write(f"""units metal
    atom_style atomic
    boundary p p p
    read_data s.data
    pair_style cgequi device cpu precision fp64
    pair_coeff * * {model} {' '.join(types)}
    velocity all create 300.0 4928459 mom yes rot yes dist gaussian
    timestep {dt_fs / 1000}
    fix nve all nve
    thermo_style custom step time temp pe ke etotal
    thermo_modify format float %.12f
    thermo 10
    run {steps}
    """)
        p = subprocess.run([lmp, "-in", "in.nve", "-log", "log", "-screen", "none"], cwd=work, capture_output=True, text=True)
        log = open(os.path.join(work, "log")).read().splitlines() if os.path.exists(os.path.join(work, "log")) else []
    if p.returncode:
        sys.exit(f"LAMMPS failed: {p.stdout[-2000:]} {p.stderr[-2000:]}")
    k = next(i for i, l in enumerate(log) if l.split()[:2] == ["Step", "Time"])
    rows = []
    for l in log[k + 1:]:
        v = l.split()
        if len(v) != 6 or not v[0].isdigit():
            break
        rows.append([float(x) for x in v])
    perf = next((l for l in log if l.startswith("Performance")), "")
    e0 = rows[0][5]
    drift = (rows[-1][5] - e0) / n
    excursion = max(abs(r[5] - e0) for r in rows) / n
    ps = rows[-1][1] - rows[0][1]
    print(f"NVE {steps} steps ({ps:.3f} ps at {dt_fs} fs), {n} atoms: drift {drift:.2e} eV/atom ({drift / ps:.2e} eV/atom/ps), "
          f"max |E-E0| {excursion:.2e} eV/atom, T {rows[0][2]:.0f} -> {rows[-1][2]:.0f} K; {perf}")
    return excursion


e_big = run(0.5, steps)
e_small = run(0.25, 2 * steps)
ratio = e_big / max(e_small, 1e-300)
print(f"excursion ratio 0.5 fs / 0.25 fs = {ratio:.2f} (dt^2 scaling gives 4)")
sys.exit(0 if e_small <= limit and 3.0 <= ratio <= 5.0 else 1)
