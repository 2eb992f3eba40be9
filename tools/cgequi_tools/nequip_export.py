"""NequIP (nequip >= 0.7, e3nn >= 0.5) -> cgequi HDF5 model file (docs/model-format.md, "NequIP groups").

Everything the model computes is copied from the live modules (shared/design/model-math.md C, D):
type embedding, Bessel weights, cutoff p, per-edge-type 1/r_max table, the 2 pi / r_max^2 factor,
per-layer linears, convolution TP (instructions in the model's order, path weights, W3j), radial
MLP weights and alphas, self-connection FCTP, avg_num_neighbors normalisation constants, the gate
as explicit index maps with per-channel normalize2mom constants, readout MLP, per-type scales and
shifts and the ZBL pair term. Nothing is re-derived from hyper-parameters.
"""
import numpy as np

from .h5blocks import ExportError, f64, write_linear, write_tp

# cgq_act codes (src/model/model.h): identity, silu, tanh, sigmoid, ssp, abs
ACT_CODES = {"identity": 0, "silu": 1, "tanh": 2, "sigmoid": 3, "ssp": 4, "abs": 5}

# nequip.nn.pair_potential._ZBL hard-codes these literals in its forward (nequip 0.7 ... 0.19)
ZBL_CONSTANTS = dict(pzbl=0.23, a0=0.46850, c=[0.02817, 0.28022, 0.50986, 0.18175],
                     d=[-0.20162, -0.40290, -0.94229, -3.19980])


def _versions():
    import e3nn
    import nequip
    import torch
    return {"torch": torch.__version__, "e3nn": e3nn.__version__, "nequip": getattr(nequip, "__version__", "?")}


def load_nequip(path):
    """A GraphModel from a training checkpoint (.ckpt) or a package (.nequip.zip). Older deployed
    TorchScript files (.pth, nequip 0.5/0.6; .nequip.pth/.pt2 compiled models) are refused."""
    import zipfile
    low = path.lower()
    if low.endswith((".pth", ".pt", ".pt2")) or (zipfile.is_zipfile(path) and _is_torchscript(path)):
        raise ExportError(
            "this is a deployed/compiled TorchScript or AOTInductor NequIP model (nequip-deploy .pth of "
            "nequip 0.5/0.6, or nequip-compile .nequip.pth/.nequip.pt2); compiled files do not keep the "
            "Python modules (irreps, instruction order, normalize2mom constants, MLP alphas) that an exact "
            "export needs. Export the training checkpoint (.ckpt) or a nequip-package file (.nequip.zip) "
            "instead; for a 0.5/0.6 model, re-train or convert it with nequip >= 0.7")
    from nequip.utils.global_state import set_global_state
    set_global_state()
    from nequip.model.saved_models.load_utils import load_saved_model
    try:
        model = load_saved_model(path)
    except Exception as e:  # noqa: BLE001 - report what nequip said
        raise ExportError(f"nequip could not load it as a checkpoint or package: {type(e).__name__}: {e}")
    return model


def _is_torchscript(path):
    import zipfile
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except zipfile.BadZipFile:
        return False
    return any(n.endswith("constants.pkl") or "/code/__torch__" in n for n in names) and \
        not any(n.endswith(".pkl") and "model/" in n and "eager_model" in n for n in names)


def _cls(m):
    return type(m).__name__


def _energy_net(model):
    """GraphModel -> (ForceStressOutput-like wrapper, SequentialGraphNetwork)."""
    inner = model
    if _cls(inner) == "GraphModel":
        inner = inner.model
    if _cls(inner) in ("ForceStressOutput", "ForceOutput", "PartialForceOutput"):
        if _cls(inner) != "ForceStressOutput":
            raise ExportError(f"output wrapper {_cls(inner)} is not supported (ForceStressOutput)")
        return inner, inner.func
    raise ExportError(f"unexpected model structure: {_cls(model)} -> {_cls(inner)}; expected a NequIP GraphModel "
                      "with ForceStressOutput (an energy model)")


def _w3j_lookup(tp):
    """W3j constants held by the TP's generated code (buffers or attributes named _w3j_l1_l2_l3)."""
    out = {}
    for owner in ("_compiled_main_left_right", "_compiled_main_right"):
        mod = getattr(tp, owner, None)
        if mod is None:
            continue
        names = set(n for n, _ in mod.named_buffers()) | set(n for n in dir(mod) if n.startswith("_w3j_"))
        for n in names:
            if not n.startswith("_w3j_"):
                continue
            t = getattr(mod, n, None)
            if t is None or not hasattr(t, "shape"):
                continue
            l1, l2, l3 = (int(s) for s in n[len("_w3j_"):].split("_"))
            out.setdefault((l1, l2, l3), f64(t))
    return out


