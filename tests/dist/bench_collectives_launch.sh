#!/usr/bin/env bash
# triad-bench-collectives runs through the launcher: 2 ranks, every op, 8 B .. 1 MiB. The
# output must be the nccl-tests table (its column header, one row per size with 9 columns)
# with every result exact (#wrong 0), and rank 0 must write the same rows to --json.
# Usage: bench_collectives_launch.sh TRIAD_LAUNCH TRIAD_BENCH_COLLECTIVES PLUGIN WORK_DIR
set -euo pipefail
LAUNCH=$1 BENCH=$2 PLUGIN=$3 WORK=$4
rm -rf "$WORK" && mkdir -p "$WORK"
log=$WORK/bench.log
OMP_NUM_THREADS=1 "$LAUNCH" --nproc-per-node 2 --exec "$BENCH" --plugin "$PLUGIN" \
  --max-bytes 1M -w 1 -i 2 --json "$WORK/bench.json" > "$log" 2>&1 ||
  { echo "FAIL: the launched benchmark exited non-zero:"; cat "$log"; exit 1; }
cat "$log"
# Rows and headers come from rank 0 only, behind the launcher's "[rank 0] " prefix.
awk '
  { sub(/^\[rank [0-9]+\] /, "") }
  /^# (allreduce|reducescatter|allgather), 2 ranks/ { ops++ }
  /^# +size +count +type +redop +root +time +algbw +busbw +#wrong$/ { headers++ }
  /^ +[0-9]+ / {
    if (NF != 9) { print "FAIL: row with " NF " columns: " $0; bad++ }
    else if ($9 != 0) { print "FAIL: #wrong " $9 " at size " $1; bad++ }
    rows++
  }
  /Out of bounds values : [0-9]+ FAILED/ { print "FAIL: " $0; bad++ }
  END {
    # 8 B .. 1 MiB by 2: 18 sizes per op.
    if (ops != 3 || headers != 3 || rows != 54) {
      print "FAIL: expected 3 tables with 18 rows each, got " ops " titles, " headers \
            " column headers, " rows " rows"; bad++
    }
    exit bad ? 1 : 0
  }' "$log"
/usr/bin/python3 - "$WORK/bench.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
assert len(rows) == 54, len(rows)
assert {r["op"] for r in rows} == {"allreduce", "reducescatter", "allgather"}
assert all(r["ranks"] == 2 and r["wrong"] == 0 and r["busbw"] > 0 for r in rows), rows
print("OK: 3 ops x 18 sizes, 2 ranks, every result exact")
PY
