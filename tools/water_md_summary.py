#!/usr/bin/env python3
"""water_md_summary.py: summarise the long water runs of examples/lammps (in.water_nve, in.water_rdf) from their
LAMMPS logs: per thermo block, length, temperature, atom count, and for NVE the total-energy drift (linear fit,
eV/atom/ps) and fluctuation (std of the residual, eV/atom). Optionally writes a thinned thermo table.
usage: python3 tools/water_md_summary.py LOG [--thin N --table OUT.txt]"""
import argparse

import numpy as np


def blocks(path):
    out, cur, head = [], None, None
    for line in open(path):
        v = line.split()
        if v[:2] == ["Step", "Time"]:
            head, cur = v, []
            out.append((head, cur))
            continue
        if cur is not None:
            try:
                row = [float(x) for x in v]
            except ValueError:
                cur = None
                continue
            if len(row) != len(head):
                cur = None
                continue
            cur.append(row)
    return [(h, np.array(r)) for h, r in out if len(r)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--thin", type=int, default=0, help="keep every N-th row of the last block in --table")
    ap.add_argument("--table")
    args = ap.parse_args()
    bl = blocks(args.log)
    for k, (h, r) in enumerate(bl):
        c = {n: i for i, n in enumerate(h)}
        n = int(r[0, c["Atoms"]]) if "Atoms" in c else 192
        t, e, T = r[:, c["Time"]], r[:, c["TotEng"]] / n, r[:, c["Temp"]]
        msg = (f"block {k}: steps {int(r[0, 0])}-{int(r[-1, 0])} ({t[-1] - t[0]:.3f} ps, {len(r)} rows), "
               f"T mean {T.mean():.1f} K (std {T.std():.1f}, min {T.min():.0f}, max {T.max():.0f})")
        if "Atoms" in c:
            msg += f", atoms {int(r[:, c['Atoms']].min())}-{int(r[:, c['Atoms']].max())}"
        if len(r) > 2 and t[-1] > t[0]:
            p = np.polyfit(t, e, 1)
            res = e - np.polyval(p, t)
            msg += (f"; etotal/atom: fit drift {p[0]:.2e} eV/atom/ps, fluctuation std {res.std():.2e} eV/atom, "
                    f"end-start {e[-1] - e[0]:.2e} eV/atom, max |E-E0| {np.abs(e - e[0]).max():.2e} eV/atom")
        print(msg)
    if args.table:
        h, r = bl[-1]
        keep = r[:: max(args.thin, 1)]
        if (keep[-1] != r[-1]).any():
            keep = np.vstack([keep, r[-1]])
        with open(args.table, "w") as f:
            f.write(f"# {args.log}: last thermo block, every {max(args.thin, 1)}-th row\n# " + " ".join(h) + "\n")
            for row in keep:
                f.write(" ".join(f"{int(x)}" if j == 0 or h[j] == "Atoms" else f"{x:.6f}" for j, x in enumerate(row)) + "\n")


if __name__ == "__main__":
    main()
