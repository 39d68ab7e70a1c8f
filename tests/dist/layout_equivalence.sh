#!/usr/bin/env bash
# Tensor and pipeline parallelism (tensor: megatron, pipeline: 1f1b / gpipe, over ucx) reproduce
# the single-process run of a 4-layer gpt-tiny with the same global batch (8 samples):
#   - the loss at each of 20 steps to 1e-5 relative (and the gradient norm to 1e-4), for tp 2
#     and 4, with and without sequence parallelism, learned positions + naive attention and
#     rotary positions + flash2 (small tiles), tp 2 x dp 2; pp 2 and 4 with 1f1b and gpipe, an
#     uneven partition, rotary + flash2 and flash1 with both schedules on pp 2, and
#     tp 2 x pp 2 x dp 2 (8 ranks);
#     tp 2 and 4 with sequence parallelism and parallel.tp_comm_overlap's ring; pp 2 on a
#     transport without tags (ucx's tags: false);
#   - step 1's gradients, gathered to whole tensors, to 1e-5 of each tensor's largest (tp, pp);
#   - export_hf after one step of lr 1e-7 (so the file holds the initial weights, gathered from
#     the ranks' slices, to ~1e-9): the same tensors within 1e-6 (vocabulary padding dropped);
#   - init_from_hf into tp 2 and into pp 2: the single-process step-1 loss;
#   - the zero-bubble schedule zb-h1 on pp 2 and 4, tp 2 x pp 2 x dp 2 with SP, ZeRO 1-3,
#     recomputation (full, selective) and rotary + flash2: the losses; pp 2's step-1 gradients;
#   - ZeRO stages 1, 2 and 3 on dp 2 and 4, accumulation 1 and 4, with tp 2 and with pp 2 (and
#     stage 3 with interleaving, activation recomputation and tp 2 x pp 2 x dp 2; each stage
#     with the optimizer offloaded to the host): the losses;
#     stage 1's, 2's and 3's step-1 gradients (gathered from the owned blocks and slices) and
#     export_hf (gathered from the sharded parameters); the data-parallel bytes counted per step
#     (2Ψ at stages 1 and 2, 3Ψ at stage 3 and at stage 1 with reduce_scatter false).
# tp 4 pads the vocabulary of 256 to 512: two ranks hold padding only.
# Usage: layout_equivalence.sh TRIAD_LAUNCH TP_GRADS SOURCE_DIR WORK_DIR PYTHON
set -euo pipefail
LAUNCH=$1 GRADS=$2 SRC=$3 WORK=$4 PY=$5
# shellcheck source=equivalence_fixture.sh
source "$SRC/tests/dist/equivalence_fixture.sh"
# run NAME RANKS TP PP SP [extra --set ...]: 20 training steps, metrics in $WORK/NAME.
run() {
  local name=$1 n=$2 tp=$3 pp=$4 sp=$5
  shift 5
  OMP_NUM_THREADS=1 "$LAUNCH" --nproc-per-node "$n" "$CFG" "${common[@]}" \
    --set training.train_iters=20 --set parallel.tensor_model_parallel_size="$tp" \
    --set parallel.pipeline_model_parallel_size="$pp" \
    --set parallel.sequence_parallel="$sp" --set "output.dir=$WORK/$name" "$@" \
    > "$WORK/$name.log" 2>&1 || { echo "run $name failed:"; cat "$WORK/$name.log"; exit 1; }
  grep -q "layout: world $n = tp $tp x pp $pp x dp $((n / tp / pp));" "$WORK/$name.log" ||
    { echo "FAIL $name: no layout line saying tp $tp x pp $pp:"; cat "$WORK/$name.log"; exit 1; }
  if [ "$tp" -gt 1 ]; then
    # The traffic the engine counted equals Megatron's formula exactly.
    grep -Eq "traffic per step per rank: counted ([0-9]+) B .*formula \1 B" "$WORK/$name.log" ||
      { echo "FAIL $name: counted traffic differs from the formula:";
        grep traffic "$WORK/$name.log"; exit 1; }
  fi
}
# grads NAME RANKS TP PP SP [extra]: one step, whole gradients and an HF export in $WORK/NAME.
grads() {
  local name=$1 n=$2 tp=$3 pp=$4 sp=$5
  shift 5
  OMP_NUM_THREADS=1 "$LAUNCH" --nproc-per-node "$n" --exec "$GRADS" "$CFG" "$WORK/$name" \
    "${common[@]}" --set training.train_iters=1 --set parallel.tensor_model_parallel_size="$tp" \
    --set parallel.pipeline_model_parallel_size="$pp" \
    --set parallel.sequence_parallel="$sp" --set "output.export_hf=$WORK/$name/hf" \
    --set optimizer.lr=1e-7 --set optimizer.min_lr=0 "$@" \
    > "$WORK/$name.log" 2>&1 || { echo "grads $name failed:"; cat "$WORK/$name.log"; exit 1; }
}
run single 1 1 1 false
run tp2 2 2 1 false
run tp2sp 2 2 1 true
run tp4 4 4 1 false
run tp4sp 4 4 1 true
run tp2dp2sp 4 2 1 true
run pp2 2 1 2 false
run pp2gpipe 2 1 2 false --set pipeline=gpipe
run pp2uneven 2 1 2 false --set parallel.pipeline_partition=3,1
run pp4 4 1 4 false
run pp4gpipe 4 1 4 false --set pipeline=gpipe
run tp2pp2dp2sp 8 2 2 true
# parallel.tp_comm_overlap's ring (sequence parallelism) and a pipeline on a transport without
# tags (ucx's tags: false, as nccl: every message tag 0, in the order posted).
run tp2sp_ring 2 2 1 true --set parallel.tp_comm_overlap=true
run tp4sp_ring 4 4 1 true --set parallel.tp_comm_overlap=true
run pp2_untagged 2 1 2 false --set transport.tags=false
# ZeRO stage 1 (optimizer state partitioned over dp; gradients reduce-scattered to their owners,
# or with reduce_scatter false all-reduced in buckets): dp 2 and 4, accumulation 1 and 4, with
# tp 2 and with pp 2.
z1=(--set zero_optimization.stage=1)
run z1dp2 2 1 1 false "${z1[@]}"
run z1dp2ar 2 1 1 false "${z1[@]}" --set zero_optimization.reduce_scatter=false
run z1dp4 4 1 1 false "${z1[@]}" --set training.micro_batch_size=2
run z1dp2acc4 2 1 1 false "${z1[@]}" --set training.micro_batch_size=1
run z1tp2dp2 4 2 1 true "${z1[@]}"
run z1pp2dp2 4 1 2 false "${z1[@]}" --set training.micro_batch_size=2
# ZeRO stages 2 (gradients partitioned, reduce-scattered per layer and micro-batch) and 3
# (parameters partitioned, gathered per layer): the same matrix, and stage 3 with interleaved
# chunks, with activation recomputation and on tp 2 x pp 2 x dp 2.
for st in 2 3; do
  z=(--set zero_optimization.stage=$st)
  run z${st}dp2 2 1 1 false "${z[@]}"
  run z${st}dp4 4 1 1 false "${z[@]}" --set training.micro_batch_size=2
  run z${st}dp2acc4 2 1 1 false "${z[@]}" --set training.micro_batch_size=1
  run z${st}tp2dp2 4 2 1 true "${z[@]}"
  run z${st}pp2dp2 4 1 2 false "${z[@]}" --set training.micro_batch_size=2
