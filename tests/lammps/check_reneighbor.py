#!/usr/bin/env python3
"""check_reneighbor.py: pair_style cgequi keeps candidate pairs (cutoff + skin) between LAMMPS re-neighborings and
rebuilds them when LAMMPS re-neighbors, sorts or migrates atoms, or an atom has moved more than half the skin.
Runs 100 NVE steps of the 192-atom water box (fp64, CPU) three ways and compares the trajectories:
  reference: skin 2.0 A, re-neighbor when needed, no atom sorting;
  sorted:    skin 0.1 A and atoms re-sorted every 5 steps (LAMMPS re-neighbors almost every step, indices change);
  own:       skin 0.4 A and LAMMPS told never to re-neighbor in the run, ghosts out to 8 A (cgequi's half-skin
             check rebuilds the candidates itself);
  own_null:  the same with three resting atoms of a third type that cgequi leaves to another style (NULL; pair style
             zero beside it): its points are then not LAMMPS's atoms in order, and the positions are gathered.
All four must give the same energies to 1e-9 relative (only the summation order differs).
usage: check_reneighbor.py LMP MODEL DATA"""
import os
import subprocess
import sys
import tempfile

lmp, model, data = (os.path.abspath(a) for a in sys.argv[1:4])
SETUPS = {
    "reference": "neighbor 2.0 bin\nneigh_modify every 1 delay 0 check yes\natom_modify sort 0 0.0",
    "sorted": "neighbor 0.1 bin\nneigh_modify every 1 delay 0 check yes\natom_modify sort 5 1.0",
    "own": "neighbor 0.4 bin\nneigh_modify every 1000 delay 0 check no\natom_modify sort 0 0.0\ncomm_modify cutoff 8.0",
}
SETUPS["own_null"] = SETUPS["own"]
PAIR = "pair_style cgequi device cpu precision fp64\npair_coeff * * {model} O H"
# own_null: atoms 193-195 come after the water's, so the water's velocities are drawn as in the other runs
PAIR_NULL = """mass 3 1.0
create_atoms 3 single 1.0 1.0 1.0
create_atoms 3 single 4.0 6.0 2.0
create_atoms 3 single 7.0 3.0 9.0
pair_style hybrid/overlay cgequi device cpu precision fp64 zero 5.0
pair_coeff * * cgequi {model} O H NULL
pair_coeff * * zero"""


def run(name):
    with tempfile.TemporaryDirectory() as work:
        with open(os.path.join(work, "in.test"), "w") as f:
            f.write(f"""units metal
atom_style atomic
boundary p p p
{SETUPS[name]}
read_data {data}{" extra/atom/types 1" if name == "own_null" else ""}
{(PAIR_NULL if name == "own_null" else PAIR).format(model=model)}
group water type 1 2
velocity water create 300.0 4928459 mom yes rot yes dist gaussian
timestep 0.0005
fix nve all nve
thermo_style custom step pe etotal
thermo_modify format float %.12f
thermo 50
run 100
""")
        p = subprocess.run([lmp, "-in", "in.test", "-log", "log", "-screen", "none"], cwd=work, capture_output=True,
                           text=True)
        log = open(os.path.join(work, "log")).read().splitlines() if os.path.exists(os.path.join(work, "log")) else []
    if p.returncode:
        sys.exit(f"{name}: LAMMPS failed: {p.stdout[-2000:]} {p.stderr[-2000:]}")
    k = next(i for i, l in enumerate(log) if l.split()[:2] == ["Step", "PotEng"])
    rows = [[float(x) for x in l.split()] for l in log[k + 1:k + 4]]
    builds = next((l for l in log if l.startswith("Neighbor list builds")), "?")
    print(f"{name}: step {rows[-1][0]:.0f} pe {rows[-1][1]:.10f} etotal {rows[-1][2]:.10f} ({builds})")
    return rows


ref = run("reference")
ok = True
for name in ("sorted", "own", "own_null"):
    rows = run(name)
    err = max(abs(a[c] - b[c]) / abs(b[c]) for a, b in zip(rows, ref) for c in (1, 2))
    print(f"  {name} vs reference: largest relative energy difference {err:.2e}")
    ok = ok and err < 1e-9
sys.exit(0 if ok else 1)
