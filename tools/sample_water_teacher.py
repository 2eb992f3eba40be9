#!/usr/bin/env python3
"""sample_water_teacher.py: sample liquid-water frames from MD with a stable teacher potential (by default
potentials/water-nequip-small.h5) through LAMMPS `pair_style cgequi`, and write them as extended XYZ with the
teacher's energies and forces (REF_energy, REF_forces, config_type=teacher), for training a student model
(tools/train_water_mace.py --extra FILE).

Why: the ten DFT frames of ../shared/data/water_train.xyz sample too little of the liquid for a MACE fitted to them
to stay stable in NVT (potentials/README.md). The NequIP model trained on the same frames holds 20 ps of NVT and NVE;
frames from its own MD, labelled by it, show the student the configurations that MD visits. The labels are the
teacher's, not DFT: the student's held-out errors are still measured against the DFT frame.

usage: python3 tools/sample_water_teacher.py --temp 300 --equil 2000 --steps 10000 --every 100 \
           --seed 4928459 --out /tmp/teacher_300.xyz [--model FILE] [--lmp build/lmp_cgequi]"""
import argparse
import os
import subprocess
import tempfile

import ase
import ase.io
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPECIES = {1: "O", 2: "H"}

INPUT = """units metal
atom_style atomic
boundary p p p
read_data {data}
pair_style cgequi device cpu
pair_coeff * * {model} O H
velocity all create {temp} {seed} mom yes rot yes dist gaussian
timestep 0.0005
fix nvt all nvt temp {temp} {temp} 0.05
thermo_style custom step temp pe atoms
thermo_modify format float %.10f
thermo 500
run {equil}
reset_timestep 0
thermo {every}
dump frames all custom {every} {dump} id type x y z fx fy fz
dump_modify frames sort id format float %.10f
run {steps}
"""


def read_dump(path):
    """LAMMPS custom dump -> list of (step, box lengths, types, positions, forces)"""
    frames = []
    with open(path) as f:
        lines = f.read().splitlines()
    k = 0
    while k < len(lines):
        assert lines[k].startswith("ITEM: TIMESTEP")
        step = int(lines[k + 1])
        n = int(lines[k + 3])
        box = np.array([[float(v) for v in lines[k + 5 + d].split()[:2]] for d in range(3)])
        cols = lines[k + 8].split()[2:]
        data = np.array([[float(v) for v in lines[k + 9 + j].split()] for j in range(n)])
        k += 9 + n
        c = {name: i for i, name in enumerate(cols)}
        frames.append((step, box, data[:, c["type"]].astype(int), data[:, [c["x"], c["y"], c["z"]]] - box[:, 0],
                       data[:, [c["fx"], c["fy"], c["fz"]]]))
    return frames


def read_thermo_pe(log):
    """step -> pe from the thermo rows of the production run (after the last 'Step' header)"""
    pe, cols = {}, None
    for line in open(log):
        w = line.split()
        if w[:1] == ["Step"]:
            cols, pe = w, {}
        elif cols and len(w) == len(cols) and w[0].isdigit():
            pe[int(w[0])] = float(w[cols.index("PotEng")])
        elif w[:1] == ["Loop"]:
            cols = None
    return pe


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--temp", type=float, default=300.0)
    ap.add_argument("--equil", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=10000)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--seed", type=int, default=4928459)
    ap.add_argument("--model", default=os.path.join(REPO, "potentials", "water-nequip-small.h5"))
    ap.add_argument("--data", default=os.path.join(REPO, "examples", "lammps", "water_192.data"))
    ap.add_argument("--lmp", default=os.path.join(REPO, "build", "lmp_cgequi"))
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        dump, log = os.path.join(tmp, "frames.dump"), os.path.join(tmp, "log.lammps")
        with open(os.path.join(tmp, "in.sample"), "w") as f:
            f.write(INPUT.format(data=os.path.abspath(args.data), model=os.path.abspath(args.model), temp=args.temp,
                                 seed=args.seed, equil=args.equil, every=args.every, dump=dump, steps=args.steps))
        subprocess.run([args.lmp, "-in", "in.sample", "-log", log, "-screen", "none"], cwd=tmp, check=True)
        pe = read_thermo_pe(log)
        out = []
        for step, box, types, pos, forces in read_dump(dump):
            if step == 0 or step not in pe:
                continue  # the first frame repeats the end of the equilibration
            a = ase.Atoms([SPECIES[t] for t in types], positions=pos, cell=np.diag(box[:, 1] - box[:, 0]), pbc=True)
            a.info.update(REF_energy=pe[step], config_type="teacher", teacher=os.path.basename(args.model),
                          temperature=args.temp, md_step=step)
            a.arrays["REF_forces"] = forces
            out.append(a)
    ase.io.write(args.out, out, format="extxyz")
    e = np.array([a.info["REF_energy"] for a in out])
    print(f"{len(out)} frames at {args.temp} K -> {args.out}; energy {e.mean():.3f} +- {e.std():.3f} eV")


if __name__ == "__main__":
    main()