done
z3=(--set zero_optimization.stage=3)
run z3pp2v2dp2 4 1 2 false "${z3[@]}" --set parallel.virtual_pipeline_model_parallel_size=2 \
  --set training.micro_batch_size=2
run z3dp2_ck 2 1 1 false "${z3[@]}" --set training.checkpoint_activations=true
run z3tp2pp2dp2sp 8 2 2 true "${z3[@]}" --set training.micro_batch_size=2
# Optimizer offload (the shard's master weights and moments stepped on the host) with each stage.
off=(--set zero_optimization.offload_optimizer.device=cpu)
run z1dp2off 2 1 1 false "${z1[@]}" "${off[@]}"
run z2dp2acc4off 2 1 1 false --set zero_optimization.stage=2 "${off[@]}" \
  --set training.micro_batch_size=1
run z3tp2dp2off 4 2 1 true "${z3[@]}" "${off[@]}"
# Activation recomputation under tp 2 with sequence parallelism (its traffic counted against
# the formula with the recomputed forward's boundaries) and under pp 2.
ck=(--set training.checkpoint_activations=true)
run tp2sp_ck 2 2 1 true "${ck[@]}"
run pp2_ck 2 1 2 false "${ck[@]}"
# Interleaved (2 model chunks per stage): m = 2, and m = 4 micro-batches of 2 (buffers reused).
vpp=(--set parallel.virtual_pipeline_model_parallel_size=2)
run pp2v2 2 1 2 false "${vpp[@]}"
run pp2v2m4 2 1 2 false "${vpp[@]}" --set training.micro_batch_size=2
run tp2pp2v2sp 4 2 2 true "${vpp[@]}"
# The chunks of a stage share its activation sets by buffer index: with each recomputation, and
# 3 chunks per stage (6 layers, against a 6-layer single process at the l8 runs' rate).
run pp2v2_ck 2 1 2 false "${vpp[@]}" "${ck[@]}"
run pp2v2m4_sel 2 1 2 false "${vpp[@]}" --set training.micro_batch_size=2 \
  --set training.recompute_granularity=selective
