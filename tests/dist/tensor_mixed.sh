#!/usr/bin/env bash
# A tensor plugin chooses its splits and the core runs them: plans that keep some parts whole on
# every rank (tensor: megatron with `replicate`) reproduce the single process on a model whose 3
# heads tp 2 does not divide (hidden 96), for 10 steps: the loss to 1e-5 relative and the gradient
# norm to 1e-4 (the layouts' summation orders differ, as in layout_equivalence.sh):
#   attention whole, the MLP and embedding split: without and with sequence parallelism, with
#   full activation recomputation, on tp 2 x pp 2, and under ZeRO-3 on tp 2 x dp 2;
#   attention and the embedding whole (sequence parallel); everything whole (sequence parallel);
# and on a 4-head model the MLP and embedding whole while attention is split (sequence parallel).
# Each tp run's counted tensor-parallel traffic equals the formula for its plan. Megatron's plan
# itself is refused on the 3-head model, in one line naming the heads and the fix; so is a
# `replicate` entry the plugin does not know. The conformance suite passes the mixed plans.
# Usage: tensor_mixed.sh TRIAD_LAUNCH TRIAD_PLUGIN_TEST PLUGIN_DIR SOURCE_DIR WORK_DIR PYTHON
set -euo pipefail
LAUNCH=$1 PTEST=$2 PLUGINS=$3 SRC=$4 WORK=$5 PY=$6
rm -rf "$WORK" && mkdir -p "$WORK"
CFG="$SRC/configs/gpt-tiny.yaml"
export OMP_NUM_THREADS=1
common=(--set model.num_layers=4 --set model.hidden_size=96 --set model.num_attention_heads=3
        --set training.global_batch_size=8 --set training.micro_batch_size=2
        --set training.gradient_accumulation_steps=0 --set training.train_iters=10
        --set optimizer.lr=1e-3 --set optimizer.min_lr=1e-4 --set lr_schedule.lr_warmup_iters=2
        --set transport.tls=sm,self)
# run NAME RANKS TP [--set ...]: one job, metrics in $WORK/NAME.
run() {
  local name=$1 n=$2 tp=$3
  shift 3
  timeout 300 "$LAUNCH" --nproc-per-node "$n" "$CFG" "${common[@]}" \
    --set parallel.tensor_model_parallel_size="$tp" --set "output.dir=$WORK/$name" "$@" \
    > "$WORK/$name.log" 2>&1 || { echo "FAIL: run $name exited $?:"; cat "$WORK/$name.log"; exit 1; }
  if [ "$tp" -gt 1 ]; then
    grep -Eq "traffic per step per rank: counted ([0-9]+) B .*formula \1 B" "$WORK/$name.log" ||
      { echo "FAIL $name: counted traffic differs from the formula:";
        grep traffic "$WORK/$name.log"; exit 1; }
  fi
}
tp2=(--set tensor=megatron)
sp=(--set parallel.sequence_parallel=true)
run single 1 1
run attn 2 2 "${tp2[@]}" --set tensor.replicate=attention
run attn_sp 2 2 "${tp2[@]}" --set tensor.replicate=attention "${sp[@]}"
run attn_sp_ck 2 2 "${tp2[@]}" --set tensor.replicate=attention "${sp[@]}" \
  --set training.checkpoint_activations=true
run attn_pp2 4 2 "${tp2[@]}" --set tensor.replicate=attention "${sp[@]}" \
  --set parallel.pipeline_model_parallel_size=2
run attn_z3dp2 4 2 "${tp2[@]}" --set tensor.replicate=attention "${sp[@]}" \
  --set zero_optimization.stage=3
run attn_emb_sp 2 2 "${tp2[@]}" --set "tensor.replicate=attention, embedding" "${sp[@]}"
run whole_sp 2 2 "${tp2[@]}" --set tensor.replicate=attention,mlp,embedding "${sp[@]}"
heads4=(--set model.num_attention_heads=4)
run single_h4 1 1 "${heads4[@]}"
run mlp_emb_sp_h4 2 2 "${heads4[@]}" "${tp2[@]}" --set tensor.replicate=mlp,embedding "${sp[@]}"

# Refusals: one line each, exit 2, naming the thing and the fix.
refused() {
  local name=$1 want=$2
  shift 2
  set +e
  timeout 120 "$LAUNCH" --nproc-per-node 2 "$CFG" "${common[@]}" \
    --set parallel.tensor_model_parallel_size=2 --set "output.dir=$WORK/$name" "$@" \
    > "$WORK/$name.log" 2>&1
  local rc=$?
  set -e
  [ "$rc" = 2 ] || { echo "FAIL $name: exit $rc, expected 2:"; cat "$WORK/$name.log"; exit 1; }
  grep -q -- "$want" "$WORK/$name.log" ||
    { echo "FAIL $name: no '$want' in:"; cat "$WORK/$name.log"; exit 1; }
  [ ! -e "$WORK/$name/metrics.jsonl" ] || { echo "FAIL $name: it wrote metrics"; exit 1; }
}
refused megatron_3heads "replicate: attention"
refused unknown_part "'heads' is not a part; list parts among attention, mlp, embedding" \
  "${tp2[@]}" --set tensor.replicate=heads

# The conformance suite runs the mixed plans through the core's own placement.
for r in attention mlp,embedding attention,mlp,embedding; do
  "$PTEST" tensor "$PLUGINS/libtriad-tensor-megatron.so" --quick --param "replicate=$r" \
    > "$WORK/suite_$r.log" 2>&1 || { echo "FAIL: suite with replicate=$r:"; cat "$WORK/suite_$r.log"; exit 1; }
done

"$PY" - "$WORK" <<'PYEOF'
import json, sys
work = sys.argv[1]
def metrics(name):
    return [json.loads(l) for l in open(f"{work}/{name}/metrics.jsonl")]
fails = 0
for base, others in (("single", ["attn", "attn_sp", "attn_sp_ck", "attn_pp2", "attn_z3dp2",
                                 "attn_emb_sp", "whole_sp"]),
                     ("single_h4", ["mlp_emb_sp_h4"])):
    a = metrics(base)
    assert [r["step"] for r in a] == list(range(1, 11)), f"{base}: steps"
    for o in others:
        b = metrics(o)
        if len(b) != len(a):
            print(f"FAIL {o}: {len(b)} steps, expected {len(a)}"); fails += 1; continue
        dl = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a, b))
        dg = max(abs(x["grad_norm"] - y["grad_norm"]) / abs(x["grad_norm"]) for x, y in zip(a, b))
        ok = dl <= 1e-5 and dg <= 1e-4
        fails += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {o} vs {base}: loss {dl:.1e}, grad norm {dg:.1e}")
sys.exit(1 if fails else 0)
PYEOF
