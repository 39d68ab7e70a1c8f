#!/usr/bin/env bash
# The tensor group's collectives behind the GEMMs train exactly as with each collective waited
# for at once: the same losses and gradient norms to the last bit.
# - parallel.overlap_tensor_comm (backward): in a column-parallel GEMM's backward the input's
#   gather again behind the input-gradient GEMM and the input gradient's all-reduce /
#   reduce-scatter behind the weight-gradient GEMM; under tp 2 with and without sequence
#   parallelism, with full recomputation, and tp 2 x pp 2 under zb-h1 (whose input halves leave
#   the weight GEMMs for later). In the traced steps, each backward reduction was posted before
#   the weight-gradient GEMM and waited for after it: its wait's "ahead_us" (the time from its
#   post to its wait) is, at the upper quartile of a backward's reductions (half of them or more
#   are the overlapped ones, the rest a recomputed forward's and the replicated gradients'), many
#   times the same quartile without the overlap, where nothing runs in between.
# - parallel.tp_comm_overlap (sequence parallelism): the forward's gathers and reduce-scatters and
#   the backward's output-gradient gathers around a ring of sends and receives, each step's
#   behind the GEMM of another rank's tokens; under tp 2, full recomputation, tp 2 x pp 2 under
#   zb-h1 and 31 tokens a rank (GEMMs of odd sizes) to the last bit; under tp 4 (the ring sums a
#   token's four parts in another order than the transport's reduce-scatter) within 1e-6 of each
#   value. In the traced steps the forward's ring steps were waited for well after they were
#   posted (the collectives without it, at once), and each rank moved the same bytes either way.
# Usage: tensor_comm_overlap.sh TRIAD_LAUNCH SOURCE_DIR WORK_DIR PYTHON
set -euo pipefail
LAUNCH=$1 SRC=$2 WORK=$3 PY=$4
rm -rf "$WORK" && mkdir -p "$WORK"
source "$SRC/tests/dist/layout_runs.sh"
sp="--set parallel.sequence_parallel=true"
# name|ranks|traced|flag the on and off runs set true and false|largest relative difference|args
bwd=parallel.overlap_tensor_comm fwd=parallel.tp_comm_overlap
layouts=(
  "tp2sp|2|1|$bwd|0|$(tp 2) $sp"
  "tp2|2|1|$bwd|0|$(tp 2)"
  "tp2sprecompute|2|1|$bwd|0|$(tp 2) $sp --set training.recompute_granularity=full"
  "tp2pp2zb|4|0|$bwd|0|$(tp 2) $(pp 2) $sp --set pipeline=zb-h1"
  "chunks-tp2sp|2|1|$fwd|0|$(tp 2) $sp"
  "chunks-tp4sp|4|1|$fwd|1e-6|$(tp 4) $sp"
  "chunks-uneven|2|1|$fwd|0|$(tp 2) $sp --set training.micro_batch_size=1 --set model.seq_length=62"
  "chunks-recompute|2|0|$fwd|0|$(tp 2) $sp --set training.recompute_granularity=full"
  "chunks-tp2pp2zb|4|0|$fwd|0|$(tp 2) $(pp 2) $sp --set pipeline=zb-h1"
)
for row in "${layouts[@]}"; do
  IFS='|' read -r name n traced flag _ args <<< "$row"
  # shellcheck disable=SC2086  # args are --set pairs
  run "$name-on" "$n" $args --profile-steps 4-5 --set "$flag=true"
  # shellcheck disable=SC2086
  run "$name-off" "$n" $args --profile-steps 4-5 --set "$flag=false"
done
"$PY" - "$WORK" "${layouts[@]}" <<'PYEOF'
import json, re, statistics, sys
work, rows = sys.argv[1], [r.split("|") for r in sys.argv[2:]]
fails = 0
def fail(msg):
    global fails
    fails += 1
    print("FAIL", msg)
