#!/usr/bin/env bash
# device_stalls.sh: on the GPU machine, what bounds each kernel of one MACE-MP-0-medium-architecture step (5,184 water
# atoms, fp32, --pairs): Nsight Compute's throughputs, occupancy and warp stall reasons per kernel (the last launch of
# each name and grid), as a short table; with LMP=1 also LAMMPS (from .device/lammps, built meanwhile) water boxes of
# 5,184 atoms on the GPU through pair_style cgequi, timesteps per second (NCU=0: only those). NCU_KERNELS (a regex):
# only those kernels' launches. Carry .whl and .device. Logs in $OUT.
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
source bench/device_build.sh
[ "${NCU:-1}" = 1 ] && make_models
build_gpu --no-tests bench_eval cgequi
if [ "${LMP:-0}" = 1 ]; then
  (tools/build-lammps-with-cgequi.sh .device/lammps build-gpu /tmp/lmpbuild -DBUILD_MPI=yes -DBUILD_OMP=yes \
    >"$OUT/lammps_build.log" 2>&1 || echo "LAMMPS build failed" >>"$OUT/lammps_build.log") &
  LMP_PID=$!
fi
if [ "${NCU:-1}" = 1 ]; then
wait $MODELS_PID
B=build-gpu/bench_eval W=.device/models/water_192.xyz MP=$M/mace_mp0_medium_arch.h5
timeout 300 ncu --clock-control none ${NCU_KERNELS:+--kernel-name regex:$NCU_KERNELS} --section SpeedOfLight \
  --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis --csv --page raw $B $MP $W 3 3 3 cuda 1 --fp32 --pairs \
  >"$OUT/ncu_stalls.csv" 2>"$OUT/ncu_stalls.err" || tail -3 "$OUT/ncu_stalls.err"
python3 - "$OUT/ncu_stalls.csv" <<'PY'
import csv, sys, re
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
head, units, rows = rows[0], rows[1], rows[2:]
head_units = dict(zip(head, units))
col = {h: i for i, h in enumerate(head)}
last = {}
for r in rows[len(rows) * 2 // 3:]:  # the third evaluation's launches
    key = (re.sub(r"\(.*", "", r[col["Kernel Name"]])[:34], r[col["launch__grid_size"]])
    t = float(r[col["gpu__time_duration.sum"]].replace(",", ""))
    t *= {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}.get(head_units["gpu__time_duration.sum"], 1e-3)  # to us
    a = last.setdefault(key, [0.0, 0, r]); a[0] += t; a[1] += 1; a[2] = r
def find(sub):
    c = [h for h in head if sub in h]
    return c[0] if c else None
def g(r, m, f="%.0f"):
    try: return f % float(r[col[m]].replace(",", ""))
    except Exception: return "-"
SOL = ["sm__throughput.avg.pct_of_peak_sustained_elapsed",
       "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", find("lts__t_sectors") or "-", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
       "sm__warps_active.avg.pct_of_peak_sustained_active", find("issue_active.avg.pct") or "-",
       "launch__registers_per_thread", "launch__occupancy_limit_registers", "launch__occupancy_limit_shared_mem"]
st = ["long_scoreboard", "barrier", "short_scoreboard", "mio_throttle", "math_pipe_throttle", "wait", "lg_throttle",
      "not_selected", "selected", "no_instruction", "dispatch_stall", "tex_throttle"]
stc = [find("issue_stalled_%s_per_issue_active" % s) for s in st]
print("columns:", SOL, stc, file=sys.stderr)
print("us | n | SM% mem% L2% DRAM% | warps% issue% | regs occ(reg,smem) | stalls per issue: " +
      " ".join(s[:7] for s in st))
for (name, grid), (t, n, r) in sorted(last.items(), key=lambda kv: -kv[1][0])[:26]:
    stalls = " ".join(g(r, c, "%.1f") if c else "-" for c in stc)
    sol = " ".join(g(r, c) for c in SOL)
    print(f"{t:6.0f} {n:2d} {name:34s} g{grid:>7s} | {sol} | {stalls}")
PY
fi
if [ "${LMP:-0}" = 1 ]; then
  wait $LMP_PID
  tail -2 "$OUT/lammps_build.log"
  lammps_water_boxes
fi
