#!/usr/bin/env bash
# Data parallelism reproduces the single-process run: the same global batch (16 samples of
# gpt-tiny) split as dp 1 × accumulation 4, dp 2 × 2 and dp 4 × 1 gives the same loss and the
# same gradient norm (before clipping) at every one of 20 steps, to 1e-5 relative (fp32). Each
# run must really have the data-parallel size it claims: its log's batch line and its resolved
# config.yaml both say so.
# Usage: dp_equivalence.sh TRIAD_LAUNCH SOURCE_DIR WORK_DIR PYTHON
set -euo pipefail
LAUNCH=$1 SRC=$2 WORK=$3 PY=$4
rm -rf "$WORK" && mkdir -p "$WORK"
common=(--set training.train_iters=20 --set training.global_batch_size=16
        --set training.micro_batch_size=4 --set training.gradient_accumulation_steps=0
        --set model.num_layers=2 --set transport.tls=sm,self)
for n in 1 2 4; do
  OMP_NUM_THREADS=1 "$LAUNCH" --nproc-per-node "$n" "$SRC/configs/gpt-tiny.yaml" \
    "${common[@]}" --set "output.dir=$WORK/dp$n" > "$WORK/dp$n.log" 2>&1 ||
    { echo "dp $n run failed:"; cat "$WORK/dp$n.log"; exit 1; }
  # The single process logs without a prefix, the ranks of a job with one.
  grep -Eq "^(\[rank 0\] )?\[[0-9:]+\] batch: global 16 = micro 4 x accumulation $((4 / n)) x data-parallel $n\$" \
    "$WORK/dp$n.log" ||
    { echo "FAIL dp $n: no batch line saying data-parallel $n:"; cat "$WORK/dp$n.log"; exit 1; }
  grep -q "^  data_parallel_size: $n\$" "$WORK/dp$n/config.yaml" ||
    { echo "FAIL dp $n: $WORK/dp$n/config.yaml does not say data_parallel_size: $n"; exit 1; }
done
"$PY" - "$WORK" <<'PYEOF'
import json, sys
work = sys.argv[1]
runs = {n: [json.loads(l) for l in open(f"{work}/dp{n}/metrics.jsonl")] for n in (1, 2, 4)}
worst = {"loss": 0.0, "grad_norm": 0.0}
checks, fails = 0, 0
for n in (1, 2, 4):
    steps = [r["step"] for r in runs[n]]
    if steps != list(range(1, 21)):
        print(f"FAIL dp {n}: metrics.jsonl has steps {steps}, expected 1..20")
        sys.exit(1)
for n in (2, 4):
    for a, b in zip(runs[1], runs[n]):
        for key in ("loss", "grad_norm"):
            x, y = a[key], b[key]
            rel = abs(x - y) / abs(x) if x else abs(y)
            worst[key] = max(worst[key], rel)
            checks += 1
            if not rel <= 1e-5:  # a NaN fails too
                fails += 1
                print(f"FAIL dp {n} step {a['step']}: {key} {y:.8f} vs single-process {x:.8f} (rel {rel:.2e})")
for key in ("loss", "grad_norm"):
    print(f"{key:9} single process:", " ".join(f"{r[key]:.5f}" for r in runs[1]))
    print(f"{key:9} dp 4          :", " ".join(f"{r[key]:.5f}" for r in runs[4]))
    print(f"worst relative {key} difference over 20 steps, dp 2 and 4 vs 1: {worst[key]:.2e}")
print(f"{checks - fails} passed, {fails} failed")
sys.exit(1 if fails else 0)
PYEOF
