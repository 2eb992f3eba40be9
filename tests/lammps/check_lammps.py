#!/usr/bin/env python3
"""check_lammps.py: run a structure through LAMMPS with pair_style cgequi and through `cgequi eval`
and compare energy, forces, pressure tensor, per-atom energies and per-atom virials (pure Python).

usage: check_lammps.py --lmp "CMD" --cgequi build/cgequi --model M.h5 --data F.data --elements "O H"
                       [--newton on|off] [--ranks N] [--processors "4 1 1"] [--tol 1e-10] [--plugin P.so]
                       [--device cpu|cuda] [--precision fp64|fp32] [--gpu-id N]
The reference (`cgequi eval`) is always the CPU's float64; --device cuda runs the pair style on the GPU (one GPU per
rank by node-local rank, or every rank on --gpu-id N).
Exit status 0 when every quantity agrees within the relative tolerance."""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

NKTV2P = 1.6021765e6  # LAMMPS metal units: eV/A^3 -> bar

SYMBOL_Z = {"H": 1, "C": 6, "N": 7, "O": 8, "F": 9, "Li": 3, "Si": 14}


def run_lammps(args, work):
    plugin = f"plugin load {os.path.abspath(args.plugin)}\n" if args.plugin else ""
    model = os.path.abspath(args.model)
    style = f"device {args.device} precision {args.precision}" + (f" gpu_id {args.gpu_id}" if args.gpu_id >= 0 else "")
    if "NULL" in args.elements.split():  # NULL types are left to another style: overlay a zero potential
        pair = (f"pair_style hybrid/overlay cgequi {style} zero 4.0\n"
                f"pair_coeff * * zero\npair_coeff * * cgequi {model} {args.elements}")
    else:
        pair = f"pair_style cgequi {style}\npair_coeff * * {model} {args.elements}"
    procs = f"processors {args.processors}\n" if args.processors else ""
    inp = f"""{plugin}units metal
atom_style atomic
boundary {args.boundary}
newton {args.newton}
{procs}read_data {os.path.abspath(args.data)}
velocity all set 0.0 0.0 0.0
{pair}
compute pe all pe/atom
compute st all stress/atom NULL
compute cst all centroid/stress/atom NULL
variable vol equal vol
thermo_style custom step pe pxx pyy pzz pxy pxz pyz vol lx ly lz xy xz yz xlo ylo zlo
thermo_modify format float %.17g
dump d all custom 1 dump.out id type x y z fx fy fz c_pe c_st[1] c_st[2] c_st[3] c_st[4] c_st[5] c_st[6] c_cst[1] c_cst[2] c_cst[3]
dump_modify d format float %.17g sort id
run 0
"""
    with open(os.path.join(work, "in.check"), "w") as f:
        f.write(inp)
    lmp = args.lmp.split()
    lmp[0] = os.path.abspath(lmp[0]) if os.path.exists(lmp[0]) else lmp[0]
    cmd = lmp + ["-in", "in.check", "-log", "log.check", "-screen", "none"]
    if args.ranks > 1:
        cmd = args.mpirun.split() + ["-np", str(args.ranks)] + cmd
    # Open MPI's session directory under this test's own folder: two mpiruns starting at once (ctest -j) under one
    # /tmp can race on creating /tmp/ompi.<host>.<uid> ("mkdir ... File exists", orte_init fails)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1",
               OMPI_MCA_orte_tmpdir_base=work, TMPDIR=work)
    if args.expect_rows:
        env["CGQ_PAIR_TIMING"] = "1"  # each rank's timing line says how its rows traveled
    p = subprocess.run(cmd, cwd=work, capture_output=True, text=True, env=env)
    log = open(os.path.join(work, "log.check")).read() if os.path.exists(os.path.join(work, "log.check")) else ""
    if p.returncode != 0:
        sys.exit(f"LAMMPS failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}\n{log[-3000:]}")
    if args.expect_rows:
        lines = [l for l in p.stderr.splitlines() if l.startswith("pair cgequi timing, rank") and " rows" in l]
        if len(lines) != args.ranks or not all(args.expect_rows in l for l in lines):
            sys.exit(f"expected every rank's rows to travel '{args.expect_rows}'; the ranks' timing lines:\n" +
                     "\n".join(lines))
    lines = log.splitlines()
    k = next(i for i, l in enumerate(lines) if l.split()[:2] == ["Step", "PotEng"])
    vals = [float(x) for x in lines[k + 1].split()]
    names = lines[k].split()
    th = dict(zip(names, vals))
    atoms = []
    dump = open(os.path.join(work, "dump.out")).read().splitlines()
    start = dump.index(next(l for l in dump if l.startswith("ITEM: ATOMS"))) + 1
    for l in dump[start:]:
        v = l.split()
        atoms.append([int(v[0]), int(v[1])] + [float(x) for x in v[2:]])
    return th, atoms


