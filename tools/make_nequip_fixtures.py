#!/usr/bin/env python3
"""make_nequip_fixtures.py: write the committed NequIP test fixtures (cgequi model files with /selftest cases).

Usage: /work/venv-nequip/bin/python tools/make_nequip_fixtures.py [--out tests/fixtures] [--only NAME ...]

Needs the real nequip (>= 0.7; these were made with nequip 0.19.1, e3nn 0.6.0, torch 2.15, recorded in
each file's root attributes). Every fixture is a random-weight float64 NequIPGNNModel built with
nequip's own builder (fixed seeds), every parameter perturbed by 0.1*N(0,1), exported by
cgequi_tools.nequip_export.export_nequip, plus /selftest/<case> groups computed by nequip itself
(cgequi_tools.nequip_export.nequip_reference: its neighbour list with per-edge-type pruning and its
ForceStressOutput) on the five structures of tools/make_fixtures.py: vacuum, periodic, triclinic,
tiny_cell and slab. CI only reads the committed files; nequip is not needed to run the tests.
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

SYMBOLS = {1: "H", 6: "C", 8: "O", 14: "Si", 3: "Li", 9: "F"}

MODELS = [
    dict(name="nequip_l1_parity_2layer", seed=201,
         desc="NequIPGNNModel l_max 1, parity on, 2 layers, 8 features, radial MLP depth 1 width 16, 8 Bessel, "
              "p=6, species H C O, r_max 4.0, scalar avg_num_neighbors, per-type scales/shifts",
         species=[1, 6, 8], r_max=4.0, kw=dict(num_layers=2, l_max=1, parity=True, num_features=8,
                                              radial_mlp_depth=1, radial_mlp_width=16)),
    dict(name="nequip_l2_noparity_4layer_pertype", seed=202,
         desc="l_max 2, parity off, 4 layers, features [8,6,4] per l, radial depth 2 width 12, trainable Bessel "
              "weights (6), per-edge-type cutoffs (H-H 3.0, H-O/O-H 3.6, O-O 4.2 < r_max 4.2), per-type "
              "avg_num_neighbors, species H O",
         species=[1, 8], r_max=4.2, per_edge={"H": {"H": 3.0, "O": 3.6}, "O": {"H": 3.6, "O": 4.2}},
         avg={"H": 4.0, "O": 7.0},
         kw=dict(num_layers=4, l_max=2, parity=False, num_features=[8, 6, 4], radial_mlp_depth=2,
                 radial_mlp_width=12, num_bessels=6, bessel_trainable=True)),
    dict(name="nequip_l3_parity_3layer_zbl", seed=203,
         desc="l_max 3, parity on, 3 layers, 4 features, radial depth 1 width 8, ZBL pair potential (metal), "
              "per-edge-type cutoffs (H rows 3.2), readout MLP with one hidden layer (width 6, silu), type "
              "embedding 6 features, species H C O, r_max 4.5; tiny_cell has 3 atoms",
         species=[1, 6, 8], r_max=4.5, per_edge={"H": 3.2}, zbl=True, tiny_atoms=3,
         kw=dict(num_layers=3, l_max=3, parity=True, num_features=4, radial_mlp_depth=1, radial_mlp_width=8,
                 readout_mlp_hidden_layers_depth=1, readout_mlp_hidden_layers_width=6,
                 type_embed_num_features=6)),
    dict(name="nequip_l3_noparity_5layer_resnet", seed=204,
         desc="l_max 3, parity off, 5 layers, 4 features, radial depth 2 width 8, convnet_resnet on (layers 1-3), "
              "scalar scale and shift (shortcut path), polynomial p=5, species H C O Si, r_max 3.8",
         species=[1, 6, 8, 14], r_max=3.8, scalar_ss=True,
         kw=dict(num_layers=5, l_max=3, parity=False, num_features=4, radial_mlp_depth=2, radial_mlp_width=8,
                 convnet_resnet=True, polynomial_cutoff_p=5)),
    dict(name="nequip_l2_parity_2layer_wide", seed=205,
         desc="l_max 2, parity on, 2 layers, 16 features, radial depth 1 width 32, 10 Bessel, no scales/shifts, "
              "species H Li C O F, r_max 5.0",
         species=[1, 3, 6, 8, 9], r_max=5.0, no_ss=True,
         kw=dict(num_layers=2, l_max=2, parity=True, num_features=16, radial_mlp_depth=1, radial_mlp_width=32,
                 num_bessels=10)),
    dict(name="nequip_f32_l2_parity_3layer", seed=206, dtype="float32",
         desc="model_dtype float32 (the nequip default for training), exported as its float64 cast, which is "
              "also the reference (W3j buffers, MLP alphas keep their float32 rounding); l_max 2, parity on, "
              "3 layers, 4 features, species H O, r_max 4.0",
         species=[1, 8], r_max=4.0,
         kw=dict(num_layers=3, l_max=2, parity=True, num_features=4, radial_mlp_depth=1, radial_mlp_width=8)),
]


def setup():
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    from nequip.utils.global_state import set_global_state
    set_global_state()
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(2)
    return torch


def build(spec):
    import numpy as np
    import torch
    from nequip.model import NequIPGNNModel
    rng = np.random.default_rng(spec["seed"])
    names = [SYMBOLS[z] for z in spec["species"]]
    kw = dict(seed=spec["seed"], model_dtype=spec.get("dtype", "float64"), r_max=spec["r_max"], type_names=names,
              avg_num_neighbors=spec.get("avg", 6.0), **spec["kw"])
    if spec.get("scalar_ss"):
        kw["per_type_energy_scales"] = 1.3
        kw["per_type_energy_shifts"] = -0.7
    elif not spec.get("no_ss"):
        kw["per_type_energy_scales"] = {n: float(rng.uniform(0.5, 1.5)) for n in names}
        kw["per_type_energy_shifts"] = {n: float(rng.uniform(-3.0, -0.5)) for n in names}
    if spec.get("per_edge"):
        kw["per_edge_type_cutoff"] = spec["per_edge"]
    if spec.get("zbl"):
        kw["pair_potential"] = {"_target_": "nequip.nn.pair_potential.ZBL", "units": "metal",
                                "chemical_species": names}
    model = NequIPGNNModel(**kw)
    torch.manual_seed(spec["seed"])
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model.eval(), names


def write(path, model, names, spec, cases):
    import ase
    import h5py
    import numpy as np
    from cgequi_tools.nequip_export import _versions, export_nequip, nequip_reference
    from cgequi_tools.reference import write_case
    tmp = path + ".part"
    summary = []
    with h5py.File(tmp, "w", libver="latest") as h5:  # compact object headers
        export_nequip(model, h5, source_file="random weights (tools/make_nequip_fixtures.py)")
        r = h5.attrs
        r["fixture_generator"] = "tools/make_nequip_fixtures.py"
        r["fixture_name"] = spec["name"]
        r["fixture_description"] = spec["desc"]
        r["fixture_seed"] = int(spec["seed"])
        for k, v in _versions().items():
            r[f"fixture_{k}_version"] = str(v)
        r["fixture_ase_version"] = ase.__version__
        r["fixture_numpy_version"] = np.__version__
        st = h5.create_group("selftest")
        for cname, atoms in cases.items():
            ref = nequip_reference(model, atoms, names)
            assert ref["edge_energy_check"] < 1e-12 * max(1.0, abs(ref["energy"])), ref["edge_energy_check"]
            write_case(st, cname, atoms, ref)
            fmax = float(abs(ref["forces"]).max()) if len(atoms) else 0.0
            summary.append(f"    {cname:<12} {len(atoms):4d} atoms {ref['num_edges']:6d} edges  "
                           f"E {ref['energy']:+.6e}  |F|max {fmax:.3e}")
    os.replace(tmp, path)
    return summary


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures"))
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args(argv)
    setup()
    from make_fixtures import structures
    os.makedirs(args.out, exist_ok=True)
    todo = [m for m in MODELS if not args.only or m["name"] in args.only]
    total = 0
    for spec in todo:
        t0 = time.time()
        model, names = build(spec)
        cases = structures(spec["species"], spec["r_max"], spec["seed"], spec.get("tiny_atoms", 2))
        path = os.path.join(args.out, spec["name"] + ".h5")
        summary = write(path, model, names, spec, cases)
        size = os.path.getsize(path)
        total += size
        print(f"{os.path.relpath(path)}: {size / 1024:.0f} KiB, {time.time() - t0:.1f} s")
        print("\n".join(summary))
    print(f"{len(todo)} fixtures, {total / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