l6=(--set model.num_layers=6 --set optimizer.lr=1e-3 --set optimizer.min_lr=1e-4)
run single_l6 1 1 1 false "${l6[@]}"
run pp2v3m4_l6 2 1 2 false --set parallel.virtual_pipeline_model_parallel_size=3 "${l6[@]}" \
  --set training.micro_batch_size=2
# Interleaved pp 4 x 2 chunks needs 8 layers: against an 8-layer single process (at a lower
# learning rate: at 3e-3 this deeper model spikes at step 12, and after a spike float rounding
# that differs between layouts grows past 1e-5 within a few steps).
l8=(--set model.num_layers=8 --set optimizer.lr=1e-3 --set optimizer.min_lr=1e-4)
run single_l8 1 1 1 false "${l8[@]}"
run pp4v2_l8 4 1 4 false "${vpp[@]}" "${l8[@]}" --set training.micro_batch_size=2
run single_rope 1 1 1 false "${flash[@]}"
run tp2sp_rope 2 2 1 true "${flash[@]}"
run pp2_rope 2 1 2 false "${flash[@]}"
run pp2gpipe_rope 2 1 2 false "${flash[@]}" --set pipeline=gpipe
# Every schedule with every attention plugin: flash1 (learned positions, small tiles) too.
flash1=(--set attention.name=flash1 --set attention.block_q=16 --set attention.block_k=16)
run single_flash1 1 1 1 false "${flash1[@]}"
run pp2_flash1 2 1 2 false "${flash1[@]}"
run pp2gpipe_flash1 2 1 2 false "${flash1[@]}" --set pipeline=gpipe
run pp2v2_flash1 2 1 2 false "${flash1[@]}" "${vpp[@]}"
run pp2v2_rope 2 1 2 false "${flash[@]}" "${vpp[@]}"
# The zero-bubble schedule (zb-h1: each backward in its input and weight halves) alone on pp 2
# and 4, with tp 2 x dp 2 and sequence parallelism, ZeRO 1-3, both recomputations and rotary +
# flash2.
zb=(--set pipeline=zb-h1)
run pp2zb 2 1 2 false "${zb[@]}"
run pp4zb 4 1 4 false "${zb[@]}"
run tp2pp2dp2zbsp 8 2 2 true "${zb[@]}"
for st in 1 2 3; do
  run z${st}pp2dp2zb 4 1 2 false "${zb[@]}" --set zero_optimization.stage=$st \
    --set training.micro_batch_size=2