def run_cgequi(args, th, atoms, work):
    types = args.elements.split()
    cell = [[th["Lx"], 0, 0], [th["Xy"], th["Ly"], 0], [th["Xz"], th["Yz"], th["Lz"]]]
    lattice = " ".join(f"{x:.17g}" for row in cell for x in row)
    pbc = " ".join("T" if b == "p" else "F" for b in args.boundary.split())
    with open(os.path.join(work, "s.xyz"), "w") as f:
        f.write(f"{sum(types[a[1] - 1] != 'NULL' for a in atoms)}\nLattice=\"{lattice}\" pbc=\"{pbc}\" Properties=species:S:1:pos:R:3\n")
        origin = (th["Xlo"], th["Ylo"], th["Zlo"])
        for a in atoms:
            if types[a[1] - 1] == "NULL":
                continue
            f.write(f"{types[a[1] - 1]} {a[2] - origin[0]:.17g} {a[3] - origin[1]:.17g} {a[4] - origin[2]:.17g}\n")
    p = subprocess.run([os.path.abspath(args.cgequi), "eval", os.path.abspath(args.model), "s.xyz", "--device", "cpu",
                        "--precision", "fp64"], cwd=work, capture_output=True,
                       text=True)
    if p.returncode != 0:
        sys.exit(f"cgequi eval failed: {p.stderr}")
    return json.loads(p.stdout.splitlines()[0])


def rel(a, b, scale):
    return abs(a - b) / max(scale, 1e-300)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lmp", required=True)
    ap.add_argument("--cgequi", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--elements", required=True)
    ap.add_argument("--boundary", default="p p p")
    ap.add_argument("--newton", default="on")
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--processors", default="")
    ap.add_argument("--plugin", default="")
    ap.add_argument("--tol", type=float, default=1e-10)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where the pair style runs")
    ap.add_argument("--precision", default="fp64", choices=["fp64", "fp32"])
    ap.add_argument("--gpu-id", type=int, default=-1, help="every rank on this GPU (default: one GPU per rank)")
    ap.add_argument("--mpirun", default="mpirun.openmpi --oversubscribe", help="MPI launcher (must match LAMMPS's MPI)")
    ap.add_argument("--expect-rows", default="", help="text every rank's timing line must show about how its rows "
                    "traveled between ranks (e.g. \"staged in the peer's memory\")")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        th, atoms = run_lammps(args, work)
        ref = run_cgequi(args, th, atoms, work)
    types = args.elements.split()
    null_forces = [x for a in atoms if types[a[1] - 1] == "NULL" for x in a[5:8]]
    atoms = [a for a in atoms if types[a[1] - 1] != "NULL"]  # eval saw only the mapped atoms, in this order
    n = len(atoms)
    E = ref["energy"]
    F = ref["forces"]
    fscale = max(abs(x) for r in F for x in r)
    W = ref["virial"]
    wscale = max(abs(x) for r in W for x in r)
    vol = th["Volume"]
    errs = {}
    errs["energy"] = rel(th["PotEng"], E, abs(E))
    errs["forces"] = max(rel(a[5 + k], F[i][k], fscale) for i, a in enumerate(atoms) for k in range(3))
    # pressure with velocities zeroed: P = W / V (bar)
    comp = {"Pxx": (0, 0), "Pyy": (1, 1), "Pzz": (2, 2), "Pxy": (0, 1), "Pxz": (0, 2), "Pyz": (1, 2)}
    errs["pressure_tensor"] = max(rel(th[k] * vol / NKTV2P, W[a][b], wscale) for k, (a, b) in comp.items())
    ae = ref["atomic_energies"]
    escale = max(abs(x) for x in ae)
    errs["atomic_energies"] = max(rel(a[8], ae[i], escale) for i, a in enumerate(atoms))
    # per-atom virial: stress/atom = -W_i * nktv2p; sum over atoms equals the virial
    sums = [sum(-a[9 + c] / NKTV2P for a in atoms) for c in range(6)]
    order = [(0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2)]
    errs["atomic_virial_sum"] = max(rel(sums[c], W[a][b], wscale) for c, (a, b) in enumerate(order))
    if null_forces:
        errs["forces_on_NULL_atoms"] = max(abs(x) for x in null_forces) / fscale
    errs["centroid_vs_stress_atom_diag"] = max(rel(a[9 + c], a[15 + c], wscale * NKTV2P) for a in atoms for c in range(3))
    ok = all(v <= args.tol for v in errs.values())
    desc = (f"{os.path.basename(args.data)} N={n} ranks={args.ranks} newton={args.newton} {args.device} {args.precision} "
            f"{args.processors}").strip()
    print(f"{desc}: " + "  ".join(f"{k} {v:.1e}" for k, v in errs.items()) + ("  ok" if ok else "  FAIL"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
