#!/usr/bin/env bash
# The tensor group's backward collectives behind the GEMMs (parallel.overlap_tensor_comm: in a
# column-parallel GEMM's backward the input's gather again behind the input-gradient GEMM and the
# input gradient's all-reduce / reduce-scatter behind the weight-gradient GEMM) train exactly as
# with each collective waited for at once: the same losses and gradient norms to the last bit,
# under tp 2 with and without sequence parallelism, with full recomputation, and tp 2 x pp 2
# under zb-h1 (whose input halves leave the weight GEMMs for later). In the traced steps, each
# backward reduction was posted before the weight-gradient GEMM and waited for after it: its
# wait's "ahead_us" (the time from its post to its wait) is, at the upper quartile of a
# backward's reductions (half of them or more are the overlapped ones, the rest a recomputed
# forward's and the replicated gradients'), many times the same quartile without the overlap,
# where nothing runs in between.
# Usage: tensor_comm_overlap.sh TRIAD_LAUNCH SOURCE_DIR WORK_DIR PYTHON
set -euo pipefail
LAUNCH=$1 SRC=$2 WORK=$3 PY=$4
rm -rf "$WORK" && mkdir -p "$WORK"
source "$SRC/tests/dist/layout_runs.sh"
sp="--set parallel.sequence_parallel=true"
# name|ranks|traced (the backward's reductions all overlapped)|args
layouts=(
  "tp2sp|2|1|$(tp 2) $sp"
  "tp2|2|1|$(tp 2)"
  "tp2sprecompute|2|1|$(tp 2) $sp --set training.recompute_granularity=full"
  "tp2pp2zb|4|0|$(tp 2) $(pp 2) $sp --set pipeline=zb-h1"
)
for row in "${layouts[@]}"; do
  IFS='|' read -r name n traced args <<< "$row"
  # shellcheck disable=SC2086  # args are --set pairs
  run "$name-on" "$n" $args --profile-steps 4-5
  # shellcheck disable=SC2086
  run "$name-off" "$n" $args --profile-steps 4-5 --set parallel.overlap_tensor_comm=false
done
"$PY" - "$WORK" "${layouts[@]}" <<'PYEOF'
import json, statistics, sys
work, rows = sys.argv[1], [r.split("|") for r in sys.argv[2:]]
fails = 0
def fail(msg):
    global fails
    fails += 1
    print("FAIL", msg)
def backward_reductions(t):
    """ahead_us of every tensor-group reduction waited for inside a backward span."""
    ev = t["traceEvents"] if isinstance(t, dict) else t
    spans = [e for e in ev if e.get("ph") == "X"]
    bwd = [e for e in spans if e["name"].startswith("backward")]
    out = []
    for w in spans:
        a = w.get("args", {})
        if a.get("group") != "tp" or not w["name"].startswith(("reduce_scatter", "all_reduce")):
            continue
        if any(b["pid"] == w["pid"] and b["ts"] <= w["ts"] and w["ts"] <= b["ts"] + b["dur"]
               for b in bwd):
            if "ahead_us" not in a:
                fail(f"a traced {w['name']} wait without ahead_us")
                return out
            out.append(a["ahead_us"])
    return out
for name, n, traced, _ in rows:
    on, off = ([json.loads(l) for l in open(f"{work}/{name}-{k}/metrics.jsonl")] for k in ("on", "off"))
    if len(on) != 10 or len(off) != 10:
        fail(f"{name}: {len(on)} and {len(off)} steps, expected 10 each")
        continue
    for a, b in zip(on, off):
        for key in ("loss", "grad_norm"):
            if a.get(key) != b.get(key):
                fail(f"{name} step {a['step']}: {key} {a.get(key)!r} overlapped vs {b.get(key)!r} not")
    log = open(f"{work}/{name}-on.log").read()
    if traced == "1":
        t = {k: backward_reductions(json.load(open(f"{work}/{name}-{k}/trace.json"))) for k in ("on", "off")}
        if not t["on"] or len(t["on"]) != len(t["off"]):
            fail(f"{name}: {len(t['on'])} and {len(t['off'])} backward reductions traced")
            continue
        m_on, m_off = (statistics.quantiles(t[k], n=4)[2] for k in ("on", "off"))
        print(f"{name}: {len(t['on'])} backward reductions, upper quartile ahead {m_on} us overlapped, {m_off} us not")
        if m_on < 5 * max(m_off, 1):
            fail(f"{name}: the backward reductions ran {m_on} us ahead of their waits with the overlap, "
                 f"{m_off} us without: nothing ran behind them")
    print(f"{name}: 10 steps compared")
print(f"{'FAILED' if fails else 'passed'}: {fails} failures")
sys.exit(1 if fails else 0)
PYEOF
