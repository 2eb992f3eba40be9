#!/usr/bin/env python3
"""oeq_conv_bench.py: the MACE-MP-0-medium convolution (tensor product + sum over each receiver's edges), forward
and forward+backward, in OpenEquivariance's deterministic fused kernel and in mace-torch's own path (e3nn
TensorProduct on the gathered sender features, then mace's scatter_sum), on the graph of a replicated structure.
The peer of bench/conv_workbench.cu (issue #5): same layers, same graph, same kind of random operands.

usage: oeq_conv_bench.py STRUCTURE.xyz NX NY NZ [--layers 0,1] [--dtypes fp32,fp64] [--reps 20] [--warmup 3]
                         [--cutoff 6.0] [--seed 12345] [--model MODEL] [--no-oeq] [--no-e3nn] [--no-check]
                         [--ref-chunk EDGES] [--oeq-codegen DIR]

Problem: the conv_tp of mace's RealAgnosticResidualInteractionBlock, built by mace itself
(tp_out_irreps_with_instructions inside the block's _setup) for the MACE-MP-0-medium architecture: hidden irreps
128x0e+128x1o, l_max 3 (edge attributes 1x0e+1x1o+1x2e+1x3o), targets 128x(0e+1o+2e+3o); layer 0 takes 128x0e
node features (4 uvu instructions), layer 1 128x0e+128x1o (10 instructions); per-edge weights (shared_weights=False,
internal_weights=False). With --model MODEL (a pickled mace model, e.g. from tools/make_bench_models.py) the
model's own interactions[layer].conv_tp is used instead, after checking that it is the same problem.
Graph: the structure's first frame tiled NX x NY x NZ, every pair within --cutoff (periodic images included, self
pairs excluded), sorted by receiver then sender; edge attributes are mace's spherical harmonics of the edge vectors
(normalize=True, normalization="component"); node features and weights are random normal (--seed).
Check (unless --no-check): a float64 e3nn evaluation of the definition (chunked over edges to bound memory) is the
reference for the output and the gradients of sum(out * G) w.r.t. node features, edge attributes and weights
(G random); errors are max|a - ref| / max|ref| per tensor, and "err" is the largest of them.
Timing: CUDA events, median (and min) of --reps after --warmup; "fwd" is the forward alone (no autograd), "fwd+bwd"
the forward then torch.autograd.grad for all three inputs; "peak" is the process's peak GPU memory during the
fwd+bwd timing (it includes the operands and the float64 reference that the script holds). On a machine without CUDA the script still builds the
problem and the graph and runs the e3nn reference and timings on the CPU (a dry run; OpenEquivariance is skipped,
but --oeq-codegen DIR writes the CUDA source OpenEquivariance would compile for an H100 into DIR).
One summary line per (implementation, layer, precision), e.g.
  oeq layer1 fp32 fwd 1.234 ms fwd+bwd 5.678 ms err 3.1e-07
Needs torch, e3nn 0.4.4 and mace-torch (carried as wheels, see bench/device_peers.sh) and, for the OpenEquivariance
rows, openequivariance (imported first: a failing import or kernel build is printed and the e3nn rows still run).
"""
import argparse
import copy
import os
import statistics
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mace_torch_bench import read_xyz  # noqa: E402  first frame of an extxyz: symbols, positions, cell

H100 = dict(name="NVIDIA H100 (assumed for --oeq-codegen)", warpsize=32, major=9, minor=0, multiprocessorCount=132,
            maxSharedMemPerBlock=232448, maxSharedMemoryPerMultiprocessor=233472)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("structure")
    ap.add_argument("nx", type=int)
    ap.add_argument("ny", type=int)
    ap.add_argument("nz", type=int)
    ap.add_argument("--layers", default="0,1")
    ap.add_argument("--dtypes", default="fp32,fp64")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--cutoff", type=float, default=6.0)
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--model", default=None, help="pickled mace model: use its interactions[layer].conv_tp")
    ap.add_argument("--no-oeq", action="store_true")
    ap.add_argument("--no-e3nn", action="store_true", help="skip the e3nn (mace path) timings")
    ap.add_argument("--no-check", action="store_true", help="skip the float64 reference and the errors")
    ap.add_argument("--ref-chunk", type=int, default=32768, help="edges per chunk of the float64 reference")
    ap.add_argument("--oeq-codegen", default=None, help="write OpenEquivariance's generated CUDA source here")
    return ap.parse_args()