done
run pp2zb_ck 2 1 2 false "${zb[@]}" "${ck[@]}"
run pp2zb_sel 2 1 2 false "${zb[@]}" --set training.recompute_granularity=selective
run pp2zb_rope 2 1 2 false "${zb[@]}" "${flash[@]}"
# The ZeRO runs' logs: model-state bytes per rank equal the ZeRO paper's formula for the stage,
# and at one micro-batch per step the data-parallel bytes counted equal the paper's 2Ψ (3Ψ at
# stage 3); stage 1 with reduce_scatter false all-reduces and then all-gathers, 3Ψ.
for name in z1dp2 z1dp2ar z1dp4 z2dp2 z2dp4 z2tp2dp2 z3dp2 z3dp4 z3tp2dp2; do
  line=$(grep -o "model states [0-9.]* MiB per rank.*" "$WORK/$name.log") ||
    { echo "FAIL $name: no model-state line"; exit 1; }
  # Within 2% (the layers' slices round to whole elements).
  [[ $line =~ \(([0-9]+)\ B\ counted,\ ([0-9]+)\ B\ by ]] &&
    awk -v a="${BASH_REMATCH[1]}" -v b="${BASH_REMATCH[2]}" \
      'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.02 * b) }' ||
    { echo "FAIL $name: model states differ from the ZeRO paper's formula: $line"; exit 1; }
  traffic=$(grep -o "data-parallel traffic per step per rank: .*" "$WORK/$name.log")
  [[ $traffic =~ counted\ ([0-9]+)\ B\ \(([0-9.]+)Ψ.*\ =\ ([0-9]+)\ B ]] ||
    { echo "FAIL $name: no traffic line: $traffic"; exit 1; }
  case $name in
    z1dp2ar) want=3.00 ;;
    z3*) want=3.00 ;;
    *) want=2.00 ;;
  esac
  [ "${BASH_REMATCH[2]}" = "$want" ] ||
    { echo "FAIL $name: data-parallel traffic ${BASH_REMATCH[2]}Ψ, expected ${want}Ψ"; exit 1; }
  echo "$name: $line; ${BASH_REMATCH[2]}Ψ per step"
done
grads g_single 1 1 1 false
grads g_tp2sp 2 2 1 true
grads g_tp4 4 4 1 false
grads g_tp2pp2 4 2 2 false
grads g_pp2zb 2 1 2 false "${zb[@]}"
grads g_z1pp2dp2 4 1 2 false --set zero_optimization.stage=1 --set training.micro_batch_size=2
grads g_z2dp2 2 1 1 false --set zero_optimization.stage=2
grads g_z3tp2dp2 4 2 1 true --set zero_optimization.stage=3
# From the single process's one-step export, tp 2 and pp 2 start where the single process does.
from_hf=(--set "output.init_from_hf=$WORK/g_single/hf" --set training.train_iters=1)
run from_hf_single 1 1 1 false "${from_hf[@]}"
run from_hf_tp2 2 2 1 true "${from_hf[@]}"
run from_hf_pp2 2 1 2 false "${from_hf[@]}"

"$PY" - "$WORK" "$SRC/tests/reference" "$SRC/tests/dist" <<'PYEOF'
import json, sys
import numpy as np
work, ref, here = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path[:0] = [ref, here]
from gpt_torch import read_safetensors
from equivalence import compare_files, relative_to_largest

fails = 0
def fail(msg):
    global fails
    fails += 1
    print("FAIL", msg)

def metrics(name):
    rows = [json.loads(l) for l in open(f"{work}/{name}/metrics.jsonl")]
    return rows

