#!/usr/bin/env python3
"""make_fixtures.py: write the committed cgequi test fixtures (HDF5 model files with /selftest cases).

Usage: python3 tools/make_fixtures.py [--out tests/fixtures] [--only NAME ...]

Every fixture is a cgequi model file written by cgequi_tools.mace_export.export_mace plus
/selftest/<case> groups whose reference energies/forces/virials come from mace-torch itself
(cgequi_tools.reference.mace_reference). `cgequi check FILE` must pass on each of them.

* Random-weight MACE / ScaleShiftMACE models (float64, fixed seeds, small widths), each weight
  perturbed by 0.1*N(0,1) so that no path is trivially zero, evaluated on five structures:
  vacuum (cluster), periodic (cubic-ish cell > r_max), triclinic (strongly skewed cell, some
  atoms outside the cell), tiny_cell (1-3 atoms, cell 0.6*r_max: many self-images), slab
  (pbc T,T,F with a vacuum gap).
* The trained model ../shared/data/mace01_swa.model on 3 solvent molecules and the periodic
  160-atom solvent liquid (the shared data files are read in place, never copied).

Everything is deterministic (torch.manual_seed / numpy default_rng per model); only the
export_date attribute changes between runs.
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SHARED = os.path.normpath(os.path.join(REPO, "..", "shared", "data"))
sys.path.insert(0, HERE)

MIN_DIST = 0.9  # Angstrom, minimum interatomic distance (periodic images included)

# ---------------------------------------------------------------------------------------------
# Random-weight models. Keys not given fall back to DEFAULTS.
DEFAULTS = dict(
    model="MACE", heads=None, export_head=None, apply_cutoff=True, readout="NonLinearReadoutBlock",
    gate="silu", MLP_irreps="8x0e", avg_num_neighbors=8.0, scale=None, shift=None,
    use_agnostic_product=False, tiny_atoms=2, pair_repulsion=False, distance_transform="None",
)

MODELS = [
    dict(name="ssmace_zbl_agnesi_l2", seed=909,
         desc="ScaleShiftMACE (scale 1.3, shift -0.2) with ZBL pair repulsion and the Agnesi distance transform "
              "(as MACE-MP-0b2/b3), Residual first then DensityResidual, max_ell 2, correlation 2, "
              "8x0e+8x1o, species H C O Si, r_max 4.5",
         model="ScaleShiftMACE", scale=1.3, shift=-0.2, species=[1, 6, 8, 14], r_max=4.5, num_bessel=8, p=5,
         max_ell=2, correlation=2, hidden="8x0e+8x1o", num_interactions=2,
         first="RealAgnosticResidualInteractionBlock", inter="RealAgnosticDensityResidualInteractionBlock",
         radial_MLP=[16, 16], pair_repulsion=True, distance_transform="Agnesi"),
    dict(name="mace_plain_l1_corr1", seed=101,
         desc="MACE, 1 interaction RealAgnosticInteractionBlock (first), max_ell 1, correlation 1, "
              "hidden 16x0e, species H O, radial_MLP [8] (1 hidden layer), 6 Bessel, p=5, r_max 3.5, "
              "linear readout only; tiny_cell has 1 atom",
         species=[1, 8], r_max=3.5, num_bessel=6, p=5, max_ell=1, correlation=1,
         hidden="16x0e", num_interactions=1, first="RealAgnosticInteractionBlock",
         inter="RealAgnosticInteractionBlock", radial_MLP=[8], tiny_atoms=1),
    dict(name="mace_res_l2_corr2_nocut", seed=102,
         desc="MACE, RealAgnosticInteractionBlock (first) + RealAgnosticResidualInteractionBlock, "
              "2 interactions, max_ell 2, correlation 2, hidden 8x0e+8x1o+8x2e, species H C O, "
              "apply_cutoff=False (cutoff applied to the TP weights instead of the radial basis), "
              "radial_MLP [16,16], 8 Bessel, p=6, r_max 4.0, nonlinear (silu) readout",
         species=[1, 6, 8], r_max=4.0, num_bessel=8, p=6, max_ell=2, correlation=2,
         hidden="8x0e+8x1o+8x2e", num_interactions=2, first="RealAgnosticInteractionBlock",
         inter="RealAgnosticResidualInteractionBlock", radial_MLP=[16, 16], apply_cutoff=False),
    dict(name="ssmace_res_l3_corr223", seed=103,
         desc="ScaleShiftMACE (scale 1.7, shift -0.3), RealAgnosticResidualInteractionBlock first and "
              "after, 3 interactions, max_ell 3, per-layer correlation [2,2,3] (3 only on the last, "
              "scalar-output layer: the l=3 U_3 of a 1o output would be 5 MB), hidden 8x0e+8x1o, species "
              "H Li C O F Si, radial_MLP [16,16,16], 10 Bessel, p=5, r_max 5.0; tiny_cell has 3 atoms",
         model="ScaleShiftMACE", scale=1.7, shift=-0.3,
         species=[1, 3, 6, 8, 9, 14], r_max=5.0, num_bessel=10, p=5, max_ell=3, correlation=[2, 2, 3],
         hidden="8x0e+8x1o", num_interactions=3, first="RealAgnosticResidualInteractionBlock",
         inter="RealAgnosticResidualInteractionBlock", radial_MLP=[16, 16, 16], tiny_atoms=3),
    dict(name="ssmace_density_l2_corr32", seed=104,
         desc="ScaleShiftMACE (scale 0.8, shift 0.25), RealAgnosticDensityInteractionBlock first and "
              "after, 2 interactions, max_ell 2, per-layer correlation [3,2], hidden 8x0e+8x1o, "
              "species H C O, radial_MLP [12,12], 7 Bessel, p=6, r_max 4.5, tanh readout gate",
         model="ScaleShiftMACE", scale=0.8, shift=0.25, gate="tanh",
         species=[1, 6, 8], r_max=4.5, num_bessel=7, p=6, max_ell=2, correlation=[3, 2],
         hidden="8x0e+8x1o", num_interactions=2, first="RealAgnosticDensityInteractionBlock",
         inter="RealAgnosticDensityInteractionBlock", radial_MLP=[12, 12]),
    dict(name="mace_densres_l3_corr2_3int", seed=105,
         desc="MACE, RealAgnosticDensityResidualInteractionBlock first and after, 3 interactions, "
              "max_ell 3, correlation 2, hidden 16x0e (scalar only), species H O, radial_MLP [8,8,8], "
              "9 Bessel, p=5, r_max 3.8, apply_cutoff=False, NonLinearBiasReadoutBlock readout",
         species=[1, 8], r_max=3.8, num_bessel=9, p=5, max_ell=3, correlation=2,
         hidden="16x0e", num_interactions=3, first="RealAgnosticDensityResidualInteractionBlock",
         inter="RealAgnosticDensityResidualInteractionBlock", radial_MLP=[8, 8, 8],
         apply_cutoff=False, readout="NonLinearBiasReadoutBlock"),
    dict(name="ssmace_mixed_2head_b", seed=106,
         desc="ScaleShiftMACE with 2 heads [a,b] (per-head scale [1.3,0.6], shift [0.1,-0.4], "
              "per-head atomic energies, head-masked nonlinear readout), exported and referenced "
              "with head b; RealAgnosticResidualInteractionBlock first + RealAgnosticDensity"
              "ResidualInteractionBlock, 2 interactions, max_ell 2, correlation 2, hidden 8x0e+8x1o+8x2e, "
              "species H Li C O F Si, radial_MLP [16], 8 Bessel, p=5, r_max 4.2",
         model="ScaleShiftMACE", heads=["a", "b"], export_head="b", scale=[1.3, 0.6], shift=[0.1, -0.4],
         species=[1, 3, 6, 8, 9, 14], r_max=4.2, num_bessel=8, p=5, max_ell=2, correlation=2,
         hidden="8x0e+8x1o+8x2e", num_interactions=2, first="RealAgnosticResidualInteractionBlock",
         inter="RealAgnosticDensityResidualInteractionBlock", radial_MLP=[16]),
    dict(name="mace_agnosticprod_l2_corr2", seed=107,
         desc="MACE, RealAgnosticDensityInteractionBlock (first) + RealAgnosticInteractionBlock, "
              "2 interactions, use_agnostic_product=True (element-independent product weights), "
              "max_ell 2, correlation 2, hidden 12x0e+12x1o, species H C O, radial_MLP [8,16], "
              "6 Bessel, p=6, r_max 3.6",
         species=[1, 6, 8], r_max=3.6, num_bessel=6, p=6, max_ell=2, correlation=2,
         hidden="12x0e+12x1o", num_interactions=2, first="RealAgnosticDensityInteractionBlock",
         inter="RealAgnosticInteractionBlock", radial_MLP=[8, 16], use_agnostic_product=True),
    dict(name="mace_res_l2_mul40", seed=108,
         desc="MACE, RealAgnosticResidualInteractionBlock first and after, 2 interactions, max_ell 2, "
              "correlation 2, hidden 40x0e+40x1o (40 channels: not a multiple of the GPU kernels' 16-wide GEMM "
              "steps nor of a warp's 32 lanes), species H O, radial_MLP [16], 8 Bessel, p=5, r_max 4.0",
         species=[1, 8], r_max=4.0, num_bessel=8, p=5, max_ell=2, correlation=2,
         hidden="40x0e+40x1o", num_interactions=2, first="RealAgnosticResidualInteractionBlock",
         inter="RealAgnosticResidualInteractionBlock", radial_MLP=[16]),
    dict(name="mace_res_l3_mul128", seed=109,
         desc="MACE, RealAgnosticResidualInteractionBlock first and after, 2 interactions, max_ell 3, "
              "correlation 2, hidden 128x0e+128x1o (MACE-MP-0-medium's layer widths: the GPU kernels' 128-channel "
              "forms), species H O, radial_MLP [16], 8 Bessel, p=5, r_max 4.0",
         species=[1, 8], r_max=4.0, num_bessel=8, p=5, max_ell=3, correlation=2,
         hidden="128x0e+128x1o", num_interactions=2, first="RealAgnosticResidualInteractionBlock",
         inter="RealAgnosticResidualInteractionBlock", radial_MLP=[16]),
]


def _setup_torch():
    import warnings
    warnings.filterwarnings("ignore")
    import mace  # noqa: F401  (first: it sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD, which e3nn's import needs)
    import torch
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    return torch


def build_model(spec):
    import numpy as np
    import torch
    from e3nn import o3
    from mace.modules import blocks, models
    from mace.modules.symmetric_contraction import EmptyParam

    s = dict(DEFAULTS, **spec)
    torch.manual_seed(s["seed"])
    rng = np.random.default_rng(s["seed"])
    z = s["species"]
    heads = s["heads"]
    n_heads = len(heads) if heads else 1
    ae = rng.uniform(-2.0, -0.2, size=(n_heads, len(z)))  # comparable to the interaction energy
    ae = ae[0] if n_heads == 1 else ae
    gate = {"silu": torch.nn.functional.silu, "tanh": torch.tanh}[s["gate"]]
    kwargs = dict(
        r_max=s["r_max"], num_bessel=s["num_bessel"], num_polynomial_cutoff=s["p"], max_ell=s["max_ell"],
        interaction_cls=getattr(blocks, s["inter"]), interaction_cls_first=getattr(blocks, s["first"]),
        num_interactions=s["num_interactions"], num_elements=len(z), hidden_irreps=o3.Irreps(s["hidden"]),
        MLP_irreps=o3.Irreps(s["MLP_irreps"]), atomic_energies=ae, avg_num_neighbors=s["avg_num_neighbors"],
        atomic_numbers=z, correlation=s["correlation"], gate=gate, radial_MLP=s["radial_MLP"],
        apply_cutoff=s["apply_cutoff"], heads=heads, readout_cls=getattr(blocks, s["readout"]),
        use_agnostic_product=s["use_agnostic_product"], pair_repulsion=s["pair_repulsion"],
        distance_transform=s["distance_transform"],
    )
    if s["model"] == "ScaleShiftMACE":
        model = models.ScaleShiftMACE(atomic_inter_scale=s["scale"], atomic_inter_shift=s["shift"], **kwargs)
    else:
        model = models.MACE(**kwargs)
    # Perturb every trainable weight so no path is trivially zero; keep the deliberately zeroed
    # symmetric-contraction weights (EmptyParam, paths whose U tensor vanishes) at zero.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if isinstance(p, EmptyParam) or not p.requires_grad:
                continue
            p.add_(0.1 * torch.randn_like(p))
        for mod in model.modules():
            if type(mod).__name__ == "Contraction":
                for k, buf in mod.named_buffers():
                    if k.endswith("_zeroed") and bool(buf):
                        w = mod.weights_max if k == "weights_max_zeroed" else mod.weights[int(k.split("_")[1])]
                        assert float(w.abs().max()) == 0.0, (s["name"], k)
    return model.double().eval(), s


# ---------------------------------------------------------------------------------------------
# Structures
def _species_list(rng, species, n):
    zs = [species[i % len(species)] for i in range(n)]
    rng.shuffle(zs)
    return zs


def _too_close(atoms, min_d):
    import numpy as np
    from ase.neighborlist import neighbor_list
    if not atoms.pbc.any():
        p = atoms.positions
        d = np.linalg.norm(p[:, None, :] - p[None, :, :], axis=-1) + np.eye(len(p)) * 1e9
        return bool((d < min_d).any())
    return len(neighbor_list("d", atoms, min_d)) > 0


def _fill(rng, atoms_template, zs, sample, min_d=MIN_DIST, tries=20000):
    """Add atoms one by one at sample() positions, rejecting any closer than min_d to another
    atom or to a periodic image (of itself included)."""
    atoms = atoms_template.copy()
    for zi in zs:
        for _ in range(tries):
            trial = atoms.copy()
            trial.append(int(zi))
            trial.positions[-1] = sample()
            if not _too_close(trial, min_d):
                atoms = trial
                break
        else:
            raise RuntimeError("could not place atoms; box too small")
    return atoms


def structures(species, r_max, seed, tiny_atoms=2):
    import numpy as np
    from ase import Atoms
    rng = np.random.default_rng(seed)
    out = {}

    # vacuum: 10-atom cluster in a 4.5 A box (no cell, pbc False)
    box = 4.5
    out["vacuum"] = _fill(rng, Atoms(pbc=False), _species_list(rng, species, 10),
                          lambda: rng.uniform(0.0, box, 3))

    # periodic: 12 atoms in a cubic-ish cell a bit larger than the cutoff
    a = 1.1 * r_max
    cell = np.diag([a, a * 1.05, a * 0.97]) + rng.uniform(-0.15, 0.15, (3, 3))
    out["periodic"] = _fill(rng, Atoms(cell=cell, pbc=True), _species_list(rng, species, 12),
                            lambda: rng.uniform(0, 1, 3) @ cell)

    # triclinic: 10 atoms, strongly skewed cell; then two atoms moved out of the cell by
    # lattice translations (the evaluator must not assume wrapped positions)
    L = 1.05 * r_max
    cell = np.array([[L, 0.0, 0.0], [0.72 * L, 0.75 * L, 0.0], [-0.55 * L, 0.45 * L, 0.85 * L]])
    t = _fill(rng, Atoms(cell=cell, pbc=True), _species_list(rng, species, 10),
              lambda: rng.uniform(0, 1, 3) @ cell)
    t.positions[1] += cell[0] - cell[2]
    t.positions[4] += -cell[1] + 2 * cell[2]
    out["triclinic"] = t

    # tiny_cell: 1-3 atoms in a slightly skewed cell of 0.6 r_max (many periodic self-images)
    s = 0.6 * r_max
    cell = np.array([[s, 0.0, 0.0], [0.1 * s, 0.95 * s, 0.0], [-0.08 * s, 0.12 * s, 1.05 * s]])
    out["tiny_cell"] = _fill(rng, Atoms(cell=cell, pbc=True), _species_list(rng, species, tiny_atoms),
                             lambda: rng.uniform(0, 1, 3) @ cell)

    # slab: pbc (T,T,F), 10 atoms within 3 A in z, 12 A of vacuum above
    a = 1.0 * r_max
    cell = np.array([[a, 0.0, 0.0], [0.2 * a, 1.1 * a, 0.0], [0.0, 0.0, 15.0]])
    thick = 3.0
    out["slab"] = _fill(rng, Atoms(cell=cell, pbc=(True, True, False)), _species_list(rng, species, 10),
                        lambda: np.array([*(rng.uniform(0, 1, 2) @ cell[:2, :2]), rng.uniform(0, thick)]))
    return out


# ---------------------------------------------------------------------------------------------
def _root_attrs(h5, name, desc, seed=None):
    import ase
    import numpy as np
    from cgequi_tools.mace_export import _versions
    r = h5.attrs
    r["fixture_generator"] = "tools/make_fixtures.py"
    r["fixture_name"] = name
    r["fixture_description"] = desc
    if seed is not None:
        r["fixture_seed"] = int(seed)
    for k, v in _versions().items():
        r[f"fixture_{k}_version"] = str(v)
    r["fixture_ase_version"] = ase.__version__
    r["fixture_numpy_version"] = np.__version__


def write_fixture(path, model, head, name, desc, cases, seed=None, source_file=""):
    import h5py
    from cgequi_tools.mace_export import export_mace
    from cgequi_tools.reference import mace_reference, write_case
    tmp = path + ".part"
    summary = []
    with h5py.File(tmp, "w") as h5:
        head = export_mace(model, h5, head=head, source_file=source_file)
        _root_attrs(h5, name, desc, seed)
        st = h5.create_group("selftest")
        for cname, atoms in cases.items():
            ref = mace_reference(model, atoms, head)
            write_case(st, cname, atoms, ref)
            fmax = float(abs(ref["forces"]).max()) if len(atoms) else 0.0
            summary.append(f"    {cname:<12} {len(atoms):4d} atoms {ref['num_edges']:6d} edges  "
                           f"E {ref['energy']:+.6e}  |F|max {fmax:.3e}")
    os.replace(tmp, path)
    return summary


def make_random(spec, out):
    model, s = build_model(spec)
    cases = structures(s["species"], s["r_max"], s["seed"], s["tiny_atoms"])
    path = os.path.join(out, s["name"] + ".h5")
    return path, write_fixture(path, model, s["export_head"], s["name"], s["desc"], cases, seed=s["seed"],
                               source_file="random weights (tools/make_fixtures.py)")


def make_mace01(out):
    import ase.io
    from cgequi_tools.mace_export import load_mace
    model_path = os.path.join(SHARED, "mace01_swa.model")
    frames = ase.io.read(os.path.join(SHARED, "solvent_xtb_train_200.xyz"), index=":")
    liquid = ase.io.read(os.path.join(SHARED, "solvent_liquid.xyz"))
    cases = {}
    for i in (3, 50, 150):  # frames 0-2 are isolated atoms
        a = frames[i]
        cases[f"solvent_{i:03d}_{a.get_chemical_formula()}"] = a
    cases["solvent_liquid_160"] = liquid
    for a in cases.values():  # positions/cell/pbc/numbers only
        a.calc = None
    model = load_mace(model_path)
    desc = ("trained mace01_swa.model (ScaleShiftMACE, H C O, r_max 4.0, hidden 32x0e, max_ell 2, "
            "correlation 2, 2 interactions, 8 Bessel, p=5; mace 0.3.6) on solvent_xtb_train_200.xyz "
            "frames 3, 50, 150 (molecules, vacuum) and solvent_liquid.xyz (160 atoms, periodic 12.854 A)")
    # the trained model is also the shipped demo potential
    path = os.path.join(REPO, "potentials", "mace01-solvent.h5")
    return path, write_fixture(path, model, None, "mace01_swa", desc, cases, source_file="mace01_swa.model")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures"), help="output directory")
    ap.add_argument("--only", nargs="*", default=None, help="fixture names to (re)generate")
    args = ap.parse_args(argv)
    _setup_torch()
    os.makedirs(args.out, exist_ok=True)
    names = [m["name"] for m in MODELS] + ["mace01_swa"]
    todo = names if not args.only else [n for n in names if n in args.only]
    unknown = set(args.only or []) - set(names)
    if unknown:
        ap.error(f"unknown fixture(s) {sorted(unknown)}; known: {names}")
    t_all = time.time()
    total = 0
    for name in todo:
        t0 = time.time()
        if name == "mace01_swa":
            path, summary = make_mace01(args.out)
        else:
            path, summary = make_random(next(m for m in MODELS if m["name"] == name), args.out)
        size = os.path.getsize(path)
        total += size
        print(f"{os.path.relpath(path)}: {size / 1024:.0f} KiB, {time.time() - t0:.1f} s")
        print("\n".join(summary))
    print(f"{len(todo)} fixtures, {total / 1024:.0f} KiB, {time.time() - t_all:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
