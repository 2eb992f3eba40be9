#!/usr/bin/env python3
"""make_bench_models.py: benchmark inputs that are too large to commit, written to a folder of choice:
  mace_mp0_medium_arch.h5   UNTRAINED random-weight MACE with the MACE-MP-0-medium architecture
                            (89 elements, 128x0e+128x1o, l<=3, correlation 3, 2 layers, r_max 6 A)
  mace_mp0_medium_arch.model the same model pickled for mace-torch (side-by-side runs)
  water_192.xyz             frame 0 of ../shared/data/water_train.xyz
  mace_mp0_arch_cN.h5       with --widths N,...: the same architecture at N channels (Nx0e+Nx1o), random weights
usage: python3 tools/make_bench_models.py OUTDIR [--no-selftest] [--widths N,...]
(--no-selftest skips the mace-torch self-test structures, whose neighbour list needs matscipy)"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    out = sys.argv[1]
    widths = []  # parsed first: a wrong list fails before the slow model building
    if "--widths" in sys.argv:
        i = sys.argv.index("--widths")
        widths = sys.argv[i + 1].split(",") if i + 1 < len(sys.argv) else []
        if not widths or not all(w.isdigit() and int(w) > 0 for w in widths):
            sys.exit("make_bench_models.py: --widths takes channel counts, e.g. --widths 64,96")
    os.makedirs(out, exist_ok=True)
    import warnings
    warnings.filterwarnings("ignore")
    import mace  # noqa: F401  (first: sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD, which e3nn 0.4's import needs)
    import ase.io
    import h5py
    import torch
    from cgequi_tools.mace_export import export_mace
    from cgequi_tools.reference import mace_reference
    from make_fixtures import build_model

    torch.set_default_dtype(torch.float64)
    spec = dict(name="mace_mp0_medium_arch", model="ScaleShiftMACE", scale=0.8, shift=0.1, seed=7,
                species=list(range(1, 90)), r_max=6.0, num_bessel=10, p=5, max_ell=3, correlation=3,
                inter="RealAgnosticResidualInteractionBlock", first="RealAgnosticResidualInteractionBlock",
                num_interactions=2, hidden="128x0e+128x1o", MLP_irreps="16x0e", radial_MLP=[64, 64, 64],
                avg_num_neighbors=61.0, gate="silu", readout="NonLinearReadoutBlock", heads=None,
                apply_cutoff=True, use_agnostic_product=False)
    model, _ = build_model(spec)
    torch.save(model, os.path.join(out, "mace_mp0_medium_arch.model"))
    src = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "water_train.xyz")
    if not os.path.exists(src):  # a GPU machine without ../shared: the copy carried in .device/models
        src = os.path.join(os.path.dirname(__file__), "..", ".device", "models", "water_192.xyz")
    water = ase.io.read(src, 0)
    water.calc = None
    ase.io.write(os.path.join(out, "water_192.xyz"), water)
    with h5py.File(os.path.join(out, "mace_mp0_medium_arch.h5"), "w") as h5:
        export_mace(model, h5, source_file="random weights (untrained), MACE-MP-0-medium architecture")
        h5.attrs["note"] = "UNTRAINED: random weights, for benchmarking only"
        from cgequi_tools.reference import write_case
        if "--no-selftest" not in sys.argv:
            st = h5.create_group("selftest")
            small = water[:24]
            small.pbc = False
            write_case(st, "water_cluster_24", small, mace_reference(model, small))
    for n in widths:  # the layer widths where a kernel's choice changes (e.g. layer 0 factored from 64 channels)
        spec.update(name=f"mace_mp0_arch_c{n}", hidden=f"{n}x0e+{n}x1o")
        wide, _ = build_model(spec)
        with h5py.File(os.path.join(out, f"mace_mp0_arch_c{n}.h5"), "w") as h5:
            export_mace(wide, h5, source_file=f"random weights (untrained), MACE-MP-0-medium architecture at {n} channels")
            h5.attrs["note"] = "UNTRAINED: random weights, for benchmarking only"
    print("wrote", out)


if __name__ == "__main__":
    main()
