#!/usr/bin/env python3
"""train_water_mace.py: train the small demonstration MACE water potential on ../shared/data/water_train.xyz
(10 frames of 64 H2O, revPBE0-D3; frame 9 held out for testing, 1 of the other 9 used for validation) with
mace-torch, export it with tools/cgequi-export and report training, validation and held-out errors.

The shipped potentials/water-mace-small.h5 was made with the defaults, on one CPU core:
    OMP_NUM_THREADS=1 python3 tools/train_water_mace.py
(= --hidden 16x0e+16x1o --max-ell 2 --r-max 4.5 --radial-mlp [32,32] --epochs 200, ZBL pair repulsion,
 float64, seed 1; about 14 min on one core). --no-pair-repulsion drops the ZBL core.

usage: python3 tools/train_water_mace.py [--epochs N] [--workdir DIR] [--out FILE.h5] [--hidden IRREPS]
           [--max-ell L] [--r-max R] [--radial-mlp LIST] [--num-interactions N] [--correlation NU] [--seed S]
           [--holdout K] [--device cpu|cuda] [--data FILE] [--extra FILE ...] [--dft-weight W] [--mace-args "..."]
           [--no-pair-repulsion]

--extra adds frames labelled by a teacher model (tools/sample_water_teacher.py: REF_energy, REF_forces,
config_type=teacher) to the training set; the held-out frame and the reported errors stay those of the DFT data.
--dft-weight weights each DFT frame's loss against a teacher frame's (mace's per-frame config_weight)."""
import argparse
import os
import shlex
import subprocess
import sys

import ase.io
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "..", "shared", "data", "water_train.xyz")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--workdir", default="/tmp/cgequi_train_water")
    ap.add_argument("--out", default=os.path.join(REPO, "potentials", "water-mace-small.h5"))
    ap.add_argument("--hidden", default="16x0e+16x1o")
    ap.add_argument("--max-ell", default="2")
    ap.add_argument("--r-max", default="4.5")
    ap.add_argument("--radial-mlp", default="[32,32]")
    ap.add_argument("--seed", default="1")
    ap.add_argument("--num-interactions", default="2")
    ap.add_argument("--correlation", default="2")
    ap.add_argument("--holdout", type=int, default=9, help="the frame held out for testing (0-9)")
    ap.add_argument("--device", default="cpu", help="where mace trains: cpu or cuda")
    ap.add_argument("--mace-args", default="", help="more mace_run_train options (later ones win), e.g. '--weight_decay 5e-5'")
    ap.add_argument("--data", default=DATA, help="the water frames (default ../shared/data/water_train.xyz)")
    ap.add_argument("--extra", nargs="*", default=[], help="teacher-labelled frames to add to the training set")
    ap.add_argument("--dft-weight", type=float, default=1.0, help="loss weight of a DFT frame (a teacher frame's is 1)")
    ap.add_argument("--no-pair-repulsion", action="store_true",
                    help="no ZBL pair repulsion (the repulsive core keeps atoms from collapsing in MD)")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    frames = ase.io.read(args.data, index=":")
    for a in frames:  # mace reads REF_* keys; ase would turn plain energy/forces into a calculator
        a.info["REF_energy"] = a.get_potential_energy() if a.calc else a.info["energy"]
        a.arrays["REF_forces"] = a.get_forces() if a.calc else a.arrays["forces"]
        a.calc = None
        a.info["config_weight"] = args.dft_weight
    extra = [a for f in args.extra for a in ase.io.read(f, index=":")]
    ase.io.write(os.path.join(args.workdir, "train.xyz"), [a for i, a in enumerate(frames) if i != args.holdout] + extra)
    if extra:
        print(f"{len(extra)} teacher frames added from {', '.join(args.extra)}", flush=True)
    ase.io.write(os.path.join(args.workdir, "test.xyz"), [frames[args.holdout]])
    # Every frame has the same composition (64 O, 128 H), so E0s by least squares ("average") are not
    # identifiable per element: only E0(O) + 2 E0(H) is; mace takes the minimum-norm split. That changes no
    # energy of a water system (any H2O stoichiometry), only how the total is split into atomic energies.
    # Stage two (last 25% of the epochs) raises the energy weight so that the 9 energies are fitted too.
    start_two = max(1, int(0.75 * args.epochs))
    cmd = ["mace_run_train", "--name", "water_mace_small", "--seed", args.seed,
           "--train_file", "train.xyz", "--valid_fraction", "0.12", "--test_file", "test.xyz",
           "--energy_key", "REF_energy", "--forces_key", "REF_forces", "--E0s", "average",
           "--model", "MACE", "--interaction_first", "RealAgnosticResidualInteractionBlock",
           "--hidden_irreps", args.hidden, "--r_max", args.r_max, "--max_ell", args.max_ell,
           "--num_radial_basis", "8", "--correlation", args.correlation, "--num_interactions", args.num_interactions, "--MLP_irreps", "16x0e",
           "--radial_MLP", args.radial_mlp, "--batch_size", "1", "--valid_batch_size", "1",
           "--max_num_epochs", str(args.epochs), "--lr", "0.01", "--forces_weight", "100", "--energy_weight", "10",
           "--scheduler_patience", "15", "--ema", "--ema_decay", "0.99",
           "--stage_two", "--start_stage_two", str(start_two), "--stage_two_energy_weight", "1000",
           "--stage_two_forces_weight", "100", "--stage_two_lr", "0.001", "--eval_interval", "5",
           "--default_dtype", "float64", "--device", args.device, "--restart_latest"]
    if not args.no_pair_repulsion:
        cmd.append("--pair_repulsion")
    cmd += shlex.split(args.mace_args)
    print(" ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=args.workdir, check=True)
    model = os.path.join(args.workdir, "water_mace_small_stagetwo.model")  # the final (stage two) weights
    subprocess.run([sys.executable, os.path.join(REPO, "tools", "cgequi-export"), model, "-o", args.out], check=True)
    # held-out errors with mace-torch itself
    import mace  # noqa: F401  (before e3nn)
    import torch
    sys.path.insert(0, os.path.join(REPO, "tools"))
    from cgequi_tools.reference import mace_reference
    torch.set_default_dtype(torch.float64)
    from cgequi_tools.mace_export import torch_load_cpu
    m = torch_load_cpu(model).double()
    print("parameters:", sum(p.numel() for p in m.parameters()))
    for i, a in enumerate(frames):
        ref = mace_reference(m, a)
        de = (ref["energy"] - a.info["REF_energy"]) / len(a) * 1000
        df = np.sqrt(np.mean((ref["forces"] - a.arrays["REF_forces"]) ** 2)) * 1000
        tag = "held-out" if i == args.holdout else "train/valid"
        print(f"frame {i} ({tag}): energy error {de:+.2f} meV/atom, force RMSE {df:.1f} meV/A")


if __name__ == "__main__":
    main()
