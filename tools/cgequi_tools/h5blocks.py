"""Writers for the generic primitive groups of the cgequi HDF5 model format (docs/model-format.md)."""
import numpy as np

TP_MODES = {"uvw": 0, "uvu": 1, "uuu": 2}


class ExportError(RuntimeError):
    """A model feature the exporter (and so the C evaluator) does not support."""


def f64(t):
    """Materialize a tensor (possibly a non-contiguous view) as a C-ordered float64 array."""
    return np.ascontiguousarray(t.detach().cpu().double().numpy())


def act_name(fn):
    name = getattr(fn, "__name__", type(fn).__name__)
    table = {"silu": "silu", "tanh": "tanh", "sigmoid": "sigmoid", "ShiftedSoftPlus": "ssp",
             "ssp": "ssp", "shifted_softplus": "ssp", "abs": "abs"}
    if name not in table:
        raise ExportError(f"activation function {name!r} is not supported (silu, tanh, sigmoid, ssp, abs)")
    return table[name]


def write_activation(group, act, prefix="act"):
    """act: an e3nn normalize2mom instance (cst is a Python attribute, never recomputed) or None."""
    if act is None:
        group.attrs[prefix] = "identity"
        group.attrs[prefix + "_cst"] = 1.0
        return
    group.attrs[prefix] = act_name(act.f)
    cst = float(act.cst)
    if getattr(act, "_is_id", False):
        cst = 1.0
    group.attrs[prefix + "_cst"] = cst


def write_linear(parent, name, lin, path):
    """e3nn o3.Linear: irreps, instructions (i_in, i_out), final path weights, flat weight, bias."""
    g = parent.create_group(name)
    g.attrs["module"] = path
    g.attrs["irreps_in"] = str(lin.irreps_in)
    g.attrs["irreps_out"] = str(lin.irreps_out)
    # e3nn lists biases as extra instructions with i_in == -1 (path_weight 1, one per biased output
    # irrep; biases=True biases every 0e output). The format stores them as the `bias` dataset.
    bias_ins = [i for i in lin.instructions if i.i_in == -1]
    ins = [i for i in lin.instructions if i.i_in != -1]
    if bias_ins:
        biased = sorted(i.i_out for i in bias_ins)
        scalars = [k for k, (_, ir) in enumerate(lin.irreps_out) if ir.l == 0 and ir.p == 1]
        if biased != scalars or any(float(i.path_weight) != 1.0 for i in bias_ins):
            raise ExportError(f"{path}: biases on outputs {biased} (path weights "
                              f"{[float(i.path_weight) for i in bias_ins]}) are not supported; "
                              f"only a bias on every 0e output with path weight 1")
    g.create_dataset("instructions", data=np.array([[i.i_in, i.i_out] for i in ins], dtype=np.int32).reshape(-1, 2))
    g.create_dataset("path_weights", data=np.array([float(i.path_weight) for i in ins], dtype=np.float64))
    w = f64(lin.weight).reshape(-1)
    expected = sum(lin.irreps_in[i.i_in].mul * lin.irreps_out[i.i_out].mul for i in ins)
    if w.size != expected:
        raise ExportError(f"{path}: weight has {w.size} entries, expected {expected}")
    g.create_dataset("weight", data=w)
    bias = getattr(lin, "bias", None)
    if bias is not None and bias.numel() > 0:
        g.create_dataset("bias", data=f64(bias).reshape(-1))
    return g


def w3j_buffers(tp):
    """W3j tensors the reference TP actually uses: buffers of its compiled code, keyed (l1,l2,l3)."""
    out = {}
    for owner in ("_compiled_main_left_right", "_compiled_main_right", "_compiled_main_left"):
        mod = getattr(tp, owner, None)
        if mod is None:
            continue
        for bname, buf in mod.named_buffers():
            if bname.startswith("_w3j_"):
                l1, l2, l3 = (int(s) for s in bname[len("_w3j_"):].split("_"))
                out.setdefault((l1, l2, l3), f64(buf))
    return out


def write_tp(parent, name, tp, path, w3j_fn):
    """e3nn TensorProduct (incl. FullyConnectedTensorProduct): instructions, path weights, W3j per
    instruction (buffer of the model if present, else the installed e3nn's wigner_3j), weights."""
    g = parent.create_group(name)
    g.attrs["module"] = path
    g.attrs["irreps_in1"] = str(tp.irreps_in1)
    g.attrs["irreps_in2"] = str(tp.irreps_in2)
    g.attrs["irreps_out"] = str(tp.irreps_out)
    external = not tp.internal_weights
    g.attrs["external_weights"] = int(external)
    rows, pws = [], []
    for ins in tp.instructions:
        if ins.connection_mode not in TP_MODES:
            raise ExportError(f"{path}: tensor-product mode {ins.connection_mode!r} is not supported")
        rows.append([ins.i_in1, ins.i_in2, ins.i_out, TP_MODES[ins.connection_mode], int(ins.has_weight)])
        pws.append(float(ins.path_weight))
    g.create_dataset("instructions", data=np.array(rows, dtype=np.int32).reshape(-1, 5))
    g.create_dataset("path_weights", data=np.array(pws, dtype=np.float64))
    buffers = w3j_buffers(tp)
    wg = g.create_group("w3j")
    for k, ins in enumerate(tp.instructions):
        l1 = tp.irreps_in1[ins.i_in1].ir.l
        l2 = tp.irreps_in2[ins.i_in2].ir.l
        l3 = tp.irreps_out[ins.i_out].ir.l
        if (l1, l2, l3) in buffers:
            c, src = buffers[(l1, l2, l3)], "buffer"
        else:
            c, src = w3j_fn(l1, l2, l3), "e3nn.o3.wigner_3j"
        ds = wg.create_dataset(str(k), data=c)
        ds.attrs["source"] = src
    if not external:
        g.create_dataset("weight", data=f64(tp.weight).reshape(-1))
    g.attrs["weight_numel"] = int(tp.weight_numel)
    return g


def write_fcnet(parent, name, fc, path):
    """e3nn nn.FullyConnectedNet: weights [h_in, h_out] per layer; hidden layers use the
    normalize2mom'd activation (its Monte-Carlo cst exported), the last layer none."""
    g = parent.create_group(name)
    g.attrs["module"] = path
    layers = [fc._modules[k] for k in sorted((k for k in fc._modules if k.startswith("layer")), key=lambda s: int(s[5:]))]
    g.attrs["num_layers"] = len(layers)
    hidden_act = None
    for k, layer in enumerate(layers):
        if float(layer.var_in) != 1.0 or float(layer.var_out) != 1.0:
            raise ExportError(f"{path}.layer{k}: var_in/var_out != 1 is not supported")
        g.create_dataset(f"layer{k}", data=f64(layer.weight))
        if layer.act is not None:
            if k == len(layers) - 1:
                raise ExportError(f"{path}: an activation on the output layer is not supported")
            hidden_act = layer.act
        elif k < len(layers) - 1:
            raise ExportError(f"{path}.layer{k}: hidden layer without activation is not supported")
    write_activation(g, hidden_act)
    return g
