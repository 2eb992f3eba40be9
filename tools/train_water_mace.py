#!/usr/bin/env python3
"""train_water_mace.py: train the small demonstration MACE water potential on ../shared/data/water_train.xyz
(10 frames of 64 H2O, revPBE0-D3; frame 9 held out for testing) with mace-torch, then export it to
potentials/water-mace-small.h5 and report held-out errors.
usage: python3 tools/train_water_mace.py [--epochs N] [--workdir DIR]"""
import argparse
import os
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
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    frames = ase.io.read(DATA, index=":")
    for a in frames:  # mace reads REF_* keys; ase would turn plain energy/forces into a calculator
        a.info["REF_energy"] = a.get_potential_energy() if a.calc else a.info["energy"]
        a.arrays["REF_forces"] = a.get_forces() if a.calc else a.arrays["forces"]
        a.calc = None
    ase.io.write(os.path.join(args.workdir, "train.xyz"), frames[:9])
    ase.io.write(os.path.join(args.workdir, "test.xyz"), frames[9:])
    cmd = ["mace_run_train", "--name", "water_mace_small", "--seed", "1",
           "--train_file", "train.xyz", "--valid_fraction", "0.12", "--test_file", "test.xyz",
           "--energy_key", "REF_energy", "--forces_key", "REF_forces", "--E0s", "average",
           "--model", "MACE", "--interaction_first", "RealAgnosticResidualInteractionBlock",
           "--hidden_irreps", "16x0e+16x1o", "--r_max", "4.5", "--max_L", "2", "--num_radial_basis", "8",
           "--correlation", "2", "--num_interactions", "2", "--MLP_irreps", "16x0e", "--radial_MLP", "[32,32]",
           "--batch_size", "2", "--valid_batch_size", "2", "--max_num_epochs", str(args.epochs),
           "--lr", "0.005", "--forces_weight", "100", "--energy_weight", "10", "--scheduler_patience", "20",
           "--default_dtype", "float64", "--device", "cpu", "--restart_latest"]
    print(" ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=args.workdir, check=True)
    model = os.path.join(args.workdir, "water_mace_small.model")
    out = os.path.join(REPO, "potentials", "water-mace-small.h5")
    subprocess.run([sys.executable, os.path.join(REPO, "tools", "cgequi-export"), model, "-o", out], check=True)
    # held-out errors with mace-torch itself
    import torch
    sys.path.insert(0, os.path.join(REPO, "tools"))
    from cgequi_tools.reference import mace_reference
    torch.set_default_dtype(torch.float64)
    m = torch.load(model, map_location="cpu", weights_only=False).double()
    test = frames[9]
    ref = mace_reference(m, test)
    n = len(test)
    de = abs(ref["energy"] - test.info["REF_energy"]) / n * 1000
    df = np.sqrt(np.mean((ref["forces"] - test.arrays["REF_forces"]) ** 2)) * 1000
    print(f"held-out frame 9: energy error {de:.2f} meV/atom, force RMSE {df:.1f} meV/A")


if __name__ == "__main__":
    main()
