#!/usr/bin/env bash
# run_fuzzer.sh FUZZER SEEDS WORK SECONDS: replays every seed, then fuzzes for SECONDS with new
# inputs kept in WORK (the seeds stay untouched; a crashing input is saved there as crash-*).
# Exit 0: no crash.
set -euo pipefail
fuzzer=$1 seeds=$2 work=$3 seconds=$4
mkdir -p "$work"
"$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$work/" "$work" "$seeds"