# ---------------------------------------------------------------------------------------------------------------
# graph
def build_graph(torch, sym, pos, cell, reps, cutoff, dev):
    """Tiled structure and its edges within cutoff (all periodic images), sorted by (receiver, sender).
    Returns positions [N,3] float64, senders, receivers (int64), edge vectors x_receiver - x_sender + shift (float64),
    all on dev. mace's convention: edge_index = [senders, receivers], vector = pos[receiver] - pos[sender] + shift."""
    nx, ny, nz = reps
    pos = torch.tensor(pos, dtype=torch.float64)
    cell = torch.tensor(cell, dtype=torch.float64)
    t = torch.tensor([[i, j, k] for i in range(nx) for j in range(ny) for k in range(nz)], dtype=torch.float64)
    P = (pos[None, :, :] + (t @ cell)[:, None, :]).reshape(-1, 3).to(dev)
    C = (cell * torch.tensor([[nx], [ny], [nz]], dtype=torch.float64)).to(dev)
    n = P.shape[0]
    inv = torch.linalg.inv(C)
    # wrap into the cell, so that image shifts are small integers
    frac = P @ inv
    P = (frac - torch.floor(frac)) @ C
    vol = abs(float(torch.linalg.det(C)))
    width = [vol / float(torch.linalg.norm(torch.linalg.cross(C[(a + 1) % 3], C[(a + 2) % 3]))) for a in range(3)]
    minimum_image = min(width) > 2.0 * cutoff
    if minimum_image:
        shifts = [None]
    else:  # small box: every image within reach
        m = [int(cutoff // w) + 1 for w in width]
        shifts = [(a, b, c) for a in range(-m[0], m[0] + 1) for b in range(-m[1], m[1] + 1)
                  for c in range(-m[2], m[2] + 1)]
    snd, rcv, vec = [], [], []
    block = 512
    for s in shifts:
        sv = None if s is None else torch.tensor(s, dtype=torch.float64, device=dev) @ C
        for i0 in range(0, n, block):
            d = P[None, :, :] - P[i0:i0 + block, None, :]  # [i, j]: x_j - x_i, i = sender, j = receiver
            if s is None:
                d = d - torch.round(d @ inv) @ C
            else:
                d = d + sv
            r2 = (d * d).sum(-1)
            mask = r2 < cutoff * cutoff
            if s is None or s == (0, 0, 0):
                idx = torch.arange(i0, min(i0 + block, n), device=dev)
                mask[idx - i0, idx] = False  # no self pair in the home image
            ii, jj = torch.nonzero(mask, as_tuple=True)
            snd.append(ii + i0)
            rcv.append(jj)
            vec.append(d[ii, jj])
    snd, rcv, vec = torch.cat(snd), torch.cat(rcv), torch.cat(vec)
    key = rcv * n + snd  # unique unless a pair has several images (tiny boxes): stable sort keeps them in order
    order = torch.sort(key, stable=True).indices
    return P, snd[order].contiguous(), rcv[order].contiguous(), vec[order].contiguous(), minimum_image


# ---------------------------------------------------------------------------------------------------------------
# the MACE-MP-0-medium conv problem, built by mace
def mace_conv_tp(layer, model_path, dev):
    """(o3.TensorProduct as mace builds it, instructions as (i1, i2, out, mode, train) tuples, description)."""
    import torch
    from e3nn import o3
    from mace.modules.blocks import RealAgnosticResidualInteractionBlock

    hidden = o3.Irreps("128x0e+128x1o")
    max_ell, num_bessel, num_elements = 3, 10, 89
    sh_irreps = o3.Irreps.spherical_harmonics(max_ell)
    num_features = hidden.count(o3.Irrep(0, 1))
    interaction_irreps = (sh_irreps * num_features).sort()[0].simplify()  # as mace's MACE.__init__
    kw = dict(node_attrs_irreps=o3.Irreps([(num_elements, (0, 1))]), edge_attrs_irreps=sh_irreps,
              edge_feats_irreps=o3.Irreps(f"{num_bessel}x0e"), target_irreps=interaction_irreps,
              avg_num_neighbors=61.0, radial_MLP=[64, 64, 64])
    if layer == 0:  # interaction_cls_first: node features are the 128x0e embedding
        block = RealAgnosticResidualInteractionBlock(node_feats_irreps=o3.Irreps(f"{num_features}x0e"),
                                                     hidden_irreps=hidden, **kw)
    elif layer == 1:  # the second (last) layer: hidden irreps in, scalars out
        block = RealAgnosticResidualInteractionBlock(node_feats_irreps=hidden, hidden_irreps=o3.Irreps(str(hidden[0])),
                                                     **kw)
    else:
        raise SystemExit("layers are 0 and 1 (MACE-MP-0-medium has two)")
    tp = block.conv_tp
    how = "mace RealAgnosticResidualInteractionBlock (MACE-MP-0-medium architecture)"
    if model_path:
        model = torch.load(model_path, map_location="cpu", weights_only=False)
        mtp = model.interactions[layer].conv_tp
        same = (str(mtp.irreps_in1) == str(tp.irreps_in1) and str(mtp.irreps_in2) == str(tp.irreps_in2)
                and str(mtp.irreps_out) == str(tp.irreps_out)
                and [tuple(i[:5]) for i in mtp.instructions] == [tuple(i[:5]) for i in tp.instructions])
        print(f"layer {layer}: {model_path} conv_tp is {'the same problem' if same else 'a DIFFERENT problem'}")
        tp, how = mtp, f"{model_path} interactions[{layer}].conv_tp"
    ins = [(i.i_in1, i.i_in2, i.i_out, i.connection_mode, i.has_weight) for i in tp.instructions]
    return tp.to(dev), ins, how


# ---------------------------------------------------------------------------------------------------------------
# timing and errors
def timer(torch, dev):
    if dev.type == "cuda":
        def run(fn, reps, warmup):
            for _ in range(warmup):
                fn()
            torch.cuda.synchronize()
            ts = []
            for _ in range(reps):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                ts.append(a.elapsed_time(b))
            return statistics.median(ts), min(ts)
    else:
        def run(fn, reps, warmup):
            for _ in range(warmup):
                fn()
            ts = []
            for _ in range(reps):
                t0 = time.perf_counter()
                fn()
                ts.append(1e3 * (time.perf_counter() - t0))
            return statistics.median(ts), min(ts)
    return run


def rel_err(a, ref):
    den = float(ref.abs().max())
    num = float((a.double() - ref).abs().max())
    return num / den if den > 0 else num


def reference(torch, tp64, X, Y, W, snd, rcv, G, chunk):
    """float64 e3nn: out = sum over each receiver's edges of tp(x_sender, y, w), and d(sum(out*G))/d(X, Y, W),
    in chunks of edges (the unchunked mace path needs [edges, out dim] intermediates)."""
    n = X.shape[0]
    out = torch.zeros(n, tp64.irreps_out.dim, dtype=torch.float64, device=X.device)
    gX = torch.zeros_like(X)
    gY = torch.empty_like(Y)
    gW = torch.empty_like(W)
    for e0 in range(0, snd.shape[0], chunk):
        s, r = snd[e0:e0 + chunk], rcv[e0:e0 + chunk]
        xs = X[s].detach().requires_grad_(True)
        y = Y[e0:e0 + chunk].detach().requires_grad_(True)
        w = W[e0:e0 + chunk].detach().requires_grad_(True)
        m = tp64(xs, y, w)
        out.index_add_(0, r, m.detach())
        a, b, c = torch.autograd.grad((m * G[r]).sum(), (xs, y, w))
        gX.index_add_(0, s, a)
        gY[e0:e0 + chunk] = b
        gW[e0:e0 + chunk] = c
    return out, gX, gY, gW


# ---------------------------------------------------------------------------------------------------------------
def main():
    args = parse_args()
    import numpy as np

    import mace  # noqa: F401  (only sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD, which e3nn 0.4's import needs)

    # OpenEquivariance before mace's modules: its import builds or loads its extension; if that fails, hide it from
    # mace (mace.modules.wrapper_ops imports it when present and catches only ImportError)
    oeq, oeq_error = None, None
    if not args.no_oeq or args.oeq_codegen:
        try:
            import openequivariance as oeq
            from openequivariance._torch import extlib as _oeq_ext
            print(f"openequivariance {oeq.__version__}: extension "
                  f"{'precompiled' if _oeq_ext.USE_PRECOMPILED_EXTENSION else 'JIT'}, "
                  f"built {_oeq_ext.BUILT_EXTENSION}"
                  + ("" if _oeq_ext.BUILT_EXTENSION else f" ({_oeq_ext.BUILT_EXTENSION_ERROR})"))
            if not _oeq_ext.BUILT_EXTENSION:
                oeq_error = f"extension not built: {_oeq_ext.BUILT_EXTENSION_ERROR}"
        except Exception as e:  # noqa: BLE001
            oeq_error = f"import failed: {type(e).__name__}: {e}"
            traceback.print_exc()
            sys.modules["openequivariance"] = None  # mace then sees ImportError
            oeq = None
    import e3nn
    import torch
    from e3nn import o3
    from mace.tools.scatter import scatter_sum

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), e3nn {e3nn.__version__}, mace {mace.__version__}, "
          f"device {torch.cuda.get_device_name() if dev.type == 'cuda' else 'cpu'}")
    if dev.type != "cuda" and oeq is not None and not args.oeq_codegen:
        oeq_error = "no CUDA device"
    run_timed = timer(torch, dev)
    layers = [int(x) for x in args.layers.split(",") if x != ""]
    dtypes = [x for x in args.dtypes.split(",") if x != ""]
    tdt = {"fp32": torch.float32, "fp64": torch.float64}
    ndt = {"fp32": np.float32, "fp64": np.float64}

    sym, pos, cell = read_xyz(args.structure)
    t0 = time.perf_counter()
    P, snd, rcv, vec, mi = build_graph(torch, sym, pos, cell, (args.nx, args.ny, args.nz), args.cutoff, dev)
    n, n_edges = P.shape[0], snd.shape[0]
    print(f"graph: {n} atoms, {n_edges} edges within {args.cutoff} A ({'minimum image' if mi else 'all images'}), "
          f"{n_edges / n:.2f} per atom, built in {time.perf_counter() - t0:.2f} s")
    sh = o3.SphericalHarmonics(o3.Irreps.spherical_harmonics(3), normalize=True, normalization="component").to(dev)
    Y64 = sh(vec)  # float64: mace's edge attributes
    rows = rcv  # OpenEquivariance: rows = receivers (outputs), cols = senders, row-major sorted
    cols = snd
    # the transpose permutation of the deterministic kernels: the edges in (sender, receiver) order
    sender_perm = torch.from_numpy(np.lexsort((rcv.cpu().numpy(), snd.cpu().numpy())).astype(np.int64)).to(dev)

    summary = []
    for layer in layers:
        torch.set_default_dtype(torch.float64)
        tp64, ins, how = mace_conv_tp(layer, args.model, dev)
        tp64 = tp64.to(torch.float64)
        d1, d3, nw = tp64.irreps_in1.dim, tp64.irreps_out.dim, tp64.weight_numel
        print(f"layer {layer}: {how}\n  {tp64.irreps_in1} x {tp64.irreps_in2} -> {tp64.irreps_out}\n"
              f"  {len(ins)} uvu instructions {ins}\n  node dim {d1}, edge attr dim {tp64.irreps_in2.dim}, "
              f"out dim {d3}, weights per edge {nw}")
        g = torch.Generator(device="cpu").manual_seed(args.seed + layer)
        X64 = torch.randn(n, d1, generator=g, dtype=torch.float64).to(dev)
        W64 = torch.randn(n_edges, nw, generator=g, dtype=torch.float64).to(dev)
        G64 = torch.randn(n, d3, generator=g, dtype=torch.float64).to(dev)
        ref = None
        if not args.no_check:
            t0 = time.perf_counter()
            ref = reference(torch, tp64, X64, Y64, W64, snd, rcv, G64, args.ref_chunk)
            print(f"  float64 e3nn reference in {time.perf_counter() - t0:.2f} s; "
                  f"|out| max {float(ref[0].abs().max()):.4g}")

        for dname in dtypes:
            dt = tdt[dname]
            X, Y, W, G = X64.to(dt), Y64.to(dt), W64.to(dt), G64.to(dt)

            # --- OpenEquivariance, deterministic fused convolution
            if args.oeq_codegen and oeq is not None:
                oeq_codegen(oeq, np, tp64, ins, ndt[dname], layer, dname, args.oeq_codegen)
            if not args.no_oeq:
                if oeq is None or oeq_error:
                    print(f"  oeq layer{layer} {dname} skipped: {oeq_error}")
                    summary.append(f"oeq layer{layer} {dname} skipped ({oeq_error.splitlines()[0][:160]})")
                else:
                    try:
                        summary.append(run_oeq(torch, oeq, tp64, ins, ndt[dname], layer, dname, X, Y, W, G,
                                               rows, cols, sender_perm, ref, args, run_timed))
                    except Exception as e:  # noqa: BLE001
                        traceback.print_exc()
                        summary.append(f"oeq layer{layer} {dname} FAILED: {type(e).__name__}: {str(e)[:200]}")
                    if dev.type == "cuda":
                        torch.cuda.empty_cache()

            # --- mace's own path: e3nn TensorProduct on the gathered senders, then scatter_sum over receivers
            if not args.no_e3nn:
                try:
                    summary.append(run_e3nn(torch, scatter_sum, tp64, dt, layer, dname, X, Y, W, G, snd, rcv, ref,
                                            args, run_timed))
                except Exception as e:  # noqa: BLE001  (out of memory, say)
                    traceback.print_exc()
                    summary.append(f"e3nn layer{layer} {dname} FAILED: {type(e).__name__}: {str(e)[:200]}")
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
            del X, Y, W, G
        del ref, X64, W64, G64
    print(f"==== conv summary: {n} atoms, {n_edges} edges, median of {args.reps} after {args.warmup} warm-up "
          f"(ms; err = max relative error vs the float64 e3nn reference over out, dX, dY, dW)")
    for s in summary:
        print(s)


