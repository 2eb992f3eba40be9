#!/usr/bin/env python3
"""mace_torch_bench.py: the same step timed in mace-torch (e3nn), for side-by-side runs with bench_eval.

Loads a pickled MACE (.model), tiles an extxyz structure NX x NY x NZ, builds the edge list on the GPU
(minimum image: the box must exceed twice the cutoff), and times energy+forces (and the virial with
--virial) like an MD step. Prints ms/step (median), peak GPU memory and the energy.
usage: mace_torch_bench.py MODEL STRUCTURE.xyz NX NY NZ DTYPE(float32|float64) REPEATS [--virial] [--cueq]
       [--alternate CMD [--rounds R]]
--cueq: convert the model with mace-torch's own e3nn -> cuEquivariance conversion (mace.cli.convert_e3nn_cueq.run,
  on a GPU with conv_fusion, the fused convolution) and time that instead; before timing, the e3nn model and the
  converted one are evaluated once on the same structure and their energies and forces compared.
--alternate CMD [--rounds R]: after the warm-up, R rounds (default 5) of: REPEATS timed steps here, then CMD in a
  shell (cgequi's bench_eval on the same GPU), so that both are timed under the same conditions, one after the
  other, several times; prints each round and the ratio of the medians (CMD's "ms/step median" over this one's).
Needs mace-torch and its imports (see bench/device_run.sh for carrying them to a GPU machine), and for --cueq
cuequivariance, cuequivariance-torch and cuequivariance-ops-torch-cu13 (bench/device_peers.sh)."""
import re
import statistics
import subprocess
import sys
import time


def read_xyz(path):
    """First frame of an extxyz: symbols, positions, 3x3 cell (from Lattice=)."""
    with open(path) as f:
        n = int(f.readline())
        header = f.readline()
        lat = header.split('Lattice="')[1].split('"')[0].split()
        cell = [[float(lat[3 * i + j]) for j in range(3)] for i in range(3)]
        sym, pos = [], []
        for _ in range(n):
            p = f.readline().split()
            sym.append(p[0])
            pos.append([float(x) for x in p[1:4]])
    return sym, pos, cell


