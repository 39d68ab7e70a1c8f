#!/usr/bin/env bash
# Runs a dry run and checks that it exits 0 and that each regular expression matches a line.
# Usage: dry_run.sh REGEX... -- TRIAD_LAUNCH ARGS...
res=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do res+=("$1"); shift; done
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
[ $rc -eq 0 ] || { echo "FAIL: triad-launch --dry-run exited $rc"; exit 1; }
for re in "${res[@]}"; do
  printf '%s\n' "$out" | grep -Eq "$re" || { echo "FAIL: no line matches /$re/"; exit 1; }
done
