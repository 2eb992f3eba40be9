#!/usr/bin/env bash
# device_ctest.sh: on the GPU machine, the proof run of a session's final GPU code in one call: build with the tests,
# `ctest -L gpu -j12`, and meanwhile compute-sanitizer memcheck and racecheck on the kernel tests of the kernels the
# session changed (FILTER for memcheck, RACE_FILTER for racecheck; default the radial MLP and fused-forward tests).
# Only a few small files go to $OUT, and the summary is printed first-to-last in a few lines (a long tail is cut by the
# device tool). BENCH=1: then the MACE-MP-0-medium-architecture step's times (carry .whl to make the model); with
# BASE=1 also those of the base commit in .device/base (`git archive BASE | tar -x -C .device/base`), alternated, and
# the shipped models'. FP64=1: the float64 steps of MP-0 and the water MACE too. VARIANTS: space-separated switches (VAR=value) of the new tree, timed one after another on
# MP-0, mace01 and the water MACE. PAIRS_FILTER: memcheck on those test_gpu tests too (whole steps on the device);
# RACE_PAIRS_FILTER: racecheck on those. The steps' times come first, on a quiet GPU, and every result reaches $OUT as
# it comes, so a call cut at its limit still returns them (session 49: with BASE=1 and a racecheck of a whole fp32
# step of ssmace_zbl_agnesi_l2, which takes more than 120 s, the old order, ctest first, passed 600 s and returned
# nothing). ctest is bounded by CT seconds (default 400); CT_REGEX: only the ctests matching it (`ctest -R`), e.g. the
# ones a first call cut (its summary prints them as a CT_REGEX). The CPU's float64 references are computed once for the whole run and shared between its test
# processes (tests/reference_cache.h): one fresh CGQ_TEST_SEED for the run (printed; set it to repeat a run), the
# cache in /tmp/cgq_references (REFCACHE=0: each process computes its own, each with its own seed).
set -u
OUT=${OUT:-device-out}
mkdir -p "$OUT"
if [ "${REFCACHE:-1}" = 1 ]; then
  export CGQ_TEST_SEED=${CGQ_TEST_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
  export CGQ_TEST_REFERENCE_CACHE=/tmp/cgq_references
  rm -rf "$CGQ_TEST_REFERENCE_CACHE" && mkdir -p "$CGQ_TEST_REFERENCE_CACHE"
fi
source bench/device_build.sh
{ [ "${BENCH:-0}" = 1 ] || [ "${LAMMPS:-0}" = 1 ]; } && make_models
BASE_PID=""
if [ "${BASE:-0}" = 1 ]; then
  build_base bench_eval &
  BASE_PID=$!
fi
# LAMMPS=1: LAMMPS (.device/lammps, carried) built with this tree's pair style beside ctest, then the MACE water box
# (5,184 atoms, fp32, 500 steps) run once per switch of LAMMPS_VARIANTS (VAR=value), two rounds alternated; then the
# pair style on the GPU checked against the CPU on 1-4 ranks (lammps_gpu_checks), and with 2 GPUs the water boxes on
# 1 and 2 ranks (lammps_ranks; lammps_scale: MP-0 on 5,184 and 93,312 atoms)
# only what `ctest -L gpu` runs (and bench_eval for BENCH): a fresh machine's whole build passed 380 s in session 27
build_gpu test_gpu test_gpu_kernels $([ "${BENCH:-0}" = 1 ] && echo bench_eval) $([ "${LAMMPS:-0}" = 1 ] && echo cgequi_cli)
if [ "${BENCH:-0}" = 1 ]; then # first the MACE-MP-0-medium-architecture step: checked, 3 rounds, profile, 98,304 atoms
  [ -z "$BASE_PID" ] || wait $BASE_PID
  wait $MODELS_PID
  B=build-gpu/bench_eval W=.device/models/water_192.xyz MP=$M/mace_mp0_medium_arch.h5 B0=.device/base/build/bench_eval
  [ "${BASE:-0}" = 1 ] && [ -x $B0 ] || B0=""
  ms() { grep -oE '[0-9.]+ ms/step median of [0-9]+ \(min [0-9.]+\)|GPU memory [0-9.]+ GiB' | tr '\n' ' '; }
  {
    echo "MP-0: $($B $MP $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E 'check|NONDET|rebuild')"
    for round in 1 2 3; do
      [ -n "$B0" ] && echo "MP-0 round $round base: $($B0 $MP $W 3 3 3 cuda 10 --fp32 --pairs | ms)"
      echo "MP-0 round $round: $($B $MP $W 3 3 3 cuda 10 --fp32 --pairs | ms)"
    done
    prof() { CGQ_GPU_PROFILE=1 "$@" $MP $W 3 3 3 cuda 3 --fp32 --pairs 2>&1 | grep profile | tail -1; }
    for round in 1 2; do # the phases, alternated with the base's where there is one
      [ -n "$B0" ] && echo "base $(prof $B0)"
      echo "$(prof $B)"
    done
    echo "$(CGQ_GPU_PROFILE=host $B $MP $W 3 3 3 cuda 10 --fp32 --pairs 2>&1 | grep profile | tail -1)" # no syncs
    [ -n "$B0" ] && echo "MP-0 98,304 atoms base: $($B0 $MP $W 8 8 8 cuda 3 --fp32 --pairs | ms)"
    echo "MP-0 98,304 atoms: $($B $MP $W 8 8 8 cuda 3 --fp32 --pairs | tee /tmp/mp0_98k.txt | ms)"
    grep rebuild /tmp/mp0_98k.txt
    for v in ${VARIANTS:-}; do # switches of the new tree, A/B in one binary: VARIANTS='CGQ_X=0 CGQ_X=1'
      echo "MP-0 $v: $(env $v $B $MP $W 3 3 3 cuda 10 --fp32 --pairs | ms)"
      echo "  $(env $v CGQ_GPU_PROFILE=1 $B $MP $W 3 3 3 cuda 3 --fp32 --pairs 2>&1 | grep profile | tail -1)"
      echo "  $(env $v CGQ_GPU_PROFILE=host $B $MP $W 3 3 3 cuda 10 --fp32 --pairs 2>&1 | grep profile | tail -1)"
      echo "mace01 $v: $(env $v $B potentials/mace01-solvent.h5 $W 3 3 3 cuda 20 --fp32 --pairs | ms)"
      echo "water-mace-small $v: $(env $v $B potentials/water-mace-small.h5 $W 3 3 3 cuda 20 --fp32 --pairs | ms)"
    done
    if [ "${FP64:-0}" = 1 ]; then # FP64=1: the float64 steps (MP-0 and the water MACE), alternated with the base's
      for round in 1 2; do
        [ -n "$B0" ] && echo "MP-0 fp64 round $round base: $($B0 $MP $W 3 3 3 cuda 5 --pairs | ms)"
        echo "MP-0 fp64 round $round: $($B $MP $W 3 3 3 cuda 5 --pairs | ms)"
        [ -n "$B0" ] && echo "water-mace-small fp64 round $round base: $($B0 potentials/water-mace-small.h5 $W 3 3 3 cuda 10 --pairs | ms)"
        echo "water-mace-small fp64 round $round: $($B potentials/water-mace-small.h5 $W 3 3 3 cuda 10 --pairs | ms)"
      done
    fi
    if [ -n "$B0" ] && [ "${SHIPPED:-1}" = 1 ]; then # SHIPPED=0: not the shipped models' A/B
      for mdl in water-mace-small mace01-solvent water-nequip-small; do
        echo "$mdl: $($B potentials/$mdl.h5 $W 3 3 3 cuda 3 --fp32 --pairs --check | grep -E 'check|NONDET|rebuild' | head -2)"
        for round in 1 2; do
          echo "$mdl base: $($B0 potentials/$mdl.h5 $W 3 3 3 cuda 20 --fp32 --pairs | ms)"
          echo "$mdl new: $($B potentials/$mdl.h5 $W 3 3 3 cuda 20 --fp32 --pairs | ms)"
        done
      done
    fi
  } >"$OUT/bench.txt" 2>&1
fi
K=build-gpu/tests/test_gpu_kernels F=${FILTER:-'*Fused*:*RadialTable*'}
R=${RACE_FILTER:-'*Fused*mace01*:*Fused*water_mace*:*RadialTable*mace01*:*RadialTable*nequip_l2_parity_2layer_wide*'}
# SAN_ENV: switches (VAR=value) for the sanitizer runs only
[ "${SANITIZE:-1}" = 1 ] && ( [ -n "${SAN_ENV:-}" ] && export ${SAN_ENV}
  compute-sanitizer --tool memcheck $K --gtest_filter="$F" >/tmp/memcheck.log 2>&1
  compute-sanitizer --tool racecheck $K --gtest_filter="$R" >/tmp/racecheck.log 2>&1
  : >/tmp/memcheck_pairs.log
  [ -n "${PAIRS_FILTER:-}" ] && compute-sanitizer --tool memcheck build-gpu/tests/test_gpu --gtest_filter="$PAIRS_FILTER" \
    >/tmp/memcheck_pairs.log 2>&1
  : >/tmp/racecheck_pairs.log
  [ -n "${RACE_PAIRS_FILTER:-}" ] && compute-sanitizer --tool racecheck build-gpu/tests/test_gpu \
    --gtest_filter="$RACE_PAIRS_FILTER" >/tmp/racecheck_pairs.log 2>&1
  { grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" /tmp/memcheck.log /tmp/racecheck.log /tmp/memcheck_pairs.log \
      /tmp/racecheck_pairs.log
  } >"$OUT/sanitizers.txt" ) &

[ "${LAMMPS:-0}" = 1 ] && build_lammps >"$OUT/lammps.txt" &
start=$(date +%s)
# 2 OpenMP threads per test (the CPU references): 16 per test at -j8 asks for 128 threads on 16 cores (374 s in session 15;
# the 9 whole-binary variants alone took 89 s at 2 threads and -j9)
OMP_NUM_THREADS=2 timeout ${CT:-400} ctest --test-dir build-gpu -L gpu -j12 --output-on-failure ${CT_REGEX:+-R "$CT_REGEX"} \
  >/tmp/ctest_gpu.log 2>&1
echo "ctest -L gpu${CT_REGEX:+ -R '$CT_REGEX'} (rc $?): $(( $(date +%s) - start )) s, seed ${CGQ_TEST_SEED:-per process}," \
  "$(ls ${CGQ_TEST_REFERENCE_CACHE:-/nonexistent} 2>/dev/null | wc -l) references shared" >"$OUT/ctest_summary.txt"
grep -E "tests passed|tests failed|Total Test time" /tmp/ctest_gpu.log >>"$OUT/ctest_summary.txt"
echo "skipped (no plan of that kind for the model): $(grep -c '\*\*\*Skipped' /tmp/ctest_gpu.log)" >>"$OUT/ctest_summary.txt"
grep -E "\*\*\*Failed|\*\*\*Timeout|\*\*\*Exception" /tmp/ctest_gpu.log | head -20 >>"$OUT/ctest_summary.txt"
# the ctests that did not finish within CT, as a CT_REGEX for the next (warm) call
ctest --test-dir build-gpu -N -L gpu ${CT_REGEX:+-R "$CT_REGEX"} 2>/dev/null | grep -oE "Test +#[0-9]+: [^ ]+" |
  awk '{print $3}' | sort >/tmp/ctest_all.txt
grep -oE "Test +#[0-9]+: [^ ]+ \.+" /tmp/ctest_gpu.log | awk '{print $3}' | sort >/tmp/ctest_done.txt
comm -23 /tmp/ctest_all.txt /tmp/ctest_done.txt >/tmp/ctest_cut.txt
[ -s /tmp/ctest_cut.txt ] && echo "not finished ($(wc -l </tmp/ctest_cut.txt)): CT_REGEX='^($(paste -sd'|' \
  /tmp/ctest_cut.txt))\$'" >>"$OUT/ctest_summary.txt"
cp /tmp/ctest_gpu.log "$OUT/ctest_gpu.log"
wait
if [ "${LAMMPS:-0}" = 1 ]; then
  wait
  [ -n "${LAMMPS_VARIANTS-x}" ] && lammps_variants >>"$OUT/lammps.txt" 2>&1 # LAMMPS_VARIANTS= (empty): none
  lammps_gpu_checks >>"$OUT/lammps.txt" 2>&1
  [ "$(nvidia-smi -L | wc -l)" -ge 2 ] && { lammps_ranks; lammps_scale; } >>"$OUT/lammps.txt" 2>&1
fi
echo "==== summary"
cat "$OUT/ctest_summary.txt" "$OUT/sanitizers.txt" "$OUT/bench.txt" "$OUT/lammps.txt" 2>/dev/null
