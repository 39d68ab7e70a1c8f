#!/usr/bin/env bash
# The memory estimator (triad-estimate, triad/core/model/memory_plan.hpp) against the peaks the engine
# measures: a matrix of 2-step runs of a 4-layer gpt-tiny over ucx (ZeRO stages 0-3 on dp 2;
# dp 4; accumulation 4; tp 2 with sequence parallelism; pp 2 with 1f1b, gpipe and interleaved
# chunks; pp 4 with full recomputation under 1f1b, zb-h1 and interleaved chunks (the
# stage-boundary slots); tp 2 plans keeping attention + embedding or the MLP whole; optimizer
# offload; activation recomputation, full and selective, also under tp 2 and pp 2; flash2; context
# parallelism, ring and ulysses, with ZeRO-3; T 512), each checked
# against
# triad-estimate's total per rank
# at the configured stage: equal to the byte to the run's peak_memory_bytes (rank 0) and, with
# pp > 1, to each stage's stage_peak_memory_bytes (the largest over the steps). Prints estimate,
# measured and their difference for each.
# Usage: memory_estimate.sh TRIAD_LAUNCH TRIAD_ESTIMATE SOURCE_DIR WORK_DIR PYTHON
# TRIAD_MEMORY_CASES=REGEX runs only the cases whose name matches (bash =~).
set -euo pipefail
LAUNCH=$1 ESTIMATE=$2 SRC=$3 WORK=$4 PY=$5
rm -rf "$WORK" && mkdir -p "$WORK"
CFG="$SRC/configs/gpt-tiny.yaml"
export OMP_NUM_THREADS=1  # the flash plugins' workspace is per thread: runs and estimates alike
common=(--set model.num_layers=4 --set training.train_iters=2 --set training.micro_batch_size=4
        --set training.gradient_accumulation_steps=1 --set training.global_batch_size=0
        --set transport.tls=sm,self)
# run NAME RANKS [--set ...]: the training run (metrics in $WORK/NAME) and the estimate of the
# same config ($WORK/NAME.json).
run() {
  local name=$1 n=$2
  shift 2
  [[ -z ${TRIAD_MEMORY_CASES:-} || $name =~ $TRIAD_MEMORY_CASES ]] || return 0
  "$LAUNCH" --nproc-per-node "$n" -q "$CFG" "${common[@]}" --set "output.dir=$WORK/$name" "$@" \
    > "$WORK/$name.log" 2>&1 || { echo "run $name failed:"; cat "$WORK/$name.log"; exit 1; }
  local rc=0
  "$ESTIMATE" "$CFG" --world "$n" "${common[@]}" "$@" --memory-per-device 1TiB --json \
    > "$WORK/$name.json" 2> "$WORK/$name.err" || rc=$?
  [ "$rc" -eq 0 ] || { echo "triad-estimate for $name exited $rc:"; cat "$WORK/$name.err"; exit 1; }
}
z() { echo "--set zero_optimization.stage=$1"; }
# ZeRO stages 0-3 on dp 2, and with a smaller micro-batch (the model states weigh more).
for st in 0 1 2 3; do
  # shellcheck disable=SC2046
  run z${st}dp2 2 $(z $st)
  # shellcheck disable=SC2046
  run z${st}dp2b1 2 $(z $st) --set training.micro_batch_size=1
done
# dp 4; accumulation 4 (ZeRO-2/3 reduce every micro-batch's windows).
run z1dp4 4 $(z 1) --set training.micro_batch_size=1
run z2dp4 4 $(z 2) --set training.micro_batch_size=1
run z3dp4 4 $(z 3) --set training.micro_batch_size=1
run z0dp2acc4 2 $(z 0) --set training.micro_batch_size=1 --set training.gradient_accumulation_steps=4
run z2dp2acc4 2 $(z 2) --set training.micro_batch_size=1 --set training.gradient_accumulation_steps=4
run z3dp2acc4 2 $(z 3) --set training.micro_batch_size=1 --set training.gradient_accumulation_steps=4
# tp 2 x dp 2 with sequence parallelism.
tp2=(--set parallel.tensor_model_parallel_size=2 --set parallel.sequence_parallel=true)
run z0tp2dp2sp 4 $(z 0) "${tp2[@]}"
run z3tp2dp2sp 4 $(z 3) "${tp2[@]}"
# Plans that keep parts whole on every rank (their activations and weights at full width).
run z0tp2wholeattnsp 2 $(z 0) "${tp2[@]}" --set tensor=megatron \
  --set tensor.replicate=attention,embedding
run z3tp2dp2wholemlp 4 $(z 3) --set parallel.tensor_model_parallel_size=2 --set tensor=megatron \
  --set tensor.replicate=mlp
# pp 2 x dp 2: 1f1b and gpipe over 4 micro-batches, interleaved chunks.
pp2=(--set parallel.pipeline_model_parallel_size=2 --set training.micro_batch_size=2
     --set training.gradient_accumulation_steps=4)
