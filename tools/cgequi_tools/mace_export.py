"""MACE (mace-torch .model) -> cgequi HDF5 model file. Every constant is read from the live
model (buffers, pickled Python attributes), never regenerated; see docs/model-format.md."""
import datetime

import numpy as np

from . import EXPORTER_VERSION, FORMAT_VERSION
from .h5blocks import ExportError, f64, write_activation, write_fcnet, write_linear, write_tp

SUPPORTED_MODELS = ("MACE", "ScaleShiftMACE")
INTERACTIONS = {
    "RealAgnosticInteractionBlock": dict(residual=False, density=False),
    "RealAgnosticResidualInteractionBlock": dict(residual=True, density=False),
    "RealAgnosticDensityInteractionBlock": dict(residual=False, density=True),
    "RealAgnosticDensityResidualInteractionBlock": dict(residual=True, density=True),
}


def torch_load_cpu(path):
    """torch.load onto the CPU, also for a model trained on a GPU: e3nn pickles its compiled modules as
    TorchScript archives and re-loads them with torch.jit.load, which ignores map_location."""
    import torch
    jit_load = torch.jit.load
    torch.jit.load = lambda f, map_location=None, **kw: jit_load(f, map_location="cpu", **kw)
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    finally:
        torch.jit.load = jit_load


def load_mace(path):
    model = torch_load_cpu(path)
    if isinstance(model, dict):
        raise ExportError(f"{path} holds a state_dict, not a pickled MACE model; "
                          "export the whole model (mace's run_train writes one as NAME.model)")
    return model.double().eval()


def _head_index(model, head):
    heads = list(getattr(model, "heads", None) or ["Default"])
    if head is None:
        if len(heads) > 1:
            raise ExportError(f"model has heads {heads}; choose one with --head NAME")
        return heads, 0
    if head not in heads:
        raise ExportError(f"head {head!r} not in the model's heads {heads}")
    return heads, heads.index(head)


def _pick_head(t, head_idx, n_heads, what):
    a = f64(t)
    if a.ndim == 0:
        return float(a)
    a = a.reshape(-1)
    if a.size == 1:
        return float(a[0])
    if a.size != n_heads:
        raise ExportError(f"{what}: {a.size} values for {n_heads} heads")
    return float(a[head_idx])


def _versions():
    import e3nn
    import torch
    import mace
    v = getattr(mace, "__version__", None)
    if v is None:
        from mace import __version__ as v  # noqa
    return {"torch": torch.__version__, "e3nn": e3nn.__version__, "mace": str(v)}


