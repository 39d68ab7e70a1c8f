#!/usr/bin/env bash
# ZeRO-1 by unit and ZeRO-2 with the parameter all-gather after the step left in flight and waited
# for per layer in the next forward pass (zero_optimization.overlap_param_gather, data_v4.h's
# TRIAD_DATA_GATHER_DEFERRED) train exactly as with the gathers completed inside the step: the
# same losses, gradient norms and validation losses to the last bit, under dp 2 (with validation
# between steps), accumulation 2, offload and pp 2 x dp 2. The overlapped run's trace must show
# the waits inside the forward pass (one gather_params span per unit and step, each within a
# forward span of the first micro-batch), the other run's none: the deferral really happens.
# Usage: param_gather_overlap.sh TRIAD_LAUNCH SOURCE_DIR WORK_DIR PYTHON
set -euo pipefail
LAUNCH=$1 SRC=$2 WORK=$3 PY=$4
rm -rf "$WORK" && mkdir -p "$WORK"
source "$SRC/tests/dist/layout_runs.sh"
layouts=(
  "z1dp2|2|$(zero 1) --set training.eval_interval=3 --set training.eval_iters=1 --set data.split=90,10,0"
  "z2acc2|2|$(zero 2) --set training.gradient_accumulation_steps=2"
  "z1offload|2|$(zero 1) --set zero_optimization.offload_optimizer.device=cpu"
  "z1pp2dp2|4|$(zero 1) $(pp 2)"
)
for row in "${layouts[@]}"; do
  IFS='|' read -r name n args <<< "$row"
  # shellcheck disable=SC2086  # args are --set pairs
  run "$name-on" "$n" $args --profile-steps 4-5
  # shellcheck disable=SC2086
  run "$name-off" "$n" $args --profile-steps 4-5 --set zero_optimization.overlap_param_gather=false
done
"$PY" - "$WORK" "${layouts[@]}" <<'PYEOF'
import json, sys
work, rows = sys.argv[1], [r.split("|")[0] for r in sys.argv[2:]]
fails = 0
def fail(msg):
    global fails
    fails += 1
    print("FAIL", msg)
for name in rows:
    on, off = ([json.loads(l) for l in open(f"{work}/{name}-{k}/metrics.jsonl")] for k in ("on", "off"))
    if len(on) != 10 or len(off) != 10:
        fail(f"{name}: {len(on)} and {len(off)} steps, expected 10 each")
        continue
    for a, b in zip(on, off):
        for key in ("loss", "grad_norm", "valid_loss"):
            if a.get(key) != b.get(key):
                fail(f"{name} step {a['step']}: {key} {a.get(key)!r} overlapped vs {b.get(key)!r} not")
    trace = {k: json.load(open(f"{work}/{name}-{k}/trace.json")) for k in ("on", "off")}
    deferred = 0
    for k, t in trace.items():
        ev = t["traceEvents"] if isinstance(t, dict) else t
        spans = [e for e in ev if e.get("ph") == "X"]
        waits = [e for e in spans if e["name"].startswith("gather_params")]
        if k == "off":
            if waits:
                fail(f"{name}: {len(waits)} gather_params spans with overlap_param_gather false")
            continue
        deferred = len(waits)
        if not waits:
            fail(f"{name}: no gather_params span: the gathers were not deferred")
        fwd = [e for e in spans if e["name"].startswith("forward")]
        for w in waits:
            inside = [f for f in fwd if f["pid"] == w["pid"] and f["ts"] <= w["ts"] + 1
                      and w["ts"] + w["dur"] <= f["ts"] + f["dur"] + 1]
            if not inside and not any(f["pid"] == w["pid"] and abs(f["ts"] - (w["ts"] + w["dur"])) <= 50
                                      for f in fwd):
                fail(f"{name}: rank {w['pid']}'s {w['name']} at {w['ts']} is not at a forward pass")
                break
    print(f"{name}: 10 steps compared, {deferred} deferred gather waits traced")
print(f"{'FAILED' if fails else 'passed'}: {fails} failures")
sys.exit(1 if fails else 0)
PYEOF
