#!/usr/bin/env python3
"""check_water_md.py: short MD of the 192-atom liquid-water box (examples/lammps/water_192.data) with the shipped
potentials (potentials/water-nequip-small.h5, potentials/water-mace-small.h5) through pair_style cgequi (CPU, fp64): EQUIL steps of Nose-Hoover NVT at
300 K, then STEPS of NVE, both at 0.5 fs, thermo every 10 steps.
usage: check_water_md.py LMP MODEL DATA [--equil 200] [--steps 200] [--max-drift 1e-3] [--max-fluct 2e-4]
                         [--max-excursion 5e-4]
Passes when LAMMPS ends cleanly with all 192 atoms, every thermo value is finite, the NVE temperature stays in
150-600 K, and the NVE total energy (per atom) has a linear-fit drift below MAX_DRIFT eV/atom/ps, a residual
standard deviation below MAX_FLUCT eV/atom and a largest |E - E0| below MAX_EXCURSION eV/atom. The defaults are
about 10x the values measured with the shipped potential (potentials/README.md)."""
import argparse
import math
import os
import subprocess
import sys
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("lmp")
ap.add_argument("model")
ap.add_argument("data")
ap.add_argument("--equil", type=int, default=200)
ap.add_argument("--steps", type=int, default=200)
ap.add_argument("--max-drift", type=float, default=1e-3)
ap.add_argument("--max-fluct", type=float, default=2e-4)
ap.add_argument("--max-excursion", type=float, default=5e-4)
args = ap.parse_args()
lmp, model, data = (os.path.abspath(p) for p in (args.lmp, args.model, args.data))

with tempfile.TemporaryDirectory() as work:
    with open(os.path.join(work, "in.md"), "w") as f:
        f.write(f"""units metal
atom_style atomic
boundary p p p
read_data {data}
pair_style cgequi device cpu precision fp64
pair_coeff * * {model} O H
velocity all create 300.0 4928459 mom yes rot yes dist gaussian
timestep 0.0005
thermo_style custom step time temp pe ke etotal atoms
thermo_modify format float %.12f lost error
fix nvt all nvt temp 300.0 300.0 0.025
thermo 50
run {args.equil}
unfix nvt
reset_timestep 0
fix nve all nve
thermo 10
run {args.steps}
""")
    p = subprocess.run([lmp, "-in", "in.md", "-log", "log", "-screen", "none"], cwd=work, capture_output=True,
                       text=True, env=dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1")))
    logf = os.path.join(work, "log")
    log = open(logf).read().splitlines() if os.path.exists(logf) else []
if p.returncode:
    sys.exit(f"FAIL: LAMMPS exited with {p.returncode}: {p.stdout[-2000:]} {p.stderr[-2000:]} {' '.join(log[-20:])}")

# the last thermo block is the NVE run
starts = [i for i, l in enumerate(log) if l.split()[:2] == ["Step", "Time"]]
if len(starts) < 2:
    sys.exit("FAIL: no NVE thermo block in the LAMMPS log")
rows = []
for l in log[starts[-1] + 1:]:
    v = l.split()
    if len(v) != 7 or not v[0].isdigit():
        break
    rows.append([float(x) for x in v])
natoms = int(rows[0][6]) if rows else 0
bad = []
if len(rows) != args.steps // 10 + 1:
    bad.append(f"{len(rows)} thermo rows, expected {args.steps // 10 + 1}")
if not all(math.isfinite(x) for r in rows for x in r):
    bad.append("non-finite thermo values")
if natoms != 192 or any(int(r[6]) != natoms for r in rows):
    bad.append(f"atom count changed or wrong: {[int(r[6]) for r in rows][:5]}...")
if bad:
    sys.exit("FAIL: " + "; ".join(bad))

t = [r[1] for r in rows]  # ps
e = [r[5] / natoms for r in rows]  # eV/atom
temps = [r[2] for r in rows]
tm, em = sum(t) / len(t), sum(e) / len(e)
slope = sum((a - tm) * (b - em) for a, b in zip(t, e)) / sum((a - tm) ** 2 for a in t)
resid = [b - (em + slope * (a - tm)) for a, b in zip(t, e)]
fluct = math.sqrt(sum(r * r for r in resid) / len(resid))
excursion = max(abs(b - e[0]) for b in e)
perf = next((l for l in reversed(log) if l.startswith("Performance")), "")
print(f"NVE {args.steps} steps ({t[-1] - t[0]:.3f} ps at 0.5 fs) after {args.equil} NVT steps, {natoms} atoms: "
      f"T {min(temps):.0f}-{max(temps):.0f} K (mean {sum(temps) / len(temps):.0f}); drift {slope:.2e} eV/atom/ps "
      f"(limit {args.max_drift:.0e}), fluctuation std {fluct:.2e} eV/atom (limit {args.max_fluct:.0e}), "
      f"max |E-E0| {excursion:.2e} eV/atom (limit {args.max_excursion:.0e}); {perf}")
ok = (abs(slope) <= args.max_drift and fluct <= args.max_fluct and excursion <= args.max_excursion
      and 150.0 <= min(temps) and max(temps) <= 600.0)
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