def _write_tp(parent, name, tp, path):
    from e3nn import o3
    import torch
    bufs = _w3j_lookup(tp)

    def w3j(l1, l2, l3):
        if (l1, l2, l3) in bufs:
            return bufs[(l1, l2, l3)]
        return f64(o3.wigner_3j(l1, l2, l3, dtype=torch.float64))
    g = write_tp(parent, name, tp, path, w3j)
    for k, ins in enumerate(tp.instructions):
        key = (tp.irreps_in1[ins.i_in1].ir.l, tp.irreps_in2[ins.i_in2].ir.l, tp.irreps_out[ins.i_out].ir.l)
        if key in bufs:
            g["w3j"][str(k)].attrs["source"] = "buffer"
    return g


def _act_of(mod):
    """(name, cst) of an activation module: e3nn normalize2mom wrapper, torch.nn activation or None."""
    if mod is None:
        return "identity", 1.0
    cls = _cls(mod)
    if cls == "normalize2mom":
        f = mod.f
        fname = getattr(f, "__name__", _cls(f))
        table = {"silu": "silu", "tanh": "tanh", "sigmoid": "sigmoid", "shifted_softplus": "ssp", "abs": "abs",
                 "ShiftedSoftplus": "ssp"}
        if fname not in table:
            raise ExportError(f"gate activation {fname!r} is not supported (silu, tanh, sigmoid, ssp, abs)")
        cst = 1.0 if getattr(mod, "_is_id", False) else float(mod.cst)
        return table[fname], cst
    table = {"SiLU": "silu", "Tanh": "tanh", "Sigmoid": "sigmoid", "ShiftedSoftplus": "ssp", "Identity": "identity"}
    if cls not in table:
        raise ExportError(f"activation {cls} is not supported (SiLU, Tanh, Sigmoid, ShiftedSoftplus)")
    return table[cls], 1.0


def _write_mlp(parent, name, fn, path):
    """nequip ScalarMLPFunction: y = act(x @ (W_k alpha_k)) per layer, no activation after the last."""
    import torch
    g = parent.create_group(name)
    g.attrs["module"] = path
    if fn.bias:
        raise ExportError(f"{path}: MLP biases are not supported")
    seq = fn.mlp
    if _cls(seq) == "DeepLinearMLP":
        raise ExportError(f"{path}: deep linear MLPs (nonlinearity None with hidden layers) are not supported")
    layers, act = [], None
    for sub in seq:
        if _cls(sub) == "ScalarLinearLayer":
            if getattr(sub, "bias", None) is not None:
                raise ExportError(f"{path}: MLP biases are not supported")
            if hasattr(sub, "parametrizations"):
                raise ExportError(f"{path}: parametrized (weight/spectral norm) MLP layers are not supported")
            layers.append(sub)
        else:
            a = _act_of(sub)
            if act is not None and a != act:
                raise ExportError(f"{path}: mixed activations in one MLP")
            act = a
    if len(layers) < 1 or len(layers) > 8:
        raise ExportError(f"{path}: {len(layers)} MLP layers (1..8 supported)")
    if len(layers) > 1 and act is None:
        raise ExportError(f"{path}: hidden layers without activation are not supported")
    act = act or ("identity", 1.0)
    g.attrs["num_layers"] = len(layers)
    g.attrs["act"] = act[0]
    g.attrs["act_cst"] = act[1]
    alphas = []
    for k, lay in enumerate(layers):
        g.create_dataset(f"layer{k}", data=f64(lay.weight))
        a = lay.alpha
        alphas.append(float(a) if not torch.is_tensor(a) else float(a.detach().double()))
    g.create_dataset("alphas", data=np.array(alphas, dtype=np.float64))
    return g