def export_mace(model, h5, head=None, source_file=""):
    """Write `model` (a loaded mace.modules.models.MACE/ScaleShiftMACE, float64) into open h5py File h5."""
    from e3nn import o3
    import torch

    cls = type(model).__name__
    if cls not in SUPPORTED_MODELS:
        raise ExportError(f"model class {cls} is not supported (supported: {', '.join(SUPPORTED_MODELS)})")
    for attr, what in (("joint_embedding", "joint embeddings (embedding_specs)"),
                       ("embedding_readout", "embedding readouts"),
                       ("les_readout", "LES long-range readout")):
        if hasattr(model, attr):
            raise ExportError(f"{what} are not supported")
    heads, hi = _head_index(model, head)
    z = [int(x) for x in model.atomic_numbers]
    n_el = len(z)

    def w3j(l1, l2, l3):
        return f64(o3.wigner_3j(l1, l2, l3, dtype=torch.float64))

    from .elements import SYMBOLS
    r = h5.attrs
    r["format"] = "cgequi-model"
    r["format_version"] = FORMAT_VERSION
    r["model_family"] = "mace"
    r["model_class"] = cls
    r["dtype"] = "float64"
    r["r_max"] = float(model.r_max)
    r["num_layers"] = len(model.interactions)
    r["species_z"] = np.array(z, dtype=np.int32)
    r["species_names"] = " ".join(SYMBOLS[x] for x in z)
    r["heads"] = " ".join(heads)
    r["head"] = heads[hi]
    r["edge_vector"] = "x_receiver - x_sender"
    for k, v in _versions().items():
        r["source_" + k] = str(v)
    r["source_file"] = source_file
    r["exporter_version"] = EXPORTER_VERSION
    r["export_date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")

    sh = model.spherical_harmonics
    if not (sh.normalize and sh.normalization == "component"):
        raise ExportError("spherical harmonics must be normalize=True, normalization='component'")
    r["lmax_sh"] = int(sh.irreps_out.lmax)
    r["sh_irreps"] = str(sh.irreps_out)

    # radial embedding
    re = model.radial_embedding
    bf = re.bessel_fn
    if type(bf).__name__ != "BesselBasis":
        raise ExportError(f"radial basis {type(bf).__name__} is not supported (BesselBasis only)")
    g = h5.create_group("radial")
    g.attrs["distance_transform"] = "none"
    if hasattr(re, "distance_transform"):
        dt = re.distance_transform
        if type(dt).__name__ != "AgnesiTransform":
            raise ExportError(f"distance transform {type(dt).__name__} is not supported (Agnesi only)")
        g.attrs["distance_transform"] = "agnesi"
        for k in ("q", "p", "a"):
            g.attrs["agnesi_" + k] = float(getattr(dt, k))
        g.create_dataset("agnesi_covalent_radii", data=f64(dt.covalent_radii)[z])
    if hasattr(model, "pair_repulsion"):
        zbl = model.pair_repulsion_fn
        pg = h5.create_group("pair_repulsion")
        pg.attrs["kind"] = "zbl"
        pg.create_dataset("c", data=f64(zbl.c).reshape(-1))
        pg.attrs["a_exp"] = float(zbl.a_exp)
        pg.attrs["a_prefactor"] = float(zbl.a_prefactor)
        pg.attrs["p"] = float(zbl.p)
        pg.create_dataset("covalent_radii", data=f64(zbl.covalent_radii)[z])
    g.attrs["kind"] = "bessel"
    g.create_dataset("bessel_weights", data=f64(bf.bessel_weights).reshape(-1))
    g.attrs["prefactor"] = float(bf.prefactor)
    g.attrs["r_max"] = float(bf.r_max)
    g.attrs["cutoff_p"] = float(re.cutoff_fn.p)
    g.attrs["cutoff_r_max"] = float(re.cutoff_fn.r_max)
    g.attrs["apply_cutoff"] = int(getattr(re, "apply_cutoff", True))

    # atomic reference energies and scale/shift for the chosen head
    e = h5.create_group("energy")
    ae = f64(model.atomic_energies_fn.atomic_energies)
    ae = np.atleast_2d(ae)
    if ae.shape[1] != n_el:
        raise ExportError(f"atomic_energies shape {ae.shape} does not match {n_el} elements")
    e.create_dataset("atomic_energies", data=ae[min(hi, ae.shape[0] - 1)])
    if cls == "ScaleShiftMACE":
        e.attrs["scale"] = _pick_head(model.scale_shift.scale, hi, len(heads), "scale_shift.scale")
        e.attrs["shift"] = _pick_head(model.scale_shift.shift, hi, len(heads), "scale_shift.shift")
    else:
        e.attrs["scale"] = 1.0
        e.attrs["shift"] = 0.0

    write_linear(h5, "node_embedding", model.node_embedding.linear, "node_embedding.linear")

    layers = h5.create_group("layers")
    for t, (inter, prod) in enumerate(zip(model.interactions, model.products)):
        lg = layers.create_group(str(t))
        name = type(inter).__name__
        if name not in INTERACTIONS:
            raise ExportError(f"interactions.{t}: {name} is not supported "
                              f"(supported: {', '.join(INTERACTIONS)})")
        if hasattr(inter, "conv_fusion"):
            raise ExportError(f"interactions.{t}: fused (cuEquivariance/OEQ) convolution; "
                              "convert the model back to e3nn first (mace_cueq_to_e3nn)")
        ig = lg.create_group("interaction")
        ig.attrs["kind"] = name
        ig.attrs["residual"] = int(INTERACTIONS[name]["residual"])
        ig.attrs["density"] = int(INTERACTIONS[name]["density"])
        ig.attrs["avg_num_neighbors"] = float(inter.avg_num_neighbors)
        ig.attrs["target_irreps"] = str(inter.irreps_out if hasattr(inter, "irreps_out") else inter.target_irreps)
        p = f"interactions.{t}"
        write_linear(ig, "linear_up", inter.linear_up, p + ".linear_up")
        write_tp(ig, "conv_tp", inter.conv_tp, p + ".conv_tp", w3j)
        write_fcnet(ig, "conv_tp_weights", inter.conv_tp_weights, p + ".conv_tp_weights")
        write_linear(ig, "linear", inter.linear, p + ".linear")
        write_tp(ig, "skip_tp", inter.skip_tp, p + ".skip_tp", w3j)
        if INTERACTIONS[name]["density"]:
            write_fcnet(ig, "density_fn", inter.density_fn, p + ".density_fn")

        pg = lg.create_group("product")
        pg.attrs["use_sc"] = int(bool(prod.use_sc))
        pg.attrs["agnostic"] = int(bool(getattr(prod, "use_agnostic_product", False)))
        scm = prod.symmetric_contractions
        if type(scm).__name__ != "SymmetricContraction":
            raise ExportError(f"products.{t}: {type(scm).__name__} is not supported (e3nn SymmetricContraction only)")
        sg = pg.create_group("symmetric_contraction")
        sg.attrs["irreps_in"] = str(scm.irreps_in)
        sg.attrs["irreps_out"] = str(scm.irreps_out)
        sg.attrs["num_contractions"] = len(scm.contractions)
        for k, c in enumerate(scm.contractions):
            cg = sg.create_group(str(k))
            nu_max = int(c.correlation)
            cg.attrs["correlation"] = nu_max
            cg.attrs["irrep_out"] = str(scm.irreps_out[k].ir)
            cg.attrs["coupling_irreps"] = str(c.coupling_irreps)
            for nu in range(1, nu_max + 1):
                # U matrices are mostly zeros: compress them (transparent to readers)
                cg.create_dataset(f"U_{nu}", data=f64(c.U_tensors(nu)), compression="gzip", compression_opts=6)
                w = c.weights_max if nu == nu_max else c.weights[nu_max - 1 - nu]
                cg.create_dataset(f"W_{nu}", data=f64(w))
        write_linear(pg, "linear", prod.linear, f"products.{t}.linear")

    rg = h5.create_group("readouts")
    n_read = len(model.readouts)
    for k, ro in enumerate(model.readouts):
        g = rg.create_group(str(k))
        g.attrs["layer"] = len(model.interactions) - 1 if n_read == 1 else k
        g.attrs["head_index"] = hi
        g.attrs["num_heads"] = len(heads)
        name = type(ro).__name__
        p = f"readouts.{k}"
        if name == "LinearReadoutBlock":
            g.attrs["kind"] = "linear"
            write_linear(g, "linear", ro.linear, p + ".linear")
        elif name in ("NonLinearReadoutBlock", "NonLinearBiasReadoutBlock"):
            g.attrs["kind"] = "nonlinear" if name == "NonLinearReadoutBlock" else "nonlinear_bias"
            acts = list(ro.non_linearity.acts)
            if len(acts) != 1 or len(ro.non_linearity.irreps_in) != 1 or ro.non_linearity.irreps_in[0].ir.l != 0:
                raise ExportError(f"{p}: readout activation layout {ro.non_linearity.irreps_in} not supported")
            write_activation(g, acts[0])
            g.attrs["mask_heads"] = int(getattr(ro, "num_heads", 1) > 1)
            write_linear(g, "linear_1", ro.linear_1, p + ".linear_1")
            if g.attrs["kind"] == "nonlinear_bias":
                write_linear(g, "linear_mid", ro.linear_mid, p + ".linear_mid")
            write_linear(g, "linear_2", ro.linear_2, p + ".linear_2")
        else:
            raise ExportError(f"{p}: readout {name} is not supported")
    return heads[hi]