def waits_ahead(t, span, names):
    """ahead_us of every tensor-group collective named `names` waited for inside a `span` span."""
    ev = t["traceEvents"] if isinstance(t, dict) else t
    spans = [e for e in ev if e.get("ph") == "X"]
    inside = [e for e in spans if e["name"].startswith(span)]
    out = []
    for w in spans:
        a = w.get("args", {})
        if a.get("group") != "tp" or not w["name"].startswith(names):
            continue
        if any(b["pid"] == w["pid"] and b["ts"] <= w["ts"] and w["ts"] <= b["ts"] + b["dur"]
               for b in inside):
            if "ahead_us" not in a:
                fail(f"a traced {w['name']} wait without ahead_us")
                return out
            out.append(a["ahead_us"])
    return out
def traffic(trace, t):
    """Per rank, the tensor group's bytes over the traced steps' waits, as a collective's whole
    buffer: a ring's t - 1 sends carry (t - 1)/t of the gather or reduce-scatter they stand for."""
    ev = trace["traceEvents"] if isinstance(trace, dict) else trace
    out = {}
    for e in ev:
        a, name = e.get("args", {}), e["name"].split(" ")[0]
        if e.get("ph") == "X" and a.get("group") == "tp" and name != "recv":
            scale = t / (t - 1) if name == "send" else 1
            out[e["pid"]] = out.get(e["pid"], 0) + a.get("bytes", 0) * scale
    return out
for name, n, traced, flag, tol, args in rows:
    on, off = ([json.loads(l) for l in open(f"{work}/{name}-{k}/metrics.jsonl")] for k in ("on", "off"))
    if len(on) != 10 or len(off) != 10:
        fail(f"{name}: {len(on)} and {len(off)} steps, expected 10 each")
        continue
    for a, b in zip(on, off):
        for key in ("loss", "grad_norm"):
            if abs(a[key] - b[key]) > float(tol) * abs(b[key]) or (tol == "0" and a[key] != b[key]):
                fail(f"{name} step {a['step']}: {key} {a.get(key)!r} overlapped vs {b.get(key)!r} not")
    chunks = flag == "parallel.tp_comm_overlap"
    if chunks:
        t = int(re.search(r"tensor_model_parallel_size=(\d+)", args).group(1))
        b_on, b_off = (traffic(json.load(open(f"{work}/{name}-{k}/trace.json")), t)
                       for k in ("on", "off"))
        if not b_on or any(abs(b_on.get(r, 0) - b) > 1e-6 * b for r, b in b_off.items()):
            fail(f"{name}: the tensor group's traced bytes differ: {b_on} overlapped vs {b_off} not")
    if traced == "1":
        # The ring's steps (send, recv) against the collectives they stand for.
        span, names = ("forward", {"on": ("send", "recv"), "off": ("all_gather", "reduce_scatter")}) \
            if chunks else ("backward", {k: ("reduce_scatter", "all_reduce") for k in ("on", "off")})
        t = {k: waits_ahead(json.load(open(f"{work}/{name}-{k}/trace.json")), span, names[k])
             for k in ("on", "off")}
        if not t["on"] or not t["off"] or (not chunks and len(t["on"]) != len(t["off"])):
            fail(f"{name}: {len(t['on'])} and {len(t['off'])} {span} waits traced")
            continue
        m_on, m_off = (statistics.quantiles(t[k], n=4)[2] for k in ("on", "off"))
        print(f"{name}: {len(t['on'])} and {len(t['off'])} {span} waits, upper quartile ahead "
              f"{m_on} us overlapped, {m_off} us not")
        if m_on < 5 * max(m_off, 1):
            fail(f"{name}: the {span} collectives ran {m_on} us ahead of their waits with the "
                 f"overlap, {m_off} us without: nothing ran behind them")
    print(f"{name}: 10 steps compared")
print(f"{'FAILED' if fails else 'passed'}: {fails} failures")
sys.exit(1 if fails else 0)
PYEOF
