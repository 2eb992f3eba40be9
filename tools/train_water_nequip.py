#!/usr/bin/env python3
"""train_water_nequip.py: train the small demonstration NequIP water potential on ../shared/data/water_train.xyz
(10 frames of 64 H2O, revPBE0-D3: frames 0-7 train, 8 validation, 9 held out for testing) with the real
nequip (`nequip-train`, then `nequip-package`), export the packaged model with tools/cgequi-export to
potentials/water-nequip-small.h5 (the checkpoint is exported too, to /tmp, and must give the same file
content), and report held-out errors computed by nequip itself.

usage: /work/venv-nequip/bin/python tools/train_water_nequip.py [--epochs N] [--workdir DIR] [--no-zbl] [--out FILE.h5]
(needs nequip >= 0.7 in that python; runs on the CPU in float64, about 10-20 minutes on 2 cores)
"""
import argparse
import glob
import os
import subprocess
import sys

import ase.io
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "..", "shared", "data", "water_train.xyz")

CONFIG = """
run: [train]
cutoff_radius: 4.5
chemical_symbols: [H, O]
model_type_names: ${{chemical_symbols}}

data:
  _target_: nequip.data.datamodule.ASEDataModule
  seed: 456
  train_file_path: {work}/train.xyz
  val_file_path: {work}/val.xyz
  test_file_path: {work}/test.xyz
  transforms:
    - _target_: nequip.data.transforms.ChemicalSpeciesToAtomTypeMapper
      model_type_names: ${{model_type_names}}
      chemical_species_to_atom_type_map: {{H: H, O: O}}
    - _target_: nequip.data.transforms.NeighborListTransform
      r_max: ${{cutoff_radius}}
  train_dataloader:
    _target_: torch.utils.data.DataLoader
    batch_size: 1
    shuffle: true
  val_dataloader:
    _target_: torch.utils.data.DataLoader
    batch_size: 1
  test_dataloader: ${{data.val_dataloader}}
  stats_manager:
    _target_: nequip.data.CommonDataStatisticsManager
    dataloader_kwargs:
      batch_size: 1
    type_names: ${{model_type_names}}

trainer:
  _target_: lightning.Trainer
  accelerator: cpu
  devices: 1
  max_epochs: {epochs}
  check_val_every_n_epoch: 5
  log_every_n_steps: 8
  enable_progress_bar: false
  logger: false
  callbacks:
    - _target_: lightning.pytorch.callbacks.ModelCheckpoint
      dirpath: {work}
      filename: best
      monitor: val0_epoch/weighted_sum
      save_last: true

training_module:
  _target_: nequip.train.NequIPLightningModule
  loss:
    _target_: nequip.train.EnergyForceLoss
    per_atom_energy: true
    coeffs:
      total_energy: 1.0
      forces: 10.0
  val_metrics:
    _target_: nequip.train.EnergyForceMetrics
    coeffs:
      per_atom_energy_mae: 1.0
      forces_rmse: 1.0
  test_metrics: ${{training_module.val_metrics}}
  optimizer:
    _target_: torch.optim.Adam
    lr: 0.01
  lr_scheduler:
    scheduler:
      _target_: torch.optim.lr_scheduler.ReduceLROnPlateau
      factor: 0.5
      patience: 6
      min_lr: 1e-5
    monitor: val0_epoch/weighted_sum
    interval: epoch
    frequency: 5
  model:
    _target_: nequip.model.NequIPGNNModel
    seed: 123
    model_dtype: float64
    type_names: ${{model_type_names}}
    r_max: ${{cutoff_radius}}
    num_bessels: 8
    bessel_trainable: false
    polynomial_cutoff_p: 6
    num_layers: 3
    l_max: 1
    parity: true
    num_features: 16
    radial_mlp_depth: 1
    radial_mlp_width: 32
    avg_num_neighbors: ${{training_data_stats:num_neighbors_mean}}
    per_type_energy_scales: ${{training_data_stats:per_type_forces_rms}}
    per_type_energy_shifts: ${{training_data_stats:per_atom_energy_mean}}
{pair_potential}
global_options:
  allow_tf32: false
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=300)
    ap.add_argument("--workdir", default="/tmp/cgequi_train_water_nequip")
    ap.add_argument("--export-only", action="store_true", help="skip training: package and export the workdir's checkpoint")
    ap.add_argument("--no-zbl", action="store_true",
                    help="without nequip's ZBL pair potential (the repulsive core prior the shipped model has)")
    ap.add_argument("--out", default=os.path.join(REPO, "potentials", "water-nequip-small.h5"))
    args = ap.parse_args()
    work = os.path.abspath(args.workdir)
    os.makedirs(work, exist_ok=True)
    frames = ase.io.read(DATA, index=":")
    ase.io.write(os.path.join(work, "train.xyz"), frames[:8])
    ase.io.write(os.path.join(work, "val.xyz"), frames[8:9])
    ase.io.write(os.path.join(work, "test.xyz"), frames[9:])
    with open(os.path.join(work, "water.yaml"), "w") as f:
        zbl = ("    pair_potential:\n      _target_: nequip.nn.pair_potential.ZBL\n      units: metal\n"
               "      chemical_species: ${chemical_symbols}\n") if not args.no_zbl else ""
        f.write(CONFIG.format(work=work, epochs=args.epochs, pair_potential=zbl))
    bindir = os.path.dirname(sys.executable)
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    cmd = [os.path.join(bindir, "nequip-train"), "-cp", work, "-cn", "water.yaml",
           f"hydra.run.dir={work}/outputs"]
    print(" ".join(cmd), flush=True)
    if not args.export_only:
        subprocess.run(cmd, cwd=work, check=True, env=env)
    ckpt = os.path.join(work, "best.ckpt")
    if not os.path.exists(ckpt):
        ckpt = sorted(glob.glob(os.path.join(work, "*.ckpt")))[-1]
    pkg = os.path.join(work, "water_nequip_small.nequip.zip")
    subprocess.run([os.path.join(bindir, "nequip-package"), "build", ckpt, pkg], cwd=work, check=True, env=env)
    out = args.out
    export = [sys.executable, os.path.join(REPO, "tools", "cgequi-export")]
    subprocess.run(export + [pkg, "-o", out], check=True)
    subprocess.run(export + [ckpt, "-o", os.path.join(work, "from_ckpt.h5")], check=True)
    # the held-out DFT frame (192 atoms, periodic) as one more self-test, computed by nequip
    import h5py
    sys.path.insert(0, os.path.join(REPO, "tools"))
    from cgequi_tools.nequip_export import load_nequip as _load, nequip_reference as _ref
    from cgequi_tools.reference import write_case
    with h5py.File(out, "a") as h5:
        write_case(h5["selftest"], "water_frame9_192", frames[9], _ref(_load(pkg), frames[9], ["H", "O"]))

    # held-out errors with nequip itself (frame 9), and training/validation errors
    sys.path.insert(0, os.path.join(REPO, "tools"))
    import warnings
    warnings.filterwarnings("ignore")
    from cgequi_tools.nequip_export import load_nequip, nequip_reference
    model = load_nequip(pkg)
    for name, idx in (("train", range(8)), ("validation", [8]), ("held-out", [9])):
        de, df = [], []
        for i in idx:
            a = frames[i]
            ref = nequip_reference(model, a, ["H", "O"])
            de.append(abs(ref["energy"] - a.get_potential_energy()) / len(a) * 1000)
            df.append(np.mean((ref["forces"] - a.get_forces()) ** 2))
        print(f"{name} frames {list(idx)}: energy MAE {np.mean(de):.2f} meV/atom, "
              f"force RMSE {np.sqrt(np.mean(df)) * 1000:.1f} meV/A")


if __name__ == "__main__":
    main()