checks = 0
for base, others in (("single", ["tp2", "tp2sp", "tp4", "tp4sp", "tp2dp2sp", "pp2", "pp2gpipe",
                                 "pp2uneven", "pp4", "pp4gpipe", "tp2pp2dp2sp", "tp2sp_ring", "tp4sp_ring", "pp2_untagged",
                                 "pp2v2", "pp2v2m4",
                                 "tp2pp2v2sp", "pp2v2_ck", "pp2v2m4_sel", "z1dp2", "z1dp2ar", "z1dp4", "z1dp2acc4", "z1tp2dp2",
                                 "z1pp2dp2", "tp2sp_ck", "pp2_ck",
                                 *[f"z{st}{l}" for st in (2, 3)
                                   for l in ("dp2", "dp4", "dp2acc4", "tp2dp2", "pp2dp2")],
                                 "z3pp2v2dp2", "z3dp2_ck", "z3tp2pp2dp2sp", "z1dp2off",
                                 "z2dp2acc4off", "z3tp2dp2off", "pp2zb", "pp4zb",
                                 "tp2pp2dp2zbsp", "z1pp2dp2zb", "z2pp2dp2zb", "z3pp2dp2zb",
                                 "pp2zb_ck", "pp2zb_sel"]),
                     ("single_rope", ["tp2sp_rope", "pp2_rope", "pp2gpipe_rope", "pp2v2_rope",
                                      "pp2zb_rope"]),
                     ("single_flash1", ["pp2_flash1", "pp2gpipe_flash1", "pp2v2_flash1"]),
                     ("single_l8", ["pp4v2_l8"]), ("single_l6", ["pp2v3m4_l6"])):
    a = metrics(base)
    if [r["step"] for r in a] != list(range(1, 21)):
        fail(f"{base}: steps {[r['step'] for r in a]}")
    for o in others:
        b = metrics(o)
        if len(b) != len(a):
            fail(f"{o}: {len(b)} steps, expected {len(a)}")
            continue
        # The loss to 1e-5 (they agree to ~1e-6). The gradient norm before clipping is the more
        # sensitive number: this run's step 11 spikes (norm ~46) and float rounding that differs
        # between layouts grows to ~5e-5 in the norms of the steps after it, so it gets 1e-4.
        worst = {"loss": 0.0, "grad_norm": 0.0}
        for x, y in zip(a, b):
            for key, limit in (("loss", 1e-5), ("grad_norm", 1e-4)):
                rel = abs(x[key] - y[key]) / abs(x[key])
                worst[key] = max(worst[key], rel)
                checks += 1
                if not rel <= limit:
                    fail(f"{o} step {x['step']}: {key} {y[key]:.8f} vs {base} {x[key]:.8f} (rel {rel:.2e})")
        print(f"{o:12} vs {base:12}: 20 steps, worst relative difference: loss {worst['loss']:.2e}, "
              f"grad norm {worst['grad_norm']:.2e}")

# Pipeline efficiency over the passes (the schedule's span) is at least the whole step's and at most
# 1 (the step also holds the reductions and the optimizer; start times differ by microseconds);
# each stage's compute time (stage_compute_ms) is positive, no longer than the step, and they sum
# to the efficiency's numerator (to the float pairs' rounding of the all-reduced sum).
for o in ("pp2", "pp4", "pp2gpipe", "pp2v2", "pp2zb", "pp4zb", "tp2pp2dp2sp"):
    stages = 4 if o.startswith("pp4") else 2
    for r in metrics(o):
        e, pe = r["pipeline_efficiency"], r["pipeline_pass_efficiency"]
        busy, ms = r["stage_compute_ms"], r["ms_per_step"]
        checks += 1
        if not (0 < e <= pe * 1.01 and pe <= 1):
            fail(f"{o} step {r['step']}: pipeline efficiency {e} over the step, {pe} over the passes")
        if (len(busy) != stages or not all(0 < b <= ms for b in busy)
                or abs(sum(busy) / (stages * ms) - e) > 1e-6 * e):
            fail(f"{o} step {r['step']}: stage_compute_ms {busy} in a {ms} ms step, efficiency {e}")

# Step 1's whole gradients, relative to each tensor's largest element.
g_runs = ("g_tp2sp", "g_tp4", "g_tp2pp2", "g_pp2zb", "g_z1pp2dp2", "g_z2dp2", "g_z3tp2dp2")
checks += compare_files(read_safetensors, work, "gradients", "g_single", "grads.safetensors",
                        g_runs, relative_to_largest, 1e-5, fail)
# export_hf after one step (padding dropped), absolute.
checks += compare_files(read_safetensors, work, "export_hf", "g_single", "hf/model.safetensors",
                        g_runs, lambda x, r: float(np.abs(x - r).max()), 1e-6, fail)

# init_from_hf into tp 2 and pp 2 gives the single-process step-1 loss.
a = metrics("from_hf_single")[0]["loss"]
for o in ("from_hf_tp2", "from_hf_pp2"):
    b = metrics(o)[0]["loss"]
    checks += 1
    if not abs(a - b) <= 1e-5 * abs(a):
        fail(f"init_from_hf: {o} step-1 loss {b:.8f} vs single {a:.8f}")
    print(f"init_from_hf step-1 loss: single {a:.7f}, {o} {b:.7f}")
print(f"{checks - fails} passed, {fails} failed")
sys.exit(1 if fails else 0)
PYEOF