def line(impl, layer, dname, f_med, f_min, b_med, b_min, errs, peak):
    err = max(errs.values()) if errs else float("nan")
    detail = " ".join(f"{k} {v:.1e}" for k, v in errs.items())
    return (f"{impl} layer{layer} {dname} fwd {f_med:.3f} ms fwd+bwd {b_med:.3f} ms err {err:.1e} "
            f"(min {f_min:.3f} / {b_min:.3f}; {detail}; peak {peak:.2f} GiB)")


def oeq_codegen(oeq, np, tp64, ins, ndtype, layer, dname, folder):
    """The CUDA source OpenEquivariance's deterministic convolution would JIT-compile on an H100, with its launch
    configuration (needs no GPU: a dry run of the schedule and code generation)."""
    try:
        import types

        from openequivariance.core.LoopUnrollConv import LoopUnrollConv
        prob = oeq.TPProblem(str(tp64.irreps_in1), str(tp64.irreps_in2), str(tp64.irreps_out), ins,
                             shared_weights=False, internal_weights=False, irrep_dtype=ndtype, weight_dtype=ndtype)
        gen = LoopUnrollConv(prob, types.SimpleNamespace(**H100), False, idx_dtype=np.int64, torch_op=False,
                             deterministic=True)
        os.makedirs(folder, exist_ok=True)
        fn = os.path.join(folder, f"oeq_conv_det_layer{layer}_{dname}.cu")
        with open(fn, "w") as f:
            f.write(gen.jit_kernel)
        fs, bs = gen.forward_schedule, gen.backward_schedule
        print(f"  oeq codegen layer{layer} {dname}: {fn} ({len(gen.jit_kernel)} chars), forward "
              f"{vars(fs.launch_config)}, {len(fs.segments)} segments; backward {vars(bs.launch_config)}, "
              f"{len(bs.segments)} segments; workspace {gen.workspace_size} B")
    except Exception as e:  # noqa: BLE001
        print(f"  oeq codegen layer{layer} {dname} FAILED: {type(e).__name__}: {e}")
        traceback.print_exc()


