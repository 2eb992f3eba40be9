#!/usr/bin/env python3
"""timeline.py: where a step leaves the GPU idle, from bench/timeline.cpp's CSV of one bench_eval run (--pairs).

A step starts at the positions' upload (the host-to-device copy before each k_pair_keep). For the run's last STEPS
steps (default 5) it prints the median span, the time the GPU ran anything (the union of kernels, copies and sets
over both streams) and the idle rest; the idle gaps of the median step, in order, with the GPU work on either side and
the host's runtime calls during the gap; and the kernels' summed time per step (no synchronisation added, unlike
CGQ_GPU_PROFILE's phases).
LAUNCHES (a regular expression): also the median step's launches whose kernel names match it, in order, each with
its offset, duration, grid (blocks) and stream.
usage: timeline.py TIMELINE.csv [STEPS] [MIN_GAP_US]"""
import os
import re
import csv
import statistics
import sys
from collections import defaultdict


def short(name, n=60):
    return name if len(name) <= n else name[: n - 3] + "..."


def union_busy(iv):
    """total length of the union of intervals, and the gaps between them"""
    iv = sorted(iv)
    busy, gaps = 0, []
    cur_s, cur_e, cur_n = None, None, None
    for s, e, n in iv:
        if cur_e is None:
            cur_s, cur_e, cur_n = s, e, n
        elif s > cur_e:
            busy += cur_e - cur_s
            gaps.append((cur_e, s, cur_n, n))
            cur_s, cur_e, cur_n = s, e, n
        elif e > cur_e:
            cur_e, cur_n = e, n
    if cur_e is not None:
        busy += cur_e - cur_s
    return busy, gaps


def main():
    path = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    min_gap = float(sys.argv[3]) * 1e3 if len(sys.argv) > 3 else 2e3
    gpu, host = [], []
    with open(path) as f:
        rd = csv.reader(f)
        next(rd)
        for row in rd:
            what, s, e, stream, size = row[:5]
            name = ",".join(row[5:])
            rec = (int(s), int(e), name, what, int(stream), int(size))
            (host if what == "H" else gpu).append(rec)
    gpu.sort()
    host.sort()
    # step starts: the last host-to-device copy before each k_pair_keep
    starts, last_h2d = [], None
    for s, e, name, what, stream, size in gpu:
        if what == "M" and name.endswith("kind 1"):
            last_h2d = s
        if what == "K" and name.startswith("k_pair_keep"):
            starts.append(last_h2d if last_h2d is not None else s)
    if len(starts) < 3:
        sys.exit("timeline.py: fewer than 3 steps (k_pair_keep) in %s" % path)
    bounds = list(zip(starts[:-1], starts[1:]))[-steps:]
    rows = []
    for b0, b1 in bounds:
        ops = [r for r in gpu if b0 <= r[0] < b1]
        busy, gaps = union_busy([(r[0], min(r[1], b1), r[2]) for r in ops])
        last_end = max(r[1] for r in ops)
        per = defaultdict(float)
        for r in ops:
            if r[3] == "K":
                per[r[2]] += r[1] - r[0]
        rows.append(dict(b0=b0, b1=b1, span=b1 - b0, busy=busy, gaps=gaps, tail=b1 - last_end, per=per, ops=ops))
    med = sorted(rows, key=lambda r: r["span"])[len(rows) // 2]
    us = lambda ns: ns / 1e3
    print("steps: %d (the run's last), span median %.1f us (%s)" % (
        len(rows), us(statistics.median(r["span"] for r in rows)), ", ".join("%.1f" % us(r["span"]) for r in rows)))
    print("GPU busy (kernels, copies, sets on any stream): median %.1f us; idle %.1f us, of which %.1f after the "
          "step's last GPU work (host: results, next call)" % (
              us(statistics.median(r["busy"] for r in rows)),
              us(statistics.median(r["span"] - r["busy"] for r in rows)), us(statistics.median(r["tail"] for r in rows))))
    print("\nidle gaps >= %.1f us in the median step (offsets from its start), with the host's runtime calls in them:"
          % us(min_gap))
    total = 0
    for g0, g1, before, after in med["gaps"]:
        if g1 - g0 < min_gap:
            continue
        total += g1 - g0
        calls = defaultdict(float)
        for s, e, name, *_ in host:
            if e > g0 and s < g1:
                calls[name] += min(e, g1) - max(s, g0)
        top = sorted(calls.items(), key=lambda kv: -kv[1])[:4]
        print("  +%8.1f  %7.1f us  after %s | before %s | host: %s" % (
            us(g0 - med["b0"]), us(g1 - g0), short(before, 40), short(after, 40),
            ", ".join("%s %.1f" % (n, us(t)) for n, t in top) or "-"))
    print("  (these gaps: %.1f us; all gaps of any length: %.1f us)" % (
        us(total), us(sum(g1 - g0 for g0, g1, _, _ in med["gaps"]))))
    print("\nkernels per step (median over the steps, us; summed over launches, overlapping streams counted twice):")
    names = set()
    for r in rows:
        names.update(r["per"])
    tot = {n: statistics.median(r["per"].get(n, 0.0) for r in rows) for n in names}
    launches = defaultdict(int)
    for r in med["ops"]:
        if r[3] == "K":
            launches[r[2]] += 1
    for n, t in sorted(tot.items(), key=lambda kv: -kv[1])[:40]:
        print("  %8.1f  x%-3d %s" % (us(t), launches[n], short(n, 90)))
    print("  %8.1f  all kernels" % us(sum(tot.values())))
    pat = os.environ.get("LAUNCHES")
    if pat:
        print("\nlaunches matching %r in the median step (offset us, duration us, blocks, stream):" % pat)
        for s, e, name, what, stream, size in med["ops"]:
            if what == "K" and re.search(pat, name):
                print("  +%8.1f  %7.1f  %6d  %2d  %s" % (us(s - med["b0"]), us(e - s), size, stream, short(name, 60)))
    streams = defaultdict(float)
    for r in med["ops"]:
        streams[r[4]] += r[1] - r[0]
    print("\nwork per stream in the median step (us): " + ", ".join("%d: %.1f" % (k, us(v)) for k, v in sorted(streams.items())))


if __name__ == "__main__":
    main()
