"""Reference evaluation with the real mace-torch, and the /selftest groups built from it."""
import numpy as np

from .h5blocks import f64


def mace_reference(model, atoms, head=None):
    """Energy, forces, virial (-dE/dstrain, eV), stress, per-atom energies and per-atom virials
    computed by mace-torch itself for an ase.Atoms."""
    import torch
    from mace import data
    from mace.tools import torch_geometric, utils

    z_table = utils.AtomicNumberTable([int(z) for z in model.atomic_numbers])
    heads = list(getattr(model, "heads", None) or ["Default"])
    head = head or heads[0]
    config = data.config_from_atoms(atoms, head_name=head)
    config.head = head
    ad = data.AtomicData.from_config(config, z_table=z_table, cutoff=float(model.r_max), heads=heads)
    loader = torch_geometric.dataloader.DataLoader(dataset=[ad], batch_size=1, shuffle=False, drop_last=False)
    batch = next(iter(loader)).to_dict()
    periodic = bool(np.any(atoms.pbc))
    # compute_edge_forces: plain MACE (unlike ScaleShiftMACE) only returns atomic virials with it
    out = model(batch, compute_force=True, compute_virials=periodic, compute_stress=periodic,
                compute_edge_forces=True, compute_atomic_stresses=True, training=False)
    res = {
        "energy": float(out["energy"].detach().double().reshape(-1)[0]),
        "forces": f64(out["forces"]),
        "atomic_energies": f64(out["node_energy"]).reshape(-1),
        "num_edges": int(batch["edge_index"].shape[1]),
    }
    if out.get("atomic_virials") is not None:
        res["atomic_virials"] = f64(out["atomic_virials"]).reshape(-1, 3, 3)
        res["virial"] = res["atomic_virials"].sum(axis=0)
    if periodic and out.get("virials") is not None:
        res["virial"] = f64(out["virials"]).reshape(3, 3)
        res["stress"] = f64(out["stress"]).reshape(3, 3)
    return res


def write_case(group, name, atoms, ref):
    g = group.create_group(name)
    g.create_dataset("atomic_numbers", data=np.asarray(atoms.numbers, dtype=np.int32))
    g.create_dataset("positions", data=np.asarray(atoms.positions, dtype=np.float64))
    g.create_dataset("cell", data=np.asarray(atoms.cell.array, dtype=np.float64))
    g.create_dataset("pbc", data=np.asarray(atoms.pbc, dtype=np.int32))
    g.attrs["energy"] = ref["energy"]
    g.attrs["num_edges"] = ref["num_edges"]
    g.create_dataset("forces", data=ref["forces"])
    g.create_dataset("atomic_energies", data=ref["atomic_energies"])
    if "virial" in ref:
        g.create_dataset("virial", data=ref["virial"])
    if "stress" in ref:
        g.create_dataset("stress", data=ref["stress"])
    if "atomic_virials" in ref:
        g.create_dataset("atomic_virials", data=ref["atomic_virials"])
    return g


def random_structures(species_z, r_max, seed=0):
    """Small self-test structures for a model's species: a molecule-like cluster in vacuum and a
    periodic cell smaller than the cutoff (periodic self-images)."""
    from ase import Atoms
    rng = np.random.default_rng(seed)
    out = {}

    def place(n, box, min_d):
        pos = []
        while len(pos) < n:
            p = rng.uniform(0, box, 3)
            if all(np.linalg.norm(p - q) > min_d for q in pos):
                pos.append(p)
        return np.array(pos)

    zs = [species_z[i % len(species_z)] for i in range(8)]
    out["cluster"] = Atoms(numbers=zs, positions=place(8, 3.5, 1.0), pbc=False)
    a = 0.8 * r_max
    cell = np.array([[a, 0, 0], [0.3, a * 0.9, 0], [-0.4, 0.5, a * 1.1]])
    frac = rng.uniform(0, 1, (5, 3))
    pos = frac @ cell
    out["periodic_small_cell"] = Atoms(numbers=zs[:5], positions=pos, cell=cell, pbc=True)
    return out