def run_e3nn(torch, scatter_sum, tp64, dt, layer, dname, X, Y, W, G, snd, rcv, ref, args, run_timed):
    """mace's conv path: tp(x[sender], y, w) for every edge, then scatter_sum over receivers (as mace's
    RealAgnosticResidualInteractionBlock.forward)."""
    cuda = X.device.type == "cuda"
    n = X.shape[0]
    tp = copy.deepcopy(tp64).to(dt)

    def e3nn_conv(x, y, w):
        return scatter_sum(src=tp(x[snd], y, w), index=rcv, dim=0, dim_size=n)

    with torch.no_grad():
        out = e3nn_conv(X, Y, W)
    errs = {} if ref is None else {"out": rel_err(out, ref[0])}
    del out

    def fwd():
        with torch.no_grad():
            e3nn_conv(X, Y, W)

    f_med, f_min = run_timed(fwd, args.reps, args.warmup)
    Xg, Yg, Wg = (t.detach().clone().requires_grad_(True) for t in (X, Y, W))

    def fwdbwd():
        o = e3nn_conv(Xg, Yg, Wg)
        torch.autograd.grad(o, (Xg, Yg, Wg), G)

    if ref is not None:
        o = e3nn_conv(Xg, Yg, Wg)
        gx, gy, gw = torch.autograd.grad(o, (Xg, Yg, Wg), G)
        errs.update(dX=rel_err(gx, ref[1]), dY=rel_err(gy, ref[2]), dW=rel_err(gw, ref[3]))
        del o, gx, gy, gw
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    b_med, b_min = run_timed(fwdbwd, args.reps, args.warmup)
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0
    s = line("e3nn", layer, dname, f_med, f_min, b_med, b_min, errs, peak)
    print("  " + s)
    return s


