#!/usr/bin/env bash
# Activation recomputation under one parallel layout (tensor: megatron, pipeline: 1f1b, over ucx)
# and one attention plugin: 4 steps of a 4-layer gpt-tiny, global batch 8, with
# training.recompute_granularity none, full and selective. Full and selective rerun the same
# calls on the same inputs, so their losses and gradient norms equal the layout's own run without
# recomputation bit for bit; all three equal the single process's losses to 1e-5 relative.
# tp 2 runs with sequence parallelism; pp 2 with micro-batches of 2 (four in flight under 1f1b, so
# recomputation's shared buffers serve forwards and backwards of different micro-batches).
# Usage: recompute_equivalence.sh TRIAD_LAUNCH SOURCE_DIR WORK_DIR PYTHON TP PP ATTENTION
set -euo pipefail
LAUNCH=$1 SRC=$2 WORK=$3 PY=$4 TP=$5 PP=$6 ATTN=$7
rm -rf "$WORK" && mkdir -p "$WORK"
CFG="$SRC/configs/gpt-tiny.yaml"
common=(--set model.num_layers=4 --set training.global_batch_size=8
        --set training.gradient_accumulation_steps=0 --set training.train_iters=4
        --set data.kind=synthetic --set transport.tls=sm,self --set attention.name="$ATTN")
case $ATTN in
  naive) ;;
  # Small tiles, so each query row merges several key tiles (T = 64).
  flash1) common+=(--set attention.block_q=16 --set attention.block_k=16) ;;
  flash2) common+=(--set model.position_embedding=rope --set attention.block_q=16
                   --set attention.block_k=16 --set attention.bwd_block_q=16
                   --set attention.bwd_block_k=16) ;;
esac
layout=(--set parallel.tensor_model_parallel_size="$TP"
        --set parallel.pipeline_model_parallel_size="$PP")
if [ "$TP" -gt 1 ]; then
  layout+=(--set parallel.sequence_parallel=true --set training.micro_batch_size=4)
else
  layout+=(--set training.micro_batch_size=2)
fi
# run NAME RANKS [--set ...]: metrics in $WORK/NAME.
run() {
  local name=$1 n=$2
  shift 2
  OMP_NUM_THREADS=1 "$LAUNCH" --nproc-per-node "$n" -q "$CFG" "${common[@]}" \
    --set "output.dir=$WORK/$name" "$@" > "$WORK/$name.log" 2>&1 ||
    { echo "run $name failed:"; cat "$WORK/$name.log"; exit 1; }
}
run single 1 --set training.micro_batch_size=4
n=$((TP * PP))
for g in none full selective; do
  run "$g" "$n" "${layout[@]}" --set training.recompute_granularity=$g
done

"$PY" - "$WORK" "tp $TP x pp $PP, $ATTN" <<'PYEOF'
import json, sys
work, what = sys.argv[1], sys.argv[2]
def metrics(name):
    return [json.loads(l) for l in open(f"{work}/{name}/metrics.jsonl")]
single, none = metrics("single"), metrics("none")
fails = 0
for g in ("full", "selective"):
    rows = metrics(g)
    if [r["step"] for r in rows] != [r["step"] for r in none]:
        print(f"FAIL {g}: steps {[r['step'] for r in rows]}")
        fails += 1
        continue
    for a, b in zip(none, rows):
        for key in ("loss", "grad_norm"):
            if a[key] != b[key]:
                print(f"FAIL {g} step {a['step']}: {key} {b[key]!r} vs {a[key]!r} without recomputation")
                fails += 1
    print(f"{what}: recompute {g}: {len(rows)} steps bit-identical to none")
for g in ("none", "full", "selective"):
    worst = max(abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(single, metrics(g)))
    if not worst <= 1e-5:
        print(f"FAIL {g}: loss differs from the single process by {worst:.2e} relative")
        fails += 1
    print(f"{what}: recompute {g}: worst relative loss difference from one process {worst:.2e}")
print("FAIL" if fails else "PASS")
sys.exit(1 if fails else 0)
PYEOF