def _write_gate(parent, name, gate, path):
    """e3nn Gate as explicit index maps over the flat input (derived by running its Extract on indices)."""
    import torch
    g = parent.create_group(name)
    g.attrs["module"] = path
    g.attrs["irreps_in"] = str(gate.irreps_in)
    g.attrs["irreps_out"] = str(gate.irreps_out)
    dim = gate.irreps_in.dim
    idx = torch.arange(dim, dtype=torch.float64)
    scalars, gates, gated = gate.sc(idx)
    s_src = scalars.round().long().tolist()
    g_src = gates.round().long().tolist()
    d_src = gated.round().long().tolist()

    def per_channel(act_mod, irreps):
        codes, csts = [], []
        for (mul, (l, p), a) in act_mod.paths:
            name_, cst = _act_of(a)
            for _ in range(mul * (2 * l + 1)):
                codes.append(ACT_CODES[name_])
                csts.append(cst)
        return codes, csts
    s_act, s_cst = per_channel(gate.act_scalars, gate.irreps_scalars)
    if len(s_act) != len(s_src):
        raise ExportError(f"{path}: scalar activation layout mismatch")
    g.create_dataset("scalar_src", data=np.array(s_src, dtype=np.int32))
    g.create_dataset("scalar_act", data=np.array(s_act, dtype=np.int32))
    g.create_dataset("scalar_cst", data=np.array(s_cst, dtype=np.float64))
    gated_src, gated_gate, gate_act, gate_cst, factor = [], [], [], [], []
    if len(g_src):
        ga, gc = per_channel(gate.act_gates, gate.irreps_gates)
        # which gate scalar multiplies each gated component, and the ElementwiseTP's net factor, read
        # off the module itself: gated component j, gate u -> mul(e_j, e_u)
        n_gated, n_gates = len(d_src), len(g_src)
        # ElementwiseTP: out = mul(gated, gates); find pairing by probing with one-hot gates
        eye_g = torch.eye(n_gates, dtype=torch.float64)
        ones_d = torch.ones(n_gates, n_gated, dtype=torch.float64)
        probe = gate.mul(ones_d, eye_g)  # [n_gates, n_gated]
        for j in range(n_gated):
            col = probe[:, j]
            nz = torch.nonzero(col).view(-1).tolist()
            if len(nz) != 1:
                raise ExportError(f"{path}: gated component {j} is multiplied by {len(nz)} gates")
            u = nz[0]
            gated_src.append(d_src[j])
            gated_gate.append(g_src[u])
            gate_act.append(ga[u])
            gate_cst.append(gc[u])
            factor.append(float(col[u]))
    g.create_dataset("gated_src", data=np.array(gated_src, dtype=np.int32))
    g.create_dataset("gated_gate", data=np.array(gated_gate, dtype=np.int32))
    g.create_dataset("gate_act", data=np.array(gate_act, dtype=np.int32))
    g.create_dataset("gate_cst", data=np.array(gate_cst, dtype=np.float64))
    g.create_dataset("gated_factor", data=np.array(factor, dtype=np.float64))
    if len(s_src) + len(gated_src) != gate.irreps_out.dim:
        raise ExportError(f"{path}: gate output size mismatch")
    return g


def _type_z(type_names, chemical_species=None):
    from ase.data import atomic_numbers
    zs = []
    for k, t in enumerate(type_names):
        sym = chemical_species[k] if chemical_species else t
        if sym not in atomic_numbers or atomic_numbers[sym] < 1:
            raise ExportError(f"type name {t!r} is not a chemical symbol; pass --species with one element "
                              f"symbol per type ({' '.join(type_names)})")
        zs.append(atomic_numbers[sym])
    if len(set(zs)) != len(zs):
        raise ExportError(f"two model types map to the same element ({type_names} -> {zs}); cgequi needs one "
                          "type per element")
    return zs


def to_float64(model):
    """A float32 NequIP model cast to float64 in place: every parameter and buffer (values keep their
    float32 rounding, constants included) and the dtype attributes nequip modules cast their outputs to.
    This cast model is the reference cgequi reproduces exactly (shared/design/model-math.md D2)."""
    import torch
    model.double()
    for mod in model.modules():
        for attr in ("_output_dtype", "model_dtype", "out_dtype"):
            if isinstance(getattr(mod, attr, None), torch.dtype):
                setattr(mod, attr, torch.float64)
    meta = getattr(model, "metadata", None)
    if isinstance(meta, dict) and "model_dtype" in meta:
        meta["model_dtype"] = "float64"
    return model


def _check_float64(model):
    import torch
    bad = [n for n, p in list(model.named_parameters()) + list(model.named_buffers())
           if p.is_floating_point() and p.dtype != torch.float64 and p.numel()]
    return bad