run z1pp2dp2 4 $(z 1) "${pp2[@]}"
run z2pp2dp2 4 $(z 2) "${pp2[@]}"
run z3pp2dp2gpipe 4 $(z 3) "${pp2[@]}" --set pipeline=gpipe
run z0pp2gpipe 2 $(z 0) "${pp2[@]}" --set pipeline=gpipe
run z3pp2v2dp2 4 $(z 3) "${pp2[@]}" --set parallel.virtual_pipeline_model_parallel_size=2
run z0pp2zb 2 $(z 0) "${pp2[@]}" --set pipeline=zb-h1
# Interleaved chunks share their stage's activation sets by buffer index (the embedding's and
# the head's chunks hold the largest sets): v 2 and 3, each recomputation, tp 2 with SP.
v2=(--set parallel.virtual_pipeline_model_parallel_size=2)
v3=(--set parallel.virtual_pipeline_model_parallel_size=3 --set model.num_layers=6)
for rc in none selective full; do
  run z0pp2v2$rc 2 $(z 0) "${pp2[@]}" "${v2[@]}" --set training.recompute_granularity=$rc
  run z0pp2v3$rc 2 $(z 0) "${pp2[@]}" "${v3[@]}" --set training.recompute_granularity=$rc
done
run z0tp2pp2v2sp 4 $(z 0) "${pp2[@]}" "${v2[@]}" "${tp2[@]}"
run z0tp2pp2v3spck 4 $(z 0) "${pp2[@]}" "${v3[@]}" "${tp2[@]}" \
  --set training.recompute_granularity=full
# The stage-boundary tensors live in slots coloured over each stage's stream (held only while
# live): pp 4 with full recomputation (where they weigh most), 1f1b, zb-h1 and interleaved.
pp4=(--set parallel.pipeline_model_parallel_size=4 --set training.micro_batch_size=1
     --set training.gradient_accumulation_steps=8 --set training.recompute_granularity=full)
run z0pp4ck 4 $(z 0) "${pp4[@]}"
run z0pp4zbck 4 $(z 0) "${pp4[@]}" --set pipeline=zb-h1
run z0pp4v2ck 4 $(z 0) "${pp4[@]}" "${v2[@]}" --set model.num_layers=8
# ZeRO-Offload: the moments on the host device (not in the device's peak) once set up.
off=(--set zero_optimization.offload_optimizer.device=cpu)
run z1dp2off 2 $(z 1) "${off[@]}"
run z2dp2acc4off 2 $(z 2) "${off[@]}" --set training.micro_batch_size=1 \
  --set training.gradient_accumulation_steps=4
run z3tp2dp2off 4 $(z 3) "${tp2[@]}" "${off[@]}"
# Activation checkpointing, and the flash2 plugin's workspace.
run z0dp2ck 2 $(z 0) --set training.checkpoint_activations=true
run z3dp2ck 2 $(z 3) --set training.checkpoint_activations=true
sel=(--set training.recompute_granularity=selective)
run z0dp2sel 2 $(z 0) "${sel[@]}"
run z0tp2sel 2 $(z 0) --set parallel.tensor_model_parallel_size=2 \
  --set parallel.sequence_parallel=true "${sel[@]}"
run z0pp2sel 2 $(z 0) "${pp2[@]}" "${sel[@]}"
run z0pp2ck 2 $(z 0) "${pp2[@]}" --set training.recompute_granularity=full
run z2dp2flash2 2 $(z 2) --set attention.name=flash2 --set model.position_embedding=rope
# Context parallelism: ring and ulysses at cp 2 (the plugin on T/(2cp)-token pairs or on H/cp
# heads of the whole sequence), ZeRO-3 over dp 2 x cp 2; and one process at T 512, where the
# naive plugin's T x T workspace is most of the peak.
cp2=(--set parallel.context_parallel_size=2)
run z0cp2ring 2 $(z 0) "${cp2[@]}"
run z0cp2ulysses 2 $(z 0) "${cp2[@]}" --set parallel.context_parallel_method=ulysses
run z3cp2dp2 4 $(z 3) "${cp2[@]}" --set training.micro_batch_size=2
run z0T512 1 $(z 0) --set model.seq_length=512 --set model.num_layers=1

"$PY" - "$WORK" <<'PYEOF'
import glob, json, os, sys
work = sys.argv[1]
fails = 0
print(f"{'case':16} {'stage':>5} {'pp':>3} {'estimate':>12} {'measured':>12} {'diff':>9}  phase")
for path in sorted(glob.glob(f"{work}/*.json")):
    name = os.path.basename(path)[:-5]
    est = json.load(open(path))
    rows = [json.loads(l) for l in open(f"{work}/{name}/metrics.jsonl")]
    st = est["configured_stage"]
    stages = est["zero_stages"][st]["pipeline_stages"]
    # rank 0 (pipeline stage 0) reports peak_memory_bytes; with pp > 1 each stage's peak too.
    pairs = [("-", stages[0]["total"], max(r["peak_memory_bytes"] for r in rows),
              stages[0]["peak_phase"])]
    if est["pipeline_model_parallel_size"] > 1:
        pairs += [(str(s), e["total"], int(max(r["stage_peak_memory_bytes"][s] for r in rows)),
                   e["peak_phase"]) for s, e in enumerate(stages)]
    for pp, e, m, phase in pairs:
        ok = e == m
        fails += not ok
        print(f"{name:16} {st:>5} {pp:>3} {e:>12} {m:>12} {m - e:>+9}  {phase}"
              + ("" if ok else "  FAIL: not equal"))
print("FAIL" if fails else "PASS", f"{fails} not equal")
sys.exit(1 if fails else 0)
PYEOF
