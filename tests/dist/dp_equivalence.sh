#!/usr/bin/env bash
# Data parallelism reproduces the single-process run: the same global batch (16 samples of
# gpt-tiny) split as dp 1 × accumulation 4, dp 2 × 2 and dp 4 × 1 gives the same loss at
# every one of 20 steps, to 1e-5 relative (fp32).
# Usage: dp_equivalence.sh TRIAD_LAUNCH SOURCE_DIR WORK_DIR PYTHON
set -euo pipefail
LAUNCH=$1 SRC=$2 WORK=$3 PY=$4
rm -rf "$WORK" && mkdir -p "$WORK"
common=(--set training.train_iters=20 --set training.global_batch_size=16
        --set training.micro_batch_size=4 --set training.gradient_accumulation_steps=0
        --set model.num_layers=2 --set transport.tls=sm,self)
for n in 1 2 4; do
  OMP_NUM_THREADS=1 "$LAUNCH" --nproc-per-node "$n" "$SRC/configs/gpt-tiny.yaml" -q \
    "${common[@]}" --set "output.dir=$WORK/dp$n" > "$WORK/dp$n.log" 2>&1 ||
    { echo "dp $n run failed:"; cat "$WORK/dp$n.log"; exit 1; }
done
"$PY" - "$WORK" <<'PYEOF'
import json, sys
work = sys.argv[1]
runs = {n: [json.loads(l)["loss"] for l in open(f"{work}/dp{n}/metrics.jsonl")] for n in (1, 2, 4)}
worst, fails = 0.0, 0
for n in (2, 4):
    assert len(runs[n]) == len(runs[1]) == 20, (n, len(runs[n]))
    for step, (a, b) in enumerate(zip(runs[1], runs[n]), 1):
        rel = abs(a - b) / abs(a)
        worst = max(worst, rel)
        if rel > 1e-5:
            fails += 1
            print(f"FAIL dp {n} step {step}: loss {b:.8f} vs single-process {a:.8f} (rel {rel:.2e})")
print("single process:", " ".join(f"{x:.5f}" for x in runs[1]))
print("dp 4          :", " ".join(f"{x:.5f}" for x in runs[4]))
print(f"worst relative loss difference over 20 steps, dp 2 and 4 vs 1: {worst:.2e}")
print(f"{40 - fails} passed, {fails} failed")
sys.exit(1 if fails else 0)
PYEOF