def export_nequip(model, h5, source_file="", species=None):
    """Write a NequIP GraphModel into the open h5py File h5. Returns the list of type names."""
    import torch
    wrapper, net = _energy_net(model)
    mods = dict(net.named_children())
    cls = _cls(net)
    if cls != "SequentialGraphNetwork":
        raise ExportError(f"unexpected energy network {cls}")
    meta = getattr(model, "metadata", {}) or {}
    source_dtype = str(meta.get("model_dtype", "float64"))
    if source_dtype != "float64" or _check_float64(model):
        to_float64(model)  # float32 network: exported (and self-tested) as its float64 cast
        meta = getattr(model, "metadata", {}) or {}
    if _check_float64(model):
        raise ExportError(f"tensors {_check_float64(model)[:5]} are not float64 after the cast")
    known = {"type_embed", "spharm", "edge_norm", "bessel_encode", "factor", "per_atom_energy_readout",
             "per_type_energy_scale_shift", "pair_potential", "total_energy_sum"}
    layer_names = sorted((k for k in mods if k.startswith("layer") and k.endswith("_convnet")),
                         key=lambda s: int(s[5:-8]))
    extra = [k for k in mods if k not in known and k not in layer_names]
    if extra:
        raise ExportError(f"modules {extra} are not supported (a NequIPGNNModel has type_embed, spharm, edge_norm, "
                          "bessel_encode, factor, layer<i>_convnet, per_atom_energy_readout, "
                          "per_type_energy_scale_shift, [pair_potential], total_energy_sum)")
    for k in ("type_embed", "spharm", "edge_norm", "bessel_encode", "factor", "per_atom_energy_readout"):
        if k not in mods:
            raise ExportError(f"module {k} missing: not a NequIPGNNModel")
    te = mods["type_embed"]
    if getattr(te, "do_categorical_graph_field_embed", False):
        raise ExportError("categorical graph field embeddings are not supported")
    type_names = list(te.type_names) if hasattr(te, "type_names") else str(meta["type_names"]).split()
    T = len(type_names)
    zs = _type_z(type_names, species)

    sh = mods["spharm"]
    if not sh.sh.normalize or sh.sh.normalization != "component":
        raise ExportError("spherical harmonics must be normalize=True, normalization='component'")
    sh_irreps = sh.irreps_edge_sh
    lmax = max(ir.l for _, ir in sh_irreps)
    from e3nn import o3
    if sh_irreps != o3.Irreps.spherical_harmonics(lmax):
        raise ExportError(f"edge spherical harmonics {sh_irreps} must be the full set up to l_max")
    if lmax > 3:
        raise ExportError(f"l_max {lmax} > 3 is not supported")

    en = mods["edge_norm"]
    rr = f64(en._rmax_recip).reshape(-1)
    if rr.size == 1:
        rr = np.full(T * T, rr[0])
    if rr.size != T * T:
        raise ExportError("edge_norm._rmax_recip has an unexpected size")
    per_edge = bool(getattr(en, "_per_edge_type", False))
    r_max = float(en.r_max)
    if per_edge:
        r_max_eff = float(np.max(1.0 / rr))
        if r_max_eff > r_max * (1 + 1e-12):
            raise ExportError("a per-edge-type cutoff exceeds r_max")
    be = mods["bessel_encode"]
    if _cls(be.cutoff) not in ("PolynomialCutoff", "RecursiveScriptModule"):
        raise ExportError(f"cutoff {_cls(be.cutoff)} is not supported (PolynomialCutoff)")
    p = float(be.cutoff.p)
    fac = mods["factor"]
    if getattr(fac, "in_field", "edge_embedding") != "edge_embedding":
        raise ExportError("ApplyFactor on a field other than the edge embedding")

    v = _versions()
    r = h5.attrs
    r["format"] = "cgequi-model"
    r["format_version"] = 1
    r["model_family"] = "nequip"
    r["model_class"] = "NequIPGNNModel"
    r["dtype"] = "float64"
    r["source_model_dtype"] = source_dtype
    r["r_max"] = r_max
    r["num_layers"] = len(layer_names)
    r["lmax_sh"] = int(lmax)
    r["sh_irreps"] = str(sh_irreps)
    r["species_z"] = np.array(zs, dtype=np.int32)
    r["species_names"] = " ".join(type_names)
    r["heads"] = ""
    r["head"] = ""
    r["edge_vector"] = "x_sender - x_receiver"
    r["source_torch"] = str(v["torch"])
    r["source_e3nn"] = str(v["e3nn"])
    r["source_nequip"] = str(v["nequip"])
    r["source_file"] = source_file
    import datetime
    r["exporter_version"] = "cgequi-export 0.1 (nequip)"
    r["export_date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")

    g = h5.create_group("type_embed")
    g.attrs["module"] = "type_embed.embed_module"
    g.create_dataset("weight", data=f64(te.embed_module.weight))
    F_emb = te.embed_module.weight.shape[1]

    rad = h5.create_group("radial")
    rad.attrs["kind"] = "nequip_bessel"
    bw = f64(be.bessel_weights).reshape(-1)
    rad.create_dataset("bessel_weights", data=bw)
    rad.attrs["trainable"] = int(bool(getattr(be, "trainable", False)))
    rad.attrs["cutoff_p"] = p
    rad.attrs["factor"] = float(fac.factor)
    rad.attrs["per_edge_type_cutoff"] = int(per_edge)
    rad.create_dataset("rmax_recip", data=rr.reshape(T, T))

    layers = h5.create_group("layers")
    prev_dim = F_emb
    for t, ln in enumerate(layer_names):
        cl = mods[ln]
        if _cls(cl) != "ConvNetLayer":
            raise ExportError(f"{ln}: {_cls(cl)} is not supported (ConvNetLayer)")
        conv = cl.conv
        if _cls(conv) != "InteractionBlock":
            raise ExportError(f"{ln}.conv: {_cls(conv)} is not supported (InteractionBlock)")
        gate = cl.equivariant_nonlin
        if _cls(gate) != "Gate":
            raise ExportError(f"{ln}: nonlinearity {_cls(gate)} is not supported (gate)")
        tps = conv.tp_scatter
        if _cls(tps) != "TensorProductScatter":
            raise ExportError(f"{ln}: {_cls(tps)} (an accelerated TP) is not supported; export the plain model")
        lg = layers.create_group(str(t))
        lg.attrs["module"] = ln
        lg.attrs["resnet"] = int(bool(cl.resnet))
        lg.attrs["use_sc"] = int(conv.sc is not None)
        lg.attrs["is_first_layer"] = int(bool(conv.is_first_layer))
        nc = f64(conv.avg_num_neighbors_norm.norm_const).reshape(-1)
        if nc.size == 1:
            nc = np.full(T, nc[0])
        lg.create_dataset("norm_const", data=nc)
        write_linear(lg, "linear_1", conv.linear_1, f"{ln}.conv.linear_1")
        _write_tp(lg, "tp", tps.tp, f"{ln}.conv.tp_scatter.tp")
        _write_mlp(lg, "edge_mlp", conv.edge_mlp, f"{ln}.conv.edge_mlp")
        write_linear(lg, "linear_2", conv.linear_2, f"{ln}.conv.linear_2")
        if conv.sc is not None:
            _write_tp(lg, "sc", conv.sc, f"{ln}.conv.sc")
        _write_gate(lg, "gate", gate, f"{ln}.equivariant_nonlin")
        if conv.linear_1.irreps_in.dim != prev_dim:
            raise ExportError(f"{ln}: input dimension {conv.linear_1.irreps_in.dim}, previous output {prev_dim}")
        prev_dim = gate.irreps_out.dim

    ro = mods["per_atom_energy_readout"]
    if getattr(ro, "field", "node_features") != "node_features":
        raise ExportError("readout of a field other than node_features")
    _write_mlp(h5, "readout", ro.mlp_module, "per_atom_energy_readout.mlp_module")

    eg = h5.create_group("energy")
    ss = mods.get("per_type_energy_scale_shift")
    scales, shifts = np.ones(T), np.zeros(T)
    if ss is not None:
        if ss.has_scales:
            s = f64(ss.scales).reshape(-1)
            scales = np.full(T, s[0]) if s.size == 1 else s
        if ss.has_shifts:
            s = f64(ss.shifts).reshape(-1)
            shifts = np.full(T, s[0]) if s.size == 1 else s
    eg.create_dataset("scales", data=scales)
    eg.create_dataset("shifts", data=shifts)

    pp = mods.get("pair_potential")
    if pp is not None:
        if _cls(pp) != "ZBL":
            raise ExportError(f"pair potential {_cls(pp)} is not supported (ZBL)")
        pg = h5.create_group("pair_potential")
        pg.attrs["kind"] = "zbl"
        pg.attrs["module"] = "pair_potential"
        pg.attrs["qqr2exesquare"] = float(pp._qqr2exesquare)
        pg.attrs["cutoff_p"] = float(pp.cutoff.p)
        pg.attrs["pzbl"] = ZBL_CONSTANTS["pzbl"]
        pg.attrs["a0"] = ZBL_CONSTANTS["a0"]
        pg.create_dataset("c", data=np.array(ZBL_CONSTANTS["c"]))
        pg.create_dataset("d", data=np.array(ZBL_CONSTANTS["d"]))
        pg.create_dataset("atomic_numbers", data=f64(pp.atomic_numbers).reshape(-1))
    return type_names