def main():
    model_path, xyz, nx, ny, nz, dtype_name, reps = sys.argv[1:8]
    nx, ny, nz, reps = int(nx), int(ny), int(nz), int(reps)
    virial = "--virial" in sys.argv
    cueq = "--cueq" in sys.argv
    alternate = sys.argv[sys.argv.index("--alternate") + 1] if "--alternate" in sys.argv else None
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 5
    import mace  # noqa: F401  (first: sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD for e3nn 0.4)
    import torch
    if cueq:
        cueq_versions(torch)

    dtype = getattr(torch, dtype_name)
    torch.set_default_dtype(dtype)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    model = torch.load(model_path, map_location=dev, weights_only=False).to(dtype).to(dev)
    for p in model.parameters():
        p.requires_grad_(False)
    z_of = {"H": 1, "C": 6, "N": 7, "O": 8}
    sym, pos, cell = read_xyz(xyz)
    pos = torch.tensor(pos, dtype=torch.float64)
    cell = torch.tensor(cell, dtype=torch.float64)
    shifts = torch.tensor([[i, j, k] for i in range(nx) for j in range(ny) for k in range(nz)], dtype=torch.float64)
    big = (pos[None, :, :] + (shifts @ cell)[:, None, :]).reshape(-1, 3)
    cell_big = cell * torch.tensor([[nx], [ny], [nz]], dtype=torch.float64)
    zs = [z_of[s] for s in sym] * (nx * ny * nz)
    n = big.shape[0]
    r_max = float(model.r_max)
    # edges: all pairs under minimum image (orthorhombic or not: fractional wrap), on the GPU, in row blocks
    inv = torch.linalg.inv(cell_big).to(dev)
    P = big.to(dev)
    C = cell_big.to(dev)
    senders, receivers, sh = [], [], []
    for i0 in range(0, n, 1024):
        d = P[None, :, :] - P[i0:i0 + 1024, None, :]  # x_j - x_i, rows i
        frac = d @ inv
        img = -torch.round(frac)
        d = d + img @ C
        r = d.norm(dim=-1)
        ii, jj = torch.nonzero((r < r_max) & (r > 1e-8), as_tuple=True)
        # mace: vector = pos[edge_index[1]] - pos[edge_index[0]] + shift, here x_j - x_i + img C
        senders.append(ii + i0)
        receivers.append(jj)
        sh.append(img[ii, jj])
    shifts_e = torch.cat(sh) @ C
    edge_index = torch.stack([torch.cat(senders), torch.cat(receivers)])
    table = [int(z) for z in model.atomic_numbers]
    idx = torch.tensor([table.index(z) for z in zs], device=dev)
    node_attrs = torch.nn.functional.one_hot(idx, num_classes=len(table)).to(dtype)
    batch = {
        "positions": P.to(dtype).clone(),
        "node_attrs": node_attrs,
        "edge_index": edge_index,
        "shifts": shifts_e.to(dtype),
        "unit_shifts": torch.zeros_like(shifts_e).to(dtype),
        "cell": C.to(dtype).reshape(1, 3, 3),
        "batch": torch.zeros(n, dtype=torch.long, device=dev),
        "ptr": torch.tensor([0, n], device=dev),
        "head": torch.zeros(1, dtype=torch.long, device=dev),
        "weight": torch.ones(1, device=dev, dtype=dtype),
        "energy_weight": torch.ones(1, device=dev, dtype=dtype),
        "forces_weight": torch.ones(1, device=dev, dtype=dtype),
        "stress_weight": torch.ones(1, device=dev, dtype=dtype),
        "virials_weight": torch.ones(1, device=dev, dtype=dtype),
        "charges": torch.zeros(n, device=dev, dtype=dtype),
        "dipole": torch.zeros(1, 3, device=dev, dtype=dtype),
    }

    def step():
        out = model(dict(batch), compute_force=True, compute_virials=virial, compute_stress=False, training=False)
        return out

    label = "mace-torch"
    if cueq:  # one e3nn step as the reference, then mace-torch's own conversion to cuEquivariance
        ref = step()
        e_ref, f_ref = float(ref["energy"].double().sum()), ref["forces"].detach().double()
        del ref
        from mace.cli.convert_e3nn_cueq import run as e3nn_to_cueq
        t0 = time.perf_counter()
        # mace builds its e3nn symmetric contractions in the reduced (cuEquivariance) CG basis only when cuequivariance
        # is importable at build time, yet records use_reduced_cg=True either way, and the conversion trusts that flag.
        # A model built without cuequivariance (tools/make_bench_models.py, as bench/device_peers.sh runs it) is in
        # mace's original basis: convert with False, and with True only if that fails (the check below tells).
        model.use_reduced_cg = False
        try:
            converted = e3nn_to_cueq(model, device=dev.type)  # device "cuda": conv_fusion=True (fused conv kernel)
        except RuntimeError as e:
            print(f"conversion with use_reduced_cg=False failed ({str(e)[:160]}); retrying with True")
            model.use_reduced_cg = True
            converted = e3nn_to_cueq(model, device=dev.type)
        del model
        model = converted.to(dtype).to(dev).eval()
        for p in model.parameters():
            p.requires_grad_(False)
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        print(f"converted to cuEquivariance in {time.perf_counter() - t0:.1f} s (mace.cli.convert_e3nn_cueq.run, "
              f"device {dev.type}, conv_fusion {dev.type == 'cuda'}, use_reduced_cg {converted.use_reduced_cg})")
        label = "mace-torch+cueq"
        out = step()
        e_c, f_c = float(out["energy"].double().sum()), out["forces"].detach().double()
        print(f"cueq vs e3nn: E {e_c:.10f} vs {e_ref:.10f} (rel {abs(e_c - e_ref) / abs(e_ref):.2e}), max |dF| "
              f"{float((f_c - f_ref).abs().max()):.2e} eV/A, force RMS {float(f_ref.pow(2).mean().sqrt()):.3e}")
        del f_ref, f_c, out

    out = step()
    sync()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    def timed():
        times = []
        for _ in range(reps):
            sync()
            t0 = time.perf_counter()
            out = step()
            sync()
            times.append(1e3 * (time.perf_counter() - t0))
        return times, out

    times, out = timed()
    peak = torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else 0.0
    e = float(out["energy"].double().sum())
    del out
    print(f"{label} {model_path} atoms {n} edges {edge_index.shape[1]} {dtype_name}: {statistics.median(times):.3f} "
          f"ms/step median of {reps} (min {min(times):.3f}), peak {peak:.2f} GiB, E={e:.10f}")
    if alternate:
        alternate_rounds(alternate, rounds, label, timed, times)


def alternate_rounds(cmd, rounds, label, timed, first):
    """R rounds of: CMD (its 'ms/step median' parsed), then this model's steps again; the first round's own steps
    are those just timed. Prints each round and the medians over rounds."""
    ours, theirs = [statistics.median(first)], []
    for k in range(rounds):
        res = subprocess.run(cmd, shell=True, capture_output=True, text=True)
        m = re.search(r"([0-9.]+) ms/step median", res.stdout)
        if res.returncode != 0 or not m:
            print(f"round {k + 1}: '{cmd}' failed (rc {res.returncode}): {(res.stdout + res.stderr)[-400:]}")
            return
        theirs.append(float(m.group(1)))
        if k + 1 < rounds:
            ours.append(statistics.median(timed()[0]))
        print(f"round {k + 1}: {label} {ours[k]:.3f} ms, alternate {theirs[k]:.3f} ms, ratio {ours[k] / theirs[k]:.3f}")
    mo, mt = statistics.median(ours), statistics.median(theirs)
    print(f"alternated {rounds} rounds: {label} median {mo:.3f} ms (range {min(ours):.3f}-{max(ours):.3f}), "
          f"alternate median {mt:.3f} ms (range {min(theirs):.3f}-{max(theirs):.3f}): {label} / alternate = "
          f"{mo / mt:.3f}")


def cueq_versions(torch):
    """What --cueq runs on: the cuEquivariance packages and the CUDA that torch was built for."""
    import importlib
    v = [f"torch {torch.__version__} (CUDA {torch.version.cuda})"]
    for name in ("cuequivariance", "cuequivariance_torch", "cuequivariance_ops_torch"):
        try:
            v.append(f"{name} {getattr(importlib.import_module(name), '__version__', '?')}")
        except Exception as e:  # noqa: BLE001  (printed: the run goes on and mace decides what it can use)
            v.append(f"{name} unavailable ({type(e).__name__}: {e})")
    print("cueq: " + ", ".join(v))


if __name__ == "__main__":
    main()
