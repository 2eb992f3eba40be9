#!/usr/bin/env python3
"""check_evaporate.py: atoms removed during a run (fix evaporate) are handled: the run continues, and the
final configuration's energy and forces from LAMMPS still equal `cgequi eval` (via check_lammps.py).
usage: check_evaporate.py LMP MODEL DATA(O,H types)"""
import os
import subprocess
import sys
import tempfile

lmp, model, data = (os.path.abspath(a) for a in sys.argv[1:4])
here = os.path.dirname(os.path.abspath(__file__))
cgequi = os.path.join(os.path.dirname(lmp), "cgequi")
with tempfile.TemporaryDirectory() as work:
    with open(os.path.join(work, "in.evap"), "w") as f:
        f.write(f"""units metal
atom_style atomic
boundary p p p
read_data {data}
pair_style cgequi device cpu
pair_coeff * * {model} O H
velocity all create 300.0 12345
timestep 0.0002
fix nve all nve
region whole block INF INF INF INF INF INF
fix ev all evaporate 4 5 whole 4242
thermo 4
run 20
write_data final.data
""")
    p = subprocess.run([lmp, "-in", "in.evap", "-log", "log", "-screen", "none"], cwd=work, capture_output=True,
                       text=True)
    log = open(os.path.join(work, "log")).read() if os.path.exists(os.path.join(work, "log")) else ""
    if p.returncode:
        sys.exit(f"LAMMPS failed with atoms being removed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}{log[-2000:]}")
    n_final = int(open(os.path.join(work, "final.data")).read().split(" atoms")[0].split()[-1])
    print(f"fix evaporate: 192 -> {n_final} atoms during the run")
    if n_final >= 192:
        sys.exit("no atoms were removed")
    q = subprocess.run([sys.executable, os.path.join(here, "check_lammps.py"), "--lmp", lmp, "--cgequi", cgequi,
                        "--model", model, "--data", os.path.join(work, "final.data"), "--elements", "O H"])
    sys.exit(q.returncode)
