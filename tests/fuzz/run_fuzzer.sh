#!/usr/bin/env bash
# run_fuzzer.sh FUZZER SEEDS WORK SECONDS: replays every seed, then fuzzes for SECONDS with new
# inputs kept in WORK (the seeds stay untouched; a crashing input is saved there as crash-*).
# Exit 0: no crash. FUZZ_SEED=N fixes libFuzzer's random seed (CI: the same inputs each run, up to
# where the time runs out); unset, each run draws its own.
set -euo pipefail
fuzzer=$1 seeds=$2 work=$3 seconds=$4
mkdir -p "$work"
"$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  ${FUZZ_SEED:+-seed="$FUZZ_SEED"} -artifact_prefix="$work/" "$work" "$seeds"
