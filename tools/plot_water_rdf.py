#!/usr/bin/env python3
"""plot_water_rdf.py: O-O radial distribution function of liquid water from an NVT run of examples/lammps/in.water_rdf
(pair_style cgequi, potentials/water-mace-small.h5) next to the O-O RDF of the 10 DFT frames of
../shared/data/water_train.xyz (minimum image, same bins), saved as a PNG.
usage: python3 tools/plot_water_rdf.py [LAMMPS_RDF_FILE] [-o docs/water_rdf_OO.png] [--label TEXT]
LAMMPS_RDF_FILE is the fix ave/time output (default examples/lammps/water_rdf_OO.dat; the last block is used)."""
import argparse
import os

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "..", "shared", "data", "water_train.xyz")


def read_lammps_rdf(path):
    blocks, cur, nrows = [], None, 0
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        v = line.split()
        if cur is None or len(cur) == nrows:
            if len(v) == 2:  # "timestep nrows" header of a block
                cur, nrows = [], int(v[1])
                blocks.append(cur)
                continue
        cur.append([float(x) for x in v])
    b = np.array(blocks[-1])
    return b[:, 1], b[:, 2]


def dft_rdf(nbins, rmax):
    import ase.io
    frames = ase.io.read(DATA, index=":")
    edges = np.linspace(0.0, rmax, nbins + 1)
    hist = np.zeros(nbins)
    norm = 0.0
    for a in frames:
        o = a.positions[a.numbers == 8]
        L = np.diag(a.cell.array)  # orthorhombic (cubic) cells
        d = o[:, None, :] - o[None, :, :]
        d -= L * np.round(d / L)
        r = np.linalg.norm(d, axis=-1)[np.triu_indices(len(o), 1)]
        h, _ = np.histogram(r, bins=edges)
        n = len(o)
        shell = 4.0 / 3.0 * np.pi * (edges[1:] ** 3 - edges[:-1] ** 3)
        hist += 2.0 * h / (n * (n / np.prod(L)) * shell)  # pairs counted once: x2
        norm += 1.0
    centers = 0.5 * (edges[1:] + edges[:-1])
    return centers, hist / norm, len(frames)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rdf", nargs="?", default=os.path.join(REPO, "examples", "lammps", "water_rdf_OO.dat"))
    ap.add_argument("-o", "--output", default=os.path.join(REPO, "docs", "water_rdf_OO.png"))
    ap.add_argument("--label", default="MACE (water-mace-small.h5), NVT 300 K, LAMMPS")
    args = ap.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    r, g = read_lammps_rdf(args.rdf)
    rmax = r[-1] + 0.5 * (r[1] - r[0])
    rd, gd, nf = dft_rdf(len(r), rmax)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(r, g, lw=2, label=args.label)
    ax.plot(rd, gd, lw=1.5, ls="--", color="k", label=f"DFT frames (revPBE0-D3), {nf} frames of water_train.xyz")
    ax.axhline(1.0, color="0.7", lw=0.8)
    ax.set_xlim(2.0, rmax)
    ax.set_xlabel("r (Å)")
    ax.set_ylabel("g$_{OO}$(r)")
    ax.set_title("Liquid water, 64 H$_2$O (192 atoms), O–O RDF")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    i, j = np.argmax(g), np.argmax(gd)
    print(f"first peak: MD g={g[i]:.2f} at {r[i]:.3f} A; DFT frames g={gd[j]:.2f} at {rd[j]:.3f} A; wrote {args.output}")


if __name__ == "__main__":
    main()