# ---------------------------------------------------------------------------------------------
def nequip_reference(model, atoms, type_names, species_z=None):
    """Energy, forces, virial, stress and per-atom energies from nequip itself (its own neighbour list
    with per-edge-type pruning, its ForceStressOutput), plus per-atom virials from autograd of the
    same energy network w.r.t. nequip's edge vectors (cgequi convention, docs/model-format.md)."""
    import torch
    from nequip.data import AtomicDataDict
    from nequip.data.ase import from_ase
    from nequip.integrations.utils import basic_transforms

    from ase.data import chemical_symbols
    meta = dict(getattr(model, "metadata", {}) or {})
    cmap = {t: t for t in type_names} if species_z is None else \
        {chemical_symbols[z]: t for z, t in zip(species_z, type_names)}
    tfs = basic_transforms(meta, float(meta.get("r_max", 0)) or float(_energy_net(model)[1].edge_norm.r_max),
                           type_names, cmap)
    a = atoms.copy()
    a.calc = None
    data = from_ase(a)
    for tf in tfs:
        data = tf(data)
    model.eval()
    out = model(dict(data))
    res = {
        "energy": float(out[AtomicDataDict.TOTAL_ENERGY_KEY].detach().double().reshape(-1)[0]),
        "forces": f64(out[AtomicDataDict.FORCE_KEY]),
        "atomic_energies": f64(out[AtomicDataDict.PER_ATOM_ENERGY_KEY]).reshape(-1),
        "num_edges": int(data[AtomicDataDict.EDGE_INDEX_KEY].shape[1]),
    }
    if AtomicDataDict.VIRIAL_KEY in out:
        res["virial"] = f64(out[AtomicDataDict.VIRIAL_KEY]).reshape(3, 3)
    if any(a.pbc) and AtomicDataDict.STRESS_KEY in out:
        res["stress"] = f64(out[AtomicDataDict.STRESS_KEY]).reshape(3, 3)
    # per-edge gradients through the energy network with nequip's own edge vectors
    _, net = _energy_net(model)
    d2 = {k: v for k, v in data.items()}
    ei = d2[AtomicDataDict.EDGE_INDEX_KEY]
    pos = d2[AtomicDataDict.POSITIONS_KEY].detach()
    vec = pos[ei[1]] - pos[ei[0]]
    if AtomicDataDict.CELL_KEY in d2:
        vec = vec + d2[AtomicDataDict.EDGE_CELL_SHIFT_KEY].to(vec.dtype) @ d2[AtomicDataDict.CELL_KEY].view(3, 3)
    vec = vec.detach().clone().requires_grad_(True)
    d2[AtomicDataDict.EDGE_VECTORS_KEY] = vec
    d2.pop(AtomicDataDict.EDGE_LENGTH_KEY, None)
    o2 = net(d2)
    e2 = o2[AtomicDataDict.TOTAL_ENERGY_KEY].sum()
    (g,) = torch.autograd.grad(e2, [vec])
    g = g.detach().double().numpy()
    v_ = vec.detach().double().numpy()
    n = len(a)
    av = np.zeros((n, 3, 3))
    c0, c1 = ei[0].numpy(), ei[1].numpy()
    for e in range(len(c0)):
        w = -0.5 * (np.outer(v_[e], g[e]) + np.outer(g[e], v_[e]))
        av[c0[e]] += 0.5 * w
        av[c1[e]] += 0.5 * w
    res["atomic_virials"] = av
    res["edge_energy_check"] = abs(float(e2.detach()) - res["energy"])
    if "virial" not in res:
        res["virial"] = av.sum(axis=0)
    return res