def run_oeq(torch, oeq, tp64, ins, ndtype, layer, dname, X, Y, W, G, rows, cols, perm, ref, args, run_timed):
    """OpenEquivariance's TensorProductConv, deterministic (receiver-sorted edges and the transpose permutation)."""
    t0 = time.perf_counter()
    prob = oeq.TPProblem(str(tp64.irreps_in1), str(tp64.irreps_in2), str(tp64.irreps_out), ins,
                         shared_weights=False, internal_weights=False, irrep_dtype=ndtype, weight_dtype=ndtype)
    assert prob.weight_numel == tp64.weight_numel, (prob.weight_numel, tp64.weight_numel)
    conv = oeq.TensorProductConv(prob, deterministic=True)
    Wo = conv.reorder_weights_from_e3nn(W, True)  # e3nn -> oeq weight layout (the identity for these problems)
    with torch.no_grad():
        out = conv(X, Y, Wo, rows, cols, perm)
    torch.cuda.synchronize()
    print(f"  oeq layer{layer} {dname}: TensorProductConv(deterministic=True) built and first run in "
          f"{time.perf_counter() - t0:.2f} s (kernel JIT included); weights reordered identically: "
          f"{bool(torch.equal(Wo, W))}")
    errs = {} if ref is None else {"out": rel_err(out, ref[0])}
    with torch.no_grad():
        det = bool(torch.equal(out, conv(X, Y, Wo, rows, cols, perm)))
    del out

    def fwd():
        with torch.no_grad():
            conv(X, Y, Wo, rows, cols, perm)

    f_med, f_min = run_timed(fwd, args.reps, args.warmup)
    Xg, Yg, Wg = (t.detach().clone().requires_grad_(True) for t in (X, Y, Wo))

    def fwdbwd():
        o = conv(Xg, Yg, Wg, rows, cols, perm)
        torch.autograd.grad(o, (Xg, Yg, Wg), G)

    o = conv(Xg, Yg, Wg, rows, cols, perm)
    gx, gy, gw = torch.autograd.grad(o, (Xg, Yg, Wg), G)
    o2 = conv(Xg, Yg, Wg, rows, cols, perm)
    gx2, gy2, gw2 = torch.autograd.grad(o2, (Xg, Yg, Wg), G)
    det_b = bool(torch.equal(gx, gx2) and torch.equal(gy, gy2) and torch.equal(gw, gw2))
    if ref is not None:
        gw_e3nn = conv.reorder_weights_to_e3nn(gw, True)
        errs.update(dX=rel_err(gx, ref[1]), dY=rel_err(gy, ref[2]), dW=rel_err(gw_e3nn, ref[3]))
        del gw_e3nn
    del o, o2, gx, gy, gw, gx2, gy2, gw2
    torch.cuda.reset_peak_memory_stats()
    b_med, b_min = run_timed(fwdbwd, args.reps, args.warmup)
    peak = torch.cuda.max_memory_allocated() / 2**30
    print(f"  oeq layer{layer} {dname}: repeat bitwise identical: forward {det}, backward {det_b}")
    s = line("oeq", layer, dname, f_med, f_min, b_med, b_min, errs, peak)
    print("  " + s)
    return s


if __name__ == "__main__":
    main()
